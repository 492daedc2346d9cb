//! A parallel group under real SIGKILLs: a worker running `fanout` (three steps and two
//! effects side by side under `futures::join!`, then a race against a timeout) is killed with SIGKILL at each
//! failpoint and hit inside the group; a fresh worker finishes the run. Counted at the
//! provider (the demo effects log in Redis): each effect applied exactly once, the journal in
//! call order.

use serde_json::json;
use std::time::Duration;

use savepoint_core::ids::ThreadId;
use savepoint_integration_tests::procs::{killed_by_signal, Proc};
use savepoint_integration_tests::scenario::World;

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");
const LONG: Duration = Duration::from_secs(40);

async fn killed_at(w: &World, failpoint: &str) {
    let order = format!("O-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let mut a: Proc = w.worker(WORKER, "wa", failpoint);
    w.wait_registered("fanout").await;
    let t: ThreadId = w.start("fanout", json!({"order_id": order, "fetch_ms": 100})).await;
    let status = a.wait_exit(LONG).await;
    assert!(
        killed_by_signal(&status),
        "{failpoint}: worker should have been killed, got {status}"
    );
    let _b = w.worker(WORKER, "wb", "");
    let run = w.wait_status(&t, &["completed"], LONG).await;
    assert_eq!(run["output"]["quote"], json!({"carrier": "fast"}), "{failpoint}: {run}");
    let counts = w.effect_counts().await;
    for key in [format!("stock:{order}"), format!("charge:{order}")] {
        assert_eq!(
            counts.get(&key),
            Some(&1),
            "{failpoint}: {key} applied once: {counts:?}"
        );
    }
    let (_, hist) = w.get(&format!("/v1/runs/{t}/history")).await;
    let names: Vec<&str> = hist["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| e["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        names,
        [
            "fetch.invoice",
            "stock.reserve",
            "fetch.contract",
            "card.charge",
            "fetch.receipt",
            "quote.deadline",
            "quote"
        ],
        "{failpoint}"
    );
}

#[tokio::test]
async fn a_parallel_group_survives_sigkill_at_every_failpoint_with_each_effect_once() {
    let w = World::new("cp", |_| {}).await;
    for (point, n) in [
        ("worker.after_claim", 1),
        ("effect.after_intent", 1),
        ("effect.after_intent", 2),
        ("effect.after_call", 1),
        ("effect.after_call", 2),
        ("effect.after_done", 1),
        ("effect.after_done", 2),
        ("step.before_commit", 1),
        ("step.before_commit", 3),
        ("step.after_commit", 2),
        ("step.after_commit", 4),
    ] {
        killed_at(&w, &format!("{point}=kill@{n}")).await;
    }
}
