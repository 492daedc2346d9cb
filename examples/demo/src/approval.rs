//! `approval {}`: step `first` → interrupt `gate` {"question":"Approve this payment?"} →
//! `{"log":["first","gate=<answer>"]}` (the seed's example 6).

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use savepoint::workflow::{Ctx, Interrupt, Workflow, WorkflowError};

/// The person's answer: any JSON value (a string is logged as it is, anything else as JSON),
/// so no schema is published for it.
pub const GATE: Interrupt<Value> = Interrupt::new("gate");

/// Output.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ApprovalOut {
    /// `["first", "gate=<answer>"]`.
    pub log: Vec<String>,
}

/// The human-approval workflow. Its input is not read (any JSON value, `{}` by convention).
pub struct Approval;

impl Workflow for Approval {
    const NAME: &'static str = "approval";
    type Input = Value;
    type Output = ApprovalOut;

    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<ApprovalOut, WorkflowError> {
        let first: String = ctx.step("first", || async { Ok("first".to_owned()) }).await?;
        let answer = match ctx
            .interrupt(GATE, json!({"question": "Approve this payment?"}))
            .await?
        {
            Value::String(s) => s,
            other => other.to_string(),
        };
        Ok(ApprovalOut {
            log: vec![first, format!("gate={answer}")],
        })
    }
}
