//! `chain {"steps"}`: `steps` trivial steps, each taking and returning a small JSON map;
//! outputs the last map. Used for benchmarks.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use savepoint::workflow::{Ctx, Workflow, WorkflowError};

/// Input.
#[derive(Debug, Serialize, Deserialize)]
pub struct ChainIn {
    /// Number of steps.
    pub steps: u32,
    /// Padding bytes added to each step's result (payload-size benchmarks).
    #[serde(default)]
    pub payload_bytes: usize,
    /// Milliseconds each step waits, standing in for a call to a slow service.
    #[serde(default)]
    pub step_delay_ms: u64,
}

/// The benchmark workflow.
pub struct Chain;

impl Workflow for Chain {
    const NAME: &'static str = "chain";
    type Input = ChainIn;
    type Output = Value;

    async fn run(&self, ctx: &mut Ctx, input: ChainIn) -> Result<Value, WorkflowError> {
        let pad = "x".repeat(input.payload_bytes);
        let delay = input.step_delay_ms;
        let mut state = json!({"i": 0, "acc": 0});
        for i in 0..input.steps {
            let prev = &state;
            let pad = &pad;
            state = ctx
                .step(&format!("s{i}"), || async move {
                    if delay > 0 {
                        tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
                    }
                    let acc = prev["acc"].as_u64().unwrap_or(0) + u64::from(i);
                    let mut out = json!({"i": i + 1, "acc": acc});
                    if !pad.is_empty() {
                        out["pad"] = json!(pad);
                    }
                    Ok(out)
                })
                .await?;
        }
        if let Some(m) = state.as_object_mut() {
            m.remove("pad");
        }
        Ok(state)
    }
}
