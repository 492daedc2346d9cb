//! Load on one worker (invariant 18): no task waits longer than [`BOUND`] beyond its
//! allowance (a sticky queue's TTL) while a worker has a free slot and asks for one.
//!
//! The embedded queue pushes tasks to its consumers up to their prefetch, as RabbitMQ does,
//! whether or not their workers have a free slot, and measures how long a task waited while
//! another consumer was asking ([`MemQueue::starved`]). The monitor samples it whenever faults
//! are off (the heal, and this phase). The phase has two rounds. In each, every worker
//! restarts with four slots and the others stay down while worker 0 takes a batch of `hog`
//! runs; then the others come back idle and six short runs start. The first batch is eight
//! runs of three 4 s steps (yielding to its sticky queue between them): worker 0 runs four and
//! holds four, every slot busy throughout. The second is sixty runs of one 700 ms step: a
//! slot frees every 175 ms and finds a held task waiting, so "every slot busy this long" never
//! holds while the worker stays behind by seconds. A worker that never gives back what it
//! holds (`--no-hand-back`) keeps the first batch's four waiting about 8 s; one that measures
//! only an unbroken spell of busy slots keeps the second's about 8 s.

use axum::http::Method;
use savepoint_broker::mem::{MemQueue, Starved};
use savepoint_store::RunStatus;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

use super::world::World;
use savepoint_core::ids::ThreadId;

/// The longest a task may wait beyond its allowance while a worker asks for one: a busy
/// worker gives back what it holds after `worker.hand_back_ms` (1 s) once the fleet's
/// heartbeats show room (it re-reads them when its copy is over 1 s old), with room to spare.
pub(super) const BOUND: Duration = Duration::from_secs(5);

/// The worst starvation seen while it watched.
#[derive(Default)]
pub(super) struct Liveness {
    worst: Option<Starved>,
    samples: u64,
}

impl Liveness {
    /// Notes how long the queue's longest-starved task has waited now.
    pub(super) fn sample(&mut self, queue: &MemQueue) {
        self.samples += 1;
        if let Some(s) = queue.starved() {
            if self.worst.as_ref().is_none_or(|w| s.waited > w.waited) {
                self.worst = Some(s);
            }
        }
    }

    /// The violation, if a task starved past [`BOUND`].
    pub(super) fn check(&self, bad: &mut Vec<String>) {
        if let Some(w) = self.worst.as_ref().filter(|w| w.waited > BOUND) {
            bad.push(format!(
                "liveness (18): {} (bound {} ms, over {} samples)",
                w.what,
                BOUND.as_millis(),
                self.samples
            ));
        }
    }

    /// The longest wait seen (ms), for the trace.
    pub(super) fn worst_ms(&self) -> u128 {
        self.worst.as_ref().map_or(0, |w| w.waited.as_millis())
    }
}

/// The busy-worker phase (after every other check; faults are off): long slices, then short.
pub(super) async fn busy_worker(w: &mut World, live: &mut Liveness, bad: &mut Vec<String>) {
    let Some(queue) = w.queue.clone() else { return };
    w.cfg.worker.concurrency = 4;
    // Eight runs of 4 s steps: w0 runs four and holds four, every slot busy throughout.
    round(w, &queue, live, bad, ("busy-hog", 8, 3, 4000)).await;
    // Sixty runs of one 700 ms step: a slot frees every 175 ms, and each finds one of the
    // fifty-odd held tasks waiting; served here alone, the last would wait about 8 s.
    round(w, &queue, live, bad, ("busy-short", 60, 1, 700)).await;
    crash_loop(w, &queue, live, bad).await;
}

/// Crashes in a row in the crash-loop round: past the delivery limit (20), three times over
/// (a cap on renewals, as the first version had at 4, fails here).
const CRASHES: usize = 70;

/// A worker in a crash loop (invariant 22): w0 alone, started each time with a failpoint that
/// kills it as it takes its first task, before the claim (a worker dying of something no run
/// caused), so every death returns, counted, that task and the ones pushed to it behind it,
/// [`CRASHES`] times in a row. Then a healthy fleet: every run must complete and no task may
/// have been dead-lettered meanwhile (each was counted up to 70 times where the limit is 20;
/// a run whose worker does crash on it is the run's own crash count's to stop, at the claim).
async fn crash_loop(w: &mut World, queue: &Arc<MemQueue>, live: &mut Liveness, bad: &mut Vec<String>) {
    let n = w.workers.len();
    for i in 0..n {
        w.crash_worker(i, 0);
    }
    let dead_before = queue.stats().dead_lettered;
    let runs = start(w, "busy-loop", 12, 1, 20, bad).await;
    let mut crashes = 0;
    while crashes < CRASHES {
        w.start_worker_with(0, "worker.before_claim=abort@1");
        let until = w.now() + 10_000;
        while !w.workers[0].as_ref().is_some_and(|x| x.crash.is_cancelled()) && w.now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if w.now() >= until {
            bad.push("busy (crash loop): the failpoint did not kill w0 within 10 s".into());
            break;
        }
        w.crash_worker(0, 0);
        crashes += 1;
    }
    w.trace.line(
        w.now(),
        format!("busy: w0 crashed {crashes} times in a row; the fleet comes back"),
    );
    for i in 0..n {
        w.start_worker(i);
    }
    until_ended(w, queue, live, &runs, bad).await;
    let dead = queue.stats().dead_lettered - dead_before;
    if dead > 0 {
        bad.push(format!(
            "crash loop (22): {dead} healthy task(s) dead-lettered for the delivery limit while one worker crashed {crashes} times"
        ));
    }
}

/// One round: every worker restarts, w0 alone takes `count` `hog` runs (`steps` steps of `ms`
/// each), then the others come back idle and six short runs start; every run must end.
async fn round(
    w: &mut World,
    queue: &Arc<MemQueue>,
    live: &mut Liveness,
    bad: &mut Vec<String>,
    (prefix, count, steps, ms): (&str, usize, u64, u64),
) {
    let n = w.workers.len();
    for i in 0..n {
        w.crash_worker(i, 0);
    }
    w.start_worker(0);
    w.trace.line(
        w.now(),
        format!("busy ({prefix}): every worker restarts with 4 slots; w0 alone first"),
    );
    watch(w, queue, live, Duration::from_millis(500)).await;
    let hogs = start(w, prefix, count, steps, ms, bad).await;
    watch(w, queue, live, Duration::from_millis(1500)).await;
    for i in 1..n {
        w.start_worker(i);
    }
    w.trace.line(w.now(), "busy: the other workers come back idle".into());
    watch(w, queue, live, Duration::from_millis(300)).await;
    let quick = start(w, &format!("{prefix}-quick"), 6, 1, 20, bad).await;
    let all: Vec<ThreadId> = hogs.into_iter().chain(quick).collect();
    until_ended(w, queue, live, &all, bad).await;
    w.trace.line(
        w.now(),
        format!("busy: every run ended; the longest starvation {} ms", live.worst_ms()),
    );
}

/// Watches until every run of `all` has completed (one that ended otherwise, or is open
/// after 120 s, is a violation).
async fn until_ended(w: &World, queue: &Arc<MemQueue>, live: &mut Liveness, all: &[ThreadId], bad: &mut Vec<String>) {
    let deadline = w.now() + 120_000;
    loop {
        watch(w, queue, live, Duration::from_millis(500)).await;
        let mut open = Vec::new();
        for t in all {
            match w.read(t).await {
                Some((h, _)) if h.status == RunStatus::Completed => {}
                Some((h, _)) if h.status.is_final() || h.status == RunStatus::Blocked => {
                    bad.push(format!("busy: run {t} ended {}: {:?}", h.status.as_str(), h.reason));
                }
                _ => open.push(t.clone()),
            }
        }
        if open.is_empty() {
            return;
        }
        if w.now() > deadline {
            bad.push(format!("busy: {} run(s) still open after 120 s: {open:?}", open.len()));
            return;
        }
    }
}

/// Samples the queue every 100 ms for `d`.
async fn watch(w: &World, queue: &Arc<MemQueue>, live: &mut Liveness, d: Duration) {
    let until = w.now() + d.as_millis() as u64;
    while w.now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
        live.sample(queue);
    }
}

/// Starts `count` `hog` runs of `steps` steps of `ms` each (ids `prefix-i`).
async fn start(w: &World, prefix: &str, count: usize, steps: u64, ms: u64, bad: &mut Vec<String>) -> Vec<ThreadId> {
    let mut ids = Vec::new();
    for i in 0..count {
        let Ok(t) = ThreadId::new(format!("{prefix}-{i}")) else {
            continue;
        };
        let body = json!({"workflow": "hog", "thread_id": t.as_str(), "input": {"steps": steps, "ms": ms}});
        let (status, resp) = w.api(Method::POST, "/v1/runs", Some(body)).await;
        if status != 201 {
            bad.push(format!("busy: starting {t} answered {status}: {resp}"));
        }
        ids.push(t);
    }
    w.trace.line(w.now(), format!("busy: started {count} {prefix} runs"));
    ids
}
