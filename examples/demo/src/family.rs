//! `family {"kids", "hold"?, "detached"?, "wait"?}`: a parent that starts `kids` child runs of `kid`
//! one after another with `ctx.child` and awaits each, then `detached` more with
//! `ctx.start_child` without waiting (then, with `wait`, waits for the signal `done`);
//! outputs every child's output and the detached ids.
//! `kid {"n", "hold"?}` records one demo effect (`gift.send`, key `gift:<its thread id>`),
//! waits for the signal `go` first when `hold` is set, and outputs `{"n", "doubled"}`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use savepoint::ids::ThreadId;
use savepoint::workflow::{Ctx, Signal, Workflow, WorkflowError};

use crate::EffectLog;

/// Input of `family`.
#[derive(Debug, Serialize, Deserialize)]
pub struct FamilyIn {
    /// Children awaited one after another.
    pub kids: u32,
    /// Each child waits for the signal `go` before its effect.
    #[serde(default)]
    pub hold: bool,
    /// Children started and not awaited.
    #[serde(default)]
    pub detached: u32,
    /// After starting them, wait for the signal `done` before returning.
    #[serde(default)]
    pub wait: bool,
}

/// Input of `kid`.
#[derive(Debug, Serialize, Deserialize)]
pub struct KidIn {
    /// Its number.
    pub n: u64,
    /// Wait for the signal `go` first.
    #[serde(default)]
    pub hold: bool,
}

/// Output of `kid`.
#[derive(Debug, Serialize, Deserialize)]
pub struct KidOut {
    /// Its number.
    pub n: u64,
    /// Twice it.
    pub doubled: u64,
}

/// Output of `family`.
#[derive(Debug, Serialize, Deserialize)]
pub struct FamilyOut {
    /// Each awaited child's output, in order.
    pub children: Vec<KidOut>,
    /// The sum of their `doubled`.
    pub sum: u64,
    /// The thread ids of the children started and not awaited.
    pub detached: Vec<ThreadId>,
}

/// The signal `family` waits for (with `wait`) after starting its children: its value is not
/// read.
pub const DONE: Signal<Value> = Signal::new("done");

/// The signal each `kid` waits for first (with `hold`): its value is not read.
pub const GO: Signal<Value> = Signal::new("go");

/// The parent workflow.
pub struct Family;

impl Workflow for Family {
    const NAME: &'static str = "family";
    type Input = FamilyIn;
    type Output = FamilyOut;

    async fn run(&self, ctx: &Ctx, input: FamilyIn) -> Result<FamilyOut, WorkflowError> {
        let mut outputs = Vec::new();
        for n in 0..u64::from(input.kids) {
            let kid = KidIn { n, hold: input.hold };
            let out: KidOut = ctx.child::<Kid>(&format!("kid-{n}"), kid).await?;
            outputs.push(out);
        }
        let mut detached = Vec::new();
        for n in 0..u64::from(input.detached) {
            let kid = KidIn {
                n: 100 + n,
                hold: input.hold,
            };
            detached.push(ctx.start_child::<Kid>(&format!("detached-{n}"), kid).await?);
        }
        if input.wait {
            ctx.wait_signal(DONE).await?;
        }
        Ok(FamilyOut {
            sum: outputs.iter().map(|o| o.doubled).sum(),
            children: outputs,
            detached,
        })
    }
}

/// The child workflow.
pub struct Kid {
    log: EffectLog,
}

impl Kid {
    /// With an effect log.
    pub fn new(log: EffectLog) -> Self {
        Self { log }
    }
}

impl Workflow for Kid {
    const NAME: &'static str = "kid";
    type Input = KidIn;
    type Output = KidOut;

    async fn run(&self, ctx: &Ctx, input: KidIn) -> Result<KidOut, WorkflowError> {
        if input.hold {
            ctx.wait_signal(GO).await?;
        }
        let thread = ctx.thread_id().to_string();
        let key = format!("gift:{thread}");
        let log = &self.log;
        ctx.effect("gift.send", key.clone(), |_fx| {
            let (t, k) = (thread.clone(), key.clone());
            async move { log.record(&t, "gift.send", &k).await }
        })
        .await?;
        Ok(KidOut {
            n: input.n,
            doubled: input.n * 2,
        })
    }
}
