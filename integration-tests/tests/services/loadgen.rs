//! The load generator against a real fleet (in-process scheduler, one worker process):
//! its figures add up and it reports a healthy run as healthy.

use savepoint_cli::loadgen::{run, LoadgenArgs};
use savepoint_integration_tests::scenario::World;

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");

fn args(workflow: &str, runs: usize, steps: u32) -> LoadgenArgs {
    LoadgenArgs {
        config: None,
        workflow: workflow.into(),
        runs,
        steps,
        payload_bytes: 0,
        nap_ms: 0,
        rate: 0.0,
        inflight: 1000,
        effect_at: None,
        policy: "block".into(),
        webhook_url: None,
        timeout: 60,
        sample: 50,
        flow_keys: 0,
        flow_limit: 4,
    }
}

#[tokio::test]
async fn loadgen_reports_chain_and_webhook_runs() {
    let w = World::new("lg", |_| {}).await;
    let _wk = w.worker(WORKER, "wk", "");
    w.wait_registered("webhook").await;
    let r = run(w.cfg.clone(), &w.sched.base_url, args("chain", 40, 10))
        .await
        .unwrap();
    assert_eq!((r.runs, r.lost, r.steps), (40, 0, 400), "{r:?}");
    assert_eq!(r.by_status.get("completed"), Some(&40));
    assert!(r.steps_per_s > 0.0 && r.run_latency_ms.n == 40 && r.run_latency_ms.p50 <= r.run_latency_ms.p99);
    assert!(r.step_latency_ms.n > 0);
    assert!(
        r.redis_bytes_per_run > 100.0 && r.redis_bytes_per_run < 4000.0,
        "{}",
        r.redis_bytes_per_run
    );
    let r = run(w.cfg.clone(), &w.sched.base_url, args("webhook", 20, 4))
        .await
        .unwrap();
    assert_eq!((r.lost, r.effect_keys), (0, 20), "{r:?}");
    assert!(r.repeated_deliveries.is_empty() && r.repeated_effect_calls.is_empty());
    assert!(
        r.render().contains("runs by status         completed=20"),
        "{}",
        r.render()
    );
    // Under flow control: 3 keys, one run of each at a time (the API refuses a malformed
    // `flow` with 422, which would fail the load).
    let flow = LoadgenArgs {
        flow_keys: 3,
        flow_limit: 1,
        ..args("chain", 30, 3)
    };
    let r = run(w.cfg.clone(), &w.sched.base_url, flow).await.unwrap();
    assert_eq!((r.runs, r.lost, r.steps), (30, 0, 90), "{r:?}");
    assert_eq!(r.by_status.get("completed"), Some(&30));
}
