//! Timeouts (issue 10): the run's deadline (`timeout_secs` on start), a step's attempt timeout
//! (`RetryPolicy::attempt_timeout`), and their durability across a killed worker, against the
//! real services. (Timed waits, `interrupt(…).within(t)` / `wait_signal(…).within(t)`, are in
//! `workflow_api.rs`; here one is also carried across a SIGKILL.)

use serde_json::{json, Value};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use savepoint::workflow::{Ctx, EffectOptions, EffectPolicy, Registry, RetryPolicy, Workflow, WorkflowError};
use savepoint_core::ids::ThreadId;
use savepoint_integration_tests::cleanup;
use savepoint_integration_tests::inproc::InProc;
use savepoint_integration_tests::scenario::World;

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");
const LONG: Duration = Duration::from_secs(30);

async fn start_with_timeout(w: &World, workflow: &str, input: Value, secs: u64) -> ThreadId {
    let (code, body) = w
        .post(
            "/v1/runs",
            json!({"workflow": workflow, "input": input, "timeout_secs": secs}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    ThreadId::new(body["thread_id"].as_str().unwrap().to_owned()).unwrap()
}

fn entries(run: &Value) -> u64 {
    run["step"].as_u64().unwrap_or(u64::MAX)
}

/// The failed run's error names the deadline, and it failed soon after the deadline, not
/// before (`late`: how long after it may be acceptable).
fn assert_timed_out(run: &Value, late: Duration) {
    assert_eq!(run["status"], "failed", "{run}");
    let error = run["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("timed out: the run's deadline"), "{run}");
    let deadline = run["deadline_at"].as_u64().expect("deadline_at");
    let finished = run["finished_at"].as_u64().expect("finished_at");
    assert!(finished >= deadline, "failed before its deadline: {run}");
    assert!(
        finished - deadline <= late.as_millis() as u64,
        "failed {} ms after its deadline: {run}",
        finished - deadline
    );
}

/// Sleeps an hour: only the deadline can end it.
struct Sleeper;

impl Workflow for Sleeper {
    const NAME: &'static str = "sleeper";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let _: u32 = ctx.step("before", || async { Ok(1) }).await?;
        ctx.sleep("nap", Duration::from_secs(3600)).await?;
        Ok(json!("woke"))
    }
}

#[tokio::test]
async fn a_sleeping_run_fails_when_its_deadline_passes_not_when_it_would_wake() {
    let w = World::new("tosleep", |_| {}).await;
    let mut reg = Registry::new();
    reg.register(Sleeper);
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered("sleeper").await;
    let t = start_with_timeout(&w, "sleeper", json!(null), 2).await;
    let run = w.wait_status(&t, &["sleeping"], LONG).await;
    // The wake time is bounded by the deadline.
    assert_eq!(run["due_at"], run["deadline_at"], "{run}");
    let run = w.wait_status(&t, &["failed", "completed"], LONG).await;
    assert_timed_out(&run, Duration::from_secs(2));
    assert_eq!(entries(&run), 2, "{run}");
    wk.stop().await;
    cleanup(&w.cfg).await;
}

/// A run that waits for approval, then is cut off: the deadline fires although no worker held
/// it, after the worker that put it to wait was SIGKILLed.
#[tokio::test]
async fn a_waiting_run_fails_at_its_deadline_after_its_worker_was_sigkilled() {
    let w = World::new("towait", |_| {}).await;
    let mut first = w.worker(WORKER, "w1", "");
    w.wait_registered("approval").await;
    let t = start_with_timeout(&w, "approval", json!({}), 3).await;
    w.wait_status(&t, &["waiting"], LONG).await;
    first.signal("KILL");
    first.wait_exit(Duration::from_secs(10)).await;
    let mut second = w.worker(WORKER, "w2", "");
    let run = w.wait_status(&t, &["failed", "completed"], LONG).await;
    assert_timed_out(&run, Duration::from_secs(2));
    // An answer after the deadline is refused: the run ended.
    let (code, body) = w.post(&format!("/v1/runs/{t}/resume"), json!({"value": "yes"})).await;
    assert_eq!(code, 409, "{body}");
    second.signal("TERM");
    second.wait_exit(Duration::from_secs(30)).await;
    cleanup(&w.cfg).await;
}

/// The deadline passes during a slow step of `chain` (2 s per step, a 3 s timeout): the worker
/// is SIGKILLed at `run.deadline.before_fail`, after it saw the deadline pass and before it
/// failed the run; the worker that takes the expired lease fails it without running the
/// code again. The step in flight was never committed.
#[tokio::test]
async fn a_worker_killed_at_the_deadline_failpoint_leaves_the_run_to_be_failed_by_the_next() {
    let w = World::new("tokill", |_| {}).await;
    let mut victim = w.worker(WORKER, "victim", "run.deadline.before_fail=kill");
    w.wait_registered("chain").await;
    let t = start_with_timeout(&w, "chain", json!({"steps": 5, "step_delay_ms": 2000}), 3).await;
    let status = victim.wait_exit(LONG).await;
    assert!(
        savepoint_integration_tests::procs::killed_by_signal(&status),
        "{status:?}"
    );
    let run = w.run(&t).await;
    assert_eq!(run["status"], "running", "the victim died before failing it: {run}");
    let mut heir = w.worker(WORKER, "heir", "");
    let run = w.wait_status(&t, &["failed", "completed"], LONG).await;
    // Found by the heir after the victim's lease expired (1.5 s lease, 0.3 s grace).
    assert_timed_out(&run, Duration::from_secs(6));
    assert_eq!(entries(&run), 1, "only the first step was committed: {run}");
    let types = w.event_types(&t).await;
    assert!(types.iter().any(|e| e == "takeover"), "{types:?}");
    assert_eq!(types.iter().filter(|e| *e == "failed").count(), 1, "{types:?}");
    heir.signal("TERM");
    heir.wait_exit(Duration::from_secs(30)).await;
    cleanup(&w.cfg).await;
}

/// The deadline passes during a step that would take 20 s: the step is dropped and the run
/// fails at once, without waiting for the step or the lease.
#[tokio::test]
async fn a_step_in_flight_is_cut_off_when_the_run_deadline_passes() {
    let w = World::new("tocut", |_| {}).await;
    let wk = w.worker(WORKER, "w1", "");
    w.wait_registered("chain").await;
    let t = start_with_timeout(&w, "chain", json!({"steps": 2, "step_delay_ms": 20000}), 2).await;
    let run = w.wait_status(&t, &["failed", "completed"], LONG).await;
    assert_timed_out(&run, Duration::from_millis(1500));
    assert_eq!(entries(&run), 0, "{run}");
    let mut wk = wk;
    wk.signal("TERM");
    wk.wait_exit(Duration::from_secs(30)).await;
    cleanup(&w.cfg).await;
}

/// The worker stalls right after its claim (a GC pause, a slow reply) until the run's
/// deadline has passed, yet well within its lease. It must not take the claim's server time
/// as still current: the run fails as timed out, and none of its steps is run. (The run's
/// clock used to start when the slice began, so the stall went unseen and every step ran
/// after the deadline.)
#[tokio::test]
async fn a_worker_stalled_after_its_claim_starts_nothing_past_the_run_deadline() {
    let w = World::new("tostall", |c| c.lease_ms = 6000).await;
    let wk = w.worker(WORKER, "w1", "worker.after_claim=pause(2500)@1");
    w.wait_registered("chain").await;
    let t = start_with_timeout(&w, "chain", json!({"steps": 3}), 1).await;
    let run = w.wait_status(&t, &["failed", "completed"], LONG).await;
    assert_timed_out(&run, Duration::from_millis(2500));
    assert_eq!(entries(&run), 0, "a step ran after the deadline: {run}");
    let mut wk = wk;
    wk.signal("TERM");
    wk.wait_exit(Duration::from_secs(30)).await;
    cleanup(&w.cfg).await;
}

/// A run waiting in a flow-control line fails at its deadline, not when a slot frees. (Found
/// by the simulator: the line parked the run for ten seconds, its deadline notwithstanding,
/// so it failed only when the holder of the key's one slot ended, long after.)
#[tokio::test]
async fn a_run_waiting_in_a_flow_line_fails_at_its_deadline() {
    let w = World::new("toline", |_| {}).await;
    let wk = w.worker(WORKER, "w1", "");
    w.wait_registered("chain").await;
    let flow = json!({"key": "line", "limit": 1});
    // The holder keeps the key's one slot for 8 s.
    let (code, body) = w
        .post(
            "/v1/runs",
            json!({"workflow": "chain", "input": {"steps": 1, "step_delay_ms": 8000}, "flow": flow}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let holder = ThreadId::new(body["thread_id"].as_str().unwrap().to_owned()).unwrap();
    w.wait_status(&holder, &["running"], LONG).await;
    let (code, body) = w
        .post(
            "/v1/runs",
            json!({"workflow": "chain", "input": {"steps": 1}, "flow": flow, "timeout_secs": 1}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let t = ThreadId::new(body["thread_id"].as_str().unwrap().to_owned()).unwrap();
    let run = w.wait_status(&t, &["failed", "completed"], LONG).await;
    assert_timed_out(&run, Duration::from_millis(1500));
    assert_eq!(entries(&run), 0, "{run}");
    w.wait_status(&holder, &["completed"], LONG).await;
    let mut wk = wk;
    wk.signal("TERM");
    wk.wait_exit(Duration::from_secs(30)).await;
    cleanup(&w.cfg).await;
}

/// Attempt 1 of step "slow" hangs; its attempt timeout (300 ms) cuts it and attempt 2 returns.
/// An effect whose attempt hangs is in doubt once cut off (it may have reached the provider):
/// under `block` the run is blocked on its key after that one call; only a `retry_safe`
/// effect (input `"policy": "retry_safe"`) is called again with the same key.
struct Hangs {
    calls: Arc<AtomicU32>,
    effect_calls: Arc<AtomicU32>,
}

impl Workflow for Hangs {
    const NAME: &'static str = "hangs";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        let policy = RetryPolicy {
            initial: Duration::from_millis(10),
            jitter: 0.0,
            ..RetryPolicy::attempts(3)
        }
        .with_attempt_timeout(Duration::from_millis(300));
        let calls = self.calls.clone();
        let n: u32 = ctx
            .step("slow", || {
                let calls = calls.clone();
                async move {
                    let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
                    if n == 1 {
                        tokio::time::sleep(Duration::from_secs(20)).await;
                    }
                    Ok(n)
                }
            })
            .retry(policy.clone())
            .await?;
        if input["effect"] == true {
            let policy = RetryPolicy {
                max_attempts: 2,
                ..policy
            };
            let opts = EffectOptions {
                retry: Some(policy),
                policy: EffectPolicy::parse(input["policy"].as_str().unwrap_or("block")).unwrap_or_default(),
            };
            let effect_calls = self.effect_calls.clone();
            let key = format!("charge:{}", ctx.thread_id());
            let _: u32 = ctx
                .effect("charge", key, |_fx| {
                    effect_calls.fetch_add(1, Ordering::SeqCst);
                    async {
                        tokio::time::sleep(Duration::from_secs(20)).await;
                        Ok(1)
                    }
                })
                .options(opts)
                .await?;
        }
        Ok(json!(n))
    }
}

#[tokio::test]
async fn an_attempt_that_exceeds_its_timeout_is_retried_and_an_effect_in_doubt_blocks() {
    let w = World::new("toattempt", |_| {}).await;
    let calls = Arc::new(AtomicU32::new(0));
    let effect_calls = Arc::new(AtomicU32::new(0));
    let mut reg = Registry::new();
    reg.register(Hangs {
        calls: calls.clone(),
        effect_calls: effect_calls.clone(),
    });
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered("hangs").await;

    let t = w.start("hangs", json!({})).await;
    let run = w.wait_status(&t, &["completed", "failed", "blocked"], LONG).await;
    assert_eq!(run["output"], json!(2), "{run}");
    let (_, hist) = w.get(&format!("/v1/runs/{t}/history")).await;
    assert_eq!(hist["entries"][0]["attempts"], 2, "{hist}");
    let events = hist["events"].to_string();
    assert!(
        events.contains("slow attempt 1: attempt timed out after 300ms"),
        "{events}"
    );

    // Issue 24, hole 3: under `block`, the cut-off attempt is the only call.
    calls.store(1, Ordering::SeqCst); // the step succeeds at once from now on
    let t = w.start("hangs", json!({"effect": true})).await;
    let run = w.wait_status(&t, &["completed", "failed", "blocked"], LONG).await;
    assert_eq!(run["status"], "blocked", "{run}");
    assert_eq!(
        run["blocked_reason"],
        format!("effect charge:{t} outcome unknown: its attempt 1 timed out after 300ms"),
        "{run}"
    );
    assert_eq!(run["blocked_effect"], format!("charge:{t}"), "{run}");
    assert_eq!(
        effect_calls.load(Ordering::SeqCst),
        1,
        "a block effect was called again after a time-out"
    );

    // `retry_safe`: the provider honours the key, so the attempts go on (and the last one
    // cut off leaves it in doubt too).
    effect_calls.store(0, Ordering::SeqCst);
    let t = w.start("hangs", json!({"effect": true, "policy": "retry_safe"})).await;
    let run = w.wait_status(&t, &["completed", "failed", "blocked"], LONG).await;
    assert_eq!(run["status"], "blocked", "{run}");
    assert_eq!(
        run["blocked_reason"],
        format!("effect charge:{t} outcome unknown: its attempt 2 timed out after 300ms"),
        "{run}"
    );
    assert_eq!(effect_calls.load(Ordering::SeqCst), 2);
    wk.stop().await;
    cleanup(&w.cfg).await;
}

#[tokio::test]
async fn start_rejects_a_bad_timeout_with_400() {
    let w = World::new("tobad", |_| {}).await;
    let mut wk = w.worker(WORKER, "w1", "");
    w.wait_registered("approval").await;
    for bad in [json!(0), json!(40_000_000), json!("1h"), json!(-3)] {
        let (code, body) = w
            .post(
                "/v1/runs",
                json!({"workflow": "approval", "input": {}, "timeout_secs": bad}),
            )
            .await;
        assert!(code == 400 || code == 422, "{bad}: {code} {body}");
        assert!(
            body["error"].as_str().unwrap_or_default().contains("timeout_secs"),
            "{bad}: {body}"
        );
    }
    wk.signal("TERM");
    wk.wait_exit(Duration::from_secs(30)).await;
    cleanup(&w.cfg).await;
}
