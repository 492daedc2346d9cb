//! Deterministic simulation (`savepoint sim`): the real API, due scanners and workers on the
//! embedded backend, under one seeded random source and simulated time, with faults injected
//! at every store and broker operation, then invariant checks.
//!
//! Each seed runs on its own current-thread tokio runtime with a paused clock: tasks are
//! polled in a fixed order, time only moves when every task waits, and every random draw of
//! the engine ([`savepoint_core::entropy`]) and of the simulator comes from the seed. So a seed
//! replays the same interleaving and the same trace every time, and a failing seed is a
//! reproducible bug report (`savepoint sim --seed S --verbose`).
//!
//! Faults (during the chaos phase): a store operation fails before it is applied, or is
//! applied and its reply lost, or stalls (up to several leases: a paused worker); a publish
//! fails, is duplicated or is delayed (reordered); a settlement fails; a worker is killed
//! (nothing settled or released) and restarted later; an effect's provider answers late.
//! Two scanner replicas race for every partition; on even seeds they split the partitions by
//! their live registrations instead, one crashes mid-chaos (its registration expires) and is
//! replaced, and one leaves at the heal and is replaced. Clients retry starts and repeat
//! resumes.
//!
//! The workload (`workload.rs`) uses every feature a seed can drive on one embedded instance:
//! effects under each in-doubt policy and interrupts (`order`, `approve`), flow control with
//! yields between steps (`metered`, slices of two steps), child workflows awaited and started
//! and forgotten, with parents cancelled mid-way (`parent`, `kid`), a parallel group of
//! effects and an effect whose attempts time out (`batch`), three schedules (`skip` and
//! `buffer_one` every second, `allow_all` every two) starting `tock` runs, all with sealed payloads and a
//! payload-key rotation mid-chaos (every worker restarted with the new sealing key).
//!
//! Invariants (checked after a heal phase in which faults stop and every worker is back):
//! 1. no effect key is applied twice at the provider (counted outside the engine; block and
//!    reconcile policies); the provider refuses tokens lower than one it has seen; the
//!    function of a `block` effect (a group's, or one whose attempt timed out, included) is
//!    never called twice;
//! 2. every run exists and ended completed, failed, cancelled or blocked with a reason;
//! 3. every journal only ever grew: an entry once read never changes, fences and versions
//!    never go back (no write of a fenced-out worker landed);
//! 4. every completed run replays against its journal to its recorded output;
//! 5. the store stays within its bounds (event cap, journal cap);
//! 6. flow control: at no instant were more runs of a key inside a step than its limit
//!    (witnessed by the provider), and at the end no slot is held and no live run waits in
//!    line;
//! 7. children: every child ended (or waits on a blocked child of its own, as a parent
//!    awaiting a blocked child does); every child of a cancelled parent ended cancelled, or
//!    had ended before the cancel, or finished the slice under way and started none after
//!    (its claim events); a parent holds a child's word only for a call not yet journaled,
//!    never more words than children, and an ended parent's signals expire with it;
//! 8. sealed payloads: after the rotation every run still opens (invariants 2 and 4 read
//!    them), and no value or key name in the namespace holds an input's plaintext marker;
//! 9. schedules (three, fired by two racing scheduler replicas, paused at the heal): every
//!    run a schedule started is one it counted and its last run is the latest, `skip` and
//!    `buffer_one` never had two runs open at once, `allow_all` missed no firing time,
//!    nothing is left pending or buffered; after these checks, `allow_all` resumed makes up
//!    no firing missed while paused, and deleted is gone;
//! 10. the operator (after the heal, as the runbook says): a run blocked on an effect in
//!     doubt, resolved with what the provider says ("not applied", or "applied" with its
//!     record), goes on and ends (invariant 1 sees the effect applied once, and its function
//!     called again only after a "not applied"); a completed order forked from its first
//!     effect, naming nothing to run again, completes, replays, and performs none of the
//!     effects applied when it was made; the first failed order (timed out, or refused as
//!     stale), restarted in place from its first effect (every other seed naming that effect
//!     in `rerun_effects`), ends, replays if it completed, and performs again exactly the
//!     effect named, once, and no other effect applied before; a run blocked because it
//!     kept crashing, retried, goes on and ends; an applied `charge` is first resolved
//!     with a receipt of the wrong shape, which the run takes back (it blocks on
//!     the key again, and the second, right answer settles it: never journaled);
//! 11. timeouts (a third of the runs other than parents have a deadline, 1–6 s, or 13–16 s
//!     for an order that sleeps past it): no function of a run is entered after its deadline
//!     (the provider notes when each run enters one), a run fails as timed out never before
//!     its deadline and only with one, and a deadline that passes once the fleet is quiet
//!     (8 s after the heal) ends its run within a second (a blocked run waits for its
//!     operator instead);
//! 12. split scanners (even seeds): every run ends though a replica crashed and another left
//!     (invariant 2), and the live registrations are exactly the running replicas.

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

use savepoint_broker::Broker;
use savepoint_core::failpoints::Failpoints;
use savepoint_core::ids::ThreadId;
use savepoint_core::journal::{Entry, EntryKind};
use savepoint_core::mem::{Fault, Faults, Op, SCHEME};
use savepoint_runtime::config::Config;
use savepoint_runtime::ops::Readiness;
use savepoint_runtime::security::Redacted;
use savepoint_store::mem::{install_engine, MemEngine};
use savepoint_store::{ParentCancel, RunHeader, RunStatus, ScriptStore};
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
    #[arg(long, default_value_t = 12)]
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
    /// Report, after the seeds, which lines of each Lua script of the store they reached
    /// (and which lines holding code they never did).
    #[arg(long)]
    pub lua_coverage: bool,
}

impl SimArgs {
    /// Defaults for `n` seeds from `first`.
    pub fn seeds(first: u64, n: u64) -> Self {
        Self {
            seeds: n,
            seed: Some(first),
            runs: 12,
            workers: 3,
            chaos_ms: 6000,
            jobs: Some(1),
            verbose: false,
            unguarded: false,
            lua_coverage: false,
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
    /// When the last stall injected so far ends (ms on `clock`): a store operation stalled
    /// before the heal lands after it (a scheduler's decision, say), so the heal waits for it.
    stalled_until: AtomicU64,
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
        if let Fault::Delay(d) = fault {
            self.stalled_until
                .fetch_max(self.now() + d.as_millis() as u64, Ordering::AcqRel);
        }
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
    queue: Option<Arc<savepoint_broker::mem::MemQueue>>,
}

/// The simulator's payload keys (fixed, so a seed is reproducible): `k1` seals first; every
/// process knows `k2` from the start (the rotation runbook's first step), and workers started
/// after the rotation seal with it.
const KEY_K1: &str = "k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
const KEY_K2: &str = "k2:AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=";

/// The marker every run's input carries; it must never lie in the store as plaintext.
const SECRET: &str = "PLAINTEXT-SECRET";

/// What the driver does with run `i`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Order,
    Approve,
    Metered,
    Parent,
    Batch,
}

/// The embedded server's clock at the start of every seed (µs).
const SERVER_BASE_US: u64 = 1_767_225_600_000_000;

fn sim_name(seed: u64) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("sim-{seed}-{}", N.fetch_add(1, Ordering::Relaxed))
}

impl World {
    fn now(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// The embedded server's clock now (ms): its fixed base plus the virtual time since.
    fn server_ms(&self) -> u64 {
        SERVER_BASE_US / 1000 + self.now()
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

    /// What the store and the queue hold for run `t`, for a report: its due score, the
    /// queue's depths and the run's fields (but its journal and input).
    async fn holdings(&self, t: &ThreadId) -> String {
        let k = self.store.keys().run(t);
        let fields: Vec<Vec<u8>> = self
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
        let score: Option<String> = self
            .store
            .query(redis::cmd("ZSCORE").arg(&k.due).arg(t.as_str()))
            .await
            .unwrap_or_default();
        let now = self.store.server_time().await.unwrap_or(0);
        let queue = self.queue.as_ref().map(|q| {
            format!(
                "ready {} unacked {} dlq {} {:?}",
                q.depth(),
                q.unacked(),
                q.dlq_depth(),
                q.stats()
            )
        });
        format!("due score {score:?} (now {now}), queue {queue:?}, {}", fields.join(" "))
    }

    /// Whether run `h` waits for a child (awaited by `ctx.child`) that is blocked, or itself
    /// waits on a blocked child of its own.
    async fn waits_on_blocked_child(&self, h: &RunHeader) -> bool {
        let mut h = h.clone();
        for _ in 0..8 {
            let Some(wait) = h.wait.as_ref().filter(|w| w.kind == "child") else {
                return false;
            };
            let index = wait.name.trim_start_matches("child:").parse::<u32>().ok();
            let Some(link) = h.children.iter().find(|l| Some(l.index) == index) else {
                return false;
            };
            let Some((c, _)) = self.read(&link.thread).await else {
                return false;
            };
            match c.status {
                RunStatus::Blocked => return true,
                RunStatus::Waiting => h = c,
                _ => return false,
            }
        }
        false
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
    async fn read(&self, t: &ThreadId) -> Option<(savepoint_store::RunHeader, Vec<Entry>)> {
        let limit = Some(Duration::from_secs(10));
        savepoint_store::until_ok("reading a run", limit, &self.stop, || self.store.get(t))
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
    h: &savepoint_store::RunHeader,
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
    savepoint_core::entropy::seed_thread(seed);
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
    savepoint_core::entropy::unseed_thread();
    report
}

async fn simulate(seed: u64, args: &SimArgs) -> SeedReport {
    let name = sim_name(seed);
    let url = format!("{SCHEME}{name}");
    // A fixed server clock: the same seed sees the same timestamps.
    install_engine(&name, MemEngine::starting_at(SERVER_BASE_US));
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
    // Slices of two calls: runs yield between steps (a flow slot changes hands mid-run).
    cfg.worker.slice_max_steps = 2;
    cfg.child_poll_ms = 2000;
    cfg.security.payload_keys = Redacted(format!("{KEY_K1},{KEY_K2}"));
    let trace = Arc::new(Trace::default());
    let started = tokio::time::Instant::now();
    let plan = Arc::new(Plan {
        rng: Mutex::new(StdRng::seed_from_u64(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15))),
        on: AtomicBool::new(false),
        trace: Arc::clone(&trace),
        clock: started,
        lease_ms: cfg.lease_ms,
        stalled_until: AtomicU64::new(0),
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
    // Two scheduler replicas race to fire the same schedules.
    for _ in 0..2 {
        tokio::spawn(api::schedules::run(
            slot.clone(),
            Duration::from_millis(cfg.scheduler.scan_interval_ms),
            stop.clone(),
        ));
    }
    let router = crate::http::router(
        ApiState::new(slot, &cfg).expect("the simulator's config has no tokens to parse"),
        Readiness::default(),
    );
    // Two scanner replicas race for the same due runs. On even seeds they split the
    // partitions by their live registrations instead; one crashes during the chaos (its
    // registration expires) and another takes its place, and at the heal one leaves cleanly
    // and another takes its place: no partition is left unscanned.
    let split = seed.is_multiple_of(2);
    let settings = ScanSettings {
        interval: Duration::from_millis(cfg.scheduler.scan_interval_ms),
        batch: cfg.scheduler.scan_batch.max(1),
        period: cfg.store().redeliver,
        split,
    };
    let (scan_store, scan_publisher, scan_stop) = (store.clone(), publisher.clone(), stop.clone());
    let spawn_scanner = move || {
        let own = scan_stop.child_token();
        let join = tokio::spawn(scanner::run(
            scan_store.clone(),
            scan_publisher.clone(),
            settings.clone(),
            own.clone(),
        ));
        (join, own)
    };
    let mut scanners: Vec<(JoinHandle<()>, CancellationToken)> = (0..2).map(|_| spawn_scanner()).collect();
    let mut scanner_rng = StdRng::seed_from_u64(seed ^ 0x5CA7_7E11);
    let provider = Arc::new(Provider::new(seed, started));
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
    let mut kinds = Vec::new();
    let mut cancel_plan: Vec<Option<u64>> = Vec::new();
    let runs: Vec<(ThreadId, Value, u64)> = (0..args.runs)
        .map(|i| {
            let x = w.rng.random::<f64>();
            let secret = format!("{SECRET}-{i}");
            let kind = if x < 0.3 {
                Kind::Order
            } else if x < 0.45 {
                Kind::Approve
            } else if x < 0.65 {
                Kind::Metered
            } else if x < 0.82 {
                Kind::Parent
            } else {
                Kind::Batch
            };
            let t = ThreadId::new(format!("sim-run-{i}")).unwrap_or_else(|_| ThreadId::generate("sim"));
            let at = w.rng.random_range(0..args.chaos_ms / 2);
            // Some runs have a deadline: short ones pass during the chaos (in a call, a
            // sleep, a line or a takeover); a long sleep's passes after the heal.
            let timed = kind != Kind::Parent && w.rng.random::<f64>() < 0.35;
            let long_nap = timed && kind == Kind::Order && w.rng.random::<f64>() < 0.5;
            let nap_ms = if long_nap {
                w.rng.random_range(13_000..18_000u64)
            } else {
                w.rng.random_range(0..4000u64)
            };
            let mut body = match kind {
                Kind::Order => json!({"workflow": "order", "thread_id": t.as_str(),
                    "input": {"id": i, "nap_ms": nap_ms, "secret": secret}}),
                Kind::Approve => json!({"workflow": "approve", "thread_id": t.as_str(),
                    "input": {"id": i, "secret": secret}}),
                Kind::Metered => {
                    // (Priorities order the line; the limit holds whatever the order.)
                    let (key, limit) = workload::FLOW_KEYS[i % workload::FLOW_KEYS.len()];
                    json!({"workflow": "metered", "thread_id": t.as_str(),
                        "input": {"id": i, "key": format!("{SECRET}-{key}"), "steps": 4, "secret": secret},
                        "flow": {"key_from": "/key", "limit": limit}, "priority": w.rng.random_range(0..3u8)})
                }
                Kind::Parent => json!({"workflow": "parent", "thread_id": t.as_str(),
                    "input": {"id": i, "secret": secret}}),
                Kind::Batch => json!({"workflow": "batch", "thread_id": t.as_str(),
                    "input": {"id": i, "secret": secret}}),
            };
            if timed {
                let secs = if long_nap {
                    w.rng.random_range(13..=16u64)
                } else {
                    w.rng.random_range(1..=6u64)
                };
                body["timeout_secs"] = json!(secs);
            }
            let cancel = (kind == Kind::Parent && w.rng.random::<f64>() < 0.4)
                .then(|| w.rng.random_range(at..args.chaos_ms + 2000));
            kinds.push(kind);
            cancel_plan.push(cancel);
            (t, body, at)
        })
        .collect();
    // When each cancelled parent's cancel was acknowledged (server ms).
    let mut cancelled_at: Vec<Option<u64>> = vec![None; runs.len()];
    let rotate_at = args.chaos_ms / 2;
    let mut rotated = false;
    let mut created = vec![false; runs.len()];
    let mut seen: Vec<Seen> = (0..runs.len()).map(|_| Seen::default()).collect();

    plan.on.store(true, Ordering::Release);
    w.trace
        .line(0, format!("chaos on: {} runs, {} workers", runs.len(), args.workers));
    let heal_at = args.chaos_ms;
    let deadline = heal_at + 240_000;
    // The schedules (created at the start, paused at the heal) and where each stands.
    let mut sched_created = [false; SCHEDULES.len()];
    let mut sched_paused = [false; SCHEDULES.len()];
    let mut healed = false;
    // When the heal came (the driver's own calls may stall past `heal_at`).
    let mut healed_at = heal_at;
    // When the first scanner replica crashes, and how long until another replaces it.
    let scanner_crash_at = scanner_rng.random_range(500..args.chaos_ms / 2);
    let scanner_back_at = scanner_crash_at + scanner_rng.random_range(300..4000u64);
    let (mut scanner_crashed, mut scanner_back) = (false, false);
    let mut tick = 0u64;
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        tick += 1;
        let now = w.now();
        if !healed && now >= heal_at {
            healed = true;
            healed_at = now;
            plan.on.store(false, Ordering::Release);
            w.restart_due_workers(true);
            w.trace.line(now, "heal: faults off, every worker back".into());
            if split {
                // A scanner replica leaves (a rolling deploy) and a new one joins.
                scanners[1].1.cancel();
                scanners.push(spawn_scanner());
                w.trace.line(now, "scanner 1 left; another joined".into());
            }
        }
        if split && !scanner_crashed && now >= scanner_crash_at {
            scanner_crashed = true;
            scanners[0].0.abort();
            w.trace.line(now, "scanner 0 crashed".into());
        }
        if split && scanner_crashed && !scanner_back && (now >= scanner_back_at || healed) {
            scanner_back = true;
            scanners.push(spawn_scanner());
            w.trace.line(now, "a scanner replica joined".into());
        }
        if !healed {
            // A crash now and then; a crashed worker comes back after a while.
            if w.rng.random::<f64>() < 0.02 {
                let i = w.rng.random_range(0..args.workers);
                let down = w.rng.random_range(100..3000u64);
                w.crash_worker(i, down);
            }
        }
        // (Also after the heal: the rotation may restart workers late in a stalled seed.)
        w.restart_due_workers(false);
        if !rotated && now >= rotate_at {
            // Key rotation: every worker restarts sealing with k2 (k1 still opens).
            rotated = true;
            w.cfg.security.payload_keys = Redacted(format!("{KEY_K2},{KEY_K1}"));
            w.trace.line(now, "rotate: workers restart sealing with k2".into());
            for i in 0..args.workers {
                let down = w.rng.random_range(10..300u64);
                w.crash_worker(i, down);
            }
        }
        // Operators cancel some parents while their children work.
        for i in 0..runs.len() {
            let due = cancel_plan[i].is_some_and(|at| at <= now);
            if !due || !created[i] || cancelled_at[i].is_some() {
                continue;
            }
            let t = &runs[i].0;
            let (status, _) = w
                .api(
                    Method::POST,
                    &format!("/v1/runs/{t}/cancel"),
                    Some(json!({"reason": format!("operator {SECRET}-cancel")})),
                )
                .await;
            w.trace.line(now, format!("cancel {t}: {status}"));
            // The cancel's time is the one the run records (an earlier attempt whose reply
            // was lost may be the one that cancelled it).
            let ours = match w.read(t).await {
                Some((h, _))
                    if h.status == RunStatus::Cancelled && h.reason.as_deref().is_some_and(|r| r.contains(SECRET)) =>
                {
                    h.finished_at
                }
                _ => None,
            };
            match (status, ours) {
                (_, Some(at)) => cancelled_at[i] = Some(at),
                // It had ended: nothing to cancel.
                (409, None) => cancel_plan[i] = None,
                _ => {}
            }
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
        // Key names live only while in use (a flow key's slots and line): look at them
        // during the run, not only in the final dump.
        if tick.is_multiple_of(10) {
            let ns = w.store.keys().namespace().to_string();
            let names: Vec<String> = w
                .store
                .query(redis::cmd("KEYS").arg(format!("{ns}:*")))
                .await
                .unwrap_or_default();
            if let Some(k) = names.iter().find(|k| k.contains(SECRET)) {
                if !violations.iter().any(|v: &String| v.starts_with("a key name holds")) {
                    violations.push(format!("a key name holds an input's plaintext marker: {k}"));
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
                // A parent awaiting a child that is blocked (an effect in doubt) waits for an
                // operator, as the child does: it is not stranded.
                RunStatus::Waiting if w.waits_on_blocked_child(&h).await => {}
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
            // Children started and not awaited outlive their parent: wait for them too.
            for link in &h.children {
                if let Some((c, _)) = w.read(&link.thread).await {
                    if !c.status.is_final() && c.status != RunStatus::Blocked && !w.waits_on_blocked_child(&c).await {
                        open += 1;
                    }
                }
            }
        }
        // Schedules: created as the chaos starts (the client retries), paused at the heal;
        // their runs must end like the others.
        for (j, (id, every, overlap)) in SCHEDULES.iter().enumerate() {
            if !sched_created[j] {
                let body = json!({"id": id, "workflow": "tock", "input": {"secret": format!("{SECRET}-{id}")},
                    "every_secs": every, "overlap": overlap});
                let (status, _) = w.api(Method::POST, "/v1/schedules", Some(body)).await;
                w.trace.line(now, format!("schedule {id} create: {status}"));
                sched_created[j] = status == 201 || status == 200;
            } else if healed && !sched_paused[j] {
                let (status, _) = w
                    .api(
                        Method::POST,
                        &format!("/v1/schedules/{id}/pause"),
                        Some(json!({"note": "heal"})),
                    )
                    .await;
                w.trace.line(now, format!("schedule {id} pause: {status}"));
                sched_paused[j] = status == 200;
            }
        }
        if healed {
            open += sched_paused.iter().filter(|p| !**p).count();
            open += schedules_open(&w).await;
        }
        // (Every stall injected before the heal has played out, too.)
        if healed && open == 0 && now >= plan.stalled_until.load(Ordering::Acquire) {
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

    let operated = if violations.is_empty() {
        operate(&mut w, &runs, &kinds, &provider, &mut violations).await
    } else {
        Operated::default()
    };

    // Final checks.
    let registry = workload::registry(Arc::clone(&provider), args.unguarded);
    let cap = w.cfg.event_cap as usize;
    for (i, (t, _, _)) in runs.iter().enumerate() {
        let Some((h, journal)) = w.read(t).await else {
            violations.push(format!("run {t} was lost (no record)"));
            continue;
        };
        // A restart in place dropped the entries from where it restarted.
        if let Some(r) = operated.restarts.iter().find(|r| r.thread == *t) {
            seen[i].journal.truncate(r.from);
        }
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
            } else if reason.contains(workload::PLANTED_BUG) {
                "planted_bug"
            } else {
                "other"
            };
            trace.count(&format!("blocked.{class}"));
            // Only an effect in doubt (block policy) or a run that kept crashing may block here:
            // the workload is deterministic code, so any other reason is an engine bug.
            // (A planted bug blocks its run until the operator's retry; still blocked on it
            // after that is checked with the operator's actions.)
            if !matches!(class, "in_doubt" | "poison" | "planted_bug") {
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
            RunStatus::Waiting if w.waits_on_blocked_child(&h).await => trace.count("waiting.on_blocked_child"),
            other => violations.push(format!("run {t} is stranded in {other}: {}", w.holdings(t).await)),
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
    feature_checks(&w, &runs, &kinds, &cancelled_at, &operated, &mut violations).await;
    deadline_checks(&w, &runs, healed_at, &operated, &mut violations).await;
    schedule_checks(&w, &mut violations).await;
    if violations.is_empty() {
        schedule_resume_checks(&w, &mut violations).await;
    }
    operator_checks(&w, &operated, &registry, &provider, &mut violations).await;
    if split {
        scanner_checks(&w, &scanners, &mut violations).await;
    }
    for (key, fences) in provider.applications() {
        trace.count("effects.applied");
        if fences.len() > 1 + operated.reruns_of(&key) {
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
    savepoint_store::mem::forget(&name);
    savepoint_broker::mem::forget(&name);
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
    quiet_planted_bugs();
    if args.lua_coverage {
        savepoint_store::mem::coverage::enable();
    }
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
    if args.lua_coverage {
        print_lua_coverage();
    }
    failed
}

/// The `--lua-coverage` table: per script, lines of code reached, and the ones never reached.
fn print_lua_coverage() {
    let report = match savepoint_store::mem::coverage::report() {
        Ok(r) => r,
        Err(e) => return println!("lua coverage: {e}"),
    };
    let (mut lines, mut hit) = (0, 0);
    println!("lua coverage (lines of code reached / lines of code; never reached):");
    for s in &report {
        lines += s.lines.len();
        hit += s.hit.len();
        let pct = 100.0 * s.hit.len() as f64 / s.lines.len().max(1) as f64;
        let missed = ranges(&s.missed());
        println!(
            "  {:<16} {:>4}/{:<4} {pct:>5.1}%  {}",
            s.name,
            s.hit.len(),
            s.lines.len(),
            if missed.is_empty() { "-".to_owned() } else { missed }
        );
    }
    println!(
        "  {:<16} {hit:>4}/{lines:<4} {:>5.1}%",
        "all",
        100.0 * hit as f64 / lines.max(1) as f64
    );
}

/// `1-3,7,9-10` for [1, 2, 3, 7, 9, 10].
fn ranges(lines: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let mut j = i;
        while j + 1 < lines.len() && lines[j + 1] == lines[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            lines[i].to_string()
        } else {
            format!("{}-{}", lines[i], lines[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// What the operator did after the heal, for the checks.
#[derive(Default)]
struct Operated {
    /// Runs blocked in doubt on an effect, resolved with what the provider says: (run, key,
    /// applied).
    resolved: Vec<(ThreadId, String, bool)>,
    /// Each fork: the source, the fork, and every effect applied when it was made.
    forks: Vec<(ThreadId, ThreadId, BTreeMap<String, Vec<u64>>)>,
    /// Each restart in place.
    restarts: Vec<Restarted>,
    /// Runs blocked in doubt on a `charge` effect first resolved "applied" with a result of
    /// the wrong shape (the workflow's type does not decode it): (run, key). The run must
    /// take it back and block on the key again, to be resolved with the right shape.
    misshapen: Vec<(ThreadId, String)>,
    /// Runs blocked because they kept crashing (poison), retried by the operator.
    retried: Vec<ThreadId>,
}

/// A run the operator restarted in place.
struct Restarted {
    thread: ThreadId,
    /// The entry it restarted from.
    from: usize,
    /// The effect keys named to run again.
    named: Vec<String>,
    /// Every effect applied when it was made.
    before: BTreeMap<String, Vec<u64>>,
}

impl Operated {
    /// How many more times the operator asked for `key` to be performed (named in a
    /// restart's `rerun_effects`).
    fn reruns_of(&self, key: &str) -> usize {
        self.restarts
            .iter()
            .filter(|r| r.named.iter().any(|k| k == key))
            .count()
    }
}

/// The operator after the heal, as the runbook says: each run blocked on an effect in doubt
/// is resolved with what the provider says, "not applied" (the run performs it) or "applied"
/// with the provider's record (the run journals it without calling), and the first completed
/// order is forked from its first effect, naming nothing to run
/// again. Then waits (up to 120 s) until those runs ended.
async fn operate(
    w: &mut World,
    runs: &[(ThreadId, Value, u64)],
    kinds: &[Kind],
    provider: &workload::Provider,
    bad: &mut Vec<String>,
) -> Operated {
    // Workers crashed late in the heal (the rotation restarts them all) may still be down
    // when every run has ended: the operator's runs need them.
    w.restart_due_workers(true);
    let w = &*w;
    let mut op = Operated::default();
    let applied = provider.applications();
    let fork_from = first_completed_order(w, runs, kinds).await;
    if let Some((source, n)) = fork_from {
        let fork = ThreadId::new(format!("{source}-fork")).unwrap_or_else(|_| ThreadId::generate("fork"));
        let body = json!({"from_step": n, "thread_id": fork.as_str()});
        match w
            .api(Method::POST, &format!("/v1/runs/{source}/fork"), Some(body))
            .await
        {
            (201, _) => op.forks.push((source, fork, applied)),
            (code, body) => bad.push(format!("operator: fork of {source} answered {code}: {body}")),
        }
    }
    // The first failed order (its deadline passed, or the provider refused a stale token)
    // is restarted in place from its first effect; every other seed names that effect to be
    // performed again.
    if let Some((t, n, key, index)) = first_failed_order(w, runs, kinds).await {
        let named: Vec<String> = if index % 2 == 0 { vec![key] } else { Vec::new() };
        let body = json!({"from_step": n, "rerun_effects": named});
        match w.api(Method::POST, &format!("/v1/runs/{t}/restart"), Some(body)).await {
            (202, _) => op.restarts.push(Restarted {
                thread: t,
                from: n,
                named,
                before: provider.applications(),
            }),
            (code, body) => bad.push(format!("operator: restart of {t} answered {code}: {body}")),
        }
    }
    // The fix for the planted bug is deployed; each run it blocked (and any run blocked
    // because it kept crashing: the faults are off now) is retried: it goes on from its
    // journal and performs no effect twice.
    provider.fix();
    for (t, _, _) in runs {
        let Some((h, _)) = w.read(t).await else { continue };
        let retry = h.status == RunStatus::Blocked
            && h.blocked_effect.is_none()
            && h.reason
                .as_deref()
                .is_some_and(|r| r.starts_with("crashed ") || r.contains(workload::PLANTED_BUG));
        if !retry {
            continue;
        }
        match w.api(Method::POST, &format!("/v1/runs/{t}/retry"), None).await {
            (202, _) => op.retried.push(t.clone()),
            (code, body) => bad.push(format!("operator: retry of {t} answered {code}: {body}")),
        }
    }
    answer_retried(w, &op.retried).await;
    // A run may hold more than one effect in doubt (a group's): a round per block.
    for _round in 0..5 {
        let before = (op.resolved.len(), op.misshapen.len());
        for (t, _, _) in runs {
            let Some((h, _)) = w.read(t).await else { continue };
            let Some(k) = h.blocked_effect.as_deref() else { continue };
            let path = format!("/v1/runs/{t}/effects/{k}/resolve");
            // An applied charge is first answered with a receipt of the wrong shape (an
            // operator's typo).
            let misshape = k.starts_with("charge:") && !op.misshapen.iter().any(|(r, key)| r == t && key == k);
            let (done, body) = match provider.find(k) {
                Some(_) if misshape => (true, json!({"applied": true, "result": {"applied": k, "fence": "one"}})),
                Some(result) => (true, json!({"applied": true, "result": result})),
                None => (false, json!({"applied": false})),
            };
            match w.api(Method::POST, &path, Some(body)).await {
                // (A result recorded before stands: the run journals that one.)
                (202, reply) if misshape && done && reply["effect"]["state"] == "applied" => {
                    op.misshapen.push((t.clone(), k.to_owned()))
                }
                (202, _) => op.resolved.push((t.clone(), k.to_owned(), done)),
                (code, body) => bad.push(format!("operator: resolve {t} {k} answered {code}: {body}")),
            }
        }
        let watched: Vec<ThreadId> = (op.resolved[before.0..].iter().map(|(t, _, _)| t.clone()))
            .chain(op.misshapen[before.1..].iter().map(|(t, _)| t.clone()))
            .chain(op.forks.iter().map(|(_, f, _)| f.clone()))
            .chain(op.restarts.iter().map(|r| r.thread.clone()))
            .chain(op.retried.iter().cloned())
            .collect();
        wait_ended(w, &watched).await;
        if (op.resolved.len(), op.misshapen.len()) == before {
            break;
        }
    }
    // A schedule's run the operator unblocked ended: the firing held behind it starts now.
    for _ in 0..1200 {
        if schedules_open(w).await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    w.trace.line(
        w.now(),
        format!(
            "operator: resolved {} ({} misshapen first), forked {}, restarted {}, retried {}",
            op.resolved.len(),
            op.misshapen.len(),
            op.forks.len(),
            op.restarts.len(),
            op.retried.len()
        ),
    );
    op
}

/// The first completed order and the index of its first effect (where a fork starts).
async fn first_completed_order(
    w: &World,
    runs: &[(ThreadId, Value, u64)],
    kinds: &[Kind],
) -> Option<(ThreadId, usize)> {
    for (i, (t, _, _)) in runs.iter().enumerate() {
        if kinds[i] != Kind::Order {
            continue;
        }
        let Some((h, journal)) = w.read(t).await else { continue };
        if h.status == RunStatus::Completed {
            if let Some(n) = journal.iter().position(|e| e.kind == EntryKind::Effect) {
                return Some((t.clone(), n));
            }
        }
    }
    None
}

/// The first order that failed with its first effect journaled: the run, the entry of that
/// effect, its key, and the order's index among the runs.
async fn first_failed_order(
    w: &World,
    runs: &[(ThreadId, Value, u64)],
    kinds: &[Kind],
) -> Option<(ThreadId, usize, String, usize)> {
    for (i, (t, _, _)) in runs.iter().enumerate() {
        if kinds[i] != Kind::Order {
            continue;
        }
        let Some((h, journal)) = w.read(t).await else { continue };
        if h.status != RunStatus::Failed {
            continue;
        }
        let first = journal.iter().enumerate().find(|(_, e)| e.kind == EntryKind::Effect);
        if let Some((n, key)) = first.and_then(|(n, e)| Some((n, e.key.clone()?))) {
            return Some((t.clone(), n, key, i));
        }
    }
    None
}

/// The planted bug's panics are the workload's (its runs block, and the operator retries
/// them), not the simulator's: they are not printed. Every other panic is.
fn quiet_planted_bugs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let p = info.payload();
            let msg = (p.downcast_ref::<String>().map(String::as_str))
                .or_else(|| p.downcast_ref::<&str>().copied())
                .unwrap_or("");
            if !msg.starts_with(workload::PLANTED_BUG) {
                default(info);
            }
        }));
    });
}

/// The scanner replicas' registrations: a crashed replica's expired, one that left is gone,
/// and each running replica is registered (the live set is what they split the partitions by).
async fn scanner_checks(w: &World, scanners: &[(JoinHandle<()>, CancellationToken)], bad: &mut Vec<String>) {
    w.trace.count("scanner.split");
    let running = scanners
        .iter()
        .filter(|(j, own)| !j.is_finished() && !own.is_cancelled())
        .count();
    let key = w.store.keys().schedulers();
    let now_ms = w.server_ms();
    let live: Vec<(String, f64)> = w
        .store
        .query(redis::cmd("ZRANGE").arg(&key).arg(0).arg(-1).arg("WITHSCORES"))
        .await
        .unwrap_or_default();
    let unexpired = live.iter().filter(|(_, until)| *until > now_ms as f64).count();
    if unexpired != running {
        bad.push(format!(
            "{running} scanner replica(s) run, but {unexpired} registration(s) are live (at {now_ms} ms): {live:?}"
        ));
    }
}

/// Waits (up to 120 s) until each retried run ended or blocked; one that had not passed its
/// gate waits there again, and its client answers, as during the heal.
async fn answer_retried(w: &World, retried: &[ThreadId]) {
    for _ in 0..1200 {
        let mut open = 0;
        for t in retried {
            let Some((h, _)) = w.read(t).await else { continue };
            match h.status {
                s if s.is_final() || s == RunStatus::Blocked => {}
                RunStatus::Waiting if w.waits_on_blocked_child(&h).await => {}
                RunStatus::Waiting => {
                    open += 1;
                    let body = json!({"value": true, "id": format!("approve-{t}")});
                    let (status, _) = w.api(Method::POST, &format!("/v1/runs/{t}/resume"), Some(body)).await;
                    w.trace.line(w.now(), format!("resume {t} after its retry: {status}"));
                }
                _ => open += 1,
            }
        }
        if open == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits (up to 120 s) until each of `runs` ended or blocked.
async fn wait_ended(w: &World, runs: &[ThreadId]) {
    for _ in 0..1200 {
        let mut open = 0;
        for t in runs {
            let ended = w
                .read(t)
                .await
                .is_some_and(|(h, _)| h.status.is_final() || h.status == RunStatus::Blocked);
            open += usize::from(!ended);
        }
        if open == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Invariants of the operator's actions: a resolved run went on and ended; a fork ended
/// completed, replays to its output, and performed again none of the effects applied when it
/// was made (it named none; a key of its own, new, is performed once like any other).
async fn operator_checks(
    w: &World,
    op: &Operated,
    registry: &savepoint::workflow::Registry,
    provider: &workload::Provider,
    bad: &mut Vec<String>,
) {
    for (t, key, applied) in &op.resolved {
        w.trace.count(if *applied {
            "operator.resolved.applied"
        } else {
            "operator.resolved.not_applied"
        });
        match w.read(t).await {
            Some((h, _)) if h.status.is_final() || h.blocked_effect.as_deref() != Some(key.as_str()) => {}
            Some((h, _)) => bad.push(format!(
                "run {t} resolved on {key} is {} on it again: {:?}",
                h.status.as_str(),
                h.reason
            )),
            None => bad.push(format!("resolved run {t} was lost")),
        }
    }
    // A result that does not decode is never journaled: the run took it back and blocked on
    // the key again, and the operator's second answer (the right shape) settled it; or its
    // deadline had passed, and it failed first. (Invariant 4 replays a completed run: a
    // journaled receipt of the wrong shape would not decode.)
    for (t, key) in &op.misshapen {
        w.trace.count("operator.resolved.misshapen");
        let again = op.resolved.iter().any(|(r, k, applied)| r == t && k == key && *applied);
        let h = w.read(t).await.map(|(h, _)| h);
        let gave_up = h
            .as_ref()
            .is_some_and(|h| h.status.is_final() && h.status != RunStatus::Completed);
        if !again && !gave_up {
            let now = h.map(|h| (h.status, h.blocked_effect, h.reason));
            bad.push(format!(
                "run {t} resolved on {key} with a result that does not decode did not block on it again: {now:?}"
            ));
        }
    }
    // A retried poison run went on (no fault is left to crash it) and ended, or waits for
    // an effect's operator.
    for t in &op.retried {
        w.trace.count("operator.retried");
        match w.read(t).await {
            Some((h, _)) if h.status.is_final() || h.blocked_effect.is_some() => {}
            Some((h, _)) => bad.push(format!(
                "retried run {t} did not go on: {} ({:?})",
                h.status.as_str(),
                h.reason
            )),
            None => bad.push(format!("retried run {t} was lost")),
        }
    }
    let now = provider.applications();
    for Restarted {
        thread: t,
        named,
        before,
        ..
    } in &op.restarts
    {
        w.trace.count(if named.is_empty() {
            "operator.restarted"
        } else {
            "operator.restarted.rerun"
        });
        let completed = match w.read(t).await {
            Some((h, _)) if h.status == RunStatus::Completed => {
                match savepoint_worker::replay::replay(&w.store, registry, t).await {
                    Ok(savepoint_worker::replay::ReplayReport::Finished(Ok(out)))
                        if Some(&out) == h.output.as_ref() => {}
                    other => bad.push(format!("restarted {t}: replay did not reproduce it: {other:?}")),
                }
                true
            }
            // An effect of the re-run may be cut off by a slow provider (in doubt), or its
            // new call refused as stale: it ends, but need not complete.
            Some((h, _)) if h.status.is_final() || h.status == RunStatus::Blocked => false,
            Some((h, _)) => {
                bad.push(format!("restarted {t} never ended: {}", h.status.as_str()));
                false
            }
            None => {
                bad.push(format!("restarted {t} was lost"));
                false
            }
        };
        // Performed again exactly what was named (once, when the run completed), and no
        // other effect applied before the restart.
        for (key, fences) in &now {
            let was = before.get(key).map_or(0, Vec::len);
            let again = fences.len().saturating_sub(was);
            let asked = usize::from(named.contains(key));
            if was > 0 && (again > asked || (completed && again < asked)) {
                bad.push(format!(
                    "restarted {t} performed {key} {again} more time(s); the operator named it {asked} time(s)"
                ));
            }
        }
    }
    for (source, fork, before) in &op.forks {
        w.trace.count("operator.forked");
        match w.read(fork).await {
            Some((h, _)) if h.status == RunStatus::Completed => {
                match savepoint_worker::replay::replay(&w.store, registry, fork).await {
                    Ok(savepoint_worker::replay::ReplayReport::Finished(Ok(out)))
                        if Some(&out) == h.output.as_ref() => {}
                    other => bad.push(format!("fork {fork}: replay did not reproduce it: {other:?}")),
                }
            }
            Some((h, _)) => bad.push(format!(
                "fork {fork} of {source} ended {}: {:?}",
                h.status.as_str(),
                h.error.as_ref().or(h.reason.as_ref())
            )),
            None => bad.push(format!("fork {fork} of {source} was lost")),
        }
        for (key, fences) in &now {
            let was = before.get(key).map_or(0, Vec::len) + op.reruns_of(key);
            if was > 0 && fences.len() > was {
                bad.push(format!(
                    "fork {fork} of {source} performed {key} again though the operator named nothing ({} → {})",
                    was,
                    fences.len()
                ));
            }
        }
    }
}

/// Every value and key name of the namespace (an embedded instance has no `TYPE`: each key
/// is read as each kind until one answers).
async fn dump_namespace(store: &ScriptStore) -> Vec<(String, Vec<u8>)> {
    let ns = store.keys().namespace().to_string();
    let keys: Vec<String> = store
        .query(redis::cmd("KEYS").arg(format!("{ns}:*")))
        .await
        .unwrap_or_default();
    let mut out = Vec::new();
    for k in keys {
        out.push((k.clone(), k.clone().into_bytes()));
        if let Ok(Some(v)) = store.query::<Option<Vec<u8>>>(redis::cmd("GET").arg(&k)).await {
            out.push((k, v));
            continue;
        }
        let reads = [
            redis::cmd("HGETALL").arg(&k).clone(),
            redis::cmd("LRANGE").arg(&k).arg(0).arg(-1).clone(),
            redis::cmd("ZRANGE").arg(&k).arg(0).arg(-1).clone(),
        ];
        for cmd in reads {
            if let Ok(values) = store.query::<Vec<Vec<u8>>>(&cmd).await {
                out.extend(values.into_iter().map(|v| (k.clone(), v)));
                break;
            }
        }
    }
    out
}

/// The simulated schedules: id, seconds between firings, overlap policy.
const SCHEDULES: [(&str, u64, &str); 3] = [("tick", 1, "skip"), ("tock", 2, "allow_all"), ("tack", 1, "buffer_one")];

/// The firing schedule `id` holds back until its last run ends (`buffer_one`), if any,
/// unless that run is blocked: a blocked run has not ended, so the firing waits for its
/// operator (as the README says).
async fn buffered_of(w: &World, id: &str) -> Option<String> {
    let key = w.store.keys().schedule(id);
    let (held, last): (Option<String>, Option<String>) = w
        .store
        .query(redis::cmd("HMGET").arg(&key).arg("buffered").arg("last"))
        .await
        .unwrap_or((None, None));
    let held = held?;
    let last = last.and_then(|t| ThreadId::new(t).ok());
    if let Some(t) = last {
        if w.read(&t).await.is_some_and(|(h, _)| h.status == RunStatus::Blocked) {
            return None;
        }
    }
    Some(held)
}

/// What the schedules still owe: a firing decided before the pause whose run is not created
/// yet (its create stalled, or its replica died) is created by the next pass, paused or not;
/// a firing `buffer_one` held back starts when the run before it ends, paused or not (unless
/// that run is blocked); and their runs end like any other.
async fn schedules_open(w: &World) -> usize {
    let mut open = 0;
    for (id, _, _) in SCHEDULES {
        open += usize::from(pending_of(w, id).await.is_some());
        open += usize::from(buffered_of(w, id).await.is_some());
    }
    open + schedule_runs(w)
        .await
        .iter()
        .filter(|r| !r.status.is_final() && r.status != RunStatus::Blocked)
        .count()
}

/// The runs schedule `id` decided and has not created yet (its raw `pending` field), if any.
async fn pending_of(w: &World, id: &str) -> Option<String> {
    w.store
        .query(redis::cmd("HGET").arg(w.store.keys().schedule(id)).arg("pending"))
        .await
        .unwrap_or(None)
}

/// Every run the simulated schedules started, by thread id.
async fn schedule_runs(w: &World) -> Vec<RunHeader> {
    let (status, list) = w.api(Method::GET, "/v1/runs?limit=1000", None).await;
    if status != 200 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for r in list["runs"].as_array().into_iter().flatten() {
        let Some(t) = r["thread_id"].as_str() else { continue };
        if !SCHEDULES.iter().any(|(id, _, _)| t.starts_with(&format!("{id}-"))) {
            continue;
        }
        let Ok(t) = ThreadId::new(t.to_owned()) else { continue };
        if let Some((h, _)) = w.read(&t).await {
            out.push(h);
        }
    }
    out.sort_by(|a, b| a.thread.as_str().cmp(b.thread.as_str()));
    out
}

/// Invariant 9, schedules: each firing time has at most one run, and every run the schedule
/// started is one it counted (none untracked); `skip` and `buffer_one` never have two runs
/// open at once; `allow_all` misses no firing time between its first and its last; nothing
/// is left pending or buffered.
async fn schedule_checks(w: &World, bad: &mut Vec<String>) {
    let runs = schedule_runs(w).await;
    for (id, every, overlap) in SCHEDULES {
        let (status, s) = w.api(Method::GET, &format!("/v1/schedules/{id}"), None).await;
        if status != 200 {
            bad.push(format!("schedule {id}: GET answered {status}: {s}"));
            continue;
        }
        let prefix = format!("{id}-");
        let mine: Vec<&RunHeader> = runs.iter().filter(|r| r.thread.as_str().starts_with(&prefix)).collect();
        w.trace.count(&format!("schedule.{id}.runs.{}", mine.len().min(20)));
        let fired = s["fired"].as_u64().unwrap_or(0);
        if fired != mine.len() as u64 {
            bad.push(format!(
                "schedule {id}: counted {fired} runs fired, {} exist: {:?}",
                mine.len(),
                mine.iter().map(|r| r.thread.as_str()).collect::<Vec<_>>()
            ));
        }
        if let Some(last) = mine.last() {
            if s["last_run"].as_str() != Some(last.thread.as_str()) {
                bad.push(format!(
                    "schedule {id}: last run {} but the latest run is {}",
                    s["last_run"], last.thread
                ));
            }
        }
        if let Some(p) = pending_of(w, id).await {
            bad.push(format!("schedule {id}: runs left pending at the end: {p}"));
        }
        if let Some(b) = buffered_of(w, id).await {
            bad.push(format!("schedule {id}: a firing left buffered at the end: {b}"));
        }
        match overlap {
            "skip" | "buffer_one" => {
                for pair in mine.windows(2) {
                    let (a, b) = (pair[0], pair[1]);
                    if a.finished_at.is_none_or(|f| b.created_at < f) {
                        bad.push(format!(
                            "schedule {id} ({overlap}): {} created at {} while {} was open (ended {:?})",
                            b.thread, b.created_at, a.thread, a.finished_at
                        ));
                    }
                }
            }
            _ => {
                let times = firing_times(id, &runs);
                for pair in times.windows(2) {
                    if pair[1] - pair[0] != every as i64 {
                        bad.push(format!(
                            "schedule {id} (allow_all): firings {} and {} are not {every} s apart",
                            pair[0], pair[1]
                        ));
                    }
                }
                if s["skipped"].as_u64().unwrap_or(0) > 0 {
                    bad.push(format!("schedule {id} (allow_all): skipped firings: {s}"));
                }
            }
        }
    }
}

/// The firing times (s) of the runs of schedule `id`, from their thread ids.
fn firing_times(id: &str, runs: &[RunHeader]) -> Vec<i64> {
    let prefix = format!("{id}-");
    runs.iter()
        .filter_map(|r| {
            let stamp = r.thread.as_str().strip_prefix(&prefix)?;
            chrono::NaiveDateTime::parse_from_str(stamp, "%Y%m%dT%H%M%SZ")
                .ok()
                .map(|t| t.and_utc().timestamp())
        })
        .collect()
}

/// A resume's catch-up rule, and delete: `allow_all`, resumed after the checks, makes up no
/// firing missed while it was paused (its next run fires at or after the resume), and once
/// deleted it is gone.
async fn schedule_resume_checks(w: &World, bad: &mut Vec<String>) {
    let Some((id, _, _)) = SCHEDULES.iter().find(|(_, _, overlap)| *overlap == "allow_all") else {
        return;
    };
    let before = firing_times(id, &schedule_runs(w).await);
    let resumed_ms = w.server_ms() as i64;
    match w.api(Method::POST, &format!("/v1/schedules/{id}/resume"), None).await {
        (200, _) => {}
        (code, body) => {
            bad.push(format!("schedule {id}: resume answered {code}: {body}"));
            return;
        }
    }
    let mut new = Vec::new();
    for _ in 0..300 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        new = firing_times(id, &schedule_runs(w).await);
        new.retain(|t| !before.contains(t));
        if !new.is_empty() {
            break;
        }
    }
    w.trace.count("schedule.resumed");
    if new.is_empty() {
        bad.push(format!("schedule {id}: no firing within 30 s of its resume"));
    }
    if let Some(t) = new.iter().find(|t| **t * 1000 < resumed_ms) {
        bad.push(format!(
            "schedule {id}: resumed at {resumed_ms} ms, it made up the firing at {t} s missed while paused"
        ));
    }
    match w.api(Method::DELETE, &format!("/v1/schedules/{id}"), None).await {
        (200 | 204, _) => {}
        (code, body) => bad.push(format!("schedule {id}: delete answered {code}: {body}")),
    }
    match w.api(Method::GET, &format!("/v1/schedules/{id}"), None).await {
        (404, _) => {}
        (code, body) => bad.push(format!("schedule {id}: deleted, GET answered {code}: {body}")),
    }
}

/// The invariants of the features beyond effects and runs (module doc, 1 and 6-8).
async fn feature_checks(
    w: &World,
    runs: &[(ThreadId, Value, u64)],
    kinds: &[Kind],
    cancelled_at: &[Option<u64>],
    operated: &Operated,
    bad: &mut Vec<String>,
) {
    let provider = &w.provider;
    // 1. A block effect's function is called at most once, and once more after the operator
    // resolved it "not applied" (a call cut off before it reached the provider).
    for (key, n) in provider.calls() {
        let resolved = (operated.resolved.iter())
            .filter(|(_, k, applied)| *k == key && !applied)
            .count() as u32;
        let resolved = resolved + operated.reruns_of(&key) as u32;
        if n > 1 + resolved && workload::BLOCK_KEYS.iter().any(|p| key.starts_with(p)) {
            bad.push(format!("block effect {key} was called {n} times"));
        }
    }
    // 6. Flow control: never over the limit; nothing held or waiting once every run ended
    // (after the slots of slices that died expire).
    bad.extend(provider.over_limit());
    for (k, n) in provider.most_inside() {
        let short = k.rsplit('-').next().unwrap_or_default();
        w.trace.count(&format!("flow.most_inside.{short}.{n}"));
    }
    let cfg = w.store.config();
    tokio::time::sleep(cfg.lease + cfg.grace + Duration::from_millis(100)).await;
    let now = w.server_ms();
    for (key, _) in workload::FLOW_KEYS {
        let fk = format!("metered:{SECRET}-{key}");
        let keys = w.store.keys();
        let Ok(name) = w.store.flow_name(&fk).await else {
            bad.push(format!("flow key {fk}: its Redis name could not be derived"));
            continue;
        };
        let fk = name.into_owned();
        let held: Vec<String> = w
            .store
            .query(
                redis::cmd("ZRANGEBYSCORE")
                    .arg(keys.flow_slots(&fk))
                    .arg(now)
                    .arg("+inf"),
            )
            .await
            .unwrap_or_default();
        let waiting: Vec<String> = w
            .store
            .query(redis::cmd("ZRANGE").arg(keys.flow_wait(&fk)).arg(0).arg(-1))
            .await
            .unwrap_or_default();
        // (A run that ended while a stale slice of it queued again is dropped from the line
        // by the next acquire after the stale interval: only live runs in line count.)
        let mut live = Vec::new();
        for t in waiting {
            let Ok(id) = ThreadId::new(t.clone()) else { continue };
            if w.read(&id).await.is_some_and(|(h, _)| !h.status.is_final()) {
                live.push(t);
            }
        }
        let waiting = live;
        if !held.is_empty() || !waiting.is_empty() {
            bad.push(format!(
                "flow key {fk}: slots still held by {held:?}, in line {waiting:?}, after every run ended"
            ));
        }
    }
    // 7. Children.
    for (i, (t, _, _)) in runs.iter().enumerate() {
        if kinds[i] != Kind::Parent {
            continue;
        }
        let Some((h, _)) = w.read(t).await else { continue };
        for link in &h.children {
            let child = &link.thread;
            let Some((c, _)) = w.read(child).await else {
                if cancelled_at[i].is_none() {
                    bad.push(format!("child {child} of {t} was linked but never created"));
                }
                continue;
            };
            w.trace.count(&format!("child.end.{}", c.status.as_str()));
            if !c.status.is_final() && c.status != RunStatus::Blocked {
                bad.push(format!(
                    "child {child} of {t} never ended: {}: {}",
                    c.status.as_str(),
                    w.holdings(child).await
                ));
            }
            if c.status == RunStatus::Blocked && !c.reason.as_deref().unwrap_or("").contains("outcome unknown") {
                bad.push(format!(
                    "child {child} blocked for a reason the workload cannot cause: {:?}",
                    c.reason
                ));
            }
            // A child reached by its parent's cancel ends cancelled; one the cascade missed
            // (a write of it failed) may finish the slice under way, but starts none after
            // the cancel: it checks its parent at each claim.
            if let Some(at) = cancelled_at[i] {
                let before = c.finished_at.is_some_and(|f| f <= at);
                if c.status != RunStatus::Cancelled && !before && link.on_parent_cancel == ParentCancel::Cancel {
                    let events = w.store.events(child, 10_000).await.unwrap_or_default();
                    let late: Vec<u64> = events
                        .iter()
                        .filter(|e| (e.typ == "claimed" || e.typ == "takeover") && e.at > at)
                        .map(|e| e.at)
                        .collect();
                    w.trace.count("child.finished_slice_after_cancel");
                    if !late.is_empty() {
                        bad.push(format!(
                            "child {child} of {t} (cancelled at {at}) ended {} at {:?} after slices claimed at {late:?}",
                            c.status.as_str(),
                            c.finished_at
                        ));
                    }
                }
            }
        }
        let k = w.store.keys().run(t);
        let fields: Vec<String> = w
            .store
            .query(redis::cmd("HKEYS").arg(&k.signals))
            .await
            .unwrap_or_default();
        // A child's word is kept only for a call not yet journaled (its one reader); the
        // signals hash of an ended run expires with it.
        let run_fields: Vec<String> = w.store.query(redis::cmd("HKEYS").arg(&k.run)).await.unwrap_or_default();
        let words: Vec<&String> = fields
            .iter()
            .filter(|f| f.starts_with("s:child:"))
            .filter(|f| {
                let index = f.trim_start_matches("s:child:").split(':').next().unwrap_or_default();
                run_fields.iter().any(|r| *r == format!("j:{index}"))
            })
            .collect();
        if !words.is_empty() {
            bad.push(format!(
                "run {t} ({}) holds child words for calls it journaled: {words:?}",
                h.status.as_str()
            ));
        }
        let held = fields.iter().filter(|f| f.starts_with("s:child:")).count();
        if held > h.children.len() {
            bad.push(format!(
                "run {t} holds {held} child words for {} children",
                h.children.len()
            ));
        }
        if h.status.is_final() && !fields.is_empty() {
            let ttl: i64 = w.store.query(redis::cmd("PTTL").arg(&k.signals)).await.unwrap_or(0);
            if ttl < 0 {
                bad.push(format!(
                    "run {t} ended ({}) but its signals hash never expires",
                    h.status.as_str()
                ));
            }
        }
    }
    // 8. Sealed payloads: no plaintext marker anywhere in the namespace.
    let dump = dump_namespace(&w.store).await;
    let mut leaks: BTreeMap<String, usize> = BTreeMap::new();
    for (k, v) in &dump {
        if k.contains(SECRET) || v.windows(SECRET.len()).any(|x| x == SECRET.as_bytes()) {
            *leaks.entry(k.clone()).or_default() += 1;
        }
    }
    for (k, n) in leaks {
        bad.push(format!("{n} plaintext value(s) of an input in (or as the name of) {k}"));
    }
    w.trace.count("sealed.values_dumped");
}

/// How long after the heal the fleet is quiet (stalls begun before it have ended, leases of
/// crashed workers expired and their runs handed on): a deadline that passes later is met
/// within [`DEADLINE_SLACK_MS`].
const QUIET_AFTER_HEAL_MS: u64 = 8000;

/// How late a run may end after its deadline on a quiet fleet: a sleeping or waiting run is
/// due at its deadline, found within a scan interval and failed by the claim; a call in flight
/// is dropped at once.
const DEADLINE_SLACK_MS: u64 = 1000;

/// Invariant 11, timeouts: no function of a run is entered at or after its deadline (as the
/// provider saw it); a run fails as timed out only with a deadline and never before it; on a
/// quiet fleet a run ends within the slack of its deadline (unless it is blocked on an effect
/// in doubt: blocked runs wait for an operator).
async fn deadline_checks(
    w: &World,
    runs: &[(ThreadId, Value, u64)],
    healed_at: u64,
    operated: &Operated,
    bad: &mut Vec<String>,
) {
    let base = SERVER_BASE_US / 1000;
    let entered = w.provider.entered();
    let quiet_from = base + healed_at + QUIET_AFTER_HEAL_MS;
    for (t, _, _) in runs {
        let Some((h, _)) = w.read(t).await else { continue };
        let timed_out = h.status == RunStatus::Failed
            && (h.error.as_deref()).is_some_and(|r| r.starts_with("timed out: the run's deadline"));
        let Some(deadline) = h.deadline else {
            if timed_out {
                bad.push(format!(
                    "run {t} has no deadline but failed as timed out: {:?}",
                    h.error
                ));
            }
            continue;
        };
        if timed_out {
            w.trace.count("deadline.timed_out");
        }
        w.trace.count(&format!("deadline.end.{}", h.status.as_str()));
        for (run, what, at) in entered.iter().filter(|(run, _, _)| run == t.as_str()) {
            if base + at >= deadline {
                bad.push(format!(
                    "run {run}: {what} entered at {} ms, {} ms after the run's deadline (or at it)",
                    base + at,
                    base + at - deadline
                ));
            }
        }
        let finished = h.finished_at.unwrap_or(u64::MAX);
        if timed_out && finished < deadline {
            bad.push(format!(
                "run {t} failed as timed out at {finished}, before its deadline {deadline}"
            ));
        }
        // (A blocked run waits for its operator, whenever that comes.)
        let operated_on = operated.resolved.iter().any(|(r, _, _)| r == t)
            || operated.misshapen.iter().any(|(r, _)| r == t)
            || operated.retried.contains(t);
        if deadline >= quiet_from && h.status != RunStatus::Blocked && !operated_on {
            w.trace.count("deadline.after_quiet");
            if finished > deadline + DEADLINE_SLACK_MS {
                bad.push(format!(
                    "run {t} ended {} {} ms after its deadline {deadline} on a quiet fleet: {:?}",
                    h.status.as_str(),
                    finished.saturating_sub(deadline),
                    h.error.as_ref().or(h.reason.as_ref())
                ));
            }
        }
    }
}
