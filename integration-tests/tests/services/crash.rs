//! Crash safety, proven with real processes: a worker running `invoice` aborts (as under
//! `kill -9`) at each named failpoint; a fresh worker (and the due scanner) finishes the run
//! or blocks it as the effect's policy says. No effect is applied twice; no run is lost.

use serde_json::json;
use std::time::Duration;

use savepoint_integration_tests::procs::{killed_by_signal, Proc};
use savepoint_integration_tests::scenario::World;

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");
const SCHEDULER: &str = env!("CARGO_BIN_EXE_it-scheduler");
const LONG: Duration = Duration::from_secs(40);

/// How the run must end after the crash.
enum Expect {
    /// The fresh worker completes it.
    Completed,
    /// The email's outcome is unknown (policy block): blocked until resolved with `applied`.
    BlockedOnEmail { applied: bool },
}

async fn crash_at(failpoint: &str, slice_max_steps: u32, expect: Expect) {
    let w = World::new("cr", |c| c.worker.slice_max_steps = slice_max_steps).await;
    let mut a = w.worker(WORKER, "wa", failpoint);
    w.wait_registered("invoice").await;
    let invoice = format!("INV-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let t = w.start("invoice", json!({"invoice_id": invoice})).await;
    let status = a.wait_exit(LONG).await;
    assert!(
        killed_by_signal(&status),
        "{failpoint}: worker should have aborted, got {status}"
    );
    let _b = w.worker(WORKER, "wb", "");
    let run = match expect {
        Expect::Completed => w.wait_status(&t, &["completed"], LONG).await,
        Expect::BlockedOnEmail { applied } => {
            let run = w.wait_status(&t, &["blocked"], LONG).await;
            let key = format!("email:{t}");
            assert_eq!(
                run["blocked_reason"],
                json!(format!("effect {key} outcome unknown")),
                "{run}"
            );
            let body = if applied {
                json!({"applied": true, "result": {"sent": key}})
            } else {
                json!({"applied": false})
            };
            let (code, resp) = w.post(&format!("/v1/runs/{t}/effects/{key}/resolve"), body).await;
            assert_eq!(code, 202, "{resp}");
            w.wait_status(&t, &["completed"], LONG).await
        }
    };
    assert_eq!(run["output"]["total_cents"], 125_000, "{run}");
    let counts = w.effect_counts().await;
    assert_eq!(
        counts.get(&format!("ledger:{invoice}")),
        Some(&1),
        "{failpoint}: ledger posted once: {counts:?}"
    );
    assert_eq!(
        counts.get(&format!("email:{t}")),
        Some(&1),
        "{failpoint}: email sent once: {counts:?}"
    );
    assert_eq!(counts.len(), 2, "{counts:?}");
    let (_, hist) = w.get(&format!("/v1/runs/{t}/history")).await;
    let names: Vec<&str> = hist["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["read_pdf", "extract_totals", "ledger.post", "email.send"],
        "{failpoint}"
    );
}

#[tokio::test]
async fn abort_after_claim() {
    crash_at("worker.after_claim=abort@1", 64, Expect::Completed).await;
}

#[tokio::test]
async fn abort_after_ack() {
    crash_at("worker.after_ack=abort@1", 64, Expect::Completed).await;
}

#[tokio::test]
async fn abort_before_step_commit() {
    crash_at("step.before_commit=abort@1", 64, Expect::Completed).await;
}

#[tokio::test]
async fn abort_after_step_commit() {
    crash_at("step.after_commit=abort@2", 64, Expect::Completed).await;
}

#[tokio::test]
async fn abort_after_ledger_intent_reconciles_not_applied() {
    crash_at("effect.after_intent=abort@1", 64, Expect::Completed).await;
}

#[tokio::test]
async fn abort_after_ledger_call_reconciles_applied() {
    crash_at("effect.after_call=abort@1", 64, Expect::Completed).await;
}

#[tokio::test]
async fn abort_after_ledger_done_skips() {
    crash_at("effect.after_done=abort@1", 64, Expect::Completed).await;
}

#[tokio::test]
async fn abort_after_email_intent_blocks_then_resolved_not_applied() {
    crash_at(
        "effect.after_intent=abort@2",
        64,
        Expect::BlockedOnEmail { applied: false },
    )
    .await;
}

#[tokio::test]
async fn abort_after_email_call_blocks_then_resolved_applied() {
    crash_at(
        "effect.after_call=abort@2",
        64,
        Expect::BlockedOnEmail { applied: true },
    )
    .await;
}

#[tokio::test]
async fn abort_after_email_done_skips() {
    crash_at("effect.after_done=abort@2", 64, Expect::Completed).await;
}

#[tokio::test]
async fn abort_before_continuation_publish() {
    crash_at("publish.before=abort@1", 1, Expect::Completed).await;
}

#[tokio::test]
async fn abort_after_continuation_publish() {
    crash_at("publish.after=abort@1", 1, Expect::Completed).await;
}

/// A scheduler replica dies after creating the run but before publishing its task: the
/// run's due time makes the surviving replica's scanner publish it.
#[tokio::test]
async fn scheduler_abort_before_publish() {
    let w = World::new("cs", |_| {}).await;
    let _wk = w.worker(WORKER, "wk", "");
    w.wait_registered("invoice").await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cfg = w.cfg.clone();
    cfg.failpoints = "scheduler.before_publish=abort@1".into();
    let addr = format!("127.0.0.1:{port}");
    let mut s = Proc::spawn(SCHEDULER, "sched-a", &cfg, &[("SAVEPOINT_HTTP_ADDR", &addr)]);
    let base = format!("http://{addr}");
    let deadline = std::time::Instant::now() + LONG;
    // Ready, not just alive: before it is connected the API answers 503 and the run would
    // never be created (nor the failpoint reached).
    while !w
        .http
        .get(format!("{base}/readyz"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        assert!(
            std::time::Instant::now() < deadline,
            "scheduler process did not come up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let thread = "invoice-sched-crash";
    let r = w
        .http
        .post(format!("{base}/v1/runs"))
        .json(&json!({"workflow": "invoice", "thread_id": thread, "input": {"invoice_id": "INV-S"}}))
        .send()
        .await;
    assert!(
        r.is_err() || !r.unwrap().status().is_success(),
        "the scheduler should have died before answering"
    );
    assert!(killed_by_signal(&s.wait_exit(LONG).await));
    let t = savepoint_core::ids::ThreadId::new(thread).unwrap();
    let run = w.wait_status(&t, &["completed"], LONG).await;
    assert_eq!(run["step"], 4);
    assert_eq!(w.effect_counts().await.values().sum::<usize>(), 2);
}
