//! Parallel calls (`futures::join!`, `join_all` over ctx calls, `ctx.select`) on the embedded backend: the calls
//! overlap, the journal keeps call order, a crash at every failpoint inside a group leaves
//! each effect applied once, and a race against a timeout keeps its recorded deadline.

use serde_json::{json, Value};
use std::time::Duration;

use savepoint::workflow::{Call, Ctx, Registry, Selected, StepError, Workflow, WorkflowError};
use savepoint_core::journal::EntryKind;
use savepoint_demo::{registry, EffectLog, Fanout, FanoutIn};
use savepoint_store::{RunStatus, ScriptStore};
use savepoint_testing::{crash_matrix, Setup, TestEnv};

/// Effect records of the demo log for one run, by key.
async fn applied(store: &ScriptStore, thread: &str) -> std::collections::BTreeMap<String, usize> {
    let mut out = std::collections::BTreeMap::new();
    for r in EffectLog::new(store).all().await.expect("effects log") {
        if r["thread_id"] == thread {
            *out.entry(r["key"].as_str().unwrap_or("").to_owned()).or_default() += 1;
        }
    }
    out
}

/// The demo workflows (their effects log lives in the engine's store).
fn demo(setup: &Setup) -> Registry {
    registry(setup.store())
}

const GROUP: [&str; 5] = [
    "fetch.invoice",
    "stock.reserve",
    "fetch.contract",
    "card.charge",
    "fetch.receipt",
];

#[tokio::test(start_paused = true)]
async fn a_group_runs_its_calls_at_once_and_journals_them_in_call_order() {
    let mut env = TestEnv::new(demo).await.unwrap();
    let run = env
        .start::<Fanout>(&FanoutIn {
            order_id: "O-1".into(),
            fetch_ms: 1000,
        })
        .await
        .unwrap();
    let done = env.settle(&run).await.unwrap();
    assert_eq!(done.header.status, RunStatus::Completed, "{:?}", done.header);
    // Five calls of one virtual second each: the last is journaled about one second after
    // the run started if they overlap, five if they ran one after another.
    let took = done.journal[4].at - done.header.created_at;
    assert!((1000..2500).contains(&took), "the group took {took} ms");
    let names: Vec<&str> = done.journal.iter().map(|e| e.name.as_str()).collect();
    let mut want = GROUP.to_vec();
    want.extend(["quote.deadline", "quote"]);
    assert_eq!(names, want);
    let output = done.output().unwrap().clone();
    assert_eq!(output["group"][1], json!({"applied": "stock:O-1"}));
    assert_eq!(output["group"][4], json!({"doc": "receipt"}));
    assert_eq!(output["quote"], json!({"carrier": "fast"}));
    let fx = applied(env.store(), run.as_str()).await;
    assert_eq!(fx.len(), 2, "{fx:?}");
    assert!(fx.values().all(|n| *n == 1), "{fx:?}");
    for name in GROUP {
        assert_eq!(env.stubs().calls(name), 1, "{name}");
    }
    env.shutdown().await;
}

/// A crash at every failpoint and hit inside the group: the run completes and each effect was
/// applied once at the provider (both reconcile against the log), every time.
#[tokio::test(start_paused = true)]
async fn a_group_survives_a_crash_at_every_failpoint_with_each_effect_once() {
    let mut seen = Vec::new();
    let cases = crash_matrix(demo, "fanout", json!({"order_id": "O-2"}), |env, case| {
        let h = &case.settled.header;
        assert_eq!(h.status, RunStatus::Completed, "{}: {h:?}", case.spec);
        assert_eq!(env.crashes(), 1, "{}", case.spec);
        let names: Vec<&str> = case.settled.journal.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(&names[..5], GROUP.as_slice(), "{}", case.spec);
        seen.push((case.spec.clone(), h.thread.clone()));
    })
    .await
    .unwrap();
    // Five step commits (three group steps, the deadline is a value, the race) and two
    // effects at each of three effect points, each hit number in turn.
    let specs: Vec<&str> = cases.iter().map(|c| c.spec.as_str()).collect();
    for want in [
        "step.before_commit=abort@3",
        "step.after_commit=abort@4",
        "effect.after_intent=abort@2",
        "effect.after_call=abort@2",
        "effect.after_done=abort@2",
    ] {
        assert!(specs.contains(&want), "{want} in {specs:?}");
    }
    assert_eq!(cases.len(), seen.len());
}

/// The same, counting at the provider: each environment's log holds each key once.
#[tokio::test(start_paused = true)]
async fn each_group_effect_is_applied_once_at_the_provider_whatever_the_crash() {
    for spec in [
        "effect.after_intent=abort@1",
        "effect.after_intent=abort@2",
        "effect.after_call=abort@1",
        "effect.after_call=abort@2",
        "effect.after_done=abort@1",
        "step.before_commit=abort@1",
        "step.after_commit=abort@2",
    ] {
        let mut env = TestEnv::new(demo).await.unwrap();
        env.crash_at(spec).unwrap();
        let run = env
            .start::<Fanout>(&FanoutIn {
                order_id: "O-3".into(),
                fetch_ms: 50,
            })
            .await
            .unwrap();
        let done = env.settle(&run).await.unwrap();
        assert_eq!(env.crashes(), 1, "{spec}");
        assert_eq!(done.header.status, RunStatus::Completed, "{spec}: {:?}", done.header);
        let fx = applied(env.store(), run.as_str()).await;
        assert_eq!(
            fx,
            [("charge:O-3".to_owned(), 1), ("stock:O-3".to_owned(), 1)].into(),
            "{spec}"
        );
        env.shutdown().await;
    }
}

/// A race whose calls are all slower than the timeout times out; the deadline is recorded
/// before the race and is kept by a run resumed later.
struct Slow;
impl Workflow for Slow {
    const NAME: &'static str = "slow";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let (a, b) = futures::join!(
            ctx.step("n", || async { Ok(7u32) }),
            ctx.step("s", || async { Ok("text".to_owned()) }),
        );
        let (n, s) = (a?, b?);
        let r = ctx
            .select(
                "race",
                vec![Call::step("never", || async {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Ok(1u32)
                })],
                Duration::from_secs(60),
            )
            .await?;
        let failed = futures::future::join_all(vec![ctx.step("broken", || async {
            Err::<u32, _>(StepError::fatal("no such document"))
        })])
        .await;
        Ok(json!({"n": n, "s": s, "timed_out": r == Selected::TimedOut, "failed": format!("{:?}", failed[0])}))
    }
}

#[tokio::test(start_paused = true)]
async fn join_keeps_types_and_a_race_times_out_at_its_recorded_deadline() {
    let mut env = TestEnv::new(|_| {
        let mut r = Registry::new();
        r.register(Slow);
        r
    })
    .await
    .unwrap();
    let run = env.start::<Slow>(&json!({})).await.unwrap();
    let done = env.settle(&run).await.unwrap();
    assert_eq!(done.header.status, RunStatus::Completed, "{:?}", done.header);
    // The race ended at its deadline, a minute after it was recorded.
    let took = done.journal[3].at - done.journal[2].at;
    assert!((60_000..61_000).contains(&took), "{took} ms");
    let out = done.output().unwrap().clone();
    assert_eq!(out["n"], 7);
    assert_eq!(out["s"], "text");
    assert_eq!(out["timed_out"], true);
    assert!(out["failed"].as_str().unwrap().contains("no such document"), "{out}");
    let kinds: Vec<(&str, EntryKind)> = done.journal.iter().map(|e| (e.name.as_str(), e.kind)).collect();
    assert_eq!(
        kinds,
        [
            ("n", EntryKind::Step),
            ("s", EntryKind::Step),
            ("race.deadline", EntryKind::Value),
            ("race", EntryKind::Step),
            ("broken", EntryKind::Step),
        ]
    );
    env.shutdown().await;
}

/// A wait with a durable deadline: an approval that does not come within a day times out; one
/// that comes in time is returned. The deadline is journaled before the wait.
struct Deadline;
impl Workflow for Deadline {
    const NAME: &'static str = "deadline";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let day = Duration::from_secs(24 * 3600);
        let approved: Option<bool> = ctx.interrupt("approve", json!({"question": "ok?"})).within(day).await?;
        let nudge: Option<u32> = ctx.wait_signal("nudge").within(Duration::from_secs(60)).await?;
        Ok(json!({"approved": approved, "nudge": nudge}))
    }
}

fn deadline_registry(_: &Setup) -> Registry {
    let mut r = Registry::new();
    r.register(Deadline);
    r
}

#[tokio::test(start_paused = true)]
async fn a_wait_times_out_at_its_recorded_deadline_or_returns_the_answer_in_time() {
    // No answer: both waits time out, each at its own deadline.
    let mut env = TestEnv::new(deadline_registry).await.unwrap();
    let run = env.start::<Deadline>(&json!({})).await.unwrap();
    let waiting = env.settle(&run).await.unwrap();
    assert_eq!(waiting.header.status, RunStatus::Waiting);
    assert!(
        waiting.header.due.is_some(),
        "a timed wait has its deadline as due time"
    );
    env.advance(Duration::from_secs(25 * 3600));
    let done = env.settle(&run).await.unwrap();
    assert_eq!(done.header.status, RunStatus::Completed, "{:?}", done.header);
    assert_eq!(done.output(), Some(&json!({"approved": null, "nudge": null})));
    let names: Vec<&str> = done.journal.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["approve.deadline", "approve", "nudge.deadline", "nudge"]);
    let day_ms = done.journal[1].at - done.journal[0].at;
    assert!(
        (86_400_000..86_402_000).contains(&day_ms),
        "timed out after {day_ms} ms"
    );
    let min_ms = done.journal[3].at - done.journal[2].at;
    assert!((60_000..61_000).contains(&min_ms), "timed out after {min_ms} ms");
    env.shutdown().await;

    // Answered in time: the answer is returned, no timeout.
    let mut env = TestEnv::new(deadline_registry).await.unwrap();
    let run = env.start::<Deadline>(&json!({})).await.unwrap();
    env.settle(&run).await.unwrap();
    env.advance(Duration::from_secs(3600));
    env.resume(&run, json!(true)).await.unwrap();
    env.signal(&run, "nudge", json!(3)).await.unwrap();
    let done = env.settle(&run).await.unwrap();
    assert_eq!(
        done.output(),
        Some(&json!({"approved": true, "nudge": 3})),
        "{:?}",
        done.header
    );
    env.shutdown().await;
}
