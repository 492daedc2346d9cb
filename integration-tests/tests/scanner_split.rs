//! Scheduler replicas split the due scanner's partitions without a leader, and a replica
//! that is SIGKILLed loses its partitions to the others once its registration expires.
//!
//! Two scheduler processes and the test's in-process scheduler share one namespace of 64
//! partitions. Runs created straight in the store (no task published: only a scanner can
//! hand them out), one in every partition; a worker finishes them. Each replica's
//! `/metrics` says how many partitions it scans: together exactly all of them, each some.
//! Then one replica is SIGKILLed and a second batch, again in every partition, completes too.

use serde_json::json;
use std::io::Write;
use std::time::{Duration, Instant};

use savepoint_core::ids::ThreadId;
use savepoint_integration_tests::procs::Proc;
use savepoint_integration_tests::scenario::World;

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");
const SCHEDULER: &str = env!("CARGO_BIN_EXE_it-scheduler");

fn free_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}")
}

async fn gauge(http: &reqwest::Client, addr: &str, name: &str) -> Option<i64> {
    let text = http
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
}

/// Creates chain runs `<prefix>-<i>` in the store only (no task published), one in every
/// partition (ids are drawn until each partition has one).
async fn create_unpublished(w: &World, prefix: &str) -> Vec<ThreadId> {
    let input = json!({"steps": 2}).to_string();
    let parts = usize::from(w.cfg.partitions);
    let mut covered = vec![false; parts];
    let mut out = Vec::new();
    for i in 0.. {
        if out.len() == parts {
            break;
        }
        let t = ThreadId::new(format!("{prefix}-{i}")).unwrap();
        let p = usize::from(w.store.keys().partition(&t));
        if covered[p] {
            continue;
        }
        covered[p] = true;
        w.store.create(&t, "chain", 1, &input, "").await.expect("create");
        out.push(t);
    }
    out
}

async fn all_completed(w: &World, runs: &[ThreadId], within: Duration) -> Duration {
    let t0 = Instant::now();
    for t in runs {
        let left = within.saturating_sub(t0.elapsed());
        w.wait_status(t, &["completed"], left).await;
    }
    t0.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_split_the_partitions_and_take_over_a_dead_ones() {
    // 64 partitions: with 8, one of three replicas owns none about one time in nine
    // ((2/3)^8 each); with 64, practically never.
    let w = World::new("split", |c| c.partitions = 64).await;
    let parts = i64::from(w.cfg.partitions);
    let addrs = [free_addr(), free_addr()];
    let mut scheds: Vec<Proc> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| Proc::spawn(SCHEDULER, &format!("sched-{i}"), &w.cfg, &[("SAVEPOINT_HTTP_ADDR", a)]))
        .collect();
    let _wk = w.worker(WORKER, "wk", "");
    w.wait_registered("chain").await;
    // Three replicas: the world's in-process scheduler (its gauge is this process's) and
    // the two processes. Together they scan every partition exactly once, each some.
    let http = reqwest::Client::new();
    let local = || savepoint_core::metrics::metrics().scan_partitions.get();
    let deadline = Instant::now() + Duration::from_secs(30);
    let (a, b) = loop {
        let a = gauge(&http, &addrs[0], "savepoint_scanner_partitions")
            .await
            .unwrap_or(0);
        let b = gauge(&http, &addrs[1], "savepoint_scanner_partitions")
            .await
            .unwrap_or(0);
        if a + b + local() == parts && a > 0 && b > 0 && local() > 0 {
            break (a, b);
        }
        assert!(
            Instant::now() < deadline,
            "three replicas did not split the {parts} partitions: {a} + {b} + {}",
            local()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let split = (a, b, local());

    let first = create_unpublished(&w, "one").await;
    let took1 = all_completed(&w, &first, Duration::from_secs(30)).await;

    scheds[1].signal("KILL");
    let _ = scheds[1].wait_exit(Duration::from_secs(10)).await;
    let killed = Instant::now();
    let second = create_unpublished(&w, "two").await;
    let took2 = all_completed(&w, &second, Duration::from_secs(40)).await;
    let survivors = gauge(&http, &addrs[0], "savepoint_scanner_partitions")
        .await
        .unwrap_or(0)
        + local();
    assert_eq!(survivors, parts, "the two survivors scan every partition");
    let _ = writeln!(
        std::io::stderr(),
        "scanner split: 3 replicas scanning {split:?} of {parts} partitions; {parts} unpublished runs, \
         one in every partition, completed in {:.2}s; after a SIGKILL of one replica, {parts} more in {:.2}s ({:.2}s after \
         the kill; the dead replica's registration lives 2 s)",
        took1.as_secs_f64(),
        took2.as_secs_f64(),
        killed.elapsed().as_secs_f64(),
    );
    drop(scheds);
}
