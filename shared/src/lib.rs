//! Savepoint core library: durable workflows checkpointed in Redis and dispatched over
//! RabbitMQ. See `docs/ARCHITECTURE.md` for how it works: the contract (§1), the crates (§2)
//! and the design.
#![forbid(unsafe_code)]

pub mod broker;
pub mod config;
pub mod embedded;
pub mod entropy;
pub mod failpoints;
pub mod ids;
pub mod journal;
pub mod keys;
pub mod lease;
pub mod metrics;
pub mod protocol;
pub mod security;
pub mod store;
pub mod telemetry;
pub mod workflow;
