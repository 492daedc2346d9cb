use savepoint_core::ids::ThreadId;
use savepoint_core::journal::Entry;
use savepoint_store::{BlockKind, ChildLink, ParentCancel, RunHeader, RunStatus};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::operate::{Operated, Restarted};
use super::workload;
use super::world::{dump_namespace, Kind, World, SECRET, SERVER_BASE_US};

/// Calls side by side are journaled in the order they are written: the journal of a run of
/// such a workflow starts with a prefix of that order, whatever crashed and whenever.
pub(super) fn written_order(t: &ThreadId, h: &RunHeader, journal: &[Entry], bad: &mut Vec<String>) {
    let Some((_, order)) = workload::WRITTEN_ORDER.iter().find(|(w, _)| *w == h.workflow) else {
        return;
    };
    let names: Vec<&str> = journal.iter().take(order.len()).map(|e| e.name.as_str()).collect();
    if names[..] != order[..names.len()] {
        bad.push(format!(
            "run {t} ({}): its calls side by side were journaled as {names:?}, not in the order written {order:?}",
            h.workflow
        ));
    }
}

/// The scanner replicas' registrations: a crashed replica's expired, one that left is gone,
/// and each running replica is registered (the live set is what they split the partitions by).
pub(super) async fn scanner_checks(w: &World, scanners: &[(JoinHandle<()>, CancellationToken)], bad: &mut Vec<String>) {
    w.trace.count("scanner.split");
    let running = scanners
        .iter()
        .filter(|(j, own)| !j.is_finished() && !own.is_cancelled())
        .count();
    let key = w.store.keys().schedulers();
    let now_ms = w.server_ms();
    let live: Vec<(String, f64)> = w
        .store
        .query(redis::cmd("ZRANGE").arg(&key).arg(0).arg(-1).arg("WITHSCORES"))
        .await
        .unwrap_or_default();
    let unexpired = live.iter().filter(|(_, until)| *until > now_ms as f64).count();
    if unexpired != running {
        bad.push(format!(
            "{running} scanner replica(s) run, but {unexpired} registration(s) are live (at {now_ms} ms): {live:?}"
        ));
    }
}

/// Invariants of the operator's actions: a resolved run went on and ended; a fork ended
/// completed, replays to its output, and performed again none of the effects applied when it
/// was made (it named none; a key of its own, new, is performed once like any other).
pub(super) async fn operator_checks(
    w: &World,
    op: &Operated,
    registry: &savepoint::workflow::Registry,
    provider: &workload::Provider,
    bad: &mut Vec<String>,
) {
    resolved_checks(w, op, bad).await;
    misshapen_checks(w, op, bad).await;
    retried_checks(w, op, bad).await;
    let now = provider.applications();
    restart_checks(w, op, registry, &now, bad).await;
    fork_checks(w, op, registry, &now, bad).await;
}

/// The effects the provider applied: each key with the fencing tokens it applied it under.
type Applied = BTreeMap<String, Vec<u64>>;

/// A resolved run went on past the effect it was resolved on.
async fn resolved_checks(w: &World, op: &Operated, bad: &mut Vec<String>) {
    for (t, key, applied) in &op.resolved {
        w.trace.count(if *applied {
            "operator.resolved.applied"
        } else {
            "operator.resolved.not_applied"
        });
        match w.read(t).await {
            Some((h, _)) if h.status.is_final() || h.blocked_effect.as_deref() != Some(key.as_str()) => {}
            Some((h, _)) => bad.push(format!(
                "run {t} resolved on {key} is {} on it again: {:?}",
                h.status.as_str(),
                h.reason
            )),
            None => bad.push(format!("resolved run {t} was lost")),
        }
    }
}

/// A result that does not decode is never journaled: the run took it back and blocked on
/// the key again, and the operator's second answer (the right shape) settled it; or its
/// deadline had passed, and it failed first. (Invariant 4 replays a completed run: a
/// journaled receipt of the wrong shape would not decode.)
async fn misshapen_checks(w: &World, op: &Operated, bad: &mut Vec<String>) {
    for (t, key) in &op.misshapen {
        w.trace.count("operator.resolved.misshapen");
        let again = op.resolved.iter().any(|(r, k, applied)| r == t && k == key && *applied);
        let h = w.read(t).await.map(|(h, _)| h);
        let gave_up = h
            .as_ref()
            .is_some_and(|h| h.status.is_final() && h.status != RunStatus::Completed);
        if !again && !gave_up {
            let now = h.map(|h| (h.status, h.blocked_effect, h.reason));
            bad.push(format!(
                "run {t} resolved on {key} with a result that does not decode did not block on it again: {now:?}"
            ));
        }
    }
}

/// A retried poison run went on (no fault is left to crash it) and ended, or waits for an
/// effect's operator.
async fn retried_checks(w: &World, op: &Operated, bad: &mut Vec<String>) {
    for t in &op.retried {
        w.trace.count("operator.retried");
        match w.read(t).await {
            Some((h, _)) if h.status.is_final() || h.blocked_effect.is_some() => {}
            Some((h, _)) => bad.push(format!(
                "retried run {t} did not go on: {} ({:?})",
                h.status.as_str(),
                h.reason
            )),
            None => bad.push(format!("retried run {t} was lost")),
        }
    }
}

/// A restarted run ended (replaying to its output if it completed) and performed again
/// exactly the effects the operator named.
async fn restart_checks(
    w: &World,
    op: &Operated,
    registry: &savepoint::workflow::Registry,
    now: &Applied,
    bad: &mut Vec<String>,
) {
    for Restarted {
        thread: t,
        named,
        before,
        ..
    } in &op.restarts
    {
        w.trace.count(if named.is_empty() {
            "operator.restarted"
        } else {
            "operator.restarted.rerun"
        });
        let completed = match w.read(t).await {
            Some((h, _)) if h.status == RunStatus::Completed => {
                match savepoint_worker::replay::replay(&w.store, registry, t).await {
                    Ok(savepoint_worker::replay::ReplayReport::Finished(Ok(out)))
                        if Some(&out) == h.output.as_ref() => {}
                    other => bad.push(format!("restarted {t}: replay did not reproduce it: {other:?}")),
                }
                true
            }
            // An effect of the re-run may be cut off by a slow provider (in doubt), or its
            // new call refused as stale: it ends, but need not complete.
            Some((h, _)) if h.status.is_final() || h.status == RunStatus::Blocked => false,
            Some((h, _)) => {
                bad.push(format!("restarted {t} never ended: {}", h.status.as_str()));
                false
            }
            None => {
                bad.push(format!("restarted {t} was lost"));
                false
            }
        };
        // Performed again exactly what was named (once, when the run completed), and no
        // other effect applied before the restart.
        for (key, fences) in now {
            let was = before.get(key).map_or(0, Vec::len);
            let again = fences.len().saturating_sub(was);
            let asked = usize::from(named.contains(key));
            if was > 0 && (again > asked || (completed && again < asked)) {
                bad.push(format!(
                    "restarted {t} performed {key} {again} more time(s); the operator named it {asked} time(s)"
                ));
            }
        }
    }
}

/// A fork completed, replays to its output, and performed again none of the effects applied
/// when it was made.
async fn fork_checks(
    w: &World,
    op: &Operated,
    registry: &savepoint::workflow::Registry,
    now: &Applied,
    bad: &mut Vec<String>,
) {
    for (source, fork, before) in &op.forks {
        w.trace.count("operator.forked");
        match w.read(fork).await {
            Some((h, _)) if h.status == RunStatus::Completed => {
                match savepoint_worker::replay::replay(&w.store, registry, fork).await {
                    Ok(savepoint_worker::replay::ReplayReport::Finished(Ok(out)))
                        if Some(&out) == h.output.as_ref() => {}
                    other => bad.push(format!("fork {fork}: replay did not reproduce it: {other:?}")),
                }
            }
            Some((h, _)) => bad.push(format!(
                "fork {fork} of {source} ended {}: {:?}",
                h.status.as_str(),
                h.error.as_ref().or(h.reason.as_ref())
            )),
            None => bad.push(format!("fork {fork} of {source} was lost")),
        }
        for (key, fences) in now {
            let was = before.get(key).map_or(0, Vec::len) + op.reruns_of(key);
            if was > 0 && fences.len() > was {
                bad.push(format!(
                    "fork {fork} of {source} performed {key} again though the operator named nothing ({} → {})",
                    was,
                    fences.len()
                ));
            }
        }
    }
}

/// The invariants of the features beyond effects and runs (module doc, 1 and 6-8).
pub(super) async fn feature_checks(
    w: &World,
    runs: &[(ThreadId, Value, u64)],
    kinds: &[Kind],
    cancelled_at: &[Option<u64>],
    operated: &Operated,
    bad: &mut Vec<String>,
) {
    block_effect_checks(w, operated, bad);
    flow_checks(w, bad).await;
    // 7. Children.
    for (i, (t, body, _)) in runs.iter().enumerate() {
        if kinds[i] != Kind::Parent {
            continue;
        }
        let Some((h, journal)) = w.read(t).await else { continue };
        for link in &h.children {
            child_checks(w, t, link, cancelled_at[i], bad).await;
        }
        child_word_checks(w, t, &h, bad).await;
        child_output_checks(w, (t, body), &h, &journal, bad).await;
    }
    sealed_checks(w, bad).await;
    migration_checks(w, runs, kinds, bad).await;
    pace_checks(w, runs, kinds, bad).await;
}

/// Invariant 17, parked bodies: no `pace` run blocks, and a completed one returns what its input computes
/// ([`workload::pace_output`]), whichever of its slices went on from a parked body and
/// whichever replayed, and its journal is its steps and sleeps in order, each once.
async fn pace_checks(w: &World, runs: &[(ThreadId, Value, u64)], kinds: &[Kind], bad: &mut Vec<String>) {
    for (i, (t, body, _)) in runs.iter().enumerate() {
        if kinds[i] != Kind::Pace {
            continue;
        }
        let Some((h, journal)) = w.read(t).await else { continue };
        // (No effect, no wait, no planted bug: nothing a pace run does may block it.)
        if h.status == RunStatus::Blocked {
            bad.push(format!("run {t} (pace) blocked: {}", h.reason.as_deref().unwrap_or("")));
        }
        if h.status != RunStatus::Completed {
            continue;
        }
        let (id, steps) = (
            body["input"]["id"].as_u64().unwrap_or(0),
            body["input"]["steps"].as_u64().unwrap_or(0),
        );
        let want = workload::pace_output(id, steps);
        let got = h.output.as_ref().and_then(|o| o["acc"].as_u64());
        if got != Some(want) {
            bad.push(format!(
                "run {t} (pace, {steps} steps) returned {got:?}, its input computes {want}"
            ));
        }
        let names: Vec<&str> = journal.iter().map(|e| e.name.as_str()).collect();
        let expected: Vec<String> = (0..steps).flat_map(|i| [format!("s{i}"), format!("z{i}")]).collect();
        if names != expected.iter().map(String::as_str).collect::<Vec<_>>() {
            bad.push(format!(
                "run {t} (pace): journal {names:?}, expected its steps and sleeps in order"
            ));
        }
    }
}

/// Invariant 16, values that outlive their code: at the key rotation the workers restart on the
/// second build, one first and the others a quarter of the chaos later (a rolling deploy), whose `approve`
/// records its `ask` step as a versioned `Question` (2) and upgrades the text the first build
/// recorded (1). No `approve` run blocks on a value (a migration refused, a value that does
/// not decode, or, in the rolling window, a version-2 value met by a worker of the first build,
/// which must give the run back instead); every `ask` entry is at version 1 or
/// 2; a completed run's output holds the question its id asks, whichever build recorded it and
/// whichever finished it (and invariant 4 replays every completed run on the second build,
/// through the migration, to its recorded output).
async fn migration_checks(w: &World, runs: &[(ThreadId, Value, u64)], kinds: &[Kind], bad: &mut Vec<String>) {
    for (i, (t, body, _)) in runs.iter().enumerate() {
        if kinds[i] != Kind::Approve {
            continue;
        }
        let Some((h, journal)) = w.read(t).await else { continue };
        if matches!(h.block_kind, Some(BlockKind::Migration | BlockKind::Undecodable)) {
            bad.push(format!("approve run {t} blocked on a value: {:?}", h.reason));
        }
        // Given back by a worker of the first build during the rolling deploy (it does not
        // know the second build's version of `Question`), never run by it.
        let events = w.store.events(t, 10_000).await.unwrap_or_default();
        if events
            .iter()
            .any(|e| e.typ == "unserved" && e.detail.contains("run feature value:"))
        {
            w.trace.count("approve.given_back_by_first_build");
        }
        let Some(ask) = journal.first() else { continue };
        match ask.tv {
            None => w.trace.count("approve.ask.recorded_v1"),
            Some(2) => w.trace.count("approve.ask.recorded_v2"),
            Some(v) => bad.push(format!("approve run {t}: `ask` recorded at version {v}")),
        }
        let asked = format!("approve order {}?", body["input"]["id"].as_u64().unwrap_or(0));
        if let Some(out) = h.output.as_ref().filter(|_| h.status == RunStatus::Completed) {
            if out["asked"] != json!(asked) {
                bad.push(format!(
                    "approve run {t} completed asking {}, not {asked:?}",
                    out["asked"]
                ));
            }
            if ask.tv.is_none() && w.deployed {
                w.trace.count("approve.completed_with_v1_value");
            }
        }
    }
}

/// Invariant 16 for a child's output: the second build's `kid` returns a versioned `KidOut`
/// (`n` renamed `count`), and a parent reads its awaited child's output from the version the
/// child's build wrote it at, whichever build each ran on. No parent blocks on a value (in
/// the rolling window a first-build worker that meets a version-2 output gives the parent
/// back); the child's entry is at version 1 or 2; a completed parent's `first` is the child's
/// output in the first build's shape, `{n: 2 * id, gift}`.
async fn child_output_checks(
    w: &World,
    (t, body): (&ThreadId, &Value),
    h: &RunHeader,
    journal: &[Entry],
    bad: &mut Vec<String>,
) {
    if matches!(h.block_kind, Some(BlockKind::Migration | BlockKind::Undecodable)) {
        bad.push(format!("parent run {t} blocked on a value: {:?}", h.reason));
    }
    let events = w.store.events(t, 10_000).await.unwrap_or_default();
    if events.iter().any(|e| e.typ == "given_back") {
        w.trace.count("parent.given_back_by_first_build.in_slice");
    } else if events
        .iter()
        .any(|e| e.typ == "unserved" && e.detail.contains("run feature value:"))
    {
        w.trace.count("parent.given_back_by_first_build.at_claim");
    }
    if let Some(e) = journal.iter().find(|e| e.name == "kid-a") {
        match (e.tv, &e.outcome) {
            (_, savepoint_core::journal::Outcome::Err(_)) => {}
            (None, _) => w.trace.count("parent.kid_output.recorded_v1"),
            (Some(2), _) => w.trace.count("parent.kid_output.recorded_v2"),
            (Some(v), _) => bad.push(format!("parent run {t}: kid-a's output recorded at version {v}")),
        }
    }
    let Some(out) = h.output.as_ref().filter(|_| h.status == RunStatus::Completed) else {
        return;
    };
    let id = body["input"]["id"].as_u64().unwrap_or(0);
    let first = &out["first"];
    let keys: Vec<&String> = first.as_object().map(|o| o.keys().collect()).unwrap_or_default();
    if first["n"] != json!(id * 2) || keys != ["gift", "n"] {
        bad.push(format!(
            "parent run {t} (id {id}) completed with first = {first}, not {{n: {}, gift}}",
            id * 2
        ));
    }
}

/// Invariant 1: a block effect's function is called at most once, and once more after the
/// operator resolved it "not applied" (a call cut off before it reached the provider).
fn block_effect_checks(w: &World, operated: &Operated, bad: &mut Vec<String>) {
    let provider = &w.provider;
    for (key, n) in provider.calls() {
        let resolved = (operated.resolved.iter())
            .filter(|(_, k, applied)| *k == key && !applied)
            .count() as u32;
        let resolved = resolved + operated.reruns_of(&key) as u32;
        if n > 1 + resolved && workload::BLOCK_KEYS.iter().any(|p| key.starts_with(p)) {
            bad.push(format!("block effect {key} was called {n} times"));
        }
    }
}

/// Invariant 6, flow control: never over the limit; nothing held or waiting once every run
/// ended (after the slots of slices that died expire).
async fn flow_checks(w: &World, bad: &mut Vec<String>) {
    let provider = &w.provider;
    bad.extend(provider.over_limit());
    for (k, n) in provider.most_inside() {
        let short = k.rsplit('-').next().unwrap_or_default();
        w.trace.count(&format!("flow.most_inside.{short}.{n}"));
    }
    let cfg = w.store.config();
    tokio::time::sleep(cfg.lease + cfg.grace + Duration::from_millis(100)).await;
    let now = w.server_ms();
    for (key, _) in workload::FLOW_KEYS {
        flow_key_check(w, key, now, bad).await;
    }
}

/// One flow key after every run ended: no slot held, no live run in line.
async fn flow_key_check(w: &World, key: &str, now: u64, bad: &mut Vec<String>) {
    let fk = format!("metered:{SECRET}-{key}");
    let keys = w.store.keys();
    let Ok(name) = w.store.flow_name(&fk).await else {
        bad.push(format!("flow key {fk}: its Redis name could not be derived"));
        return;
    };
    let fk = name.into_owned();
    let held: Vec<String> = w
        .store
        .query(
            redis::cmd("ZRANGEBYSCORE")
                .arg(keys.flow_slots(&fk))
                .arg(now)
                .arg("+inf"),
        )
        .await
        .unwrap_or_default();
    let waiting: Vec<String> = w
        .store
        .query(redis::cmd("ZRANGE").arg(keys.flow_wait(&fk)).arg(0).arg(-1))
        .await
        .unwrap_or_default();
    // (A run that ended while a stale slice of it queued again is dropped from the line
    // by the next acquire after the stale interval: only live runs in line count.)
    let mut live = Vec::new();
    for t in waiting {
        let Ok(id) = ThreadId::new(t.clone()) else { continue };
        if w.read(&id).await.is_some_and(|(h, _)| !h.status.is_final()) {
            live.push(t);
        }
    }
    let waiting = live;
    if !held.is_empty() || !waiting.is_empty() {
        bad.push(format!(
            "flow key {fk}: slots still held by {held:?}, in line {waiting:?}, after every run ended"
        ));
    }
}

/// Invariant 7 for one child of parent `t`: it ended (or is blocked on an effect in doubt),
/// and if the parent was cancelled at `cancelled_at`, it ended cancelled or started no slice
/// after the cancel.
async fn child_checks(w: &World, t: &ThreadId, link: &ChildLink, cancelled_at: Option<u64>, bad: &mut Vec<String>) {
    let child = &link.thread;
    let Some((c, _)) = w.read(child).await else {
        if cancelled_at.is_none() {
            bad.push(format!("child {child} of {t} was linked but never created"));
        }
        return;
    };
    w.trace.count(&format!("child.end.{}", c.status.as_str()));
    if !c.status.is_final() && c.status != RunStatus::Blocked {
        bad.push(format!(
            "child {child} of {t} never ended: {}: {}",
            c.status.as_str(),
            w.holdings(child).await
        ));
    }
    if c.status == RunStatus::Blocked && c.block_kind != Some(BlockKind::InDoubt) {
        bad.push(format!(
            "child {child} blocked for a reason the workload cannot cause: {:?}",
            c.reason
        ));
    }
    // A child reached by its parent's cancel ends cancelled; one the cascade missed
    // (a write of it failed) may finish the slice under way, but starts none after
    // the cancel: it checks its parent at each claim.
    if let Some(at) = cancelled_at {
        let before = c.finished_at.is_some_and(|f| f <= at);
        if c.status != RunStatus::Cancelled && !before && link.on_parent_cancel == ParentCancel::Cancel {
            let events = w.store.events(child, 10_000).await.unwrap_or_default();
            let late: Vec<u64> = events
                .iter()
                .filter(|e| (e.typ == "claimed" || e.typ == "takeover") && e.at > at)
                .map(|e| e.at)
                .collect();
            w.trace.count("child.finished_slice_after_cancel");
            if !late.is_empty() {
                bad.push(format!(
                    "child {child} of {t} (cancelled at {at}) ended {} at {:?} after slices claimed at {late:?}",
                    c.status.as_str(),
                    c.finished_at
                ));
            }
        }
    }
}

/// Invariant 7 for parent `t`: it holds a child's word only for a call not yet journaled,
/// never more words than children, and an ended parent's signals expire with it.
async fn child_word_checks(w: &World, t: &ThreadId, h: &RunHeader, bad: &mut Vec<String>) {
    let k = w.store.keys().run(t);
    let fields: Vec<String> = w
        .store
        .query(redis::cmd("HKEYS").arg(&k.signals))
        .await
        .unwrap_or_default();
    // A child's word is kept only for a call not yet journaled (its one reader); the
    // signals hash of an ended run expires with it.
    let run_fields: Vec<String> = w.store.query(redis::cmd("HKEYS").arg(&k.run)).await.unwrap_or_default();
    let words: Vec<&String> = fields
        .iter()
        .filter(|f| f.starts_with("s:child:"))
        .filter(|f| {
            let index = f.trim_start_matches("s:child:").split(':').next().unwrap_or_default();
            run_fields.iter().any(|r| *r == format!("j:{index}"))
        })
        .collect();
    if !words.is_empty() {
        bad.push(format!(
            "run {t} ({}) holds child words for calls it journaled: {words:?}",
            h.status.as_str()
        ));
    }
    let held = fields.iter().filter(|f| f.starts_with("s:child:")).count();
    if held > h.children.len() {
        bad.push(format!(
            "run {t} holds {held} child words for {} children",
            h.children.len()
        ));
    }
    if h.status.is_final() && !fields.is_empty() {
        let ttl: i64 = w.store.query(redis::cmd("PTTL").arg(&k.signals)).await.unwrap_or(0);
        if ttl < 0 {
            bad.push(format!(
                "run {t} ended ({}) but its signals hash never expires",
                h.status.as_str()
            ));
        }
    }
}

/// Invariant 8, sealed payloads: no plaintext marker anywhere in the namespace.
async fn sealed_checks(w: &World, bad: &mut Vec<String>) {
    let dump = dump_namespace(&w.store).await;
    let mut leaks: BTreeMap<String, usize> = BTreeMap::new();
    for (k, v) in &dump {
        if k.contains(SECRET) || v.windows(SECRET.len()).any(|x| x == SECRET.as_bytes()) {
            *leaks.entry(k.clone()).or_default() += 1;
        }
    }
    for (k, n) in leaks {
        bad.push(format!("{n} plaintext value(s) of an input in (or as the name of) {k}"));
    }
    w.trace.count("sealed.values_dumped");
}

/// How long after the heal the fleet is quiet (stalls begun before it have ended, leases of
/// crashed workers expired and their runs handed on): a deadline that passes later is met
/// within [`DEADLINE_SLACK_MS`].
pub(super) const QUIET_AFTER_HEAL_MS: u64 = 8000;

/// How late a run may end after its deadline on a quiet fleet: a sleeping or waiting run is
/// due at its deadline, found within a scan interval and failed by the claim; a call in flight
/// is dropped at once.
pub(super) const DEADLINE_SLACK_MS: u64 = 1000;

/// Invariant 11, timeouts: no function of a run is entered at or after its deadline (as the
/// provider saw it); a run fails as timed out only with a deadline and never before it; on a
/// quiet fleet a run ends within the slack of its deadline (unless it is blocked on an effect
/// in doubt: blocked runs wait for an operator).
pub(super) async fn deadline_checks(
    w: &World,
    runs: &[(ThreadId, Value, u64)],
    healed_at: u64,
    operated: &Operated,
    bad: &mut Vec<String>,
) {
    let base = SERVER_BASE_US / 1000;
    let entered = w.provider.entered();
    let quiet_from = base + healed_at + QUIET_AFTER_HEAL_MS;
    for (t, _, _) in runs {
        let Some((h, _)) = w.read(t).await else { continue };
        let timed_out = h.status == RunStatus::Failed
            && (h.error.as_deref()).is_some_and(|r| r.starts_with("timed out: the run's deadline"));
        let Some(deadline) = h.deadline else {
            if timed_out {
                bad.push(format!(
                    "run {t} has no deadline but failed as timed out: {:?}",
                    h.error
                ));
            }
            continue;
        };
        if timed_out {
            w.trace.count("deadline.timed_out");
        }
        w.trace.count(&format!("deadline.end.{}", h.status.as_str()));
        for (run, what, at) in entered.iter().filter(|(run, _, _)| run == t.as_str()) {
            if base + at >= deadline {
                bad.push(format!(
                    "run {run}: {what} entered at {} ms, {} ms after the run's deadline (or at it)",
                    base + at,
                    base + at - deadline
                ));
            }
        }
        let finished = h.finished_at.unwrap_or(u64::MAX);
        if timed_out && finished < deadline {
            bad.push(format!(
                "run {t} failed as timed out at {finished}, before its deadline {deadline}"
            ));
        }
        // (A blocked run waits for its operator, whenever that comes.)
        let operated_on = operated.resolved.iter().any(|(r, _, _)| r == t)
            || operated.misshapen.iter().any(|(r, _)| r == t)
            || operated.retried.contains(t);
        if deadline >= quiet_from && h.status != RunStatus::Blocked && !operated_on {
            w.trace.count("deadline.after_quiet");
            if finished > deadline + DEADLINE_SLACK_MS {
                bad.push(format!(
                    "run {t} ended {} {} ms after its deadline {deadline} on a quiet fleet: {:?}",
                    h.status.as_str(),
                    finished.saturating_sub(deadline),
                    h.error.as_ref().or(h.reason.as_ref())
                ));
            }
        }
    }
}
