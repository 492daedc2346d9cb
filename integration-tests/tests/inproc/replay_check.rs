//! The deploy gate on live runs (issue 28 §2, `savepoint_worker::replay_check`): live runs of a
//! namespace replayed against another build's code, read-only. The same code replays them
//! cleanly; code that calls another step diverges (one finding for every run, with the patch
//! gate to write); code whose type no longer reads a recorded value would block them; a
//! workflow the build does not register is not served. Nothing is written to the runs. Run on
//! whichever backend the tier uses.

use serde_json::{json, Value};
use std::time::Duration;

use savepoint::workflow::{Ctx, Registry, Workflow, WorkflowError};
use savepoint_integration_tests::inproc::InProc;
use savepoint_integration_tests::scenario::World;
use savepoint_worker::replay_check::{replay_check, CheckOptions, Verdict};

const LONG: Duration = Duration::from_secs(60);

/// The build that started the runs: a step, then a human's answer.
struct Gate;

impl Workflow for Gate {
    const NAME: &'static str = "gate_check";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let text: String = ctx.step("read", || async { Ok("text".to_owned()) }).await?;
        let ok: Value = ctx.interrupt("approve", json!({"text": text})).await?;
        Ok(ok)
    }
}

/// A new build that renamed the step: every live run diverges at entry 0.
struct Renamed;

impl Workflow for Renamed {
    const NAME: &'static str = "gate_check";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let text: String = ctx.step("read_v2", || async { Ok("text".to_owned()) }).await?;
        ctx.interrupt("approve", json!({"text": text})).await
    }
}

/// A new build whose step now returns a number: the recorded text no longer reads.
struct Retyped;

impl Workflow for Retyped {
    const NAME: &'static str = "gate_check";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let n: u32 = ctx.step("read", || async { Ok(7u32) }).await?;
        ctx.interrupt("approve", json!({"n": n})).await
    }
}

fn registry<W: Workflow>(w: W) -> Registry {
    let mut r = Registry::new();
    r.register(w);
    r
}

#[tokio::test]
async fn a_deploy_gate_replays_live_runs_against_new_code_and_writes_nothing() {
    let w = World::new("replaychk", |_| {}).await;
    let wk = InProc::start(&w.cfg, registry(Gate));
    w.wait_registered(Gate::NAME).await;
    let mut runs = Vec::new();
    for _ in 0..5 {
        runs.push(w.start(Gate::NAME, json!({})).await);
    }
    for t in &runs {
        w.wait_status(t, &["waiting"], LONG).await;
    }
    wk.stop().await;
    let before: Vec<Value> = futures::future::join_all(runs.iter().map(|t| w.run(t))).await;
    let opts = CheckOptions {
        workflow: Some(Gate::NAME.into()),
        ..CheckOptions::default()
    };

    let same = replay_check(&w.store, &registry(Gate), &opts).await.unwrap();
    assert_eq!((same.checked, same.clean), (5, 5), "{}", same.render());
    assert!(same.findings.is_empty() && !same.blocks(), "{}", same.render());

    let renamed = replay_check(&w.store, &registry(Renamed), &opts).await.unwrap();
    let text = renamed.render();
    eprintln!("{text}");
    assert!(renamed.blocks(), "{text}");
    assert_eq!(renamed.findings.len(), 1, "identical findings are one: {text}");
    let f = &renamed.findings[0];
    assert_eq!(
        (f.verdict, f.runs, f.version),
        (Verdict::NonDeterministic, 5, 1),
        "{text}"
    );
    assert!(f.detail.contains("entry 0"), "{text}");
    assert!(f.hint.contains("ctx.patched(\"<change-id>\")"), "{text}");
    assert!(
        f.hint.contains("ctx.step(\"read_v2\", …)") && f.hint.contains("ctx.step(\"read\", …)"),
        "{text}"
    );
    assert!(text.contains("5 would block"), "{text}");

    let retyped = replay_check(&w.store, &registry(Retyped), &opts).await.unwrap();
    assert!(retyped.blocks(), "{}", retyped.render());
    assert_eq!(retyped.findings[0].verdict, Verdict::WouldBlock, "{}", retyped.render());
    assert_eq!(retyped.findings[0].runs, 5);

    // A build that does not register the workflow would leave the runs waiting, not blocked.
    let other = replay_check(&w.store, &Registry::new(), &opts).await.unwrap();
    assert_eq!(other.findings[0].verdict, Verdict::NotServed, "{}", other.render());
    assert!(!other.blocks());

    // Read-only: no run changed (its version counts every write).
    let after: Vec<Value> = futures::future::join_all(runs.iter().map(|t| w.run(t))).await;
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(
            (&b["version"], &b["status"], &b["step"]),
            (&a["version"], &a["status"], &a["step"])
        );
    }
}
