//! The checkpoint store: run headers, journals, due times, effect records (ARCHITECTURE §5).
//!
//! The data model lives here as plain types. [`ScriptStore`] is the store: every state change
//! is one Lua script that validates before it writes, and every script and read runs on an
//! engine (see `engine.rs`): a Redis server, or the embedded engine ([`crate::mem`]) that
//! runs the same scripts in-process. Open one with [`ScriptStore::connect`]: a `redis://` or
//! `rediss://` URL selects Redis, `redis+cluster://host:port,…` a Redis Cluster (see
//! [`cluster`]), `mem://NAME` the embedded instance `NAME` (feature `embedded`).
#![forbid(unsafe_code)]

pub mod cluster;
pub mod codec;
mod diagnose;
mod engine;
#[cfg(feature = "embedded")]
pub mod mem;
mod script;
mod seam;
pub mod tls;

pub use savepoint_core::model;
pub use savepoint_core::StoreError;

pub use self::script::Build;
pub use self::script::{
    child_signal, owns_partition, Acquired, Advance, Cancelled, Cascade, CatalogEntry, ChildResult, CreateOutcome,
    EffectDone, EffectRecord, EffectRelease, EffectUnused, Flow, ForgetOutcome, ForkOutcome, LineFacts, ListFilter,
    OutputVersionOutcome, PageCursor, Pause, PauseRecord, PauseScope, Rerun, Resealed, RestartOutcome, RetryOutcome,
    RunEvent, RunPaused, RunResumed, Rung, SchedulePut, ScheduleRecord, ScriptStore, ServedSpec, SignalOutcome,
    StoreConfig, Suspend, Suspended, Unparked, WorkerInfo, WorkflowCounts, FLOW_PARK, SCHEMA_VERSION,
};
pub use engine::{AckScope, ReplicaAck};
pub use model::{
    needs_field, BlockKind, ChildLink, ClaimOutcome, Claimed, CreateOptions, EffectClaim, Finish, Holder, JournalHeld,
    Lease, OutputVersion, ParentCancel, ParentLink, RetryBackoff, RunHeader, RunStatus, Wait, CAPABILITIES, FEATURES,
};
#[cfg(feature = "embedded")]
pub(crate) use script::scripts::{prelude_lines, sources as script_sources};

/// A Redis error as a [`StoreError::Backend`], classified by its kind (transient or not).
pub(crate) fn redis_error(e: ::redis::RedisError) -> StoreError {
    StoreError::Backend {
        transient: !tls_refused(&e) && redis_transient(&e),
        message: e.to_string(),
    }
}

/// `.store()` on a Redis result: its error as a [`StoreError`] (see [`redis_error`]).
pub(crate) trait RedisResultExt<T> {
    fn store(self) -> Result<T, StoreError>;
}

impl<T> RedisResultExt<T> for Result<T, ::redis::RedisError> {
    fn store(self) -> Result<T, StoreError> {
        self.map_err(redis_error)
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

#[cfg(all(test, not(feature = "embedded")))]
mod without_embedded {
    use super::*;
    use savepoint_core::ids::Namespace;
    use savepoint_core::keys::Keys;

    /// Without the embedded engine, `mem://` is refused at once with an error that is not
    /// transient (`until_ok` would otherwise retry it forever).
    #[tokio::test]
    async fn a_build_without_the_embedded_engine_refuses_mem_urls() {
        let keys = Keys::new(Namespace::new("noembed").expect("namespace"), 16);
        let Err(err) = ScriptStore::connect("mem://x", keys, StoreConfig::default()).await else {
            panic!("mem:// must be refused");
        };
        assert!(matches!(err, StoreError::Unsupported(_)), "{err}");
        assert!(!err.is_transient());
    }
}
