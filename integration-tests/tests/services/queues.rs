//! Task queues (issue 10): a run's middle step is routed to a second queue (`ctx.step_on`)
//! served by a different worker process (`SAVEPOINT_WORKER_QUEUES`), against the real
//! services; and the due scanner respects the queue when the worker on it dies.

use serde_json::json;
use std::time::Duration;

use savepoint_integration_tests::cleanup;
use savepoint_integration_tests::procs::killed_by_signal;
use savepoint_integration_tests::scenario::World;

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");
const LONG: Duration = Duration::from_secs(40);

#[tokio::test]
async fn a_middle_step_runs_on_a_second_queue_served_by_another_worker_process() {
    let w = World::new("queues", |_| {}).await;
    let mut home = w.worker(WORKER, "home", "");
    let mut gpu = w.worker_env(WORKER, "gpu", "", &[("SAVEPOINT_WORKER_QUEUES", "gpu")]);
    w.wait_registered("routed").await;
    let mut runs = Vec::new();
    for _ in 0..5 {
        runs.push(w.start("routed", json!({"queue": "gpu"})).await);
    }
    for t in &runs {
        let run = w.wait_status(t, &["completed", "failed", "blocked"], LONG).await;
        assert_eq!(run["status"], "completed", "{run}");
        assert_eq!(
            run["output"],
            json!({"prepare": "home", "render": "gpu", "deliver": "home"}),
            "{run}"
        );
        let types = w.event_types(t).await;
        assert_eq!(
            types.iter().filter(|e| *e == "routed").count(),
            2,
            "there and back: {types:?}"
        );
    }
    // A run started on the gpu queue runs every call there, and keeps it as its home.
    let (code, body) = w
        .post(
            "/v1/runs",
            json!({"workflow": "routed", "input": {"queue": "gpu"}, "queue": "gpu"}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let t = savepoint_core::ids::ThreadId::new(body["thread_id"].as_str().unwrap().to_owned()).unwrap();
    let run = w.wait_status(&t, &["completed", "failed"], LONG).await;
    assert_eq!(
        run["output"],
        json!({"prepare": "gpu", "render": "gpu", "deliver": "gpu"}),
        "{run}"
    );
    assert_eq!(run["home_queue"], "gpu", "{run}");
    // A fork of it runs where it ran: its home queue is kept.
    let (code, body) = w.post(&format!("/v1/runs/{t}/fork"), json!({"from_step": 1})).await;
    assert_eq!(code, 201, "{body}");
    let f = savepoint_core::ids::ThreadId::new(body["thread_id"].as_str().unwrap().to_owned()).unwrap();
    let run = w.wait_status(&f, &["completed", "failed"], LONG).await;
    assert_eq!(
        run["output"],
        json!({"prepare": "gpu", "render": "gpu", "deliver": "gpu"}),
        "{run}"
    );
    assert_eq!(run["home_queue"], "gpu", "{run}");
    // A bad queue name is a 422 that names the rule.
    let (code, body) = w
        .post(
            "/v1/runs",
            json!({"workflow": "routed", "input": {"queue": "gpu"}, "queue": "GPU!"}),
        )
        .await;
    assert_eq!(code, 422, "{body}");
    assert!(body["error"].as_str().unwrap_or_default().contains("a-z 0-9"), "{body}");
    for p in [&mut home, &mut gpu] {
        p.signal("TERM");
        p.wait_exit(Duration::from_secs(30)).await;
    }
    cleanup(&w.cfg).await;
}

/// The gpu worker is SIGKILLed right after it committed the routed step: the run is left
/// running on the gpu queue. When its lease expires the due scanner rings it on the gpu queue
/// (not the default one), where a second gpu worker takes it over; the last step goes home.
#[tokio::test]
async fn the_scanner_rings_a_run_on_its_queue_after_the_worker_there_was_sigkilled() {
    let w = World::new("queuekill", |_| {}).await;
    let mut home = w.worker(WORKER, "home", "");
    let mut victim = w.worker_env(
        WORKER,
        "gpu",
        "step.after_commit=kill@1",
        &[("SAVEPOINT_WORKER_QUEUES", "gpu")],
    );
    w.wait_registered("routed").await;
    let t = w.start("routed", json!({"queue": "gpu"})).await;
    let status = victim.wait_exit(LONG).await;
    assert!(killed_by_signal(&status), "{status:?}");
    let run = w.run(&t).await;
    assert_eq!(run["status"], "running", "{run}");
    assert_eq!(run["queue"], "gpu", "{run}");
    assert_eq!(run["step"], 2, "prepare and render committed: {run}");
    // Only a worker of the gpu queue may take it on: the home worker is never handed it.
    let mut heir = w.worker_env(WORKER, "gpu2", "", &[("SAVEPOINT_WORKER_QUEUES", "gpu")]);
    let run = w.wait_status(&t, &["completed", "failed"], LONG).await;
    assert_eq!(
        run["output"],
        json!({"prepare": "home", "render": "gpu", "deliver": "home"}),
        "{run}"
    );
    let types = w.event_types(&t).await;
    assert!(types.iter().any(|e| e == "takeover"), "{types:?}");
    for p in [&mut home, &mut heir] {
        p.signal("TERM");
        p.wait_exit(Duration::from_secs(30)).await;
    }
    cleanup(&w.cfg).await;
}
