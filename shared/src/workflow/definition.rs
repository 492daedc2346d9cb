//! The [`Workflow`] trait: what a durable workflow is to the worker that runs it.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::future::Future;

#[cfg(doc)]
use super::Registry;
use super::{Ctx, Declared, RetryPolicy, Schemas, Versions, WorkflowError};

/// A durable workflow. Register it with a [`Registry`]; the worker runs it.
///
/// ```ignore
/// struct Approval;
/// impl Workflow for Approval {
///     const NAME: &'static str = "approval";
///     type Input = serde_json::Value;
///     type Output = serde_json::Value;
///     async fn run(&self, ctx: &Ctx, _input: Self::Input) -> Result<Self::Output, WorkflowError> {
///         ctx.step("first", || async { Ok(()) }).await?;
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
    type Input: DeserializeOwned + Send + 'static;
    /// Output, encoded to JSON when the run completes.
    type Output: Serialize + Send;

    /// The typed handles ([`Interrupt`](super::Interrupt), [`Signal`](super::Signal)) the
    /// workflow waits on, declared once as constants: their schemas are published with
    /// [`Workflow::schemas`]'s, under the handles' own names. None by default.
    const DECLARED: &'static [&'static dyn Declared] = &[];

    /// The workflow body. Suspension (sleep, interrupt, signal, yield) is handled by the
    /// runtime: the future simply stops being polled.
    fn run(&self, ctx: &Ctx, input: Self::Input) -> impl Future<Output = Result<Self::Output, WorkflowError>> + Send;

    /// Retry policy of the workflow's steps unless a call gives its own.
    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::default()
    }

    /// JSON Schemas of the values the workflow takes from outside (input, interrupt answers,
    /// signal values, effect results), from their Rust types. The worker publishes them, with
    /// those of [`Workflow::DECLARED`]; the API refuses (422) a start, resume, signal or
    /// resolve whose value does not match, before anything changes. None by default.
    fn schemas(&self) -> Schemas {
        Schemas::default()
    }

    /// The value types whose recorded shape changed and that declare their version and
    /// upgrades ([`Versioned`](super::Versioned)): `Versions::new().of::<Invoice>()`. Every
    /// value of such a type the workflow records (a step's or effect's result, an interrupt's
    /// or signal's answer, a child's output) is journaled with its version, and a replay
    /// upgrades an older one before the code sees it. None by default: every type is version 1.
    fn versions() -> Versions {
        Versions::new()
    }
}
