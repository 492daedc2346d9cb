//! Consuming side: a self-healing [`Consumer`] yielding [`Delivery`] values.

use super::amqp::{self, abandon, open_connection, Backoff, Link, ATTEMPT_TIMEOUT};
use super::delivery::{Delivery, Session};
use super::error::BrokerError;
use super::topology::{self, short, STICKY_AT_HEADER};
use super::BrokerConfig;
use futures::StreamExt;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions};
use lapin::types::FieldTable;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, warn};

/// How long shutdown waits for handed-out deliveries to be settled before closing the channel
/// (unsettled ones are then redelivered by the broker).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A consumer on the task queue with its own connection and channel. It reconnects (with
/// exponential backoff + jitter), re-declares the topology and resumes consuming after any
/// connection or channel loss, until its shutdown token is cancelled.
pub(crate) struct AmqpConsumer {
    cfg: BrokerConfig,
    reconnects: Arc<AtomicU64>,
    tag: String,
    shutdown: CancellationToken,
    active: Option<Active>,
    backoff: Backoff,
    ever_connected: bool,
    stopped: bool,
}

/// A live session: the channel plus its lapin consumer stream.
struct Active {
    session: Arc<Session>,
    stream: lapin::Consumer,
    since: Instant,
}

impl std::fmt::Debug for AmqpConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpConsumer")
            .field("tag", &self.tag)
            .field("queue", &self.cfg.topology.queue_name())
            .field("connected", &self.active.is_some())
            .field("stopped", &self.stopped)
            .finish_non_exhaustive()
    }
}

impl AmqpConsumer {
    pub(crate) fn new(cfg: BrokerConfig, reconnects: Arc<AtomicU64>, tag: &str, shutdown: CancellationToken) -> Self {
        let backoff = Backoff::new(cfg.reconnect_min, cfg.reconnect_max);
        AmqpConsumer {
            cfg,
            reconnects,
            tag: tag.to_owned(),
            shutdown,
            active: None,
            backoff,
            ever_connected: false,
            stopped: false,
        }
    }

    /// Next delivery; `None` once shutdown is cancelled. On shutdown it cancels the AMQP consumer,
    /// waits up to [`SHUTDOWN_GRACE`] for handed-out deliveries to be settled, then closes its
    /// channel and connection (prefetched, not yet returned messages are requeued by the broker).
    pub(crate) async fn next(&mut self) -> Option<Delivery> {
        loop {
            if self.stopped {
                return None;
            }
            if self.shutdown.is_cancelled() {
                self.stop().await;
                return None;
            }
            let Some(active) = self.active.as_mut() else {
                self.establish().await;
                continue;
            };
            let shutdown = self.shutdown.clone();
            // `None` means shutdown was requested.
            let step = tokio::select! {
                biased;
                _ = shutdown.cancelled() => None,
                item = active.stream.next() => Some(item),
            };
            match step {
                None => continue,
                Some(Some(Ok(d))) => {
                    if overdue_sticky(&self.cfg.topology, &d) {
                        pass_on(&self.tag, d).await;
                        continue;
                    }
                    return Some(Delivery::from_amqp(d, Arc::clone(&active.session), shutdown));
                }
                Some(Some(Err(e))) => {
                    self.lost(&format!("channel or connection error: {e}")).await;
                }
                Some(None) => self.lost("consumer cancelled by the broker").await,
            }
        }
    }

    /// Returns once the consumer is attached to the queue (connecting with backoff if it is
    /// not), or shutdown was requested.
    pub(crate) async fn ready(&mut self) {
        while self.active.is_none() && !self.stopped && !self.shutdown.is_cancelled() {
            self.establish().await;
        }
    }

    /// Opens a session, or sleeps a backoff delay after a failed attempt.
    async fn establish(&mut self) {
        let shutdown = self.shutdown.clone();
        let res = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            res = self.open() => res,
        };
        match res {
            Ok(active) => {
                if self.ever_connected {
                    self.reconnects.fetch_add(1, Ordering::Relaxed);
                    warn!(tag = %self.tag, queue = %self.cfg.topology.queue_name(), "consumer reconnected");
                } else {
                    debug!(tag = %self.tag, queue = %self.cfg.topology.queue_name(), "consumer started");
                }
                self.ever_connected = true;
                self.active = Some(active);
            }
            Err(e) => {
                let delay = self.backoff.next_delay();
                if e.is_transient() {
                    warn!(tag = %self.tag, error = %e, ?delay, "consumer connect failed; retrying");
                } else {
                    error!(tag = %self.tag, error = %e, ?delay, "consumer connect failed (not transient); retrying");
                }
                self.pause(delay).await;
            }
        }
    }

    async fn open(&self) -> Result<Active, BrokerError> {
        let role = format!("consumer {}", self.tag);
        let conn = open_connection(&self.cfg, &role, ATTEMPT_TIMEOUT).await?;
        let setup = async {
            let channel = conn
                .create_channel()
                .await
                .map_err(|e| BrokerError::amqp("channel.open", e))?;
            topology::declare(&channel, &self.cfg.topology, self.cfg.delivery_limit).await?;
            let prefetch = match &self.cfg.topology.sticky {
                Some(sticky) => sticky.prefetch(self.cfg.prefetch),
                None => self.cfg.prefetch,
            };
            channel
                .basic_qos(prefetch, BasicQosOptions::default())
                .await
                .map_err(|e| BrokerError::amqp("basic.qos", e))?;
            let queue = self.cfg.topology.queue_name();
            let stream = channel
                .basic_consume(
                    short(&queue)?,
                    short(&self.tag)?,
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                )
                .await
                .map_err(|e| BrokerError::amqp(format!("basic.consume {queue}"), e))?;
            Ok::<_, BrokerError>((channel, stream))
        };
        let (channel, stream) = match tokio::time::timeout(ATTEMPT_TIMEOUT, setup).await {
            Ok(Ok(opened)) => opened,
            Ok(Err(e)) => {
                abandon(&conn).await;
                return Err(e);
            }
            Err(_) => return Err(BrokerError::ConnectTimeout(ATTEMPT_TIMEOUT)),
        };
        let link = Link {
            conn,
            channel,
            generation: 0,
        };
        Ok(Active {
            session: Arc::new(Session::new(link)),
            stream,
            since: Instant::now(),
        })
    }

    /// Drops the broken session and waits a backoff delay before the next attempt.
    async fn lost(&mut self, why: &str) {
        if let Some(active) = self.active.take() {
            if active.since.elapsed() >= self.cfg.reconnect_max.max(Duration::from_secs(1)) {
                self.backoff.reset();
            }
            // Outstanding deliveries keep the old session alive; otherwise it closes on drop.
            drop(active);
        }
        let delay = self.backoff.next_delay();
        warn!(tag = %self.tag, queue = %self.cfg.topology.queue_name(), reason = why, ?delay, "consumer lost its AMQP session; reconnecting");
        self.pause(delay).await;
    }

    async fn pause(&self, delay: Duration) {
        tokio::select! {
            biased;
            _ = self.shutdown.cancelled() => {}
            _ = tokio::time::sleep(delay) => {}
        }
    }

    async fn stop(&mut self) {
        self.stopped = true;
        let Some(active) = self.active.take() else {
            return;
        };
        let link = &active.session.link;
        if link.usable() {
            let tag = active.stream.tag();
            if let Err(e) = link.channel.basic_cancel(tag, BasicCancelOptions::default()).await {
                debug!(tag = %self.tag, error = %e, "basic.cancel failed during shutdown");
            }
        }
        let deadline = Instant::now() + SHUTDOWN_GRACE;
        while active.session.in_flight() > 0 && link.usable() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if active.session.in_flight() > 0 {
            warn!(tag = %self.tag, in_flight = active.session.in_flight(), "closing consumer with unsettled deliveries; they will be redelivered");
        }
        link.close().await;
        debug!(tag = %self.tag, "consumer stopped");
    }
}

/// True for a delivery of a sticky queue that has waited out the queue's TTL: prefetched
/// while its worker had no free slot, it would otherwise wait for one however long that
/// takes, where the TTL promises any worker after it.
fn overdue_sticky(topology: &topology::Topology, d: &lapin::message::Delivery) -> bool {
    let Some(sticky) = &topology.sticky else {
        return false;
    };
    let headers = amqp::from_field_table(d.properties.headers().as_ref());
    let at = headers.get(STICKY_AT_HEADER).and_then(|v| v.parse().ok());
    sticky.expired(at, savepoint_core::journal::now_ms())
}

/// Sends an overdue sticky task on to the task queue: rejected without requeue, the
/// sticky queue dead-letters it to the task exchange under the task queue's routing key,
/// as its TTL would have in the queue. A reject that fails leaves it unsettled: the
/// channel's end returns it to the sticky queue, whose TTL then acts.
async fn pass_on(tag: &str, d: lapin::message::Delivery) {
    let opts = BasicNackOptions {
        multiple: false,
        requeue: false,
    };
    match d.acker.nack(opts).await {
        Ok(true) => {
            debug!(tag = %tag, "a sticky task past its TTL went on to the task queue");
            savepoint_core::metrics::inc(&savepoint_core::metrics::metrics().sticky_expired, &[]);
        }
        // Not settled (the channel is going): the task goes with the exclusive queue, and the
        // run's near net rings it again, as for a task lost with a dead worker's queue.
        Ok(false) => warn!(tag = %tag, "an overdue sticky task could not be passed on; its run's net rings it again"),
        Err(e) => warn!(tag = %tag, error = %e, "passing an overdue sticky task on failed"),
    }
}
