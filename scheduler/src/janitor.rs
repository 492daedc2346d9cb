//! The janitor of effect records: every [`SWEEP_EVERY`] (and at start-up) each scheduler
//! replica gives the effect TTL to done records left without expiry by runs that ended or are
//! gone (`ScriptStore::sweep_done_records`). A done record is kept without expiry only while
//! its run may still replay the call; the paths that end a run without journaling it (a restart
//! that dropped the entry, a run that failed, a worker that died between the commit and the
//! expiry, a cancel whose scheduler died before settling its keys) would otherwise leave it
//! in Redis for ever. Memory, never a repeat: the record then lives its dedup window like any
//! journaled one.

use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use savepoint_store::ScriptStore;

/// How often each replica sweeps.
pub(crate) const SWEEP_EVERY: Duration = Duration::from_secs(600);

/// Sweeps at start-up and every [`SWEEP_EVERY`] until `stop`.
pub(crate) async fn run(store: ScriptStore, stop: CancellationToken) {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let started = tokio::time::Instant::now();
        match store.sweep_done_records().await {
            Ok((read, 0)) => {
                debug!(records = read, elapsed = ?started.elapsed(), "effect records swept; none left behind")
            }
            Ok((read, expired)) => info!(
                records = read,
                expired,
                elapsed = ?started.elapsed(),
                "gave the effect TTL to done records that ended runs left without expiry"
            ),
            Err(e) => warn!(error = %e, "sweeping effect records failed; the next sweep tries again"),
        }
    }
}
