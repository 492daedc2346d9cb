//! The due scanner (ARCHITECTURE §10, §7b): every tick, hands out the overdue runs of every
//! partition and publishes a `Due` task for each. `scan_due` moves each handed-out run's due time one
//! period ahead atomically, so concurrent replicas never publish the same run twice within a
//! period, and a run whose task is lost is rung again one period later.

use futures::StreamExt;
use savepoint_core::ids::ThreadId;
use savepoint_core::metrics::metrics;
use savepoint_core::protocol::TaskReason;
use savepoint_store::{owns_partition, ScriptStore, StoreError};
use std::time::Duration;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::publish::{Publisher, Sent};

/// Publishes in flight at once per batch (each waits for a broker confirm).
const PUBLISH_CONCURRENCY: usize = 32;
/// Partitions scanned at once.
const SCAN_CONCURRENCY: usize = 32;
/// Extra scan rounds on a partition whose batch came back full, per tick.
const MAX_ROUNDS: usize = 8;

/// Scanner settings.
#[derive(Debug, Clone)]
pub struct ScanSettings {
    /// Time between ticks.
    pub interval: Duration,
    /// Runs handed out per partition per round.
    pub batch: u32,
    /// How long a handed-out run is not handed out again.
    pub period: Duration,
    /// Split the partitions among the live replicas (false: scan every partition, racing the
    /// other replicas; the simulator does this to keep the race under test).
    pub split: bool,
}

/// Runs until `shutdown`. Errors are logged and the next tick tries again (Redis and
/// RabbitMQ reconnect on their own); the scanner never stops on its own.
///
/// Replicas split the partitions without a leader: each registers under its own id every
/// tick (for [`Membership::ttl`]) and scans the partitions it owns among the live replicas
/// ([`owns_partition`]). A replica that stops is forgotten when its registration expires
/// (at once on a clean shutdown), and its partitions fall to the others.
pub async fn run(store: ScriptStore, publisher: Publisher, s: ScanSettings, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(s.interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut failing = false;
    let mut members = Membership::new(s.interval);
    let mut ticks = 0u64;
    let mut walked = std::collections::HashMap::new();
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        if s.split {
            members.refresh(&store).await;
        }
        ticks += 1;
        if ticks.is_multiple_of(PAUSE_SWEEP_TICKS) {
            pause_sweep(&store, &publisher, &members, &mut walked).await;
        }
        let started = tokio::time::Instant::now();
        let result = scan_all(&store, &publisher, &s, &members, &shutdown).await;
        metrics().scan_tick_seconds.observe(started.elapsed().as_secs_f64());
        match result {
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
    if s.split {
        members.leave(&store).await;
    }
    debug!("due scanner stopped");
}

/// Ticks between two pause sweeps (`pause_sweep`).
const PAUSE_SWEEP_TICKS: u64 = 25;

/// The net under pause and resume (ARCHITECTURE §16b), over the partitions this replica
/// owns: each partition's copy of the pauses is made to match the catalog, and runs no pause
/// holds any more are put back. Failures are logged; the next sweep tries again.
async fn pause_sweep(
    store: &ScriptStore,
    publisher: &Publisher,
    members: &Membership,
    walked: &mut std::collections::HashMap<u16, String>,
) {
    let catalog = match store.pauses().await {
        Ok(c) => c,
        Err(e) => return debug!(error = %e, "pause sweep: reading the pauses failed"),
    };
    if let Ok(n) = store.paused_count().await {
        metrics().runs_paused.set(n as i64);
    }
    for p in (0..store.keys().partitions()).filter(|p| members.owns(*p)) {
        match store
            .pause_sweep(p, &catalog, publisher.home_queue(), walked.get(&p).map(String::as_str))
            .await
        {
            Ok((u, gen)) => {
                if u.resumed > 0 {
                    info!(partition = p, resumed = u.resumed, "pause sweep put runs back");
                }
                match gen {
                    Some(g) => walked.insert(p, g),
                    None => walked.remove(&p),
                };
            }
            Err(e) => return debug!(error = %e, "pause sweep failed"),
        }
    }
}

/// This replica's view of the live scheduler replicas.
pub(crate) struct Membership {
    /// This replica's id.
    pub(crate) id: String,
    /// How long a registration lives without a refresh.
    pub(crate) ttl: Duration,
    /// The live replicas at the last refresh (empty until one succeeds: scan everything).
    pub(crate) live: Vec<String>,
}

impl Membership {
    pub(crate) fn new(interval: Duration) -> Self {
        Self {
            id: format!(
                "{}-{}",
                savepoint_core::ids::host_name(),
                savepoint_core::entropy::uuid().simple()
            ),
            ttl: (interval * 10).clamp(Duration::from_secs(2), Duration::from_secs(10)),
            live: Vec::new(),
        }
    }

    async fn refresh(&mut self, store: &ScriptStore) {
        match store.register_scheduler(&self.id, self.ttl).await {
            Ok(live) => {
                if live != self.live {
                    debug!(replicas = live.len(), "scheduler replicas changed");
                }
                self.live = live;
            }
            // Keep the last view; a replica missing from it scans everything.
            Err(e) => debug!(error = %e, "refreshing the scheduler registration failed"),
        }
    }

    async fn leave(&self, store: &ScriptStore) {
        if let Err(e) = store.register_scheduler(&self.id, Duration::ZERO).await {
            debug!(error = %e, "removing the scheduler registration failed");
        }
    }

    /// True when this replica scans partition `p`.
    pub(crate) fn owns(&self, p: u16) -> bool {
        owns_partition(&self.id, &self.live, p)
    }
}

/// One tick of the real scanner over every partition, as a replica alone (benchmarks).
pub async fn tick_alone(store: &ScriptStore, publisher: &Publisher, s: &ScanSettings) -> Result<usize, StoreError> {
    let members = Membership::new(s.interval);
    scan_all(store, publisher, s, &members, &CancellationToken::new()).await
}

/// One tick over every partition this replica owns, `SCAN_CONCURRENCY` partitions at once
/// (their scripts share the multiplexed connection, so they travel pipelined); returns the
/// number of runs handed out. An error on one partition does not stop the others.
pub(crate) async fn scan_all(
    store: &ScriptStore,
    publisher: &Publisher,
    s: &ScanSettings,
    members: &Membership,
    shutdown: &CancellationToken,
) -> Result<usize, StoreError> {
    let owned: Vec<u16> = (0..store.keys().partitions()).filter(|p| members.owns(*p)).collect();
    metrics().scan_partitions.set(owned.len() as i64);
    let results: Vec<Result<usize, StoreError>> = futures::stream::iter(owned)
        .map(|p| async move {
            let mut total = 0;
            for _ in 0..MAX_ROUNDS {
                if shutdown.is_cancelled() {
                    break;
                }
                let n = scan_partition(store, publisher, p, s).await?;
                total += n;
                if n < s.batch as usize {
                    break;
                }
            }
            Ok(total)
        })
        .buffer_unordered(SCAN_CONCURRENCY)
        .collect()
        .await;
    let mut total = 0;
    let mut first_error = None;
    for r in results {
        match r {
            Ok(n) => total += n,
            Err(e) => first_error = first_error.or(Some(e)),
        }
    }
    match first_error {
        Some(e) if total == 0 => Err(e),
        _ => Ok(total),
    }
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
                .publish_on(
                    r.queue.as_deref(),
                    r.holder.as_deref(),
                    &r.thread,
                    None,
                    TaskReason::Due,
                    r.trace.as_deref(),
                )
                .await
            {
                Ok(Sent::Queue) => Some((r.thread, r.rv)),
                // Not marked: a task in a sticky queue keeps the run's nearer net.
                Ok(Sent::Sticky) => None,
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
