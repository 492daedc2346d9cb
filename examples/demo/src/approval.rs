//! `approval {}`: step `first` → interrupt `gate` {"question":"Approve this payment?"} →
//! `{"log":["first","gate=<answer>"]}` (the seed's example 6).

use serde_json::{json, Value};

use savepoint::workflow::{Ctx, Workflow, WorkflowError};

/// The human-approval workflow.
pub struct Approval;

impl Workflow for Approval {
    const NAME: &'static str = "approval";
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &mut Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let first: String = ctx.step("first", || async { Ok("first".to_owned()) }).await?;
        let answer: Value = ctx
            .interrupt("gate", json!({"question": "Approve this payment?"}))
            .await?;
        let answer = match answer {
            Value::String(s) => s,
            other => other.to_string(),
        };
        Ok(json!({"log": [first, format!("gate={answer}")]}))
    }
}
