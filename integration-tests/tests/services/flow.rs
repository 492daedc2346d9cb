//! Flow control (issue 10): per-key concurrency limits, start rates and priorities, across
//! real worker processes against the real services. The `metered` demo workflow witnesses its
//! steps in Redis (how many runs of a customer were inside a step together, at most); the
//! limit must hold whatever the fleet does, a SIGKILLed worker included.

use serde_json::{json, Value};
use std::time::{Duration, Instant};

use savepoint_core::ids::ThreadId;
use savepoint_integration_tests::cleanup;
use savepoint_integration_tests::procs::killed_by_signal;
use savepoint_integration_tests::scenario::World;

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");
const LONG: Duration = Duration::from_secs(60);

async fn start(w: &World, body: Value) -> ThreadId {
    let (code, reply) = w.post("/v1/runs", body).await;
    assert_eq!(code, 201, "{reply}");
    ThreadId::new(reply["thread_id"].as_str().unwrap().to_owned()).unwrap()
}

/// The most runs of each customer the witness saw inside a step together.
async fn witnessed(w: &World) -> std::collections::BTreeMap<String, u64> {
    let key = format!("{}:demo:witness_max", w.cfg.namespace);
    w.store.query(redis::cmd("HGETALL").arg(key)).await.expect("witness")
}

/// When each run's first entry was recorded (server ms).
async fn first_entry_at(w: &World, t: &ThreadId) -> u64 {
    let (_, hist) = w.get(&format!("/v1/runs/{t}/history")).await;
    hist["entries"][0]["at"].as_u64().unwrap_or_else(|| panic!("{hist}"))
}

#[tokio::test]
async fn two_hundred_runs_on_three_workers_hold_at_most_two_per_customer_through_a_sigkill() {
    let w = World::new("flow", |_| {}).await;
    let mut workers = vec![w.worker(WORKER, "w1", ""), w.worker(WORKER, "w2", "")];
    // The third dies (SIGKILL) after its 40th step commit, holding slots: they are freed when
    // its leases expire, and a fourth worker takes its place.
    let mut victim = w.worker(WORKER, "victim", "step.after_commit=kill@40");
    w.wait_registered("metered").await;
    let mut runs = Vec::new();
    for i in 0..200 {
        let body = json!({
            "workflow": "metered",
            "input": {"customer": format!("c{}", i % 5), "steps": 2, "step_ms": 20},
            "flow": {"key_from": "/customer", "limit": 2},
        });
        runs.push(start(&w, body).await);
    }
    let status = victim.wait_exit(LONG).await;
    assert!(killed_by_signal(&status), "{status:?}");
    workers.push(w.worker(WORKER, "w4", ""));
    for t in &runs {
        let run = w.wait_status(t, &["completed", "failed", "blocked"], LONG).await;
        assert_eq!(run["status"], "completed", "{run}");
    }
    let seen = witnessed(&w).await;
    assert_eq!(seen.len(), 5, "{seen:?}");
    assert!(
        seen.values().all(|n| *n <= 2),
        "more than 2 of a customer at once: {seen:?}"
    );
    // The limit is a limit, not a queue of one: two did run together.
    assert!(seen.values().any(|n| *n == 2), "{seen:?}");
    // Runs did wait in line. Which ones depends on how fast the API starts them against how
    // fast the workers finish them (a loaded machine starts the last ones late), so the
    // newest run that waited is looked for, not a given one.
    let mut waited = None;
    for t in runs.iter().rev() {
        if w.event_types(t).await.iter().any(|e| e == "flow_waiting") {
            waited = Some(t);
            break;
        }
    }
    assert!(waited.is_some(), "no run waited in line for its customer's slot");
    for p in &mut workers {
        p.signal("TERM");
        p.wait_exit(Duration::from_secs(30)).await;
    }
    cleanup(&w.cfg).await;
}

#[tokio::test]
async fn starts_of_a_key_are_held_to_its_rate() {
    let w = World::new("flowrate", |_| {}).await;
    let mut wk = w.worker(WORKER, "w1", "");
    w.wait_registered("metered").await;
    let started = Instant::now();
    let mut runs = Vec::new();
    for _ in 0..8 {
        let body = json!({
            "workflow": "metered",
            "input": {"customer": "r", "steps": 1, "step_ms": 1},
            "flow": {"key": "r", "rate_per_sec": 2},
        });
        runs.push(start(&w, body).await);
    }
    let mut at = Vec::new();
    for t in &runs {
        let run = w.wait_status(t, &["completed", "failed"], LONG).await;
        assert_eq!(run["status"], "completed", "{run}");
        at.push(first_entry_at(&w, t).await);
    }
    at.sort_unstable();
    // A burst of 2, then one start per 500 ms: the eighth starts 3 s after the first.
    let spread = at[7] - at[0];
    assert!(spread >= 2_500, "8 starts at 2/s spread over {spread} ms: {at:?}");
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
    wk.signal("TERM");
    wk.wait_exit(Duration::from_secs(30)).await;
    cleanup(&w.cfg).await;
}

#[tokio::test]
async fn a_higher_priority_run_takes_the_next_slot_before_earlier_arrivals() {
    let w = World::new("flowprio", |_| {}).await;
    let mut wk = w.worker(WORKER, "w1", "");
    w.wait_registered("metered").await;
    let flow = json!({"key": "p", "limit": 1});
    let holder = start(
        &w,
        json!({"workflow": "metered", "input": {"customer": "p", "steps": 1, "step_ms": 1500}, "flow": flow}),
    )
    .await;
    w.wait_status(&holder, &["running"], LONG).await;
    let mut low = Vec::new();
    for _ in 0..3 {
        let body = json!({"workflow": "metered", "input": {"customer": "p", "steps": 1, "step_ms": 1}, "flow": flow});
        low.push(start(&w, body).await);
    }
    // They are in line before the urgent one arrives.
    for t in &low {
        let deadline = Instant::now() + LONG;
        while !w.event_types(t).await.iter().any(|e| e == "flow_waiting") {
            assert!(Instant::now() < deadline, "{t} never waited in line");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let urgent = start(
        &w,
        json!({"workflow": "metered", "input": {"customer": "p", "steps": 1, "step_ms": 1}, "flow": flow, "priority": 9}),
    )
    .await;
    for t in low.iter().chain([&urgent, &holder]) {
        let run = w.wait_status(t, &["completed", "failed"], LONG).await;
        assert_eq!(run["status"], "completed", "{run}");
    }
    let first = first_entry_at(&w, &urgent).await;
    for t in &low {
        assert!(first < first_entry_at(&w, t).await, "the priority-9 run went after {t}");
    }
    assert_eq!(witnessed(&w).await.get("p"), Some(&1));
    wk.signal("TERM");
    wk.wait_exit(Duration::from_secs(30)).await;
    cleanup(&w.cfg).await;
}

#[tokio::test]
async fn bad_flow_requests_are_422_with_the_rule() {
    let w = World::new("flowbad", |_| {}).await;
    let mut wk = w.worker(WORKER, "w1", "");
    w.wait_registered("metered").await;
    for (flow, priority, says) in [
        (json!({"limit": 0}), json!(null), "flow.limit must be 1 to 100000"),
        (json!({}), json!(null), "needs a limit, a rate_per_sec or both"),
        (
            json!({"key": "a", "key_from": "/customer", "limit": 1}),
            json!(null),
            "not both",
        ),
        (
            json!({"key_from": "/nope", "limit": 1}),
            json!(null),
            "the input has no value there",
        ),
        (
            json!({"limit": 1, "rate_per_sec": 0}),
            json!(null),
            "rate_per_sec must be above 0",
        ),
        (json!({"limit": 1}), json!(10), "priority must be 0 to 9"),
    ] {
        let body = json!({"workflow": "metered", "input": {"customer": "x"}, "flow": flow, "priority": priority});
        let (code, reply) = w.post("/v1/runs", body).await;
        assert_eq!(code, 422, "{flow}: {reply}");
        assert!(
            reply["error"].as_str().unwrap_or_default().contains(says),
            "{flow}: {reply}"
        );
    }
    wk.signal("TERM");
    wk.wait_exit(Duration::from_secs(30)).await;
    cleanup(&w.cfg).await;
}

/// Issue 24, hole 1: a run that yields (here after every step) is claimed again by another
/// worker while the slice that yielded still holds its slot. Today's slots are keyed by the
/// thread alone, so the new slice took the old slot over and the old slice's release then
/// deleted it: the run went on with no slot, and the release woke the head of the line, so
/// limit + 1 runs of a customer were inside a step together. Slots now belong to the slice's
/// fencing token: only the slice that holds one frees it.
#[tokio::test]
async fn runs_that_yield_between_steps_never_hold_more_than_the_limit() {
    let w = World::new("flowyield", |_| {}).await;
    let one = [("SAVEPOINT_SLICE_MAX_STEPS", "1")];
    let mut workers: Vec<_> = (1..=3)
        .map(|i| w.worker_env(WORKER, &format!("y{i}"), "", &one))
        .collect();
    w.wait_registered("metered").await;
    let mut runs = Vec::new();
    for i in 0..60 {
        let body = json!({
            "workflow": "metered",
            "input": {"customer": format!("y{}", i % 3), "steps": 5, "step_ms": 15},
            "flow": {"key_from": "/customer", "limit": 2},
        });
        runs.push(start(&w, body).await);
    }
    for t in &runs {
        let run = w.wait_status(t, &["completed", "failed", "blocked"], LONG).await;
        assert_eq!(run["status"], "completed", "{run}");
    }
    let seen = witnessed(&w).await;
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(
        seen.values().all(|n| *n <= 2),
        "more than 2 of a customer inside a step at once: {seen:?}"
    );
    // Yields did happen: a run's slices were taken by more than one worker.
    let yielded = w.event_types(&runs[0]).await;
    assert!(yielded.iter().filter(|e| *e == "claimed").count() >= 5, "{yielded:?}");
    for p in &mut workers {
        p.signal("TERM");
        p.wait_exit(Duration::from_secs(30)).await;
    }
    cleanup(&w.cfg).await;
}
