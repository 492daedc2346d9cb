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
//!   time). [`crash_matrix`] does it at every call in turn.
//! - [`replay_export`] replays a history exported with `savepoint export` against the current
//!   code and reports the first divergence with its index and both calls: the check to run in
//!   CI before a deploy.
//!
//! ```ignore
//! #[tokio::test(start_paused = true)]
//! async fn invoice_posts_once_whatever_crashes() {
//!     let mut env = TestEnv::new(|store| my_registry(store)).await.unwrap();
//!     let run = env.start::<Invoice>(&InvoiceIn { invoice_id: "INV-1".into(), pdf_path: None }).await.unwrap();
//!     let done = env.settle(&run).await.unwrap();
//!     assert_eq!(done.header.status, RunStatus::Completed);
//!     assert_eq!(env.stubs().calls("ledger.post"), 1);
//! }
//! ```
#![forbid(unsafe_code)]

use serde_json::Value;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use savepoint::workflow::{Registry, Workflow};
use savepoint_broker::{Broker, BrokerError};
use savepoint_core::failpoints::Failpoints;
use savepoint_core::ids::ThreadId;
use savepoint_core::journal::Entry;
use savepoint_core::protocol::{Task, TaskReason};
use savepoint_runtime::config::{Config, ConfigError};
use savepoint_store::{CreateOutcome, RunHeader, RunStatus, ScriptStore, SignalOutcome, StoreError};
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use savepoint::workflow::Stubs;
pub use savepoint_worker::replay::ReplayReport;

use savepoint_worker::{WorkerError, WorkerOptions};

/// The failpoints at the calls of a workflow, in the order a call passes them.
pub const CALL_POINTS: &[&str] = &[
    "step.before_commit",
    "step.after_commit",
    "effect.after_intent",
    "effect.after_call",
    "effect.after_done",
];

/// Virtual time after which [`TestEnv::settle`] gives up on a run that never settles.
const SETTLE_LIMIT: Duration = Duration::from_secs(400 * 24 * 3600);

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

struct Running {
    stop: CancellationToken,
    crash: CancellationToken,
    join: JoinHandle<Result<(), WorkerError>>,
}

/// A workflow test environment: an embedded store and queue, one in-process worker serving
/// the registry, and a driver that rings due runs and moves virtual time.
pub struct TestEnv {
    cfg: Config,
    store: ScriptStore,
    broker: Broker,
    registry: Registry,
    stubs: Stubs,
    worker: Option<Running>,
    /// A failpoint spec [`TestEnv::crash_at`] armed: the next call that drives the run
    /// replaces the worker with one that crashes there.
    armed: Option<String>,
    crashes: Arc<AtomicU32>,
    restarts: u32,
}

fn instance_name() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("testkit-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

impl TestEnv {
    /// An environment serving the registry `make` builds (it gets the environment's store,
    /// for workflows that keep a handle on it), with the worker started.
    pub async fn new(make: impl FnOnce(&ScriptStore) -> Registry) -> Result<Self, TestError> {
        Self::with_config(make, |_| {}).await
    }

    /// [`TestEnv::new`] with configuration changes (lease, retention, budgets, …).
    pub async fn with_config(
        make: impl FnOnce(&ScriptStore) -> Registry,
        tune: impl FnOnce(&mut Config),
    ) -> Result<Self, TestError> {
        let url = format!("{}{}", savepoint_core::mem::SCHEME, instance_name());
        let mut cfg = Config {
            amqp_url: url.clone(),
            redis_url: url,
            namespace: "test".into(),
            partitions: 4,
            // A registration refresh is a timer; fewer of them keep long sleeps fast.
            worker_ttl_ms: 3_600_000,
            ..Config::default()
        };
        cfg.worker.name = "test-worker".into();
        tune(&mut cfg);
        cfg.validate()?;
        let store = ScriptStore::connect(&cfg.redis_url, cfg.keys(), cfg.store()).await?;
        let broker = Broker::connect(cfg.broker(), Duration::from_secs(1)).await?;
        let registry = make(&store);
        let mut env = Self {
            cfg,
            store,
            broker,
            registry,
            stubs: Stubs::new(),
            worker: None,
            armed: None,
            crashes: Arc::new(AtomicU32::new(0)),
            restarts: 0,
        };
        env.start_worker(None)?;
        Ok(env)
    }

    /// The stubs and live-call counts the worker uses.
    pub fn stubs(&self) -> &Stubs {
        &self.stubs
    }

    /// The store (read a run, its events, the demo effects log…).
    pub fn store(&self) -> &ScriptStore {
        &self.store
    }

    /// The configuration in use.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// How many times an injected crash killed the worker.
    pub fn crashes(&self) -> u32 {
        self.crashes.load(Ordering::Acquire)
    }

    /// How many times the kit restarted the worker after a crash.
    pub fn restarts(&self) -> u32 {
        self.restarts
    }

    fn start_worker(&mut self, failpoints: Option<&str>) -> Result<(), TestError> {
        let crash = CancellationToken::new();
        let fp = match failpoints {
            Some(spec) => {
                let (c, n) = (crash.clone(), Arc::clone(&self.crashes));
                Some(
                    Failpoints::parse(spec)
                        .map_err(|e| TestError::Failpoint(e.to_string()))?
                        .with_crash_hook(move |_| {
                            n.fetch_add(1, Ordering::AcqRel);
                            c.cancel();
                        }),
                )
            }
            None => Some(Failpoints::default()),
        };
        let opts = WorkerOptions {
            registry: self.registry.clone(),
            failpoints: fp,
            crash: crash.clone(),
            serve_http: false,
            stubs: Some(self.stubs.clone()),
        };
        let stop = CancellationToken::new();
        let (cfg, s) = (self.cfg.clone(), stop.clone());
        let join = tokio::spawn(async move { savepoint_worker::run_with(cfg, opts, s).await });
        self.worker = Some(Running { stop, crash, join });
        Ok(())
    }

    /// Arms a crash: from the next call that drives a run (`start`, `resume`, `signal`,
    /// `settle`, `advance`), the worker is one that crashes (as `kill -9`: nothing settled,
    /// nothing released) when the failpoint spec fires, e.g. `effect.after_call=abort@1`.
    /// After the crash the kit starts a clean worker, which takes the run over once its lease
    /// expires. Not `async`: there is nothing to forget to await. A spec that does not parse
    /// is refused here.
    pub fn crash_at(&mut self, spec: &str) -> Result<(), TestError> {
        Failpoints::parse(spec).map_err(|e| TestError::Failpoint(e.to_string()))?;
        self.armed = Some(spec.to_owned());
        Ok(())
    }

    async fn stop_worker(&mut self) {
        if let Some(w) = self.worker.take() {
            w.stop.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(30), w.join).await;
        }
    }

    /// Starts the crashing worker a [`TestEnv::crash_at`] armed, restarts a crashed worker
    /// (clean), and reports a worker that stopped with an error.
    async fn keep_worker(&mut self) -> Result<(), TestError> {
        if let Some(spec) = self.armed.take() {
            self.stop_worker().await;
            return self.start_worker(Some(&spec));
        }
        let Some(w) = self.worker.as_ref() else {
            return self.start_worker(None);
        };
        if w.crash.is_cancelled() {
            if let Some(w) = self.worker.take() {
                w.join.abort();
                let _ = w.join.await;
            }
            self.restarts += 1;
            return self.start_worker(None);
        }
        if w.join.is_finished() {
            if let Some(w) = self.worker.take() {
                return match w.join.await {
                    Ok(Ok(())) => self.start_worker(None),
                    Ok(Err(e)) => Err(TestError::Worker(e.to_string())),
                    Err(e) => Err(TestError::Worker(format!("panicked: {e}"))),
                };
            }
        }
        Ok(())
    }

    /// Starts a run of `W` with its own input type (thread id generated), as the typed client
    /// does: `env.start::<Invoice>(&InvoiceIn { … })`.
    pub async fn start<W>(&mut self, input: &W::Input) -> Result<ThreadId, TestError>
    where
        W: Workflow,
        W::Input: Serialize,
    {
        let input = serde_json::to_value(input).map_err(|e| TestError::Input(e.to_string()))?;
        self.start_named(W::NAME, input).await
    }

    /// Starts a run of the newest registered version of `workflow` by name, with a JSON input
    /// (thread id generated): for a workflow whose type this code cannot name.
    pub async fn start_named(&mut self, workflow: &str, input: Value) -> Result<ThreadId, TestError> {
        let thread = ThreadId::generate(workflow);
        self.start_as(&thread, workflow, input).await?;
        Ok(thread)
    }

    /// Starts a run with this thread id (idempotent for the same workflow and input).
    pub async fn start_as(&mut self, thread: &ThreadId, workflow: &str, input: Value) -> Result<(), TestError> {
        self.keep_worker().await?;
        let version = self
            .registry
            .catalog()
            .into_iter()
            .find(|c| c.name == workflow)
            .map(|c| c.version)
            .ok_or_else(|| TestError::UnknownWorkflow(workflow.to_owned()))?;
        match self
            .store
            .create(thread, workflow, version, &input.to_string(), "")
            .await?
        {
            CreateOutcome::Created | CreateOutcome::Exists(_) => {}
            CreateOutcome::Conflict(other) => {
                return Err(TestError::NotCreated(thread.to_string(), format!("taken by {other:?}")))
            }
        }
        self.publish(thread, Some(0), TaskReason::Start).await?;
        self.store.confirm_started(std::slice::from_ref(thread)).await?;
        Ok(())
    }

    async fn publish(&self, thread: &ThreadId, step: Option<u32>, reason: TaskReason) -> Result<(), TestError> {
        let task = Task::new(thread.clone(), self.store.keys().partition(thread), step, reason);
        self.broker.publish(&task.encode(), &[]).await?;
        Ok(())
    }

    /// Answers the interrupt the run waits on (as `savepoint resume`).
    pub async fn resume(&mut self, thread: &ThreadId, value: Value) -> Result<(), TestError> {
        self.deliver(thread, "interrupt", "", value).await
    }

    /// Sends signal `name` to the run (as `savepoint signal`); buffered if it is not waiting
    /// for it yet.
    pub async fn signal(&mut self, thread: &ThreadId, name: &str, value: Value) -> Result<(), TestError> {
        self.deliver(thread, "signal", name, value).await
    }

    async fn deliver(&mut self, thread: &ThreadId, kind: &str, name: &str, value: Value) -> Result<(), TestError> {
        self.keep_worker().await?;
        match self.store.signal(thread, kind, name, &value, None).await? {
            SignalOutcome::Woke(_) => self.publish(thread, None, TaskReason::Signal).await,
            SignalOutcome::Buffered | SignalOutcome::Duplicate => Ok(()),
            SignalOutcome::NotWaiting(status, k, n) => Err(TestError::NotDelivered(format!(
                "run {thread} is {status}, not waiting for this {kind} (it waits for {k} {n:?})"
            ))),
            other => Err(TestError::NotDelivered(format!("{other:?}"))),
        }
    }

    /// Hands out every due run (timers, expired leases, safety nets) to the queue, as the
    /// scheduler's scanner does.
    async fn ring_due(&self) -> Result<(), TestError> {
        let period = self.store.config().redeliver;
        for p in 0..self.store.keys().partitions() {
            let (_, rung) = self.store.scan_due(p, 1000, period).await?;
            let mut queued = Vec::new();
            for r in rung {
                self.publish(&r.thread, None, TaskReason::Due).await?;
                queued.push((r.thread, r.rv));
            }
            if !queued.is_empty() {
                self.store.mark_queued(&queued).await?;
            }
        }
        Ok(())
    }

    /// Drives the run until it is completed, failed, cancelled, blocked or waiting (for an
    /// interrupt answer or a signal), moving virtual time from one due time to the next.
    pub async fn settle(&mut self, thread: &ThreadId) -> Result<Settled, TestError> {
        let started = tokio::time::Instant::now();
        loop {
            self.keep_worker().await?;
            let (header, journal) = self
                .store
                .get(thread)
                .await?
                .ok_or_else(|| TestError::Missing(thread.to_string()))?;
            if header.status.is_final() || matches!(header.status, RunStatus::Blocked | RunStatus::Waiting) {
                return Ok(Settled { header, journal });
            }
            if started.elapsed() > SETTLE_LIMIT {
                return Err(TestError::Stuck {
                    thread: thread.to_string(),
                    status: header.status.as_str().to_owned(),
                    limit: SETTLE_LIMIT,
                });
            }
            self.sleep_to_next_due(Duration::MAX).await?;
        }
    }

    /// Rings the due runs, then sleeps to the next due time (at most `cap`); the worker runs
    /// meanwhile. (Paused clock: the jump happens once every task is idle, so nothing the
    /// worker does is skipped.)
    async fn sleep_to_next_due(&mut self, cap: Duration) -> Result<(), TestError> {
        self.ring_due().await?;
        let now = self.store.server_time().await?;
        let next = self.store.next_due().await?.unwrap_or(now + 1000);
        let wait = Duration::from_millis(next.saturating_sub(now).clamp(1, 3_600_000));
        tokio::time::sleep(wait.min(cap)).await;
        Ok(())
    }

    /// Lets `by` of virtual time pass with the worker and the due scanner running: timers,
    /// wait deadlines and back-offs that fall due meanwhile fire in order.
    pub async fn advance(&mut self, by: Duration) -> Result<(), TestError> {
        let until = tokio::time::Instant::now() + by;
        loop {
            self.keep_worker().await?;
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                self.ring_due().await?;
                return Ok(());
            }
            self.sleep_to_next_due(left).await?;
        }
    }

    /// Stops the worker.
    pub async fn shutdown(mut self) {
        self.stop_worker().await;
        forget_instance(&self.cfg.redis_url);
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
    let report =
        savepoint_worker::replay::replay_as(&store, registry, &thread, 0, workflow, export["input"].clone(), journal)
            .await;
    forget_instance(&cfg.redis_url);
    Ok(report)
}

/// One case of a [`crash_matrix`]: where the worker was killed and how the run ended.
#[derive(Debug, Clone)]
pub struct CrashCase {
    /// The failpoint spec, e.g. `effect.after_call=abort@2`.
    pub spec: String,
    /// How the run ended after the restart.
    pub settled: Settled,
}

/// Runs the workflow once per call failpoint ([`CALL_POINTS`]) and hit number, killing the
/// worker there and letting a clean worker resume the run; `check` sees each environment
/// (its stubs' counts, its store) and outcome. Stops at a point once its N-th hit no longer
/// happens. Returns every case run.
pub async fn crash_matrix<C>(
    registry: impl Fn(&ScriptStore) -> Registry,
    workflow: &str,
    input: Value,
    mut check: C,
) -> Result<Vec<CrashCase>, TestError>
where
    C: FnMut(&TestEnv, &CrashCase),
{
    let mut cases = Vec::new();
    for point in CALL_POINTS {
        for n in 1.. {
            let spec = format!("{point}=abort@{n}");
            let mut env = TestEnv::new(&registry).await?;
            env.crash_at(&spec)?;
            let thread = env.start_named(workflow, input.clone()).await?;
            let settled = env.settle(&thread).await?;
            if env.crashes() == 0 {
                env.shutdown().await;
                break;
            }
            let case = CrashCase { spec, settled };
            check(&env, &case);
            cases.push(case);
            env.shutdown().await;
        }
    }
    Ok(cases)
}

/// Forgets the embedded instance a test's store URL names: its store engine and its queues.
fn forget_instance(url: &str) {
    let name = savepoint_core::mem::instance_name(url).unwrap_or_default();
    savepoint_store::mem::forget(name);
    savepoint_broker::mem::forget(name);
}
