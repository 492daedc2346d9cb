//! The seed's six worked examples, as Savepoint scenarios against real RabbitMQ and Redis.

use serde_json::{json, Value};
use std::time::Duration;

use savepoint::protocol::{Task, TaskReason};
use savepoint_integration_tests::procs::killed_by_signal;
use savepoint_integration_tests::scenario::World;
use savepoint_worker::replay::{replay, ReplayReport};

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");
const LONG: Duration = Duration::from_secs(40);

fn invoice_id() -> String {
    format!("INV-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

/// Example 1: a retry that starts over (a new run, no memory of the first) repeats the
/// email, whose key is scoped to the run: the default of every retry system.
#[tokio::test]
async fn ex1_retry_as_a_new_run_duplicates_the_email() {
    let w = World::new("e1", |_| {}).await;
    let _wk = w.worker(WORKER, "wk", "");
    w.wait_registered("invoice").await;
    let inv = invoice_id();
    let first = w.start("invoice", json!({"invoice_id": inv})).await;
    w.wait_status(&first, &["completed"], LONG).await;
    let retry = w.start("invoice", json!({"invoice_id": inv})).await;
    w.wait_status(&retry, &["completed"], LONG).await;
    let emails = w
        .effects()
        .await
        .into_iter()
        .filter(|r| r["effect"] == "email.send")
        .count();
    assert_eq!(emails, 2, "sends: 2 — two runs, two emails");
}

/// Example 2: an idempotency key makes the second call a skip: the ledger key is the
/// invoice's, so a second run for the same invoice records the first result instead.
#[tokio::test]
async fn ex2_idempotency_key_makes_the_second_call_a_skip() {
    let w = World::new("e2", |_| {}).await;
    let _wk = w.worker(WORKER, "wk", "");
    w.wait_registered("invoice").await;
    let inv = invoice_id();
    let first = w.start("invoice", json!({"invoice_id": inv})).await;
    w.wait_status(&first, &["completed"], LONG).await;
    let second = w.start("invoice", json!({"invoice_id": inv})).await;
    w.wait_status(&second, &["completed"], LONG).await;
    let ledger = w
        .effects()
        .await
        .into_iter()
        .filter(|r| r["effect"] == "ledger.post")
        .count();
    assert_eq!(ledger, 1, "provider calls: 1");
    assert!(w.event_types(&second).await.contains(&"effect_skipped".to_string()));
    let (_, hist) = w.get(&format!("/v1/runs/{second}/history")).await;
    assert_eq!(hist["entries"][2]["result"], json!({"posted": format!("ledger:{inv}")}));
}

async fn crash_after_two_steps(w: &World) -> (savepoint::ids::ThreadId, String) {
    let mut a = w.worker(WORKER, "wa", "step.after_commit=abort@2");
    w.wait_registered("invoice").await;
    let inv = invoice_id();
    let t = w.start("invoice", json!({"invoice_id": inv})).await;
    assert!(killed_by_signal(&a.wait_exit(LONG).await), "crash after 2 steps");
    (t, inv)
}

/// Example 3: checkpoint after each step, crash after step 2: the checkpoint is at step 2
/// with the completed steps recorded.
#[tokio::test]
async fn ex3_crash_after_step_2_leaves_a_checkpoint_at_step_2() {
    let w = World::new("e3", |_| {}).await;
    let (t, _) = crash_after_two_steps(&w).await;
    let run = w.run(&t).await;
    assert_eq!(run["step"], 2, "{run}");
    let (_, cp) = w.get(&format!("/v1/runs/{t}/export")).await;
    assert_eq!(cp["completed"], json!(["read_pdf", "extract_totals"]), "{cp}");
    assert!(w.effects().await.is_empty(), "nothing after step 2 ran");
}

/// Example 4: resume sends the email once, and a further replay sends nothing.
#[tokio::test]
async fn ex4_resume_sends_the_email_once_and_replay_sends_nothing() {
    let w = World::new("e4", |_| {}).await;
    let (t, inv) = crash_after_two_steps(&w).await;
    let _b = w.worker(WORKER, "wb", "");
    let run = w.wait_status(&t, &["completed"], LONG).await;
    let events = w.event_types(&t).await;
    assert!(events.contains(&"takeover".to_string()), "{events:?}");
    let counts = w.effect_counts().await;
    assert_eq!(
        (counts[&format!("ledger:{inv}")], counts[&format!("email:{t}")]),
        (1, 1)
    );
    // Replay the whole thread: recorded results only, nothing re-fired.
    let report = replay(&w.store, &savepoint_worker::demo::registry(&w.store), &t)
        .await
        .unwrap();
    assert_eq!(report, ReplayReport::Finished(Ok(run["output"].clone())));
    // Redeliver the run's task three more times: the run is terminal, nothing happens.
    let broker = savepoint::broker::Broker::connect(w.cfg.broker(), LONG).await.unwrap();
    for _ in 0..3 {
        let task = Task::new(t.clone(), w.store.keys().partition(&t), Some(0), TaskReason::Start);
        broker.publish(&task.encode(), &[]).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(w.effect_counts().await, counts, "after replay: unchanged");
    assert_eq!(w.run(&t).await["version"], run["version"]);
}

/// Example 5: a checkpoint survives serialisation: export to JSON and back.
#[tokio::test]
async fn ex5_checkpoint_round_trips_through_json() {
    let w = World::new("e5", |_| {}).await;
    let _wk = w.worker(WORKER, "wk", "");
    w.wait_registered("invoice").await;
    let t = w.start("invoice", json!({"invoice_id": invoice_id()})).await;
    w.wait_status(&t, &["completed"], LONG).await;
    let (code, cp) = w.get(&format!("/v1/runs/{t}/export")).await;
    assert_eq!(code, 200);
    let blob = serde_json::to_string(&cp).unwrap();
    let back: Value = serde_json::from_str(&blob).unwrap();
    assert_eq!(back, cp);
    assert_eq!((back["step"].clone(), back["pending"].clone()), (json!(4), json!([])));
    assert_eq!(
        back["completed"],
        json!(["read_pdf", "extract_totals", "ledger.post", "email.send"])
    );
}

/// Example 6: durable resume across two processes: the approval run waits in process 1,
/// which exits; process 2 resumes it with "yes".
#[tokio::test]
async fn ex6_approval_resumes_in_a_second_process() {
    let w = World::new("e6", |_| {}).await;
    let mut p1 = w.worker(WORKER, "p1", "");
    w.wait_registered("approval").await;
    let t = w.start("approval", json!({})).await;
    let run = w.wait_status(&t, &["waiting"], LONG).await;
    assert_eq!(run["next"], json!(["gate"]));
    assert_eq!(run["interrupts"][0]["payload"]["question"], "Approve this payment?");
    p1.signal("TERM");
    let status = p1.wait_exit(LONG).await;
    assert!(status.success(), "process 1 exits cleanly on SIGTERM: {status}");
    let _p2 = w.worker(WORKER, "p2", "");
    let (code, body) = w.post(&format!("/v1/runs/{t}/resume"), json!({"value": "yes"})).await;
    assert_eq!(code, 202, "{body}");
    let run = w.wait_status(&t, &["completed"], LONG).await;
    assert_eq!(run["output"], json!({"log": ["first", "gate=yes"]}));
}
