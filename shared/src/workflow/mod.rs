//! The workflow API (ARCHITECTURE §4): a workflow is an ordinary async function over a [`Ctx`]
//! whose every call is journaled, so a resumed run replays recorded results instead of
//! repeating work.

mod calls;
mod child;
mod commit;
mod ctx;
mod definition;
mod effect;
mod error;
mod handles;
mod member;
mod pipeline;
mod race;
mod registry;
mod retry;
mod seq;
mod stubs;
mod unused;
mod versions;
mod wait;

pub use calls::{EffectCall, StepCall, WaitCall, WaitWithin};
pub use child::{child_thread_id, ChildSpec};
pub use ctx::{Ctx, SliceLimits};
pub use definition::Workflow;
pub use effect::{EffectCtx, EffectOptions, EffectPolicy, ReconcileFn};
pub use error::{StepError, StepResult, WorkflowError};
pub use handles::{Declared, Effect, Interrupt, Signal};
pub use race::{Call, Selected};
pub use registry::{Registry, RunError};
pub use retry::RetryPolicy;
pub use savepoint_core::decide;
pub use savepoint_core::schemas::{self as schema, Schemas};
pub use stubs::{StubFn, Stubs};
/// What `ctx.uuid()` returns.
pub use uuid::Uuid;
pub use versions::{Migration, Versioned, Versions};

/// What the worker runtime needs from the SDK to build and drive a [`Ctx`]: not for workflow
/// code, and not a stable interface (it changes with the worker).
#[doc(hidden)]
pub mod engine {
    pub use super::child::TaskSink;
    pub use super::ctx::{panic_message, CtxParts, Parked, Routing, SliceExit};
    pub use super::effect::{busy_backoff, key_still_held, orphan_if_owner_ended};
    pub use super::pipeline::count_written;
    pub use super::registry::DynWorkflow;
}
