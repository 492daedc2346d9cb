//! The due scanner (DESIGN §2, §5): every tick, hands out the overdue runs of every partition
//! and publishes a `Due` task for each. `scan_due` moves each handed-out run's due time one
//! period ahead atomically, so concurrent replicas never publish the same run twice within a
//! period, and a run whose task is lost is rung again one period later.

use futures::StreamExt;
use savepoint::ids::ThreadId;
use savepoint::metrics::metrics;
use savepoint::protocol::TaskReason;
use savepoint::store::{RedisStore, StoreError};
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
pub(crate) async fn run(store: RedisStore, publisher: Publisher, s: ScanSettings, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(s.interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
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
    store: &RedisStore,
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

/// Hands out one batch of partition `p` and publishes a task for each run.
async fn scan_partition(
    store: &RedisStore,
    publisher: &Publisher,
    p: u16,
    s: &ScanSettings,
) -> Result<usize, StoreError> {
    let (now, threads) = store.scan_due(p, s.batch, s.period).await?;
    if threads.is_empty() {
        return Ok(0);
    }
    metrics().scanned.inc_by(threads.len() as u64);
    let meta = run_meta(store, &threads).await.unwrap_or_else(|e| {
        debug!(error = %e, "reading trace context of due runs failed; publishing without it");
        vec![(None, None); threads.len()]
    });
    for (_, due) in &meta {
        if let Some(due) = due {
            metrics()
                .due_lag_seconds
                .observe(now.saturating_sub(*due) as f64 / 1000.0);
        }
    }
    let n = threads.len();
    futures::stream::iter(threads.into_iter().zip(meta))
        .for_each_concurrent(PUBLISH_CONCURRENCY, |(thread, (trace, _))| async move {
            if let Err(e) = publisher
                .publish(&thread, None, TaskReason::Due, trace.as_deref())
                .await
            {
                // The run keeps its (moved) due time: it is handed out again next period.
                warn!(thread.id = %thread, error = %e, "publishing a due task failed");
            }
        })
        .await;
    Ok(n)
}

/// The trace context and recorded due time of each run, in one pipelined round trip.
async fn run_meta(store: &RedisStore, threads: &[ThreadId]) -> Result<Vec<(Option<String>, Option<u64>)>, StoreError> {
    let mut pipe = redis::pipe();
    for t in threads {
        pipe.cmd("HMGET").arg(store.keys().run(t).run).arg("trace").arg("due");
    }
    let mut conn = store.connection();
    let rows: Vec<(Option<String>, Option<String>)> = pipe.query_async(&mut conn).await?;
    Ok(rows
        .into_iter()
        .map(|(trace, due)| (trace.filter(|t| !t.is_empty()), due.and_then(|d| d.parse().ok())))
        .collect())
}
