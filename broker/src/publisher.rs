//! Publishing side: [`Broker`], with a shared confirm-mode channel and transparent reconnects.

use super::amqp::{self, open_publisher_link, Backoff, Link};
use super::consumer::AmqpConsumer;
use super::error::BrokerError;
use super::topology::{self, short, Topology};
use super::BrokerConfig;
use lapin::options::BasicPublishOptions;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Confirmation};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// Attempts per publish (the first try plus reconnect-and-retry rounds).
const PUBLISH_ATTEMPTS: u32 = 5;
/// Content type of every published message.
const CONTENT_TYPE: &str = "application/msgpack";
/// Header carrying the reason of an explicit dead-lettering.
pub(crate) const REASON_HEADER: &str = "x-savepoint-reason";

/// The AMQP publishing side. Clone is cheap (Arc inside). Thread safe.
#[derive(Clone)]
pub(crate) struct AmqpBroker {
    inner: Arc<Inner>,
}

struct Inner {
    cfg: BrokerConfig,
    link: Mutex<Arc<Link>>,
    repair: tokio::sync::Mutex<()>,
    reconnects: Arc<AtomicU64>,
}

impl std::fmt::Debug for AmqpBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpBroker")
            .field("topology", &self.inner.cfg.topology)
            .field("reconnects", &self.reconnects())
            .finish_non_exhaustive()
    }
}

impl AmqpBroker {
    /// Connects (retrying with exponential backoff + jitter until `deadline` elapses) and declares
    /// the whole topology idempotently. Non-transient failures (bad URL, access refused,
    /// conflicting queue arguments) are returned immediately.
    pub(crate) async fn connect(cfg: BrokerConfig, deadline: Duration) -> Result<AmqpBroker, BrokerError> {
        cfg.topology.validate()?;
        let start = Instant::now();
        let mut backoff = Backoff::new(cfg.reconnect_min, cfg.reconnect_max);
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let budget = deadline
                .saturating_sub(start.elapsed())
                .clamp(Duration::from_secs(1), amqp::ATTEMPT_TIMEOUT);
            let last = match tokio::time::timeout(budget, open_publisher_link(&cfg, 0)).await {
                Ok(Ok(link)) => {
                    debug!(namespace = %cfg.topology.namespace, attempts, "broker connected");
                    return Ok(AmqpBroker {
                        inner: Arc::new(Inner {
                            cfg,
                            link: Mutex::new(Arc::new(link)),
                            repair: tokio::sync::Mutex::new(()),
                            reconnects: Arc::new(AtomicU64::new(0)),
                        }),
                    });
                }
                Ok(Err(e)) if !e.is_transient() => return Err(e),
                Ok(Err(e)) => e,
                Err(_) => BrokerError::ConnectTimeout(budget),
            };
            let delay = backoff.next_delay();
            if start.elapsed() + delay >= deadline {
                return Err(BrokerError::GaveUp {
                    attempts,
                    elapsed: start.elapsed(),
                    last: Box::new(last),
                });
            }
            warn!(error = %last, attempts, ?delay, "AMQP connect failed; retrying");
            tokio::time::sleep(delay).await;
        }
    }

    /// Publishes one persistent message (delivery_mode 2, content type "application/msgpack",
    /// string headers) to the task exchange with the queue's routing key and waits for the
    /// publisher confirm. A nack or an unroutable return is an error. Broken channels or
    /// connections are repaired and the publish retried a few times (so a message may, rarely,
    /// be stored twice).
    pub(crate) async fn publish(&self, payload: &[u8], headers: &[(String, String)]) -> Result<(), BrokerError> {
        let table = amqp::to_field_table(headers.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
        let topo = &self.inner.cfg.topology;
        self.publish_to(short(&topo.exchange())?, short(&topo.routing_key())?, payload, table)
            .await
    }

    /// Publishes like [`AmqpBroker::publish`] under another routing key of the task exchange
    /// (a sticky queue's name); a key no queue is bound to is an unroutable error.
    pub(crate) async fn publish_routed(
        &self,
        routing_key: &str,
        payload: &[u8],
        headers: &[(String, String)],
    ) -> Result<(), BrokerError> {
        let table = amqp::to_field_table(headers.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
        let exchange = self.inner.cfg.topology.exchange();
        self.publish_to(short(&exchange)?, short(routing_key)?, payload, table)
            .await
    }

    /// Publishes the payload to the dead-letter exchange with header "x-savepoint-reason" =
    /// `reason` (plus the given headers), confirmed.
    pub(crate) async fn dead_letter(
        &self,
        payload: &[u8],
        reason: &str,
        headers: &[(String, String)],
    ) -> Result<(), BrokerError> {
        let table = amqp::to_field_table(headers.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
        self.dead_letter_table(payload, reason, table).await
    }

    /// Dead-letters with an arbitrary header table (keeps original header types).
    pub(crate) async fn dead_letter_table(
        &self,
        payload: &[u8],
        reason: &str,
        mut headers: FieldTable,
    ) -> Result<(), BrokerError> {
        headers.insert(REASON_HEADER.into(), AMQPValue::LongString(LongString::from(reason)));
        let topo = &self.inner.cfg.topology;
        self.publish_to(short(&topo.dlx())?, short(&topo.routing_key())?, payload, headers)
            .await
    }

    /// Number of ready messages in the task queue (passive queue_declare).
    pub(crate) async fn queue_depth(&self) -> Result<u32, BrokerError> {
        let ch = self.admin_channel().await?;
        let res = topology::depth(&ch, &self.inner.cfg.topology.queue_name()).await;
        close_quietly(&ch).await;
        res
    }

    /// Number of ready messages in the dead-letter queue (passive queue_declare).
    pub(crate) async fn dlq_depth(&self) -> Result<u32, BrokerError> {
        let ch = self.admin_channel().await?;
        let res = topology::depth(&ch, &self.inner.cfg.topology.dlq()).await;
        close_quietly(&ch).await;
        res
    }

    /// Deletes this namespace's exchanges and queues (used by tests to clean up).
    pub(crate) async fn delete_topology(&self) -> Result<(), BrokerError> {
        let ch = self.admin_channel().await?;
        let res = topology::delete(&ch, &self.inner.cfg.topology).await;
        close_quietly(&ch).await;
        res
    }

    /// Total reconnects performed by this broker and its consumers (for metrics).
    pub(crate) fn reconnects(&self) -> u64 {
        self.inner.reconnects.load(Ordering::Relaxed)
    }

    /// Starts a consumer on the task queue with its own connection and channel (see [`Consumer`]).
    /// The connection is opened lazily by the first [`Consumer::next`] call.
    /// The names this broker publishes under.
    pub(crate) fn topology(&self) -> &Topology {
        &self.inner.cfg.topology
    }

    pub(crate) fn consumer(&self, tag: &str, shutdown: CancellationToken) -> AmqpConsumer {
        self.consumer_of(self.inner.cfg.topology.clone(), tag, shutdown)
    }

    /// A consumer of another queue of this broker's namespace (a sticky queue).
    pub(crate) fn consumer_of(&self, topology: Topology, tag: &str, shutdown: CancellationToken) -> AmqpConsumer {
        AmqpConsumer::new(
            BrokerConfig {
                topology,
                ..self.inner.cfg.clone()
            },
            Arc::clone(&self.inner.reconnects),
            tag,
            shutdown,
        )
    }

    fn current(&self) -> Arc<Link> {
        let guard = self.inner.link.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(&guard)
    }

    async fn publish_to(
        &self,
        exchange: ShortString,
        routing_key: ShortString,
        payload: &[u8],
        headers: FieldTable,
    ) -> Result<(), BrokerError> {
        let props = BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_type(CONTENT_TYPE.into())
            .with_headers(headers);
        let mut backoff = Backoff::new(self.inner.cfg.reconnect_min, self.inner.cfg.reconnect_max);
        let mut last = BrokerError::Shutdown;
        for attempt in 1..=PUBLISH_ATTEMPTS {
            if attempt > 1 {
                tokio::time::sleep(backoff.next_delay()).await;
            }
            let link = self.current();
            let err = match publish_once(&link.channel, &exchange, &routing_key, payload, &props).await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            let broken = matches!(err, BrokerError::Amqp { .. }) && (err.is_transient() || !link.usable());
            if !broken {
                return Err(err);
            }
            warn!(error = %err, attempt, exchange = %exchange, "publish failed; repairing AMQP link");
            last = match self.repair(link.generation).await {
                Ok(()) => err,
                Err(e) if !e.is_transient() => return Err(e),
                Err(e) => e,
            };
        }
        Err(last)
    }

    /// Replaces the link of generation `failed` (no-op if another caller already did).
    async fn repair(&self, failed: u64) -> Result<(), BrokerError> {
        let _guard = self.inner.repair.lock().await;
        let current = self.current();
        if current.generation != failed && current.usable() {
            return Ok(());
        }
        let link = open_publisher_link(&self.inner.cfg, current.generation + 1).await?;
        {
            let mut slot = self.inner.link.lock().unwrap_or_else(|p| p.into_inner());
            *slot = Arc::new(link);
        }
        self.inner.reconnects.fetch_add(1, Ordering::Relaxed);
        warn!(namespace = %self.inner.cfg.topology.namespace, "publisher reconnected to AMQP broker");
        Ok(())
    }

    /// A fresh short-lived channel for passive declares and deletes (their errors close the channel,
    /// so they must not run on the shared publishing channel).
    async fn admin_channel(&self) -> Result<Channel, BrokerError> {
        let link = self.current();
        match link.conn.create_channel().await {
            Ok(ch) => Ok(ch),
            Err(e) => {
                debug!(error = %e, "admin channel failed; repairing AMQP link");
                self.repair(link.generation).await?;
                self.current()
                    .conn
                    .create_channel()
                    .await
                    .map_err(|e| BrokerError::amqp("channel.open", e))
            }
        }
    }
}

pub(crate) async fn publish_once(
    channel: &Channel,
    exchange: &ShortString,
    routing_key: &ShortString,
    payload: &[u8],
    props: &BasicProperties,
) -> Result<(), BrokerError> {
    let opts = BasicPublishOptions {
        mandatory: true,
        immediate: false,
    };
    let confirm = channel
        .basic_publish(exchange.clone(), routing_key.clone(), opts, payload, props.clone())
        .await
        .map_err(|e| BrokerError::amqp("basic.publish", e))?;
    match confirm.await.map_err(|e| BrokerError::amqp("publisher confirm", e))? {
        Confirmation::Ack(None) | Confirmation::NotRequested => Ok(()),
        Confirmation::Ack(Some(returned)) => Err(BrokerError::Unroutable {
            exchange: exchange.to_string(),
            routing_key: routing_key.to_string(),
            reply: returned.reply_text.to_string(),
        }),
        Confirmation::Nack(_) => Err(BrokerError::Nacked {
            exchange: exchange.to_string(),
        }),
    }
}

async fn close_quietly(ch: &Channel) {
    if ch.status().connected() {
        let _ = ch.close(200, "OK".into()).await;
    }
}
