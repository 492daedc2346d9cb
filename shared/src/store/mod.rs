//! The checkpoint store: run headers, journals, due times, effect records (ARCHITECTURE §5).
//!
//! The data model lives here as plain types. [`ScriptStore`] is the store: every state change
//! is one Lua script that validates before it writes, and every script and read runs on an
//! engine (see `engine.rs`): a Redis server, or the embedded engine ([`crate::embedded`]) that
//! runs the same scripts in-process. Open one with [`ScriptStore::connect`]: a `redis://` or
//! `rediss://` URL selects Redis, `redis+cluster://host:port,…` a Redis Cluster (see
//! [`cluster`]), `mem://NAME` the embedded instance `NAME`.

pub mod cluster;
mod engine;
pub mod model;
mod script;

pub use self::script::{
    child_signal, owns_partition, Acquired, Advance, Cancelled, Cascade, CatalogEntry, ChildResult, CreateOutcome,
    EffectDone, EffectRecord, EffectRelease, EffectUnused, Flow, ForkOutcome, ListFilter, PageCursor, Rerun, Resealed,
    RestartOutcome, RetryOutcome, RunEvent, Rung, SchedulePut, ScheduleRecord, ScriptStore, ServedSpec, SignalOutcome,
    StoreConfig, Suspend, Suspended, WorkerInfo, FLOW_PARK, SCHEMA_VERSION,
};
pub use engine::{AckScope, ReplicaAck};
pub use model::{
    needs_field, ChildLink, ClaimOutcome, Claimed, CreateOptions, EffectClaim, Finish, Holder, Lease, ParentCancel,
    ParentLink, RunHeader, RunStatus, Wait, FEATURES,
};
pub(crate) use script::scripts::{prelude_lines, sources as script_sources};

/// Errors of the store. Plain data (no client library's type), so a result that holds one can
/// be cloned and kept.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// Redis could not be reached or answered with an error. Classified when it was read
    /// (`From<redis::RedisError>`), so the contract carries no Redis type.
    #[error("redis: {message}")]
    Backend {
        /// What Redis or the connection said.
        message: String,
        /// Retrying later may succeed: Redis unreachable, a timeout, a dropped connection, a
        /// server still loading, or on a cluster a slot moving or a failover under way. A TLS
        /// handshake refused on a certificate is not: it does not heal by retrying.
        transient: bool,
    },
    /// The caller no longer holds the run's lease: another worker claimed it, or it was
    /// cancelled. Nothing was written.
    #[error("lease lost on run {thread}: status {status}, owner {owner:?}, fence {fence}")]
    Fenced {
        /// The run.
        thread: String,
        /// Its status now.
        status: String,
        /// Its owner now.
        owner: String,
        /// Its fence now.
        fence: String,
    },
    /// The run's version moved (compare-and-swap failed). Nothing was written.
    #[error("version conflict on run {thread}: now at version {version}")]
    Conflict {
        /// The run.
        thread: String,
        /// The current version.
        version: String,
    },
    /// The journal is not where the writer thought it was.
    #[error("journal index mismatch on run {thread}: journal has {steps} entries")]
    Index {
        /// The run.
        thread: String,
        /// Entries in the journal.
        steps: u32,
    },
    /// The run does not exist (never created, or expired).
    #[error("run {0} not found")]
    Missing(String),
    /// A script answered something this build does not understand.
    #[error("unexpected store reply: {0}")]
    Reply(String),
    /// A stored record could not be read.
    #[error("corrupt record: {0}")]
    Corrupt(String),
    /// A sealed payload could not be opened: its key is not configured here, or it was
    /// tampered with or moved (README "Security").
    #[error("sealed payload: {0}")]
    Sealed(String),
    /// The namespace was created with another key layout than this process is configured for.
    #[error("{0}")]
    Layout(String),
    /// The store could not be reached (the embedded engine's injected faults): transient.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The embedded engine answered a command or script with an error reply.
    #[error("embedded store: {0}")]
    Embedded(String),
    /// A script was handed keys of two hash slots (a bug of this build: on a Redis Cluster the
    /// script would fail with `CROSSSLOT`). Nothing was sent.
    #[error("script {script} was given keys of two hash slots: {first} and {other}")]
    CrossSlot {
        /// The script.
        script: String,
        /// Its first key.
        first: String,
        /// A key in another slot.
        other: String,
    },
    /// A block on an in-doubt intent was refused: the attempt that holds the intent (the
    /// run's own earlier attempt, fence `fence`, journal index `index`) recorded that it never
    /// called the effect (`effect_unused.lua`). Nothing was written; the caller takes it over.
    #[error("the intent at entry {index} (fence {fence}) was never acted on")]
    UnusedIntent {
        /// The holder's journal index.
        index: u32,
        /// The holder's fence.
        fence: u64,
    },
    /// A write was applied on the master but fewer replicas than required confirmed it in
    /// time (`SAVEPOINT_REDIS_WAIT_REPLICAS`): transient, the caller retries the (idempotent)
    /// write.
    #[error("write confirmed by {acked} of {wanted} replicas within {timeout_ms} ms")]
    NotReplicated {
        /// Replicas required.
        wanted: u32,
        /// Replicas that confirmed.
        acked: u32,
        /// The wait.
        timeout_ms: u64,
    },
}

impl StoreError {
    /// True when retrying later may succeed (Redis unreachable, timeouts, busy scripts, and
    /// on a cluster a slot moving or a failover the client's own retries did not outlast).
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Backend { transient, .. } => *transient,
            StoreError::Unavailable(_) | StoreError::NotReplicated { .. } => true,
            _ => false,
        }
    }

    /// True when the caller lost the run (fenced, version moved, journal moved on).
    pub fn is_lease_lost(&self) -> bool {
        matches!(
            self,
            StoreError::Fenced { .. } | StoreError::Conflict { .. } | StoreError::Index { .. }
        )
    }
}

impl From<::redis::RedisError> for StoreError {
    fn from(e: ::redis::RedisError) -> Self {
        StoreError::Backend {
            transient: !tls_refused(&e) && redis_transient(&e),
            message: e.to_string(),
        }
    }
}

/// Whether retrying `e` later may succeed, by its kind (see [`StoreError::Backend`]).
fn redis_transient(e: &::redis::RedisError) -> bool {
    use ::redis::{ErrorKind, ServerErrorKind};
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::Moved
                    | ServerErrorKind::Ask
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
            )
        )
}

/// True for a TLS handshake that failed on a certificate, ours or the server's: a
/// [`rustls::Error`] anywhere in the error's sources (an I/O error carries it as its inner
/// error) saying the peer's certificate is invalid or the peer sent an alert.
fn tls_refused(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(err) = next {
        let inner = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .map(|i| i as &(dyn std::error::Error + 'static));
        for candidate in [Some(err), inner].into_iter().flatten() {
            if let Some(r) = candidate.downcast_ref::<rustls::Error>() {
                return matches!(
                    r,
                    rustls::Error::InvalidCertificate(_) | rustls::Error::AlertReceived(_)
                );
            }
        }
        next = inner.and_then(|i| i.source()).or_else(|| err.source());
    }
    false
}

/// Runs a store operation until it succeeds, retrying transient errors (Redis unreachable,
/// timeouts, the embedded engine's injected faults) with a back-off of 100 ms doubling to 2 s,
/// until `deadline` has passed (`None`: no deadline) or `stop` is cancelled. Start-up uses it:
/// a store that is away for a moment means waiting, not exiting.
pub async fn until_ok<T, F, Fut>(
    what: &str,
    deadline: Option<std::time::Duration>,
    stop: &tokio_util::sync::CancellationToken,
    mut op: F,
) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let started = tokio::time::Instant::now();
    let mut delay = std::time::Duration::from_millis(100);
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e)
                if e.is_transient()
                    && !stop.is_cancelled()
                    && deadline.is_none_or(|d| started.elapsed() + delay < d) =>
            {
                tracing::warn!(error = %e, ?delay, "{what} failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(2));
            }
            Err(e) => return Err(e),
        }
    }
}
