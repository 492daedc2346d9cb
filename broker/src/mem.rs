//! The embedded task queue: the semantics of the quorum queue the AMQP backend declares.
//!
//! - Publishing stores the message at the tail and confirms it.
//! - A consumer receives messages in order, at most `prefetch` unsettled at once.
//! - `ack` removes a message; `requeue` puts it back at the head with its delivery count
//!   raised; a count above the delivery limit dead-letters it instead (reason `delivery_limit`).
//! - A consumer that goes away (dropped: a crash, a shutdown) returns its unsettled messages to
//!   the head, flagged redelivered and counted, as a closed channel does.
//! - `dead_letter` publishes to the dead-letter queue with an `x-savepoint-reason` header.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::BrokerError;
use savepoint_core::mem::{Fault, FaultSlot, Faults, Op};

/// Header of an explicit dead-lettering's reason (the AMQP backend's name).
const REASON_HEADER: &str = "x-savepoint-reason";
/// Header carrying the delivery count on redelivery (as quorum queues do).
const COUNT_HEADER: &str = "x-delivery-count";

#[derive(Debug, Clone)]
struct Msg {
    data: Vec<u8>,
    headers: BTreeMap<String, String>,
    count: u32,
    redelivered: bool,
}

#[derive(Default)]
struct State {
    ready: VecDeque<Msg>,
    unacked: HashMap<u64, (u64, Msg)>,
    dlq: Vec<Msg>,
    next_tag: u64,
    next_consumer: u64,
    stats: QueueStats,
}

/// Counters of a queue (tests and the simulator check them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Messages published (task queue only).
    pub published: u64,
    /// Messages acknowledged.
    pub acked: u64,
    /// Messages returned to the queue (requeue or consumer gone).
    pub redelivered: u64,
    /// Messages moved to the dead-letter queue.
    pub dead_lettered: u64,
}

/// An in-process task queue with its dead-letter queue.
pub struct MemQueue {
    state: Mutex<State>,
    notify: tokio::sync::Notify,
    delivery_limit: u32,
    faults: FaultSlot,
}

impl std::fmt::Debug for MemQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemQueue")
            .field("depth", &self.depth())
            .field("dlq", &self.dlq_depth())
            .finish_non_exhaustive()
    }
}

fn injected(op: &str) -> BrokerError {
    BrokerError::Unavailable(format!("embedded broker: injected fault on {op}"))
}

impl MemQueue {
    /// An empty queue; a message delivered more than `delivery_limit` times is dead-lettered
    /// (0 = no limit).
    pub fn new(delivery_limit: u32) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State::default()),
            notify: tokio::sync::Notify::new(),
            delivery_limit,
            faults: FaultSlot::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Installs (or removes) a fault plan for publishes and settlements.
    pub fn set_faults(&self, faults: Option<Arc<dyn Faults>>) {
        self.faults.set(faults);
    }

    fn decide(&self, op: Op<'_>) -> Fault {
        self.faults.decide(op)
    }

    /// Runs `apply` under the fault plan for `op`.
    async fn faulty<T>(&self, op: Op<'_>, name: &str, apply: impl Fn(&Self) -> T) -> Result<T, BrokerError> {
        let fault = self.decide(op);
        match fault {
            Fault::Fail => return Err(injected(name)),
            Fault::Delay(d) => tokio::time::sleep(d).await,
            Fault::Duplicate => {
                apply(self);
            }
            Fault::Pass | Fault::LoseReply => {}
        }
        let out = apply(self);
        if fault == Fault::LoseReply {
            return Err(injected(name));
        }
        Ok(out)
    }

    /// Publishes a task (confirmed when this returns `Ok`).
    pub async fn publish(&self, data: &[u8], headers: &[(String, String)]) -> Result<(), BrokerError> {
        self.faulty(Op::Publish, "publish", |q| {
            let mut s = q.lock();
            s.stats.published += 1;
            s.ready.push_back(Msg {
                data: data.to_vec(),
                headers: headers.iter().cloned().collect(),
                count: 0,
                redelivered: false,
            });
            drop(s);
            q.notify.notify_waiters();
            q.notify.notify_one();
        })
        .await
    }

    /// Publishes straight to the dead-letter queue with a reason.
    pub async fn dead_letter(
        &self,
        data: &[u8],
        reason: &str,
        headers: &[(String, String)],
    ) -> Result<(), BrokerError> {
        self.faulty(Op::Publish, "dead-letter publish", |q| {
            let mut headers: BTreeMap<String, String> = headers.iter().cloned().collect();
            headers.insert(REASON_HEADER.into(), reason.into());
            let mut s = q.lock();
            s.stats.dead_lettered += 1;
            s.dlq.push(Msg {
                data: data.to_vec(),
                headers,
                count: 0,
                redelivered: false,
            });
        })
        .await
    }

    /// Ready messages in the task queue.
    pub fn depth(&self) -> u32 {
        self.lock().ready.len() as u32
    }

    /// Messages delivered and not settled.
    pub fn unacked(&self) -> u32 {
        self.lock().unacked.len() as u32
    }

    /// Messages in the dead-letter queue.
    pub fn dlq_depth(&self) -> u32 {
        self.lock().dlq.len() as u32
    }

    /// The counters.
    pub fn stats(&self) -> QueueStats {
        self.lock().stats
    }

    /// Drops every message (the AMQP backend's topology delete).
    pub fn clear(&self) {
        let mut s = self.lock();
        s.ready.clear();
        s.unacked.clear();
        s.dlq.clear();
    }

    /// A new consumer with at most `prefetch` unsettled deliveries (0 = unlimited).
    pub fn consumer(self: &Arc<Self>, prefetch: u16) -> MemConsumer {
        let mut s = self.lock();
        s.next_consumer += 1;
        MemConsumer {
            queue: Arc::clone(self),
            live: Arc::new(AtomicUsize::new(0)),
            id: s.next_consumer,
            prefetch: if prefetch == 0 { usize::MAX } else { prefetch as usize },
        }
    }

    /// Puts a message back at the head (or dead-letters it past the delivery limit).
    fn give_back(&self, s: &mut State, mut m: Msg) {
        m.count += 1;
        m.redelivered = true;
        if self.delivery_limit > 0 && m.count > self.delivery_limit {
            m.headers.insert(REASON_HEADER.into(), "delivery_limit".into());
            s.stats.dead_lettered += 1;
            s.dlq.push(m);
        } else {
            s.stats.redelivered += 1;
            s.ready.push_front(m);
        }
    }

    /// Gives a message back and wakes the consumers.
    fn return_message(&self, m: Msg) {
        let mut s = self.lock();
        self.give_back(&mut s, m);
        drop(s);
        self.notify.notify_waiters();
        self.notify.notify_one();
    }

    fn settle(&self, consumer: u64, tag: u64, op: &'static str) -> Result<Msg, BrokerError> {
        let mut s = self.lock();
        match s.unacked.get(&tag) {
            Some((c, _)) if *c == consumer => {}
            _ => {
                return Err(BrokerError::Settle {
                    op,
                    delivery_tag: tag,
                    reason: "it was already settled or its consumer is gone (it was redelivered)",
                })
            }
        }
        let (_, m) = s.unacked.remove(&tag).ok_or(BrokerError::Shutdown)?;
        Ok(m)
    }
}

/// A consumer of a [`MemQueue`]. Dropping it returns its unsettled deliveries to the queue.
pub struct MemConsumer {
    queue: Arc<MemQueue>,
    /// Deliveries handed out and neither settled nor dropped.
    live: Arc<AtomicUsize>,
    id: u64,
    prefetch: usize,
}

impl std::fmt::Debug for MemConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemConsumer")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// How long a consumer that passed a message on waits before it takes it itself.
const PASS_WAIT: std::time::Duration = std::time::Duration::from_millis(3);

impl MemConsumer {
    /// Whether a message is ready and this consumer has room for it.
    fn can_take(&self) -> bool {
        let s = self.queue.lock();
        !s.ready.is_empty() && s.unacked.values().filter(|(c, _)| *c == self.id).count() < self.prefetch
    }

    /// Deliveries handed out by this consumer and neither settled nor dropped (shutdown waits
    /// for these; a dropped one stays unacknowledged until the consumer goes, as on AMQP).
    pub fn in_flight(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    /// The next delivery (waits for one). Under a fault plan, a consumer may pass a ready
    /// message on ([`Op::Take`]): it lets the others take it first, then takes it if none did.
    pub async fn next(&self) -> MemDelivery {
        let mut passed = false;
        loop {
            let notified = self.queue.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !passed && self.can_take() && self.queue.decide(Op::Take) == Fault::Fail {
                passed = true;
                self.queue.notify.notify_waiters();
                tokio::time::sleep(PASS_WAIT).await;
                continue;
            }
            passed = false;
            {
                let mut s = self.queue.lock();
                let mine = s.unacked.values().filter(|(c, _)| *c == self.id).count();
                if mine < self.prefetch {
                    if let Some(m) = s.ready.pop_front() {
                        s.next_tag += 1;
                        let tag = s.next_tag;
                        s.unacked.insert(tag, (self.id, m.clone()));
                        let mut headers = m.headers;
                        if m.count > 0 {
                            headers.insert(COUNT_HEADER.into(), m.count.to_string());
                        }
                        self.live.fetch_add(1, Ordering::AcqRel);
                        return MemDelivery {
                            live: LiveGuard {
                                live: Arc::clone(&self.live),
                                done: AtomicBool::new(false),
                            },
                            queue: Arc::clone(&self.queue),
                            consumer: self.id,
                            tag,
                            data: m.data,
                            headers,
                            redelivered: m.redelivered,
                        };
                    }
                }
            }
            notified.await;
        }
    }
}

impl Drop for MemConsumer {
    fn drop(&mut self) {
        let mut s = self.queue.lock();
        let mut mine: Vec<(u64, Msg)> = s
            .unacked
            .iter()
            .filter(|(_, (c, _))| *c == self.id)
            .map(|(t, (_, m))| (*t, m.clone()))
            .collect();
        // Back in their original order, ahead of newer messages.
        mine.sort_by_key(|(t, _)| std::cmp::Reverse(*t));
        for (t, m) in mine {
            s.unacked.remove(&t);
            self.queue.give_back(&mut s, m);
        }
        drop(s);
        self.queue.notify.notify_waiters();
    }
}

/// Counts a delivery as in flight until it is settled or dropped.
#[derive(Debug)]
struct LiveGuard {
    live: Arc<AtomicUsize>,
    done: AtomicBool,
}

impl LiveGuard {
    fn finish(&self) {
        if !self.done.swap(true, Ordering::AcqRel) {
            self.live.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.finish();
    }
}

/// A message received from a [`MemQueue`].
#[derive(Debug)]
pub struct MemDelivery {
    live: LiveGuard,
    queue: Arc<MemQueue>,
    consumer: u64,
    /// Delivery tag (unique per queue).
    pub tag: u64,
    /// Body.
    pub data: Vec<u8>,
    /// Headers (`x-delivery-count` on a redelivery).
    pub headers: BTreeMap<String, String>,
    /// Whether it was delivered before.
    pub redelivered: bool,
}

impl MemDelivery {
    /// Acknowledges it.
    pub async fn ack(&self) -> Result<(), BrokerError> {
        self.channel().await?;
        self.queue
            .settle(self.consumer, self.tag, "ack")
            .map(|_| self.queue.lock().stats.acked += 1)
    }

    /// Returns it to the head of the queue (counted; dead-lettered past the limit).
    pub async fn requeue(&self) -> Result<(), BrokerError> {
        self.channel().await?;
        let m = self.queue.settle(self.consumer, self.tag, "requeue")?;
        self.queue.return_message(m);
        Ok(())
    }

    /// Moves it to the dead-letter queue with a reason (and its original headers).
    pub async fn dead_letter(&self, reason: &str) -> Result<(), BrokerError> {
        self.channel().await?;
        let mut m = self.queue.settle(self.consumer, self.tag, "dead-letter")?;
        m.headers.insert(REASON_HEADER.into(), reason.into());
        let mut s = self.queue.lock();
        s.stats.dead_lettered += 1;
        s.dlq.push(m);
        Ok(())
    }

    /// The settlement's trip to the broker under the fault plan. A failed settlement is a
    /// broken channel, as on AMQP (an ack or a nack cannot fail on a healthy channel): the
    /// broker takes the message back for redelivery and the caller sees the error.
    async fn channel(&self) -> Result<(), BrokerError> {
        self.live.finish();
        match self.queue.decide(Op::Settle) {
            Fault::Fail => {
                if let Ok(m) = self.queue.settle(self.consumer, self.tag, "settle") {
                    self.queue.return_message(m);
                }
                Err(injected("settle (the channel closed: the message is redelivered)"))
            }
            Fault::Delay(d) => {
                tokio::time::sleep(d).await;
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

fn queues() -> &'static std::sync::Mutex<HashMap<String, Arc<MemQueue>>> {
    static I: std::sync::OnceLock<std::sync::Mutex<HashMap<String, Arc<MemQueue>>>> = std::sync::OnceLock::new();
    I.get_or_init(|| std::sync::Mutex::new(HashMap::new()))
}

/// The process-wide task queue named `name` (created empty on first use) with the given
/// delivery limit (the first caller's limit stands).
pub fn queue(name: &str, delivery_limit: u32) -> Arc<MemQueue> {
    let mut i = queues().lock().unwrap_or_else(|p| p.into_inner());
    Arc::clone(
        i.entry(name.to_owned())
            .or_insert_with(|| MemQueue::new(delivery_limit)),
    )
}

/// Forgets the task queues of instance `name` (their holders keep them alive until dropped).
/// A broker registers its queue as `NAME/QUEUE`, so every queue under the instance goes.
pub fn forget(name: &str) {
    let prefix = format!("{name}/");
    let mut i = queues().lock().unwrap_or_else(|p| p.into_inner());
    i.retain(|k, _| k != name && !k.starts_with(&prefix));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgetting_an_instance_drops_every_queue_registered_under_it() {
        let (a, other) = (queue("forget-me/default", 3), queue("keep-me/default", 3));
        forget("forget-me");
        assert!(
            !Arc::ptr_eq(&a, &queue("forget-me/default", 3)),
            "a forgotten queue is made anew"
        );
        assert!(
            Arc::ptr_eq(&other, &queue("keep-me/default", 3)),
            "another instance's queue stays"
        );
    }

    #[tokio::test]
    async fn unsettled_messages_come_back_when_their_consumer_goes() {
        let q = MemQueue::new(2);
        q.publish(b"a", &[]).await.unwrap();
        q.publish(b"b", &[]).await.unwrap();
        let c = q.consumer(1);
        let d = c.next().await;
        assert_eq!(d.data, b"a");
        drop(c);
        assert_eq!(q.depth(), 2);
        assert!(d.ack().await.is_err(), "a delivery of a gone consumer cannot be acked");
        let c = q.consumer(0);
        let d = c.next().await;
        assert!(d.redelivered);
        assert_eq!(d.headers.get(COUNT_HEADER).map(String::as_str), Some("1"));
        d.requeue().await.unwrap();
        let d = c.next().await;
        d.requeue().await.unwrap();
        // Delivered three times now: past the limit of 2, so dead-lettered.
        assert_eq!(q.dlq_depth(), 1);
        assert_eq!(c.next().await.data, b"b");
    }
}
