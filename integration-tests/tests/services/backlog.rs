//! The broker carries the real backlog, not a multiple of it: 1,000 runs created while no
//! worker consumes leave about 1,000 messages in the task queue for a minute, however often
//! the due scanner ticks (after the broker confirms a run's task, the publisher marks the run
//! queued, which pushes its safety-net due time out to `queued_redeliver_ms`). Then two
//! workers drain the queue and complete every run.

use futures::StreamExt;
use serde_json::json;
use std::io::Write;
use std::time::{Duration, Instant};

use savepoint_broker::Broker;
use savepoint_core::ids::ThreadId;
use savepoint_integration_tests::scenario::World;
use savepoint_integration_tests::{cleanup, register_test_workflow};

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");
const RUNS: usize = 1_000;
/// Most messages the queue may hold for 1,000 runs (a few duplicates are tolerated).
const MAX_DEPTH: u32 = 1_100;
const WATCH: Duration = Duration::from_secs(60);
const CREATE_CONCURRENCY: usize = 16;

/// How many of `threads` have status `completed`.
async fn completed(w: &World, threads: &[ThreadId]) -> usize {
    let mut pipe = redis::pipe();
    for t in threads {
        pipe.cmd("HGET").arg(&w.store.keys().run(t).run).arg("status");
    }
    let statuses: Vec<Option<String>> = w.store.pipeline(&pipe).await.expect("read statuses");
    statuses.iter().filter(|s| s.as_deref() == Some("completed")).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_holds_the_real_backlog_not_a_multiple_of_it() {
    // The test config: 2 s safety-net redelivery, 100 ms scans, and the default 300 s
    // `queued_redeliver_ms` for runs whose task the broker confirmed.
    let w = World::new("backlog", |_| {}).await;
    assert!(
        w.cfg.queued_redeliver_ms > WATCH.as_millis() as u64,
        "queued runs must not be rung again during the watch: {} ms",
        w.cfg.queued_redeliver_ms
    );
    register_test_workflow(&w.cfg, "chain").await;
    let broker = Broker::connect(w.cfg.broker(), Duration::from_secs(30))
        .await
        .expect("connect broker");

    // 1,000 runs through the API, no consumer.
    let t0 = Instant::now();
    let threads: Vec<ThreadId> = futures::stream::iter(0..RUNS)
        .map(|_| w.start("chain", json!({"steps": 2})))
        .buffer_unordered(CREATE_CONCURRENCY)
        .collect()
        .await;
    let created_in = t0.elapsed();
    assert_eq!(threads.len(), RUNS);

    // Sample the queue depth every second for a minute.
    let watch_start = Instant::now();
    let mut max_depth = 0;
    let mut samples = Vec::new();
    let final_depth = loop {
        let depth = broker.queue_depth().await.expect("queue depth");
        max_depth = max_depth.max(depth);
        samples.push(depth);
        assert!(
            depth <= MAX_DEPTH,
            "the task queue holds {depth} messages for {RUNS} runs {:.0}s into the watch (samples so far: \
             {samples:?}): the safety net re-publishes runs whose task is already queued",
            watch_start.elapsed().as_secs_f64()
        );
        if watch_start.elapsed() >= WATCH {
            break depth;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let watched = watch_start.elapsed();
    let _ = writeln!(
        std::io::stderr(),
        "backlog: {RUNS} runs created in {:.1}s; queue depth over {:.1}s ({} samples): max {max_depth}, \
         final {final_depth} (limit {MAX_DEPTH})",
        created_in.as_secs_f64(),
        watched.as_secs_f64(),
        samples.len()
    );
    assert!(
        final_depth >= RUNS as u32,
        "messages were lost: {final_depth} queued for {RUNS} runs (samples: {samples:?})"
    );

    // Two workers drain the backlog: every run completes and the queue empties.
    let drain_start = Instant::now();
    let _w1 = w.worker(WORKER, "w1", "");
    let _w2 = w.worker(WORKER, "w2", "");
    let deadline = Duration::from_secs(180);
    let mut done = 0;
    while done < RUNS {
        assert!(
            drain_start.elapsed() < deadline,
            "only {done}/{RUNS} runs completed {deadline:?} after two workers started"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
        done = completed(&w, &threads).await;
    }
    let completed_in = drain_start.elapsed();
    let mut depth = broker.queue_depth().await.expect("queue depth");
    while depth > 0 {
        assert!(
            drain_start.elapsed() < deadline,
            "the task queue still holds {depth} messages after every run completed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        depth = broker.queue_depth().await.expect("queue depth");
    }
    let _ = writeln!(
        std::io::stderr(),
        "backlog: 2 workers completed {RUNS} runs in {:.1}s; queue empty after {:.1}s",
        completed_in.as_secs_f64(),
        drain_start.elapsed().as_secs_f64()
    );
    cleanup(&w.cfg).await;
}
