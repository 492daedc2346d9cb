//! The workflow API (ARCHITECTURE §4): a workflow is an ordinary async function over a [`Ctx`]
//! whose every call is journaled, so a resumed run replays recorded results instead of
//! repeating work.

mod child;
mod ctx;
mod effect;
mod error;
mod group;
mod registry;
mod retry;
mod stubs;
mod unused;
mod wait;

pub use child::{child_thread_id, ChildSpec, TaskSink};
pub use ctx::{panic_message, Ctx, CtxParts, Routing, SliceExit, SliceLimits};
pub use effect::{
    busy_backoff, key_still_held, orphan_if_owner_ended, EffectCtx, EffectOptions, EffectPolicy, ReconcileFn,
};
pub use error::{StepError, StepResult, WorkflowError};
pub use group::{Call, Selected};
pub use registry::{DynWorkflow, Registry, RunError};
pub use retry::RetryPolicy;
pub use savepoint_core::decide;
pub use savepoint_core::schemas::{self as schema, Schemas};
pub use stubs::{StubFn, Stubs};

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::future::Future;

/// A durable workflow. Register it with a [`Registry`]; the worker runs it.
///
/// ```ignore
/// struct Approval;
/// impl Workflow for Approval {
///     const NAME: &'static str = "approval";
///     type Input = serde_json::Value;
///     type Output = serde_json::Value;
///     async fn run(&self, ctx: &mut Ctx, _input: Self::Input) -> Result<Self::Output, WorkflowError> {
///         ctx.step("first", || async { Ok::<_, StepError>(()) }).await?;
///         let answer: String = ctx.interrupt("gate", serde_json::json!({"question": "Approve?"})).await?;
///         Ok(serde_json::json!({"log": ["first", format!("gate={answer}")]}))
///     }
/// }
/// ```
pub trait Workflow: Send + Sync + 'static {
    /// The name runs are started under.
    const NAME: &'static str;
    /// The code version; new runs record it.
    const VERSION: u32 = 1;
    /// The oldest recorded version this code can still replay (use `ctx.patched` to branch).
    const MIN_VERSION: u32 = 1;
    /// Input, decoded from the run's JSON input.
    type Input: DeserializeOwned + Send;
    /// Output, encoded to JSON when the run completes.
    type Output: Serialize + Send;

    /// The workflow body. Suspension (sleep, interrupt, signal, yield) is handled by the
    /// runtime: the future simply stops being polled.
    fn run(
        &self,
        ctx: &mut Ctx,
        input: Self::Input,
    ) -> impl Future<Output = Result<Self::Output, WorkflowError>> + Send;

    /// Retry policy of the workflow's steps unless a call gives its own.
    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::default()
    }

    /// JSON Schemas of the values the workflow takes from outside (input, interrupt answers,
    /// signal values, effect results), from their Rust types. The worker publishes them; the
    /// API refuses (422) a start, resume, signal or resolve whose value does not match,
    /// before anything changes. None by default.
    fn schemas(&self) -> Schemas {
        Schemas::default()
    }
}
