//! Marks runs whose task the broker confirmed (the due-time rule, ARCHITECTURE §7b), off the
//! request path and in batches: an API request answers as soon as its task is confirmed, and
//! one background task sends the marks, many per round trip. A mark that lands late is
//! harmless (the store skips runs claimed since), and one that is never sent only means one
//! more safety-net ring.

use savepoint_core::ids::ThreadId;
use savepoint_core::metrics::metrics;
use savepoint_store::ScriptStore;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Largest batch of marks sent at once.
const BATCH: usize = 512;

/// A handle to the scheduler's marker task. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct Marker {
    tx: mpsc::UnboundedSender<Mark>,
}

#[derive(Debug)]
enum Mark {
    /// A task for a run made runnable (with its ring version): `mark_queued`.
    Queued(ThreadId, u64),
    /// The start task of a new run: `confirm_started` (one ZREM).
    Started(ThreadId),
}

impl Marker {
    /// Starts the marker task on `store`; it drains what is queued and stops with `stop`.
    pub(crate) fn spawn(store: ScriptStore, stop: CancellationToken) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<Mark>();
        tokio::spawn(async move {
            loop {
                let first = tokio::select! {
                    biased;
                    _ = stop.cancelled() => None,
                    m = rx.recv() => m,
                };
                let Some(first) = first else { break };
                let (mut queued, mut started) = (Vec::new(), Vec::new());
                let mut take = |m: Mark| match m {
                    Mark::Queued(t, rv) => queued.push((t, rv)),
                    Mark::Started(t) => started.push(t),
                };
                take(first);
                for _ in 1..BATCH {
                    match rx.try_recv() {
                        Ok(m) => take(m),
                        Err(_) => break,
                    }
                }
                send(&store, &queued, &started).await;
            }
        });
        Self { tx }
    }

    /// Queues a mark for a run whose task the broker confirmed (ring version `rv`).
    pub(crate) fn mark(&self, thread: ThreadId, rv: u64) {
        // Only fails once the task stopped (shutdown): the safety net covers it.
        let _ = self.tx.send(Mark::Queued(thread, rv));
    }

    /// Queues the confirm of a new run's start task.
    pub(crate) fn started(&self, thread: ThreadId) {
        let _ = self.tx.send(Mark::Started(thread));
    }
}

async fn send(store: &ScriptStore, queued: &[(ThreadId, u64)], started: &[ThreadId]) {
    if !queued.is_empty() {
        match store.mark_queued(queued).await {
            Ok(n) => {
                metrics().queue_marked.inc_by(n);
            }
            Err(e) => {
                tracing::debug!(error = %e, runs = queued.len(), "marking tasks queued failed; they may be rung once more")
            }
        }
    }
    if !started.is_empty() {
        match store.confirm_started(started).await {
            Ok(()) => {
                metrics().queue_marked.inc_by(started.len() as u64);
            }
            Err(e) => {
                tracing::debug!(error = %e, runs = started.len(), "confirming start tasks failed; they are rung once more")
            }
        }
    }
}
