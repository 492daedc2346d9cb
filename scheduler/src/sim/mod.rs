//! Deterministic simulation (`savepoint sim`): the real API, due scanners and workers on the
//! embedded backend, under one seeded random source and simulated time, with faults injected
//! at every store and broker operation, then invariant checks.
//!
//! Each seed runs on its own current-thread tokio runtime with a paused clock: tasks are
//! polled in a fixed order, time only moves when every task waits, and every random draw of
//! the engine ([`savepoint::entropy`]) and of the simulator comes from the seed. So a seed
//! replays the same interleaving and the same trace every time, and a failing seed is a
//! reproducible bug report (`savepoint sim --seed S --verbose`).
//!
//! Faults (during the chaos phase): a store operation fails before it is applied, or is
//! applied and its reply lost, or stalls (up to several leases: a paused worker); a publish
//! fails, is duplicated or is delayed (reordered); a settlement fails; a worker is killed
//! (nothing settled or released) and restarted later; an effect's provider answers late.
//! Two scanner replicas race. Clients retry starts and repeat resumes.
//!
//! Invariants (checked after a heal phase in which faults stop and every worker is back):
//! 1. no effect key is applied twice at the provider (counted outside the engine; block and
//!    reconcile policies); the provider refuses tokens lower than one it has seen;
//! 2. every run exists and ended completed, failed, cancelled or blocked with a reason;
//! 3. every journal only ever grew: an entry once read never changes, fences and versions
//!    never go back (no write of a fenced-out worker landed);
//! 4. every completed run replays against its journal to its recorded output;
//! 5. the store stays within its bounds (event cap, journal cap).

mod workload;

use axum::body::Body;
use axum::http::{Method, Request};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use savepoint::broker::Broker;
use savepoint::config::Config;
use savepoint::embedded::{self, Fault, Faults, MemEngine, Op};
use savepoint::failpoints::Failpoints;
use savepoint::ids::ThreadId;
use savepoint::journal::Entry;
use savepoint::metrics::Readiness;
use savepoint::store::{RunStatus, ScriptStore};
use savepoint_worker::WorkerOptions;

use crate::api::{self, ApiState, Services};
use crate::publish::Publisher;
use crate::scanner::{self, ScanSettings};
use workload::Provider;

/// Options of one simulation.
#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// Number of seeds to run (from `--seed`, or from 1).
    #[arg(long, default_value_t = 100)]
    pub seeds: u64,
    /// First seed (with `--seeds 1`: exactly this seed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Runs started per seed.
    #[arg(long, default_value_t = 6)]
    pub runs: usize,
    /// Workers per seed.
    #[arg(long, default_value_t = 3)]
    pub workers: usize,
    /// Length of the chaos phase (virtual ms).
    #[arg(long, default_value_t = 6000)]
    pub chaos_ms: u64,
    /// Threads running seeds in parallel (default: available cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Print each seed's trace (the timeline of faults and actions).
    #[arg(long)]
    pub verbose: bool,
    /// Checks the checker: the `order` workflow charges inside a plain step (at least once,
    /// no idempotency key), so crashes must show up as double charges.
    #[arg(long, hide = true)]
    pub unguarded: bool,
}

impl SimArgs {
    /// Defaults for `n` seeds from `first`.
    pub fn seeds(first: u64, n: u64) -> Self {
        Self {
            seeds: n,
            seed: Some(first),
            runs: 6,
            workers: 3,
            chaos_ms: 6000,
            jobs: Some(1),
            verbose: false,
            unguarded: false,
        }
    }
}

/// What one seed did.
#[derive(Debug, Clone)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// Hash of the whole trace (equal on every run of the same seed).
    pub trace_hash: u64,
    /// Invariant violations (empty: the seed passed).
    pub violations: Vec<String>,
    /// The trace lines.
    pub trace: Vec<String>,
    /// Counters: faults injected, crashes, runs by end state…
    pub stats: BTreeMap<String, u64>,
}

/// The trace: timestamped lines, hashed as they come.
#[derive(Default)]
struct Trace {
    lines: Mutex<Vec<String>>,
    stats: Mutex<BTreeMap<String, u64>>,
}

impl Trace {
    fn line(&self, at_ms: u64, s: String) {
        if let Ok(mut l) = self.lines.lock() {
            l.push(format!("[{at_ms:>7}ms] {s}"));
        }
    }

    fn count(&self, what: &str) {
        if let Ok(mut s) = self.stats.lock() {
            *s.entry(what.to_owned()).or_default() += 1;
        }
    }
}

/// The fault plan: seeded draws, only while `on`.
struct Plan {
    rng: Mutex<StdRng>,
    on: AtomicBool,
    trace: Arc<Trace>,
    clock: tokio::time::Instant,
    lease_ms: u64,
}

impl Plan {
    fn draw(&self) -> f64 {
        self.rng.lock().map(|mut r| r.random::<f64>()).unwrap_or(1.0)
    }

    fn now(&self) -> u64 {
        self.clock.elapsed().as_millis() as u64
    }
}

impl Faults for Plan {
    fn decide(&self, op: Op<'_>) -> Fault {
        if !self.on.load(Ordering::Acquire) {
            return Fault::Pass;
        }
        let x = self.draw();
        let (fault, what) = match op {
            Op::Script(_) | Op::Command(_) => {
                if x < 0.02 {
                    (Fault::Fail, "store.fail")
                } else if x < 0.04 {
                    (Fault::LoseReply, "store.lost_reply")
                } else if x < 0.05 {
                    let ms = (self.draw() * 3.0 * self.lease_ms as f64) as u64;
                    (Fault::Delay(Duration::from_millis(ms)), "store.stall")
                } else {
                    (Fault::Pass, "")
                }
            }
            Op::Publish => {
                if x < 0.03 {
                    (Fault::Fail, "publish.fail")
                } else if x < 0.06 {
                    (Fault::Duplicate, "publish.duplicate")
                } else if x < 0.09 {
                    let ms = (self.draw() * 2000.0) as u64;
                    (Fault::Delay(Duration::from_millis(ms)), "publish.delay")
                } else {
                    (Fault::Pass, "")
                }
            }
            Op::Settle => {
                if x < 0.03 {
                    (Fault::Fail, "settle.fail")
                } else {
                    (Fault::Pass, "")
                }
            }
        };
        if fault != Fault::Pass {
            self.trace.count(what);
            let name = match op {
                Op::Script(s) | Op::Command(s) => s,
                Op::Publish => "publish",
                Op::Settle => "settle",
            };
            self.trace
                .line(self.now(), format!("fault {what} on {name}: {fault:?}"));
        }
        fault
    }
}

struct SimWorker {
    stop: CancellationToken,
    crash: CancellationToken,
    join: JoinHandle<()>,
    down_until: Option<u64>,
}

/// The world of one seed.
struct World {
    cfg: Config,
    store: ScriptStore,
    router: axum::Router,
    provider: Arc<Provider>,
    trace: Arc<Trace>,
    rng: StdRng,
    stop: CancellationToken,
    workers: Vec<Option<SimWorker>>,
    started: tokio::time::Instant,
    unguarded: bool,
    /// Workers that stopped with an error (each one a violation).
    exits: Arc<Mutex<Vec<String>>>,
    queue: Option<Arc<savepoint::embedded::MemQueue>>,
}

fn sim_name(seed: u64) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("sim-{seed}-{}", N.fetch_add(1, Ordering::Relaxed))
}

impl World {
    fn now(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn start_worker(&mut self, i: usize) {
        let crash = CancellationToken::new();
        let stop = self.stop.child_token();
        let opts = WorkerOptions {
            registry: workload::registry(Arc::clone(&self.provider), self.unguarded),
            failpoints: Some(Failpoints::default()),
            crash: crash.clone(),
            serve_http: false,
            stubs: None,
        };
        let mut cfg = self.cfg.clone();
        cfg.worker.name = format!("w{i}");
        let s = stop.clone();
        let exits = Arc::clone(&self.exits);
        let join = tokio::spawn(async move {
            // A worker never exits on its own: an error here is a crash on a transient fault.
            if let Err(e) = savepoint_worker::run_with(cfg, opts, s).await {
                if let Ok(mut x) = exits.lock() {
                    x.push(format!("worker w{i} exited on its own: {e}"));
                }
            }
        });
        self.workers[i] = Some(SimWorker {
            stop,
            crash,
            join,
            down_until: None,
        });
    }

    /// Kills worker `i` as `kill -9` would: its tasks are dropped mid-await, nothing is
    /// settled or released; its consumer's unsettled deliveries return to the queue.
    fn crash_worker(&mut self, i: usize, down_ms: u64) {
        let now = self.now();
        if let Some(w) = self.workers[i].as_mut() {
            if w.down_until.is_none() {
                w.crash.cancel();
                w.stop.cancel();
                w.join.abort();
                w.down_until = Some(now + down_ms);
                self.trace.count("crash");
                self.trace.line(now, format!("crash w{i} (down {down_ms} ms)"));
            }
        }
    }

    fn restart_due_workers(&mut self, all: bool) {
        let now = self.now();
        for i in 0..self.workers.len() {
            let due = self.workers[i]
                .as_ref()
                .and_then(|w| w.down_until)
                .is_some_and(|t| all || t <= now);
            if due {
                self.trace.line(now, format!("restart w{i}"));
                self.start_worker(i);
            }
        }
    }

    async fn api(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(body.map(|b| Body::from(b.to_string())).unwrap_or_else(Body::empty));
        let Ok(req) = req else {
            return (0, Value::Null);
        };
        match self.router.clone().oneshot(req).await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
                    .await
                    .unwrap_or_default();
                (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
            }
            Err(_) => (0, Value::Null),
        }
    }

    /// A run as the store has it; transient faults are retried (the driver is not under test).
    async fn read(&self, t: &ThreadId) -> Option<(savepoint::store::RunHeader, Vec<Entry>)> {
        let limit = Some(Duration::from_secs(10));
        savepoint::store::until_ok("reading a run", limit, &self.stop, || self.store.get(t))
            .await
            .ok()
            .flatten()
    }
}

/// What the driver remembers of a run between reads (for the growth invariant).
#[derive(Default)]
struct Seen {
    journal: Vec<Vec<u8>>,
    fence: u64,
    version: u64,
}

fn check_growth(
    t: &ThreadId,
    seen: &mut Seen,
    h: &savepoint::store::RunHeader,
    journal: &[Entry],
    bad: &mut Vec<String>,
) {
    let now: Vec<Vec<u8>> = journal.iter().map(|e| e.encode()).collect();
    if now.len() < seen.journal.len() {
        bad.push(format!(
            "run {t}: journal shrank from {} to {} entries",
            seen.journal.len(),
            now.len()
        ));
    }
    for (i, (a, b)) in seen.journal.iter().zip(&now).enumerate() {
        if a != b {
            bad.push(format!("run {t}: journal entry {i} changed after it was written"));
        }
    }
    if h.fence < seen.fence || h.version < seen.version {
        bad.push(format!(
            "run {t}: fence/version went back ({}/{} after {}/{})",
            h.fence, h.version, seen.fence, seen.version
        ));
    }
    seen.journal = now;
    seen.fence = h.fence;
    seen.version = h.version;
}

/// Runs one seed to its report (on this thread).
pub fn run_seed(seed: u64, args: &SimArgs) -> SeedReport {
    savepoint::entropy::seed_thread(seed);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build();
    let report = match rt {
        Ok(rt) => rt.block_on(simulate(seed, args)),
        Err(e) => SeedReport {
            seed,
            trace_hash: 0,
            violations: vec![format!("cannot build a runtime: {e}")],
            trace: vec![],
            stats: BTreeMap::new(),
        },
    };
    savepoint::entropy::unseed_thread();
    report
}

async fn simulate(seed: u64, args: &SimArgs) -> SeedReport {
    let name = sim_name(seed);
    let url = format!("{}{name}", embedded::SCHEME);
    // A fixed server clock: the same seed sees the same timestamps.
    embedded::install_engine(&name, MemEngine::starting_at(1_767_225_600_000_000));
    let mut cfg = Config {
        amqp_url: url.clone(),
        redis_url: url,
        namespace: "sim".into(),
        partitions: 2,
        lease_ms: 1500,
        grace_ms: 300,
        redeliver_ms: 2000,
        ..Config::default()
    };
    cfg.scheduler.scan_interval_ms = 100;
    let trace = Arc::new(Trace::default());
    let started = tokio::time::Instant::now();
    let plan = Arc::new(Plan {
        rng: Mutex::new(StdRng::seed_from_u64(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15))),
        on: AtomicBool::new(false),
        trace: Arc::clone(&trace),
        clock: started,
        lease_ms: cfg.lease_ms,
    });
    let fail = |what: String| SeedReport {
        seed,
        trace_hash: 0,
        violations: vec![what],
        trace: vec![],
        stats: BTreeMap::new(),
    };
    let store = match ScriptStore::connect(&cfg.redis_url, cfg.keys(), cfg.store()).await {
        Ok(s) => s,
        Err(e) => return fail(format!("store: {e}")),
    };
    let broker = match Broker::connect(cfg.broker(), Duration::from_secs(1)).await {
        Ok(b) => b,
        Err(e) => return fail(format!("broker: {e}")),
    };
    if let Some(engine) = store.mem_engine() {
        engine.set_faults(Some(plan.clone() as Arc<dyn Faults>));
    }
    if let Some(q) = broker.mem_queue() {
        q.set_faults(Some(plan.clone() as Arc<dyn Faults>));
    }
    let stop = CancellationToken::new();
    let publisher = Publisher::new(broker, cfg.keys(), Failpoints::default());
    let slot = Arc::new(OnceLock::new());
    let _ = slot.set(Services {
        store: store.clone(),
        publisher: publisher.clone(),
        marker: crate::marker::Marker::spawn(store.clone(), stop.clone()),
        catalog: Default::default(),
        schemas: Default::default(),
    });
    let router = api::router(
        ApiState::new(slot, &cfg).expect("the simulator's config has no tokens to parse"),
        Readiness::default(),
    );
    // Two scanner replicas race for the same due runs.
    let settings = ScanSettings {
        interval: Duration::from_millis(cfg.scheduler.scan_interval_ms),
        batch: cfg.scheduler.scan_batch.max(1),
        period: cfg.store().redeliver,
        split: false,
    };
    for _ in 0..2 {
        tokio::spawn(scanner::run(
            store.clone(),
            publisher.clone(),
            settings.clone(),
            stop.clone(),
        ));
    }
    let provider = Arc::new(Provider::new(seed));
    let mut w = World {
        cfg,
        store,
        router,
        provider: Arc::clone(&provider),
        trace: Arc::clone(&trace),
        rng: StdRng::seed_from_u64(seed),
        stop: stop.clone(),
        workers: (0..args.workers).map(|_| None).collect(),
        started,
        unguarded: args.unguarded,
        exits: Arc::default(),
        queue: publisher.broker().mem_queue().cloned(),
    };
    for i in 0..args.workers {
        w.start_worker(i);
    }

    let mut violations = Vec::new();
    let runs: Vec<(ThreadId, Value, u64)> = (0..args.runs)
        .map(|i| {
            let approve = w.rng.random::<f64>() < 0.35;
            let (wf, input) = if approve {
                ("approve", json!({"id": i}))
            } else {
                ("order", json!({"id": i, "nap_ms": w.rng.random_range(0..4000u64)}))
            };
            let t = ThreadId::new(format!("sim-run-{i}")).unwrap_or_else(|_| ThreadId::generate("sim"));
            let at = w.rng.random_range(0..args.chaos_ms / 2);
            let body = json!({"workflow": wf, "input": input, "thread_id": t.as_str()});
            (t, body, at)
        })
        .collect();
    let mut created = vec![false; runs.len()];
    let mut seen: Vec<Seen> = (0..runs.len()).map(|_| Seen::default()).collect();

    plan.on.store(true, Ordering::Release);
    w.trace
        .line(0, format!("chaos on: {} runs, {} workers", runs.len(), args.workers));
    let heal_at = args.chaos_ms;
    let deadline = heal_at + 240_000;
    let mut healed = false;
    let mut tick = 0u64;
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        tick += 1;
        let now = w.now();
        if !healed && now >= heal_at {
            healed = true;
            plan.on.store(false, Ordering::Release);
            w.restart_due_workers(true);
            w.trace.line(now, "heal: faults off, every worker back".into());
        }
        if !healed {
            // A crash now and then; a crashed worker comes back after a while.
            if w.rng.random::<f64>() < 0.02 {
                let i = w.rng.random_range(0..args.workers);
                let down = w.rng.random_range(100..3000u64);
                w.crash_worker(i, down);
            }
            w.restart_due_workers(false);
        }
        // Clients start their runs (retrying until the API answers, sometimes twice).
        for (i, (t, body, at)) in runs.iter().enumerate() {
            if !created[i] && *at <= now {
                let (status, resp) = w.api(Method::POST, "/v1/runs", Some(body.clone())).await;
                if status == 201 || status == 200 {
                    created[i] = true;
                    w.trace.line(now, format!("started {t} ({status})"));
                    if w.rng.random::<f64>() < 0.2 {
                        let (again, _) = w.api(Method::POST, "/v1/runs", Some(body.clone())).await;
                        w.trace.line(now, format!("started {t} again ({again})"));
                        // The same start again is the same run (a 5xx under a fault is fine).
                        if again == 201 {
                            violations.push(format!("a repeated start of {t} created a second run"));
                        }
                    }
                } else {
                    w.trace
                        .line(now, format!("start {t} refused ({status}): {resp}; retrying"));
                }
            }
        }
        if !tick.is_multiple_of(4) {
            continue;
        }
        // Read every run: growth invariant; answer approvals (the client repeats itself).
        let mut open = 0;
        for (i, (t, _, _)) in runs.iter().enumerate() {
            if !created[i] {
                open += 1;
                continue;
            }
            let Some((h, journal)) = w.read(t).await else {
                open += 1;
                continue;
            };
            check_growth(t, &mut seen[i], &h, &journal, &mut violations);
            match h.status {
                RunStatus::Waiting => {
                    open += 1;
                    let id = format!("approve-{t}");
                    let body = json!({"value": true, "id": id});
                    let repeats = if w.rng.random::<f64>() < 0.3 { 2 } else { 1 };
                    for _ in 0..repeats {
                        let (status, _) = w
                            .api(Method::POST, &format!("/v1/runs/{t}/resume"), Some(body.clone()))
                            .await;
                        w.trace.line(now, format!("resume {t}: {status}"));
                    }
                }
                s if s.is_final() || s == RunStatus::Blocked => {}
                _ => open += 1,
            }
        }
        if healed && open == 0 {
            w.trace.line(now, "every run ended".into());
            break;
        }
        if now > deadline {
            violations.push(format!(
                "{open} run(s) still open {} s after the heal",
                (now - heal_at) / 1000
            ));
            break;
        }
    }

    // Final checks.
    let registry = workload::registry(Arc::clone(&provider), args.unguarded);
    let cap = w.cfg.event_cap as usize;
    for (i, (t, _, _)) in runs.iter().enumerate() {
        let Some((h, journal)) = w.read(t).await else {
            violations.push(format!("run {t} was lost (no record)"));
            continue;
        };
        check_growth(t, &mut seen[i], &h, &journal, &mut violations);
        trace.count(&format!("end.{}", h.status.as_str()));
        if h.status == RunStatus::Blocked {
            let reason = h.reason.as_deref().unwrap_or("");
            let class = if reason.contains("outcome unknown") {
                "in_doubt"
            } else if reason.starts_with("crashed ") {
                "poison"
            } else if reason.starts_with("non-determinism") {
                "non_determinism"
            } else {
                "other"
            };
            trace.count(&format!("blocked.{class}"));
            // Only an effect in doubt (block policy) or a run that kept crashing may block here:
            // the workload is deterministic code, so any other reason is an engine bug.
            if !matches!(class, "in_doubt" | "poison") {
                violations.push(format!(
                    "run {t} blocked for a reason the workload cannot cause: {reason}"
                ));
            }
        }
        match h.status {
            RunStatus::Completed => match savepoint_worker::replay::replay(&w.store, &registry, t).await {
                Ok(savepoint_worker::replay::ReplayReport::Finished(Ok(out))) => {
                    if Some(&out) != h.output.as_ref() {
                        violations.push(format!("run {t}: replay returned {out}, recorded {:?}", h.output));
                    }
                }
                other => violations.push(format!("run {t}: replay did not reproduce the run: {other:?}")),
            },
            RunStatus::Blocked if h.reason.as_deref().unwrap_or("").is_empty() => {
                violations.push(format!("run {t} is blocked without a reason"));
            }
            RunStatus::Failed | RunStatus::Cancelled | RunStatus::Blocked => {}
            other => {
                // What the store and the queue hold for it, for the report.
                let k = w.store.keys().run(t);
                let fields: Vec<Vec<u8>> = w
                    .store
                    .query(redis::cmd("HGETALL").arg(&k.run))
                    .await
                    .unwrap_or_default();
                let fields: Vec<String> = fields
                    .chunks(2)
                    .map(|p| (String::from_utf8_lossy(&p[0]), String::from_utf8_lossy(&p[1])))
                    .filter(|(f, _)| !f.starts_with("j:") && f != "input")
                    .map(|(f, v)| format!("{f}={v}"))
                    .collect();
                let score: Option<String> = w
                    .store
                    .query(redis::cmd("ZSCORE").arg(&k.due).arg(t.as_str()))
                    .await
                    .unwrap_or_default();
                let now = w.store.server_time().await.unwrap_or(0);
                let queue = w.queue.as_ref().map(|q| {
                    format!(
                        "ready {} unacked {} dlq {} {:?}",
                        q.depth(),
                        q.unacked(),
                        q.dlq_depth(),
                        q.stats()
                    )
                });
                violations.push(format!(
                    "run {t} is stranded in {other}: due score {score:?} (now {now}), queue {queue:?}, {}",
                    fields.join(" ")
                ));
            }
        }
        if journal.len() > w.cfg.worker.max_entries as usize {
            violations.push(format!("run {t}: {} journal entries over the cap", journal.len()));
        }
        match w.store.events(t, cap + 10).await {
            Ok(ev) if ev.len() > cap => violations.push(format!("run {t}: {} events over the cap {cap}", ev.len())),
            _ => {}
        }
        w.trace.line(
            w.now(),
            format!(
                "end {t}: {} after {} entries{}",
                h.status.as_str(),
                journal.len(),
                h.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default()
            ),
        );
    }
    for (key, fences) in provider.applications() {
        trace.count("effects.applied");
        if fences.len() > 1 {
            violations.push(format!(
                "effect {key} applied {} times (fences {fences:?})",
                fences.len()
            ));
        }
    }
    violations.extend(w.exits.lock().map(|x| x.clone()).unwrap_or_default());
    if provider.refused() > 0 {
        trace.line(
            w.now(),
            format!("provider refused {} stale token(s)", provider.refused()),
        );
    }
    stop.cancel();
    for slot in w.workers.iter_mut() {
        if let Some(wk) = slot.take() {
            wk.stop.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(30), wk.join).await;
        }
    }
    embedded::forget(&name);
    let lines = trace.lines.lock().map(|l| l.clone()).unwrap_or_default();
    let mut hasher = DefaultHasher::new();
    lines.hash(&mut hasher);
    SeedReport {
        seed,
        trace_hash: hasher.finish(),
        violations,
        trace: lines,
        stats: trace.stats.lock().map(|s| s.clone()).unwrap_or_default(),
    }
}

/// Runs the seeds of `args`, printing failures (and every trace with `--verbose`); returns
/// the failing reports.
pub fn run(args: &SimArgs) -> Vec<SeedReport> {
    let first = args.seed.unwrap_or(1);
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))
        .max(1);
    let next = Arc::new(AtomicU64::new(first));
    let end = first.saturating_add(args.seeds);
    let totals: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let failed: Arc<Mutex<Vec<SeedReport>>> = Arc::default();
    // Real time, on purpose: how long the seeds took on this machine.
    #[allow(clippy::disallowed_methods)]
    let started = std::time::Instant::now();
    let handles: Vec<_> = (0..jobs)
        .map(|_| {
            let (next, totals, failed, args) = (next.clone(), totals.clone(), failed.clone(), args.clone());
            std::thread::spawn(move || loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= end {
                    return;
                }
                let r = run_seed(seed, &args);
                if args.verbose {
                    for l in &r.trace {
                        println!("seed {seed} {l}");
                    }
                }
                if let Ok(mut t) = totals.lock() {
                    for (k, v) in &r.stats {
                        *t.entry(k.clone()).or_default() += v;
                    }
                    *t.entry("seeds".into()).or_default() += 1;
                }
                if !r.violations.is_empty() {
                    println!("FAILED seed {seed} (trace {:016x}):", r.trace_hash);
                    for v in &r.violations {
                        println!("  {v}");
                    }
                    println!("  reproduce: savepoint sim --seeds 1 --seed {seed} --verbose");
                    if let Ok(mut f) = failed.lock() {
                        f.push(r);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        let _ = h.join();
    }
    let failed = failed.lock().map(|f| f.clone()).unwrap_or_default();
    let totals = totals.lock().map(|t| t.clone()).unwrap_or_default();
    let secs = started.elapsed().as_secs_f64();
    let n = totals.get("seeds").copied().unwrap_or(0);
    println!(
        "sim: {n} seeds from {first} in {secs:.1} s ({:.1} ms/seed, {jobs} thread(s)): {} failed",
        secs * 1000.0 / n.max(1) as f64,
        failed.len()
    );
    let summary: Vec<String> = totals
        .iter()
        .filter(|(k, _)| *k != "seeds")
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    println!("sim: {}", summary.join(" "));
    failed
}
