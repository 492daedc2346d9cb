use axum::http::Method;
use savepoint_core::ids::ThreadId;
use savepoint_core::journal::EntryKind;
use savepoint_store::{BlockKind, RunStatus};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

use super::schedules::schedules_open;
use super::workload;
use super::world::{Kind, World};

/// What the operator did after the heal, for the checks.
#[derive(Default)]
pub(super) struct Operated {
    /// Runs blocked in doubt on an effect, resolved with what the provider says: (run, key,
    /// applied).
    pub(super) resolved: Vec<(ThreadId, String, bool)>,
    /// Each fork: the source, the fork, and every effect applied when it was made.
    pub(super) forks: Vec<(ThreadId, ThreadId, BTreeMap<String, Vec<u64>>)>,
    /// Each restart in place.
    pub(super) restarts: Vec<Restarted>,
    /// Runs blocked in doubt on a `charge` effect first resolved "applied" with a result of
    /// the wrong shape (the workflow's type does not decode it): (run, key). The run must
    /// take it back and block on the key again, to be resolved with the right shape.
    pub(super) misshapen: Vec<(ThreadId, String)>,
    /// Runs blocked because they kept crashing (poison), retried by the operator.
    pub(super) retried: Vec<ThreadId>,
}

/// A run the operator restarted in place.
pub(super) struct Restarted {
    pub(super) thread: ThreadId,
    /// The entry it restarted from.
    pub(super) from: usize,
    /// The effect keys named to run again.
    pub(super) named: Vec<String>,
    /// Every effect applied when it was made.
    pub(super) before: BTreeMap<String, Vec<u64>>,
}

impl Operated {
    /// How many more times the operator asked for `key` to be performed (named in a
    /// restart's `rerun_effects`).
    pub(super) fn reruns_of(&self, key: &str) -> usize {
        self.restarts
            .iter()
            .filter(|r| r.named.iter().any(|k| k == key))
            .count()
    }
}

/// The operator after the heal, as the runbook says: each run blocked on an effect in doubt
/// is resolved with what the provider says, "not applied" (the run performs it) or "applied"
/// with the provider's record (the run journals it without calling), and the first completed
/// order is forked from its first effect, naming nothing to run
/// again. Then waits (up to 120 s) until those runs ended.
pub(super) async fn operate(
    w: &mut World,
    runs: &[(ThreadId, Value, u64)],
    kinds: &[Kind],
    provider: &workload::Provider,
    bad: &mut Vec<String>,
) -> Operated {
    // Workers crashed late in the heal (the rotation restarts them all) may still be down
    // when every run has ended: the operator's runs need them.
    w.restart_due_workers(true);
    let w = &*w;
    let mut op = Operated::default();
    let applied = provider.applications();
    fork_a_completed_order(w, runs, kinds, applied, &mut op, bad).await;
    restart_a_failed_order(w, runs, kinds, provider, &mut op, bad).await;
    retry_blocked_runs(w, runs, provider, &mut op, bad).await;
    answer_retried(w, &op.retried).await;
    resolve_in_doubt(w, runs, provider, &mut op, bad).await;
    // A schedule's run the operator unblocked ended: the firing held behind it starts now.
    for _ in 0..1200 {
        if schedules_open(w).await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    w.trace.line(
        w.now(),
        format!(
            "operator: resolved {} ({} misshapen first), forked {}, restarted {}, retried {}",
            op.resolved.len(),
            op.misshapen.len(),
            op.forks.len(),
            op.restarts.len(),
            op.retried.len()
        ),
    );
    op
}

/// Forks the first completed order from its first effect.
async fn fork_a_completed_order(
    w: &World,
    runs: &[(ThreadId, Value, u64)],
    kinds: &[Kind],
    applied: BTreeMap<String, Vec<u64>>,
    op: &mut Operated,
    bad: &mut Vec<String>,
) {
    let fork_from = first_completed_order(w, runs, kinds).await;
    if let Some((source, n)) = fork_from {
        let fork = ThreadId::new(format!("{source}-fork")).unwrap_or_else(|_| ThreadId::generate("fork"));
        let body = json!({"from_step": n, "thread_id": fork.as_str()});
        match w
            .api(Method::POST, &format!("/v1/runs/{source}/fork"), Some(body))
            .await
        {
            (201, _) => op.forks.push((source, fork, applied)),
            (code, body) => bad.push(format!("operator: fork of {source} answered {code}: {body}")),
        }
    }
}

/// The first failed order (its deadline passed, or the provider refused a stale token) is
/// restarted in place from its first effect; every other seed names that effect to be
/// performed again.
async fn restart_a_failed_order(
    w: &World,
    runs: &[(ThreadId, Value, u64)],
    kinds: &[Kind],
    provider: &workload::Provider,
    op: &mut Operated,
    bad: &mut Vec<String>,
) {
    if let Some((t, n, key, index)) = first_failed_order(w, runs, kinds).await {
        let named: Vec<String> = if index % 2 == 0 { vec![key] } else { Vec::new() };
        let body = json!({"from_step": n, "rerun_effects": named});
        match w.api(Method::POST, &format!("/v1/runs/{t}/restart"), Some(body)).await {
            (202, _) => op.restarts.push(Restarted {
                thread: t,
                from: n,
                named,
                before: provider.applications(),
            }),
            (code, body) => bad.push(format!("operator: restart of {t} answered {code}: {body}")),
        }
    }
}

/// The fix for the planted bug is deployed; each run it blocked (and any run blocked
/// because it kept crashing: the faults are off now) is retried: it goes on from its
/// journal and performs no effect twice.
async fn retry_blocked_runs(
    w: &World,
    runs: &[(ThreadId, Value, u64)],
    provider: &workload::Provider,
    op: &mut Operated,
    bad: &mut Vec<String>,
) {
    provider.fix();
    for (t, _, _) in runs {
        let Some((h, _)) = w.read(t).await else { continue };
        let retry = h.status == RunStatus::Blocked
            && h.blocked_effect.is_none()
            && (h.block_kind == Some(BlockKind::Poison) || workload::blocked_by_planted_bug(&h));
        if !retry {
            continue;
        }
        match w.api(Method::POST, &format!("/v1/runs/{t}/retry"), None).await {
            (202, _) => op.retried.push(t.clone()),
            (code, body) => bad.push(format!("operator: retry of {t} answered {code}: {body}")),
        }
    }
}

/// Resolves every effect in doubt: applied if the provider has it, not applied otherwise. A
/// run may hold more than one effect in doubt (a group's): a round per block, five at most.
async fn resolve_in_doubt(
    w: &World,
    runs: &[(ThreadId, Value, u64)],
    provider: &workload::Provider,
    op: &mut Operated,
    bad: &mut Vec<String>,
) {
    for _round in 0..5 {
        let before = (op.resolved.len(), op.misshapen.len());
        resolve_round(w, runs, provider, op, bad).await;
        let watched: Vec<ThreadId> = (op.resolved[before.0..].iter().map(|(t, _, _)| t.clone()))
            .chain(op.misshapen[before.1..].iter().map(|(t, _)| t.clone()))
            .chain(op.forks.iter().map(|(_, f, _)| f.clone()))
            .chain(op.restarts.iter().map(|r| r.thread.clone()))
            .chain(op.retried.iter().cloned())
            .collect();
        wait_ended(w, &watched).await;
        if (op.resolved.len(), op.misshapen.len()) == before {
            break;
        }
    }
}

/// One round: each run blocked on an effect gets the operator's answer for it. An applied
/// charge is first answered with a receipt of the wrong shape (an operator's typo).
async fn resolve_round(
    w: &World,
    runs: &[(ThreadId, Value, u64)],
    provider: &workload::Provider,
    op: &mut Operated,
    bad: &mut Vec<String>,
) {
    for (t, _, _) in runs {
        let Some((h, _)) = w.read(t).await else { continue };
        let Some(k) = h.blocked_effect.as_deref() else { continue };
        let path = format!("/v1/runs/{t}/effects/{k}/resolve");
        // An applied charge is first answered with a receipt of the wrong shape (an
        // operator's typo).
        let misshape = k.starts_with("charge:") && !op.misshapen.iter().any(|(r, key)| r == t && key == k);
        let (done, body) = match provider.find(k) {
            Some(_) if misshape => (true, json!({"applied": true, "result": {"applied": k, "fence": "one"}})),
            Some(result) => (true, json!({"applied": true, "result": result})),
            None => (false, json!({"applied": false})),
        };
        match w.api(Method::POST, &path, Some(body)).await {
            // (A result recorded before stands: the run journals that one.)
            (202, reply) if misshape && done && reply["effect"]["state"] == "applied" => {
                op.misshapen.push((t.clone(), k.to_owned()))
            }
            (202, _) => op.resolved.push((t.clone(), k.to_owned(), done)),
            (code, body) => bad.push(format!("operator: resolve {t} {k} answered {code}: {body}")),
        }
    }
}

/// The first completed order and the index of its first effect (where a fork starts).
pub(super) async fn first_completed_order(
    w: &World,
    runs: &[(ThreadId, Value, u64)],
    kinds: &[Kind],
) -> Option<(ThreadId, usize)> {
    for (i, (t, _, _)) in runs.iter().enumerate() {
        if kinds[i] != Kind::Order {
            continue;
        }
        let Some((h, journal)) = w.read(t).await else { continue };
        if h.status == RunStatus::Completed {
            if let Some(n) = journal.iter().position(|e| e.kind == EntryKind::Effect) {
                return Some((t.clone(), n));
            }
        }
    }
    None
}

/// The first order that failed with its first effect journaled: the run, the entry of that
/// effect, its key, and the order's index among the runs.
pub(super) async fn first_failed_order(
    w: &World,
    runs: &[(ThreadId, Value, u64)],
    kinds: &[Kind],
) -> Option<(ThreadId, usize, String, usize)> {
    for (i, (t, _, _)) in runs.iter().enumerate() {
        if kinds[i] != Kind::Order {
            continue;
        }
        let Some((h, journal)) = w.read(t).await else { continue };
        if h.status != RunStatus::Failed {
            continue;
        }
        let first = journal.iter().enumerate().find(|(_, e)| e.kind == EntryKind::Effect);
        if let Some((n, key)) = first.and_then(|(n, e)| Some((n, e.key.clone()?))) {
            return Some((t.clone(), n, key, i));
        }
    }
    None
}

/// Waits (up to 120 s) until each retried run ended or blocked; one that had not passed its
/// gate waits there again, and its client answers, as during the heal.
pub(super) async fn answer_retried(w: &World, retried: &[ThreadId]) {
    for _ in 0..1200 {
        let mut open = 0;
        for t in retried {
            let Some((h, _)) = w.read(t).await else { continue };
            match h.status {
                s if s.is_final() || s == RunStatus::Blocked => {}
                RunStatus::Waiting if w.waits_on_blocked_child(&h).await => {}
                RunStatus::Waiting => {
                    open += 1;
                    let body = json!({"value": true, "id": format!("approve-{t}")});
                    let (status, _) = w.api(Method::POST, &format!("/v1/runs/{t}/resume"), Some(body)).await;
                    w.trace.line(w.now(), format!("resume {t} after its retry: {status}"));
                }
                _ => open += 1,
            }
        }
        if open == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits (up to 120 s) until each of `runs` ended or blocked.
pub(super) async fn wait_ended(w: &World, runs: &[ThreadId]) {
    for _ in 0..1200 {
        let mut open = 0;
        for t in runs {
            let ended = w
                .read(t)
                .await
                .is_some_and(|(h, _)| h.status.is_final() || h.status == RunStatus::Blocked);
            open += usize::from(!ended);
        }
        if open == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
