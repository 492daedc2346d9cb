//! Savepoint's shared vocabulary (ARCHITECTURE §2): the types every crate of the engine and the
//! SDK speak, and the decisions that are pure functions of them. Nothing here does I/O beyond
//! tokio's clock: the store, the broker and the process runtime build on it; so does the SDK.
#![forbid(unsafe_code)]

pub mod decide;
pub mod entropy;
pub mod error;
pub mod failpoints;
pub mod ids;
pub mod journal;
pub mod keys;
pub mod lease;
pub mod mem;
pub mod metrics;
pub mod model;
pub mod outcome;
pub mod protocol;
pub mod schemas;
pub mod seam;
pub mod secret;
pub mod tls;

pub use error::StoreError;
pub use schemas::Schemas;
