//! The due scanner (DESIGN §2, §5): every tick, hands out the overdue runs of every partition
//! and publishes a `Due` task for each. `scan_due` moves each handed-out run's due time one
//! period ahead atomically, so concurrent replicas never publish the same run twice within a
//! period, and a run whose task is lost is rung again one period later.

use futures::StreamExt;
use savepoint::ids::ThreadId;
use savepoint::metrics::metrics;
use savepoint::protocol::TaskReason;
use savepoint::store::{ScriptStore, StoreError};
use std::time::Duration;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::publish::Publisher;

/// Publishes in flight at once per batch (each waits for a broker confirm).
const PUBLISH_CONCURRENCY: usize = 32;
/// Extra scan rounds on a partition whose batch came back full, per tick.
const MAX_ROUNDS: usize = 8;

/// Scanner settings.
#[derive(Debug, Clone)]
pub(crate) struct ScanSettings {
    /// Time between ticks.
    pub interval: Duration,
    /// Runs handed out per partition per round.
    pub batch: u32,
    /// How long a handed-out run is not handed out again.
    pub period: Duration,
}

/// Runs until `shutdown`. Errors are logged and the next tick tries again (Redis and
/// RabbitMQ reconnect on their own); the scanner never stops on its own.
pub(crate) async fn run(store: ScriptStore, publisher: Publisher, s: ScanSettings, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(s.interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        match scan_all(&store, &publisher, &s, &shutdown).await {
            Ok(n) => {
                if failing {
                    warn!("due scanner recovered");
                    failing = false;
                }
                if n > 0 {
                    debug!(handed_out = n, "due scan");
                }
            }
            // Log the first failure of a streak only: Redis down means every tick fails.
            Err(e) if !failing => {
                warn!(error = %e, "due scan failed; retrying next tick");
                failing = true;
            }
            Err(e) => debug!(error = %e, "due scan still failing"),
        }
    }
    debug!("due scanner stopped");
}

/// One tick over every partition; returns the number of runs handed out.
async fn scan_all(
    store: &ScriptStore,
    publisher: &Publisher,
    s: &ScanSettings,
    shutdown: &CancellationToken,
) -> Result<usize, StoreError> {
    let mut total = 0;
    for p in 0..store.keys().partitions() {
        for _ in 0..MAX_ROUNDS {
            if shutdown.is_cancelled() {
                return Ok(total);
            }
            let n = scan_partition(store, publisher, p, s).await?;
            total += n;
            if n < s.batch as usize {
                break;
            }
        }
    }
    Ok(total)
}

/// Hands out one batch of partition `p`, publishes a task for each run, and marks the runs
/// whose task the broker confirmed, so the safety net leaves them to the queue.
async fn scan_partition(
    store: &ScriptStore,
    publisher: &Publisher,
    p: u16,
    s: &ScanSettings,
) -> Result<usize, StoreError> {
    let (now, rung) = store.scan_due(p, s.batch, s.period).await?;
    if rung.is_empty() {
        return Ok(0);
    }
    metrics().scanned.inc_by(rung.len() as u64);
    for r in &rung {
        if let Some(due) = r.due {
            metrics()
                .due_lag_seconds
                .observe(now.saturating_sub(due) as f64 / 1000.0);
        }
    }
    let n = rung.len();
    let confirmed: Vec<(ThreadId, u64)> = futures::stream::iter(rung)
        .map(|r| async move {
            match publisher
                .publish(&r.thread, None, TaskReason::Due, r.trace.as_deref())
                .await
            {
                Ok(()) => Some((r.thread, r.rv)),
                Err(e) => {
                    // The run keeps its (moved) due time: it is handed out again next period.
                    warn!(thread.id = %r.thread, error = %e, "publishing a due task failed");
                    None
                }
            }
        })
        .buffer_unordered(PUBLISH_CONCURRENCY)
        .filter_map(|x| async move { x })
        .collect()
        .await;
    match store.mark_queued(&confirmed).await {
        Ok(marked) => {
            metrics().queue_marked.inc_by(marked);
        }
        Err(e) => debug!(error = %e, "marking due tasks queued failed; they may be rung once more"),
    }
    Ok(n)
}
