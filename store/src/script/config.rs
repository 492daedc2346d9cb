//! The store's timing and retention settings.

use crate::ReplicaAck;
use std::time::Duration;

/// Timing and retention settings of the store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Lease length; a worker that stops heartbeating loses its runs after this.
    pub lease: Duration,
    /// Extra time after a lease expires before the scanner rings again.
    pub grace: Duration,
    /// Safety margin of a worker's local lease deadline (see [`savepoint_core::lease`]).
    pub lease_margin: Duration,
    /// Redis command (response) timeout: a fraction of the lease.
    pub command_timeout: Duration,
    /// First re-ring delay for a run whose task the broker confirmed (doubles per ring).
    pub queued_redeliver: Duration,
    /// Lifetime of a worker's registration without a heartbeat.
    pub worker_ttl: Duration,
    /// Takeovers at one journal position before a run is blocked as a poison run.
    pub max_crashes: u32,
    /// Safety-net delay: a run made runnable gets a due time this far out in case its task is lost.
    pub redeliver: Duration,
    /// How long finished runs are kept.
    pub retention: Duration,
    /// How long effect dedup records are kept.
    pub effect_ttl: Duration,
    /// Events kept per run (approximate cap of the stream).
    pub event_cap: u32,
    /// Replication acknowledgement of writes (`WAIT`), off when `None`.
    pub replica_ack: Option<ReplicaAck>,
    /// Signals a run may hold before it asks for them.
    pub max_buffered_signals: u32,
    /// How often a parent waiting for a child run looks at it again.
    pub child_poll: Duration,
    /// Seals user payloads before they reach Redis (README "Security"); `None`: plaintext.
    pub codec: Option<crate::codec::PayloadCodec>,
    /// CA and client certificate for `rediss://`.
    pub tls: savepoint_core::tls::TlsMaterial,
    /// A suspend records the suspending worker as the run's holder (`held`), so the scanner and
    /// the API send the run's next task to that worker's sticky queue (a worker with sticky
    /// queues; README `SAVEPOINT_STICKY_MS`).
    pub sticky: bool,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            lease: Duration::from_millis(3000),
            grace: Duration::from_millis(250),
            lease_margin: Duration::from_millis(500),
            command_timeout: Duration::from_millis(1000),
            queued_redeliver: Duration::from_secs(300),
            worker_ttl: Duration::from_secs(10),
            max_crashes: 5,
            redeliver: Duration::from_secs(5),
            retention: Duration::from_secs(7 * 24 * 3600),
            effect_ttl: Duration::from_secs(30 * 24 * 3600),
            event_cap: 1000,
            max_buffered_signals: 1000,
            child_poll: Duration::from_secs(30),
            codec: None,
            tls: Default::default(),
            sticky: false,
            replica_ack: None,
        }
    }
}
