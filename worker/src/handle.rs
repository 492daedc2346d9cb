//! One delivery: decode → claim → ack → execute the slice (DESIGN §5).

use std::time::Duration;

use savepoint::broker::{Broker, Delivery};
use savepoint::failpoints::Failpoints;
use savepoint::ids::Incarnation;
use savepoint::metrics::{inc, metrics};
use savepoint::protocol::Task;
use savepoint::store::redis::ServedSpec;
use savepoint::store::{ClaimOutcome, RedisStore};
use savepoint::workflow::{Registry, SliceLimits};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::slice::execute;

/// What every delivery handler shares.
pub(crate) struct Shared {
    pub store: RedisStore,
    pub broker: Broker,
    pub registry: Registry,
    pub failpoints: Failpoints,
    pub incarnation: Incarnation,
    pub limits: SliceLimits,
    pub slices_stop: CancellationToken,
    /// What this worker serves, checked by the claim itself.
    pub served: ServedSpec,
}

async fn dead_letter(shared: &Shared, d: &Delivery, reason: &str, class: &str) {
    tracing::warn!(reason, "dead-lettering task message");
    inc(&metrics().dead_lettered, &[("reason", class)]);
    if let Err(e) = d.dead_letter(&shared.broker, reason).await {
        tracing::error!(error = %e, "dead-lettering failed; message requeued");
    }
}

async fn settle(d: &Delivery) {
    if let Err(e) = d.ack().await {
        // The broker will redeliver; Redis state makes the duplicate harmless.
        tracing::warn!(error = %e, "ack failed");
    }
}

/// Handles one task message inside a `task` span whose parent is the publisher's span
/// (the `traceparent` header), so the run's trace continues across processes.
pub(crate) async fn handle_delivery(shared: &Shared, d: Delivery) {
    let span = tracing::info_span!("task", worker.id = %shared.incarnation);
    if let Some(tp) = d.headers.get("traceparent") {
        savepoint::telemetry::set_parent(&span, tp);
    }
    handle(shared, d).instrument(span).await
}

async fn handle(shared: &Shared, d: Delivery) {
    let task = match Task::decode(&d.data) {
        Ok(t) => t,
        Err(e) => return dead_letter(shared, &d, &e.to_string(), "undecodable").await,
    };
    let expected = shared.store.keys().partition(&task.thread);
    if task.partition != expected {
        let reason = format!(
            "task for {} names partition {} but the thread belongs to {expected}",
            task.thread, task.partition
        );
        return dead_letter(shared, &d, &reason, "partition").await;
    }
    let claim_span = tracing::info_span!("claim", thread.id = %task.thread, task.reason = task.reason.as_str());
    let claimed = match shared
        .store
        .claim(&task.thread, shared.incarnation.as_str(), task.step, &shared.served)
        .instrument(claim_span)
        .await
    {
        Ok(c) => c,
        Err(e) if e.is_transient() => {
            tracing::warn!(thread.id = %task.thread, error = %e, "claim failed (transient); requeueing");
            inc(&metrics().claims, &[("outcome", "error")]);
            tokio::time::sleep(Duration::from_millis(200)).await;
            if let Err(e) = d.requeue().await {
                tracing::warn!(error = %e, "requeue failed");
            }
            return;
        }
        Err(e) => return dead_letter(shared, &d, &format!("claim of {} failed: {e}", task.thread), "claim").await,
    };
    let outcome = match &claimed {
        ClaimOutcome::Claimed(c) if c.takeover => "takeover",
        ClaimOutcome::Claimed(_) => "claimed",
        ClaimOutcome::Missing => "missing",
        ClaimOutcome::Terminal(_) => "terminal",
        ClaimOutcome::Waiting => "waiting",
        ClaimOutcome::NotDue(_) => "not_due",
        ClaimOutcome::Leased(_) => "leased",
        ClaimOutcome::Stale(_) => "stale",
        ClaimOutcome::Unserved { .. } => "unserved",
        ClaimOutcome::Poison(_) => "poison",
    };
    match &claimed {
        ClaimOutcome::Unserved { reason, retry_in_ms } => {
            tracing::info!(thread.id = %task.thread, %reason, retry_in_ms, "not served here: given back untouched");
            inc(&metrics().unserved, &[]);
        }
        ClaimOutcome::Poison(reason) => {
            tracing::warn!(thread.id = %task.thread, %reason, "poison run blocked");
            inc(&metrics().blocks, &[("reason", "poison")]);
        }
        _ => {}
    }
    inc(&metrics().claims, &[("outcome", outcome)]);
    let ClaimOutcome::Claimed(c) = claimed else {
        tracing::debug!(thread.id = %task.thread, outcome, "task needs no work; dropped");
        return settle(&d).await;
    };
    if shared.failpoints.check("worker.after_claim").await.is_err() {
        // Injected error: leave the message for redelivery; the lease expires.
        let _ = d.requeue().await;
        return;
    }
    settle(&d).await;
    if shared.failpoints.check("worker.after_ack").await.is_err() {
        return;
    }
    execute(shared, *c).await;
}
