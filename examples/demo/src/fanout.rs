//! `fanout {"order_id"}`: five calls side by side (`futures::join!`): three steps (fetch the
//! order's three documents) and two effects (`stock.reserve` under `stock:<order_id>` and
//! `card.charge` under `charge:<order_id>`, both policy reconcile), then a race of a quote
//! step against a durable timeout (`ctx.select`). Used to prove that a group survives a
//! crash at every failpoint inside it with each effect applied once.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::time::Duration;

use savepoint::workflow::{Call, Ctx, EffectOptions, EffectPolicy, Selected, Workflow, WorkflowError};

use crate::EffectLog;

/// Input.
#[derive(Debug, Serialize, Deserialize)]
pub struct FanoutIn {
    /// The order (the effect keys are derived from it).
    pub order_id: String,
    /// Time each document fetch takes, ms (so the calls overlap visibly).
    #[serde(default = "default_fetch_ms")]
    pub fetch_ms: u64,
}

fn default_fetch_ms() -> u64 {
    50
}

/// Output.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FanoutOut {
    /// The results of the group, in call order.
    pub group: Vec<Value>,
    /// The quote, or `null` when the race timed out.
    pub quote: Option<Value>,
}

/// The fan-out demo.
pub struct Fanout {
    log: EffectLog,
}

impl Fanout {
    /// With an effect log.
    pub fn new(log: EffectLog) -> Self {
        Self { log }
    }
}

impl Workflow for Fanout {
    const NAME: &'static str = "fanout";
    type Input = FanoutIn;
    type Output = FanoutOut;

    async fn run(&self, ctx: &Ctx, input: FanoutIn) -> Result<FanoutOut, WorkflowError> {
        let thread = ctx.thread_id().to_string();
        let reconcile = || {
            let log = self.log.clone();
            EffectOptions::policy(EffectPolicy::reconcile(move |key: String| {
                let log = log.clone();
                async move { log.find(&key).await }
            }))
        };
        let (log, t, fetch) = (&self.log, &thread, Duration::from_millis(input.fetch_ms));
        let doc = |name: &'static str| {
            ctx.step(&format!("fetch.{name}"), move || async move {
                tokio::time::sleep(fetch).await;
                Ok(json!({"doc": name}))
            })
        };
        let effect = |name: &'static str, key: String| {
            ctx.effect(name, key, move |fx| async move {
                tokio::time::sleep(fetch).await;
                log.record(t, name, &fx.key).await?;
                Ok(json!({"applied": fx.key}))
            })
            .options(reconcile())
        };
        // Journaled in the order written, whatever order they finish in.
        let (invoice, stock, contract, charge, receipt) = futures::join!(
            doc("invoice"),
            effect("stock.reserve", format!("stock:{}", input.order_id)),
            doc("contract"),
            effect("card.charge", format!("charge:{}", input.order_id)),
            doc("receipt"),
        );
        let group = vec![invoice?, stock?, contract?, charge?, receipt?];
        let slow = Call::step("quote.slow", move || async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok(json!({"carrier": "slow"}))
        });
        let fast = Call::step("quote.fast", move || async move {
            tokio::time::sleep(fetch).await;
            Ok(json!({"carrier": "fast"}))
        });
        let quote = match ctx.select("quote", vec![slow, fast], Duration::from_secs(20)).await? {
            Selected::First(_, v) => Some(v),
            Selected::TimedOut => None,
        };
        Ok(FanoutOut { group, quote })
    }
}
