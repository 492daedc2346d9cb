//! The verdict on a run that is not ended, blocked or waiting: unserved, running (on a live
//! or a dead worker), sleeping, backing off, queued or overdue.

use savepoint_core::journal::EntryKind;
use savepoint_store::{RunHeader, RunStatus};

use super::actions::{cancel_action, deploy_action};
use super::fleet::Fleet;
use super::verdict::Verdict;
use super::{span, when, Case, Facts, LeaseHolder, Server};
use crate::api::views::OVERDUE_AFTER_MS;

/// True when the run has no due time or wakes within a minute.
fn wakes_soon(h: &RunHeader, now: u64) -> bool {
    h.due.is_none_or(|d| d <= now + 60_000)
}

/// Why the last worker that tried the runnable (pending or sleeping) run gave it back, if
/// one did (another version or checkpoint schema).
fn given_back(h: &RunHeader) -> Option<&str> {
    h.waiting_for
        .as_deref()
        .filter(|_| matches!(h.status, RunStatus::Pending | RunStatus::Sleeping))
}

/// A runnable run no live worker serves: pending, or sleeping with its wake-up near. A
/// worker that tried it and gave it back says why (another version or checkpoint schema).
pub(super) fn unserved(h: &RunHeader, now: u64, servers: &[Server]) -> bool {
    (servers.is_empty() && (h.status == RunStatus::Pending || (h.status == RunStatus::Sleeping && wakes_soon(h, now))))
        || given_back(h).is_some()
}

/// The warning about a sleeping run that wakes later than a minute from now with no live
/// worker serving it.
pub(super) fn sleep_warning(h: &RunHeader, now: u64, servers: &[Server]) -> Option<String> {
    (servers.is_empty() && h.status == RunStatus::Sleeping && !wakes_soon(h, now)).then(|| {
        format!(
            "no live worker serves {} v{} now: one must be running when it wakes",
            h.workflow, h.workflow_version
        )
    })
}

/// How long past its due time the run is, once that is more than the overdue threshold.
fn overdue_by(h: &RunHeader, now: u64) -> Option<u64> {
    h.due.and_then(|d| now.checked_sub(d)).filter(|l| *l > OVERDUE_AFTER_MS)
}

/// A runnable run no live worker serves: deploy one (or cancel); it waits in the store.
pub(super) fn no_worker(h: &RunHeader, fleet: &Fleet<'_>) -> Verdict {
    let why = match (fleet.servers.is_empty(), given_back(h)) {
        (false, Some(w)) => format!(
            "{w} (the live workers serving {} v{} gave it back)",
            h.workflow, h.workflow_version
        ),
        _ => fleet.servers_text.clone(),
    };
    Verdict {
        evidence: h
            .waiting_for
            .iter()
            .map(|w| format!("the last worker that tried it gave it back: {w}"))
            .collect(),
        actions: vec![
            deploy_action(format!(
                "Deploy (or scale up) a worker that serves {} v{}; the run is picked up as soon as it registers",
                h.workflow, h.workflow_version
            )),
            cancel_action(h.thread.as_str()),
        ],
        ..Verdict::new(
            Case::NoWorker,
            false,
            format!("Not progressing: {why}. It waits in the store (nothing is lost) until one registers."),
        )
    }
}

/// A running run: on its live lease holder, or held by a dead one.
pub(super) fn running(h: &RunHeader, f: &Facts, servers: usize, lease: Option<&LeaseHolder>) -> Verdict {
    match lease {
        Some(l) if l.alive => Verdict::new(
            Case::Running,
            true,
            format!(
                "Running on live worker {} (entry {}); its lease runs until {}.",
                l.worker,
                h.steps,
                when(l.lease_until, f.now)
            ),
        ),
        Some(l) => held_by_dead_worker(h, f, servers, l),
        None => Verdict::new(Case::Running, true, "Running.".into()),
    }
}

/// Why the lease holder counts as gone.
fn why_gone(l: &LeaseHolder, f: &Facts) -> String {
    if !l.registered {
        "its registration expired".to_owned()
    } else if let Some(s) = f
        .workers
        .iter()
        .find(|w| w.id == l.worker)
        .and_then(|w| w.silent_for(f.now))
    {
        format!("no heartbeat for {}", span(s))
    } else if l.expired {
        "its lease expired without a heartbeat".to_owned()
    } else {
        "its process does not answer /healthz".to_owned()
    }
}

/// Who takes a run held by a dead worker over, given how many live workers serve it.
fn taker(h: &RunHeader, servers: usize) -> String {
    match servers {
        0 => format!(
            "No other live worker serves {} v{} yet: the first one that starts",
            h.workflow, h.workflow_version
        ),
        n => format!("Another worker ({n} live serve it)"),
    }
}

/// A running run whose lease holder is gone: who takes it over, when, and where it resumes.
fn held_by_dead_worker(h: &RunHeader, f: &Facts, servers: usize, l: &LeaseHolder) -> Verdict {
    let now = f.now;
    // The scanner rings the run once its lease and the grace after it have passed
    // (its due time while leased).
    let takeover = now.max(h.due.unwrap_or(l.lease_until).max(l.lease_until));
    Verdict::new(
        Case::HeldByDeadWorker,
        true,
        format!(
            "Held by a dead worker: {} is gone ({}). {} takes the run over once the lease \
             and its grace have passed, at {}, and resumes at entry {}.",
            l.worker,
            why_gone(l, f),
            taker(h, servers),
            when(takeover, now),
            h.steps
        ),
    )
}

/// A sleeping run backing off on the effect key `key` another run holds.
pub(super) fn backing_off_on_key(h: &RunHeader, key: &str, now: u64) -> Verdict {
    Verdict::new(
        Case::BackingOff,
        true,
        format!(
            "Backing off: the effect key {key} is held by another run; it tries again at {}.",
            h.due.map(|d| when(d, now)).unwrap_or_else(|| "its due time".into())
        ),
    )
}

/// A sleeping run: on a durable timer (its last entry is a sleep), or backing off before a
/// retry; either may be overdue.
pub(super) fn sleeping(h: &RunHeader, f: &Facts) -> Verdict {
    let now = f.now;
    let due = h.due.map(|d| when(d, now)).unwrap_or_else(|| "(no due time)".into());
    let late = overdue_by(h, now)
        .map(|l| {
            format!(
                "; overdue by {}: no worker has picked it up yet (the due scanner hands it out again)",
                span(l)
            )
        })
        .unwrap_or_default();
    match f.last.as_ref().filter(|e| e.kind == EntryKind::Sleep) {
        Some(e) => Verdict::new(
            Case::Sleeping,
            true,
            format!("Sleeping on the durable timer {:?} until {due}{late}.", e.name),
        ),
        None => Verdict::new(
            Case::BackingOff,
            true,
            format!("Backing off before a retry until {due}{late}."),
        ),
    }
}

/// A pending run: overdue (the broker did not say what is queued, or nothing is), or queued
/// behind a backlog.
pub(super) fn pending(h: &RunHeader, f: &Facts, servers: &[Server]) -> Verdict {
    let late = overdue_by(h, f.now);
    let backlog = f.queue_depth;
    match late {
        Some(late) if backlog.is_none() => Verdict::new(
            Case::Overdue,
            true,
            format!(
                "Overdue by {}: due, and no worker has claimed it; the broker did not say how many \
                 tasks are queued ahead of it. The due scanner hands it out again.",
                span(late)
            ),
        ),
        Some(late) if backlog == Some(0) => Verdict::new(
            Case::Overdue,
            true,
            format!(
                "Overdue by {}: due, but no task for it is in the queue and no worker has claimed it; \
                 the due scanner hands it out again (is a scheduler running?).{}",
                span(late),
                dead_letters(f.dlq_depth)
            ),
        ),
        _ => queued(late, backlog, servers),
    }
}

/// What the dead-letter queue holds, when it holds anything: an overdue run's task may be
/// there (with its reason in `x-savepoint-reason` / `x-death`).
fn dead_letters(depth: Option<u32>) -> String {
    match depth {
        Some(n) if n > 0 => format!(
            " The dead-letter queue holds {n} message(s): if this run's task is among them, its reason says \
             why (`rabbitmqctl list_queues name messages` shows `<namespace>.dlq`); the scanner publishes a new \
             task for the run when it is due again."
        ),
        _ => String::new(),
    }
}

/// A pending run queued behind a backlog (of a known size or not), perhaps past its due time.
fn queued(late: Option<u64>, backlog: Option<u32>, servers: &[Server]) -> Verdict {
    let busy: u32 = servers.iter().map(|s| s.in_flight).sum();
    Verdict::new(
        Case::Queued,
        true,
        format!(
            "Queued behind a backlog of {} task(s) for {} live worker(s) serving it ({busy} \
             run(s) in flight there){}.",
            backlog
                .map(|n| n.to_string())
                .unwrap_or_else(|| "an unknown number of".into()),
            servers.len(),
            late.map(|l| format!("; due {} ago", span(l))).unwrap_or_default()
        ),
    )
}
