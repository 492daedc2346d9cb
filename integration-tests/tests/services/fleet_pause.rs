//! The fleet under pauses instead of kills: 3 worker processes, a few hundred `webhook` runs
//! (policy `block`), and every second a random worker is frozen with SIGSTOP for longer than
//! the lease, then thawed with SIGCONT. A frozen worker wakes believing it still holds its
//! runs; the local lease deadline must stop it from acting. The provider checks no fencing
//! tokens, so the engine alone must keep every key from being applied twice. Every run ends
//! completed or blocked with a reason; none is lost.

use rand::Rng;
use std::io::Write;
use std::time::{Duration, Instant};

use savepoint_cli::loadgen::receiver::{self, ReceiverOptions};
use savepoint_integration_tests::procs::Proc;
use savepoint_integration_tests::scenario::World;

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");
const RUNS: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_survives_workers_paused_past_their_lease() {
    let w = World::new("fp", |c| c.worker.slice_max_steps = 2).await;
    let stop = tokio_util::sync::CancellationToken::new();
    let opts = ReceiverOptions {
        delay: Duration::from_millis(20),
        check_tokens: false,
    };
    let (hook, provider) = receiver::start_with(stop.clone(), opts).await.unwrap();
    let workers: Vec<Proc> = (0..3).map(|i| w.worker(WORKER, &format!("w{i}"), "")).collect();
    w.wait_registered("webhook").await;
    let pause = Duration::from_millis(w.cfg.lease_ms + 1000);

    let started = Instant::now();
    let submitter = w.submit_webhook_runs(&hook, "pause", RUNS, Duration::from_millis(40));
    // Chaos for 12 s: a SIGSTOP a second, each for longer than the lease, then SIGCONT.
    let mut pauses = 0;
    let mut frozen: Vec<(usize, Instant)> = Vec::new();
    let mut next = Instant::now() + Duration::from_millis(500);
    while started.elapsed() < Duration::from_secs(12) {
        let now = Instant::now();
        frozen.retain(|(i, until)| {
            if now >= *until {
                workers[*i].signal("CONT");
                false
            } else {
                true
            }
        });
        if now >= next {
            let victim = rand::rng().random_range(0..workers.len());
            if frozen.iter().all(|(i, _)| *i != victim) && frozen.len() < 2 {
                workers[victim].signal("STOP");
                frozen.push((victim, now + pause));
                pauses += 1;
            }
            next = now + Duration::from_secs(1);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for (i, _) in frozen.drain(..) {
        workers[i].signal("CONT");
    }
    submitter.task.await.unwrap();
    let (completed, blocked) = w.settle("pause", RUNS).await;
    // Wait for the provider to finish anything still in flight, then count at the provider.
    let quiet = Instant::now() + Duration::from_secs(10);
    while provider.in_flight() > 0 && Instant::now() < quiet {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let counts = provider.snapshot();
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "keys applied twice under the block policy: {twice:?}");
    assert!(counts.len() >= completed, "every completed run applied its webhook");
    assert!(pauses >= 6, "the chaos paused workers ({pauses})");
    let _ = writeln!(
        std::io::stderr(),
        "fleet under pauses: {RUNS} runs in {:.1}s: {completed} completed, {blocked} blocked with a reason, \
         {pauses} SIGSTOPs of {:?} each, {} keys applied, 0 twice, {} requests abandoned by a stale worker",
        started.elapsed().as_secs_f64(),
        pause,
        counts.len(),
        provider.dropped()
    );
    stop.cancel();
}
