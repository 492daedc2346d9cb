//! Scaling out and in, locally: one worker under load, three more added (throughput rises),
//! then two of them SIGTERMed: their runs are handed back at once (no lease has to expire),
//! nothing is repeated or lost, and the shutdown finishes inside the grace period.

use serde_json::json;
use std::io::Write;
use std::time::{Duration, Instant};

use savepoint_core::ids::ThreadId;
use savepoint_integration_tests::procs::Proc;
use savepoint_integration_tests::scenario::World;

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");
const RUNS: usize = 16;
const STEPS: u64 = 600;
/// Each step waits this long (a slow downstream call), so throughput is bound by the runs in
/// flight, not by the two CPUs.
const STEP_DELAY_MS: u64 = 5;
const GRACE_MS: u64 = 5000;

/// Journal entries committed so far across the runs.
async fn committed(w: &World, threads: &[ThreadId]) -> u64 {
    let mut pipe = redis::pipe();
    for t in threads {
        pipe.cmd("HGET").arg(&w.store.keys().run(t).run).arg("steps");
    }
    let v: Vec<Option<u64>> = w.store.pipeline(&pipe).await.unwrap_or_default();
    v.into_iter().flatten().sum()
}

async fn rate(w: &World, threads: &[ThreadId], over: Duration) -> f64 {
    let before = committed(w, threads).await;
    tokio::time::sleep(over).await;
    (committed(w, threads).await - before) as f64 / over.as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_out_then_sigterm_two_workers() {
    let w = World::new("sc", |c| {
        c.worker.concurrency = 2;
        c.worker.prefetch = 2;
        c.worker.shutdown_grace_ms = GRACE_MS;
        c.lease_ms = 20_000;
    })
    .await;
    let mut first = w.worker(WORKER, "w0", "");
    w.wait_registered("chain").await;
    let mut threads = Vec::new();
    for _ in 0..RUNS {
        threads.push(
            w.start("chain", json!({"steps": STEPS, "step_delay_ms": STEP_DELAY_MS}))
                .await,
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let one = rate(&w, &threads, Duration::from_secs(3)).await;
    let mut more: Vec<Proc> = (1..4).map(|i| w.worker(WORKER, &format!("w{i}"), "")).collect();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let four = rate(&w, &threads, Duration::from_secs(3)).await;
    assert!(
        four > one * 1.3,
        "throughput should rise with 4 workers: 1 worker {one:.0} steps/s, 4 workers {four:.0}"
    );
    // Scale in: SIGTERM two workers while they hold runs.
    let sent = Instant::now();
    first.signal("TERM");
    more[0].signal("TERM");
    let s1 = first.wait_exit(Duration::from_millis(GRACE_MS + 5000)).await;
    let s2 = more[0].wait_exit(Duration::from_millis(GRACE_MS + 5000)).await;
    let stop_ms = sent.elapsed().as_millis() as u64;
    assert!(s1.success() && s2.success(), "clean exits: {s1} {s2}");
    assert!(stop_ms < GRACE_MS, "shutdown took {stop_ms} ms, grace is {GRACE_MS} ms");
    let two = rate(&w, &threads, Duration::from_secs(2)).await;
    for t in &threads {
        let run = w.wait_status(t, &["completed"], Duration::from_secs(120)).await;
        assert_eq!(run["step"], STEPS, "{run}");
        let acc = STEPS * (STEPS - 1) / 2;
        assert_eq!(
            run["output"],
            json!({"i": STEPS, "acc": acc}),
            "nothing repeated or skipped"
        );
        let events = w.event_types(t).await;
        assert!(
            !events.contains(&"takeover".to_string()),
            "no run waited for a lease to expire: {events:?}"
        );
    }
    let _ = writeln!(
        std::io::stderr(),
        "scaling: 1 worker {one:.0} steps/s, 4 workers {four:.0} steps/s, after SIGTERM of 2: {two:.0} steps/s; \
         the two stopped in {stop_ms} ms (grace {GRACE_MS} ms); {RUNS} runs x {STEPS} steps completed, 0 takeovers"
    );
    drop(more);
}
