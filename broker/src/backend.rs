//! The broker seam: [`Broker`] and [`Consumer`] over RabbitMQ (AMQP 0.9.1, lapin) or over the
//! embedded queue ([`crate::mem::MemQueue`]), chosen by the URL (`mem://NAME`).
//!
//! The contract both keep (the broker conformance tests check it on both): a publish returns
//! once the message is stored (publisher confirm); delivery is at least once; an unsettled
//! delivery comes back when its consumer goes away; `requeue` counts a delivery and a message
//! past the delivery limit is dead-lettered; `dead_letter` keeps the body and headers and adds
//! `x-savepoint-reason`.

use lapin::types::FieldTable;
#[cfg(feature = "mem")]
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use super::consumer::AmqpConsumer;
#[cfg(feature = "mem")]
use super::consumer::SHUTDOWN_GRACE;
use super::delivery::Delivery;
use super::error::BrokerError;
use super::publisher::AmqpBroker;
use super::BrokerConfig;
#[cfg(feature = "mem")]
use crate::mem::{self, MemConsumer, MemQueue};

/// The publishing side of the task queue. Clone is cheap. Thread safe.
#[derive(Clone, Debug)]
pub struct Broker {
    kind: Kind,
}

#[derive(Clone, Debug)]
enum Kind {
    Amqp(AmqpBroker),
    #[cfg(feature = "mem")]
    Mem {
        queue: Arc<MemQueue>,
        prefetch: u16,
    },
}

impl Broker {
    /// Connects (retrying with exponential backoff + jitter until `deadline` elapses) and declares
    /// the whole topology idempotently. Non-transient failures (bad URL, access refused,
    /// conflicting queue arguments) are returned immediately. `mem://NAME` opens the embedded
    /// queue of instance `NAME` for this topology instead.
    pub async fn connect(cfg: BrokerConfig, deadline: Duration) -> Result<Broker, BrokerError> {
        if let Some(name) = savepoint_core::mem::instance_name(&cfg.amqp_url) {
            cfg.topology.validate()?;
            #[cfg(feature = "mem")]
            {
                let queue = mem::queue(&format!("{name}/{}", cfg.topology.queue_name()), cfg.delivery_limit);
                return Ok(Self::embedded(queue, cfg.prefetch));
            }
            #[cfg(not(feature = "mem"))]
            return Err(BrokerError::InvalidConfig(format!(
                "the AMQP URL names the embedded queue ({name}), which this build leaves out \
                 (savepoint-broker's feature `mem`)"
            )));
        }
        Ok(Broker {
            kind: Kind::Amqp(AmqpBroker::connect(cfg, deadline).await?),
        })
    }

    /// A broker on an embedded queue.
    #[cfg(feature = "mem")]
    pub fn embedded(queue: Arc<MemQueue>, prefetch: u16) -> Self {
        Broker {
            kind: Kind::Mem { queue, prefetch },
        }
    }

    /// The embedded queue, if this broker is not AMQP.
    #[cfg(feature = "mem")]
    pub fn mem_queue(&self) -> Option<&Arc<MemQueue>> {
        match &self.kind {
            Kind::Mem { queue, .. } => Some(queue),
            Kind::Amqp(_) => None,
        }
    }

    /// Publishes one persistent message to the task queue and waits for the confirm. A nack or
    /// an unroutable return is an error. Broken channels or connections are repaired and the
    /// publish retried a few times (so a message may, rarely, be stored twice).
    pub async fn publish(&self, payload: &[u8], headers: &[(String, String)]) -> Result<(), BrokerError> {
        match &self.kind {
            Kind::Amqp(b) => b.publish(payload, headers).await,
            #[cfg(feature = "mem")]
            Kind::Mem { queue, .. } => queue.publish(payload, headers).await,
        }
    }

    /// Publishes the payload to the dead-letter queue with header "x-savepoint-reason" =
    /// `reason` (plus the given headers), confirmed.
    pub async fn dead_letter(
        &self,
        payload: &[u8],
        reason: &str,
        headers: &[(String, String)],
    ) -> Result<(), BrokerError> {
        match &self.kind {
            Kind::Amqp(b) => b.dead_letter(payload, reason, headers).await,
            #[cfg(feature = "mem")]
            Kind::Mem { queue, .. } => queue.dead_letter(payload, reason, headers).await,
        }
    }

    /// Dead-letters with an AMQP header table (an AMQP delivery keeps its header types).
    pub(crate) async fn dead_letter_table(
        &self,
        payload: &[u8],
        reason: &str,
        headers: FieldTable,
    ) -> Result<(), BrokerError> {
        match &self.kind {
            Kind::Amqp(b) => b.dead_letter_table(payload, reason, headers).await,
            #[cfg(feature = "mem")]
            Kind::Mem { queue, .. } => {
                let flat: Vec<(String, String)> = super::amqp::from_field_table(Some(&headers)).into_iter().collect();
                queue.dead_letter(payload, reason, &flat).await
            }
        }
    }

    /// Number of ready messages in the task queue.
    pub async fn queue_depth(&self) -> Result<u32, BrokerError> {
        match &self.kind {
            Kind::Amqp(b) => b.queue_depth().await,
            #[cfg(feature = "mem")]
            Kind::Mem { queue, .. } => Ok(queue.depth()),
        }
    }

    /// Number of ready messages in the dead-letter queue.
    pub async fn dlq_depth(&self) -> Result<u32, BrokerError> {
        match &self.kind {
            Kind::Amqp(b) => b.dlq_depth().await,
            #[cfg(feature = "mem")]
            Kind::Mem { queue, .. } => Ok(queue.dlq_depth()),
        }
    }

    /// Deletes this namespace's exchanges and queues (used by tests to clean up).
    pub async fn delete_topology(&self) -> Result<(), BrokerError> {
        match &self.kind {
            Kind::Amqp(b) => b.delete_topology().await,
            #[cfg(feature = "mem")]
            Kind::Mem { queue, .. } => {
                queue.clear();
                Ok(())
            }
        }
    }

    /// Total reconnects performed by this broker and its consumers (for metrics).
    pub fn reconnects(&self) -> u64 {
        match &self.kind {
            Kind::Amqp(b) => b.reconnects(),
            #[cfg(feature = "mem")]
            Kind::Mem { .. } => 0,
        }
    }

    /// Starts a consumer on worker process `owner`'s sticky queue of this task queue (see
    /// [`crate::Topology::sticky`]), declaring it (`Option` for a backend without sticky
    /// queues; both have them).
    pub fn sticky_consumer(
        &self,
        owner: &str,
        ttl_ms: u32,
        tag: &str,
        shutdown: CancellationToken,
    ) -> Option<Consumer> {
        match &self.kind {
            Kind::Amqp(b) => {
                let topology = b.topology().sticky(owner, ttl_ms);
                Some(Consumer {
                    kind: ConsumerKind::Amqp(Box::new(b.consumer_of(topology, tag, shutdown))),
                })
            }
            #[cfg(feature = "mem")]
            Kind::Mem { queue, prefetch } => {
                let sticky = crate::topology::Sticky {
                    owner: owner.to_owned(),
                    ttl_ms,
                };
                let consumer = queue.sticky_consumer(
                    owner,
                    Duration::from_millis(u64::from(ttl_ms)),
                    sticky.prefetch(*prefetch),
                );
                Some(Consumer {
                    kind: ConsumerKind::Mem {
                        consumer: Some(consumer),
                        shutdown,
                    },
                })
            }
        }
    }

    /// Publishes to worker process `owner`'s sticky queue of this task queue, confirmed. A
    /// sticky queue that does not exist (its worker is gone, or never consumed it) is an
    /// unroutable error: publish to the task queue instead.
    pub async fn publish_sticky(
        &self,
        owner: &str,
        payload: &[u8],
        headers: &[(String, String)],
    ) -> Result<(), BrokerError> {
        match &self.kind {
            Kind::Amqp(b) => {
                let mut headers = headers.to_vec();
                headers.push((
                    crate::topology::STICKY_AT_HEADER.to_owned(),
                    savepoint_core::journal::now_ms().to_string(),
                ));
                b.publish_routed(&b.topology().sticky_name(owner), payload, &headers)
                    .await
            }
            #[cfg(feature = "mem")]
            Kind::Mem { queue, .. } => queue.publish_sticky(owner, payload, headers).await,
        }
    }

    /// Starts a consumer on the task queue. On AMQP it has its own connection and channel,
    /// opened lazily by the first [`Consumer::next`] call.
    pub fn consumer(&self, tag: &str, shutdown: CancellationToken) -> Consumer {
        match &self.kind {
            Kind::Amqp(b) => Consumer {
                kind: ConsumerKind::Amqp(Box::new(b.consumer(tag, shutdown))),
            },
            #[cfg(feature = "mem")]
            Kind::Mem { queue, prefetch } => Consumer {
                kind: ConsumerKind::Mem {
                    consumer: Some(queue.consumer(*prefetch)),
                    shutdown,
                },
            },
        }
    }
}

/// A consumer on the task queue, until its shutdown token is cancelled. On AMQP it reconnects
/// (with exponential backoff + jitter), re-declares the topology and resumes consuming after any
/// connection or channel loss.
#[derive(Debug)]
pub struct Consumer {
    kind: ConsumerKind,
}

#[derive(Debug)]
enum ConsumerKind {
    Amqp(Box<AmqpConsumer>),
    #[cfg(feature = "mem")]
    Mem {
        consumer: Option<MemConsumer>,
        shutdown: CancellationToken,
    },
}

impl Consumer {
    /// Next delivery; `None` once shutdown is cancelled. On shutdown it stops receiving, gives
    /// back what was pushed to it and never taken (as [`Consumer::hand_back`]), waits
    /// up to [`SHUTDOWN_GRACE`] for handed-out deliveries to be settled, then lets go of the
    /// rest (the broker redelivers them).
    pub async fn next(&mut self) -> Option<Delivery> {
        match &mut self.kind {
            ConsumerKind::Amqp(c) => c.next().await,
            #[cfg(feature = "mem")]
            ConsumerKind::Mem { consumer, shutdown } => {
                let c = consumer.as_ref()?;
                let got = tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => None,
                    d = c.next() => Some(d),
                };
                match got {
                    Some(d) => Some(Delivery::from_mem(d)),
                    None => {
                        // What was pushed here and never taken goes back now.
                        c.hand_back();
                        let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
                        while c.in_flight() > 0 && tokio::time::Instant::now() < deadline {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        *consumer = None;
                        None
                    }
                }
            }
        }
    }

    /// Stops taking deliveries until the next [`Consumer::next`], and gives back those the
    /// broker pushed here that were never handed out, for a consumer with room (the worker's
    /// slots have all been busy a while). Returns how many went back.
    pub async fn hand_back(&mut self) -> usize {
        match &mut self.kind {
            ConsumerKind::Amqp(c) => c.hand_back().await,
            #[cfg(feature = "mem")]
            ConsumerKind::Mem { consumer, .. } => consumer.as_ref().map_or(0, MemConsumer::hand_back),
        }
    }

    /// Consumes again after a [`Consumer::hand_back`] (`next` does too, but from inside a race
    /// of several consumers' `next` a cut-off `basic.consume` would strand what it receives).
    pub async fn resume(&mut self) {
        match &mut self.kind {
            ConsumerKind::Amqp(c) => c.resume().await,
            #[cfg(feature = "mem")]
            ConsumerKind::Mem { consumer, .. } => {
                if let Some(c) = consumer {
                    c.resume();
                }
            }
        }
    }

    /// Returns once the consumer is attached to the queue (connecting with backoff if it is
    /// not), or shutdown was requested.
    // Without the embedded queue the AMQP consumer is the only kind.
    #[cfg_attr(not(feature = "mem"), allow(irrefutable_let_patterns))]
    pub async fn ready(&mut self) {
        if let ConsumerKind::Amqp(c) = &mut self.kind {
            c.ready().await;
        }
    }
}
