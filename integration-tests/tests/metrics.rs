//! Metrics after a known workload: a worker process and the scheduler serve `/metrics`,
//! `/healthz` and `/readyz`, and the counts match what was run. (Its own test binary: the
//! in-process scheduler's metrics registry is process-wide.)

use serde_json::json;
use std::time::{Duration, Instant};

use savepoint_integration_tests::procs::Proc;
use savepoint_integration_tests::scenario::World;

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");
const LONG: Duration = Duration::from_secs(60);

#[tokio::test]
async fn worker_serves_health_readiness_and_metrics() {
    let w = World::new("lh", |_| {}).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let _p = Proc::spawn(WORKER, "wm", &w.cfg, &[("SAVEPOINT_WORKER_HTTP_ADDR", &addr)]);
    w.wait_registered("chain").await;
    let base = format!("http://{addr}");
    let deadline = Instant::now() + LONG;
    loop {
        if let Ok(r) = w.http.get(format!("{base}/readyz")).send().await {
            if r.status().is_success() {
                break;
            }
        }
        assert!(Instant::now() < deadline, "worker never became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(w
        .http
        .get(format!("{base}/healthz"))
        .send()
        .await
        .unwrap()
        .status()
        .is_success());
    // A known workload: one 5-step chain, one invoice (2 steps, 2 effects), one invoice for
    // the same invoice id (its ledger post is skipped), one malformed message.
    let t = w.start("chain", json!({"steps": 5})).await;
    w.wait_status(&t, &["completed"], LONG).await;
    for _ in 0..2 {
        let t = w.start("invoice", json!({"invoice_id": "INV-M"})).await;
        w.wait_status(&t, &["completed"], LONG).await;
    }
    let broker = savepoint_broker::Broker::connect(w.cfg.broker(), LONG).await.unwrap();
    broker.publish(b"garbage", &[]).await.unwrap();
    let deadline = Instant::now() + LONG;
    while broker.dlq_depth().await.unwrap() < 1 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let text = w
        .http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let value = |series: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.trim().parse().ok()))
            .unwrap_or_else(|| panic!("no series {series} in\n{text}"))
    };
    assert_eq!(
        value("savepoint_steps_total{workflow=\"chain\",kind=\"step\",outcome=\"ok\"}"),
        5.0
    );
    assert_eq!(
        value("savepoint_steps_total{workflow=\"invoice\",kind=\"step\",outcome=\"ok\"}"),
        4.0
    );
    assert_eq!(
        value("savepoint_steps_total{workflow=\"invoice\",kind=\"effect\",outcome=\"ok\"}"),
        3.0
    );
    assert_eq!(
        value("savepoint_steps_total{workflow=\"invoice\",kind=\"effect\",outcome=\"skipped\"}"),
        1.0
    );
    assert_eq!(value("savepoint_effects_total{outcome=\"applied\"}"), 3.0);
    assert_eq!(value("savepoint_effects_total{outcome=\"skipped\"}"), 1.0);
    assert_eq!(value("savepoint_claims_total{outcome=\"claimed\"}"), 3.0);
    assert_eq!(value("savepoint_slices_total{end=\"completed\"}"), 3.0);
    assert_eq!(value("savepoint_dead_lettered_total{reason=\"undecodable\"}"), 1.0);
    assert_eq!(value("savepoint_step_duration_seconds_count{workflow=\"chain\"}"), 5.0);
    // One per commit write: pipelined steps share theirs, and the finish carries the last
    // ones (ARCHITECTURE §4a); each effect's entry is a commit of its own (4), and the chain's
    // first step went out alone (1).
    assert!(value("savepoint_commit_duration_seconds_count") >= 5.0);
    // The scheduler's side of the same workload.
    let sched = w
        .http
        .get(format!("{}/metrics", w.sched.base_url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        sched.contains("savepoint_runs_started_total{outcome=\"created\"} 3"),
        "{sched}"
    );
    assert!(
        sched.contains("savepoint_tasks_published_total{reason=\"start\"} 3"),
        "{sched}"
    );
}
