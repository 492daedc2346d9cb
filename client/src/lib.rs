//! A client of the Savepoint scheduler's HTTP API (ARCHITECTURE §2): [`ApiClient`], one call
//! per endpoint with typed errors (the `savepoint` CLI is built on it), and [`Client`], which
//! starts a workflow by its Rust type and returns its typed output; [`model`], the API's
//! request and response bodies (with the feature `openapi`, the types the scheduler's
//! OpenAPI document is generated from). reqwest and serde, and the SDK for the `Workflow`
//! trait: no store, broker or server.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod api;
pub mod fmt;
pub mod model;
mod typed;

pub use api::{ApiClient, ClientError, DEFAULT_API};
pub use typed::{Client, Run};
