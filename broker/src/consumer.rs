//! Consuming side: a self-healing [`Consumer`] yielding [`Delivery`] values.

use super::amqp::{self, abandon, open_connection, Backoff, Link, ATTEMPT_TIMEOUT};
use super::delivery::{Delivery, Session};
use super::error::BrokerError;
use super::renew::RENEWALS_HEADER;
use super::topology::{self, short, STICKY_AT_HEADER};
use super::BrokerConfig;
use futures::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions, ConfirmSelectOptions,
};
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
    /// Not consuming since a [`AmqpConsumer::hand_back`]: the next `next` consumes again.
    handed_back: bool,
    /// Consumes on this channel so far (each under a tag of its own).
    round: u32,
}

/// How long a hand-back waits for the deliveries its cancel leaves in the stream.
const HAND_BACK_DRAIN: Duration = Duration::from_secs(2);

/// How long a hand-back waits for the broker to confirm one task published again.
const REPUBLISH_TIMEOUT: Duration = Duration::from_secs(5);

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
    /// gives back what was pushed to it and never taken (as [`hand_back`](Self::hand_back)),
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
            if active.handed_back {
                self.resume().await;
                continue;
            }
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
                        let _ = pass_on(&self.tag, &d).await;
                        continue;
                    }
                    if let Some(n) = renewal_due(&self.cfg, &d) {
                        if renew(&self.cfg, &self.tag, &active.session.link.channel, &d, n).await {
                            continue;
                        }
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
            // (Confirms for the hand-back's publishes; a consumer's own acks are not affected.)
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await
                .map_err(|e| BrokerError::amqp("confirm.select", e))?;
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
            handed_back: false,
            round: 0,
        })
    }

    /// Consumes again after a [`hand_back`](Self::hand_back) (else nothing). Call it outside
    /// a race of futures: a `basic.consume` cut off half way would leave a consumer whose
    /// deliveries nobody reads.
    pub(crate) async fn resume(&mut self) {
        let Some(active) = self.active.as_mut().filter(|a| a.handed_back) else {
            return;
        };
        if let Err(e) = consume_again(&self.cfg, &self.tag, active).await {
            self.lost(&format!("consuming again after a hand-back: {e}")).await;
        }
    }

    /// Stops consuming until the next [`next`](Self::next) and gives back what the broker
    /// pushed here that was never handed out (prefetched while every slot of the worker was
    /// busy), so that a worker with room takes it: a task queue's delivery is published to
    /// its queue again, confirmed, then acknowledged (a requeue would count towards the
    /// delivery limit, and a long busy spell would dead-letter a healthy task); a sticky
    /// queue's goes on to the task queue, as past its TTL. Returns how many went back. A
    /// delivery that cannot go back stays unsettled: the channel's end returns it.
    pub(crate) async fn hand_back(&mut self) -> usize {
        let Some(active) = self.active.as_mut() else {
            return 0;
        };
        let link = &active.session.link;
        if active.handed_back || !link.usable() {
            return 0;
        }
        if let Err(e) = link
            .channel
            .basic_cancel(active.stream.tag(), BasicCancelOptions::default())
            .await
        {
            debug!(tag = %self.tag, error = %e, "basic.cancel for a hand-back failed");
            return 0;
        }
        active.handed_back = true;
        let queue = self.cfg.topology.queue_name();
        let sticky = self.cfg.topology.sticky.is_some();
        let (mut n, mut stuck) = (0, false);
        // After the cancel-ok, the stream yields what it had buffered, then ends.
        while let Ok(Some(Ok(d))) = tokio::time::timeout(HAND_BACK_DRAIN, active.stream.next()).await {
            let back = if sticky {
                pass_on(&self.tag, &d).await
            } else {
                match tokio::time::timeout(REPUBLISH_TIMEOUT, republish(&link.channel, &queue, &d, None)).await {
                    Ok(Ok(())) => matches!(d.acker.ack(BasicAckOptions::default()).await, Ok(true)),
                    Ok(Err(e)) => {
                        warn!(tag = %self.tag, error = %e, "handing a task back failed; requeueing it");
                        false
                    }
                    Err(_) => {
                        warn!(tag = %self.tag, "handing a task back timed out; requeueing it");
                        false
                    }
                }
            };
            if back {
                n += 1;
                handed(if sticky { "passed_on" } else { "published" });
                continue;
            }
            // Not settled: requeued (counted towards the delivery limit, but only on a failure)
            // or, when even that fails, left to the end of this session, below: a delivery
            // left unsettled on a channel that goes on consuming would never be taken again.
            let requeue = BasicNackOptions {
                multiple: false,
                requeue: true,
            };
            match d.acker.nack(requeue).await {
                Ok(true) => handed("requeued"),
                _ => stuck = true,
            }
        }
        if stuck {
            self.lost("a task it could not hand back nor requeue is returned by ending the session")
                .await;
        } else if n > 0 {
            debug!(tag = %self.tag, queue = %queue, tasks = n, "handed back tasks this worker had no slot for");
        }
        n
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
        // What the broker pushed here and was never taken goes back now (to a worker with
        // room), not when the channel closes after the grace period.
        self.hand_back().await;
        self.stopped = true;
        let Some(active) = self.active.take() else {
            return;
        };
        let link = &active.session.link;
        if link.usable() && !active.handed_back {
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

/// Consumes again on the session's channel after a hand-back (a tag of its own each time).
async fn consume_again(cfg: &BrokerConfig, tag: &str, active: &mut Active) -> Result<(), BrokerError> {
    let queue = cfg.topology.queue_name();
    active.round += 1;
    let tag = format!("{tag}~{}", active.round);
    active.stream = active
        .session
        .link
        .channel
        .basic_consume(
            short(&queue)?,
            short(&tag)?,
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(|e| BrokerError::amqp(format!("basic.consume {queue}"), e))?;
    active.handed_back = false;
    Ok(())
}

/// Publishes a delivery's message to `queue` again (through the default exchange, which
/// routes by queue name), with its properties, and waits for the confirm; `renewal`: as that
/// renewal of it (see `renew.rs`), else as a hand-back.
async fn republish(
    channel: &lapin::Channel,
    queue: &str,
    d: &lapin::message::Delivery,
    renewal: Option<u32>,
) -> Result<(), BrokerError> {
    let mut props = d.properties.clone();
    let mut kept = FieldTable::default();
    if let Some(headers) = props.headers() {
        // The broker's own bookkeeping of earlier deliveries is not the message's.
        for (k, v) in headers.inner() {
            if !k.as_str().starts_with("x-death") && !k.as_str().starts_with("x-delivery-count") {
                kept.insert(k.clone(), v.clone());
            }
        }
    }
    if let Some(n) = renewal {
        kept.insert(RENEWALS_HEADER.into(), lapin::types::AMQPValue::LongUInt(n));
    }
    props = props.with_headers(kept);
    super::publisher::publish_once(channel, &"".into(), &short(queue)?, &d.data, &props).await?;
    match renewal {
        Some(n) => super::renew::counted(n),
        None => savepoint_core::metrics::inc(
            &savepoint_core::metrics::metrics().published,
            &[("reason", "hand_back")],
        ),
    }
    Ok(())
}

/// The renewal a task queue's delivery is due (see `renew.rs`), if any: only a delivery the
/// broker counted is looked at closely.
fn renewal_due(cfg: &BrokerConfig, d: &lapin::message::Delivery) -> Option<u32> {
    if cfg.topology.sticky.is_some() {
        return None;
    }
    let headers = d.properties.headers().as_ref()?;
    headers.inner().get("x-delivery-count")?;
    let headers = amqp::from_field_table(Some(headers));
    let count = headers.get("x-delivery-count").and_then(|v| v.parse().ok())?;
    super::renew::due(count, super::renew::renewals(&headers), cfg.delivery_limit)
}

/// Publishes a delivery again as its `n`th renewal and acknowledges it; false (the delivery
/// is then handed out as it is) when either fails.
async fn renew(cfg: &BrokerConfig, tag: &str, channel: &lapin::Channel, d: &lapin::message::Delivery, n: u32) -> bool {
    let queue = cfg.topology.queue_name();
    match tokio::time::timeout(REPUBLISH_TIMEOUT, republish(channel, &queue, d, Some(n))).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            warn!(tag = %tag, error = %e, "renewing a task the broker counted often failed; taking it as it is");
            return false;
        }
        Err(_) => {
            warn!(tag = %tag, "renewing a task the broker counted often timed out; taking it as it is");
            return false;
        }
    }
    // Published: a failed ack leaves two tasks for one run, which the claim makes harmless;
    // this one is not handed out (its channel is going, so the broker returns it).
    let acked = matches!(d.acker.ack(BasicAckOptions::default()).await, Ok(true));
    debug!(tag = %tag, renewal = n, acked, "renewed a task the broker counted often");
    true
}

/// Counts a task handed back (`how`: published, passed_on, requeued).
fn handed(how: &'static str) {
    savepoint_core::metrics::inc(&savepoint_core::metrics::metrics().handed_back, &[("how", how)]);
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
async fn pass_on(tag: &str, d: &lapin::message::Delivery) -> bool {
    let opts = BasicNackOptions {
        multiple: false,
        requeue: false,
    };
    match d.acker.nack(opts).await {
        Ok(true) => {
            debug!(tag = %tag, "a sticky task went on to the task queue");
            savepoint_core::metrics::inc(&savepoint_core::metrics::metrics().sticky_expired, &[]);
            true
        }
        // Not settled (the channel is going): the task goes with the exclusive queue, and the
        // run's near net rings it again, as for a task lost with a dead worker's queue.
        Ok(false) => {
            warn!(tag = %tag, "a sticky task could not be passed on; its run's net rings it again");
            false
        }
        Err(e) => {
            warn!(tag = %tag, error = %e, "passing a sticky task on failed");
            false
        }
    }
}
