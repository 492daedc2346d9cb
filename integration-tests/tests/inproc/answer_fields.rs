//! Unknown fields in what is sent to a run (interrupt answers, signal values), through the
//! API with an in-process worker: a type that says `#[serde(deny_unknown_fields)]` publishes
//! a schema with `additionalProperties: false`, so the API refuses such a value with 422
//! naming the field, records nothing, and the run keeps waiting; a type without it (the
//! default) takes the value and ignores the field.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::time::Duration;

use savepoint::workflow::{Ctx, Declared, Interrupt, Registry, Signal, Workflow, WorkflowError};
use savepoint_integration_tests::inproc::InProc;
use savepoint_integration_tests::scenario::World;

const LONG: Duration = Duration::from_secs(30);

/// Strict: an answer with a field it does not have is refused.
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Approval {
    approved: bool,
}

/// Lenient (the default): a field it does not have is ignored.
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
struct Note {
    text: String,
}

const APPROVAL: Interrupt<Approval> = Interrupt::new("approval");
const NOTE: Signal<Note> = Signal::new("note");
/// A strict signal the run never waits for: checked all the same (a signal may be buffered).
const HALT: Signal<Approval> = Signal::new("halt");

struct Gate;
impl Workflow for Gate {
    const NAME: &'static str = "gate_fields";
    const DECLARED: &'static [&'static dyn Declared] = &[&APPROVAL, &NOTE, &HALT];
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let a = ctx.interrupt(APPROVAL, json!({"question": "approve?"})).await?;
        let n = ctx.wait_signal(NOTE).await?;
        Ok(json!({"approved": a.approved, "note": n.text}))
    }
}

/// The error text of a refused request, checked to be a 422.
fn refused(code: u16, body: &Value) -> String {
    assert_eq!(code, 422, "{body}");
    body["error"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn unknown_fields_are_refused_where_the_type_denies_them_and_ignored_by_default() {
    let w = World::new("uf", |_| {}).await;
    let mut reg = Registry::new();
    reg.register(Gate);
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered("gate_fields").await;
    let t = w.start("gate_fields", json!(null)).await;
    let before = w.wait_status(&t, &["waiting"], LONG).await;
    assert_eq!(before["wait"]["name"], "approval", "{before}");
    let events = w.event_types(&t).await;

    // Strict answer: 422 naming the unknown field.
    let resume = format!("/v1/runs/{t}/resume");
    let typo = json!({"value": {"approved": true, "aproved_by": "ann"}});
    let (code, body) = w.post(&resume, typo).await;
    let e = refused(code, &body);
    assert!(
        e.contains("interrupt \"approval\"") && e.contains("'aproved_by'"),
        "{e}"
    );
    assert!(e.contains("nothing was changed"), "{e}");
    // Strict signal, not waited for yet: refused too, not buffered.
    let (code, body) = w
        .post(
            &format!("/v1/runs/{t}/signals/halt"),
            json!({"value": {"approved": false, "why": "x"}}),
        )
        .await;
    let e = refused(code, &body);
    assert!(e.contains("signal \"halt\"") && e.contains("'why'"), "{e}");

    // Nothing was recorded: no event, no entry, and the run still waits at the interrupt.
    assert_eq!(w.event_types(&t).await, events, "a refused value records nothing");
    let after = w.run(&t).await;
    assert_eq!(after["status"], "waiting", "{after}");
    assert_eq!(after["step"], before["step"], "{after}");
    assert_eq!(after["wait"], before["wait"], "{after}");
    assert!(after.get("blocked_reason").is_none(), "{after}");

    // The right shape resumes it.
    let (code, body) = w.post(&resume, json!({"value": {"approved": true}})).await;
    assert_eq!(code, 202, "{body}");
    w.wait_waiting_for(&t, "note", LONG).await;

    // Lenient signal: the unknown field is accepted and ignored.
    let (code, body) = w
        .post(
            &format!("/v1/runs/{t}/signals/note"),
            json!({"value": {"text": "ship it", "from": "ann"}}),
        )
        .await;
    assert_eq!(code, 202, "{body}");
    let done = w.wait_status(&t, &["completed"], LONG).await;
    assert_eq!(done["output"], json!({"approved": true, "note": "ship it"}));
    wk.stop().await;
}
