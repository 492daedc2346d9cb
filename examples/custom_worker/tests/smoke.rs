//! The example worker as a real process against real RabbitMQ and Redis: a typed client
//! starts an order and approves it; a wrong-shaped answer is refused with 422 while the run
//! keeps waiting; a worker SIGKILLed right after charging the card leaves the charge in doubt,
//! and the operator's resolve is checked against the charge's schema (a missing or
//! wrong-shaped result is refused, nothing changes) before the run goes on. Every effect is
//! counted at the provider: once each.

use serde_json::json;
use std::time::Duration;

use custom_worker_flows::{Charge, Fulfil, Fulfilled, Order, ShippingApproval, SHIPPING_APPROVAL};
use savepoint::ids::ThreadId;
use savepoint_client::{Client, ClientError};
use savepoint_integration_tests::procs::killed_by_signal;
use savepoint_integration_tests::scenario::World;

const WORKER: &str = env!("CARGO_BIN_EXE_custom-worker");
const LONG: Duration = Duration::from_secs(40);

fn new_order() -> Order {
    Order {
        order_id: format!("O-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]),
        sku: "mug".into(),
        qty: 2,
        amount_cents: 2_500,
        cooling_off_ms: 300,
    }
}

/// What the worker's shop recorded (its own list, `<namespace>:shop:calls`), by key.
async fn shop_counts(w: &World) -> std::collections::BTreeMap<String, usize> {
    let client = redis::Client::open(w.cfg.redis_url.as_str()).expect("redis url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis");
    let raw: Vec<String> = redis::cmd("LRANGE")
        .arg(format!("{}:shop:calls", w.cfg.namespace))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .expect("lrange");
    let mut counts = std::collections::BTreeMap::new();
    for r in raw
        .iter()
        .filter_map(|s| serde_json::from_str::<serde_json::Value>(s).ok())
    {
        *counts.entry(r["key"].as_str().unwrap_or("").to_owned()).or_insert(0) += 1;
    }
    counts
}

/// Counted at the provider: exactly these effects of the order, each once.
async fn applied_once(w: &World, order: &Order, effects: &[&str]) {
    let counts = shop_counts(w).await;
    for key in effects {
        let key = format!("{key}:{}", order.order_id);
        assert_eq!(counts.get(&key), Some(&1), "{key}: {counts:?}");
    }
    assert_eq!(counts.len(), effects.len(), "{counts:?}");
}

#[tokio::test]
async fn an_order_is_fulfilled_once_and_a_wrong_answer_is_refused() {
    let w = World::new("cw", |_| {}).await;
    let _wk = w.worker(WORKER, "shop-1", "");
    w.wait_registered("fulfil").await;
    let client = Client::new(&w.sched.base_url);

    // A wrong-shaped input never creates a run.
    let err = client
        .api()
        .start("fulfil", Some(json!({"order_id": "x"})), None)
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(422), "{err}");
    assert!(err.to_string().contains("sku"), "{err}");

    let order = new_order();
    let run = client.start::<Fulfil>(&order).await.expect("start");
    let t = ThreadId::new(run.thread_id().to_owned()).unwrap();
    let view = w.wait_status(&t, &["waiting"], LONG).await;
    assert_eq!(view["wait"]["name"], "shipping_approval", "{view}");

    // `resume '"yes"'`: 422 with the schema error, and the run still waits.
    let (code, body) = w.post(&format!("/v1/runs/{t}/resume"), json!({"value": "yes"})).await;
    assert_eq!(code, 422, "{body}");
    assert!(body["error"].as_str().unwrap().contains("shipping_approval"), "{body}");
    let (code, body) = w
        .post(
            &format!("/v1/runs/{t}/resume"),
            json!({"value": {"approved": "yes", "carrier": "DHL"}}),
        )
        .await;
    assert_eq!(code, 422, "{body}");
    assert!(body["error"].as_str().unwrap().contains("/approved"), "{body}");
    assert_eq!(w.run(&t).await["status"], "waiting");

    // The typed client: the run's view decodes into the API's model, and the run waits at
    // the handle's interrupt with the workflow's question.
    let typed = run.view().await.expect("typed view");
    assert_eq!(typed.interrupts.len(), 1, "{typed:?}");
    let question = run
        .interrupt_pending(SHIPPING_APPROVAL, LONG)
        .await
        .expect("the approval is pending");
    assert!(
        question["question"].as_str().unwrap_or("").contains("Ship order"),
        "{question}"
    );

    // A typed answer to another interrupt than the one pending is refused before sending.
    const OTHER: savepoint::workflow::Interrupt<ShippingApproval> = savepoint::workflow::Interrupt::new("other");
    let approval = ShippingApproval {
        approved: true,
        carrier: "DHL".into(),
    };
    let wrong = run
        .answer(OTHER, &approval)
        .await
        .expect_err("not the pending interrupt");
    assert!(wrong.to_string().contains("\"other\""), "{wrong}");
    assert_eq!(w.run(&t).await["status"], "waiting");
    run.answer(SHIPPING_APPROVAL, &approval).await.expect("typed answer");
    let done: Fulfilled = run.output(LONG).await.expect("typed output");
    assert_eq!(done.charge.amount_cents, 2_500);
    assert_eq!(done.shipment.as_ref().map(|s| s.carrier.as_str()), Some("DHL"));
    assert_eq!(done.quote_cents, 550);
    applied_once(&w, &order, &["stock", "charge", "ship"]).await;

    // Waiting for a run that cannot complete says why.
    let refused = client.start::<Fulfil>(&new_order()).await.expect("start");
    let rt = ThreadId::new(refused.thread_id().to_owned()).unwrap();
    w.wait_status(&rt, &["waiting"], LONG).await;
    refused.cancel(Some("customer withdrew")).await.expect("cancel");
    match refused.output(LONG).await {
        Err(ClientError::Run { status, .. }) => assert_eq!(status, "cancelled"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn resolving_an_in_doubt_charge_is_checked_against_its_schema() {
    let w = World::new("cr", |_| {}).await;
    // The second effect call is the charge (the first is the stock reservation).
    let mut a = w.worker(WORKER, "shop-1", "effect.after_call=kill@2");
    w.wait_registered("fulfil").await;
    let client = Client::new(&w.sched.base_url);
    let order = new_order();
    let run = client.start::<Fulfil>(&order).await.expect("start");
    let t = ThreadId::new(run.thread_id().to_owned()).unwrap();
    let status = a.wait_exit(LONG).await;
    assert!(killed_by_signal(&status), "{status}");
    let _b = w.worker(WORKER, "shop-2", "");
    let view = w.wait_status(&t, &["blocked"], LONG).await;
    let key = format!("charge:{}", order.order_id);
    assert_eq!(
        view["blocked_reason"],
        json!(format!("effect {key} outcome unknown")),
        "{view}"
    );
    assert!(
        view.get("finished_at").is_none_or(|f| f.is_null()),
        "a blocked run has not finished: {view}"
    );
    let path = format!("/v1/runs/{t}/effects/{key}/resolve");

    // `resolve --applied true` without `--result`: refused, the charge type is not ().
    let (code, body) = w.post(&path, json!({"applied": true})).await;
    assert_eq!(code, 422, "{body}");
    assert!(body["error"].as_str().unwrap().contains("card.charge"), "{body}");
    // A result of the wrong shape: refused with the schema error.
    let (code, body) = w.post(&path, json!({"applied": true, "result": {"id": 1}})).await;
    assert_eq!(code, 422, "{body}");
    assert!(body["error"].as_str().unwrap().contains("charge_id"), "{body}");
    assert_eq!(w.run(&t).await["status"], "blocked");

    // The provider did charge (the log says so): resolve with the charge it made.
    let charge = Charge {
        charge_id: format!("ch_{key}"),
        amount_cents: 2_500,
    };
    let (code, body) = w
        .post(
            &path,
            json!({"applied": true, "result": serde_json::to_value(&charge).unwrap()}),
        )
        .await;
    assert_eq!(code, 202, "{body}");
    w.wait_status(&t, &["waiting"], LONG).await;
    run.resume(&ShippingApproval {
        approved: false,
        carrier: String::new(),
    })
    .await
    .expect("resume");
    let done = run.output(LONG).await.expect("output");
    assert!(done.refunded);
    assert_eq!(done.charge, charge);
    applied_once(&w, &order, &["stock", "charge", "refund"]).await;
}
