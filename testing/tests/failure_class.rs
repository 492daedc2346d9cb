//! A failed call's class and retryability are data (entry version 3): compensation code
//! matches on the class, live and when an exported history is replayed against the code (the
//! export carries `error_class` and `retryable`, so the replay takes the branch the run took).

use serde_json::{json, Value};

use savepoint::workflow::{Ctx, Registry, StepError, Workflow, WorkflowError};
use savepoint_testing::{replay_export, ReplayReport, RunStatus, TestEnv};

/// Charges; a declined card is refunded, any other failure is retried later.
struct Compensate;

impl Workflow for Compensate {
    const NAME: &'static str = "compensate";
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let charged = ctx
            .step("charge", || async {
                Err::<u32, _>(StepError::fatal("card declined").with_class("declined"))
            })
            .await;
        let next = match charged {
            Err(e) if e.class() == Some("declined") && !e.is_retryable() => "refund",
            Err(_) => "retry_later",
            Ok(_) => "ship",
        };
        ctx.step(next, || async { Ok(true) }).await?;
        Ok(json!({"next": next}))
    }
}

fn registry() -> Registry {
    let mut r = Registry::new();
    r.register(Compensate);
    r
}

#[tokio::test(start_paused = true)]
async fn compensation_matches_the_failures_class_live() {
    let mut env = TestEnv::new(|_| registry()).await.unwrap();
    let run = env.start::<Compensate>(&json!({})).await.unwrap();
    let done = env.settle(&run).await.unwrap();
    assert_eq!(done.header.status, RunStatus::Completed, "{:?}", done.header);
    assert_eq!(done.output(), Some(&json!({"next": "refund"})));
    let failure = done.journal[0].failure.clone().expect("the failure is journaled");
    assert_eq!((failure.class.as_deref(), failure.retryable), (Some("declined"), false));
    env.shutdown().await;
}

/// The history as `savepoint export` writes it (`error_class`, `retryable` on the failed
/// entry when `with_class` is true).
fn export(with_class: bool) -> Value {
    let mut charge = json!({"index": 0, "name": "charge", "kind": "step", "outcome": "error",
        "result": null, "error": "card declined", "attempts": 1, "at": 5});
    if with_class {
        charge["error_class"] = json!("declined");
        charge["retryable"] = json!(false);
    }
    let refund = json!({"index": 1, "name": "refund", "kind": "step", "outcome": "ok", "result": true,
        "attempts": 1, "at": 6});
    json!({"workflow": "compensate", "thread_id": "compensate-1", "input": {}, "journal": [charge, refund]})
}

#[tokio::test]
async fn an_exported_history_replays_down_the_branch_its_failure_class_chose() {
    match replay_export(&registry(), &export(true)).await.unwrap() {
        ReplayReport::Finished(Ok(out)) => assert_eq!(out, json!({"next": "refund"})),
        other => panic!("expected a clean replay, got {other:?}"),
    }
    // Without the class (an export from before entry version 3) the code takes the other
    // branch, and the replay says where it left the history.
    match replay_export(&registry(), &export(false)).await.unwrap() {
        ReplayReport::Diverged(msg) => assert!(msg.contains("refund") && msg.contains("retry_later"), "{msg}"),
        other => panic!("expected a divergence, got {other:?}"),
    }
}
