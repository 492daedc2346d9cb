use axum::body::Body;
use axum::http::{Method, Request};
use rand::rngs::StdRng;
use savepoint_core::failpoints::Failpoints;
use savepoint_core::ids::ThreadId;
use savepoint_core::journal::Entry;
use savepoint_runtime::config::Config;
use savepoint_store::{RunHeader, RunStatus, ScriptStore};
use savepoint_worker::WorkerOptions;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::faults::Trace;
use super::workload;
use super::workload::Provider;

pub(super) struct SimWorker {
    pub(super) stop: CancellationToken,
    pub(super) crash: CancellationToken,
    pub(super) join: JoinHandle<()>,
    pub(super) down_until: Option<u64>,
}

/// The world of one seed.
pub(super) struct World {
    pub(super) cfg: Config,
    pub(super) store: ScriptStore,
    pub(super) router: axum::Router,
    pub(super) provider: Arc<Provider>,
    pub(super) trace: Arc<Trace>,
    pub(super) rng: StdRng,
    pub(super) stop: CancellationToken,
    pub(super) workers: Vec<Option<SimWorker>>,
    pub(super) started: tokio::time::Instant,
    pub(super) unguarded: bool,
    /// The second build is deployed (`workload::registry`): worker 0 restarts on it, and
    /// once the deploy has `rolled` every worker does (until then the others restart on the
    /// first build, as the old replicas of a rolling deploy do).
    pub(super) deployed: bool,
    pub(super) rolled: bool,
    /// The build every worker starts on from now, whatever the deploy (the type-move phase).
    pub(super) pinned: Option<workload::Build>,
    /// Workers that stopped with an error (each one a violation).
    pub(super) exits: Arc<Mutex<Vec<String>>>,
    /// What the checkpoint barrier's witness saw go wrong (each one a violation).
    pub(super) witnessed: Arc<Mutex<Vec<String>>>,
    pub(super) queue: Option<Arc<savepoint_broker::mem::MemQueue>>,
    /// Virtual time the clock jumped over (ms): the engine's clocks (the store's, the
    /// provider's) include it, the driver's timeline ([`World::now`]) does not.
    pub(super) jumped: Arc<AtomicU64>,
}

/// The simulator's payload keys (fixed, so a seed is reproducible): `k1` seals first; every
/// process knows `k2` from the start (the rotation runbook's first step), and workers started
/// after the rotation seal with it.
pub(super) const KEY_K1: &str = "k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";

pub(super) const KEY_K2: &str = "k2:AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=";

/// The marker every run's input carries; it must never lie in the store as plaintext.
pub(super) const SECRET: &str = "PLAINTEXT-SECRET";

/// What the driver does with run `i`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Kind {
    Order,
    Approve,
    Metered,
    Parent,
    Batch,
    Pace,
}

/// The embedded server's clock at the start of every seed (µs).
pub(super) const SERVER_BASE_US: u64 = 1_767_225_600_000_000;

pub(super) fn sim_name(seed: u64) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("sim-{seed}-{}", N.fetch_add(1, Ordering::Relaxed))
}

impl World {
    /// The driver's timeline (ms): virtual time since the seed began, less the jumps.
    pub(super) fn now(&self) -> u64 {
        (self.started.elapsed().as_millis() as u64).saturating_sub(self.jumped.load(Ordering::Acquire))
    }

    /// The embedded server's clock now (ms): its fixed base plus the virtual time since, jumps
    /// included.
    pub(super) fn server_ms(&self) -> u64 {
        SERVER_BASE_US / 1000 + self.started.elapsed().as_millis() as u64
    }

    /// Every process stops for `d` at once (a suspended machine, a paused fleet): the clock
    /// jumps, and every timer and TTL due meanwhile fires when it resumes.
    pub(super) async fn jump(&self, d: Duration) {
        let now = self.now();
        self.trace
            .line(now, format!("jump: the clock moves on {} s", d.as_secs()));
        self.jumped.fetch_add(d.as_millis() as u64, Ordering::AcqRel);
        tokio::time::advance(d).await;
        // Every process resumes: its timers due meanwhile fire (a worker's registration too).
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    /// The wrapper that puts the barrier's witness between a worker and the store.
    fn witness(&self) -> savepoint_worker::StoreWrap {
        let (found, trace) = (Arc::clone(&self.witnessed), Arc::clone(&self.trace));
        Arc::new(move |inner| super::witness::Witness::wrap(inner, Arc::clone(&found), Arc::clone(&trace)))
    }

    /// The build worker `i` starts on now: the first; once deployed, the second for worker 0;
    /// once rolled, the second with a type moved, for every worker.
    pub(super) fn build(&self, i: usize) -> workload::Build {
        if let Some(b) = self.pinned {
            return b;
        }
        match (self.deployed, self.rolled) {
            (_, true) => workload::Build::Moved,
            (true, false) if i == 0 => workload::Build::Second,
            _ => workload::Build::First,
        }
    }

    pub(super) fn start_worker(&mut self, i: usize) {
        self.start_worker_with(i, "");
    }

    /// Starts worker `i` with failpoints `spec` (`abort` crashes it as `kill -9` would).
    pub(super) fn start_worker_with(&mut self, i: usize, spec: &str) {
        let crash = CancellationToken::new();
        let hook = crash.clone();
        let failpoints = Failpoints::parse(spec)
            .unwrap_or_default()
            .with_crash_hook(move |_| hook.cancel());
        let stop = self.stop.child_token();
        let opts = WorkerOptions {
            registry: workload::registry(Arc::clone(&self.provider), self.unguarded, self.build(i)),
            failpoints: Some(failpoints),
            crash: crash.clone(),
            serve_http: false,
            stubs: None,
            wrap_store: Some(self.witness()),
        };
        let mut cfg = self.cfg.clone();
        cfg.worker.name = format!("w{i}");
        if i == 2 {
            // Room for two parked bodies: the ones parked longest give way to their journals
            // (invariant 17), and their runs' next slices here replay from the held journal.
            cfg.worker.parked_bodies = 2;
        }
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
    pub(super) fn crash_worker(&mut self, i: usize, down_ms: u64) {
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
    pub(super) async fn holdings(&self, t: &ThreadId) -> String {
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
    pub(super) async fn waits_on_blocked_child(&self, h: &RunHeader) -> bool {
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

    pub(super) fn restart_due_workers(&mut self, all: bool) {
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

    pub(super) async fn api(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
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
    pub(super) async fn read(&self, t: &ThreadId) -> Option<(savepoint_store::RunHeader, Vec<Entry>)> {
        let limit = Some(Duration::from_secs(10));
        savepoint_store::until_ok("reading a run", limit, &self.stop, || self.store.get(t))
            .await
            .ok()
            .flatten()
    }
}

/// What the driver remembers of a run between reads (for the growth invariant).
#[derive(Default)]
pub(super) struct Seen {
    pub(super) journal: Vec<Vec<u8>>,
    pub(super) fence: u64,
    pub(super) version: u64,
}

pub(super) fn check_growth(
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

/// Every value and key name of the namespace (an embedded instance has no `TYPE`: each key
/// is read as each kind until one answers).
pub(super) async fn dump_namespace(store: &ScriptStore) -> Vec<(String, Vec<u8>)> {
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
