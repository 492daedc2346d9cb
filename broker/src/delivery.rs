//! A received message and its acknowledgement.

use super::amqp::{self, Link};
use super::error::BrokerError;
use super::Broker;
#[cfg(feature = "mem")]
use crate::mem::MemDelivery;
use lapin::options::{BasicAckOptions, BasicNackOptions};
use lapin::types::FieldTable;
use lapin::Acker;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// A consumer's connection+channel, shared with the deliveries received on it
/// (so they can still be settled while the consumer shuts down).
pub(crate) struct Session {
    pub(crate) link: Link,
    in_flight: AtomicUsize,
}

impl Session {
    pub(crate) fn new(link: Link) -> Self {
        Session {
            link,
            in_flight: AtomicUsize::new(0),
        }
    }

    /// Deliveries handed out and not yet settled nor dropped.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }
}

/// Counts a delivery as in flight until it is settled or dropped.
struct InFlight {
    session: Arc<Session>,
    done: AtomicBool,
}

impl InFlight {
    fn new(session: Arc<Session>) -> Self {
        session.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight {
            session,
            done: AtomicBool::new(false),
        }
    }

    fn finish(&self) {
        if !self.done.swap(true, Ordering::AcqRel) {
            self.session.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.finish();
    }
}

/// One message received from the task queue. It must be settled exactly once with
/// [`Delivery::ack`], [`Delivery::requeue`] or [`Delivery::dead_letter`]; if it is dropped
/// unsettled, the broker redelivers it when the consumer's channel closes.
pub struct Delivery {
    /// Message body.
    pub data: Vec<u8>,
    /// Message headers; string values exact, other types rendered as text.
    pub headers: BTreeMap<String, String>,
    /// Whether the broker flagged this message as redelivered.
    pub redelivered: bool,
    /// Delivery tag on the consumer's channel.
    pub delivery_tag: u64,
    settle: Settle,
}

/// How a delivery is settled, per backend.
enum Settle {
    Amqp(Box<AmqpSettle>),
    #[cfg(feature = "mem")]
    Mem(MemDelivery),
}

struct AmqpSettle {
    raw_headers: FieldTable,
    acker: Acker,
    shutdown: CancellationToken,
    guard: InFlight,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("delivery_tag", &self.delivery_tag)
            .field("redelivered", &self.redelivered)
            .field("headers", &self.headers)
            .field("len", &self.data.len())
            .finish_non_exhaustive()
    }
}

impl Delivery {
    pub(crate) fn from_amqp(d: lapin::message::Delivery, session: Arc<Session>, shutdown: CancellationToken) -> Self {
        let raw_headers = d.properties.headers().clone().unwrap_or_default();
        Delivery {
            headers: amqp::from_field_table(Some(&raw_headers)),
            data: d.data,
            redelivered: d.redelivered,
            delivery_tag: d.delivery_tag,
            settle: Settle::Amqp(Box::new(AmqpSettle {
                raw_headers,
                acker: d.acker,
                shutdown,
                guard: InFlight::new(session),
            })),
        }
    }

    #[cfg(feature = "mem")]
    pub(crate) fn from_mem(d: MemDelivery) -> Self {
        Delivery {
            data: d.data.clone(),
            headers: d.headers.clone(),
            redelivered: d.redelivered,
            delivery_tag: d.tag,
            settle: Settle::Mem(d),
        }
    }

    /// Acknowledges the message (it is removed from the queue).
    pub async fn ack(&self) -> Result<(), BrokerError> {
        match &self.settle {
            Settle::Amqp(a) => {
                self.settle_amqp(a, "ack", a.acker.ack(BasicAckOptions::default()))
                    .await
            }
            #[cfg(feature = "mem")]
            Settle::Mem(m) => m.ack().await,
        }
    }

    /// Negatively acknowledges with requeue=true (the broker increments the delivery count of
    /// quorum queues and dead-letters the message once `x-delivery-limit` is exceeded).
    pub async fn requeue(&self) -> Result<(), BrokerError> {
        match &self.settle {
            Settle::Amqp(a) => {
                let opts = BasicNackOptions {
                    multiple: false,
                    requeue: true,
                };
                self.settle_amqp(a, "requeue", a.acker.nack(opts)).await
            }
            #[cfg(feature = "mem")]
            Settle::Mem(m) => m.requeue().await,
        }
    }

    /// Dead-letters this message with a reason: publishes it (same body, original headers +
    /// `x-savepoint-reason`) to the dead-letter exchange via `broker`, then acks the original.
    /// If the publish fails, the original is requeued (best effort) and the publish error returned.
    // Without the embedded queue the AMQP settlement is the only kind.
    #[cfg_attr(not(feature = "mem"), allow(clippy::infallible_destructuring_match))]
    pub async fn dead_letter(&self, broker: &Broker, reason: &str) -> Result<(), BrokerError> {
        let a = match &self.settle {
            Settle::Amqp(a) => a,
            #[cfg(feature = "mem")]
            Settle::Mem(m) => return m.dead_letter(reason).await,
        };
        match broker
            .dead_letter_table(&self.data, reason, a.raw_headers.clone())
            .await
        {
            Ok(()) => self.ack().await,
            Err(e) => {
                if let Err(re) = self.requeue().await {
                    warn!(delivery_tag = self.delivery_tag, error = %re, "requeue after failed dead-letter publish failed");
                }
                Err(e)
            }
        }
    }

    async fn settle_amqp(
        &self,
        a: &AmqpSettle,
        op: &'static str,
        fut: impl Future<Output = lapin::Result<bool>>,
    ) -> Result<(), BrokerError> {
        let res = fut.await;
        a.guard.finish();
        match res {
            Ok(true) => Ok(()),
            Ok(false) if a.acker.poisoned() && a.shutdown.is_cancelled() => Err(BrokerError::Shutdown),
            Ok(false) => Err(BrokerError::Settle {
                op,
                delivery_tag: self.delivery_tag,
                reason: if a.acker.poisoned() {
                    "its channel is closed (the broker will redeliver it)"
                } else {
                    "it was already settled"
                },
            }),
            Err(e) => Err(BrokerError::amqp(format!("basic.{op}"), e)),
        }
    }
}
