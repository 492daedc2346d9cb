//! The simulated workload: two workflows and the effect provider that counts applications
//! outside the engine.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use savepoint::workflow::{Ctx, EffectCtx, EffectOptions, EffectPolicy, Registry, StepError, Workflow, WorkflowError};

/// A provider of side effects (a payment API, a mailer): it keeps what it applied per key
/// and refuses a fencing token lower than one it has seen for the key. Some calls answer late.
pub(crate) struct Provider {
    state: Mutex<State>,
}

struct State {
    applied: BTreeMap<String, Vec<u64>>,
    highest: BTreeMap<String, u64>,
    refused: u64,
    rng: StdRng,
}

impl Provider {
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            state: Mutex::new(State {
                applied: BTreeMap::new(),
                highest: BTreeMap::new(),
                refused: 0,
                rng: StdRng::seed_from_u64(seed ^ 0x5EED),
            }),
        }
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

    /// The record of `key`, if it was applied (for the reconcile policy).
    fn find(&self, key: &str) -> Option<Value> {
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

/// `order`: step → effect `charge` (block) → sleep → step → effect `ship` (reconcile).
/// Unguarded (the checker's own test): `charge` is a plain step, so it may repeat.
struct Order(Arc<Provider>, bool);

impl Workflow for Order {
    const NAME: &'static str = "order";
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &mut Ctx, input: Value) -> Result<Value, WorkflowError> {
        let id = input["id"].as_u64().unwrap_or(0);
        let p = &self.0;
        let price: u64 = ctx
            .step("price", || async move { Ok::<_, StepError>(100 + id) })
            .await?;
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
            ctx.effect("charge", key, |fx| async move { p.apply(&fx).await })
                .await?
        };
        ctx.sleep("cool_off", Duration::from_millis(input["nap_ms"].as_u64().unwrap_or(0)))
            .await?;
        let label: String = ctx
            .step("label", || async move { Ok::<_, StepError>(format!("parcel-{id}")) })
            .await?;
        let prov = Arc::clone(p);
        let reconcile = EffectPolicy::reconcile(move |key: String| {
            let prov = Arc::clone(&prov);
            async move { Ok(prov.find(&key)) }
        });
        let shipped: Value = ctx
            .effect_with(
                "ship",
                format!("ship:{id}"),
                EffectOptions::policy(reconcile),
                |fx| async move { p.apply(&fx).await },
            )
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

    async fn run(&self, ctx: &mut Ctx, input: Value) -> Result<Value, WorkflowError> {
        let id = input["id"].as_u64().unwrap_or(0);
        let p = &self.0;
        let asked: String = ctx
            .step(
                "ask",
                || async move { Ok::<_, StepError>(format!("approve order {id}?")) },
            )
            .await?;
        let ok: bool = ctx.interrupt("gate", json!({"question": asked})).await?;
        let thread = ctx.thread_id().to_string();
        let notified: Value = ctx
            .effect(
                "notify",
                format!("notify:{thread}"),
                |fx| async move { p.apply(&fx).await },
            )
            .await?;
        Ok(json!({"approved": ok, "notified": notified}))
    }
}

fn ctx_thread(input: &Value) -> savepoint::ids::ThreadId {
    savepoint::ids::ThreadId::new(format!("sim-run-{}", input["id"].as_u64().unwrap_or(0)))
        .unwrap_or_else(|_| savepoint::ids::ThreadId::generate("sim"))
}

/// The simulated workers' registry.
pub(crate) fn registry(provider: Arc<Provider>, unguarded: bool) -> Registry {
    let mut r = Registry::new();
    r.register(Order(Arc::clone(&provider), unguarded))
        .register(Approve(provider));
    r
}
