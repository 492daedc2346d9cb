//! RabbitMQ transport: topology, confirmed publishing and self-healing consumers.
//!
//! Layout per namespace `ns` and queue `q`:
//! - `ns.tasks` (direct exchange) → `ns.q.q` (quorum queue, routing key `q`,
//!   `x-delivery-limit`, dead-lettering to `ns.dlx`);
//! - `ns.dlx` (fanout exchange) → `ns.dlq` (quorum queue);
//! - `ns.s.q.<worker>` (classic queue, routing key its name): a worker process's sticky queue
//!   of `q`, whose messages go on to `ns.q.q` when not taken within their TTL.
//!
//! [`Broker`] publishes on one shared confirm-mode channel (pipelined confirms) and repairs
//! it on failure; each [`Consumer`] owns its connection and reconnects forever until shut down.
//! With `amqp_url = "mem://NAME"` both run on the embedded queue instead (see `backend.rs`).
#![forbid(unsafe_code)]

mod amqp;
mod backend;
mod consumer;
mod delivery;
mod error;
#[cfg(feature = "mem")]
pub mod mem;
mod mismatch;
mod publisher;
mod queues;
mod renew;
pub mod tls;
mod topology;

#[cfg(test)]
mod tests;

pub use backend::{Broker, Consumer};
pub use consumer::SHUTDOWN_GRACE;
pub use delivery::Delivery;
pub use error::BrokerError;
pub use mismatch::{QueueMismatch, QUEUE_EXPIRES_SETTING};
pub use queues::{valid_queue, InvalidQueue, Queues};
pub use renew::RENEWALS_HEADER;
pub use topology::{Sticky, Topology, STICKY_AT_HEADER, STICKY_PREFETCH};

use std::time::Duration;

/// Connection and topology settings of a [`Broker`] and its consumers.
#[derive(Clone, Debug)]
pub struct BrokerConfig {
    /// AMQP URL, e.g. `amqp://guest:guest@127.0.0.1:5672/%2f`.
    pub amqp_url: String,
    /// Names of the exchanges and queues to use.
    pub topology: Topology,
    /// `basic_qos` prefetch count per consumer channel (0 = unlimited).
    pub prefetch: u16,
    /// `x-delivery-limit` of the task queue (e.g. 20).
    pub delivery_limit: u32,
    /// First reconnect backoff delay (e.g. 100ms).
    pub reconnect_min: Duration,
    /// Reconnect backoff cap (e.g. 5s).
    pub reconnect_max: Duration,
    /// CA and client certificate for `amqps://` (empty: the system's roots, no client cert).
    pub tls: savepoint_core::tls::TlsMaterial,
}
