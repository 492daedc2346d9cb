//! Publishing step tasks: the doorbell that wakes a worker (ARCHITECTURE §1, principle 4). A
//! task that is lost here is harmless — every run with pending work has a due time in Redis
//! and the scanner rings again — so callers log publish failures instead of failing the
//! request.

use savepoint_broker::{Broker, BrokerError, Queues};
use savepoint_core::failpoints::{Failpoints, Injected};
use savepoint_core::ids::ThreadId;
use savepoint_core::keys::Keys;
use savepoint_core::metrics::{inc, metrics};
use savepoint_core::protocol::{Task, TaskReason};

/// AMQP header carrying the run's W3C trace context.
pub const TRACEPARENT: &str = "traceparent";

/// Failpoint checked before every task the scheduler publishes.
const BEFORE_PUBLISH: &str = "scheduler.before_publish";

/// Why a task was not published.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The `scheduler.before_publish` failpoint injected an error.
    #[error(transparent)]
    Failpoint(#[from] Injected),
    /// The broker did not confirm the message.
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

/// Publishes step tasks for the scheduler (API and scanner). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Publisher {
    broker: Broker,
    /// Every task queue by name (`None`: one queue, the broker's).
    queues: Option<Queues>,
    keys: Keys,
    failpoints: Failpoints,
}

impl Publisher {
    /// A publisher over a connected broker.
    pub fn new(broker: Broker, keys: Keys, failpoints: Failpoints) -> Self {
        Self {
            broker,
            queues: None,
            keys,
            failpoints,
        }
    }

    /// The same, publishing each run's tasks to its task queue.
    pub fn with_queues(mut self, queues: Queues) -> Self {
        self.queues = Some(queues);
        self
    }

    /// The default task queue's name (where a run created without a queue goes).
    pub fn home_queue(&self) -> Option<&str> {
        self.queues.as_ref().map(|q| q.home_name())
    }

    /// This process's failpoints (the schedule loop checks its own).
    pub fn failpoints(&self) -> &Failpoints {
        &self.failpoints
    }

    /// The broker (for admin operations).
    pub fn broker(&self) -> &Broker {
        &self.broker
    }

    /// Ready tasks in task queue `queue` (`None`: the default one), or `None` when the broker
    /// does not answer within a second (a view must not hang on it).
    pub async fn queue_depth(&self, queue: Option<&str>) -> Option<u32> {
        let ask = async {
            match (&self.queues, queue) {
                (Some(qs), Some(q)) if q != qs.home_name() => qs.get(q).await?.queue_depth().await,
                _ => self.broker.queue_depth().await,
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(1), ask)
            .await
            .ok()
            .and_then(Result::ok)
    }

    /// Publishes one task for `thread` and waits for the broker's confirm. `trace` is the
    /// run's traceparent, carried in the AMQP headers when present.
    pub async fn publish(
        &self,
        thread: &ThreadId,
        step: Option<u32>,
        reason: TaskReason,
        trace: Option<&str>,
    ) -> Result<(), PublishError> {
        self.publish_on(None, None, thread, step, reason, trace)
            .await
            .map(|_| ())
    }

    /// [`Publisher::publish`] to task queue `queue` (`None`: the default queue), or first to
    /// worker `holder`'s sticky queue of it, where the run's parked body or journal is (a
    /// sticky queue the broker cannot route to, its worker gone, falls back to the task queue).
    /// Says where the task went: a task in a sticky queue is not marked queued (see [`Sent`]).
    pub async fn publish_on(
        &self,
        queue: Option<&str>,
        holder: Option<&str>,
        thread: &ThreadId,
        step: Option<u32>,
        reason: TaskReason,
        trace: Option<&str>,
    ) -> Result<Sent, PublishError> {
        self.failpoints.check(BEFORE_PUBLISH).await?;
        let task = Task::new(thread.clone(), self.keys.partition(thread), step, reason);
        let span = tracing::info_span!("publish", thread.id = %thread, task.reason = reason_name(reason));
        // Every publish joins the run's trace; the message carries the publish span's context.
        if let Some(t) = trace.filter(|t| !t.is_empty()) {
            savepoint_runtime::telemetry::set_parent(&span, t);
        }
        let parent = span.in_scope(savepoint_runtime::telemetry::current_traceparent);
        let headers: Vec<(String, String)> = parent
            .as_deref()
            .or(trace)
            .filter(|t| !t.is_empty())
            .map(|t| vec![(TRACEPARENT.to_owned(), t.to_owned())])
            .unwrap_or_default();
        let payload = task.encode();
        let sent = async {
            let broker = self.broker_of(queue).await?;
            if let Some(holder) = holder {
                match broker.publish_sticky(holder, &payload, &headers).await {
                    Ok(()) => {
                        inc(&metrics().sticky, &[("reason", reason_name(reason))]);
                        return Ok(Sent::Sticky);
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "publishing to the holder's sticky queue failed; to the task queue")
                    }
                }
            }
            broker.publish(&payload, &headers).await.map(|()| Sent::Queue)
        };
        let sent = tracing::Instrument::instrument(sent, span).await?;
        inc(&metrics().published, &[("reason", reason_name(reason))]);
        Ok(sent)
    }

    /// The broker of task queue `queue` (`None` or empty, or no named queues: the default one).
    async fn broker_of(&self, queue: Option<&str>) -> Result<savepoint_broker::Broker, savepoint_broker::BrokerError> {
        match (&self.queues, queue) {
            (Some(qs), Some(q)) if !q.is_empty() => qs.get(q).await,
            _ => Ok(self.broker.clone()),
        }
    }
}

/// Where a confirmed task went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// The run's task queue: the publisher marks the run queued (its safety net moves out to
    /// the queued-redeliver delay), since the quorum queue keeps the task.
    Queue,
    /// A worker's sticky queue (a classic queue on one RabbitMQ node): the run keeps the
    /// nearer safety net of the change that made it runnable (`redeliver`), so a task lost
    /// with that node is rung again within seconds, not minutes. At worst that is one more
    /// message for the run, if no worker has taken the task by then.
    Sticky,
}

/// The metric / log name of a task reason.
pub fn reason_name(reason: TaskReason) -> &'static str {
    match reason {
        TaskReason::Start => "start",
        TaskReason::Continue => "continue",
        TaskReason::Due => "due",
        TaskReason::Signal => "signal",
        TaskReason::Operator => "operator",
    }
}

/// A fresh W3C `traceparent` (`00-<32 hex trace id>-<16 hex span id>-01`) for a new run:
/// one run is one trace across every worker that executes it.
pub fn new_traceparent() -> String {
    let trace = savepoint_core::entropy::uuid().simple().to_string();
    let span = savepoint_core::entropy::uuid().simple().to_string();
    format!("00-{trace}-{}-01", &span[..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_shape() {
        let t = new_traceparent();
        let parts: Vec<&str> = t.split('-').collect();
        assert_eq!(parts.len(), 4, "{t}");
        assert_eq!((parts[0], parts[3]), ("00", "01"));
        assert_eq!((parts[1].len(), parts[2].len()), (32, 16));
        assert!(parts[1..3]
            .iter()
            .all(|p| p.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())));
        assert_ne!(new_traceparent(), t);
    }
}
