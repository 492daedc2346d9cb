//! Savepoint's SDK: what a workflow author depends on (ARCHITECTURE §2). A workflow is an
//! ordinary async Rust function over a [`workflow::Ctx`]; every call it journals through the
//! context is checkpointed, so a retried or resumed run never repeats a finished step.
//!
//! This crate holds the workflow trait, the context and its calls, errors, retry policies,
//! schemas and the registry, and nothing of the engine: no store client, broker, HTTP server
//! or Lua engine is in its dependency tree. Run workflows with `savepoint-worker`; test them
//! with `savepoint-testing`. See `docs/ARCHITECTURE.md` for how it works.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod workflow;

/// The core crate: the engine-facing parts of the API (`CtxParts`: `Lease`, the clocks,
/// `Failpoints`, the store seam `RunStore`).
pub use savepoint_core as core;
/// Thread ids, effect keys and the other identifiers a workflow names.
pub use savepoint_core::ids;
/// Journal entries, as [`workflow::Ctx::journal`] returns them.
pub use savepoint_core::journal;

/// Values a workflow marks secret: journaled (sealed, when payload keys are configured) but
/// never shown.
pub mod security {
    pub use savepoint_core::secret::{redact_secrets, shown, Secret, SECRET_MARKER};
}
