//! The fulfilment workflow in the test kit, as its author tests it: in-process, on the
//! embedded backend, in virtual time (the cooling-off sleep passes at once), with a shop of
//! the test's own plugged in through the registry closure, the shipping approval answered
//! from a script, and the worker killed at every call, the ship after the approval included.
//! No RabbitMQ or Redis (plain `cargo test -p custom-worker`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use custom_worker_flows::{Fulfil, Order, Recorded, ShippingApproval, Shop, SHIPPING_APPROVAL};
use savepoint::workflow::{Registry, StepError};
use savepoint_testing::{Answers, CrashMatrix, RunStatus, TestEnv};

/// The test's shop: counts the calls of each run with each idempotency key.
#[derive(Clone, Default)]
struct CountingShop(Arc<Mutex<BTreeMap<(String, String), u32>>>);

impl CountingShop {
    /// Calls of each key by run `thread`.
    fn calls(&self, thread: &str) -> BTreeMap<String, u32> {
        let m = self.0.lock().expect("shop");
        m.iter()
            .filter(|((t, _), _)| t == thread)
            .map(|((_, k), n)| (k.clone(), *n))
            .collect()
    }
}

impl Shop for CountingShop {
    fn record<'a>(&'a self, thread: &'a str, _effect: &'a str, key: &'a str) -> Recorded<'a> {
        Box::pin(async move {
            let mut m = self.0.lock().map_err(|_| StepError::fatal("shop lock poisoned"))?;
            *m.entry((thread.to_owned(), key.to_owned())).or_default() += 1;
            Ok(())
        })
    }
}

fn registry(shop: CountingShop) -> Registry {
    let mut r = Registry::new();
    r.register(Fulfil::new(shop));
    r
}

fn order(id: &str) -> Order {
    Order {
        order_id: id.into(),
        sku: "mug".into(),
        qty: 2,
        amount_cents: 2_500,
        cooling_off_ms: 60_000,
    }
}

fn approved() -> Answers {
    Answers::new().interrupt(
        SHIPPING_APPROVAL,
        &ShippingApproval {
            approved: true,
            carrier: "DHL".into(),
        },
    )
}

#[tokio::test(start_paused = true)]
async fn an_approved_order_ships_and_each_effect_reaches_the_shop_once() {
    let shop = CountingShop::default();
    let mut env = TestEnv::new(|_setup| registry(shop.clone())).await.unwrap();
    // A failing quote service is retried: the stub replaces the step's function.
    env.stubs().stub("shipping.quote", |attempt| match attempt {
        1 => Err(StepError::retryable("quote service down")),
        _ => Ok(json!(700)),
    });
    let run = env.start::<Fulfil>(&order("O-1")).await.unwrap();
    let waiting = env.settle(&run).await.unwrap();
    assert_eq!(waiting.header.status, RunStatus::Waiting, "{:?}", waiting.header);
    // The cooling-off minute passed in virtual time before the approval was asked.
    let asked = waiting.header.updated_at - waiting.header.created_at;
    assert!(asked >= 60_000, "asked after {asked} ms");
    env.advance(Duration::from_secs(3600));
    env.resume(&run, json!({"approved": true, "carrier": "DHL"}))
        .await
        .unwrap();
    let done = env.settle(&run).await.unwrap();
    let out = done.output_as::<Fulfil>().unwrap();
    assert_eq!(out.shipment.map(|s| s.carrier), Some("DHL".to_owned()));
    assert_eq!(out.quote_cents, 700);
    assert_eq!(env.stubs().calls("shipping.quote"), 2);
    let want: BTreeMap<String, u32> = [("charge:O-1", 1), ("ship:O-1", 1), ("stock:O-1", 1)]
        .map(|(k, n)| (k.to_owned(), n))
        .into();
    assert_eq!(shop.calls(run.as_str()), want);
    // The approval came an hour after it was asked: the advance passed before the resume.
    let approved_at = done
        .journal
        .iter()
        .find(|e| e.name == "shipping_approval")
        .expect("approval")
        .at;
    assert!(approved_at - waiting.header.updated_at >= 3_600_000, "{approved_at}");
    env.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_approval_is_answered_from_a_script() {
    let shop = CountingShop::default();
    let mut env = TestEnv::new(|_setup| registry(shop.clone())).await.unwrap();
    let run = env.start::<Fulfil>(&order("O-3")).await.unwrap();
    let done = env.settle_answering(&run, &mut approved()).await.unwrap();
    assert_eq!(done.header.status, RunStatus::Completed, "{:?}", done.header);
    assert_eq!(shop.calls(run.as_str()).len(), 3);
    env.shutdown().await;
}

/// Killed at every call: the run completes, or (the shop's effects use the default policy,
/// block) stops for an operator when the kill fell between an effect's intent and its record;
/// no effect reaches the shop twice, and the ship after the approval is crashed at too. The
/// matrix calls the registry closure once per case, each case a run of its own.
#[tokio::test(start_paused = true)]
async fn the_order_survives_a_crash_at_every_call_including_after_the_approval() {
    let shop = CountingShop::default();
    let cases = CrashMatrix::of::<Fulfil>(|_| registry(shop.clone()), &order("O-2"))
        .answers(approved())
        .run(|env, case| {
            let h = &case.settled.header;
            let in_doubt = case.spec.starts_with("effect.after_intent") || case.spec.starts_with("effect.after_call");
            match h.status {
                RunStatus::Completed => {}
                RunStatus::Blocked => assert!(in_doubt, "{}: blocked for {:?}", case.spec, h.reason),
                other => panic!("{}: ended {other}: {h:?}", case.spec),
            }
            assert_eq!(env.crashes(), 1, "{}", case.spec);
            let calls = shop.calls(h.thread.as_str());
            assert!(calls.values().all(|n| *n == 1), "{}: {calls:?}", case.spec);
            if h.status == RunStatus::Completed {
                assert_eq!(calls.len(), 3, "{}: {calls:?}", case.spec);
            }
        })
        .await
        .unwrap();
    let ship = cases
        .iter()
        .find(|c| c.spec == "effect.after_call=abort@3")
        .expect("a crash at the ship, after the approval");
    assert_eq!(ship.answered_before_crash, 1);
    assert!(
        ship.settled.header.reason.as_deref().unwrap_or("").contains("ship:O-2"),
        "{:?}",
        ship.settled.header
    );
}
