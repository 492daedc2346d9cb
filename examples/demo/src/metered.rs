//! `metered {"customer", "steps"?, "step_ms"?}`: `steps` steps (default 2), each taking
//! `step_ms` (default 20). Each step is witnessed: while it runs, the run is a member of the
//! sorted set `<ns>:demo:witness:<customer>` (expiring with a lease, as a flow slot does), and
//! the most members ever seen together is kept in the hash `<ns>:demo:witness_max` under the
//! customer. A flow-control test reads it: it must never pass the key's limit.

use serde::{Deserialize, Serialize};
use std::time::Duration;

use savepoint::workflow::{Ctx, StepError, Workflow, WorkflowError};
use savepoint_store::ScriptStore;

/// Input.
#[derive(Debug, Serialize, Deserialize)]
pub struct MeteredIn {
    /// Whose run it is (the witness's key).
    pub customer: String,
    /// Steps.
    #[serde(default = "two")]
    pub steps: u32,
    /// Milliseconds each step takes.
    #[serde(default = "twenty")]
    pub step_ms: u64,
}

fn two() -> u32 {
    2
}

fn twenty() -> u64 {
    20
}

const ENTER: &str = "local t = redis.call('TIME') \
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) \
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1]) \
local n = redis.call('ZCARD', KEYS[1]) \
if n > tonumber(redis.call('HGET', KEYS[2], ARGV[3]) or '0') then redis.call('HSET', KEYS[2], ARGV[3], n) end \
return n";

/// Output.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MeteredOut {
    /// Whose run it was.
    pub customer: String,
    /// For each step, how many of the customer's runs were inside a step together with it.
    pub together: Vec<u64>,
}

/// The witnessed workflow.
pub struct Metered {
    store: ScriptStore,
}

impl Metered {
    /// Witnessing in `store`'s namespace.
    pub fn new(store: &ScriptStore) -> Self {
        Self { store: store.clone() }
    }

    async fn witnessed(&self, thread: &str, customer: &str, ms: u64) -> Result<u64, StepError> {
        let ns = self.store.keys().namespace().to_string();
        let (set, max) = (
            format!("{ns}:demo:witness:{customer}"),
            format!("{ns}:demo:witness_max"),
        );
        // A member expires with a lease (no grace), so a killed worker's step stops counting
        // no later than its slot is freed.
        let ttl = self.store.config().lease.as_millis() as u64;
        let mut enter = redis::cmd("EVAL");
        enter
            .arg(ENTER)
            .arg(2)
            .arg(&set)
            .arg(&max)
            .arg(thread)
            .arg(ttl)
            .arg(customer);
        let n: u64 = self.store.query(&enter).await?;
        tokio::time::sleep(Duration::from_millis(ms)).await;
        let _: i64 = self.store.query(redis::cmd("ZREM").arg(&set).arg(thread)).await?;
        Ok(n)
    }
}

impl Workflow for Metered {
    const NAME: &'static str = "metered";
    type Input = MeteredIn;
    type Output = MeteredOut;

    async fn run(&self, ctx: &Ctx, input: MeteredIn) -> Result<MeteredOut, WorkflowError> {
        let thread = ctx.thread_id().to_string();
        let mut seen = Vec::new();
        for i in 0..input.steps {
            let (t, c) = (&thread, &input.customer);
            let n: u64 = ctx
                .step(&format!("s{i}"), || self.witnessed(t, c, input.step_ms))
                .await?;
            seen.push(n);
        }
        Ok(MeteredOut {
            customer: input.customer,
            together: seen,
        })
    }
}
