//! Lease heartbeat for long steps: every confirmed heartbeat moves the local lease deadline;
//! losing the lease cancels the step in flight.

use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use savepoint_core::lease::LeaseClock;
use savepoint_store::{Flow, Lease, ScriptStore, StoreError};

/// Extends `lease` every third of the lease length until dropped; each confirmed extension
/// moves `clock`; cancels `lost` when the store says the lease is gone (another worker took
/// it, or the run was cancelled), and `pause` when a pause now holds the run (the slice
/// yields at its next call; the next claim stops the run). Failed heartbeats do not cancel anything by themselves: the
/// local deadline runs out if Redis stops confirming, and the slice stops then.
pub(crate) struct Heartbeat(JoinHandle<()>);

impl Heartbeat {
    pub(crate) fn start(
        store: ScriptStore,
        lease: Lease,
        clock: LeaseClock,
        (lost, pause): (CancellationToken, CancellationToken),
        flow: Option<Flow>,
    ) -> Self {
        let every = (store.config().lease / 3).max(Duration::from_millis(50));
        Self(tokio::spawn(
            async move {
                let mut tick = tokio::time::interval(every);
                // After a stop (SIGSTOP, a suspended VM) one beat, not one per beat missed.
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    if clock.stalled() {
                        continue;
                    }
                    let sent = Instant::now();
                    match store.heartbeat(&lease).await {
                        Ok((_, paused)) => {
                            clock.confirmed(sent);
                            if let Some(p) = paused.filter(|_| !pause.is_cancelled()) {
                                tracing::info!(pause = %p, "the run is paused: yielding at its next call");
                                pause.cancel();
                            }
                            // The run's flow-control slot lives as long as its lease; the local
                            // deadline is bounded by the slot's too (`bind_slot`), so a step
                            // never runs on past its slot's expiry, when another run may take it.
                            if let Some(f) = &flow {
                                let sent = Instant::now();
                                match store.flow_extend(f, &lease.thread, lease.fence).await {
                                    Ok(true) => clock.slot_confirmed(sent),
                                    Ok(false) => {
                                        tracing::warn!(
                                            "the run's flow-control slot is gone: stopping the step in flight"
                                        );
                                        lost.cancel();
                                        return;
                                    }
                                    Err(e) => tracing::warn!(
                                        error = %e,
                                        "extending the flow-control slot failed; retrying until its local deadline"
                                    ),
                                }
                            }
                        }
                        Err(e) if e.is_lease_lost() || matches!(e, StoreError::Missing(_)) => {
                            tracing::warn!(error = %e, "lease lost: cancelling the step in flight");
                            lost.cancel();
                            return;
                        }
                        Err(e) => tracing::warn!(
                            error = %e,
                            left_ms = clock.remaining().as_millis() as u64,
                            "heartbeat failed; retrying until the local lease deadline"
                        ),
                    }
                }
            }
            // (In the slice's span: its lines carry the run's and worker's ids once.)
            .instrument(tracing::Span::current()),
        ))
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}
