//! One delivery: decode → claim → ack → execute the slice (ARCHITECTURE §7).

use std::ops::ControlFlow;
use std::time::Duration;

use savepoint_broker::Delivery;
use savepoint_core::metrics::{inc, metrics};
use savepoint_core::protocol::Task;
use savepoint_core::protocol::TaskReason;
use savepoint_store::ClaimOutcome;
use tracing::Instrument;

use crate::shared::Shared;
use crate::slice::execute;

/// Immediate re-publishes of a run this worker cannot serve, in a row, before the back-off.
const MAX_HOPS: u32 = 4;

/// A run this worker gave back, that another live worker serves: publish its task again at
/// once (each hop lands on another consumer with fair odds), instead of waiting for the
/// back-off. With no such worker alive, the back-off (and the wake-up when one registers)
/// applies.
async fn hand_on(shared: &Shared, d: &Delivery, task: &Task, rv: u64) {
    let next = Task::new(task.thread.clone(), task.partition, None, TaskReason::Due);
    let headers: Vec<(String, String)> = d
        .headers
        .get("traceparent")
        .map(|t| vec![("traceparent".to_owned(), t.clone())])
        .unwrap_or_default();
    match shared.broker.publish(&next.encode(), &headers).await {
        Ok(()) => {
            inc(&metrics().published, &[("reason", "hand_on")]);
            if let Err(e) = shared.store.mark_queued(&[(task.thread.clone(), rv)]).await {
                tracing::debug!(error = %e, "marking the handed-on task failed");
            }
        }
        Err(e) => tracing::debug!(error = %e, "handing the run on failed; its back-off applies"),
    }
}

/// Dead-letters the message with `reason` (counted under `class`).
async fn dead_letter(shared: &Shared, d: &Delivery, reason: &str, class: &str) {
    tracing::warn!(reason, "dead-lettering task message");
    inc(&metrics().dead_lettered, &[("reason", class)]);
    if let Err(e) = d.dead_letter(&shared.broker, reason).await {
        tracing::error!(error = %e, "dead-lettering failed; message requeued");
    }
}

/// Acks the message.
async fn settle(d: &Delivery) {
    if let Err(e) = d.ack().await {
        // The broker will redeliver; Redis state makes the duplicate harmless.
        tracing::warn!(error = %e, "ack failed");
    }
}

/// Handles one task message inside a `task` span whose parent is the publisher's span
/// (the `traceparent` header), so the run's trace continues across processes.
pub(crate) async fn handle_delivery(shared: &Shared, d: Delivery) {
    // Every line logged while handling the task carries the worker and the run once, from
    // this span (the thread id is recorded once the message decodes). Where a filter
    // disables it (`RUST_LOG=warn`), the warnings that matter name the run themselves (see
    // `savepoint_runtime::telemetry::outside_spans`): an enabled span on every task costs ~3 % of W1.
    let span = tracing::info_span!("task", worker.id = %shared.incarnation, thread.id = tracing::field::Empty);
    if let Some(tp) = d.headers.get("traceparent") {
        savepoint_runtime::telemetry::set_parent(&span, tp);
    }
    handle(shared, d).instrument(span).await
}

/// Handles one delivery: decodes its task, claims the run, reacts to a claim that finds no
/// work here, acks, and runs the slice.
async fn handle(shared: &Shared, d: Delivery) {
    let Some(task) = decode(shared, &d).await else {
        return;
    };
    if shared.failpoints.check("worker.before_claim").await.is_err() {
        // Injected error: the task goes back (counted), the run untouched.
        let _ = d.requeue().await;
        return;
    }
    let Some(claimed) = claim(shared, &d, &task).await else {
        return;
    };
    let outcome = outcome_label(&claimed);
    if react_to_claim(shared, &d, &task, &claimed).await.is_break() {
        return;
    }
    inc(&metrics().claims, &[("outcome", outcome)]);
    let ClaimOutcome::Claimed(c) = claimed else {
        tracing::debug!(outcome, "task needs no work; dropped");
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

/// The delivery's task, once it decodes and names the right partition; else the message is
/// dead-lettered.
async fn decode(shared: &Shared, d: &Delivery) -> Option<Task> {
    let task = match Task::decode(&d.data) {
        Ok(t) => t,
        Err(e) => {
            dead_letter(shared, d, &e.to_string(), "undecodable").await;
            return None;
        }
    };
    tracing::Span::current().record("thread.id", tracing::field::display(&task.thread));
    let expected = shared.store.keys().partition(&task.thread);
    if task.partition != expected {
        let reason = format!(
            "task for {} names partition {} but the thread belongs to {expected}",
            task.thread, task.partition
        );
        dead_letter(shared, d, &reason, "partition").await;
        return None;
    }
    Some(task)
}

/// Claims the task's run; `None` when the claim failed (the message is requeued after a
/// transient error, else dead-lettered).
async fn claim(shared: &Shared, d: &Delivery, task: &Task) -> Option<ClaimOutcome> {
    let claim_span = tracing::info_span!("claim", task.reason = task.reason.as_str());
    match shared
        .store
        .claim_holding(
            &task.thread,
            shared.incarnation.as_str(),
            task.step,
            &shared.served,
            shared.journals.held(&task.thread),
        )
        .instrument(claim_span)
        .await
    {
        Ok(c) => Some(c),
        Err(e) if e.is_transient() => {
            tracing::warn!(error = %e, "claim failed (transient); requeueing");
            inc(&metrics().claims, &[("outcome", "error")]);
            tokio::time::sleep(Duration::from_millis(200)).await;
            if let Err(e) = d.requeue().await {
                tracing::warn!(error = %e, "requeue failed");
            }
            None
        }
        Err(e) => {
            dead_letter(shared, d, &format!("claim of {} failed: {e}", task.thread), "claim").await;
            None
        }
    }
}

/// The `outcome` label of the claims metric.
fn outcome_label(claimed: &ClaimOutcome) -> &'static str {
    match claimed {
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
        ClaimOutcome::Misrouted(_) => "misrouted",
        ClaimOutcome::Paused(_) => "paused",
    }
}

/// Acts on a claim that gave the run back: hands on a run served elsewhere, forwards a task
/// to the run's queue, reports a poison run. Breaks when the message was requeued instead (a
/// forward that failed): the delivery is done with.
async fn react_to_claim(shared: &Shared, d: &Delivery, task: &Task, claimed: &ClaimOutcome) -> ControlFlow<()> {
    match claimed {
        ClaimOutcome::Unserved {
            reason,
            retry_in_ms,
            workflow,
            version,
            rv,
            tries,
        } => {
            tracing::info!(%reason, retry_in_ms, "not served here: given back untouched");
            inc(&metrics().unserved, &[]);
            // A few immediate hops find a serving consumer fast; past that (e.g. the serving
            // worker just died and its registration has not expired) the back-off applies,
            // so two workers never ping-pong a run through the queue.
            if *tries <= MAX_HOPS && shared.served_elsewhere(workflow, *version).await {
                hand_on(shared, d, task, *rv).await;
            }
        }
        ClaimOutcome::Misrouted(queue) => {
            // Published before the run was routed elsewhere, or by a publisher that did not
            // know its queue: the task belongs to that queue's consumers.
            tracing::debug!(%queue, "run routed to another task queue: forwarding the task");
            let headers: Vec<(String, String)> = d.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            if let Err(e) = shared.queues.publish(Some(queue), &d.data, &headers).await {
                tracing::warn!(%queue, error = %e, "forwarding to the run's task queue failed; requeueing");
                let _ = d.requeue().await;
                return ControlFlow::Break(());
            }
            inc(&metrics().published, &[("reason", "forward")]);
        }
        ClaimOutcome::Paused(field) if !field.is_empty() => {
            tracing::info!(pause = %field, "run paused: stopped until it is resumed");
        }
        ClaimOutcome::Poison(reason) => {
            if savepoint_runtime::telemetry::outside_spans() {
                tracing::warn!(thread.id = %task.thread, worker.id = %shared.incarnation, %reason, "poison run blocked");
            } else {
                tracing::warn!(%reason, "poison run blocked");
            }
            inc(&metrics().blocks, &[("reason", "poison")]);
        }
        _ => {}
    }
    ControlFlow::Continue(())
}
