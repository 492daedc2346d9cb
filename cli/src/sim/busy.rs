//! Load on one worker (invariant 18): no task waits longer than [`BOUND`] beyond its
//! allowance (a sticky queue's TTL) while a worker has a free slot and asks for one.
//!
//! The embedded queue pushes tasks to its consumers up to their prefetch, as RabbitMQ does,
//! whether or not their workers have a free slot, and measures how long a task waited while
//! another consumer was asking ([`MemQueue::starved`]). The monitor samples it whenever faults
//! are off (the heal, and this phase). The phase: every worker restarts with four slots, the
//! others stay down while worker 0 takes eight `hog` runs (three steps of 4 s each, yielding
//! to its sticky queue between them): it runs four and holds the other four. Then the others
//! come back idle and six short runs start. A worker that never gives back what it holds
//! (`--no-hand-back`) keeps its four waiting about 8 s, and its share of the short ones behind
//! them, while the others have room.

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

/// The busy-worker phase (after every other check; faults are off).
pub(super) async fn busy_worker(w: &mut World, live: &mut Liveness, bad: &mut Vec<String>) {
    let Some(queue) = w.queue.clone() else { return };
    let n = w.workers.len();
    w.cfg.worker.concurrency = 4;
    for i in 0..n {
        w.crash_worker(i, 0);
    }
    w.start_worker(0);
    w.trace.line(
        w.now(),
        "busy: every worker restarts with 4 slots; w0 alone first".into(),
    );
    watch(w, &queue, live, Duration::from_millis(500)).await;
    let hogs = start(w, "busy-hog", 8, 3, 4000, bad).await;
    watch(w, &queue, live, Duration::from_millis(1500)).await;
    for i in 1..n {
        w.start_worker(i);
    }
    w.trace.line(w.now(), "busy: the other workers come back idle".into());
    watch(w, &queue, live, Duration::from_millis(300)).await;
    let quick = start(w, "busy-quick", 6, 1, 20, bad).await;
    let deadline = w.now() + 120_000;
    let all: Vec<ThreadId> = hogs.into_iter().chain(quick).collect();
    loop {
        watch(w, &queue, live, Duration::from_millis(500)).await;
        let mut open = Vec::new();
        for t in &all {
            match w.read(t).await {
                Some((h, _)) if h.status == RunStatus::Completed => {}
                Some((h, _)) if h.status.is_final() || h.status == RunStatus::Blocked => {
                    bad.push(format!("busy: run {t} ended {}: {:?}", h.status.as_str(), h.reason));
                }
                _ => open.push(t.clone()),
            }
        }
        if open.is_empty() {
            break;
        }
        if w.now() > deadline {
            bad.push(format!("busy: {} run(s) still open after 120 s: {open:?}", open.len()));
            break;
        }
    }
    w.trace.line(
        w.now(),
        format!("busy: every run ended; the longest starvation {} ms", live.worst_ms()),
    );
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
