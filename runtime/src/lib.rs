//! Savepoint's process runtime (ARCHITECTURE §2): what every engine process (worker, scheduler,
//! CLI) shares around the engine: configuration from file and environment, validated at start
//! into typed errors; logs and traces (OTLP); the ops endpoints (`/metrics`, `/healthz`,
//! `/readyz`); security settings (API tokens, payload keys, TLS files); shutdown on SIGTERM
//! and SIGINT.
#![forbid(unsafe_code)]

pub mod config;
pub mod ops;
pub mod security;
pub mod shutdown;
pub mod telemetry;
