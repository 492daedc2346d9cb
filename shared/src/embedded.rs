//! The embedded backend: the engine without RabbitMQ or Redis, in one process.
//!
//! - [`MemEngine`] runs the store's very Lua scripts (Lua 5.1, as Redis embeds) over an
//!   in-memory keyspace that implements the Redis commands they send, so the embedded store
//!   has the scripts' semantics by construction, not by a second implementation of each rule.
//! - [`MemQueue`] is the task queue: at-least-once delivery with prefetch, redelivery of
//!   unsettled messages when their consumer goes away, a delivery limit and a dead-letter queue,
//!   as the quorum queue the AMQP backend declares.
//!
//! Both are reached through the ordinary URLs: `mem://NAME` as `redis_url` or `amqp_url`
//! names one process-wide instance (created on first use), so the worker, the scheduler, the
//! API and `savepoint dev --embedded` run on it unchanged. Time is tokio's clock (virtual under
//! a paused runtime, which is what the test kit and the simulator use). Faults can be injected
//! at every operation with [`Faults`].

pub use savepoint_broker::mem::{queue, MemConsumer, MemDelivery, MemQueue, QueueStats};
pub use savepoint_core::mem::{instance_name, Fault, Faults, Op, SCHEME};
pub use savepoint_store::mem::{coverage, engine, install_engine, MemEngine};

/// Forgets the instances named `name`: its store engine and its task queues (their holders
/// keep them alive until dropped).
pub fn forget(name: &str) {
    savepoint_store::mem::forget(name);
    savepoint_broker::mem::forget(name);
}
