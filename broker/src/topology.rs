//! Names of the AMQP objects of one namespace, and their (idempotent) declaration.

use super::error::BrokerError;
use lapin::options::{
    ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{Channel, ExchangeKind};

/// Names of the AMQP objects of one namespace.
#[derive(Clone, Debug)]
pub struct Topology {
    /// Namespace prefix shared by every object, e.g. "savepoint".
    pub namespace: String,
    /// Logical task queue name inside the namespace, e.g. "default".
    pub queue: String,
    /// Queues unused (no consumers, no gets) this long are deleted by the broker (`x-expires`);
    /// 0 = never. Meant for throwaway namespaces (tests, benchmarks), not production.
    pub expires_ms: u32,
    /// Set on a worker's sticky queue of `queue` (see [`Topology::sticky`]).
    pub sticky: Option<Sticky>,
}

/// A worker process's sticky queue of one task queue: where the tasks of the runs whose
/// workflow bodies it keeps parked are sent, so their next slice finds the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sticky {
    /// The worker process (its incarnation) that consumes the queue.
    pub owner: String,
    /// A message not taken this long goes on to the task queue (`x-message-ttl`,
    /// dead-lettered to the task exchange under the queue's routing key).
    pub ttl_ms: u32,
}

/// Header a sticky task carries: when it was published (ms since the epoch, the publisher's
/// clock: the worker itself for its continuations, a scheduler for the wake-ups and rings it
/// sends to a holder, so the fleet's clocks are taken to agree to well within the TTL). A
/// delivery older than the queue's TTL when its worker comes to take it goes on to the task
/// queue instead of starting there (see [`Sticky::prefetch`]); one without the header (from
/// a build before it) starts where it is taken, as before.
pub const STICKY_AT_HEADER: &str = "x-savepoint-sticky-at";

/// The most sticky tasks a worker holds prefetched at once. The queue's TTL acts only on a
/// message in the queue: a small prefetch keeps the rest there, where it acts, and the
/// age check at take ([`Sticky::expired`]) covers the few held.
pub const STICKY_PREFETCH: u16 = 8;

impl Sticky {
    /// The consumer's prefetch on a sticky queue: the task queue's (`0`: unlimited), at most
    /// [`STICKY_PREFETCH`].
    pub fn prefetch(&self, task_queue_prefetch: u16) -> u16 {
        match task_queue_prefetch {
            0 => STICKY_PREFETCH,
            p => p.min(STICKY_PREFETCH),
        }
    }

    /// True when a task published at `published_ms` has waited out the queue's TTL by
    /// `now_ms`: it goes on to the task queue, where any worker takes it, instead of starting
    /// late on this busy one. A task without the header (from a build before it) is not.
    pub fn expired(&self, published_ms: Option<u64>, now_ms: u64) -> bool {
        published_ms.is_some_and(|at| now_ms.saturating_sub(at) >= u64::from(self.ttl_ms))
    }
}

impl Topology {
    /// Builds the topology of queue `queue` in namespace `namespace`.
    pub fn new(namespace: &str, queue: &str) -> Self {
        Topology {
            namespace: namespace.to_owned(),
            queue: queue.to_owned(),
            expires_ms: 0,
            sticky: None,
        }
    }

    /// Worker process `owner`'s sticky queue of this task queue: `"{ns}.s.{queue}.{owner}"`, an
    /// exclusive classic queue of the consumer's connection (it goes with that connection: a
    /// worker that dies takes it along, and a publish to it is then unroutable), bound to the
    /// task exchange under its own name, whose messages go on to the task queue after
    /// `ttl_ms`.
    pub fn sticky(&self, owner: &str, ttl_ms: u32) -> Self {
        Topology {
            sticky: Some(Sticky {
                owner: owner.to_owned(),
                ttl_ms: ttl_ms.max(1),
            }),
            ..self.clone()
        }
    }

    /// The same topology with `x-expires` on its queues (see [`Topology::expires_ms`]).
    pub fn with_expiry(mut self, ms: u32) -> Self {
        self.expires_ms = ms;
        self
    }

    /// The task exchange: `"{ns}.tasks"` (direct, durable).
    pub fn exchange(&self) -> String {
        format!("{}.tasks", self.namespace)
    }

    /// The task queue: `"{ns}.q.{queue}"` (durable quorum queue with a delivery limit,
    /// dead-lettering to [`Topology::dlx`]).
    pub fn queue_name(&self) -> String {
        match &self.sticky {
            Some(s) => self.sticky_name(&s.owner),
            None => format!("{}.q.{}", self.namespace, self.queue),
        }
    }

    /// The name (and routing key) of worker process `owner`'s sticky queue of this task queue:
    /// `"{ns}.s.{queue}.{owner}"`.
    pub fn sticky_name(&self, owner: &str) -> String {
        format!("{}.s.{}.{}", self.namespace, self.queue, owner)
    }

    /// Routing key binding the queue to the task exchange: `"{queue}"`, a sticky queue's own
    /// name.
    pub fn routing_key(&self) -> String {
        match &self.sticky {
            Some(_) => self.queue_name(),
            None => self.queue.clone(),
        }
    }

    /// The dead-letter exchange: `"{ns}.dlx"` (fanout, durable).
    pub fn dlx(&self) -> String {
        format!("{}.dlx", self.namespace)
    }

    /// The dead-letter queue: `"{ns}.dlq"` (durable quorum queue bound to the DLX).
    pub fn dlq(&self) -> String {
        format!("{}.dlq", self.namespace)
    }

    /// Checks that every derived name is a valid AMQP short string.
    pub(crate) fn validate(&self) -> Result<(), BrokerError> {
        for name in [self.exchange(), self.queue_name(), self.dlx(), self.dlq()] {
            short(&name)?;
        }
        short(&self.routing_key()).map(|_| ())
    }
}

/// Converts to an AMQP short string without panicking on overlong input.
pub(crate) fn short(s: &str) -> Result<ShortString, BrokerError> {
    ShortString::try_new(s).map_err(|e| BrokerError::InvalidName {
        name: s.chars().take(64).collect(),
        reason: e.to_string(),
    })
}

fn quorum_args(topo: &Topology) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), AMQPValue::LongString(LongString::from("quorum")));
    if topo.expires_ms > 0 {
        let ms = i32::try_from(topo.expires_ms).unwrap_or(i32::MAX);
        args.insert("x-expires".into(), AMQPValue::LongInt(ms));
    }
    args
}

/// Declares exchanges, queues and bindings of `topo`; safe to repeat. A queue that exists
/// with other arguments is a [`BrokerError::QueueMismatch`]; the broker has then closed `ch`,
/// so the caller drops the channel and its connection rather than keep them.
pub(crate) async fn declare(ch: &Channel, topo: &Topology, delivery_limit: u32) -> Result<(), BrokerError> {
    let durable_ex = ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    };
    let (exchange, queue, dlx, dlq) = (topo.exchange(), topo.queue_name(), topo.dlx(), topo.dlq());

    ch.exchange_declare(
        short(&exchange)?,
        ExchangeKind::Direct,
        durable_ex,
        FieldTable::default(),
    )
    .await
    .map_err(|e| BrokerError::amqp(format!("exchange.declare {exchange}"), e))?;
    ch.exchange_declare(short(&dlx)?, ExchangeKind::Fanout, durable_ex, FieldTable::default())
        .await
        .map_err(|e| BrokerError::amqp(format!("exchange.declare {dlx}"), e))?;

    if let Some(sticky) = &topo.sticky {
        return declare_sticky(ch, topo, sticky).await;
    }
    let mut qargs = quorum_args(topo);
    let limit = i32::try_from(delivery_limit).unwrap_or(i32::MAX);
    qargs.insert("x-delivery-limit".into(), AMQPValue::LongInt(limit));
    qargs.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString(LongString::from(dlx.as_str())),
    );
    ch.queue_declare(short(&queue)?, QueueDeclareOptions::durable(), qargs.clone())
        .await
        .map_err(|e| BrokerError::declare(&queue, &qargs, e))?;
    ch.queue_bind(
        short(&queue)?,
        short(&exchange)?,
        short(&topo.routing_key())?,
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .map_err(|e| BrokerError::amqp(format!("queue.bind {queue}"), e))?;

    let dlq_args = quorum_args(topo);
    ch.queue_declare(short(&dlq)?, QueueDeclareOptions::durable(), dlq_args.clone())
        .await
        .map_err(|e| BrokerError::declare(&dlq, &dlq_args, e))?;
    ch.queue_bind(
        short(&dlq)?,
        short(&dlx)?,
        ShortString::default(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .map_err(|e| BrokerError::amqp(format!("queue.bind {dlq}"), e))?;
    Ok(())
}

/// Declares a sticky queue and binds it; the exchanges are declared already.
async fn declare_sticky(ch: &Channel, topo: &Topology, sticky: &Sticky) -> Result<(), BrokerError> {
    let (exchange, queue) = (topo.exchange(), topo.queue_name());
    let long = |s: &str| AMQPValue::LongString(LongString::from(s));
    let ms = |v: u32| AMQPValue::LongInt(i32::try_from(v).unwrap_or(i32::MAX));
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), long("classic"));
    args.insert("x-message-ttl".into(), ms(sticky.ttl_ms));
    args.insert("x-dead-letter-exchange".into(), long(&exchange));
    args.insert("x-dead-letter-routing-key".into(), long(&topo.queue));
    // Exclusive: the queue lives as long as the worker's consumer connection. A worker killed
    // takes it along at once, so the scanner's rings for its runs are unroutable and go to the
    // task queue instead of waiting out a TTL in a queue nobody reads; the tasks it held are
    // rung again within their run's near net (a sticky task does not mark its run queued).
    let opts = QueueDeclareOptions {
        exclusive: true,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(short(&queue)?, opts, args.clone())
        .await
        .map_err(|e| BrokerError::declare(&queue, &args, e))?;
    ch.queue_bind(
        short(&queue)?,
        short(&exchange)?,
        short(&queue)?,
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .map_err(|e| BrokerError::amqp(format!("queue.bind {queue}"), e))?;
    Ok(())
}

/// Ready-message count of `queue` via a passive declare (fails if it does not exist).
pub(crate) async fn depth(ch: &Channel, queue: &str) -> Result<u32, BrokerError> {
    let opts = QueueDeclareOptions::durable().passive();
    let q = ch
        .queue_declare(short(queue)?, opts, FieldTable::default())
        .await
        .map_err(|e| BrokerError::amqp(format!("queue.declare(passive) {queue}"), e))?;
    Ok(q.message_count())
}

/// Deletes queues then exchanges of `topo` (a sticky queue: itself alone).
pub(crate) async fn delete(ch: &Channel, topo: &Topology) -> Result<(), BrokerError> {
    if topo.sticky.is_some() {
        let queue = topo.queue_name();
        ch.queue_delete(short(&queue)?, QueueDeleteOptions::default())
            .await
            .map_err(|e| BrokerError::amqp(format!("queue.delete {queue}"), e))?;
        return Ok(());
    }
    for queue in [topo.queue_name(), topo.dlq()] {
        ch.queue_delete(short(&queue)?, QueueDeleteOptions::default())
            .await
            .map_err(|e| BrokerError::amqp(format!("queue.delete {queue}"), e))?;
    }
    for exchange in [topo.exchange(), topo.dlx()] {
        ch.exchange_delete(short(&exchange)?, ExchangeDeleteOptions::default())
            .await
            .map_err(|e| BrokerError::amqp(format!("exchange.delete {exchange}"), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sticky_consumer_holds_few_tasks_and_none_past_the_ttl() {
        let s = Sticky {
            owner: "w".into(),
            ttl_ms: 2_000,
        };
        assert_eq!(s.prefetch(128), STICKY_PREFETCH);
        assert_eq!(s.prefetch(0), STICKY_PREFETCH, "unlimited is not a sticky prefetch");
        assert_eq!(s.prefetch(3), 3);
        assert!(!s.expired(Some(10_000), 11_999));
        assert!(s.expired(Some(10_000), 12_000));
        assert!(
            !s.expired(None, u64::MAX),
            "a task from a build before the header waits as before"
        );
        assert!(!s.expired(Some(12_000), 10_000), "a clock step back is not an expiry");
    }

    #[test]
    fn names() {
        let t = Topology::new("sp", "default");
        assert_eq!(t.exchange(), "sp.tasks");
        assert_eq!(t.queue_name(), "sp.q.default");
        assert_eq!(t.routing_key(), "default");
        assert_eq!(t.dlx(), "sp.dlx");
        assert_eq!(t.dlq(), "sp.dlq");
        assert!(t.validate().is_ok());
        assert!(Topology::new(&"x".repeat(300), "q").validate().is_err());
        let s = t.sticky("w1-0123456789ab", 2000);
        assert_eq!(s.queue_name(), "sp.s.default.w1-0123456789ab");
        assert_eq!(s.routing_key(), "sp.s.default.w1-0123456789ab");
        assert_eq!(s.exchange(), "sp.tasks");
        assert!(s.validate().is_ok());
    }
}
