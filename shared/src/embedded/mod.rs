//! The embedded backend: the engine without RabbitMQ or Redis, in one process.
//!
//! - [`MemEngine`] runs the store's very Lua scripts (Lua 5.1, as Redis embeds) over an
//!   in-memory keyspace that implements the Redis commands they send, so the embedded store
//!   has the scripts' semantics by construction, not by a second implementation of each rule.
//! - [`MemQueue`] is the task queue: at-least-once delivery with prefetch, redelivery of
//!   unsettled messages when their consumer goes away, a delivery limit and a dead-letter queue,
//!   as the quorum queue the AMQP backend declares.
//!
//! Both are reached through the ordinary URLs: `mem://NAME` as `redis_url` or `amqp_url`
//! names one process-wide instance (created on first use), so the worker, the scheduler, the
//! API and `savepoint dev --embedded` run on it unchanged. Time is tokio's clock (virtual under
//! a paused runtime, which is what the test kit and the simulator use). Faults can be injected
//! at every operation with [`Faults`].

pub mod coverage;
pub(crate) mod keyspace;
mod lua;
mod queue;

pub use queue::{MemConsumer, MemDelivery, MemQueue, QueueStats};

use redis::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use crate::store::StoreError;
use lua::LuaHost;

/// The URL scheme that selects the embedded backend (`mem://NAME`).
pub const SCHEME: &str = "mem://";

/// The instance name of an embedded URL, if `url` is one.
pub fn instance_name(url: &str) -> Option<&str> {
    url.strip_prefix(SCHEME).map(|n| n.trim_end_matches('/'))
}

/// What an operation on the embedded backend is, for a fault plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op<'a> {
    /// A store script, by name (`claim`, `commit`, …).
    Script(&'a str),
    /// A plain store command, by verb (`HGETALL`, …).
    Command(&'a str),
    /// A broker publish (task or dead letter).
    Publish,
    /// A broker settlement (ack, requeue, dead letter of a delivery).
    Settle,
}

/// What happens to one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Carried out normally.
    Pass,
    /// Not carried out; the caller sees a transient error (connection refused, timeout).
    Fail,
    /// Carried out, then the reply is lost: the caller sees a transient error.
    LoseReply,
    /// Carried out after this delay (the reply arrives late; a delayed publish lands after
    /// later ones: reordered).
    Delay(Duration),
    /// (Publish) stored twice, as a retried publish whose first confirm was lost.
    Duplicate,
}

/// A fault plan consulted before every operation of an instance.
pub trait Faults: Send + Sync {
    /// The fault for this operation.
    fn decide(&self, op: Op<'_>) -> Fault;
}

/// Where an instance keeps its fault plan (none: every operation passes).
#[derive(Default)]
pub(crate) struct FaultSlot(RwLock<Option<Arc<dyn Faults>>>);

impl FaultSlot {
    pub(crate) fn set(&self, faults: Option<Arc<dyn Faults>>) {
        if let Ok(mut f) = self.0.write() {
            *f = faults;
        }
    }

    pub(crate) fn decide(&self, op: Op<'_>) -> Fault {
        match self.0.read() {
            Ok(f) => f.as_ref().map_or(Fault::Pass, |f| f.decide(op)),
            Err(_) => Fault::Pass,
        }
    }
}

/// The embedded store engine: one Lua state and keyspace behind a mutex (so a script is
/// atomic), with a clock and an optional fault plan.
pub struct MemEngine {
    host: Mutex<LuaHost>,
    /// Server time at `epoch` (µs since the Unix epoch).
    base_us: u64,
    epoch: tokio::time::Instant,
    faults: FaultSlot,
}

impl std::fmt::Debug for MemEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemEngine")
            .field("now_us", &self.now_us())
            .finish_non_exhaustive()
    }
}

fn unavailable(what: &str) -> StoreError {
    StoreError::Unavailable(format!("embedded store: injected fault on {what}"))
}

impl MemEngine {
    /// A new, empty instance whose clock starts at the wall-clock time now.
    // The server clock's starting point is the wall clock, as a Redis server's is.
    #[allow(clippy::disallowed_methods)]
    pub fn new() -> Arc<Self> {
        let base_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        Self::starting_at(base_us)
    }

    /// A new, empty instance whose clock reads `base_us` now (deterministic tests).
    #[allow(clippy::expect_used)]
    pub fn starting_at(base_us: u64) -> Arc<Self> {
        Arc::new(Self {
            // Creating a Lua state and registering two tables fails only when out of memory.
            host: Mutex::new(LuaHost::new().expect("creating the embedded Lua state")),
            base_us,
            epoch: tokio::time::Instant::now(),
            faults: FaultSlot::default(),
        })
    }

    /// Server time (µs): the base plus tokio's elapsed time (virtual under a paused runtime).
    pub fn now_us(&self) -> u64 {
        self.base_us + self.epoch.elapsed().as_micros() as u64
    }

    /// Installs (or removes) a fault plan.
    pub fn set_faults(&self, faults: Option<Arc<dyn Faults>>) {
        self.faults.set(faults);
    }

    fn decide(&self, op: Op<'_>) -> Fault {
        self.faults.decide(op)
    }

    fn host(&self) -> Result<std::sync::MutexGuard<'_, LuaHost>, StoreError> {
        self.host
            .lock()
            .map_err(|_| StoreError::Unavailable("embedded store: a script panicked".into()))
    }

    async fn run<T>(
        &self,
        op: Op<'_>,
        what: &str,
        f: impl FnOnce(&mut LuaHost, u64) -> Result<T, String>,
    ) -> Result<T, StoreError> {
        let fault = self.decide(op);
        match fault {
            Fault::Fail => return Err(unavailable(what)),
            Fault::Delay(d) => tokio::time::sleep(d).await,
            Fault::Pass | Fault::LoseReply | Fault::Duplicate => {}
        }
        let out = {
            let now = self.now_us();
            let mut host = self.host()?;
            f(&mut host, now).map_err(StoreError::Embedded)?
        };
        if fault == Fault::LoseReply {
            return Err(unavailable(what));
        }
        Ok(out)
    }

    pub(crate) async fn eval(
        &self,
        name: &'static str,
        body: &str,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
    ) -> Result<Value, StoreError> {
        self.run(Op::Script(name), name, |h, now| h.eval(name, body, keys, args, now))
            .await
    }

    pub(crate) async fn command(&self, args: &[Vec<u8>]) -> Result<Value, StoreError> {
        let verb = args
            .first()
            .map(|v| String::from_utf8_lossy(v).to_ascii_uppercase())
            .unwrap_or_default();
        self.run(Op::Command(&verb), &verb, |h, now| h.command(args, now)).await
    }
}

struct Instances {
    engines: HashMap<String, Arc<MemEngine>>,
    queues: HashMap<String, Arc<MemQueue>>,
}

fn instances() -> &'static Mutex<Instances> {
    static I: OnceLock<Mutex<Instances>> = OnceLock::new();
    I.get_or_init(|| {
        Mutex::new(Instances {
            engines: HashMap::new(),
            queues: HashMap::new(),
        })
    })
}

/// Installs `engine` as the instance `name` (the simulator's engine with a fixed clock).
pub fn install_engine(name: &str, engine: Arc<MemEngine>) {
    let mut i = instances().lock().unwrap_or_else(|p| p.into_inner());
    i.engines.insert(name.to_owned(), engine);
}

/// The process-wide store engine named `name` (created empty on first use).
pub fn engine(name: &str) -> Arc<MemEngine> {
    let mut i = instances().lock().unwrap_or_else(|p| p.into_inner());
    Arc::clone(i.engines.entry(name.to_owned()).or_insert_with(MemEngine::new))
}

/// The process-wide task queue named `name` (created empty on first use) with the given
/// delivery limit (the first caller's limit stands).
pub fn queue(name: &str, delivery_limit: u32) -> Arc<MemQueue> {
    let mut i = instances().lock().unwrap_or_else(|p| p.into_inner());
    Arc::clone(
        i.queues
            .entry(name.to_owned())
            .or_insert_with(|| MemQueue::new(delivery_limit)),
    )
}

/// Forgets the instances named `name` (their holders keep them alive until dropped).
pub fn forget(name: &str) {
    let mut i = instances().lock().unwrap_or_else(|p| p.into_inner());
    i.engines.remove(name);
    i.queues.remove(name);
}
