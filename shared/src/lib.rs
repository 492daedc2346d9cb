//! Savepoint core library: durable workflows checkpointed in Redis and dispatched over
//! RabbitMQ. See `docs/ARCHITECTURE.md` for how it works: the contract (§1), the crates (§2)
//! and the design.
#![forbid(unsafe_code)]

pub mod broker;
// The vocabulary shared with the engine crates, at the paths authors and the engine used.
/// The core crate, for the engine-facing parts of the API (`CtxParts`: `Lease`, the clocks,
/// `Failpoints`, the store seam `RunStore`).
pub use savepoint_core as core;
pub use savepoint_core::{entropy, failpoints, ids, journal, keys, lease, protocol};
pub mod config;
pub mod embedded;
pub mod metrics;
pub mod security;
pub mod store;
pub mod telemetry;
pub mod workflow;
