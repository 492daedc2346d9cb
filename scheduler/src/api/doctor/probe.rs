//! Asking a worker's health listener whether its process is there, and what an answer proves.

use savepoint_store::WorkerInfo;

use super::PROBE;

/// Prefix of a probe answer that proves the worker gone.
const REFUSED: &str = "refused: ";

/// Why a worker's `/healthz` did not answer that the process is healthy. Shown as the text
/// the doctor and the console print (`refused: …`, `answered 503 Service Unavailable`, or the
/// network's own message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProbeError {
    /// The connection was refused: nothing listens at the address the worker registered.
    Refused(String),
    /// The listener answered, but not with a success status.
    BadStatus(reqwest::StatusCode),
    /// No answer (a timeout, a name or network failure): the network may be to blame.
    Unreachable(String),
}

impl ProbeError {
    /// True when the answer proves the process gone (a refused connection, or a listener
    /// answering that it is not healthy).
    pub(crate) fn proves_gone(&self) -> bool {
        matches!(self, ProbeError::Refused(_) | ProbeError::BadStatus(_))
    }
}

impl std::fmt::Display for ProbeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProbeError::Refused(msg) => write!(f, "{REFUSED}{msg}"),
            ProbeError::BadStatus(status) => write!(f, "answered {status}"),
            ProbeError::Unreachable(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for ProbeError {}

/// The shared HTTP client of the probes, bounded by the doctor's probe timeout.
fn probe_client() -> &'static reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT.get_or_init(|| reqwest::Client::builder().timeout(PROBE).build().unwrap_or_default())
}

/// The innermost cause of a request error (the one that names what went wrong).
fn root_cause(e: &reqwest::Error) -> String {
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        msg = s.to_string();
        src = s.source();
    }
    msg
}

/// A request that got no answer, as a probe error: refused, or unreachable.
fn no_answer(e: &reqwest::Error) -> ProbeError {
    let refused = e.is_connect() && !e.is_timeout();
    let msg = root_cause(e);
    if refused {
        ProbeError::Refused(msg)
    } else {
        ProbeError::Unreachable(msg)
    }
}

/// Asks a worker's health listener whether the process is there.
/// Asks a worker's health listener whether the process is there: `Ok`, or why not. A refused
/// connection (nothing listens at the address the worker registered) is `refused: …`, the
/// one answer that proves the process gone; a timeout may be the network.
pub(crate) async fn healthz(ops: &str) -> Result<(), ProbeError> {
    let r = probe_client()
        .get(format!("{}/healthz", ops.trim_end_matches('/')))
        .send()
        .await
        .map_err(|e| no_answer(&e))?;
    if r.status().is_success() {
        Ok(())
    } else {
        Err(ProbeError::BadStatus(r.status()))
    }
}

/// True when a probe answer proves the process gone (a refused connection, or a listener
/// answering that it is not healthy).
pub(super) fn proves_gone(probe: Option<&Result<(), ProbeError>>) -> bool {
    matches!(probe, Some(Err(e)) if e.proves_gone())
}

/// Whether the scheduler can ask this worker's listener: a loopback address means the same
/// host only (the host name it registered is this one's).
pub(crate) fn probeable(w: &WorkerInfo) -> Option<&str> {
    let ops = w.ops.as_deref()?;
    let loopback = ops.contains("//127.") || ops.contains("//[::1]") || ops.contains("//localhost");
    (!loopback || w.host == savepoint_core::ids::host_name()).then_some(ops)
}
