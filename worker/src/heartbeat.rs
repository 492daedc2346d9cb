//! Lease heartbeat for long steps: losing the lease cancels the step in flight.

use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use savepoint::store::{Lease, RedisStore};

/// Extends `lease` every third of the lease length until dropped; cancels `lost` when the
/// store says the lease is gone (another worker took it, or the run was cancelled).
pub(crate) struct Heartbeat(JoinHandle<()>);

impl Heartbeat {
    pub(crate) fn start(store: RedisStore, lease: Lease, lost: CancellationToken) -> Self {
        let every = (store.config().lease / 3).max(Duration::from_millis(50));
        Self(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tick.tick().await;
                match store.heartbeat(&lease).await {
                    Ok(_) => {}
                    Err(e) if e.is_lease_lost() || matches!(e, savepoint::store::StoreError::Missing(_)) => {
                        tracing::warn!(thread.id = %lease.thread, error = %e, "lease lost: cancelling the step in flight");
                        lost.cancel();
                        return;
                    }
                    Err(e) => tracing::warn!(thread.id = %lease.thread, error = %e, "heartbeat failed; retrying"),
                }
            }
        }))
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}
