//! Savepoint control plane: the HTTP API (start, get, history, export, resume, signal, cancel,
//! resolve, list), the console and the doctor, schedules, and the due scanner (ARCHITECTURE
//! §3, §10). The `savepoint` command-line tool is the `savepoint-cli` crate.
//!
//! Scheduler replicas are all active and stateless: they coordinate only through the atomic
//! Redis scripts of [`savepoint_store`], so running several of them never double-publishes a
//! run within one scan period.
//!
//! Entry points: [`run`] (binds `cfg.scheduler.http_addr`) and [`serve`] (a pre-bound
//! listener, used by tests and by `savepoint dev`).
#![forbid(unsafe_code)]

mod api;
#[doc(hidden)]
pub mod assembly;
mod console;
mod http;
mod marker;
pub mod process;
mod publish;
mod scanner;
#[doc(hidden)]
pub mod schema;
mod server;

#[doc(hidden)]
pub use api::fuzzing;
pub use api::openapi_json;
pub use publish::{new_traceparent, reason_name, PublishError, Publisher, Sent, TRACEPARENT};
pub use scanner::{run as run_scanner, tick_alone as scan_tick_alone, ScanSettings};
pub use server::{run, serve, CONNECT_DEADLINE};

use savepoint_broker::BrokerError;
use savepoint_runtime::config::ConfigError;
use savepoint_store::StoreError;

/// Why the scheduler could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    /// The configuration is invalid (including a bad failpoint spec).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Redis could not be reached (within the connect deadline) or refused us.
    #[error("cannot use the checkpoint store: {0}")]
    Store(#[from] StoreError),
    /// RabbitMQ could not be reached (within the connect deadline) or refused us.
    #[error("cannot use the broker: {0}")]
    Broker(#[from] BrokerError),
    /// The HTTP listener failed.
    #[error("HTTP server: {0}")]
    Io(#[from] std::io::Error),
}

impl SchedulerError {
    /// True for errors a setting must fix: bad settings, a namespace created with another
    /// layout, a store or broker URL that points at the wrong kind of server or carries the
    /// wrong credentials. The process exits with code 2.
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            SchedulerError::Config(_)
                | SchedulerError::Store(StoreError::Layout(_) | StoreError::Misconfigured(_))
                | SchedulerError::Broker(BrokerError::Refused(_) | BrokerError::QueueMismatch(_))
        )
    }
}
