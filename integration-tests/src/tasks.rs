//! Reading the task queue directly, to check what the scheduler published.

use savepoint_broker::Broker;
use savepoint_core::protocol::Task;
use savepoint_runtime::config::Config;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// A task taken from the queue.
#[derive(Debug, Clone)]
pub struct SeenTask {
    /// The decoded task.
    pub task: Task,
    /// Its AMQP headers (e.g. `traceparent`).
    pub headers: BTreeMap<String, String>,
    /// When this test received it.
    pub at: Instant,
}

/// Consumes (and acks) the namespace's task queue until `done(seen so far)` is true; panics
/// when `deadline` passes first. Nothing else may consume the queue meanwhile (no worker).
pub async fn collect_tasks(
    cfg: &Config,
    deadline: Duration,
    mut done: impl FnMut(&[SeenTask]) -> bool,
) -> Vec<SeenTask> {
    let broker = Broker::connect(cfg.broker(), Duration::from_secs(10))
        .await
        .expect("connect broker");
    let stop = CancellationToken::new();
    let mut consumer = broker.consumer("test-collector", stop.clone());
    let mut seen = Vec::new();
    let start = Instant::now();
    while !done(&seen) {
        let left = deadline.checked_sub(start.elapsed()).unwrap_or_else(|| {
            panic!(
                "timed out after {deadline:?} collecting tasks; got {}: {seen:?}",
                seen.len()
            )
        });
        // Wake up now and then so a time-based `done` is seen without a message arriving.
        let wait = left.min(Duration::from_millis(200));
        let Ok(Some(d)) = tokio::time::timeout(wait, consumer.next()).await else {
            continue;
        };
        d.ack().await.expect("ack");
        let task = Task::decode(&d.data).expect("task decodes");
        seen.push(SeenTask {
            task,
            headers: d.headers.clone(),
            at: Instant::now(),
        });
    }
    stop.cancel();
    seen
}
