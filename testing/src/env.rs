//! [`TestEnv`]: an embedded store and queue, one in-process worker, and the driver that rings
//! due runs and moves virtual time.

use serde::Serialize;
use serde_json::Value;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use savepoint::workflow::{Registry, Stubs, Workflow};
use savepoint_broker::Broker;
use savepoint_core::failpoints::Failpoints;
use savepoint_core::ids::ThreadId;
use savepoint_core::protocol::{Task, TaskReason};
use savepoint_runtime::config::Config;
use savepoint_store::{CreateOutcome, RunHeader, RunStatus, ScriptStore, SignalOutcome};
use savepoint_worker::{Setup, WorkerError, WorkerOptions};

use crate::{forget_instance, Settled, TestError, SETTLE_LIMIT};

/// The most virtual time one [`TestEnv::advance`] lets pass (a century): more would overflow
/// the clock, and no timer is that long.
const LONGEST_ADVANCE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

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
    /// Virtual time [`TestEnv::advance`] asked for that has not passed yet: the next call
    /// that drives the run lets it pass first.
    pending: Duration,
    crashes: Arc<AtomicU32>,
    restarts: u32,
}

pub(crate) fn instance_name() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("testkit-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

impl TestEnv {
    /// An environment serving the registry `make` builds, with the worker started. `make`
    /// gets the environment's [`Setup`], the same type a worker binary's
    /// `savepoint_worker::main_with` closure gets (its configuration is the kit's), and hands
    /// your workflows their resources: a stand-in provider, a counter, a fake client, built in
    /// the closure or captured by it (`TestEnv::new(|_| registry(shop.clone()))`). They live
    /// as long as the environment, across the worker restarts a crash causes.
    pub async fn new(make: impl FnOnce(&Setup) -> Registry) -> Result<Self, TestError> {
        Self::with_config(make, |_| {}).await
    }

    /// [`TestEnv::new`] with configuration changes (lease, retention, budgets, …), made before
    /// `make` runs (it sees them).
    pub async fn with_config(
        make: impl FnOnce(&Setup) -> Registry,
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
        let registry = make(&Setup::new(cfg.clone(), store.clone()));
        let mut env = Self {
            cfg,
            store,
            broker,
            registry,
            stubs: Stubs::new(),
            worker: None,
            armed: None,
            pending: Duration::ZERO,
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

    /// The engine's store (Savepoint's own tests read the demo effects log through it). Its
    /// type and keys are the engine's: read a run through [`TestEnv::settle`] instead.
    #[doc(hidden)]
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
            wrap_store: None,
        };
        let stop = CancellationToken::new();
        let (cfg, s) = (self.cfg.clone(), stop.clone());
        let join = tokio::spawn(async move { savepoint_worker::run_with(cfg, opts, s).await });
        self.worker = Some(Running { stop, crash, join });
        Ok(())
    }

    /// Arms a crash: from the next call that drives a run (`start`, `resume`, `signal`,
    /// `settle`), the worker is one that crashes (as `kill -9`: nothing settled,
    /// nothing released) when the failpoint spec fires, e.g. `effect.after_call=abort@1`.
    /// After the crash the kit starts a clean worker, which takes the run over once its lease
    /// expires. Not `async`: there is nothing to forget to await. A spec that does not parse
    /// is refused here.
    pub fn crash_at(&mut self, spec: &str) -> Result<(), TestError> {
        Failpoints::parse(spec).map_err(|e| TestError::Failpoint(e.to_string()))?;
        self.armed = Some(spec.to_owned());
        Ok(())
    }

    /// Deploys another build: stops the worker (gracefully, as a rolling deploy does) and
    /// starts one serving the registry `make` builds, on the same store and queue, so the runs
    /// the old code left waiting, sleeping or pending resume under the new code. For testing a
    /// change against runs in flight: a renamed step, a migration of a recorded value
    /// (`Versioned`), a new workflow version.
    pub async fn deploy(&mut self, make: impl FnOnce(&Setup) -> Registry) -> Result<(), TestError> {
        self.stop_worker().await;
        self.registry = make(&Setup::new(self.cfg.clone(), self.store.clone()));
        self.start_worker(None)
    }

    async fn stop_worker(&mut self) {
        if let Some(w) = self.worker.take() {
            w.stop.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(30), w.join).await;
        }
    }

    /// What every call that drives a run does first: sets off an armed crash (the worker is
    /// replaced), keeps the worker up, and lets the virtual time [`TestEnv::advance`] asked
    /// for pass.
    async fn drive(&mut self) -> Result<(), TestError> {
        self.keep_worker().await?;
        let by = std::mem::take(&mut self.pending);
        if !by.is_zero() {
            self.pass(by).await?;
        }
        Ok(())
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
        self.drive().await?;
        let entry = self
            .registry
            .catalog()
            .into_iter()
            .find(|c| c.name == workflow)
            .ok_or_else(|| TestError::UnknownWorkflow(workflow.to_owned()))?;
        // As the API does: the input is stamped with the version of its type the serving code
        // declares.
        let opts = savepoint_store::CreateOptions {
            input_version: entry.input_version,
            input_type: entry.input_type,
            ..Default::default()
        };
        match self
            .store
            .create_with(thread, workflow, entry.version, &input.to_string(), "", &opts)
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

    /// Runs a blocked run again from where it stopped (as `savepoint retry`), e.g. after
    /// [`TestEnv::deploy`] brought the fix: a migration it lacked, a code path it needs.
    pub async fn retry(&mut self, thread: &ThreadId) -> Result<(), TestError> {
        self.drive().await?;
        match self.store.retry(thread, "test kit").await? {
            savepoint_store::RetryOutcome::Queued(r) => {
                self.publish(thread, None, TaskReason::Due).await?;
                self.store.mark_queued(&[(thread.clone(), r.rv)]).await?;
                Ok(())
            }
            other => Err(TestError::NotDelivered(format!(
                "run {thread} was not retried: {other:?}"
            ))),
        }
    }

    async fn deliver(&mut self, thread: &ThreadId, kind: &str, name: &str, value: Value) -> Result<(), TestError> {
        self.drive().await?;
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
        self.drive().await?;
        let started = tokio::time::Instant::now();
        loop {
            self.keep_worker().await?;
            let (header, journal) = self
                .store
                .get(thread)
                .await?
                .ok_or_else(|| TestError::Missing(thread.to_string()))?;
            if let Some(child) = waited_child(&header) {
                // A child needs no outside answer: drive it to its end (the parent, told, goes
                // on) unless it stops for someone.
                let c = Box::pin(self.settle(&child)).await?;
                if !c.header.status.is_final() {
                    return Ok(Settled {
                        header,
                        journal,
                        child: Some(Box::new(c)),
                    });
                }
            } else if header.status.is_final() || matches!(header.status, RunStatus::Blocked | RunStatus::Waiting) {
                return Ok(Settled {
                    header,
                    journal,
                    child: None,
                });
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

    /// Lets `by` of virtual time pass, with the worker and the due scanner running: timers,
    /// wait deadlines and back-offs that fall due meanwhile fire in order.
    ///
    /// Not `async`, so there is nothing to forget to await (as with [`TestEnv::crash_at`]):
    /// it arms the time, which the next call that drives a run (`start`, `resume`, `signal`,
    /// `settle`) lets pass before anything else (at most a century). `env.advance(h); env.resume(&run, v)` answers
    /// an hour late; `env.advance(d); env.settle(&run)` sees what `d` did. Calls add up.
    /// Reads that do not drive a run (`stubs()`, `crashes()`) see the time before it.
    pub fn advance(&mut self, by: Duration) {
        self.pending = self.pending.saturating_add(by);
    }

    /// Virtual time [`TestEnv::advance`] armed that has not passed yet.
    pub fn pending_advance(&self) -> Duration {
        self.pending
    }

    /// Lets `by` of virtual time pass with the worker and the due scanner running.
    async fn pass(&mut self, by: Duration) -> Result<(), TestError> {
        let until = tokio::time::Instant::now() + by.min(LONGEST_ADVANCE);
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

/// The child run a waiting run waits for, if it waits for one.
fn waited_child(h: &RunHeader) -> Option<ThreadId> {
    let w = h
        .wait
        .as_ref()
        .filter(|w| w.kind == "child" && h.status == RunStatus::Waiting)?;
    ThreadId::new(w.payload["thread_id"].as_str()?.to_owned()).ok()
}
