//! `chain {"steps"}`: `steps` trivial steps, each taking and returning a small JSON map (and,
//! with `nap_ms`, each followed by a durable sleep); outputs the last map. Used for benchmarks.

use serde::{Deserialize, Serialize};

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
    /// A durable sleep of this many milliseconds after each step (0: none): a run that
    /// suspends between every two steps, its next slice rung by the scheduler.
    #[serde(default)]
    pub nap_ms: u64,
}

/// What each step returns (`{"i","acc","pad"?}`) and the run outputs (without `pad`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ChainState {
    /// Steps done.
    pub i: u32,
    /// The sum of the step numbers so far.
    pub acc: u64,
    /// `payload_bytes` of padding, when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pad: Option<String>,
}

/// The benchmark workflow.
pub struct Chain;

impl Workflow for Chain {
    const NAME: &'static str = "chain";
    type Input = ChainIn;
    type Output = ChainState;

    async fn run(&self, ctx: &Ctx, input: ChainIn) -> Result<ChainState, WorkflowError> {
        let pad = "x".repeat(input.payload_bytes);
        let delay = input.step_delay_ms;
        let mut state = ChainState::default();
        for i in 0..input.steps {
            let prev = &state;
            let pad = &pad;
            state = ctx
                .step(&format!("s{i}"), || async move {
                    if delay > 0 {
                        tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
                    }
                    Ok(ChainState {
                        i: i + 1,
                        acc: prev.acc + u64::from(i),
                        pad: (!pad.is_empty()).then(|| pad.clone()),
                    })
                })
                .await?;
            if input.nap_ms > 0 {
                ctx.sleep(&format!("z{i}"), std::time::Duration::from_millis(input.nap_ms))
                    .await?;
            }
        }
        state.pad = None;
        Ok(state)
    }
}
