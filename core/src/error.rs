//! The store's errors as plain data: no client library's type, so a result holding one can
//! be cloned, kept and matched by every crate (ARCHITECTURE §5).

/// Errors of the store. Plain data (no client library's type), so a result that holds one can
/// be cloned and kept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Redis could not be reached or answered with an error. Classified when it was read
    /// (the store's `redis_error`), so the contract carries no Redis type.
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
    /// The store URL asks for something this build leaves out (the embedded engine without
    /// the store's `embedded` feature). Not transient: retrying cannot help.
    #[error("{0}")]
    Unsupported(String),
    /// A setting points at the wrong kind of server or carries the wrong credentials: a
    /// one-line diagnosis naming the setting and what to do (a plain URL at a Redis Cluster
    /// node, a password missing or refused, a plain URL at a TLS port). Not transient.
    #[error("{0}")]
    Misconfigured(String),
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
