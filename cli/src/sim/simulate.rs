use axum::http::Method;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use savepoint::workflow::Registry;
use savepoint_broker::Broker;
use savepoint_core::failpoints::Failpoints;
use savepoint_core::ids::ThreadId;
use savepoint_core::mem::{Faults, SCHEME};
use savepoint_runtime::config::Config;
use savepoint_runtime::ops::Readiness;
use savepoint_runtime::security::Redacted;
use savepoint_scheduler::assembly;
use savepoint_scheduler::{run_scanner, Publisher, ScanSettings};
use savepoint_store::mem::{install_engine, MemEngine};
use savepoint_store::{BlockKind, RunHeader, RunStatus, ScriptStore};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::busy::{busy_worker, Liveness};
use super::checks::{deadline_checks, feature_checks, operator_checks, scanner_checks, written_order};
use super::faults::{Plan, Trace};
use super::operate::{operate, Operated};
use super::pausing::Pausing;
use super::runner::{SeedReport, SimArgs};
use super::schedules::{schedule_checks, schedule_resume_checks, schedules_open, SCHEDULES};
use super::stop::{long_stop, retention, type_move};
use super::workload;
use super::workload::Provider;
use super::world::{check_growth, sim_name, Kind, Seen, World, KEY_K1, KEY_K2, SECRET, SERVER_BASE_US};

/// The runs, schedules and faults of one seed, driven to their end and checked
/// (the phases below, in order).
pub(super) async fn simulate(seed: u64, args: &SimArgs) -> SeedReport {
    let name = sim_name(seed);
    let mut sim = match assemble(seed, args, &name).await {
        Ok(sim) => sim,
        Err(e) => return failed(seed, e.to_string()),
    };
    let mut load = plan_runs(&mut sim.w, args);
    let mut p = Progress::new(load.runs.len());
    p.pausing = Pausing::new(seed);
    sim.plan.on.store(true, Ordering::Release);
    sim.w.trace.line(
        0,
        format!("chaos on: {} runs, {} workers", load.runs.len(), args.workers),
    );
    drive(&mut sim, &mut load, &mut p, args).await;
    let operated = if p.violations.is_empty() {
        operate(&mut sim.w, &load.runs, &load.kinds, &sim.provider, &mut p.violations).await
    } else {
        Operated::default()
    };
    final_checks(&mut sim, &load, &mut p, &operated, args).await;
    if p.violations.is_empty() {
        busy_worker(&mut sim.w, &mut p.live, &mut p.violations).await;
    }
    p.live.check(&mut p.violations);
    if p.violations.is_empty() {
        long_stop(&mut sim.w, &mut p.violations).await;
        type_move(&mut sim.w, &mut p.violations).await;
        retention(&sim.w, &mut p.violations).await;
    }
    finish(seed, &name, sim, p.violations).await
}

/// Why a seed's engine could not be connected.
#[derive(Debug)]
enum SetupError {
    /// The embedded store refused.
    Store(savepoint_store::StoreError),
    /// The embedded queue refused.
    Broker(savepoint_broker::BrokerError),
}

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Store(e) => write!(f, "store: {e}"),
            Self::Broker(e) => write!(f, "broker: {e}"),
        }
    }
}

/// A seed that could not even start (its report is the one violation).
fn failed(seed: u64, what: String) -> SeedReport {
    SeedReport {
        seed,
        trace_hash: 0,
        violations: vec![what],
        trace: vec![],
        stats: BTreeMap::new(),
    }
}

/// One seed's moving parts: the world the driver acts on, the fault plan, the provider
/// that witnesses effects, and the scanner replicas.
struct Sim {
    w: World,
    plan: Arc<Plan>,
    provider: Arc<Provider>,
    trace: Arc<Trace>,
    stop: CancellationToken,
    scanners: Scanners,
}

/// The configuration of a seed's engine: an embedded instance, short leases, slices of two
/// calls, sealed payloads under key k1.
fn sim_config(name: &str) -> Config {
    let url = format!("{SCHEME}{name}");
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
    cfg
}

/// Connects the embedded store and queue under the fault plan, and starts the API with two
/// schedule firers, two scanner replicas and the workers.
async fn assemble(seed: u64, args: &SimArgs, name: &str) -> Result<Sim, SetupError> {
    // A fixed server clock: the same seed sees the same timestamps.
    install_engine(name, MemEngine::starting_at(SERVER_BASE_US));
    let mut cfg = sim_config(name);
    if args.no_hand_back {
        cfg.worker.hand_back_ms = 0;
    }
    let trace = Arc::new(Trace::default());
    let started = tokio::time::Instant::now();
    let jumped = Arc::new(AtomicU64::new(0));
    let plan = Arc::new(Plan {
        rng: Mutex::new(StdRng::seed_from_u64(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15))),
        on: AtomicBool::new(false),
        trace: Arc::clone(&trace),
        clock: started,
        lease_ms: cfg.lease_ms,
        stalled_until: AtomicU64::new(0),
        jumped: Arc::clone(&jumped),
    });
    let store = ScriptStore::connect(&cfg.redis_url, cfg.keys(), cfg.store())
        .await
        .map_err(SetupError::Store)?;
    let broker = Broker::connect(cfg.broker(), Duration::from_secs(1))
        .await
        .map_err(SetupError::Broker)?;
    if let Some(engine) = store.mem_engine() {
        engine.set_faults(Some(plan.clone() as Arc<dyn Faults>));
    }
    if let Some(q) = broker.mem_queue() {
        q.set_faults(Some(plan.clone() as Arc<dyn Faults>));
    }
    let stop = CancellationToken::new();
    let publisher = Publisher::new(broker, cfg.keys(), Failpoints::default());
    // Two scheduler replicas race to fire the same schedules.
    let router = assembly::control_plane(&cfg, store.clone(), publisher.clone(), Readiness::default(), 2, &stop)
        .expect("the simulator's config has no tokens to parse");
    let scanners = Scanners::start(seed, args, &cfg, &store, &publisher, &stop);
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
        deployed: false,
        rolled: false,
        pinned: None,
        exits: Arc::default(),
        witnessed: Arc::default(),
        queue: publisher.broker().mem_queue().cloned(),
        jumped,
    };
    for i in 0..args.workers {
        w.start_worker(i);
    }
    Ok(Sim {
        w,
        plan,
        provider,
        trace,
        stop,
        scanners,
    })
}

/// A scanner replica: its task and the token that stops it.
type Replica = (JoinHandle<()>, CancellationToken);

/// The due scanner's replicas. Two race for the same due runs. On even seeds they split the
/// partitions by their live registrations instead; one crashes during the chaos (its
/// registration expires) and another takes its place, and at the heal one leaves cleanly and
/// another takes its place: no partition is left unscanned.
struct Scanners {
    running: Vec<Replica>,
    spawn: Box<dyn Fn() -> Replica>,
    split: bool,
    crash_at: u64,
    back_at: u64,
    crashed: bool,
    back: bool,
}

impl Scanners {
    /// Starts the first two replicas and draws when the first one crashes.
    fn start(
        seed: u64,
        args: &SimArgs,
        cfg: &Config,
        store: &ScriptStore,
        publisher: &Publisher,
        stop: &CancellationToken,
    ) -> Self {
        let split = seed.is_multiple_of(2);
        let settings = ScanSettings {
            interval: Duration::from_millis(cfg.scheduler.scan_interval_ms),
            batch: cfg.scheduler.scan_batch.max(1),
            period: cfg.store().redeliver,
            split,
        };
        let (scan_store, scan_publisher, scan_stop) = (store.clone(), publisher.clone(), stop.clone());
        let spawn = move || {
            let own = scan_stop.child_token();
            let join = tokio::spawn(run_scanner(
                scan_store.clone(),
                scan_publisher.clone(),
                settings.clone(),
                own.clone(),
            ));
            (join, own)
        };
        let running = (0..2).map(|_| spawn()).collect();
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5CA7_7E11);
        let crash_at = rng.random_range(500..args.chaos_ms / 2);
        let back_at = crash_at + rng.random_range(300..4000u64);
        Self {
            running,
            spawn: Box::new(spawn),
            split,
            crash_at,
            back_at,
            crashed: false,
            back: false,
        }
    }

    /// At the heal (split seeds): a replica leaves (a rolling deploy) and a new one joins.
    fn roll(&mut self, trace: &Trace, now: u64) {
        if self.split {
            self.running[1].1.cancel();
            self.running.push((self.spawn)());
            trace.line(now, "scanner 1 left; another joined".into());
        }
    }

    /// Split seeds: the first replica crashes when its time comes, and another joins a while
    /// later (or at the heal).
    fn crash_and_replace(&mut self, trace: &Trace, now: u64, healed: bool) {
        if !self.split {
            return;
        }
        if !self.crashed && now >= self.crash_at {
            self.crashed = true;
            self.running[0].0.abort();
            trace.line(now, "scanner 0 crashed".into());
        }
        if self.crashed && !self.back && (now >= self.back_at || healed) {
            self.back = true;
            self.running.push((self.spawn)());
            trace.line(now, "a scanner replica joined".into());
        }
    }
}

/// The runs a seed's clients start: each run's id, start request and start time (ms), its
/// kind, and when an operator cancels it (parents only).
struct Workload {
    runs: Vec<(ThreadId, Value, u64)>,
    kinds: Vec<Kind>,
    cancel_plan: Vec<Option<u64>>,
    /// Runs planned at or after this time (half the chaos: approvals for the rolling deploy)
    /// start that long after the key rotation, whenever a stalled driver makes it.
    after_rotation: u64,
}

/// Draws the seed's runs: a mix of kinds, some with deadlines, some parents to cancel.
fn plan_runs(w: &mut World, args: &SimArgs) -> Workload {
    let mut kinds = Vec::new();
    let mut cancel_plan = Vec::new();
    let runs = (0..args.runs)
        .map(|i| {
            let (t, body, at, kind, cancel) = plan_run(w, args, i);
            kinds.push(kind);
            cancel_plan.push(cancel);
            (t, body, at)
        })
        .collect();
    Workload {
        runs,
        kinds,
        cancel_plan,
        after_rotation: args.chaos_ms / 2,
    }
}

/// Draws the `i`th run: its kind, start time, deadline and, for a parent, its cancel time.
fn plan_run(w: &mut World, args: &SimArgs, i: usize) -> (ThreadId, Value, u64, Kind, Option<u64>) {
    let x = w.rng.random::<f64>();
    let secret = format!("{SECRET}-{i}");
    let kind = if x < 0.3 {
        Kind::Order
    } else if x < 0.45 {
        Kind::Approve
    } else if x < 0.6 {
        Kind::Metered
    } else if x < 0.75 {
        Kind::Parent
    } else if x < 0.88 {
        Kind::Batch
    } else {
        Kind::Pace
    };
    let t = ThreadId::new(format!("sim-run-{i}")).unwrap_or_else(|_| ThreadId::generate("sim"));
    // Runs start in the first half of the chaos; half the approvals right after it, in the
    // first half of the rolling deploy (invariant 16), where workers of both builds run.
    let half = args.chaos_ms / 2;
    let at = match kind {
        Kind::Approve if w.rng.random::<bool>() => w.rng.random_range(half..half + args.chaos_ms / 8),
        _ => w.rng.random_range(0..half),
    };
    // Some runs have a deadline: short ones pass during the chaos (in a call, a
    // sleep, a line or a takeover); a long sleep's passes after the heal.
    let timed = kind != Kind::Parent && w.rng.random::<f64>() < 0.35;
    let long_nap = timed && kind == Kind::Order && w.rng.random::<f64>() < 0.5;
    let nap_ms = if long_nap {
        w.rng.random_range(13_000..18_000u64)
    } else {
        w.rng.random_range(0..4000u64)
    };
    let mut body = start_request(w, kind, &t, i, nap_ms, &secret);
    if timed {
        let secs = if long_nap {
            w.rng.random_range(13..=16u64)
        } else {
            w.rng.random_range(1..=6u64)
        };
        body["timeout_secs"] = json!(secs);
    }
    let cancel =
        (kind == Kind::Parent && w.rng.random::<f64>() < 0.4).then(|| w.rng.random_range(at..args.chaos_ms + 2000));
    (t, body, at, kind, cancel)
}

/// The body of the `POST /v1/runs` that starts a run of `kind`.
fn start_request(w: &mut World, kind: Kind, t: &ThreadId, i: usize, nap_ms: u64, secret: &str) -> Value {
    match kind {
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
        Kind::Pace => json!({"workflow": "pace", "thread_id": t.as_str(),
            "input": {"id": i, "steps": w.rng.random_range(6..=14u64), "secret": secret}}),
    }
}

/// Where the driver stands: what it created, cancelled and saw, and what it found wrong.
struct Progress {
    /// When each cancelled parent's cancel was acknowledged (server ms).
    cancelled_at: Vec<Option<u64>>,
    created: Vec<bool>,
    seen: Vec<Seen>,
    /// When the key rotation (and the rolling deploy) began.
    rotated_at: Option<u64>,
    /// The rolling deploy the key rotation began, while it goes on.
    rolling: Option<Rolling>,
    /// The schedules (created at the start, paused at the heal) and where each stands.
    sched_created: [bool; SCHEDULES.len()],
    sched_paused: [bool; SCHEDULES.len()],
    healed: bool,
    /// When the heal came (the driver's own calls may stall past the planned heal).
    healed_at: u64,
    /// The pause taken in the middle of the chaos (invariant 14).
    pausing: Pausing,
    /// How long a task waited while a worker asked for one, since the heal (invariant 18).
    live: Liveness,
    violations: Vec<String>,
}

impl Progress {
    /// Nothing created yet, for `runs` planned runs.
    fn new(runs: usize) -> Self {
        Self {
            cancelled_at: vec![None; runs],
            created: vec![false; runs],
            seen: (0..runs).map(|_| Seen::default()).collect(),
            rotated_at: None,
            rolling: None,
            sched_created: [false; SCHEDULES.len()],
            sched_paused: [false; SCHEDULES.len()],
            healed: false,
            healed_at: 0,
            pausing: Pausing::default(),
            live: Liveness::default(),
            violations: Vec::new(),
        }
    }
}

/// The chaos and the heal, every 50 ms of simulated time, until every run and schedule has
/// ended after the heal (or 240 s after it, a violation).
async fn drive(sim: &mut Sim, load: &mut Workload, p: &mut Progress, args: &SimArgs) {
    let heal_at = args.chaos_ms;
    let deadline = heal_at + 240_000;
    p.healed_at = heal_at;
    let mut tick = 0u64;
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        tick += 1;
        let now = sim.w.now();
        if !p.healed && now >= heal_at {
            heal(sim, p, now);
        }
        sim.scanners.crash_and_replace(&sim.trace, now, p.healed);
        if !p.healed {
            crash_a_worker_now_and_then(&mut sim.w, args);
        } else if let Some(q) = &sim.w.queue {
            p.live.sample(q);
        }
        // (Also after the heal: the rotation may restart workers late in a stalled seed.)
        sim.w.restart_due_workers(false);
        if p.rotated_at.is_none() && now >= args.chaos_ms / 2 {
            rotate_keys(&mut sim.w, p, now, args);
        }
        roll_on(&mut sim.w, p, now, args);
        cancel_due_parents(&sim.w, load, p, now).await;
        start_due_runs(&mut sim.w, load, p, now).await;
        p.pausing.drive(&sim.w, now, args.chaos_ms).await;
        p.pausing
            .sample(&sim.w, now, args.chaos_ms, &load.runs, &load.kinds)
            .await;
        // Key names live only while in use (a flow key's slots and line): look at them
        // during the run, not only in the final dump.
        if tick.is_multiple_of(10) {
            watch_key_names(&sim.w, &mut p.violations).await;
        }
        if !tick.is_multiple_of(4) {
            continue;
        }
        let mut open = read_runs(&mut sim.w, load, p, now).await;
        drive_schedules(&sim.w, p, now).await;
        if p.healed {
            open += p.sched_paused.iter().filter(|paused| !**paused).count();
            open += schedules_open(&sim.w).await;
        }
        // (Every stall injected before the heal has played out, too.)
        if p.healed && open == 0 && now >= sim.plan.stalled_until.load(Ordering::Acquire) {
            sim.w.trace.line(now, "every run ended".into());
            break;
        }
        if now > deadline {
            p.violations.push(format!(
                "{open} run(s) still open {} s after the heal",
                (now - heal_at) / 1000
            ));
            break;
        }
    }
}

/// The heal: faults stop, every worker comes back, a scanner replica rolls.
fn heal(sim: &mut Sim, p: &mut Progress, now: u64) {
    p.healed = true;
    p.healed_at = now;
    sim.plan.on.store(false, Ordering::Release);
    sim.w.restart_due_workers(true);
    sim.w.trace.line(now, "heal: faults off, every worker back".into());
    sim.scanners.roll(&sim.trace, now);
}

/// A crash now and then; a crashed worker comes back after a while.
fn crash_a_worker_now_and_then(w: &mut World, args: &SimArgs) {
    if w.rng.random::<f64>() < 0.02 {
        let i = w.rng.random_range(0..args.workers);
        let down = w.rng.random_range(100..3000u64);
        w.crash_worker(i, down);
    }
}

/// Key rotation and a rolling deploy: every worker restarts sealing with k2 (k1 still opens),
/// running the second build (`approve` records a versioned value and upgrades the first
/// build's). The first worker restarts now; the others go on with the first build for a
/// quarter of the chaos (unless a crash restarts them sooner). Halfway through, the first
/// worker goes down until the others roll, and the approvals held until then are answered, so
/// the first build's workers alone meet the runs the second build wrote values into: they
/// must give those back untouched (invariant 16 sees none blocked), and the second build's
/// workers take them once they are up.
fn rotate_keys(w: &mut World, p: &mut Progress, now: u64, args: &SimArgs) {
    p.rotated_at = Some(now);
    w.cfg.security.payload_keys = Redacted(format!("{KEY_K2},{KEY_K1}"));
    w.deployed = true;
    w.trace.line(
        now,
        "rotate: workers restart sealing with k2, on the second build, one first".into(),
    );
    let down = w.rng.random_range(10..300u64);
    w.crash_worker(0, down);
    let gap = args.chaos_ms / 4;
    p.rolling = Some(Rolling {
        first_down_at: now + gap / 2,
        first_down: false,
        rest_at: now + gap,
    });
}

/// The rest of the rolling deploy the key rotation began.
#[derive(Clone, Copy)]
struct Rolling {
    /// When the first worker (on the second build) goes down until `rest_at`. Until then the
    /// human answers no approval (the answers a run of the second build waits for reach the
    /// first build's workers).
    first_down_at: u64,
    first_down: bool,
    /// When the workers still on the first build restart on the second.
    rest_at: u64,
}

impl Progress {
    /// Whether approvals wait (the first half of the rolling deploy).
    fn holds_answers(&self, now: u64) -> bool {
        self.rolling.is_some_and(|r| now < r.first_down_at)
    }
}

/// Carries the rolling deploy on at `now` (see [`rotate_keys`]).
fn roll_on(w: &mut World, p: &mut Progress, now: u64, args: &SimArgs) {
    let Some(r) = p.rolling else { return };
    if r.first_down_at <= now && !r.first_down {
        w.trace
            .line(now, "rotate: the first worker goes down until the others roll".into());
        w.crash_worker(0, r.rest_at.saturating_sub(now));
        p.rolling = Some(Rolling { first_down: true, ..r });
    }
    if r.rest_at <= now {
        w.trace
            .line(now, "rotate: the other workers restart on the second build".into());
        w.rolled = true;
        for i in 1..args.workers {
            let down = w.rng.random_range(10..300u64);
            w.crash_worker(i, down);
        }
        p.rolling = None;
    }
}

/// Operators cancel some parents while their children work.
async fn cancel_due_parents(w: &World, load: &mut Workload, p: &mut Progress, now: u64) {
    for i in 0..load.runs.len() {
        let due = load.cancel_plan[i].is_some_and(|at| at <= now);
        if !due || !p.created[i] || p.cancelled_at[i].is_some() {
            continue;
        }
        let t = &load.runs[i].0;
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
            (_, Some(at)) => p.cancelled_at[i] = Some(at),
            // It had ended: nothing to cancel.
            (409, None) => load.cancel_plan[i] = None,
            _ => {}
        }
    }
}

/// Clients start their runs (retrying until the API answers, sometimes twice).
async fn start_due_runs(w: &mut World, load: &Workload, p: &mut Progress, now: u64) {
    for (i, (t, body, at)) in load.runs.iter().enumerate() {
        let due = match p.rotated_at {
            _ if *at < load.after_rotation => *at,
            Some(r) => r + (*at - load.after_rotation),
            None => continue,
        };
        if p.created[i] || due > now {
            continue;
        }
        let (status, resp) = w.api(Method::POST, "/v1/runs", Some(body.clone())).await;
        if status == 201 || status == 200 {
            p.created[i] = true;
            w.trace.line(now, format!("started {t} ({status})"));
            if w.rng.random::<f64>() < 0.2 {
                let (again, _) = w.api(Method::POST, "/v1/runs", Some(body.clone())).await;
                w.trace.line(now, format!("started {t} again ({again})"));
                // The same start again is the same run (a 5xx under a fault is fine).
                if again == 201 {
                    p.violations
                        .push(format!("a repeated start of {t} created a second run"));
                }
            }
        } else {
            w.trace
                .line(now, format!("start {t} refused ({status}): {resp}; retrying"));
        }
    }
}

/// No key name of the namespace may hold an input's plaintext marker (reported once).
async fn watch_key_names(w: &World, violations: &mut Vec<String>) {
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

/// Reads every run (the growth invariant), answers approvals (the client repeats itself),
/// and counts the runs still open, children started and not awaited included.
async fn read_runs(w: &mut World, load: &Workload, p: &mut Progress, now: u64) -> usize {
    let mut open = 0;
    for (i, (t, _, _)) in load.runs.iter().enumerate() {
        if !p.created[i] {
            open += 1;
            continue;
        }
        let Some((h, journal)) = w.read(t).await else {
            open += 1;
            continue;
        };
        check_growth(t, &mut p.seen[i], &h, &journal, &mut p.violations);
        match h.status {
            // A parent awaiting a child that is blocked (an effect in doubt) waits for an
            // operator, as the child does: it is not stranded.
            RunStatus::Waiting if w.waits_on_blocked_child(&h).await => {}
            RunStatus::Waiting => {
                open += 1;
                if !p.holds_answers(now) {
                    approve(w, t, now).await;
                }
            }
            s if s.is_final() || s == RunStatus::Blocked => {}
            _ => open += 1,
        }
        open += open_children(w, &h).await;
    }
    open
}

/// Answers a waiting run's approval, sometimes twice (the client repeats itself).
async fn approve(w: &mut World, t: &ThreadId, now: u64) {
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

/// Children started and not awaited outlive their parent: how many of `h`'s are still open.
async fn open_children(w: &World, h: &RunHeader) -> usize {
    let mut open = 0;
    for link in &h.children {
        if let Some((c, _)) = w.read(&link.thread).await {
            if !c.status.is_final() && c.status != RunStatus::Blocked && !w.waits_on_blocked_child(&c).await {
                open += 1;
            }
        }
    }
    open
}

/// Schedules: created as the chaos starts (the client retries), paused at the heal; their
/// runs must end like the others.
async fn drive_schedules(w: &World, p: &mut Progress, now: u64) {
    for (j, (id, every, overlap)) in SCHEDULES.iter().enumerate() {
        if !p.sched_created[j] {
            let body = json!({"id": id, "workflow": "tock", "input": {"secret": format!("{SECRET}-{id}")},
                "every_secs": every, "overlap": overlap});
            let (status, _) = w.api(Method::POST, "/v1/schedules", Some(body)).await;
            w.trace.line(now, format!("schedule {id} create: {status}"));
            p.sched_created[j] = status == 201 || status == 200;
        } else if p.healed && !p.sched_paused[j] {
            let (status, _) = w
                .api(
                    Method::POST,
                    &format!("/v1/schedules/{id}/pause"),
                    Some(json!({"note": "heal"})),
                )
                .await;
            w.trace.line(now, format!("schedule {id} pause: {status}"));
            p.sched_paused[j] = status == 200;
        }
    }
}

/// Every invariant, once every run has ended: each run's end, then each feature's contract,
/// the operator's actions, the scanners, and the provider's count of applied effects.
async fn final_checks(sim: &mut Sim, load: &Workload, p: &mut Progress, operated: &Operated, args: &SimArgs) {
    // (Every completed run replays on the build the fleet ended on.)
    let registry = workload::registry(Arc::clone(&sim.provider), args.unguarded, sim.w.build(0));
    for (i, (t, _, _)) in load.runs.iter().enumerate() {
        check_run_end(sim, &registry, t, &mut p.seen[i], operated, &mut p.violations).await;
    }
    let (w, violations) = (&sim.w, &mut p.violations);
    feature_checks(w, &load.runs, &load.kinds, &p.cancelled_at, operated, violations).await;
    deadline_checks(w, &load.runs, p.healed_at, operated, violations).await;
    p.pausing.check(w, &load.runs, &load.kinds, violations).await;
    schedule_checks(w, violations).await;
    if violations.is_empty() {
        schedule_resume_checks(w, violations).await;
    }
    operator_checks(w, operated, &registry, &sim.provider, violations).await;
    if sim.scanners.split {
        scanner_checks(w, &sim.scanners.running, violations).await;
    }
    for (key, fences) in sim.provider.applications() {
        sim.trace.count("effects.applied");
        if fences.len() > 1 + operated.reruns_of(&key) {
            violations.push(format!(
                "effect {key} applied {} times (fences {fences:?})",
                fences.len()
            ));
        }
    }
    violations.extend(w.exits.lock().map(|x| x.clone()).unwrap_or_default());
    violations.extend(w.witnessed.lock().map(|x| x.clone()).unwrap_or_default());
    if sim.provider.refused() > 0 {
        sim.trace.line(
            w.now(),
            format!("provider refused {} stale token(s)", sim.provider.refused()),
        );
    }
}

/// One run at the end: it exists, grew only, ended in a state the workload can cause (a
/// completed run replays to its recorded output), and stayed within the journal and event
/// caps.
async fn check_run_end(
    sim: &Sim,
    registry: &Registry,
    t: &ThreadId,
    seen: &mut Seen,
    operated: &Operated,
    violations: &mut Vec<String>,
) {
    let w = &sim.w;
    let Some((h, journal)) = w.read(t).await else {
        violations.push(format!("run {t} was lost (no record)"));
        return;
    };
    // A restart in place dropped the entries from where it restarted.
    if let Some(r) = operated.restarts.iter().find(|r| r.thread == *t) {
        seen.journal.truncate(r.from);
    }
    check_growth(t, seen, &h, &journal, violations);
    written_order(t, &h, &journal, violations);
    sim.trace.count(&format!("end.{}", h.status.as_str()));
    if h.status == RunStatus::Blocked {
        check_block_reason(&sim.trace, t, &h, violations);
    }
    check_end_status(w, registry, t, &h, violations).await;
    if journal.len() > w.cfg.worker.max_entries as usize {
        violations.push(format!("run {t}: {} journal entries over the cap", journal.len()));
    }
    let cap = w.cfg.event_cap as usize;
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

/// Why a blocked run blocked, counted by class: only an effect in doubt (block policy) or a
/// run that kept crashing may block here: the workload is deterministic code, so any other
/// reason is an engine bug. (A planted bug blocks its run until the operator's retry; still
/// blocked on it after that is checked with the operator's actions.)
fn check_block_reason(trace: &Trace, t: &ThreadId, h: &RunHeader, violations: &mut Vec<String>) {
    let reason = h.reason.as_deref().unwrap_or("");
    let class = match h.block_kind {
        Some(BlockKind::InDoubt) => "in_doubt",
        Some(BlockKind::Poison) => "poison",
        Some(BlockKind::NonDeterminism) => "non_determinism",
        Some(BlockKind::Panic) if workload::blocked_by_planted_bug(h) => "planted_bug",
        _ => "other",
    };
    trace.count(&format!("blocked.{class}"));
    if !matches!(class, "in_doubt" | "poison" | "planted_bug") {
        violations.push(format!(
            "run {t} blocked for a reason the workload cannot cause: {reason}"
        ));
    }
}

/// A run's final status: completed runs replay to their recorded output, blocked ones have
/// a reason, and none is stranded unfinished.
async fn check_end_status(w: &World, registry: &Registry, t: &ThreadId, h: &RunHeader, violations: &mut Vec<String>) {
    match h.status {
        RunStatus::Completed => match savepoint_worker::replay::replay(&w.store, registry, t).await {
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
        RunStatus::Waiting if w.waits_on_blocked_child(h).await => w.trace.count("waiting.on_blocked_child"),
        other => violations.push(format!("run {t} is stranded in {other}: {}", w.holdings(t).await)),
    }
}

/// Stops every task, drops the seed's embedded instances, and reports the trace and its hash.
async fn finish(seed: u64, name: &str, mut sim: Sim, violations: Vec<String>) -> SeedReport {
    sim.stop.cancel();
    for slot in sim.w.workers.iter_mut() {
        if let Some(wk) = slot.take() {
            wk.stop.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(30), wk.join).await;
        }
    }
    savepoint_store::mem::forget(name);
    savepoint_broker::mem::forget(name);
    let lines = sim.trace.lines.lock().map(|l| l.clone()).unwrap_or_default();
    let mut hasher = DefaultHasher::new();
    lines.hash(&mut hasher);
    SeedReport {
        seed,
        trace_hash: hasher.finish(),
        violations,
        trace: lines,
        stats: sim.trace.stats.lock().map(|s| s.clone()).unwrap_or_default(),
    }
}
