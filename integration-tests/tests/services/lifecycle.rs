//! Worker lifecycle: SIGTERM makes in-flight runs yield (no run waits for a lease to expire).

use serde_json::json;
use std::time::{Duration, Instant};

use savepoint_integration_tests::scenario::World;

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");
const LONG: Duration = Duration::from_secs(60);

#[tokio::test]
async fn sigterm_yields_in_flight_runs_to_another_worker() {
    let w = World::new("lt", |c| c.lease_ms = 10_000).await;
    let mut a = w.worker(WORKER, "wa", "");
    w.wait_registered("chain").await;
    let t = w.start("chain", json!({"steps": 4000})).await;
    let deadline = Instant::now() + LONG;
    while w.run(&t).await["step"].as_u64().unwrap_or(0) < 100 {
        assert!(Instant::now() < deadline, "the run did not progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sent = Instant::now();
    a.signal("TERM");
    let status = a.wait_exit(Duration::from_secs(15)).await;
    assert!(status.success(), "exit 0 on SIGTERM: {status}");
    let stop_ms = sent.elapsed().as_millis();
    let mid = w.run(&t).await;
    assert_eq!(
        mid["status"], "pending",
        "the run was handed back, not left leased: {mid}"
    );
    let _b = w.worker(WORKER, "wb", "");
    let started = Instant::now();
    let run = w.wait_status(&t, &["completed"], LONG).await;
    assert_eq!(run["step"], 4000);
    let events = w.event_types(&t).await;
    assert!(events.contains(&"yielded".to_string()), "{events:?}");
    assert!(
        !events.contains(&"takeover".to_string()),
        "no lease had to expire: {events:?}"
    );
    eprintln!(
        "shutdown took {stop_ms} ms; the other worker finished the run {} ms later",
        started.elapsed().as_millis()
    );
}
