//! Calls side by side in plain Rust (`futures::join!`, `try_join!`, `join_all` over
//! `ctx.step` and `ctx.effect`) on the embedded backend: the journal is in the order the
//! calls are written whatever order they finish in, a call that takes its turn (a recorded
//! value) waits for the calls before it, a failing `try_join!` leaves no hole, and a call
//! dropped the wrong way blocks the run saying so, never journals out of order, and never
//! repeats an effect. Each is crashed at every call failpoint: a resumed run replays to the
//! same journal.

use serde_json::{json, Value};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use savepoint::workflow::{Ctx, Registry, StepError, Workflow, WorkflowError};
use savepoint_store::RunStatus;
use savepoint_testing::{TestEnv, CALL_POINTS};

/// A test environment serving `w` alone.
async fn env_with<W: Workflow>(w: W) -> TestEnv {
    TestEnv::new(move |_| {
        let mut r = Registry::new();
        r.register(w);
        r
    })
    .await
    .expect("a test environment")
}

fn sleep_ms(ms: u64) -> tokio::time::Sleep {
    tokio::time::sleep(Duration::from_millis(ms))
}

/// Ten steps of decreasing length under `join_all`, a recorded value between two steps under
/// `join!`, then a `try_join!` whose second step fails while its third is still running: the
/// workflow handles the error and goes on.
struct Mixed;

impl Workflow for Mixed {
    const NAME: &'static str = "mixed";
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let fetches = (0..10u64).map(|i| {
            ctx.step(&format!("fetch.{i}"), move || async move {
                sleep_ms(1000 - 100 * i).await;
                Ok(i)
            })
        });
        let got: Vec<u64> = futures::future::try_join_all(fetches).await?;
        let (first, now, last) = futures::join!(
            ctx.step("first", || async {
                sleep_ms(500).await;
                Ok(1u32)
            }),
            ctx.now(),
            ctx.step("last", || async { Ok(2u32) }),
        );
        let (_, _, _) = (first?, now?, last?);
        let failed = futures::try_join!(
            ctx.step("ok", || async { Ok(1u32) }),
            ctx.step("bad", || async {
                sleep_ms(100).await;
                Err::<u32, _>(StepError::fatal("no such document").with_class("missing"))
            }),
            ctx.step("slow", || async {
                sleep_ms(60_000).await;
                Ok(3u32)
            }),
        );
        // The failure's class is data the code can match on.
        let class = match failed {
            Err(e) if e.class() == Some("missing") => e.call_name().unwrap_or("?").to_owned(),
            Err(e) => format!("unexpected: {e}"),
            Ok(_) => "none".to_owned(),
        };
        let after: u32 = ctx.step("after", || async { Ok(4u32) }).await?;
        Ok(json!({"got": got, "failed": class, "after": after}))
    }
}

const MIXED: [&str; 16] = [
    "fetch.0", "fetch.1", "fetch.2", "fetch.3", "fetch.4", "fetch.5", "fetch.6", "fetch.7", "fetch.8", "fetch.9",
    "first", "now", "last", "ok", "bad", "after",
];

fn names(journal: &[savepoint_core::journal::Entry]) -> Vec<&str> {
    journal.iter().map(|e| e.name.as_str()).collect()
}

#[tokio::test(start_paused = true)]
async fn calls_side_by_side_are_journaled_in_the_order_written() {
    let mut env = env_with(Mixed).await;
    let run = env.start::<Mixed>(&json!({})).await.unwrap();
    let done = env.settle(&run).await.unwrap();
    assert_eq!(done.header.status, RunStatus::Completed, "{:?}", done.header);
    // Written order, though fetch.9 finished first and fetch.0 last.
    assert_eq!(names(&done.journal), MIXED);
    // Ten fetches of 0.1 to 1 virtual second side by side: about one second, not 5.5.
    let took = done.journal[9].at - done.header.created_at;
    assert!((1000..2000).contains(&took), "the fetches took {took} ms");
    // The recorded time waited for `first` (0.5 s) although it was written before `last`.
    assert!(done.journal[11].at >= done.journal[10].at);
    let out = done.output().unwrap();
    assert_eq!(out["got"], json!([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]));
    assert_eq!(out["failed"], "bad");
    assert_eq!(out["after"], 4);
    // The step `try_join!` dropped ran, was never journaled, and `after` took its place.
    assert_eq!(env.stubs().calls("slow"), 1);
    env.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_crash_at_any_call_replays_to_the_same_journal() {
    for point in CALL_POINTS.iter().filter(|p| p.starts_with("step.")) {
        for hit in [1, 3, 10, 11, 12, 13, 14, 15] {
            let spec = format!("{point}=abort@{hit}");
            let mut env = env_with(Mixed).await;
            env.crash_at(&spec).unwrap();
            let run = env.start::<Mixed>(&json!({})).await.unwrap();
            let done = env.settle(&run).await.unwrap();
            assert_eq!(done.header.status, RunStatus::Completed, "{spec}: {:?}", done.header);
            assert_eq!(names(&done.journal), MIXED, "{spec}");
            assert_eq!(done.output().unwrap()["failed"], "bad", "{spec}");
            env.shutdown().await;
        }
    }
}

/// An effect dropped while its function runs (a timeout over it): its outcome is unknown,
/// so the run blocks in doubt on its key at its next call; the function is never called again.
struct DroppedEffect {
    calls: Arc<AtomicU32>,
}

impl Workflow for DroppedEffect {
    const NAME: &'static str = "dropped_effect";
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let calls = &self.calls;
        let charge = ctx.effect("charge", "charge:1", |_fx| async move {
            calls.fetch_add(1, Ordering::SeqCst);
            sleep_ms(10_000).await;
            Ok(true)
        });
        let cut = tokio::time::timeout(Duration::from_secs(1), charge).await;
        let after: u32 = ctx.step("after", || async { Ok(1u32) }).await?;
        Ok(json!({"cut": cut.is_err(), "after": after}))
    }
}

#[tokio::test(start_paused = true)]
async fn an_effect_dropped_while_it_runs_blocks_the_run_in_doubt() {
    let calls = Arc::new(AtomicU32::new(0));
    let c = Arc::clone(&calls);
    let mut env = env_with(DroppedEffect { calls: Arc::clone(&c) }).await;
    let run = env.start::<DroppedEffect>(&json!({})).await.unwrap();
    let done = env.settle(&run).await.unwrap();
    assert_eq!(done.header.status, RunStatus::Blocked, "{:?}", done.header);
    let reason = done.header.reason.clone().unwrap_or_default();
    assert!(
        reason.contains("charge:1") && reason.contains("dropped while its function ran"),
        "{reason}"
    );
    assert!(done.journal.is_empty(), "{:?}", names(&done.journal));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    env.shutdown().await;
}

/// A step dropped while a step written after it goes on: the later step's entry could never
/// be journaled in order, so the run blocks saying so instead of hanging or reordering.
struct DroppedFirst;

impl Workflow for DroppedFirst {
    const NAME: &'static str = "dropped_first";
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let mut slow = Box::pin(ctx.step("slow", || async {
            sleep_ms(60_000).await;
            Ok(1u32)
        }));
        let mut fast = Box::pin(ctx.step("fast", || async { Ok(2u32) }));
        let both = futures::future::join(&mut slow, &mut fast);
        let _ = tokio::time::timeout(Duration::from_secs(1), both).await;
        drop(slow);
        let fast: u32 = fast.await?;
        Ok(json!({"fast": fast}))
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_before_a_later_one_blocks_the_run_saying_so() {
    let mut env = env_with(DroppedFirst).await;
    let run = env.start::<DroppedFirst>(&json!({})).await.unwrap();
    let done = env.settle(&run).await.unwrap();
    assert_eq!(done.header.status, RunStatus::Blocked, "{:?}", done.header);
    let reason = done.header.reason.clone().unwrap_or_default();
    assert!(reason.contains("\"slow\" (entry 0) was dropped"), "{reason}");
    assert!(done.journal.is_empty(), "{:?}", names(&done.journal));
    env.shutdown().await;
}

/// Branches that chain calls, and two calls that take their turn, side by side: the journal
/// is the same on every replay (a replayed call yields once, as a live one waits for its
/// commit, so the branches make their next calls in the same order).
struct Branches;

impl Workflow for Branches {
    const NAME: &'static str = "branches";
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let branch = |tag: &'static str, ms: u64| async move {
            let a: u64 = ctx
                .step(&format!("{tag}.fetch"), move || async move {
                    sleep_ms(ms).await;
                    Ok(ms)
                })
                .await?;
            let b: u64 = ctx
                .step(&format!("{tag}.parse"), move || async move { Ok(a + 1) })
                .await?;
            Ok::<u64, WorkflowError>(b)
        };
        let (x, y, t1, t2) = futures::join!(branch("x", 300), branch("y", 100), ctx.now(), ctx.uuid());
        let (_, _) = (t1?, t2?);
        Ok(json!({"x": x?, "y": y?}))
    }
}

#[tokio::test(start_paused = true)]
async fn chained_branches_and_turn_taking_calls_replay_to_the_same_journal() {
    let mut env = env_with(Branches).await;
    let run = env.start::<Branches>(&json!({})).await.unwrap();
    let done = env.settle(&run).await.unwrap();
    assert_eq!(done.header.status, RunStatus::Completed, "{:?}", done.header);
    let want: Vec<String> = names(&done.journal).into_iter().map(str::to_owned).collect();
    assert_eq!(done.output().unwrap(), &json!({"x": 301, "y": 101}));
    env.shutdown().await;
    // A crash at each commit: the resumed run replays the recorded prefix and journals the
    // rest in the same order (a divergence would block it as non-determinism).
    for hit in 1..=6 {
        for point in ["step.before_commit", "step.after_commit"] {
            let spec = format!("{point}=abort@{hit}");
            let mut env = env_with(Branches).await;
            env.crash_at(&spec).unwrap();
            let run = env.start::<Branches>(&json!({})).await.unwrap();
            let done = env.settle(&run).await.unwrap();
            assert_eq!(done.header.status, RunStatus::Completed, "{spec}: {:?}", done.header);
            assert_eq!(names(&done.journal), want, "{spec}");
            env.shutdown().await;
        }
    }
}

/// A ctx call inside a step's function is refused with a message (it would wait forever for
/// the step that runs it): the attempt fails, and the step's error says why.
struct Nested;

impl Workflow for Nested {
    const NAME: &'static str = "nested";
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let r: Result<u32, _> = ctx
            .step("outer", move || async move {
                let inner = ctx.step("inner", || async { Ok(1u32) }).await;
                inner.map_err(|e| StepError::fatal(e.to_string()))
            })
            .retry(savepoint::workflow::RetryPolicy::attempts(1))
            .await;
        Ok(json!({"error": r.err().map(|e| e.to_string())}))
    }
}

#[tokio::test(start_paused = true)]
async fn a_ctx_call_inside_a_step_function_fails_the_attempt_saying_why() {
    let mut env = env_with(Nested).await;
    let run = env.start::<Nested>(&json!({})).await.unwrap();
    let done = env.settle(&run).await.unwrap();
    assert_eq!(done.header.status, RunStatus::Completed, "{:?}", done.header);
    let error = done.output().unwrap()["error"].as_str().unwrap_or_default().to_owned();
    assert!(
        error.contains("called inside the function of a step or an effect"),
        "{error}"
    );
    assert_eq!(names(&done.journal), ["outer"]);
    env.shutdown().await;
}

/// A failing `try_join!` drops an effect written after the failed step: the effect's index
/// holds its key, so the run blocks naming it instead of giving the index to the next call,
/// whatever the workflow returns.
struct EffectAfterFailure {
    calls: Arc<AtomicU32>,
}

impl Workflow for EffectAfterFailure {
    const NAME: &'static str = "effect_after_failure";
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let calls = &self.calls;
        let r = futures::try_join!(
            ctx.step("check", || async {
                sleep_ms(100).await;
                Err::<u32, _>(StepError::fatal("refused"))
            }),
            ctx.effect("reserve", "reserve:1", |_fx| async move {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok(true)
            }),
        );
        Ok(json!({"failed": r.is_err()}))
    }
}

#[tokio::test(start_paused = true)]
async fn an_effect_dropped_by_a_failing_try_join_blocks_the_run_naming_it() {
    let calls = Arc::new(AtomicU32::new(0));
    let c = Arc::clone(&calls);
    let mut env = env_with(EffectAfterFailure { calls: Arc::clone(&c) }).await;
    let run = env.start::<EffectAfterFailure>(&json!({})).await.unwrap();
    let done = env.settle(&run).await.unwrap();
    assert_eq!(done.header.status, RunStatus::Blocked, "{:?}", done.header);
    let reason = done.header.reason.clone().unwrap_or_default();
    assert!(reason.contains("\"reserve\"") && reason.contains("dropped"), "{reason}");
    assert_eq!(names(&done.journal), ["check"]);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    env.shutdown().await;
}
