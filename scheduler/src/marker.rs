//! Marks runs whose task the broker confirmed (DESIGN's due-time rule, ARCHITECTURE §5b), off
//! the request path and in batches: an API request answers as soon as its task is confirmed,
//! and one background task sends the marks, many per round trip. A mark that lands late is
//! harmless (the store skips runs claimed since), and one that is never sent only means one
//! more safety-net ring.

use savepoint::ids::ThreadId;
use savepoint::metrics::metrics;
use savepoint::store::RedisStore;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Largest batch of marks sent at once.
const BATCH: usize = 512;

/// A handle to the scheduler's marker task. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct Marker {
    tx: mpsc::UnboundedSender<(ThreadId, u64)>,
}

impl Marker {
    /// Starts the marker task on `store`; it drains what is queued and stops with `stop`.
    pub(crate) fn spawn(store: RedisStore, stop: CancellationToken) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<(ThreadId, u64)>();
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(BATCH);
            loop {
                let first = tokio::select! {
                    _ = stop.cancelled() => None,
                    m = rx.recv() => m,
                };
                let Some(first) = first else { break };
                batch.push(first);
                while batch.len() < BATCH {
                    match rx.try_recv() {
                        Ok(m) => batch.push(m),
                        Err(_) => break,
                    }
                }
                match store.mark_queued(&batch).await {
                    Ok(n) => {
                        metrics().queue_marked.inc_by(n);
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, runs = batch.len(), "marking tasks queued failed; they may be rung once more")
                    }
                }
                batch.clear();
            }
        });
        Self { tx }
    }

    /// Queues a mark for a run whose task the broker confirmed (ring version `rv`).
    pub(crate) fn mark(&self, thread: ThreadId, rv: u64) {
        // Only fails once the task stopped (shutdown): the safety net covers it.
        let _ = self.tx.send((thread, rv));
    }
}
