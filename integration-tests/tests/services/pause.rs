//! Pause and resume (issue 29 §1) across real worker processes against the real services. A
//! workflow is paused while 200 of its runs are in flight and both workers are SIGKILLed; the
//! workers that replace them take over the expired leases and claim the queued runs, and the
//! pause must stop every one. The witness is outside the engine: the webhook provider, which
//! counts every request it receives. Nothing reaches it while the workflow is paused; after the
//! resume every run completes and every key is applied exactly once.

use serde_json::{json, Value};
use std::io::Write;
use std::time::{Duration, Instant};

use savepoint_cli::loadgen::receiver::{self, ReceiverOptions};
use savepoint_core::ids::ThreadId;
use savepoint_integration_tests::cleanup;
use savepoint_integration_tests::procs::killed_by_signal;
use savepoint_integration_tests::scenario::World;

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");
const RUNS: usize = 200;
const LONG: Duration = Duration::from_secs(90);

/// Runs of `threads` with each status.
async fn statuses(w: &World, threads: &[ThreadId]) -> std::collections::BTreeMap<String, usize> {
    let mut out = std::collections::BTreeMap::new();
    for t in threads {
        let h = w.store.header(t).await.expect("read").expect("run");
        *out.entry(h.status.as_str().to_owned()).or_default() += 1;
    }
    out
}

/// Settles a run blocked on an in-doubt webhook (a worker was killed inside the call) with the
/// provider's truth, as an operator would.
async fn resolve_with_provider(w: &World, run: &Value, applied: &std::collections::HashMap<String, u32>) {
    let key = run["blocked_effect"]
        .as_str()
        .unwrap_or_else(|| panic!("blocked on what? {run}"));
    let t = run["thread_id"].as_str().unwrap();
    let body = match applied.get(key) {
        Some(_) => json!({"applied": true, "result": {"status": 200}}),
        None => json!({"applied": false}),
    };
    let (code, reply) = w.post(&format!("/v1/runs/{t}/effects/{key}/resolve"), body).await;
    assert!(code < 300, "resolve {t} {key}: {code} {reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_workflow_runs_nothing_through_two_sigkills_and_completes_once_resumed() {
    let w = World::new("pz", |_| {}).await;
    let stop = tokio_util::sync::CancellationToken::new();
    let opts = ReceiverOptions {
        delay: Duration::from_millis(5),
        check_tokens: false,
    };
    let (hook, provider) = receiver::start_with(stop.clone(), opts).await.unwrap();
    let mut first = vec![w.worker(WORKER, "w1", ""), w.worker(WORKER, "w2", "")];
    w.wait_registered("webhook").await;
    let mut runs = Vec::new();
    for i in 0..RUNS {
        let input = json!({"url": hook, "steps": 6, "effect_at": 3, "step_ms": 100});
        let thread = format!("pz-{i}");
        let (code, reply) = w
            .post(
                "/v1/runs",
                json!({"workflow": "webhook", "input": input, "thread_id": thread}),
            )
            .await;
        assert_eq!(code, 201, "{reply}");
        runs.push(ThreadId::new(thread).unwrap());
    }
    // In flight: some effects applied, most not yet.
    let deadline = Instant::now() + LONG;
    while provider.received() < 10 {
        assert!(Instant::now() < deadline, "no webhook reached the provider");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let asked = Instant::now();
    let (code, reply) = w
        .post("/v1/pauses", json!({"workflow": "webhook", "note": "provider down"}))
        .await;
    let answered_in = asked.elapsed();
    assert_eq!(code, 200, "{reply}");
    assert_eq!(reply["pause"]["scope"], "workflow", "{reply}");
    for p in &mut first {
        p.signal("KILL");
        assert!(killed_by_signal(&p.wait_exit(Duration::from_secs(10)).await));
    }
    // Requests the killed workers had sent land or die now; then the count must not move.
    tokio::time::sleep(Duration::from_millis(300)).await;
    while provider.in_flight() > 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let at_pause = provider.received();
    assert!(
        (at_pause as usize) < RUNS,
        "every run had applied its webhook before the pause ({at_pause})"
    );
    let second = [w.worker(WORKER, "w3", ""), w.worker(WORKER, "w4", "")];
    // Long enough for every lease of the killed workers to expire and be taken over, and for
    // the new workers to claim every queued run: each claim must stop the run instead.
    let watch = Duration::from_millis(2 * w.cfg.lease_ms + 3000);
    let until = Instant::now() + watch;
    while Instant::now() < until {
        assert_eq!(
            provider.received(),
            at_pause,
            "a webhook reached the provider while paused"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seen = statuses(&w, &runs).await;
    let stopped = seen.get("paused").copied().unwrap_or(0);
    assert!(stopped > 0, "no run was stopped by the pause: {seen:?}");
    assert_eq!(seen.get("running"), None, "a run is running while paused: {seen:?}");
    let (_, list) = w.get("/v1/pauses").await;
    assert_eq!(list["pauses"][0]["workflow"], "webhook", "{list}");
    assert_eq!(list["pauses"][0]["note"], "provider down", "{list}");
    assert_eq!(list["paused_runs"].as_u64(), Some(stopped as u64), "{list}");
    let mut took_over = 0;
    for t in &runs {
        let ev = w.store.events(t, 1000).await.unwrap();
        if let Some(i) = ev.iter().position(|e| e.typ == "paused") {
            assert!(ev[i].detail.contains("workflow webhook paused by"), "{:?}", ev[i]);
            let h = w.store.header(t).await.unwrap().unwrap();
            took_over += usize::from(matches!(h.paused_by, Some((_, _, savepoint_store::RunStatus::Running))));
        }
    }

    let (code, reply) = w
        .post(
            "/v1/pauses/resume",
            json!({"workflow": "webhook", "note": "provider back"}),
        )
        .await;
    assert_eq!(code, 200, "{reply}");
    assert_eq!(reply["resumed"].as_u64(), Some(stopped as u64), "{reply}");
    let resumed_at = Instant::now();
    let mut blocked = 0;
    for t in &runs {
        let run = w.wait_status(t, &["completed", "failed", "blocked"], LONG).await;
        if run["status"] == "blocked" {
            blocked += 1;
            resolve_with_provider(&w, &run, &provider.snapshot()).await;
            let run = w.wait_status(t, &["completed", "failed", "blocked"], LONG).await;
            assert_eq!(run["status"], "completed", "{run}");
        } else {
            assert_eq!(run["status"], "completed", "{run}");
        }
    }
    let applied = provider.snapshot();
    let twice: Vec<_> = applied.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "keys applied twice: {twice:?}");
    assert_eq!(applied.len(), RUNS, "every run applied its webhook once");
    let _ = writeln!(
        std::io::stderr(),
        "pause: {RUNS} runs; the pause answered in {answered_in:?} with {at_pause} webhooks applied; 0 more in \
         {watch:?} paused with 2 workers SIGKILLed and 2 new ones; {stopped} runs stopped ({took_over} from an \
         expired lease); all completed {:.1}s after the resume ({blocked} in doubt from the kills, resolved \
         with the provider's truth), every key applied once",
        resumed_at.elapsed().as_secs_f64(),
    );
    for mut p in second {
        p.signal("TERM");
        p.wait_exit(Duration::from_secs(30)).await;
    }
    stop.cancel();
    cleanup(&w.cfg).await;
}
