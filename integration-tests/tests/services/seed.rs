//! The seed's six worked examples, as Savepoint scenarios against real RabbitMQ and Redis.

use serde_json::{json, Value};
use std::time::{Duration, Instant};

use savepoint_core::protocol::{Task, TaskReason};
use savepoint_integration_tests::procs::{killed_by_signal, Proc};
use savepoint_integration_tests::scenario::World;
use savepoint_worker::replay::{journal_from_export, replay, replay_journal, ReplayReport};

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

/// A free local port for a worker's health/metrics listener.
fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    format!("127.0.0.1:{}", l.local_addr().expect("local addr").port())
}

/// The value of one series in a Prometheus text exposition (0 when the series is absent:
/// counters appear at their first increment).
fn series(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.trim().parse().ok()))
        .unwrap_or(0.0)
}

/// The worker's `/metrics` at `addr`, waiting (up to `LONG`) until it answers.
async fn worker_metrics(w: &World, addr: &str) -> String {
    let deadline = Instant::now() + LONG;
    loop {
        if let Ok(r) = w.http.get(format!("http://{addr}/metrics")).send().await {
            if r.status().is_success() {
                return r.text().await.expect("metrics body");
            }
        }
        assert!(Instant::now() < deadline, "worker metrics at {addr} never answered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn crash_after_two_steps(w: &World) -> (savepoint_core::ids::ThreadId, String) {
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
    // The resuming worker serves /metrics, so the test can see it refuse the redeliveries.
    let addr = free_addr();
    let _b = Proc::spawn(
        WORKER,
        "wb",
        &w.cfg,
        &[("SAVEPOINT_WORKER_NAME", "wb"), ("SAVEPOINT_WORKER_HTTP_ADDR", &addr)],
    );
    let run = w.wait_status(&t, &["completed"], LONG).await;
    let events = w.event_types(&t).await;
    assert!(events.contains(&"takeover".to_string()), "{events:?}");
    let counts = w.effect_counts().await;
    assert_eq!(
        (counts[&format!("ledger:{inv}")], counts[&format!("email:{t}")]),
        (1, 1)
    );
    // Replay the whole thread: recorded results only, nothing re-fired.
    let report = replay(&w.store, &savepoint_demo::registry(&w.store), &t).await.unwrap();
    assert_eq!(report, ReplayReport::Finished(Ok(run["output"].clone())));
    // Redeliver the run's task three more times: the run is terminal, nothing happens. Wait
    // for the queue to be empty first so the claim counts below are the redeliveries'.
    let broker = savepoint_broker::Broker::connect(w.cfg.broker(), LONG).await.unwrap();
    let deadline = Instant::now() + LONG;
    while broker.queue_depth().await.unwrap() > 0 {
        assert!(Instant::now() < deadline, "the task queue never drained");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    const TERMINAL: &str = "savepoint_claims_total{outcome=\"terminal\"}";
    const WORKED: [&str; 2] = [
        "savepoint_claims_total{outcome=\"claimed\"}",
        "savepoint_claims_total{outcome=\"takeover\"}",
    ];
    let before = worker_metrics(&w, &addr).await;
    let terminal_before = series(&before, TERMINAL);
    for _ in 0..3 {
        let task = Task::new(t.clone(), w.store.keys().partition(&t), Some(0), TaskReason::Start);
        broker.publish(&task.encode(), &[]).await.unwrap();
    }
    // The worker consumed all three and refused each as terminal.
    let deadline = Instant::now() + LONG;
    let after = loop {
        let text = worker_metrics(&w, &addr).await;
        if series(&text, TERMINAL) >= terminal_before + 3.0 {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "the worker did not refuse the 3 redelivered tasks as terminal within {LONG:?}: \
             {TERMINAL} went {terminal_before} -> {}",
            series(&text, TERMINAL)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for name in WORKED {
        assert_eq!(
            series(&after, name),
            series(&before, name),
            "{name}: no redelivery was executed"
        );
    }
    assert_eq!(
        broker.queue_depth().await.unwrap(),
        0,
        "all three redeliveries consumed"
    );
    assert_eq!(w.effect_counts().await, counts, "after replay: unchanged");
    assert_eq!(w.run(&t).await["version"], run["version"]);
}

/// Example 5: a checkpoint survives serialisation: export to JSON and back, rebuild the
/// journal from the JSON alone and replay the workflow code against it: the run's output
/// comes back without a single effect, and a tampered result changes the output.
#[tokio::test]
async fn ex5_checkpoint_round_trips_through_json() {
    let w = World::new("e5", |_| {}).await;
    let _wk = w.worker(WORKER, "wk", "");
    w.wait_registered("invoice").await;
    let t = w.start("invoice", json!({"invoice_id": invoice_id()})).await;
    let run = w.wait_status(&t, &["completed"], LONG).await;
    let (code, cp) = w.get(&format!("/v1/runs/{t}/export")).await;
    assert_eq!(code, 200);
    let blob = serde_json::to_string(&cp).unwrap();
    let back: Value = serde_json::from_str(&blob).unwrap();
    assert_eq!((back["step"].clone(), back["pending"].clone()), (json!(4), json!([])));
    assert_eq!(
        back["completed"],
        json!(["read_pdf", "extract_totals", "ledger.post", "email.send"])
    );
    assert_eq!(back["workflow"], "invoice");
    let output = run["output"].clone();
    assert!(output["total_cents"].is_i64(), "{run}");

    // Replay the workflow code against the journal rebuilt from the JSON only.
    let registry = savepoint_demo::registry(&w.store);
    let effects = w.effects().await;
    assert_eq!(effects.len(), 2, "ledger.post and email.send, once each: {effects:?}");
    let journal = journal_from_export(&back).expect("the export's journal parses");
    assert_eq!(journal.len(), 4);
    let (workflow, input) = (back["workflow"].as_str().unwrap(), back["input"].clone());
    let report = replay_journal(&w.store, &registry, workflow, input.clone(), journal.clone()).await;
    assert_eq!(report, ReplayReport::Finished(Ok(output.clone())));

    // The replay uses the exported values: a tampered extract_totals result changes the output.
    let mut tampered = back.clone();
    let totals = tampered["journal"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|e| e["name"] == "extract_totals")
        .expect("extract_totals in the export");
    totals["result"]["total_cents"] = json!(1);
    let mut want = output.clone();
    want["total_cents"] = json!(1);
    assert_ne!(want, output);
    let journal_t = journal_from_export(&tampered).unwrap();
    let report = replay_journal(&w.store, &registry, workflow, input.clone(), journal_t).await;
    assert_eq!(
        report,
        ReplayReport::Finished(Ok(want)),
        "the tampered total comes back"
    );

    // Replay-only never runs a call live: without the email entry it stops there, unsent.
    let short = journal[..3].to_vec();
    let report = replay_journal(&w.store, &registry, workflow, input, short).await;
    assert_eq!(report, ReplayReport::WouldRunLive("email.send".into()));

    assert_eq!(w.effects().await, effects, "no replay performed an effect");
    let now = w.run(&t).await;
    assert_eq!(
        (&now["version"], &now["output"]),
        (&run["version"], &output),
        "the run is untouched"
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
