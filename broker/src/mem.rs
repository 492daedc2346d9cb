//! The embedded task queue: the semantics of the quorum queue the AMQP backend declares, and
//! of a worker's sticky queue beside it.
//!
//! - Publishing stores the message at the tail and confirms it.
//! - The queue pushes its messages to its consumers in turn, each up to its `prefetch`
//!   unsettled, whether or not the consumer is asking: a message pushed to a consumer waits
//!   for that consumer (as a busy worker's prefetched deliveries do on RabbitMQ, which never
//!   moves an unsettled delivery to another consumer).
//! - `ack` removes a message; `requeue` puts it back at the head with its delivery count
//!   raised; a count above the delivery limit dead-letters it instead (reason `delivery_limit`).
//! - A consumer that goes away (dropped: a crash, a shutdown) returns its unsettled messages to
//!   the head, flagged redelivered and counted, as a closed channel does.
//! - [`MemConsumer::hand_back`] cancels a consumer until it asks again: what was pushed to it
//!   and never taken goes to the tail of the task queue, not counted (the AMQP consumer's
//!   publish-again; a sticky queue's goes on to its task queue, as past its TTL).
//! - A sticky queue ([`MemQueue::sticky_consumer`]) is exclusive to its consumer: a publish to
//!   one that has no consumer is unroutable; a message not pushed within the TTL goes on to
//!   the task queue (dead-lettered there, as `x-message-ttl` does); one pushed and taken only
//!   after the TTL goes on too; and the queue goes with its consumer, deleting what it holds
//!   (RabbitMQ does not dead-letter the messages of a deleted queue).
//! - `dead_letter` publishes to the dead-letter queue with an `x-savepoint-reason` header.
//! - [`MemQueue::starved`] measures the liveness promise the simulator checks: how long a
//!   message waited beyond its allowance while a consumer of the queue was asking for one.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

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
    /// Since when the task waits for a worker: its publish (kept when it is handed back or
    /// goes on from a sticky queue; a return after its consumer went starts it again).
    since: Instant,
    /// When it entered a sticky queue (the TTL counts from there), and the TTL: how long it
    /// may wait for its worker before any worker should have it.
    sticky: Option<(Instant, Duration)>,
}

impl Msg {
    fn new(data: &[u8], headers: BTreeMap<String, String>) -> Self {
        Msg {
            data: data.to_vec(),
            headers,
            count: 0,
            redelivered: false,
            since: Instant::now(),
            sticky: None,
        }
    }

    /// Past its sticky queue's TTL at `now`.
    fn overdue(&self, now: Instant) -> bool {
        self.sticky.is_some_and(|(at, ttl)| now >= at + ttl)
    }

    /// The same task as a new message of another queue (a publish again, a dead-lettering):
    /// the broker's count of its deliveries starts again; how long it has waited does not.
    fn moved(mut self) -> Self {
        self.count = 0;
        self.redelivered = false;
        self
    }
}

/// A consumer as its queue sees it.
#[derive(Debug)]
struct Cons {
    prefetch: usize,
    /// Consuming (not since a hand-back).
    active: bool,
    /// Unsettled deliveries: pushed, taken or not.
    out: usize,
    /// Pushed and not yet taken, in order.
    held: VecDeque<u64>,
    /// Since when it has been asking for a message and holding none (its worker has a free
    /// slot and nothing to do).
    idle_since: Option<Instant>,
}

#[derive(Default)]
struct State {
    ready: VecDeque<Msg>,
    unacked: HashMap<u64, (u64, Msg)>,
    dlq: Vec<Msg>,
    next_tag: u64,
    next_consumer: u64,
    consumers: BTreeMap<u64, Cons>,
    /// The consumer pushed to last (the next push starts after it).
    last: u64,
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
    /// Messages pushed to a consumer and given back by it untaken (a busy worker's hand-back).
    pub handed_back: u64,
    /// Messages published again as new after the queue counted them often (`renew.rs`).
    pub renewed: u64,
    /// Messages that went on from a sticky queue to the task queue (TTL, taken late, handed back).
    pub passed_on: u64,
}

/// A sticky queue's link to its task queue.
struct Home {
    queue: Arc<MemQueue>,
    owner: String,
    ttl: Duration,
    /// Cancelled when the queue goes with its consumer.
    gone: CancellationToken,
    /// Woken by a publish (the TTL's timer sleeps until the head's time, or until then).
    published: Arc<tokio::sync::Notify>,
}

/// An in-process task queue with its dead-letter queue (or a worker's sticky queue of one).
pub struct MemQueue {
    state: Mutex<State>,
    notify: tokio::sync::Notify,
    delivery_limit: u32,
    faults: FaultSlot,
    /// Set on a sticky queue.
    home: Option<Home>,
    /// A task queue's sticky queues, by owner, while their consumers live.
    sticky: Mutex<HashMap<String, Weak<MemQueue>>>,
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

/// How long a message waited beyond its allowance while a consumer asked (see [`MemQueue::starved`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Starved {
    /// The wait beyond the allowance.
    pub waited: Duration,
    /// Where the message was, and for how long a consumer had been asking.
    pub what: String,
}

impl MemQueue {
    /// An empty queue; a message delivered more than `delivery_limit` times is dead-lettered
    /// (0 = no limit).
    pub fn new(delivery_limit: u32) -> Arc<Self> {
        Arc::new(Self::empty(delivery_limit, None))
    }

    fn empty(delivery_limit: u32, home: Option<Home>) -> Self {
        Self {
            state: Mutex::new(State::default()),
            notify: tokio::sync::Notify::new(),
            delivery_limit,
            faults: FaultSlot::default(),
            home,
            sticky: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Installs (or removes) a fault plan for publishes and settlements.
    pub fn set_faults(&self, faults: Option<Arc<dyn Faults>>) {
        self.faults.set(faults);
    }

    fn decide(&self, op: Op<'_>) -> Fault {
        match &self.home {
            Some(home) => home.queue.faults.decide(op),
            None => self.faults.decide(op),
        }
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
            q.lock().stats.published += 1;
            q.enqueue(vec![Msg::new(data, headers.iter().cloned().collect())]);
        })
        .await
    }

    /// Puts messages at the tail (a sticky queue's TTL counts from now), pushes what it can
    /// and wakes the consumers.
    fn enqueue(&self, msgs: Vec<Msg>) {
        if msgs.is_empty() {
            return;
        }
        let mut s = self.lock();
        for mut m in msgs {
            if let Some(home) = &self.home {
                m.sticky = Some((Instant::now(), home.ttl));
            }
            s.ready.push_back(m);
        }
        self.push(&mut s);
        drop(s);
        self.notify.notify_waiters();
        if let Some(home) = &self.home {
            home.published.notify_one();
        }
    }

    /// Publishes to worker process `owner`'s sticky queue of this task queue (confirmed); an
    /// unroutable error while that queue has no consumer.
    pub async fn publish_sticky(
        &self,
        owner: &str,
        data: &[u8],
        headers: &[(String, String)],
    ) -> Result<(), BrokerError> {
        let Some(sticky) = self.sticky_queue(owner) else {
            return Err(BrokerError::Unroutable {
                exchange: "embedded".into(),
                routing_key: format!("sticky queue of {owner}"),
                reply: "NO_ROUTE (the queue goes with its consumer)".into(),
            });
        };
        self.faulty(Op::Publish, "sticky publish", |_| {
            sticky.enqueue(vec![Msg::new(data, headers.iter().cloned().collect())]);
        })
        .await
    }

    fn sticky_queue(&self, owner: &str) -> Option<Arc<MemQueue>> {
        let map = self.sticky.lock().unwrap_or_else(|p| p.into_inner());
        map.get(owner).and_then(Weak::upgrade)
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
            s.dlq.push(Msg::new(data, headers));
        })
        .await
    }

    /// Ready messages in the task queue.
    pub fn depth(&self) -> u32 {
        self.lock().ready.len() as u32
    }

    /// Messages pushed to consumers and not settled.
    pub fn unacked(&self) -> u32 {
        self.lock().unacked.len() as u32
    }

    /// Messages in the dead-letter queue.
    pub fn dlq_depth(&self) -> u32 {
        self.lock().dlq.len() as u32
    }

    /// The counters (a task queue's include its sticky queues' `passed_on`).
    pub fn stats(&self) -> QueueStats {
        self.lock().stats
    }

    /// Drops every message (the AMQP backend's topology delete).
    pub fn clear(&self) {
        let mut s = self.lock();
        s.ready.clear();
        s.unacked.clear();
        s.dlq.clear();
        for c in s.consumers.values_mut() {
            c.held.clear();
            c.out = 0;
        }
    }

    /// A new consumer with at most `prefetch` unsettled deliveries (0 = unlimited).
    pub fn consumer(self: &Arc<Self>, prefetch: u16) -> MemConsumer {
        let mut s = self.lock();
        s.next_consumer += 1;
        let id = s.next_consumer;
        s.consumers.insert(
            id,
            Cons {
                prefetch: if prefetch == 0 { usize::MAX } else { prefetch as usize },
                active: true,
                out: 0,
                held: VecDeque::new(),
                idle_since: None,
            },
        );
        self.push(&mut s);
        drop(s);
        MemConsumer {
            queue: Arc::clone(self),
            live: Arc::new(AtomicUsize::new(0)),
            id,
        }
    }

    /// Declares worker process `owner`'s sticky queue of this task queue, exclusive to the
    /// consumer returned (the queue and what it holds go when it is dropped). A message not
    /// pushed within `ttl` goes on to this queue.
    pub fn sticky_consumer(self: &Arc<Self>, owner: &str, ttl: Duration, prefetch: u16) -> MemConsumer {
        let home = Home {
            queue: Arc::clone(self),
            owner: owner.to_owned(),
            ttl,
            gone: CancellationToken::new(),
            published: Arc::new(tokio::sync::Notify::new()),
        };
        let sticky = Arc::new(Self::empty(0, Some(home)));
        self.sticky
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(owner.to_owned(), Arc::downgrade(&sticky));
        tokio::spawn(expire(Arc::downgrade(&sticky)));
        sticky.consumer(prefetch)
    }

    /// Pushes ready messages to the consumers with room, in turn after the last one pushed to.
    /// (Under a fault plan a take may go to the next one instead, and a sticky queue's may go
    /// on to its task queue: a run's slices move between workers.)
    fn push(&self, s: &mut State) {
        let mut passed = Vec::new();
        while !s.ready.is_empty() {
            let open: Vec<u64> = {
                let after = s.consumers.range(s.last + 1..).map(|(id, c)| (*id, c));
                let before = s.consumers.range(..=s.last).map(|(id, c)| (*id, c));
                after
                    .chain(before)
                    .filter(|(_, c)| c.active && c.out < c.prefetch)
                    .map(|(id, _)| id)
                    .collect()
            };
            let Some(&first) = open.first() else { break };
            let taken_elsewhere = self.decide(Op::Take) == Fault::Fail;
            let Some(m) = s.ready.pop_front() else { break };
            if taken_elsewhere && self.home.is_some() {
                passed.push(m);
                continue;
            }
            let to = match open.get(1) {
                Some(&second) if taken_elsewhere => second,
                _ => first,
            };
            s.next_tag += 1;
            let tag = s.next_tag;
            s.unacked.insert(tag, (to, m));
            if let Some(c) = s.consumers.get_mut(&to) {
                c.out += 1;
                c.held.push_back(tag);
            }
            s.last = to;
        }
        self.pass_on(passed);
    }

    /// Sends a sticky queue's messages on to its task queue (counted there). (Each keeps its
    /// TTL as its allowance in [`MemQueue::starved`].)
    fn pass_on(&self, msgs: Vec<Msg>) {
        if let (Some(home), false) = (&self.home, msgs.is_empty()) {
            home.queue.lock().stats.passed_on += msgs.len() as u64;
            home.queue.enqueue(msgs.into_iter().map(Msg::moved).collect());
        }
    }

    /// Puts a message back at the head (or dead-letters it past the delivery limit).
    fn give_back(&self, s: &mut State, mut m: Msg) {
        m.count += 1;
        m.redelivered = true;
        m.since = Instant::now();
        if self.delivery_limit > 0 && m.count > self.delivery_limit {
            m.headers.insert(REASON_HEADER.into(), "delivery_limit".into());
            s.stats.dead_lettered += 1;
            s.dlq.push(m);
        } else {
            s.stats.redelivered += 1;
            s.ready.push_front(m);
        }
    }

    /// Gives a message back, pushes it and wakes the consumers.
    fn return_message(&self, m: Msg) {
        let mut s = self.lock();
        self.give_back(&mut s, m);
        self.push(&mut s);
        drop(s);
        self.notify.notify_waiters();
    }

    /// Takes an unsettled message off its consumer (which gains room for another).
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
        if let Some(c) = s.consumers.get_mut(&consumer) {
            c.out = c.out.saturating_sub(1);
        }
        Ok(m)
    }

    /// After a settlement that returned nothing to the queue: the consumer has room again.
    fn settled(&self) {
        let mut s = self.lock();
        self.push(&mut s);
        drop(s);
        self.notify.notify_waiters();
    }

    /// A sticky queue's messages past the TTL go on to the task queue; when the next one is due.
    fn expire_due(&self) -> Option<Instant> {
        let now = Instant::now();
        let mut s = self.lock();
        let mut due = Vec::new();
        while s.ready.front().is_some_and(|m| m.overdue(now)) {
            due.extend(s.ready.pop_front());
        }
        let next = s.ready.front().and_then(|m| m.sticky).map(|(at, ttl)| at + ttl);
        self.pass_on(due);
        next
    }

    /// The longest any message of this queue (or of one of its sticky queues) has waited,
    /// beyond its allowance (a sticky queue's TTL), while a consumer of this queue with room
    /// was asking for a message and holding none: a run kept from a worker with a free slot.
    pub fn starved(&self) -> Option<Starved> {
        let now = Instant::now();
        let s = self.lock();
        let asking = s
            .consumers
            .iter()
            .filter(|(_, c)| c.active && c.out < c.prefetch)
            .filter_map(|(id, c)| c.idle_since.map(|at| (*id, at)))
            .min_by_key(|(_, at)| *at)?;
        let mut worst: Option<Starved> = None;
        let mut weigh = |m: &Msg, place: &str| {
            let from = m.since.max(asking.1);
            let allowance = m.sticky.map(|(_, ttl)| ttl).unwrap_or_default();
            let waited = now.saturating_duration_since(from).saturating_sub(allowance);
            if !waited.is_zero() && worst.as_ref().is_none_or(|w| waited > w.waited) {
                worst = Some(Starved {
                    waited,
                    what: format!(
                        "a task {place} waited {} ms beyond its allowance of {} ms while consumer {} asked for one (for {} ms)",
                        waited.as_millis(),
                        allowance.as_millis(),
                        asking.0,
                        now.saturating_duration_since(asking.1).as_millis()
                    ),
                });
            }
        };
        weigh_queue(&s, "in the task queue", &mut weigh);
        drop(s);
        let stickies: Vec<Arc<MemQueue>> = {
            let map = self.sticky.lock().unwrap_or_else(|p| p.into_inner());
            map.values().filter_map(Weak::upgrade).collect()
        };
        for q in stickies {
            let owner = q.home.as_ref().map(|h| h.owner.clone()).unwrap_or_default();
            weigh_queue(&q.lock(), &format!("in {owner}'s sticky queue"), &mut weigh);
        }
        worst
    }
}

/// Offers every waiting message of a queue (ready, or pushed to a consumer and not taken).
fn weigh_queue(s: &State, place: &str, weigh: &mut impl FnMut(&Msg, &str)) {
    for m in &s.ready {
        weigh(m, &format!("{place} (ready)"));
    }
    for (id, c) in &s.consumers {
        for tag in &c.held {
            if let Some((_, m)) = s.unacked.get(tag) {
                weigh(m, &format!("{place} (held by consumer {id}, which takes nothing)"));
            }
        }
    }
}

/// A sticky queue's TTL: messages that wait it out go on to the task queue.
async fn expire(queue: Weak<MemQueue>) {
    loop {
        let Some(q) = queue.upgrade() else { return };
        let Some(home) = &q.home else { return };
        let gone = home.gone.clone();
        let published = Arc::clone(&home.published);
        let woken = published.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let next = q.expire_due();
        let sleep = next.map(tokio::time::sleep_until);
        drop(q);
        tokio::select! {
            _ = gone.cancelled() => return,
            _ = woken => {}
            _ = async { match sleep { Some(s) => s.await, None => std::future::pending().await } } => {}
        }
    }
}

/// A consumer of a [`MemQueue`]. Dropping it returns its unsettled deliveries to the queue (a
/// sticky queue's consumer takes its queue with it).
pub struct MemConsumer {
    queue: Arc<MemQueue>,
    /// Deliveries handed out and neither settled nor dropped.
    live: Arc<AtomicUsize>,
    id: u64,
}

impl std::fmt::Debug for MemConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemConsumer")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// Clears a consumer's asking mark when its `next` ends or is dropped.
struct Asking<'a>(&'a MemConsumer);

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.0.queue.lock().consumers.get_mut(&self.0.id) {
            c.idle_since = None;
        }
    }
}

impl MemConsumer {
    /// Deliveries handed out by this consumer and neither settled nor dropped (shutdown waits
    /// for these; a dropped one stays unacknowledged until the consumer goes, as on AMQP).
    pub fn in_flight(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    /// The next delivery pushed to this consumer (waits for one; consumes again after a
    /// [`hand_back`](Self::hand_back)). A sticky queue's delivery taken after the queue's TTL
    /// goes on to the task queue instead.
    pub async fn next(&self) -> MemDelivery {
        let _asking = Asking(self);
        loop {
            let notified = self.queue.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.take() {
                Ok(Some(d)) => return d,
                Ok(None) => {}
                Err(late) => {
                    self.queue.pass_on(vec![late]);
                    continue;
                }
            }
            notified.await;
        }
    }

    /// The oldest delivery pushed here (`Err`: one past its sticky TTL, taken off), or `None`
    /// after marking this consumer as asking.
    fn take(&self) -> Result<Option<MemDelivery>, Msg> {
        let q = &self.queue;
        let mut s = q.lock();
        let now = Instant::now();
        let Some(c) = s.consumers.get_mut(&self.id) else {
            return Ok(None);
        };
        if !c.active {
            c.active = true;
            q.push(&mut s);
        }
        let Some(c) = s.consumers.get_mut(&self.id) else {
            return Ok(None);
        };
        let Some(tag) = c.held.pop_front() else {
            c.idle_since.get_or_insert(now);
            return Ok(None);
        };
        c.idle_since = None;
        let sticky = q.home.is_some();
        if sticky && s.unacked.get(&tag).is_some_and(|(_, m)| m.overdue(now)) {
            if let Some((_, m)) = s.unacked.remove(&tag) {
                if let Some(c) = s.consumers.get_mut(&self.id) {
                    c.out = c.out.saturating_sub(1);
                }
                q.push(&mut s);
                return Err(m);
            }
        }
        let Some((_, m)) = s.unacked.get(&tag) else {
            return Ok(None);
        };
        let renewal = q
            .home
            .is_none()
            .then(|| crate::renew::due(m.count, crate::renew::renewals(&m.headers), q.delivery_limit))
            .flatten();
        if let Some(n) = renewal.filter(|_| q.decide(Op::Publish) != Fault::Fail) {
            // Counted often by returns nobody failed on: published again as new (`renew.rs`).
            if let Some((_, mut m)) = s.unacked.remove(&tag) {
                if let Some(c) = s.consumers.get_mut(&self.id) {
                    c.out = c.out.saturating_sub(1);
                }
                m.headers.insert(crate::renew::RENEWALS_HEADER.into(), n.to_string());
                s.stats.renewed += 1;
                s.ready.push_back(m.moved());
                q.push(&mut s);
                drop(s);
                q.notify.notify_waiters();
                crate::renew::counted(n);
            }
            return Ok(None);
        }
        let Some((_, m)) = s.unacked.get(&tag) else {
            return Ok(None);
        };
        let mut headers = m.headers.clone();
        if m.count > 0 {
            headers.insert(COUNT_HEADER.into(), m.count.to_string());
        }
        self.live.fetch_add(1, Ordering::AcqRel);
        Ok(Some(MemDelivery {
            live: LiveGuard {
                live: Arc::clone(&self.live),
                done: AtomicBool::new(false),
            },
            queue: Arc::clone(q),
            consumer: self.id,
            tag,
            data: m.data.clone(),
            headers,
            redelivered: m.redelivered,
        }))
    }

    /// Consumes again after a [`hand_back`](Self::hand_back) (`next` does too).
    pub fn resume(&self) {
        let q = &self.queue;
        let mut s = q.lock();
        if let Some(c) = s.consumers.get_mut(&self.id).filter(|c| !c.active) {
            c.active = true;
            q.push(&mut s);
            drop(s);
            q.notify.notify_waiters();
        }
    }

    /// Stops consuming until the next [`next`](Self::next) and gives back what was pushed here
    /// and never taken: to the tail of the task queue, not counted as a redelivery (a fault
    /// there requeues it, counted, as the AMQP consumer's nack does), or from a sticky queue on
    /// to its task queue. Returns how many went back.
    pub fn hand_back(&self) -> usize {
        let q = &self.queue;
        let mut s = q.lock();
        let Some(c) = s.consumers.get_mut(&self.id) else {
            return 0;
        };
        c.active = false;
        c.idle_since = None;
        let tags: Vec<u64> = c.held.drain(..).collect();
        c.out = c.out.saturating_sub(tags.len());
        let msgs: Vec<Msg> = tags
            .iter()
            .filter_map(|t| s.unacked.remove(t))
            .map(|(_, m)| m)
            .collect();
        let n = msgs.len();
        if q.home.is_some() {
            q.pass_on(msgs);
        } else {
            s.stats.handed_back += n as u64;
            for m in msgs {
                if q.decide(Op::Publish) == Fault::Fail {
                    q.give_back(&mut s, m);
                } else {
                    s.ready.push_back(m.moved());
                }
            }
        }
        q.push(&mut s);
        drop(s);
        q.notify.notify_waiters();
        n
    }
}

impl Drop for MemConsumer {
    fn drop(&mut self) {
        let q = &self.queue;
        let mut s = q.lock();
        s.consumers.remove(&self.id);
        let mut mine: Vec<(u64, Msg)> = s
            .unacked
            .iter()
            .filter(|(_, (c, _))| *c == self.id)
            .map(|(t, (_, m))| (*t, m.clone()))
            .collect();
        for (t, _) in &mine {
            s.unacked.remove(t);
        }
        if let Some(home) = &q.home {
            // An exclusive queue goes with its consumer, and what it holds with it.
            s.ready.clear();
            drop(s);
            home.gone.cancel();
            let mut map = home.queue.sticky.lock().unwrap_or_else(|p| p.into_inner());
            if map
                .get(&home.owner)
                .is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(q)))
            {
                map.remove(&home.owner);
            }
            return;
        }
        // Back in their original order, ahead of newer messages.
        mine.sort_by_key(|(t, _)| std::cmp::Reverse(*t));
        for (_, m) in mine {
            q.give_back(&mut s, m);
        }
        q.push(&mut s);
        drop(s);
        q.notify.notify_waiters();
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
        self.queue.settle(self.consumer, self.tag, "ack")?;
        self.queue.lock().stats.acked += 1;
        self.queue.settled();
        Ok(())
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
        drop(s);
        self.queue.settled();
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
        let q = MemQueue::new(20);
        q.publish(b"a", &[]).await.unwrap();
        q.publish(b"b", &[]).await.unwrap();
        let c = q.consumer(1);
        let d = c.next().await;
        assert_eq!(d.data, b"a");
        drop(c);
        assert_eq!(q.depth(), 2);
        assert!(d.ack().await.is_err(), "a delivery of a gone consumer cannot be acked");
        let c = q.consumer(1);
        let d = c.next().await;
        assert!(d.redelivered);
        assert_eq!(d.headers.get(COUNT_HEADER).map(String::as_str), Some("1"));
        d.requeue().await.unwrap();
        let d = c.next().await;
        assert_eq!(d.headers.get(COUNT_HEADER).map(String::as_str), Some("2"));
        d.ack().await.unwrap();
        assert_eq!(c.next().await.data, b"b");
    }

    /// A task whose consumers die again and again (each death returns it counted, as a closed
    /// channel does) is renewed at half the limit, however often: 200 deaths under a limit of
    /// 20 dead-letter nothing.
    #[tokio::test]
    async fn a_task_whose_consumers_keep_dying_is_renewed_before_the_limit() {
        let q = MemQueue::new(20);
        q.publish(b"a", &[]).await.unwrap();
        let mut last = BTreeMap::new();
        for _ in 0..200 {
            let c = q.consumer(1);
            let d = c.next().await;
            last = d.headers.clone();
            drop(c);
        }
        assert_eq!(q.dlq_depth(), 0);
        assert_eq!(q.depth(), 1);
        assert_eq!(crate::renew::renewals(&last), 19, "{last:?}");
        assert_eq!(q.stats().renewed, 19, "the 20th at the next take");
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_consumer_holds_what_was_pushed_to_it_until_it_hands_it_back() {
        let q = MemQueue::new(20);
        let busy = q.consumer(10);
        q.publish(b"a", &[]).await.unwrap();
        let free = q.consumer(10);
        // Pushed to the busy consumer, which is not asking: the free one asks and gets nothing.
        let wait = tokio::time::timeout(Duration::from_secs(3), free.next()).await;
        assert!(wait.is_err());
        {
            let _asking = tokio::time::timeout(Duration::from_secs(2), free.next()).await;
        }
        assert!(
            q.starved().is_none(),
            "nobody asks once the free consumer stopped asking"
        );
        let asking = free.next();
        tokio::pin!(asking);
        assert!(futures::poll!(asking.as_mut()).is_pending());
        tokio::time::sleep(Duration::from_secs(2)).await;
        let starved = q.starved().expect("a task held while a consumer asks");
        assert_eq!(starved.waited, Duration::from_secs(2), "{starved:?}");
        assert_eq!(busy.hand_back(), 1);
        let d = asking.await;
        assert_eq!(d.data, b"a");
        assert!(!d.redelivered);
        assert_eq!(q.stats().handed_back, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_sticky_queue_passes_on_after_its_ttl_and_goes_with_its_consumer() {
        let q = MemQueue::new(20);
        let ttl = Duration::from_millis(300);
        let sticky = q.sticky_consumer("w1", ttl, 1);
        q.publish_sticky("w1", b"one", &[]).await.unwrap();
        q.publish_sticky("w1", b"two", &[]).await.unwrap();
        let home = q.consumer(10);
        // "two" waits in the queue (the prefetch of one holds "one") and goes on after the TTL.
        assert_eq!(home.next().await.data, b"two");
        // "one" is held past the TTL: taken late, it goes on too.
        let late = tokio::time::timeout(Duration::from_millis(100), sticky.next()).await;
        assert!(late.is_err());
        assert_eq!(home.next().await.data, b"one");
        assert_eq!(q.stats().passed_on, 2);
        drop(sticky);
        assert!(matches!(
            q.publish_sticky("w1", b"three", &[]).await,
            Err(BrokerError::Unroutable { .. })
        ));
    }
}
