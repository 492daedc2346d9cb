//! The embedded store engine (feature `embedded`): the store's very Lua scripts (Lua 5.1, as
//! Redis embeds) over an in-memory keyspace that implements the Redis commands they send, so
//! the embedded store has the scripts' semantics by construction, not by a second
//! implementation of each rule. `mem://NAME` as the store URL names one process-wide instance
//! (created on first use). Time is tokio's clock (virtual under a paused runtime); faults are
//! injected through [`Faults`].

pub mod coverage;
pub(crate) mod keyspace;
mod lua;

use redis::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use lua::LuaHost;
use savepoint_core::mem::{Fault, FaultSlot, Faults, Op};
use savepoint_core::StoreError;

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

fn engines() -> &'static Mutex<HashMap<String, Arc<MemEngine>>> {
    static I: OnceLock<Mutex<HashMap<String, Arc<MemEngine>>>> = OnceLock::new();
    I.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Installs `engine` as the instance `name` (the simulator's engine with a fixed clock).
pub fn install_engine(name: &str, engine: Arc<MemEngine>) {
    let mut i = engines().lock().unwrap_or_else(|p| p.into_inner());
    i.insert(name.to_owned(), engine);
}

/// The process-wide store engine named `name` (created empty on first use).
pub fn engine(name: &str) -> Arc<MemEngine> {
    let mut i = engines().lock().unwrap_or_else(|p| p.into_inner());
    Arc::clone(i.entry(name.to_owned()).or_insert_with(MemEngine::new))
}

/// Forgets the store engine named `name` (its holders keep it alive until dropped).
pub fn forget(name: &str) {
    let mut i = engines().lock().unwrap_or_else(|p| p.into_inner());
    i.remove(name);
}
