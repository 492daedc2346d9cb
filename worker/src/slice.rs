//! One slice of a run: compatibility checks, replay + live calls, then complete, fail,
//! suspend or yield (publishing a continuation task).

use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use savepoint::metrics::{inc, metrics};
use savepoint::protocol::{Task, TaskReason};
use savepoint::store::redis::SCHEMA_VERSION;
use savepoint::store::{Claimed, Lease, RunStatus};
use savepoint::workflow::{Ctx, CtxParts, SliceExit};

use crate::handle::Shared;
use crate::heartbeat::Heartbeat;

/// Why this worker cannot serve a claimed run, if it cannot.
fn incompatibility(shared: &Shared, c: &Claimed) -> Option<String> {
    let h = &c.header;
    if h.schema != SCHEMA_VERSION {
        return Some(format!(
            "checkpoint schema v{} is not supported by this worker (reads v{SCHEMA_VERSION})",
            h.schema
        ));
    }
    let Some(wf) = shared.registry.get(&h.workflow) else {
        return Some(format!(
            "unknown workflow {:?}: this worker serves {:?}",
            h.workflow,
            shared.registry.names()
        ));
    };
    if h.workflow_version < wf.min_version() || h.workflow_version > wf.version() {
        return Some(format!(
            "workflow {} version {} is not served by this worker (serves versions {}..={})",
            h.workflow,
            h.workflow_version,
            wf.min_version(),
            wf.version()
        ));
    }
    if let Err(e) = &c.journal {
        return Some(format!("journal cannot be read: {e}"));
    }
    None
}

/// Publishes a task for the run (continuation or wake-up). Failure is logged: the run's
/// due time makes the scanner ring again.
pub(crate) async fn publish(
    shared: &Shared,
    lease: &Lease,
    step: Option<u32>,
    reason: TaskReason,
    trace: Option<&str>,
) {
    if shared.failpoints.check("publish.before").await.is_err() {
        return;
    }
    let task = Task::new(
        lease.thread.clone(),
        shared.store.keys().partition(&lease.thread),
        step,
        reason,
    );
    let span = tracing::info_span!("publish", thread.id = %lease.thread, task.reason = reason.as_str());
    // The next task's span continues from this publish (else from the run's own trace).
    let parent = span.in_scope(savepoint::telemetry::current_traceparent);
    let headers: Vec<(String, String)> = parent
        .as_deref()
        .or(trace)
        .map(|t| vec![("traceparent".to_owned(), t.to_owned())])
        .unwrap_or_default();
    match shared.broker.publish(&task.encode(), &headers).instrument(span).await {
        Ok(()) => inc(&metrics().published, &[("reason", reason.as_str())]),
        Err(e) => tracing::warn!(thread.id = %lease.thread, error = %e, "publish failed; the due time will redeliver"),
    }
    let _ = shared.failpoints.check("publish.after").await;
}

/// Runs one slice of a claimed run.
pub(crate) async fn execute(shared: &Shared, c: Claimed) {
    let trace_id = c
        .header
        .trace
        .as_deref()
        .map(savepoint::telemetry::trace_id_of)
        .unwrap_or_default();
    let span = tracing::info_span!(
        "slice",
        thread.id = %c.lease.thread,
        worker.id = %shared.incarnation,
        workflow = %c.header.workflow,
        task.attempt = c.header.attempt,
        trace.id = %trace_id,
    );
    run_slice(shared, c).instrument(span).await
}

async fn run_slice(shared: &Shared, c: Claimed) {
    let started = Instant::now();
    metrics().inflight.inc();
    let _done = scopeguard(|| {
        metrics().inflight.dec();
    });
    let mut lease = c.lease.clone();
    if let Some(reason) = incompatibility(shared, &c) {
        tracing::error!(%reason, "cannot serve run: blocking it");
        let r = shared
            .store
            .finish(
                &mut lease,
                None,
                RunStatus::Blocked,
                None,
                None,
                Some(&reason),
                None,
                ("blocked", &reason),
            )
            .await;
        if let Err(e) = r {
            tracing::warn!(error = %e, "could not record the block");
        }
        inc(&metrics().slices, &[("end", "blocked")]);
        return;
    }
    let Some(wf) = shared.registry.get(&c.header.workflow) else {
        return;
    };
    let journal = c.journal.clone().unwrap_or_default();
    let replayed = journal.len();
    let lost = CancellationToken::new();
    let _hb = Heartbeat::start(shared.store.clone(), lease.clone(), lost.clone());
    let mut ctx = Ctx::new(CtxParts {
        store: shared.store.clone(),
        lease,
        journal,
        signals: c.signals.clone(),
        limits: shared.limits.clone(),
        failpoints: shared.failpoints.clone(),
        lease_lost: lost,
        shutdown: shared.slices_stop.clone(),
        retry: wf.retry_policy(),
        replay_only: false,
        workflow: c.header.workflow.clone(),
    });
    let stopped = ctx.exit_signal();
    let result = {
        let body = wf.run(&mut ctx, c.header.input.clone());
        tokio::select! {
            biased;
            _ = stopped.notified() => None,
            r = body => Some(r),
        }
    };
    let mut lease = ctx.lease().clone();
    let trace = c.header.trace.as_deref();
    let end = match result {
        Some(Ok(output)) => {
            let r = shared
                .store
                .finish(
                    &mut lease,
                    None,
                    RunStatus::Completed,
                    Some(&output),
                    None,
                    None,
                    None,
                    ("completed", ""),
                )
                .await;
            match r {
                Ok(()) => "completed",
                Err(e) => {
                    tracing::warn!(error = %e, "could not record completion");
                    "lease_lost"
                }
            }
        }
        Some(Err(err)) => {
            let msg = err.to_string();
            let r = shared
                .store
                .finish(
                    &mut lease,
                    None,
                    RunStatus::Failed,
                    None,
                    Some(&msg),
                    None,
                    None,
                    ("failed", &msg),
                )
                .await;
            match r {
                Ok(()) => "failed",
                Err(e) => {
                    tracing::warn!(error = %e, "could not record failure");
                    "lease_lost"
                }
            }
        }
        None => match ctx.take_exit() {
            Some(SliceExit::Yielded) => {
                publish(shared, &lease, Some(ctx.next_index()), TaskReason::Continue, trace).await;
                "yielded"
            }
            Some(SliceExit::Suspended { woke: true }) => {
                publish(shared, &lease, None, TaskReason::Signal, trace).await;
                "suspended"
            }
            Some(SliceExit::Suspended { woke: false }) => "suspended",
            Some(SliceExit::Blocked(_)) => "blocked",
            Some(SliceExit::Failed(_)) => "failed",
            Some(SliceExit::LeaseLost(reason)) => {
                tracing::warn!(%reason, "lease lost; another worker or an operator owns the run now");
                "lease_lost"
            }
            Some(SliceExit::Transient(reason)) => {
                tracing::warn!(%reason, "slice stopped on a transient error; releasing the run for a retry");
                release_for_retry(shared, &mut lease).await;
                "transient"
            }
            Some(SliceExit::WouldRunLive(_)) | None => "transient",
        },
    };
    tracing::debug!(
        end,
        replayed,
        live = ctx.live_calls(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "slice ended"
    );
    inc(&metrics().slices, &[("end", end)]);
}

/// After a transient failure, hand the run back quickly (due in a second) instead of
/// waiting for the lease to expire. If Redis is down this fails too, and the lease expiry
/// does the same job later.
async fn release_for_retry(shared: &Shared, lease: &mut Lease) {
    let r = shared
        .store
        .suspend(
            lease,
            None,
            RunStatus::Pending,
            Some(Duration::from_secs(1)),
            None,
            ("retry_later", "transient error"),
        )
        .await;
    if let Err(e) = r {
        tracing::debug!(error = %e, "release after a transient error failed; the lease will expire");
    }
}

struct Guard<F: FnMut()>(F);

impl<F: FnMut()> Drop for Guard<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}

fn scopeguard<F: FnMut()>(f: F) -> Guard<F> {
    Guard(f)
}
