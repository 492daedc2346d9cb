//! Why a run that is not running waits, since when and until when, with an estimate of when it
//! runs again: one function of the run's header and a few facts ([`waiting`]), behind the run
//! view, the doctor, the console, `savepoint get` and `GET /v1/runs?waiting_on=` alike.
//!
//! The cause comes from the header alone except for a run of a flow-control key, whose line
//! is read ([`ScriptStore::flow_line`]); the numbers of an estimate come from the store (a
//! rate bucket, a line's turnover), the broker (a queue's depth) and the live workers'
//! heartbeats (the slices they start per second).

use savepoint_store::{LineFacts, PauseRecord, PauseScope, RunHeader, RunStatus, ScriptStore, WorkerInfo};

use super::doctor::{at, span};
use super::model::{Backlog, Estimate, FlowLine, Waiting, WaitingOn};
use super::{ApiError, Services};

/// A line's turnover older than this many mean gaps (and at least a minute) no longer says
/// how fast it moves.
const STALE_GAPS: u64 = 10;

/// What [`waiting`] needs beside the header.
#[derive(Debug, Default)]
pub(crate) struct WaitFacts<'a> {
    /// Store time (ms).
    pub now: u64,
    /// The live workers.
    pub workers: &'a [WorkerInfo],
    /// The deployment's default task queue (where a run without `q` goes).
    pub home_queue: &'a str,
    /// The run's place in its flow-control line, when it has a flow key and was read.
    pub line: Option<LineFacts>,
    /// Ready tasks in the run's queue (absent: not asked, or the broker did not answer).
    pub depth: Option<u32>,
    /// A pause in force that holds the run but has not stopped it yet.
    pub held_by: Option<super::model::PauseView>,
    /// The name of the timer a sleeping run sleeps on (its last entry), when read.
    pub timer: Option<String>,
}

/// The live workers that would take the run: they serve its workflow at its version and
/// consume the queue its next task goes to.
pub(crate) fn servers<'a>(h: &RunHeader, f: &WaitFacts<'a>) -> Vec<&'a WorkerInfo> {
    let queue = h.queue.as_deref().unwrap_or(f.home_queue);
    f.workers
        .iter()
        .filter(|w| w.serves(&h.workflow, h.workflow_version))
        .filter(|w| w.silent_for(f.now).is_none())
        .filter(|w| queue.is_empty() || w.queue.split(',').any(|q| q == queue))
        .collect()
}

/// The cause alone, where the header decides it without reading the line, the queue or the
/// fleet: what a list filters on before it reads anything more (`None`: pending or sleeping,
/// which take the facts). It cannot see the pauses of workflows, versions and queues: a list
/// uses it only while none is in force.
pub(crate) fn quick_cause(h: &RunHeader, now: u64) -> Option<WaitingOn> {
    let f = WaitFacts {
        now,
        held_by: held_by(h, &[]),
        ..WaitFacts::default()
    };
    match h.status {
        RunStatus::Pending | RunStatus::Sleeping if f.held_by.is_none() => None,
        _ => waiting(h, &f).map(|w| w.on),
    }
}

/// Why run `h` waits, or `None` while it runs (or once it has ended).
pub(crate) fn waiting(h: &RunHeader, f: &WaitFacts<'_>) -> Option<Waiting> {
    let now = f.now;
    if let Some(p) = f.held_by.as_ref() {
        if !h.status.is_final() && !matches!(h.status, RunStatus::Blocked | RunStatus::Paused) {
            return Some(held(p));
        }
    }
    match h.status {
        RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled => None,
        RunStatus::Paused => Some(paused(h)),
        RunStatus::Blocked => Some(blocked(h)),
        RunStatus::Waiting => Some(waits(h, now)),
        RunStatus::Running => h.retry_backoff.filter(|b| b.until > now).map(|b| {
            backing_off(
                format!("the call at entry {} (after attempt {})", b.index, b.attempt),
                b.until,
                now,
            )
        }),
        RunStatus::Sleeping => Some(sleeping(h, f)),
        RunStatus::Pending => Some(pending(h, f)),
    }
}

fn base(on: WaitingOn, summary: String, estimate: Estimate) -> Waiting {
    Waiting {
        on,
        summary,
        since: None,
        until: None,
        name: None,
        line: None,
        backlog: None,
        estimate,
    }
}

fn unknown(how: impl Into<String>) -> Estimate {
    Estimate {
        at: None,
        how: how.into(),
    }
}

fn known(at: u64, how: impl Into<String>) -> Estimate {
    Estimate {
        at: Some(at),
        how: how.into(),
    }
}

/// The furthest an estimate goes: past it (a start rate of a token a century, a turnover of
/// years) the time is no time anyone can plan by.
const HORIZON_MS: f64 = 100.0 * 365.25 * 86_400_000.0;

/// An estimate `ms` after `now`, by a rate or a mean: rates and means come from the run's own
/// options and recent history, so any of them may be tiny or huge (a start rate of 1e-300 per
/// second is a valid option); past [`HORIZON_MS`], or not a number, the time is unknown
/// instead of an overflow.
fn known_after(now: u64, ms: f64, how: impl Into<String>) -> Estimate {
    let how = how.into();
    if (0.0..=HORIZON_MS).contains(&ms) {
        known(now.saturating_add(ms.ceil() as u64), how)
    } else {
        unknown(format!("unknown: more than a century away ({how})"))
    }
}

/// A run a pause in force holds: it has not stopped it yet (its next claim does).
fn held(p: &super::model::PauseView) -> Waiting {
    let shown = match (p.scope.as_str(), &p.workflow, p.version, &p.queue) {
        ("workflow", Some(w), _, _) => format!("the pause of workflow {w}"),
        ("version", Some(w), Some(v), _) => format!("the pause of {w} v{v}"),
        ("queue", _, _, Some(q)) => format!("the pause of queue {q}"),
        _ => "its own pause".to_owned(),
    };
    Waiting {
        since: Some(p.at),
        name: Some(p.scope.clone()),
        ..base(
            WaitingOn::Paused,
            format!(
                "Held by {shown}, asked by {}: it takes no new slice until the pause is lifted.",
                p.by
            ),
            unknown("unknown: until an operator lifts the pause"),
        )
    }
}

fn paused(h: &RunHeader) -> Waiting {
    let (field, record) = match &h.paused_by {
        Some((f, r, _)) => (f.clone(), PauseRecord::decode(r)),
        None => ("run".to_owned(), None),
    };
    let scope =
        PauseScope::parse_field(&field).map_or_else(|| "its own pause".to_owned(), |s| format!("the pause of {s}"));
    let by = record.as_ref().map(|r| r.by.clone()).unwrap_or_else(|| "?".into());
    Waiting {
        since: record.as_ref().map(|r| r.at),
        name: Some(field),
        ..base(
            WaitingOn::Paused,
            format!("Paused by {scope}, asked by {by}."),
            unknown("unknown: until an operator resumes it"),
        )
    }
}

fn blocked(h: &RunHeader) -> Waiting {
    let kind = h.block_kind.map(|k| k.to_string()).unwrap_or_else(|| "other".into());
    Waiting {
        since: Some(h.updated_at),
        name: Some(kind),
        ..base(
            WaitingOn::Blocked,
            format!("Blocked: {}.", h.reason.as_deref().unwrap_or("(no reason recorded)")),
            unknown("unknown: until an operator acts (see its diagnosis)"),
        )
    }
}

/// A waiting run: a human, a signal or a child, timed out (or failed by its deadline) at its
/// due time at the latest.
fn waits(h: &RunHeader, now: u64) -> Waiting {
    let (on, name, summary) = match &h.wait {
        Some(w) if w.kind == "interrupt" => (
            WaitingOn::Human,
            w.name.clone(),
            format!("Waiting for a human to answer the interrupt {:?}.", w.name),
        ),
        Some(w) if w.kind == "child" => {
            let child = w.payload["thread_id"].as_str().unwrap_or_default().to_owned();
            let call = w.payload["call"].as_str().unwrap_or_default();
            let summary = format!("Waiting for its child run {child} (the call {call:?}) to end.");
            (WaitingOn::Child, child, summary)
        }
        Some(w) => (
            WaitingOn::Signal,
            w.name.clone(),
            format!("Waiting for the signal {:?}.", w.name),
        ),
        None => (
            WaitingOn::Signal,
            String::new(),
            "Waiting, but the run records nothing it waits for.".into(),
        ),
    };
    let (until, estimate) = match (on, h.due) {
        // A child is polled at its due time: it is no bound on when the parent runs.
        (WaitingOn::Child, _) | (_, None) => (None, unknown(answer_how(on))),
        (_, Some(d)) => (
            Some(d),
            known(
                d.max(now),
                format!(
                    "at the latest when its wait times out, at {}; sooner if answered",
                    at(d)
                ),
            ),
        ),
    };
    Waiting {
        since: Some(h.updated_at),
        until,
        name: Some(name).filter(|n| !n.is_empty()),
        ..base(on, summary, estimate)
    }
}

fn answer_how(on: WaitingOn) -> &'static str {
    match on {
        WaitingOn::Human => "unknown: when someone answers",
        WaitingOn::Child => "unknown: when the child run ends",
        _ => "unknown: when the signal is sent",
    }
}

fn backing_off(what: String, until: u64, now: u64) -> Waiting {
    Waiting {
        until: Some(until),
        ..base(
            WaitingOn::BackingOff,
            format!("Backing off: {what} is tried again at {}.", at(until)),
            known(until.max(now), "the back-off's end"),
        )
    }
}

/// A sleeping run: on a timer, backing off on an effect key, or due with nobody to serve it.
fn sleeping(h: &RunHeader, f: &WaitFacts<'_>) -> Waiting {
    let due = h.due.unwrap_or(f.now);
    if let Some((key, n)) = &h.wait_effect {
        let what = format!("the effect key {key}, held by another run ({n} back-off(s) so far),");
        return Waiting {
            name: Some(key.clone()),
            ..backing_off(what, due, f.now)
        };
    }
    if due <= f.now {
        // Its timer is up: it waits for a worker like a pending run does.
        return runnable(h, f);
    }
    let name = f.timer.clone();
    Waiting {
        until: Some(due),
        since: Some(h.updated_at),
        name: name.clone(),
        ..base(
            WaitingOn::Timer,
            format!(
                "Sleeping on the durable timer{} until {}.",
                name.map(|n| format!(" {n:?}")).unwrap_or_default(),
                at(due)
            ),
            known(due, "the timer's due time"),
        )
    }
}

/// A pending run: in a flow-control line, or runnable. (A pending run's due time is the
/// safety net that hands it out again if its task is lost, not a time it waits for.)
fn pending(h: &RunHeader, f: &WaitFacts<'_>) -> Waiting {
    if let (Some(flow), Some(line)) = (&h.flow, &f.line) {
        if let Some(rank) = line.rank {
            return in_line(flow, rank, line, f.now);
        }
    }
    runnable(h, f)
}

/// A run whose turn has come: no worker serves it, or it waits behind its queue's backlog.
fn runnable(h: &RunHeader, f: &WaitFacts<'_>) -> Waiting {
    let queue = h.queue.clone();
    let servers = servers(h, f);
    let consume: f64 = servers.iter().map(|w| w.slices_per_sec).sum();
    let backlog = Backlog {
        queue: queue.clone(),
        depth: f.depth,
        workers: servers.len() as u32,
        consume_per_sec: (consume * 100.0).round() / 100.0,
    };
    let on_queue = queue.as_deref().map(|q| format!(" on queue {q}")).unwrap_or_default();
    if servers.is_empty() || h.waiting_for.is_some() {
        let why = h
            .waiting_for
            .clone()
            .unwrap_or_else(|| format!("no live worker serves {} v{}{on_queue}", h.workflow, h.workflow_version));
        return Waiting {
            name: Some(format!("{}@{}", h.workflow, h.workflow_version)),
            backlog: Some(backlog),
            ..base(
                WaitingOn::Worker,
                format!("Waiting for a worker: {why}."),
                unknown("unknown: when a worker that serves it registers"),
            )
        };
    }
    let estimate = match f.depth {
        None => unknown("unknown: the broker did not say how many tasks are queued"),
        Some(0) if servers.iter().any(|w| full(w)) => unknown(format!(
            "unknown: nothing is queued, so its task is with a worker (prefetched, or in the sticky queue of \
             the worker that keeps its journal), and a worker serving it is at its concurrency limit ({}): a \
             task such a worker holds starts when one of its slices ends, or goes back to the queue for \
             a worker with room once every slot has been busy for a second",
            servers
                .iter()
                .filter(|w| full(w))
                .map(|w| format!("{} {}/{}", w.id, w.in_flight, w.concurrency))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        Some(0) => known(f.now, "nothing queued ahead of it: as soon as a worker has room"),
        Some(_) if consume <= 0.0 => unknown(format!(
            "unknown: its {} worker(s) started no slice recently",
            servers.len()
        )),
        Some(d) => known_after(
            f.now,
            d as f64 * 1000.0 / consume,
            format!("{d} task(s) queued ÷ {consume:.1} slices/s its workers started recently"),
        ),
    };
    Waiting {
        since: Some(h.updated_at),
        backlog: Some(backlog),
        ..base(
            WaitingOn::Backlog,
            format!(
                "Queued{on_queue} behind {} task(s) for {} live worker(s) that serve it.",
                f.depth.map_or_else(|| "an unknown number of".into(), |d| d.to_string()),
                servers.len()
            ),
            estimate,
        )
    }
}

/// Whether worker `w` ran as many runs as it may at its last heartbeat (a worker from before
/// `concurrency` was registered says 0: never full).
fn full(w: &WorkerInfo) -> bool {
    w.concurrency > 0 && w.in_flight >= w.concurrency
}

/// A run in its flow-control key's line: for a slot (every slot held, or runs ahead take the
/// free ones) or for a token of the key's start rate.
fn in_line(flow: &savepoint_store::Flow, rank: u64, l: &LineFacts, now: u64) -> Waiting {
    let free = u64::from(flow.limit).saturating_sub(l.holders);
    let line = FlowLine {
        key: flow.key.clone(),
        ahead: rank,
        in_line: l.in_line,
        holders: l.holders,
        limit: flow.limit,
        rate_per_sec: flow.rate,
        turnover_ms: l.turnover_ms,
        last_release_at: l.last_release_at,
    };
    let for_rate = rank < free && flow.rate.is_some_and(|r| r > 0.0);
    let (on, summary, estimate) = if for_rate {
        let r = flow.rate.unwrap_or(1.0);
        let tokens = l
            .tokens
            .map(|(t, at)| (t + now.saturating_sub(at) as f64 * r / 1000.0).min(r.max(1.0)))
            .unwrap_or(0.0);
        let need = (rank as f64 + 1.0 - tokens).max(0.0);
        let est = known_after(
            now,
            need * 1000.0 / r,
            format!(
                "{rank} ahead in line; the key's bucket refills a token every {:.0} ms",
                1000.0 / r
            ),
        );
        let s = format!(
            "In line for a start token of flow key {} ({r}/s), {rank} ahead.",
            flow.key
        );
        (WaitingOn::RateLimit, s, est)
    } else {
        let turns = (rank + 1).saturating_sub(free);
        let summary = format!(
            "In line for a slot of flow key {}: {} of {} slots held, {rank} ahead of it.",
            flow.key, l.holders, flow.limit
        );
        (WaitingOn::FlowSlot, summary, line_estimate(turns, rank, l, now))
    };
    Waiting {
        // A start token comes by itself at a known time; a slot when another run gives one back.
        until: estimate.at.filter(|_| on == WaitingOn::RateLimit),
        line: Some(line),
        name: Some(flow.key.clone()),
        ..base(on, summary, estimate)
    }
}

/// When a run `turns` slot releases away from a slot runs, by the line's recent turnover.
fn line_estimate(turns: u64, rank: u64, l: &LineFacts, now: u64) -> Estimate {
    if turns == 0 {
        return known(now, "a slot is free for it: it takes one at its next claim");
    }
    match (l.turnover_ms, l.last_release_at) {
        (Some(gap), Some(last)) if now.saturating_sub(last) <= gap.saturating_mul(STALE_GAPS).max(60_000) => {
            known_after(
                now,
                turns as f64 * gap.max(1) as f64,
                format!("{rank} ahead: {turns} slot release(s) × {} mean turnover", span(gap)),
            )
        }
        (_, Some(last)) => unknown(format!(
            "unknown: no slot of the key has been given back for {}",
            span(now.saturating_sub(last))
        )),
        _ => unknown("unknown: no slot of the key has been given back yet to measure its turnover"),
    }
}

/// A pause in force that holds run `h` and has not stopped it yet (its next claim does).
pub(crate) fn held_by(h: &RunHeader, pauses: &[savepoint_store::Pause]) -> Option<super::model::PauseView> {
    super::pause::run_pause_view(h, pauses)
        .filter(|p| !p.stopped)
        .map(|p| p.pause)
}

/// The facts every reader of a cause gathers alike: the clock, the fleet, the default queue,
/// the run's flow line (read) and the pause holding it. The queue depth and the timer's name
/// are the caller's: each has its own source of them.
pub(crate) async fn base_facts<'a>(
    svc: &'a Services,
    h: &RunHeader,
    now: u64,
    workers: &'a [WorkerInfo],
    held_by: Option<super::model::PauseView>,
) -> Result<WaitFacts<'a>, ApiError> {
    Ok(WaitFacts {
        now,
        workers,
        home_queue: svc.publisher.home_queue().unwrap_or_default(),
        line: line_of(&svc.store, h).await?,
        held_by,
        ..WaitFacts::default()
    })
}

/// True when the run's cause is its queue's backlog or a missing worker, so the queue's depth
/// counts: a runnable run (pending and not in a flow line, or a sleeping one whose time is up).
pub(crate) fn needs_depth(h: &RunHeader, f: &WaitFacts<'_>) -> bool {
    match h.status {
        RunStatus::Pending => f.line.as_ref().is_none_or(|l| l.rank.is_none()),
        RunStatus::Sleeping => h.wait_effect.is_none() && h.due.is_none_or(|d| d <= f.now),
        _ => false,
    }
}

/// The line of a pending run of a flow-control key.
pub(crate) async fn line_of(store: &ScriptStore, h: &RunHeader) -> Result<Option<LineFacts>, ApiError> {
    match &h.flow {
        Some(flow) if h.status == RunStatus::Pending => Ok(Some(store.flow_line(flow, &h.thread).await?)),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use savepoint_core::ids::ThreadId;
    use savepoint_store::{CatalogEntry, Flow, RetryBackoff};

    fn header(status: RunStatus, extra: &[(&str, &str)]) -> RunHeader {
        let mut fields = std::collections::BTreeMap::from([
            ("status".to_owned(), status.as_str().as_bytes().to_vec()),
            ("wf".to_owned(), b"order".to_vec()),
            ("wfv".to_owned(), b"1".to_vec()),
            ("updated".to_owned(), b"1000".to_vec()),
        ]);
        for (k, v) in extra {
            fields.insert((*k).to_owned(), v.as_bytes().to_vec());
        }
        RunHeader::from_fields(&ThreadId::new("t-1").unwrap(), &fields).unwrap()
    }

    fn worker(queue: &str, rate: f64) -> WorkerInfo {
        WorkerInfo {
            id: format!("w-{queue}"),
            workflows: vec![CatalogEntry {
                name: "order".into(),
                version: 1,
                min_version: 1,
                input_version: None,
                input_type: None,
            }],
            queue: queue.into(),
            until: 100_000,
            ttl_ms: 10_000,
            slices_per_sec: rate,
            ..Default::default()
        }
    }

    fn facts(workers: &[WorkerInfo]) -> WaitFacts<'_> {
        WaitFacts {
            now: 95_000,
            workers,
            home_queue: "tasks",
            ..WaitFacts::default()
        }
    }

    #[test]
    fn nothing_queued_while_every_worker_is_full_is_not_as_soon_as_a_worker_has_room() {
        let mut busy = worker("tasks", 50.0);
        (busy.concurrency, busy.in_flight) = (64, 64);
        let f = WaitFacts {
            depth: Some(0),
            ..facts(std::slice::from_ref(&busy))
        };
        let w = waiting(&header(RunStatus::Pending, &[]), &f).unwrap();
        assert_eq!(w.on, WaitingOn::Backlog);
        assert_eq!(w.estimate.at, None, "{w:?}");
        assert!(w.estimate.how.contains("w-tasks 64/64"), "{w:?}");
        // One free slot: it starts as soon as that worker takes it.
        busy.in_flight = 63;
        let f = WaitFacts {
            depth: Some(0),
            ..facts(std::slice::from_ref(&busy))
        };
        let w = waiting(&header(RunStatus::Pending, &[]), &f).unwrap();
        assert_eq!(w.estimate.at, Some(95_000), "{w:?}");
    }

    #[test]
    fn a_queued_run_is_estimated_from_the_depth_and_its_workers_pace() {
        let ws = [worker("tasks", 20.0), worker("other", 500.0)];
        let f = WaitFacts {
            depth: Some(40),
            ..facts(&ws)
        };
        let w = waiting(&header(RunStatus::Pending, &[]), &f).unwrap();
        assert_eq!(w.on, WaitingOn::Backlog);
        assert_eq!(w.estimate.at, Some(95_000 + 2_000), "{w:?}");
        assert_eq!(w.backlog.as_ref().unwrap().workers, 1);
        // Nobody on its queue: a worker is what it waits for.
        let h = header(RunStatus::Pending, &[("q", "gpu")]);
        let w = waiting(&h, &f).unwrap();
        assert_eq!(w.on, WaitingOn::Worker);
        assert!(w.estimate.at.is_none());
    }

    #[test]
    fn timers_back_offs_and_waits_say_until_when() {
        let ws = [worker("tasks", 1.0)];
        let f = facts(&ws);
        let w = waiting(&header(RunStatus::Sleeping, &[("due", "99000")]), &f).unwrap();
        assert_eq!(
            (w.on, w.until, w.estimate.at),
            (WaitingOn::Timer, Some(99_000), Some(99_000))
        );
        let h = header(
            RunStatus::Sleeping,
            &[("due", "99000"), ("wait_fx", "k1"), ("wait_fx_n", "2")],
        );
        let w = waiting(&h, &f).unwrap();
        assert_eq!((w.on, w.name.as_deref()), (WaitingOn::BackingOff, Some("k1")));
        let mut h = header(RunStatus::Running, &[]);
        assert!(waiting(&h, &f).is_none(), "a running run waits on nothing");
        h.retry_backoff = Some(RetryBackoff {
            until: 96_000,
            index: 3,
            attempt: 2,
        });
        assert_eq!(waiting(&h, &f).unwrap().estimate.at, Some(96_000));
        let h = header(
            RunStatus::Waiting,
            &[("wait_kind", "interrupt"), ("wait_name", "approve")],
        );
        let w = waiting(&h, &f).unwrap();
        assert_eq!((w.on, w.estimate.at), (WaitingOn::Human, None));
        let h = header(
            RunStatus::Waiting,
            &[
                ("wait_kind", "child"),
                ("wait_name", "c:1"),
                ("wait_payload", r#"{"thread_id":"t-1.c1"}"#),
                ("due", "97000"),
            ],
        );
        let w = waiting(&h, &f).unwrap();
        assert_eq!(
            (w.on, w.name.as_deref(), w.until),
            (WaitingOn::Child, Some("t-1.c1"), None)
        );
    }

    #[test]
    fn a_run_in_line_waits_for_a_slot_or_a_token() {
        let mut h = header(RunStatus::Pending, &[]);
        h.flow = Some(Flow {
            key: "order:acme".into(),
            limit: 2,
            rate: None,
        });
        let line = LineFacts {
            rank: Some(3),
            in_line: 5,
            holders: 2,
            tokens: None,
            last_release_at: Some(94_000),
            turnover_ms: Some(500),
            now: 95_000,
        };
        let f = WaitFacts {
            line: Some(line.clone()),
            ..facts(&[])
        };
        let w = waiting(&h, &f).unwrap();
        assert_eq!(w.on, WaitingOn::FlowSlot);
        // Four releases (three ahead, then its own) at 500 ms each.
        assert_eq!(w.estimate.at, Some(97_000), "{w:?}");
        // Slots free, a rate: it waits for tokens, one a second, none in the bucket.
        h.flow = Some(Flow {
            key: "order:acme".into(),
            limit: 10,
            rate: Some(1.0),
        });
        let f = WaitFacts {
            line: Some(LineFacts {
                tokens: Some((0.0, 95_000)),
                ..line
            }),
            ..facts(&[])
        };
        let w = waiting(&h, &f).unwrap();
        assert_eq!(
            (w.on, w.estimate.at, w.until),
            (WaitingOn::RateLimit, Some(99_000), Some(99_000))
        );
    }

    /// Found by the contract test's fuzzing: a run started with a start rate of 1e-300 per
    /// second made `GET /v1/runs?waiting_on=…` overflow its estimate (a panic in a debug
    /// build, a wrapped time in a release one). Rates, turnovers and paces at any extreme give
    /// a time, or none, never an overflow.
    #[test]
    fn estimates_at_extreme_rates_are_unknown_not_an_overflow() {
        let mut h = header(RunStatus::Pending, &[]);
        h.flow = Some(Flow {
            key: "k".into(),
            limit: 10,
            rate: Some(1e-300),
        });
        let line = LineFacts {
            rank: Some(3),
            in_line: u64::MAX,
            holders: 0,
            tokens: Some((0.0, u64::MAX)),
            last_release_at: Some(95_000),
            turnover_ms: Some(u64::MAX / 2),
            now: 95_000,
        };
        let f = WaitFacts {
            line: Some(line.clone()),
            ..facts(&[])
        };
        let w = waiting(&h, &f).unwrap();
        assert_eq!((w.on, w.estimate.at, w.until), (WaitingOn::RateLimit, None, None));
        assert!(w.estimate.how.contains("more than a century away"), "{w:?}");
        // A slot, the last of a line as long as u64's range, after a turnover of half of it
        // in ms.
        h.flow = Some(Flow {
            key: "k".into(),
            limit: 1,
            rate: None,
        });
        let f = WaitFacts {
            line: Some(LineFacts {
                holders: 1,
                rank: Some(u64::MAX - 1),
                ..line
            }),
            ..facts(&[])
        };
        assert_eq!(waiting(&h, &f).unwrap().estimate.at, None);
        // A backlog its workers take at a pace of one slice in ~3e290 years.
        let ws = [worker("tasks", 1e-300)];
        let f = WaitFacts {
            depth: Some(u32::MAX),
            ..facts(&ws)
        };
        let w = waiting(&header(RunStatus::Pending, &[]), &f).unwrap();
        assert_eq!((w.on, w.estimate.at), (WaitingOn::Backlog, None));
    }
}
