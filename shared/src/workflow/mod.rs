//! The workflow API (ARCHITECTURE §4): a workflow is an ordinary async function over a [`Ctx`]
//! whose every call is journaled, so a resumed run replays recorded results instead of
//! repeating work.

mod child;
mod commit;
mod ctx;
mod definition;
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
pub use definition::Workflow;
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
/// What `ctx.uuid()` returns.
pub use uuid::Uuid;
