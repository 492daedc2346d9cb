//! The simulated workload: a workflow per feature (effects and waits, flow control, child
//! workflows, parallel groups, attempt time-outs; run deadlines are set at the start) and
//! the provider that witnesses them outside the engine: which effects it applied and how
//! often each was called, when each run entered a function, and how many runs of a
//! flow-control key were inside a step at once.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use savepoint::workflow::{
    Ctx, EffectCtx, EffectOptions, EffectPolicy, Migration, Registry, RetryPolicy, StepError, Versioned, Versions,
    Workflow, WorkflowError,
};
use savepoint_store::{BlockKind, RunHeader};

/// The flow-control keys of the `metered` runs and their limits.
pub(crate) const FLOW_KEYS: [(&str, usize); 2] = [("fa", 1), ("fb", 2)];

/// Workflows whose calls run side by side (`futures::join!`), with the order they are written
/// in: whatever order they finish in, a journal holds a prefix of it (never a later call before
/// an earlier one, never a gap).
pub(crate) const WRITTEN_ORDER: [(&str, &[&str]); 1] = [("batch", &["a", "middle", "b", "timed"])];

/// Effect key prefixes whose in-doubt policy is `block`: the engine must never call such an
/// effect's function twice (a second call could repeat it).
pub(crate) const BLOCK_KEYS: [&str; 7] = ["charge:", "notify:", "gift:", "timed:", "batch-a:", "batch-b:", "tock:"];

/// A provider of side effects (a payment API, a mailer): it keeps what it applied per key
/// and refuses a fencing token lower than one it has seen for the key. Some calls answer late.
pub(crate) struct Provider {
    state: Mutex<State>,
    started: tokio::time::Instant,
    /// Whether the operator deployed the fix for the planted bug.
    fixed: AtomicBool,
}

/// What a planted bug's panic says: the workflow code panics there until the operator
/// deploys the fix ([`Provider::fix`]) and retries the run.
pub(crate) const PLANTED_BUG: &str = "planted bug";

/// True for a run the planted bug blocked: a panic of the workflow code whose message is the
/// planted one (any other panic is an engine bug).
pub(crate) fn blocked_by_planted_bug(h: &RunHeader) -> bool {
    h.block_kind == Some(BlockKind::Panic) && h.reason.as_deref().is_some_and(|r| r.contains(PLANTED_BUG))
}

struct State {
    applied: BTreeMap<String, Vec<u64>>,
    highest: BTreeMap<String, u64>,
    refused: u64,
    rng: StdRng,
    /// Calls of each effect key's function (entered, whatever came of it).
    calls: BTreeMap<String, u32>,
    /// Runs inside a step of each flow-control key now, and the most seen at once.
    inside: BTreeMap<String, BTreeSet<String>>,
    most_inside: BTreeMap<String, usize>,
    /// Each time more runs of a key were inside a step than its limit.
    over: Vec<String>,
    /// Every function entered (an effect's call, a metered step): run, what, when (ms).
    entered: Vec<(String, String, u64)>,
    /// Attempts of each run's flaky step.
    attempts: BTreeMap<String, u32>,
}

impl Provider {
    pub(crate) fn new(seed: u64, started: tokio::time::Instant) -> Self {
        Self {
            state: Mutex::new(State {
                applied: BTreeMap::new(),
                highest: BTreeMap::new(),
                refused: 0,
                rng: StdRng::seed_from_u64(seed ^ 0x5EED),
                calls: BTreeMap::new(),
                inside: BTreeMap::new(),
                most_inside: BTreeMap::new(),
                over: Vec::new(),
                entered: Vec::new(),
                attempts: BTreeMap::new(),
            }),
            started,
            fixed: AtomicBool::new(false),
        }
    }

    /// The operator deploys the fix for the planted bug.
    pub(crate) fn fix(&self) {
        self.fixed.store(true, Ordering::Release);
    }

    fn fixed(&self) -> bool {
        self.fixed.load(Ordering::Acquire)
    }

    fn now(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Counts a call of the effect function for `key` by run `thread` (before its latency).
    fn called(&self, key: &str, thread: &str) {
        let now = self.now();
        if let Ok(mut s) = self.state.lock() {
            *s.calls.entry(key.to_owned()).or_default() += 1;
            s.entered.push((thread.to_owned(), key.to_owned(), now));
        }
    }

    /// `thread` enters a step of flow key `key` (limit `limit`); it leaves when the guard is
    /// dropped (the step returned, or its future was dropped: a crash, a lost lease).
    fn enter(self: &Arc<Self>, key: &str, limit: usize, thread: &str) -> Inside {
        let now = self.now();
        if let Ok(mut s) = self.state.lock() {
            s.entered
                .push((thread.to_owned(), format!("a step under flow key {key}"), now));
            let set = s.inside.entry(key.to_owned()).or_default();
            set.insert(thread.to_owned());
            let n = set.len();
            if n > limit {
                let who: Vec<String> = set.iter().cloned().collect();
                s.over.push(format!(
                    "{now} ms: {n} runs of flow key {key} (limit {limit}) inside a step: {who:?}"
                ));
            }
            let most = s.most_inside.entry(key.to_owned()).or_default();
            *most = (*most).max(n);
        }
        Inside {
            provider: Arc::clone(self),
            key: key.to_owned(),
            thread: thread.to_owned(),
        }
    }

    /// A service that is busy for the first `fails` attempts of `order`'s call (a
    /// retryable error), then answers.
    fn flaky(&self, order: &str, fails: u32) -> Result<(), StepError> {
        let Ok(mut s) = self.state.lock() else {
            return Err(StepError::retryable("provider poisoned"));
        };
        let n = s.attempts.entry(order.to_owned()).or_default();
        *n += 1;
        if *n <= fails {
            return Err(StepError::retryable(format!("busy (attempt {n})")));
        }
        Ok(())
    }

    /// Every function entered: the run, what it was, when (ms since the seed began).
    pub(crate) fn entered(&self) -> Vec<(String, String, u64)> {
        self.state.lock().map(|s| s.entered.clone()).unwrap_or_default()
    }

    /// Calls of each effect key's function.
    pub(crate) fn calls(&self) -> BTreeMap<String, u32> {
        self.state.lock().map(|s| s.calls.clone()).unwrap_or_default()
    }

    /// Every instant a flow key's limit was passed.
    pub(crate) fn over_limit(&self) -> Vec<String> {
        self.state.lock().map(|s| s.over.clone()).unwrap_or_default()
    }

    /// The most runs of each flow key seen inside a step at once.
    pub(crate) fn most_inside(&self) -> BTreeMap<String, usize> {
        self.state.lock().map(|s| s.most_inside.clone()).unwrap_or_default()
    }

    /// A delay before the call reaches the provider (sometimes past a lease).
    fn latency(&self) -> Duration {
        let Ok(mut s) = self.state.lock() else {
            return Duration::ZERO;
        };
        if s.rng.random::<f64>() < 0.05 {
            Duration::from_millis(s.rng.random_range(0..4000))
        } else {
            Duration::from_millis(s.rng.random_range(0..20))
        }
    }

    /// Applies the effect `key` with fencing token `fence`.
    async fn apply(&self, fx: &EffectCtx) -> Result<Value, StepError> {
        self.called(&fx.key, fx.thread.as_str());
        tokio::time::sleep(self.latency()).await;
        let mut s = self
            .state
            .lock()
            .map_err(|_| StepError::retryable("provider poisoned"))?;
        let high = s.highest.get(&fx.key).copied().unwrap_or(0);
        if fx.fence < high {
            s.refused += 1;
            return Err(StepError::fatal(format!(
                "stale fencing token {} (seen {high}): refused, not applied",
                fx.fence
            )));
        }
        s.highest.insert(fx.key.clone(), fx.fence);
        s.applied.entry(fx.key.clone()).or_default().push(fx.fence);
        Ok(json!({"applied": fx.key, "fence": fx.fence}))
    }

    /// [`Provider::apply`], read as a [`Receipt`].
    pub(crate) async fn receipt(&self, fx: &EffectCtx) -> Result<Receipt, StepError> {
        let v = self.apply(fx).await?;
        serde_json::from_value(v).map_err(|e| StepError::fatal(format!("the provider's receipt: {e}")))
    }

    /// The record of `key`, if it was applied (for the reconcile policy).
    pub(crate) fn find(&self, key: &str) -> Option<Value> {
        let s = self.state.lock().ok()?;
        s.applied
            .get(key)
            .and_then(|f| f.first())
            .map(|fence| json!({"applied": key, "fence": fence}))
    }

    /// Every key applied, with the fences of each application.
    pub(crate) fn applications(&self) -> BTreeMap<String, Vec<u64>> {
        self.state.lock().map(|s| s.applied.clone()).unwrap_or_default()
    }

    /// Calls refused for a stale token.
    pub(crate) fn refused(&self) -> u64 {
        self.state.lock().map(|s| s.refused).unwrap_or(0)
    }
}

/// What the provider answers for an applied effect, as a type (the `charge` effect's result).
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct Receipt {
    applied: String,
    fence: u64,
}

/// A run inside a flow-controlled step, as the provider counts it.
struct Inside {
    provider: Arc<Provider>,
    key: String,
    thread: String,
}

impl Drop for Inside {
    fn drop(&mut self) {
        if let Ok(mut s) = self.provider.state.lock() {
            if let Some(set) = s.inside.get_mut(&self.key) {
                set.remove(&self.thread);
            }
        }
    }
}

/// `order`: step → effect `charge` (block) → sleep → step `label` → effect `ship`
/// (reconcile); one order in eleven panics before `ship` until the operator fixes it. `label` calls a service that is busy at first: its first attempt fails for
/// one order in three (retried), its first five for one in seven (the step fails after its
/// three attempts, and the run with it, until an operator restarts it). Unguarded (the
/// checker's own test): `charge` is a plain step, so it may repeat.
struct Order(Arc<Provider>, bool);

impl Workflow for Order {
    const NAME: &'static str = "order";
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        let id = input["id"].as_u64().unwrap_or(0);
        let p = &self.0;
        let price: u64 = ctx.step("price", || async move { Ok(100 + id) }).await?;
        let key = format!("charge:{id}");
        let charged: Value = if self.1 {
            ctx.step("charge", || {
                let fx = EffectCtx {
                    key: key.clone(),
                    fence: u64::MAX,
                    thread: ctx_thread(&input),
                    index: 0,
                    attempt: 1,
                };
                async move { p.apply(&fx).await }
            })
            .await?
        } else {
            // A typed result: an operator's "applied" with a result of the wrong shape does
            // not decode, and the run takes it back (the key is in doubt again).
            let receipt: Receipt = ctx
                .effect("charge", key, |fx| async move { p.receipt(&fx).await })
                .await?;
            json!(receipt)
        };
        ctx.sleep("cool_off", Duration::from_millis(input["nap_ms"].as_u64().unwrap_or(0)))
            .await?;
        let fails = if id % 7 == 1 {
            5
        } else {
            u32::from(id.is_multiple_of(3))
        };
        // The service is busy for the order, not for a run of it: once it has answered, a
        // fork of the order finds it up (a crash mid-retry may have spent more than the
        // retry budget's attempts at it).
        let order = format!("order-{id}");
        let label: String = ctx
            .step("label", || {
                let order = order.clone();
                async move {
                    p.flaky(&order, fails)?;
                    Ok(format!("parcel-{id}"))
                }
            })
            .await?;
        // One order in eleven meets a bug here (its charge applied): the code panics, the run
        // blocks, and the operator retries it once the fix is deployed.
        if id % 11 == 4 && !p.fixed() {
            panic!("{PLANTED_BUG} in order {id}");
        }
        let prov = Arc::clone(p);
        let reconcile = EffectPolicy::reconcile(move |key: String| {
            let prov = Arc::clone(&prov);
            async move { Ok(prov.find(&key)) }
        });
        let shipped: Value = ctx
            .effect("ship", format!("ship:{id}"), |fx| async move { p.apply(&fx).await })
            .policy(reconcile)
            .await?;
        Ok(json!({"price": price, "charged": charged, "label": label, "shipped": shipped}))
    }
}

/// `approve`: step → interrupt `gate` → effect `notify` (block).
struct Approve(Arc<Provider>);

impl Workflow for Approve {
    const NAME: &'static str = "approve";
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        let id = input["id"].as_u64().unwrap_or(0);
        let p = &self.0;
        let asked: String = ctx
            .step("ask", || async move { Ok(format!("approve order {id}?")) })
            .await?;
        gate_then_notify(ctx, p, asked).await
    }
}

/// `approve`'s calls after its question, in both builds: the human's answer, then the
/// `notify` effect (block) under the run's thread id.
async fn gate_then_notify(ctx: &Ctx, p: &Provider, asked: String) -> Result<Value, WorkflowError> {
    let ok: bool = ctx.interrupt("gate", json!({"question": asked})).await?;
    let thread = ctx.thread_id().to_string();
    let notified: Value = ctx
        .effect(
            "notify",
            format!("notify:{thread}"),
            |fx| async move { p.apply(&fx).await },
        )
        .await?;
    Ok(json!({"approved": ok, "notified": notified, "asked": asked}))
}

/// What the second build of `approve` (deployed at the key rotation, when every worker
/// restarts) records for its `ask` step: the first build recorded the text itself (version
/// 1); this build records `{"text"}` (version 2) and upgrades a recorded text on replay.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Question {
    text: String,
}

impl Versioned for Question {
    const NAME: &'static str = "sim.Question";
    const VERSION: u32 = 2;
    fn upgrade(from: u32, v: Value) -> Result<Value, Migration> {
        upgrade_question(from, v)
    }
}

/// The question's migration from version 1 (the text itself) to 2 (`{"text"}`).
fn upgrade_question(from: u32, v: Value) -> Result<Value, Migration> {
    match (from, v) {
        (1, Value::String(text)) => Ok(json!({ "text": text })),
        (1, other) => Err(Migration::failed(format!("version 1 is text, not {other}"))),
        _ => Err(Migration::Missing),
    }
}

/// The question `approve` records, whichever module its type lives in.
pub(crate) trait Asked:
    Versioned + serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static
{
    fn new(text: String) -> Self;
    fn text(self) -> String;
}

impl Asked for Question {
    fn new(text: String) -> Self {
        Question { text }
    }
    fn text(self) -> String {
        self.text
    }
}

/// The rolling deploy's later half: the same build with [`Question`] moved to another module
/// (an ordinary refactor), its name the author's, unchanged. Runs that recorded the type on
/// worker 0 (the first to roll) are read here (invariant 16: none blocks or waits for a build).
pub(crate) mod moved {
    use super::{Asked, Migration, Value, Versioned};

    #[derive(serde::Serialize, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct Question {
        text: String,
    }

    impl Versioned for Question {
        const NAME: &'static str = "sim.Question";
        const VERSION: u32 = 2;
        fn upgrade(from: u32, v: Value) -> Result<Value, Migration> {
            super::upgrade_question(from, v)
        }
    }

    impl Asked for Question {
        fn new(text: String) -> Self {
            Question { text }
        }
        fn text(self) -> String {
            self.text
        }
    }
}

/// `approve` as the second build has it: the same calls and output, the `ask` step's value a
/// [`Question`] (`Q`: the type, in the module the build keeps it in).
struct ApproveV2<Q>(Arc<Provider>, std::marker::PhantomData<fn() -> Q>);

impl<Q: Asked> Workflow for ApproveV2<Q> {
    const NAME: &'static str = "approve";
    type Input = Value;
    type Output = Value;

    fn versions() -> Versions {
        Versions::new().of::<Q>()
    }

    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        let id = input["id"].as_u64().unwrap_or(0);
        let p = &self.0;
        let asked: Q = ctx
            .step("ask", || async move { Ok(Q::new(format!("approve order {id}?"))) })
            .await?;
        gate_then_notify(ctx, p, asked.text()).await
    }
}

fn ctx_thread(input: &Value) -> savepoint_core::ids::ThreadId {
    savepoint_core::ids::ThreadId::new(format!("sim-run-{}", input["id"].as_u64().unwrap_or(0)))
        .unwrap_or_else(|_| savepoint_core::ids::ThreadId::generate("sim"))
}

/// `metered {id, key, steps}`: `steps` steps under flow control (the run is started with
/// `flow.key_from = /key`), each witnessed inside by the provider for a while.
struct Metered(Arc<Provider>);

impl Workflow for Metered {
    const NAME: &'static str = "metered";
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        let id = input["id"].as_u64().unwrap_or(0);
        let key = input["key"].as_str().unwrap_or("fa").to_owned();
        // (The key carries the input's plaintext marker: `<marker>-fa`.)
        let limit = FLOW_KEYS
            .iter()
            .find(|(k, _)| key.ends_with(&format!("-{k}")) || key == *k)
            .map_or(1, |(_, l)| *l);
        let thread = ctx.thread_id().to_string();
        let mut total = 0;
        for i in 0..input["steps"].as_u64().unwrap_or(3) {
            let ms = 10 + (id * 37 + i * 61) % 240;
            let (p, k, t) = (Arc::clone(&self.0), key.clone(), thread.clone());
            let n: u64 = ctx
                .step(&format!("work-{i}"), || {
                    let (p, k, t) = (p.clone(), k.clone(), t.clone());
                    async move {
                        let _inside = p.enter(&k, limit, &t);
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        Ok(ms)
                    }
                })
                .await?;
            total += n;
        }
        Ok(json!({"total": total, "secret": input["secret"]}))
    }
}

/// `parent {id}`: awaits a child `kid`, starts another and goes on, then lingers (a sleep),
/// so a cancel can find children at work.
struct Parent;

impl Workflow for Parent {
    const NAME: &'static str = "parent";
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        let id = input["id"].as_u64().unwrap_or(0);
        let first: Value = ctx.child::<Kid>("kid-a", kid_a(id)).await?;
        parent_after(ctx, input, first, ctx.start_child::<Kid>("kid-b", kid_b(id)).await?).await
    }
}

/// `parent` as the second build has it: the same calls and output, its first child's output
/// read as the second build's [`KidOut`] (the first build's outputs upgraded on the way in).
struct ParentV2;

impl Workflow for ParentV2 {
    const NAME: &'static str = "parent";
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        let id = input["id"].as_u64().unwrap_or(0);
        let first: KidOut = ctx.child::<KidV2>("kid-a", kid_a(id)).await?;
        let first = json!({"n": first.count, "gift": first.gift});
        parent_after(ctx, input, first, ctx.start_child::<KidV2>("kid-b", kid_b(id)).await?).await
    }
}

/// The input of `parent {id}`'s awaited child: its `n` is `2 * id`.
fn kid_a(id: u64) -> Value {
    json!({"id": id, "nap_ms": (id * 131) % 900})
}

/// The input of `parent {id}`'s detached child.
fn kid_b(id: u64) -> Value {
    json!({"id": id + 1000, "nap_ms": (id * 71) % 1500})
}

/// `parent`'s calls after its children, in both builds.
async fn parent_after(
    ctx: &Ctx,
    input: Value,
    first: Value,
    other: savepoint_core::ids::ThreadId,
) -> Result<Value, WorkflowError> {
    let id = input["id"].as_u64().unwrap_or(0);
    ctx.sleep("linger", Duration::from_millis((id * 53) % 1200)).await?;
    Ok(json!({"first": first, "other": other, "secret": input["secret"]}))
}

/// `kid {id, nap_ms}`: a step, a sleep, then the effect `gift` (block) under its thread id.
struct Kid(Arc<Provider>);

impl Workflow for Kid {
    const NAME: &'static str = "kid";
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        let (n, gift) = kid_calls(ctx, &self.0, &input).await?;
        Ok(json!({"n": n, "gift": gift}))
    }
}

/// `kid`'s calls, in both builds: its count and its gift.
async fn kid_calls(ctx: &Ctx, p: &Provider, input: &Value) -> Result<(u64, Value), WorkflowError> {
    let id = input["id"].as_u64().unwrap_or(0);
    let n: u64 = ctx.step("count", || async move { Ok(id * 2) }).await?;
    ctx.sleep("nap", Duration::from_millis(input["nap_ms"].as_u64().unwrap_or(0)))
        .await?;
    let gift: Value = ctx
        .effect("gift", format!("gift:{}", ctx.thread_id()), |fx| async move {
            p.apply(&fx).await
        })
        .await?;
    Ok((n, gift))
}

/// What the second build's `kid` returns: the first build's `{n, gift}` with `n` renamed
/// `count` (version 2). A parent of either build reads a kid's output from the version the
/// kid's build wrote it at.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KidOut {
    count: u64,
    gift: Value,
}

impl Versioned for KidOut {
    const NAME: &'static str = "sim.KidOut";
    const VERSION: u32 = 2;
    fn upgrade(from: u32, mut v: Value) -> Result<Value, Migration> {
        let Some(o) = v.as_object_mut().filter(|_| from == 1) else {
            return Err(Migration::Missing);
        };
        let n = o.remove("n").ok_or_else(|| Migration::failed("no n"))?;
        o.insert("count".into(), n);
        Ok(v)
    }
}

/// `kid` as the second build has it: the same calls, its output a [`KidOut`].
struct KidV2(Arc<Provider>);

impl Workflow for KidV2 {
    const NAME: &'static str = "kid";
    type Input = Value;
    type Output = KidOut;

    fn versions() -> Versions {
        Versions::new().of::<KidOut>()
    }

    async fn run(&self, ctx: &Ctx, input: Value) -> Result<KidOut, WorkflowError> {
        let (count, gift) = kid_calls(ctx, &self.0, &input).await?;
        Ok(KidOut { count, gift })
    }
}

/// `batch {id}`: two effects (block) and a step side by side (`futures::join!`), then an effect whose
/// attempts time out when the provider is slow (block: cut off means in doubt, never a second
/// call).
struct Batch(Arc<Provider>);

impl Workflow for Batch {
    const NAME: &'static str = "batch";
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        let id = input["id"].as_u64().unwrap_or(0);
        let p = &self.0;
        // Side by side in plain Rust: journaled in the order written.
        let (a, middle, b) = futures::join!(
            ctx.effect("a", format!("batch-a:{id}"), |fx| async move { p.apply(&fx).await }),
            ctx.step("middle", move || async move { Ok(json!(id)) }),
            ctx.effect("b", format!("batch-b:{id}"), |fx| async move { p.apply(&fx).await }),
        );
        let out: Vec<Value> = vec![a?, middle?, b?];
        let policy = RetryPolicy {
            initial: Duration::from_millis(50),
            ..RetryPolicy::attempts(3)
        }
        .with_attempt_timeout(Duration::from_millis(400));
        let opts = EffectOptions {
            retry: Some(policy),
            ..EffectOptions::default()
        };
        let timed: Value = ctx
            .effect("timed", format!("timed:{id}"), |fx| async move { p.apply(&fx).await })
            .options(opts)
            .await?;
        Ok(json!({"group": out, "timed": timed, "secret": input["secret"]}))
    }
}

/// `pace {id, steps, secret}`: steps that fold their index into a running value, each followed
/// by a short durable sleep, no effect. With slices of two calls, every sleep and yield parks
/// the body on its worker (ARCHITECTURE §7, "Parked bodies"), and the continuations land on
/// any of the workers: a body goes on only over the journal it parked at, or replays. Its
/// output is a pure function of its input ([`pace_output`]), checked at the end (invariant 17).
struct Pace;

/// What a `pace` run of `steps` steps under `id` returns.
pub(crate) fn pace_output(id: u64, steps: u64) -> u64 {
    (0..steps).fold(id, |acc, i| acc.wrapping_mul(31).wrapping_add(i + 1) % 1_000_000_007)
}

impl Workflow for Pace {
    const NAME: &'static str = "pace";
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        let id = input["id"].as_u64().unwrap_or(0);
        let steps = input["steps"].as_u64().unwrap_or(0);
        let mut acc = id;
        for i in 0..steps {
            let before = acc;
            acc = ctx
                .step(&format!("s{i}"), move || async move {
                    Ok(before.wrapping_mul(31).wrapping_add(i + 1) % 1_000_000_007)
                })
                .await?;
            let nap = 5 + (id * 7 + i * 13) % 120;
            ctx.sleep(&format!("z{i}"), Duration::from_millis(nap)).await?;
        }
        Ok(json!({"acc": acc, "secret": input["secret"]}))
    }
}

/// A build of the simulated workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Build {
    /// Before the rolling deploy.
    First,
    /// The second build, as worker 0 runs it first.
    Second,
    /// The second build with [`Question`] moved to another module, as every worker runs once
    /// the deploy has rolled.
    Moved,
}

/// The simulated workers' registry: the first build, or the second, whose
/// `approve` records its question as a versioned [`Question`] and whose `kid` returns a
/// versioned [`KidOut`].
pub(crate) fn registry(provider: Arc<Provider>, unguarded: bool, build: Build) -> Registry {
    let mut r = Registry::new();
    r.register(Order(Arc::clone(&provider), unguarded));
    if build != Build::First {
        if build == Build::Moved {
            r.register(ApproveV2::<moved::Question>(Arc::clone(&provider), Default::default()));
        } else {
            r.register(ApproveV2::<Question>(Arc::clone(&provider), Default::default()));
        }
        r.register(ParentV2).register(KidV2(Arc::clone(&provider)));
    } else {
        r.register(Approve(Arc::clone(&provider)))
            .register(Parent)
            .register(Kid(Arc::clone(&provider)));
    }
    r.register(Metered(Arc::clone(&provider)))
        .register(Batch(Arc::clone(&provider)))
        .register(Pace)
        .register(Hog)
        .register(Lasting(Arc::clone(&provider)))
        .register(Tock(provider));
    r
}

/// `lasting {}`: an effect, a question a human answers however late, another effect: what the
/// long-stop phase stops for longer than every TTL (invariant 19).
struct Lasting(Arc<Provider>);

impl Workflow for Lasting {
    const NAME: &'static str = "lasting";
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let thread = ctx.thread_id().to_string();
        let p = &self.0;
        let shipped: Value = ctx
            .effect("ship", format!("ship:{thread}"), |fx| async move { p.apply(&fx).await })
            .await?;
        let ok: bool = ctx.interrupt("gate", json!({"question": "bill it?"})).await?;
        let billed: Value = ctx
            .effect("bill", format!("bill:{thread}"), |fx| async move { p.apply(&fx).await })
            .await?;
        Ok(json!({"shipped": shipped, "ok": ok, "billed": billed}))
    }
}

/// `hog {steps, ms}`: steps that each hold their worker's slot for `ms` (a slow call inside
/// the step), no effect: with slices of two calls each run yields between its steps, to its
/// worker's sticky queue. What the busy-worker phase loads one worker with (invariant 18);
/// with one step of a few ms, the short runs started beside them.
struct Hog;

impl Workflow for Hog {
    const NAME: &'static str = "hog";
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        let steps = input["steps"].as_u64().unwrap_or(1);
        let ms = input["ms"].as_u64().unwrap_or(1);
        for i in 0..steps {
            ctx.step(&format!("h{i}"), move || async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(i)
            })
            .await?;
        }
        Ok(json!({"steps": steps}))
    }
}

/// `tock {}`: what the simulated schedules start: a step that takes 0.3–2.5 s (so firings a
/// second apart overlap it), then the effect `tock` (block) under its thread id.
struct Tock(Arc<Provider>);

impl Workflow for Tock {
    const NAME: &'static str = "tock";
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let thread = ctx.thread_id().to_string();
        let ms = 300
            + thread
                .bytes()
                .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64))
                % 2200;
        ctx.step("work", || async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(ms)
        })
        .await?;
        let p = &self.0;
        let done: Value = ctx
            .effect("tock", format!("tock:{thread}"), |fx| async move { p.apply(&fx).await })
            .await?;
        Ok(done)
    }
}
