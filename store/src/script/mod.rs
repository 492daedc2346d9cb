//! The Redis implementation of the checkpoint store.

mod children;
mod claim;
mod config;
mod control;
mod create;
mod effects;
mod fleet;
mod flow;
mod lease;
mod naming;
mod pause;
mod query;
pub(crate) mod reply;
mod scan;
mod schedules;
pub(crate) mod scripts;
mod seal;
mod store;

// The outcome types the scripts answer with live in the core crate (plain data).
pub use savepoint_core::outcome::{
    child_signal, CatalogEntry, ChildResult, CreateOutcome, EffectDone, EffectRecord, EffectRelease, EffectUnused,
    Flow, Rerun, Suspend, Suspended,
};

pub use children::Cascade;
pub use config::StoreConfig;
pub use control::{
    Cancelled, ForgetOutcome, ForkOutcome, OutputVersionOutcome, RestartOutcome, RetryOutcome, SignalOutcome,
};
pub use create::SCHEMA_VERSION;
pub use fleet::{owns_partition, Build, ServedSpec, WorkerInfo};
pub use flow::{Acquired, LineFacts, FLOW_PARK};
pub use pause::{Pause, PauseRecord, PauseScope, RunPaused, RunResumed, Unparked};
pub use query::{ListFilter, PageCursor, RunEvent, WorkflowCounts};
pub use scan::Rung;
pub use schedules::{Advance, Resealed, SchedulePut, ScheduleRecord};
pub use store::ScriptStore;

use store::ms;
