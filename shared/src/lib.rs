//! Savepoint core library: durable workflows checkpointed in Redis and dispatched over
//! RabbitMQ. See `docs/ARCHITECTURE.md` for how it works: the contract (§1), the crates (§2)
//! and the design.
#![forbid(unsafe_code)]

pub mod embedded;
pub mod workflow;

/// The core crate, for the engine-facing parts of the API (`CtxParts`: `Lease`, the clocks,
/// `Failpoints`, the store seam `RunStore`).
pub use savepoint_core as core;
// The vocabulary shared with the engine crates, at the paths authors and the engine used.
pub use savepoint_core::{entropy, failpoints, ids, journal, keys, lease, protocol};

// The engine crates, re-exported at the paths the engine used (until its callers name them).
/// The task transport.
pub use savepoint_broker as broker;
/// Configuration, telemetry and security settings of a process.
pub use savepoint_runtime::{config, security, telemetry};
/// The checkpoint store.
pub use savepoint_store as store;

/// The metric registry and the ops endpoints.
pub mod metrics {
    pub use savepoint_core::metrics::*;
    pub use savepoint_runtime::ops::*;
}
