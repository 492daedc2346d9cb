//! `routed {"queue"}`: three steps; the middle one (`render`) runs on task queue `queue`
//! (`ctx.step(…).on_queue(queue)`), the others on the run's home queue. Each step returns the
//! name of the worker that ran it (`SAVEPOINT_WORKER_NAME`), so the output shows where each ran.

use serde::{Deserialize, Serialize};

use savepoint::workflow::{Ctx, StepError, Workflow, WorkflowError};

/// Input.
#[derive(Debug, Serialize, Deserialize)]
pub struct RoutedIn {
    /// The task queue of the middle step.
    pub queue: String,
}

/// Output: the worker that ran each step.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RoutedOut {
    /// The first step's worker (home queue).
    pub prepare: String,
    /// The middle step's worker (queue `queue`).
    pub render: String,
    /// The last step's worker (home queue).
    pub deliver: String,
}

/// The routing demo workflow.
pub struct Routed;

fn worker_name() -> Result<String, StepError> {
    Ok(std::env::var("SAVEPOINT_WORKER_NAME").unwrap_or_else(|_| "worker".into()))
}

impl Workflow for Routed {
    const NAME: &'static str = "routed";
    type Input = RoutedIn;
    type Output = RoutedOut;

    async fn run(&self, ctx: &Ctx, input: RoutedIn) -> Result<RoutedOut, WorkflowError> {
        let prepare: String = ctx.step("prepare", || async { worker_name() }).await?;
        let render: String = ctx
            .step("render", || async { worker_name() })
            .on_queue(&input.queue)
            .await?;
        let deliver: String = ctx.step("deliver", || async { worker_name() }).await?;
        Ok(RoutedOut {
            prepare,
            render,
            deliver,
        })
    }
}
