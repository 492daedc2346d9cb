//! `fulfil`: an order-fulfilment workflow of the kind a new user writes first.
//!
//! reserve stock and quote shipping at once → charge the card under `charge:<order_id>` →
//! a cooling-off sleep (a durable timer) → wait for a person to approve the shipment →
//! ship (or refund).
//!
//! The effects stand in for a payment provider and a warehouse: each goes through a [`Shop`]
//! the binary plugs in (the example's appends to a Redis list of its own, so a test can count
//! at the "provider" that nothing happened twice; its kit test plugs in one in memory). This crate depends
//! on the SDK alone: no store, broker or server is in its tree (`.ci/sdk-deps` counts it).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use savepoint::workflow::{Ctx, Declared, Effect, Interrupt, Schemas, StepError, Workflow, WorkflowError};

/// Where the workflow's effects land: the payment provider and the warehouse. Each call
/// carries the effect's idempotency key, which a real provider deduplicates on.
pub trait Shop: Send + Sync + 'static {
    /// Applies `effect` for run `thread` under idempotency key `key`.
    fn record<'a>(&'a self, thread: &'a str, effect: &'a str, key: &'a str) -> Recorded<'a>;
}

/// What [`Shop::record`] returns: the provider's answer, later.
pub type Recorded<'a> = Pin<Box<dyn Future<Output = Result<(), StepError>> + Send + 'a>>;

/// The order to fulfil (the run's input).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Order {
    /// Order id: every effect key is derived from it.
    pub order_id: String,
    /// What was ordered.
    pub sku: String,
    /// How many.
    pub qty: u32,
    /// What to charge, in cents.
    pub amount_cents: u64,
    /// Length of the cooling-off period, ms.
    #[serde(default = "default_cooling_off_ms")]
    pub cooling_off_ms: u64,
}

fn default_cooling_off_ms() -> u64 {
    1000
}

/// What the person approving the shipment answers.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct ShippingApproval {
    /// Ship it (false: refund the charge).
    pub approved: bool,
    /// Which carrier.
    pub carrier: String,
}

/// The card charge the payment provider confirmed.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct Charge {
    /// The provider's charge id.
    pub charge_id: String,
    /// Amount charged, in cents.
    pub amount_cents: u64,
}

/// The shipment the warehouse confirmed.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct Shipment {
    /// Tracking number.
    pub tracking: String,
    /// Carrier.
    pub carrier: String,
}

/// The run's output.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Fulfilled {
    /// The order.
    pub order_id: String,
    /// The charge.
    pub charge: Charge,
    /// The shipment, when approved.
    pub shipment: Option<Shipment>,
    /// True when the shipment was refused and the charge refunded.
    pub refunded: bool,
    /// The shipping quote, cents.
    pub quote_cents: u64,
}

/// The person's approval of the shipment: declared once, its name and answer type together.
pub const SHIPPING_APPROVAL: Interrupt<ShippingApproval> = Interrupt::new("shipping_approval");
/// The effects, each declared once with its result type.
pub const STOCK_RESERVE: Effect<bool> = Effect::new("stock.reserve");
/// Charges the card (the key is derived from the order).
pub const CARD_CHARGE: Effect<Charge> = Effect::new("card.charge");
/// Ships the order with the approved carrier.
pub const SHIP: Effect<Shipment> = Effect::new("ship");
/// Refunds the charge when shipping is refused.
pub const REFUND: Effect<()> = Effect::new("refund");

/// The workflow.
pub struct Fulfil {
    shop: Box<dyn Shop>,
}

impl Fulfil {
    /// Applying its effects through `shop`.
    pub fn new(shop: impl Shop) -> Self {
        Self { shop: Box::new(shop) }
    }
}

impl Workflow for Fulfil {
    const NAME: &'static str = "fulfil";
    type Input = Order;
    type Output = Fulfilled;
    // The handles' schemas are published with the workflow's: the API refuses (422) an
    // approval of the wrong shape.
    const DECLARED: &'static [&'static dyn Declared] =
        &[&SHIPPING_APPROVAL, &STOCK_RESERVE, &CARD_CHARGE, &SHIP, &REFUND];

    fn schemas(&self) -> Schemas {
        Schemas::new().input::<Order>()
    }

    async fn run(&self, ctx: &Ctx, order: Order) -> Result<Fulfilled, WorkflowError> {
        let (shop, t) = (&self.shop, ctx.thread_id().as_str());
        // Two independent calls at once, in plain Rust: journaled in the order written,
        // whatever finishes first.
        let (_reserved, quote_cents) = futures::try_join!(
            ctx.effect(STOCK_RESERVE, format!("stock:{}", order.order_id), |fx| async move {
                shop.record(t, STOCK_RESERVE.name(), &fx.key).await?;
                Ok(true)
            }),
            ctx.step("shipping.quote", || async {
                // Any error type works with `?`: it is a retryable failure.
                let cents: u64 = format!("{}", 450 + 50 * u64::from(order.qty)).parse()?;
                Ok(cents)
            }),
        )?;
        // The key comes from the input, never from the clock: a resumed run derives the same
        // key and the provider is not charged twice.
        let charge = ctx
            .effect(CARD_CHARGE, format!("charge:{}", order.order_id), |fx| async move {
                shop.record(t, CARD_CHARGE.name(), &fx.key).await?;
                Ok(Charge {
                    charge_id: format!("ch_{}", fx.key),
                    amount_cents: order.amount_cents,
                })
            })
            .await?;
        ctx.sleep("cooling_off", Duration::from_millis(order.cooling_off_ms))
            .await?;
        let question = json!({
            "question": format!("Ship order {} ({} x {})?", order.order_id, order.qty, order.sku),
            "charge": charge,
        });
        let approval = ctx.interrupt(SHIPPING_APPROVAL, question).await?;
        if !approval.approved {
            ctx.effect(REFUND, format!("refund:{}", order.order_id), |fx| async move {
                shop.record(t, REFUND.name(), &fx.key).await?;
                Ok(())
            })
            .await?;
            return Ok(Fulfilled {
                order_id: order.order_id.clone(),
                charge,
                shipment: None,
                refunded: true,
                quote_cents,
            });
        }
        let carrier = approval.carrier.clone();
        let shipment = ctx
            .effect(SHIP, format!("ship:{}", order.order_id), |fx| {
                let carrier = carrier.clone();
                async move {
                    shop.record(t, SHIP.name(), &fx.key).await?;
                    Ok(Shipment {
                        tracking: format!("TRK-{}", fx.key),
                        carrier,
                    })
                }
            })
            .await?;
        Ok(Fulfilled {
            order_id: order.order_id.clone(),
            charge,
            shipment: Some(shipment),
            refunded: false,
            quote_cents,
        })
    }
}
