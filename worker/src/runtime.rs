//! The consume loop: concurrency, graceful shutdown, in-process crash (for `savepoint dev`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use savepoint::workflow::Registry;
use savepoint_broker::{Broker, BrokerError, Consumer, Delivery, Queues};
use savepoint_core::failpoints::{FailpointParseError, Failpoints};
use savepoint_core::ids::Incarnation;
use savepoint_core::metrics::metrics;
use savepoint_core::outcome::CatalogEntry;
use savepoint_core::seam::RunStore;
use savepoint_runtime::config::Config;
use savepoint_runtime::ops::{ops_router, Readiness};
use savepoint_store::{until_ok, ScriptStore, StoreError};
use savepoint_store::{ServedSpec, WorkerInfo};

use crate::handle::handle_delivery;
use crate::shared::Shared;

/// Why a worker stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// Bad configuration.
    #[error("config: {0}")]
    Config(#[from] savepoint_runtime::config::ConfigError),
    /// Bad failpoint spec.
    #[error(transparent)]
    Failpoints(#[from] FailpointParseError),
    /// Redis unusable at start.
    #[error("redis: {0}")]
    Store(#[from] StoreError),
    /// RabbitMQ unusable at start.
    #[error("rabbitmq: {0}")]
    Broker(#[from] BrokerError),
    /// The registered workflows cannot be served as declared (e.g. two versioned types
    /// under one `Versioned::NAME`).
    #[error("workflows: {0}")]
    Registry(String),
    /// The health/metrics listener failed.
    #[error("http listener {addr}: {source}")]
    Http {
        /// Address.
        addr: String,
        /// Cause.
        source: std::io::Error,
    },
}

impl WorkerError {
    /// True for errors of configuration (bad settings, a namespace created with another
    /// layout, a store URL that points at the wrong kind of server or carries the wrong
    /// password): the process exits with code 2.
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            WorkerError::Config(_)
                | WorkerError::Registry(_)
                | WorkerError::Failpoints(_)
                | WorkerError::Store(StoreError::Layout(_) | StoreError::Misconfigured(_))
                | WorkerError::Broker(BrokerError::Refused(_) | BrokerError::QueueMismatch(_))
        )
    }
}

/// Everything a worker needs besides its config.
#[derive(Clone)]
pub struct WorkerOptions {
    /// Workflows served.
    pub registry: Registry,
    /// Failpoints (parsed from the config unless given).
    pub failpoints: Option<Failpoints>,
    /// Cancelled to simulate `kill -9` in-process: every task is dropped, nothing is acked
    /// or released (used by `savepoint dev` and tests).
    pub crash: CancellationToken,
    /// Serve `/metrics`, `/healthz`, `/readyz` on `cfg.worker.http_addr`.
    pub serve_http: bool,
    /// Test doubles for step and effect functions, and live-call counts (the test kit).
    pub stubs: Option<savepoint::workflow::Stubs>,
    /// Wraps the store the worker's slices write through (the simulator's witnesses).
    pub wrap_store: Option<StoreWrap>,
}

/// A wrapper around the store a worker's slices write through ([`WorkerOptions::wrap_store`]).
pub type StoreWrap = Arc<dyn Fn(Arc<dyn RunStore>) -> Arc<dyn RunStore> + Send + Sync>;

impl WorkerOptions {
    /// Options for a registry with defaults.
    pub fn new(registry: Registry) -> Self {
        Self {
            registry,
            failpoints: None,
            crash: CancellationToken::new(),
            serve_http: true,
            stubs: None,
            wrap_store: None,
        }
    }
}

/// Runs a worker until `shutdown` (graceful: stop consuming, let in-flight slices yield
/// within the grace period, exit).
pub async fn run(cfg: Config, registry: Registry, shutdown: CancellationToken) -> Result<(), WorkerError> {
    run_with(cfg, WorkerOptions::new(registry), shutdown).await
}

async fn connect_store(cfg: &Config, shutdown: &CancellationToken) -> Result<ScriptStore, WorkerError> {
    let store = until_ok("connecting to the store", None, shutdown, || {
        let mut store_cfg = cfg.store();
        store_cfg.sticky = cfg.worker.sticky_in_effect() > 0;
        ScriptStore::connect(&cfg.redis_url, cfg.keys(), store_cfg)
    })
    .await?;
    until_ok("checking the namespace layout", None, shutdown, || store.check_layout()).await?;
    Ok(store)
}

/// The address others reach this worker's health listener at: the bound address, with an
/// unspecified IP (`0.0.0.0`) replaced by `SAVEPOINT_WORKER_ADVERTISE_HOST` (a pod's IP from
/// the downward API), else the host name.
fn advertised(bound: std::net::SocketAddr) -> String {
    let host = if bound.ip().is_unspecified() {
        std::env::var("SAVEPOINT_WORKER_ADVERTISE_HOST")
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| savepoint_core::ids::host_name().to_owned())
    } else {
        bound.ip().to_string()
    };
    match host.parse::<std::net::Ipv6Addr>() {
        Ok(_) => format!("http://[{host}]:{}", bound.port()),
        Err(_) => format!("http://{host}:{}", bound.port()),
    }
}

/// The recent rate of slices a worker starts: a moving mean over its registration refreshes
/// (half the weight on the last interval), so a burst or a stall shows within a few of them.
struct SlicePace {
    last: u64,
    at: tokio::time::Instant,
    rate: f64,
}

impl SlicePace {
    fn new(slices: u64) -> Self {
        Self {
            last: slices,
            at: tokio::time::Instant::now(),
            rate: 0.0,
        }
    }

    /// The rate after `slices` started in all, now.
    fn next(&mut self, slices: u64) -> f64 {
        let now = tokio::time::Instant::now();
        let secs = now.duration_since(self.at).as_secs_f64();
        if secs > 0.0 {
            let recent = slices.saturating_sub(self.last) as f64 / secs;
            self.rate = (self.rate + recent) / 2.0;
        }
        (self.last, self.at) = (slices, now);
        self.rate
    }
}

/// Refreshes the worker's registration every third of its TTL until aborted (or crashed),
/// so the catalog lists only live workers, and this worker's view of the fleet with it.
async fn keep_registered(shared: Arc<Shared>, info: WorkerInfo, ttl: Duration, crash: CancellationToken) {
    let store = &shared.store;
    let mut tick = tokio::time::interval(ttl / 3);
    // After a stop (SIGSTOP, a suspended VM) one registration, not one per tick missed.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut pace = SlicePace::new(shared.slices.load(Ordering::Relaxed));
    loop {
        tokio::select! {
            biased;
            _ = crash.cancelled() => return,
            _ = tick.tick() => {}
        }
        let slices = shared.slices.load(Ordering::Relaxed);
        let info = WorkerInfo {
            in_flight: shared.in_flight.load(Ordering::Relaxed),
            steps: shared.steps.load(Ordering::Relaxed),
            slices,
            slices_per_sec: pace.next(slices),
            ..info.clone()
        };
        if let Err(e) = store.register_worker(&info, ttl).await {
            tracing::warn!(error = %e, "refreshing the worker registration failed; retrying");
        }
        if let Ok(live) = store.live_workers().await {
            *shared.fleet.write().unwrap_or_else(|p| p.into_inner()) = live;
        }
    }
}

/// [`run`] with explicit options.
pub async fn run_with(cfg: Config, opts: WorkerOptions, shutdown: CancellationToken) -> Result<(), WorkerError> {
    cfg.validate()?;
    if let Some(why) = opts.registry.problem() {
        return Err(WorkerError::Registry(why));
    }
    let failpoints = match opts.failpoints.clone() {
        Some(f) => f,
        None => Failpoints::parse(&cfg.failpoints)?,
    };
    // In a real process `abort` kills the process; in-process workers (`savepoint dev`,
    // tests) pass failpoints with a crash hook that cancels `opts.crash`.
    let crash = opts.crash.clone();
    let ready = Readiness::default();
    let ops = if opts.serve_http && !cfg.worker.http_addr.is_empty() {
        serve_ops(cfg.worker.http_addr.clone(), &ready, &shutdown).await?
    } else {
        None
    };
    let (shared, info) = start(&cfg, &opts, failpoints, ops, &shutdown).await?;
    let registration = tokio::spawn(keep_registered(
        shared.clone(),
        info,
        cfg.store().worker_ttl,
        crash.clone(),
    ));
    let consume_stop = CancellationToken::new();
    let mut consumers = start_consumers(&shared, &consume_stop).await?;
    wake_unserved(&shared).await;
    ready.set(true);
    let mut tasks = consume(&shared, &mut consumers, cfg.worker.concurrency, &shutdown, &crash).await;
    ready.set(false);
    metrics().reconnects.set(shared.broker.reconnects() as i64);
    if crash.is_cancelled() {
        tracing::warn!(worker.id = %shared.incarnation, "worker crashed (simulated kill -9): dropping everything");
        tasks.abort_all();
        registration.abort();
        drop(consumers);
        return Ok(());
    }
    let grace = Duration::from_millis(cfg.worker.shutdown_grace_ms);
    shut_down(&shared, tasks, consumers, &consume_stop, grace).await;
    registration.abort();
    if let Err(e) = shared.store.deregister_worker(shared.incarnation.as_str()).await {
        tracing::debug!(error = %e, "deregistering failed; the registration expires on its own");
    }
    tracing::info!("worker stopped");
    Ok(())
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `addr` until shutdown; returns the address
/// others reach the listener at.
async fn serve_ops(
    addr: String,
    ready: &Readiness,
    shutdown: &CancellationToken,
) -> Result<Option<String>, WorkerError> {
    let listener = bind_ops(addr).await?;
    tracing::info!(addr = ?listener.local_addr().ok(), "health and metrics listener");
    let ops = listener.local_addr().ok().map(advertised);
    let app = ops_router(ready.clone());
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
    });
    Ok(ops)
}

/// Binds the health listener to `addr`, or to a free port of its host when `addr` is in use.
async fn bind_ops(addr: String) -> Result<tokio::net::TcpListener, WorkerError> {
    match tokio::net::TcpListener::bind(&addr).await {
        Ok(l) => Ok(l),
        // Several workers on one host (local dev): take a free port rather than fail.
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            let host = addr.rsplit_once(':').map(|(h, _)| h).unwrap_or("127.0.0.1");
            let fallback = format!("{host}:0");
            let l = tokio::net::TcpListener::bind(&fallback)
                .await
                .map_err(|source| WorkerError::Http { addr: fallback, source })?;
            tracing::warn!(wanted = %addr, got = ?l.local_addr().ok(), "health/metrics address in use; using a free port");
            Ok(l)
        }
        Err(source) => Err(WorkerError::Http { addr, source }),
    }
}

/// Connects to Redis and RabbitMQ, publishes the workflows' schemas, registers the worker and
/// builds what its slices share; returns that and the worker's registration.
async fn start(
    cfg: &Config,
    opts: &WorkerOptions,
    failpoints: Failpoints,
    ops: Option<String>,
    shutdown: &CancellationToken,
) -> Result<(Arc<Shared>, WorkerInfo), WorkerError> {
    let store = connect_store(cfg, shutdown).await?;
    let broker = Broker::connect(cfg.broker(), Duration::from_secs(60)).await?;
    let queues = Queues::new(cfg.broker(), broker.clone());
    let served_queues = cfg.worker_queues();
    let incarnation = Incarnation::new(&cfg.worker.name);
    let catalog = opts.registry.catalog();
    let mut info = worker_info(cfg, &incarnation, catalog.clone(), &served_queues, ops);
    info.build = build_of(cfg, &opts.registry);
    register(&store, &opts.registry, &info, cfg, shutdown).await?;
    let fleet = store.live_workers().await.unwrap_or_default();
    tracing::info!(worker.id = %incarnation, workflows = ?opts.registry.names(), concurrency = cfg.worker.concurrency, "worker started");
    let child_starter = Arc::new(crate::slice::ChildStarter {
        store: store.clone(),
        queues: queues.clone(),
    });
    let shared = Arc::new(Shared {
        run_store: match &opts.wrap_store {
            Some(wrap) => wrap(Arc::new(store.clone())),
            None => Arc::new(store.clone()),
        },
        store,
        broker,
        queues,
        served_queues: served_queues.clone().into(),
        child_starter,
        registry: opts.registry.clone(),
        failpoints,
        incarnation,
        limits: cfg.limits(),
        slices_stop: CancellationToken::new(),
        served: served_spec(&catalog, &opts.registry, &served_queues),
        value_features: opts.registry.value_features().into(),
        fleet: std::sync::RwLock::new(fleet),
        fleet_read: std::sync::Mutex::new(tokio::time::Instant::now()),
        stubs: opts.stubs.clone(),
        in_flight: Default::default(),
        steps: Default::default(),
        slices: Default::default(),
        journals: crate::journals::Journals::new(cfg.worker.journal_cache_entries, cfg.worker.parked_bodies),
        park: cfg.worker.parked_bodies > 0 && cfg.worker.journal_cache_entries > 0,
        sticky_ms: cfg.worker.sticky_in_effect(),
        hand_back: (cfg.worker.hand_back_ms > 0).then(|| Duration::from_millis(cfg.worker.hand_back_ms)),
        sticky: Default::default(),
    });
    Ok((shared, info))
}

/// What the worker's claims serve: its workflows and versions, its task queues, and the run
/// features it knows: the engine's and every version of the value types its code declares.
fn served_spec(catalog: &[CatalogEntry], registry: &Registry, queues: &[String]) -> ServedSpec {
    let known = known_features(registry);
    let known: Vec<&str> = known.iter().map(String::as_str).collect();
    ServedSpec::new(catalog).knowing(&known).on_queues(queues)
}

/// The run features a worker of `registry` names in its claims: the engine's
/// ([`savepoint_store::FEATURES`]) and its code's value versions. A run that needs another is
/// given back by its claim; `replay-check` reports such runs from the same list.
pub(crate) fn known_features(registry: &Registry) -> Vec<String> {
    savepoint_store::FEATURES
        .iter()
        .map(|f| (*f).to_owned())
        .chain(registry.value_features())
        .collect()
}

/// This build, as its registration says it (`SAVEPOINT_BUILD_ID`, or the digest of what it
/// serves and reads).
fn build_of(cfg: &Config, registry: &Registry) -> savepoint_store::Build {
    let values: Vec<String> = registry
        .value_features()
        .iter()
        .map(|f| f.strip_prefix("value:").unwrap_or(f).to_owned())
        .collect();
    savepoint_store::Build::of(
        env!("CARGO_PKG_VERSION"),
        &registry.catalog(),
        &values,
        &known_features(registry),
        &cfg.worker.build_id,
    )
}

/// The worker's registration as it starts.
fn worker_info(
    cfg: &Config,
    incarnation: &Incarnation,
    workflows: Vec<CatalogEntry>,
    served_queues: &[String],
    ops: Option<String>,
) -> WorkerInfo {
    WorkerInfo {
        id: incarnation.as_str().to_owned(),
        workflows,
        queue: served_queues.join(","),
        until: 0,
        ttl_ms: cfg.store().worker_ttl.as_millis() as u64,
        ops,
        host: savepoint_core::ids::host_name().to_owned(),
        pid: std::process::id(),
        started_at: savepoint_core::journal::now_ms(),
        concurrency: cfg.worker.concurrency as u32,
        in_flight: 0,
        steps: 0,
        slices: 0,
        slices_per_sec: 0.0,
        capabilities: WorkerInfo::all_capabilities(),
        build: Default::default(),
    }
}

/// Publishes the workflows' schemas, then registers the worker (retrying until shutdown).
async fn register(
    store: &ScriptStore,
    registry: &Registry,
    info: &WorkerInfo,
    cfg: &Config,
    shutdown: &CancellationToken,
) -> Result<(), WorkerError> {
    // Schemas first: once the worker is registered, the API may start and answer its runs.
    let schemas = registry.schemas();
    until_ok("publishing the workflows' schemas", None, shutdown, || {
        store.publish_schemas(&schemas)
    })
    .await?;
    until_ok("registering the worker", None, shutdown, || {
        store.register_worker(info, cfg.store().worker_ttl)
    })
    .await?;
    Ok(())
}

/// How long a sticky queue may take to be consumed once its task queue is.
const STICKY_READY: Duration = Duration::from_secs(10);

/// One consumer per task queue served (each its own connection on AMQP), ready, and on AMQP
/// one per sticky queue of this worker's (`worker.sticky_ms` > 0), first: a task there is a
/// run whose journal or body this worker keeps.
async fn start_consumers(shared: &Shared, consume_stop: &CancellationToken) -> Result<Vec<Consumer>, WorkerError> {
    let mut consumers = Vec::new();
    let mut sticky = Vec::new();
    let me = shared.incarnation.as_str();
    for q in shared.served_queues.iter() {
        let b = shared.queues.get(q).await?;
        let mut c = b.consumer(me, consume_stop.clone());
        c.ready().await;
        consumers.push(c);
        let own = (shared.sticky_ms > 0)
            .then(|| b.sticky_consumer(me, shared.sticky_ms, me, consume_stop.clone()))
            .flatten();
        if let Some(mut c) = own {
            // The task queue is reachable: a sticky queue that cannot be declared or consumed
            // in this time is refused (e.g. the broker user may not configure `<ns>.s.*`),
            // and the worker goes on without it.
            if tokio::time::timeout(STICKY_READY, c.ready()).await.is_err() {
                tracing::warn!(
                    queue = %q,
                    "could not declare or consume this worker's sticky queue of it (see the consumer's error \
                     above; the broker user needs configure, write and read on <ns>.s.*); going on without: \
                     resumes replay where the task queue sends them; SAVEPOINT_STICKY_MS=0 stops trying"
                );
                continue;
            }
            consumers.insert(sticky.len(), c);
            sticky.push(q.clone());
        }
    }
    tracing::info!(queues = ?shared.served_queues, sticky = ?sticky, "consuming");
    let _ = shared.sticky.set(sticky);
    Ok(consumers)
}

/// Runs given back while no worker served them are due now: this one, consuming from now
/// on, may serve them.
async fn wake_unserved(shared: &Shared) {
    match shared.store.wake_unserved().await {
        Ok(0) => {}
        Ok(n) => tracing::info!(runs = n, "woke runs that were waiting for a worker"),
        Err(e) => tracing::warn!(error = %e, "waking runs that wait for a worker failed; their back-off applies"),
    }
}

/// Takes deliveries, each handled in a task of its own under a permit of the concurrency
/// limit, until shutdown, a crash, or a consumer's end; returns the tasks still running.
async fn consume(
    shared: &Arc<Shared>,
    consumers: &mut [Consumer],
    concurrency: usize,
    shutdown: &CancellationToken,
    crash: &CancellationToken,
) -> JoinSet<()> {
    let sem = Arc::new(Semaphore::new(concurrency));
    let mut tasks = JoinSet::new();
    let mut turn = 0;
    // Since when a delivery has been ready each time a free slot asked for one: how long
    // this worker has been behind what the broker pushed it (`None`: a slot last had to
    // wait for a delivery, or what was held went back).
    let mut behind: Option<Instant> = None;
    loop {
        while tasks.try_join_next().is_some() {}
        let permit = match sem.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => match wait_for_slot(shared, &sem, consumers, behind, shutdown, crash).await {
                Some((p, handed_back)) => {
                    if handed_back {
                        behind = None;
                    }
                    p
                }
                None => break,
            },
        };
        if shutdown.is_cancelled() || crash.is_cancelled() {
            break;
        }
        let next = next_delivery(consumers, &mut turn);
        tokio::pin!(next);
        // One poll first (the same future is awaited after it, never dropped half way): a
        // delivery ready at once was waiting here for a slot.
        let got = match futures::poll!(next.as_mut()) {
            std::task::Poll::Ready(d) => {
                behind.get_or_insert_with(Instant::now);
                d
            }
            std::task::Poll::Pending => {
                behind = None;
                tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => break,
                    _ = crash.cancelled() => break,
                    d = &mut next => d,
                }
            }
        };
        let Some(delivery) = got else { break };
        metrics().reconnects.set(shared.broker.reconnects() as i64);
        let shared = shared.clone();
        tasks.spawn(async move {
            let _permit = permit;
            handle_delivery(&shared, delivery).await;
        });
    }
    tasks
}

/// Waits for a free slot (`None` on shutdown or a crash; with it, whether what was held went
/// back). The broker pushes deliveries up to the prefetch whether or not a slot is free, and
/// a delivery held here waits for this worker's next free slot, while another worker may have
/// room: once this worker has been `worker.hand_back_ms` behind (`behind`: since when every
/// slot that freed found a delivery waiting, however short each slice; or, when none was
/// waiting, since every slot is busy) and another worker on one of its queues has a free
/// slot, the consumers give back what they hold and take nothing more until a slot frees.
/// (With no room elsewhere, what is held would only go round the queue: it stays, and the
/// question is asked again after the same time.)
async fn wait_for_slot(
    shared: &Shared,
    sem: &Arc<Semaphore>,
    consumers: &mut [Consumer],
    behind: Option<Instant>,
    shutdown: &CancellationToken,
    crash: &CancellationToken,
) -> Option<(tokio::sync::OwnedSemaphorePermit, bool)> {
    let mut handed_back = false;
    let hold = shared.hand_back;
    let mut due = hold.map(|h| behind.unwrap_or_else(Instant::now) + h);
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return None,
            _ = crash.cancelled() => return None,
            p = sem.clone().acquire_owned() => {
                if handed_back {
                    for c in consumers.iter_mut() {
                        c.resume().await;
                    }
                }
                return p.ok().map(|p| (p, handed_back));
            }
            _ = sleep_until_or_never(due), if !handed_back => {
                if !shared.room_elsewhere().await {
                    due = hold.map(|h| Instant::now() + h);
                    continue;
                }
                let mut n = 0;
                for c in consumers.iter_mut() {
                    n += c.hand_back().await;
                }
                if n > 0 {
                    tracing::info!(tasks = n, ?hold, "behind this long with every slot busy: gave back the tasks held here for a worker with room");
                }
                handed_back = true;
            }
        }
    }
}

/// Sleeps until `at`, or forever for `None`.
async fn sleep_until_or_never(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The graceful part of a stop: in-flight slices yield at their next call, the consumers are
/// drained (anything prefetched but not started is requeued), and slices still running after
/// the `grace` period are abandoned.
async fn shut_down(
    shared: &Shared,
    mut tasks: JoinSet<()>,
    consumers: Vec<Consumer>,
    consume_stop: &CancellationToken,
    grace: Duration,
) {
    tracing::info!(worker.id = %shared.incarnation, inflight = tasks.len(), "shutting down: in-flight runs yield at their next call");
    shared.slices_stop.cancel();
    consume_stop.cancel();
    // Drain the consumer: it cancels and anything prefetched but not started is requeued.
    let drain = tokio::spawn(async move {
        for mut consumer in consumers {
            while consumer.next().await.is_some() {}
        }
    });
    let drained = tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!(
            left = tasks.len(),
            "grace period over: abandoning slices (their leases expire and another worker resumes them)"
        );
        tasks.abort_all();
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), drain).await;
}

/// The next delivery from any of the consumers (`None` once one has shut down), taken in
/// turn: the consumer asked first is the one after the last that delivered, so a sticky
/// queue that always has a task (a worker whose own runs keep yielding) cannot keep the task
/// queue's deliveries, prefetched here, waiting behind it. `turn` is where the next call
/// starts.
async fn next_delivery(consumers: &mut [Consumer], turn: &mut usize) -> Option<Delivery> {
    if let [only] = consumers {
        return only.next().await;
    }
    let n = consumers.len();
    let first = *turn % n;
    let (before, from) = consumers.split_at_mut(first);
    let nexts = from.iter_mut().chain(before.iter_mut()).map(|c| Box::pin(c.next()));
    let (got, i, _) = futures::future::select_all(nexts).await;
    *turn = (first + i + 1) % n;
    got
}
