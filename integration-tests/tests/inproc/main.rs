//! The in-process suites: the store, broker and keyspace contracts, the API, the hazards,
//! the workflow API and the fields of answers and signals, each with the scheduler and
//! workers inside this process.
//!
//! Without the `services` feature (plain `cargo test`) they run on the embedded backend and
//! need no services; the contract halves that need Redis or RabbitMQ, and the keyspace
//! comparison, are left out. With `--features services` they run against the real RabbitMQ
//! and Redis, and `SAVEPOINT_TEST_BACKEND=embedded` moves them back onto the embedded
//! backend (README "Tests").

pub mod answer_fields;
pub mod conformance_broker;
#[cfg(feature = "services")]
pub mod conformance_keyspace;
pub mod conformance_store;
pub mod fleet_api;
pub mod hazards;
pub mod held_journal;
pub mod http_api;
pub mod migrations;
pub mod pause;
pub mod pipeline;
pub mod replay_check;
pub mod waiting;
pub mod workflow_api;
