//! Savepoint's workflow test kit (ARCHITECTURE §13a): run your workflows in-process on the embedded backend, in virtual
//! time, with crashes injected at any call, and replay recorded histories against your code.
//!
//! What Temporal's test environment (time skipping) and Replayer give their users:
//! - [`TestEnv`] runs the real worker (the same claim, replay, journal, intent and lease code
//!   as production) on a fresh embedded store and queue. Under a paused tokio clock
//!   (`#[tokio::test(start_paused = true)]`) a `ctx.sleep(1 day)` completes at once: the kit
//!   rings what is due and lets time jump to the next due time, so timers fire in order.
//! - [`Stubs`] replace step and effect functions by name and count every live call.
//! - [`TestEnv::crash_at`] kills the worker (as `kill -9`) at a failpoint's N-th hit; the kit
//!   restarts a clean worker, which takes the run over after its lease expires (in virtual
//!   time). [`CrashMatrix`] ([`crash_matrix`]) does it at every call in turn, answering the
//!   run's interrupts and signals from scripted [`Answers`] so the calls after a person's
//!   answer are covered too.
//! - Your workflows' resources (a stand-in provider, a counter) reach them through the
//!   registry closure, which gets a [`Setup`] as a worker binary's `main_with` closure does.
//! - [`replay_export`] replays a history exported with `savepoint export` against the current
//!   code and reports the first divergence with its index and both calls: the check to run in
//!   CI before a deploy.
//!
//! ```ignore
//! #[tokio::test(start_paused = true)]
//! async fn invoice_posts_once_whatever_crashes() {
//!     let ledger = TestLedger::default();             // your stand-in for the provider
//!     let mut env = TestEnv::new(|_setup| my_registry(ledger.clone())).await.unwrap();
//!     let run = env.start::<Invoice>(&InvoiceIn { invoice_id: "INV-1".into(), pdf_path: None }).await.unwrap();
//!     let done = env.settle(&run).await.unwrap();
//!     assert_eq!(done.header.status, RunStatus::Completed);
//!     assert_eq!(env.stubs().calls("ledger.post"), 1);
//!     assert_eq!(ledger.posted("ledger:INV-1"), 1);
//! }
//! ```
#![forbid(unsafe_code)]

mod answers;
mod env;
mod matrix;

use serde::de::DeserializeOwned;
use serde_json::Value;
use std::time::Duration;

use savepoint::workflow::{Registry, Workflow};
use savepoint_broker::BrokerError;
use savepoint_core::ids::ThreadId;
use savepoint_core::journal::Entry;
use savepoint_runtime::config::{Config, ConfigError};
use savepoint_store::{RunHeader, ScriptStore, StoreError};

pub use answers::Answers;
pub use env::TestEnv;
pub use matrix::{crash_matrix, CrashCase, CrashMatrix};
pub use savepoint::workflow::Stubs;
/// A run's status, as [`Settled::header`](RunHeader) carries it.
pub use savepoint_store::RunStatus;
pub use savepoint_worker::replay::ReplayReport;
pub use savepoint_worker::replay_check::{replay_check, CheckOptions, CheckReport, Finding, Verdict};
/// What the registry closures of [`TestEnv::new`] and [`CrashMatrix`] get: the same type a
/// worker binary's `savepoint_worker::main_with` closure gets.
pub use savepoint_worker::Setup;

use env::instance_name;

/// The failpoints at the calls of a workflow, in the order a call passes them.
pub const CALL_POINTS: &[&str] = &[
    "step.before_commit",
    "step.after_commit",
    "effect.after_intent",
    "effect.after_call",
    "effect.after_done",
];

/// Virtual time after which [`TestEnv::settle`] gives up on a run that never settles.
pub(crate) const SETTLE_LIMIT: Duration = Duration::from_secs(400 * 24 * 3600);

/// What went wrong in the kit (not in the workflow: a workflow failure is a run outcome).
#[derive(Debug, thiserror::Error)]
pub enum TestError {
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The queue refused or failed.
    #[error(transparent)]
    Broker(#[from] BrokerError),
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The worker stopped with an error.
    #[error("the worker stopped: {0}")]
    Worker(String),
    /// The workflow is not registered.
    #[error("workflow {0:?} is not registered")]
    UnknownWorkflow(String),
    /// The run was not created (the thread id is used by another run).
    #[error("run {0} was not created: {1}")]
    NotCreated(String, String),
    /// The run does not exist.
    #[error("run {0} not found")]
    Missing(String),
    /// The run did not settle in the allowed (virtual) time.
    #[error("run {thread} did not settle within {limit:?} of virtual time (status {status})")]
    Stuck {
        /// The run.
        thread: String,
        /// Its status then.
        status: String,
        /// The time allowed.
        limit: Duration,
    },
    /// A resume or signal was not delivered.
    #[error("{0}")]
    NotDelivered(String),
    /// A bad failpoint spec.
    #[error("bad failpoint spec: {0}")]
    Failpoint(String),
    /// A typed input that does not encode as JSON ([`TestEnv::start`]).
    #[error("the input does not encode as JSON: {0}")]
    Input(String),
    /// The run did not complete, or its output is not the type asked for
    /// ([`Settled::output_as`]).
    #[error("{0}")]
    Output(String),
    /// An exported history that does not read back (`replay_export`).
    #[error("{0}")]
    Export(#[from] savepoint_worker::replay::ExportError),
}

/// A run as the kit saw it when it settled.
#[derive(Debug, Clone)]
pub struct Settled {
    /// The run's header (status, output, error, reason, what it waits for).
    pub header: RunHeader,
    /// Its journal.
    pub journal: Vec<Entry>,
    /// When it waits for a child run that stopped short of an end (blocked, or waiting for an
    /// answer or signal of its own): that child, settled. The kit drives a child as it drives
    /// the run (its timers, takeovers after a crash); only what needs someone stops it.
    pub child: Option<Box<Settled>>,
}

impl Settled {
    /// The run's output, when it completed.
    pub fn output(&self) -> Option<&Value> {
        self.header.output.as_ref()
    }

    /// The output as `W` returns it (`done.output_as::<Invoice>()?`); an error if the run did
    /// not complete or the output is not `W::Output`.
    pub fn output_as<W>(&self) -> Result<W::Output, TestError>
    where
        W: Workflow,
        W::Output: DeserializeOwned,
    {
        let out = self
            .output()
            .ok_or_else(|| TestError::Output(format!("the run is {}, not completed: no output", self.header.status)))?;
        serde_json::from_value(out.clone())
            .map_err(|e| TestError::Output(format!("the output is not {}'s: {e}", W::NAME)))
    }
}

/// Replays a history exported with `savepoint export` (or `GET /v1/runs/{id}/export`)
/// against the registered code, in replay-only mode: nothing runs or is written. A
/// [`ReplayReport::Diverged`] names the index and both calls.
pub async fn replay_export(registry: &Registry, export: &Value) -> Result<ReplayReport, TestError> {
    let workflow = export["workflow"]
        .as_str()
        .ok_or(TestError::Export(savepoint_worker::replay::ExportError::NoWorkflow))?;
    let journal = savepoint_worker::replay::journal_from_export(export)?;
    let url = format!("{}{}", savepoint_core::mem::SCHEME, instance_name());
    let cfg = Config {
        redis_url: url.clone(),
        amqp_url: url,
        ..Config::default()
    };
    let store = ScriptStore::connect(&cfg.redis_url, cfg.keys(), cfg.store()).await?;
    // Replayed as the recorded thread id: keys derived from it (e.g. `email:<thread>`) match.
    let thread = match export["thread_id"].as_str().map(|t| ThreadId::new(t.to_owned())) {
        Some(Ok(t)) => t,
        _ => ThreadId::new(savepoint_worker::replay::REPLAY_THREAD)
            .map_err(|e| TestError::NotDelivered(e.to_string()))?,
    };
    // (An export from a run whose input was stamped with its type's version carries it.)
    let input_version = export["input_version"].as_u64().and_then(|v| u32::try_from(v).ok());
    let run = savepoint_worker::replay::RunToReplay {
        thread: &thread,
        version: 0,
        workflow,
        input: export["input"].clone(),
        input_version,
        journal,
    };
    let (report, _) = savepoint_worker::replay::replay_counted(&store, registry, run).await;
    forget_instance(&cfg.redis_url);
    Ok(report)
}

/// Forgets the embedded instance a test's store URL names: its store engine and its queues.
fn forget_instance(url: &str) {
    let name = savepoint_core::mem::instance_name(url).unwrap_or_default();
    savepoint_store::mem::forget(name);
    savepoint_broker::mem::forget(name);
}
