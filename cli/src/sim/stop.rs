//! Stopped past every TTL (invariants 19 and 20): the clock jumps while runs are stopped.
//!
//! 19. A run whose worker died right after its first effect was marked done (before the
//!     journal entry; `effect.after_done=abort@1`) is paused; another run waits on a human.
//!     The clock jumps past the effect TTL (31 days). Unpaused and answered, both complete,
//!     and the provider was called once for each effect key: the proof that an effect
//!     happened lives as long as its run may replay it.
//! 20. Then the clock jumps past the retention and the effect TTL: no key of a run that ended
//!     is left (runs that are blocked, and the fleet's own keys, stay).

use axum::http::Method;
use savepoint_core::ids::ThreadId;
use savepoint_store::RunStatus;
use serde_json::{json, Value};
use std::time::Duration;

use super::workload::Build;
use super::world::{dump_namespace, World};

const DAY: Duration = Duration::from_secs(24 * 3600);

/// The long-stop phase (after the busy-worker phase; faults are off).
pub(super) async fn long_stop(w: &mut World, bad: &mut Vec<String>) {
    let (Ok(crashed), Ok(asked)) = (ThreadId::new("stop-crashed"), ThreadId::new("stop-asked")) else {
        return;
    };
    if stop_two_runs(w, &crashed, &asked, bad).await {
        w.jump(Duration::from_secs(w.cfg.effect_ttl_secs) + DAY).await;
        go_on(w, &crashed, &asked, bad).await;
    }
}

/// Stops `crashed` (its worker killed right after its first effect was marked done, then
/// paused) and `asked` (waiting on a human); true once both are stopped.
async fn stop_two_runs(w: &mut World, crashed: &ThreadId, asked: &ThreadId, bad: &mut Vec<String>) -> bool {
    let n = w.workers.len();
    for i in 0..n {
        w.crash_worker(i, 0);
    }
    w.start_worker_with(0, "effect.after_done=abort@1");
    start(w, crashed, bad).await;
    if !until(w, 30, || async {
        w.workers[0].as_ref().is_some_and(|k| k.crash.is_cancelled())
    })
    .await
    {
        bad.push("stop: the worker never reached effect.after_done".into());
        return false;
    }
    w.trace
        .line(w.now(), "stop: w0 died right after the effect was marked done".into());
    post(
        w,
        &format!("/v1/runs/{crashed}/pause"),
        json!({"note": "long stop"}),
        bad,
    )
    .await;
    for i in 0..n {
        w.start_worker(i);
    }
    start(w, asked, bad).await;
    let stopped = until(w, 60, || async {
        status(w, crashed).await == Some(RunStatus::Paused) && status(w, asked).await == Some(RunStatus::Waiting)
    })
    .await;
    if !stopped {
        bad.push(format!(
            "stop: the runs did not stop ({crashed}: {:?}, {asked}: {:?})",
            status(w, crashed).await,
            status(w, asked).await
        ));
    }
    stopped
}

/// Unpauses and answers the two runs after the jump: both complete, each effect called once.
async fn go_on(w: &World, crashed: &ThreadId, asked: &ThreadId, bad: &mut Vec<String>) {
    post(w, &format!("/v1/runs/{crashed}/unpause"), json!({}), bad).await;
    post(
        w,
        &format!("/v1/runs/{asked}/resume"),
        json!({"value": true, "id": "late"}),
        bad,
    )
    .await;
    // The run that was paused asks its question once it goes on.
    if until(w, 60, || async { status(w, crashed).await == Some(RunStatus::Waiting) }).await {
        post(
            w,
            &format!("/v1/runs/{crashed}/resume"),
            json!({"value": true, "id": "late"}),
            bad,
        )
        .await;
    }
    let done = until(w, 60, || async {
        status(w, crashed).await.is_some_and(|s| s.is_final()) && status(w, asked).await.is_some_and(|s| s.is_final())
    })
    .await;
    for t in [crashed, asked] {
        let s = status(w, t).await;
        if !done || s != Some(RunStatus::Completed) {
            bad.push(format!(
                "stop: run {t} ended {s:?} after the long stop: {}",
                w.holdings(t).await
            ));
        }
        let calls = w.provider.calls();
        for key in [format!("ship:{t}"), format!("bill:{t}")] {
            if calls.get(&key).copied().unwrap_or(0) != 1 {
                bad.push(format!(
                    "stop (19): effect {key} was called {:?} times across a stop past its TTL",
                    calls.get(&key)
                ));
            }
        }
    }
}

/// Invariant 21, a type moved between builds: a run whose `approve` recorded its question on
/// the second build waits at its gate while every worker restarts on the same build with
/// [`Question`](super::workload::Question) moved to another module (its name the author's);
/// answered, it completes there and replays there, neither blocked nor left waiting for a
/// build.
pub(super) async fn type_move(w: &mut World, bad: &mut Vec<String>) {
    let n = w.workers.len();
    for i in 0..n {
        w.crash_worker(i, 0);
    }
    w.pinned = Some(Build::Second);
    w.start_worker(0);
    let Ok(t) = ThreadId::new("moved-approve") else { return };
    let body = json!({"workflow": "approve", "thread_id": t.as_str(), "input": {"id": 7, "secret": "moved"}});
    let (code, reply) = w.api(Method::POST, "/v1/runs", Some(body)).await;
    if code != 201 {
        bad.push(format!("type move: starting {t} answered {code}: {reply}"));
        return;
    }
    if !until(w, 30, || async { status(w, &t).await == Some(RunStatus::Waiting) }).await {
        bad.push(format!(
            "type move: {t} never reached its gate: {}",
            w.holdings(&t).await
        ));
        return;
    }
    w.crash_worker(0, 0);
    w.pinned = Some(Build::Moved);
    for i in 0..n {
        w.start_worker(i);
    }
    w.trace.line(
        w.now(),
        "type move: every worker on the build with the type moved".into(),
    );
    post(
        w,
        &format!("/v1/runs/{t}/resume"),
        json!({"value": true, "id": "moved"}),
        bad,
    )
    .await;
    let done = until(w, 60, || async { status(w, &t).await.is_some_and(|s| s.is_final()) }).await;
    let registry = super::workload::registry(std::sync::Arc::clone(&w.provider), false, Build::Moved);
    match (done, w.read(&t).await) {
        (true, Some((h, _))) if h.status == RunStatus::Completed => {
            match savepoint_worker::replay::replay(&w.store, &registry, &t).await {
                Ok(savepoint_worker::replay::ReplayReport::Finished(Ok(out))) if Some(&out) == h.output.as_ref() => {}
                other => bad.push(format!(
                    "type move (21): {t} does not replay on the moved build: {other:?}"
                )),
            }
        }
        _ => bad.push(format!(
            "type move (21): {t} did not complete after its type moved: {}",
            w.holdings(&t).await
        )),
    }
    w.pinned = None;
}

/// Invariant 20: after a jump past the retention and the effect TTL (and a few new runs, whose
/// creation trims the listing index), no key of an ended run is left, and no index lists a
/// run that is gone.
pub(super) async fn retention(w: &World, bad: &mut Vec<String>) {
    let d = Duration::from_secs(w.cfg.retention_secs.max(w.cfg.effect_ttl_secs)) + DAY;
    w.jump(d).await;
    let fresh: Vec<ThreadId> = (0..8)
        .filter_map(|i| ThreadId::new(format!("after-{i}")).ok())
        .collect();
    for t in &fresh {
        let body = json!({"workflow": "hog", "thread_id": t.as_str(), "input": {"steps": 1, "ms": 5}});
        let (code, reply) = w.api(Method::POST, "/v1/runs", Some(body)).await;
        if code != 201 {
            bad.push(format!(
                "retention: starting {t} after the jump answered {code}: {reply}"
            ));
        }
    }
    let mut ended = false;
    for _ in 0..300 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut all = true;
        for t in &fresh {
            all &= status(w, t).await == Some(RunStatus::Completed);
        }
        if all {
            ended = true;
            break;
        }
    }
    if !ended {
        bad.push(format!(
            "retention: the runs started after the jump did not complete: {}",
            w.holdings(&fresh[0]).await
        ));
    }
    let keys = dump_namespace(&w.store).await;
    let ns = format!("{}:", w.store.keys().namespace());
    let mut seen = std::collections::BTreeSet::new();
    for (k, v) in &keys {
        let Some(rest) = k.strip_prefix(&ns) else { continue };
        if seen.insert(k.clone()) {
            check_key(w, rest, bad).await;
        }
        let member = String::from_utf8_lossy(v);
        if is_run_index(rest) && *member != **k && !member.starts_with('#') {
            let Ok(t) = ThreadId::new(member.to_string()) else {
                continue;
            };
            if w.read(&t).await.is_none() {
                bad.push(format!("retention (20): index {k} still lists {t}, which has expired"));
            }
        }
    }
    w.trace.line(w.now(), format!("retention: {} key(s) left", seen.len()));
}

/// A partition's index of runs (`{pNN}:runs`, `:blocked`, `:waiting`, `:unserved`, `:paused`).
fn is_run_index(rest: &str) -> bool {
    let parts: Vec<&str> = rest.split(':').collect();
    parts.len() == 2
        && parts[0].starts_with("{p")
        && ["runs", "blocked", "waiting", "unserved", "paused"].contains(&parts[1])
}

/// A key left after the retention: the fleet's own, or one of a run that has not ended.
async fn check_key(w: &World, rest: &str, bad: &mut Vec<String>) {
    let keep_ms = w.cfg.retention_secs.max(w.cfg.effect_ttl_secs) * 1000;
    let expired = |h: &savepoint_store::RunHeader| {
        h.status.is_final() && h.finished_at.is_some_and(|f| f + keep_ms < w.server_ms())
    };
    let parts: Vec<&str> = rest.splitn(3, ':').collect();
    let run_of = match parts.as_slice() {
        [p, "run" | "ev" | "sig", id] if p.starts_with("{p") => Some(id.trim_end_matches(":d")),
        [p, "fx", key] if p.starts_with("{fx") => {
            // A record outlives its TTL only for a run that may still replay it.
            let thread = key.rsplit_once(':').map(|(_, t)| t).unwrap_or(key);
            match ThreadId::new(thread.to_owned()) {
                Ok(t) if w.read(&t).await.is_some_and(|(h, _)| expired(&h)) => {
                    bad.push(format!(
                        "retention (20): effect record {rest} outlived its ended run {t}"
                    ));
                }
                _ => {}
            }
            None
        }
        [p, ..] if p.starts_with("{fc}") => {
            bad.push(format!("retention (20): flow-control key {rest} outlived every run"));
            None
        }
        _ => None,
    };
    let Some(id) = run_of else { return };
    let Ok(t) = ThreadId::new(id.to_owned()) else { return };
    match w.read(&t).await {
        Some((h, _)) if !expired(&h) => {}
        Some((h, _)) => bad.push(format!(
            "retention (20): run {t} ended {} and is still there past its retention (key {rest})",
            h.status.as_str()
        )),
        None => bad.push(format!("retention (20): key {rest} outlived its run {t}")),
    }
}

async fn start(w: &World, t: &ThreadId, bad: &mut Vec<String>) {
    let body = json!({"workflow": "lasting", "thread_id": t.as_str(), "input": {}});
    let (code, reply) = w.api(Method::POST, "/v1/runs", Some(body)).await;
    if code != 201 {
        bad.push(format!("stop: starting {t} answered {code}: {reply}"));
    }
}

async fn post(w: &World, path: &str, body: Value, bad: &mut Vec<String>) {
    let (code, reply) = w.api(Method::POST, path, Some(body)).await;
    if code >= 300 {
        bad.push(format!("stop: POST {path} answered {code}: {reply}"));
    }
}

async fn status(w: &World, t: &ThreadId) -> Option<RunStatus> {
    w.read(t).await.map(|(h, _)| h.status)
}

/// Polls `cond` every 100 ms for up to `secs` seconds of the driver's time.
async fn until<F, Fut>(w: &World, secs: u64, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = w.now() + secs * 1000;
    while w.now() < end {
        if cond().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}
