//! Prometheus metrics (OpenTelemetry-style names), one registry per process. The process
//! runtime serves them at `/metrics`; every crate of the engine counts into the same registry.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::OnceLock;

type Labels = Vec<(&'static str, String)>;

/// Every metric of a process.
pub struct Metrics {
    registry: Registry,
    /// Journal calls committed, by workflow, kind and outcome (`ok`, `error`, `skipped`).
    pub steps: Family<Labels, Counter>,
    /// Live step duration (seconds), including retries.
    pub step_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    /// Commit script round trip (seconds).
    pub commit_seconds: Histogram,
    /// Claims by outcome (`claimed`, `takeover`, `stale`, `leased`, `terminal`, …).
    pub claims: Family<Labels, Counter>,
    /// Effects by outcome (`applied`, `skipped`, `in_doubt`, `busy`, `failed`).
    pub effects: Family<Labels, Counter>,
    /// Slices ended, by how (`completed`, `failed`, `suspended`, `yielded`, `blocked`, `lease_lost`, `transient`).
    pub slices: Family<Labels, Counter>,
    /// Tasks published, by reason.
    pub published: Family<Labels, Counter>,
    /// Of those, the tasks a worker sent to its own sticky queue, by reason.
    pub sticky: Family<Labels, Counter>,
    /// Sticky tasks a worker took past their queue's TTL (prefetched while it had no free
    /// slot) and sent on to the task queue instead of starting them late.
    pub sticky_expired: Family<Labels, Counter>,
    /// Tasks a worker whose every slot was busy gave back for a worker with room, by how:
    /// `published` again to their queue, `passed_on` (sticky, to the task queue), or
    /// `requeued` (the broker refused the publish).
    pub handed_back: Family<Labels, Counter>,
    /// Messages dead-lettered, by reason class.
    pub dead_lettered: Family<Labels, Counter>,
    /// Runs started via the API, by outcome.
    pub runs_started: Family<Labels, Counter>,
    /// How late overdue runs were when the scanner handed them out (seconds).
    pub due_lag_seconds: Histogram,
    /// Runs handed out by the scanner.
    pub scanned: Counter,
    /// Duration of one due-scanner tick over the partitions this replica owns (seconds).
    pub scan_tick_seconds: Histogram,
    /// Partitions this scheduler replica's due scanner owns.
    pub scan_partitions: Gauge,
    /// Runs in flight in this worker.
    pub inflight: Gauge,
    /// Broker reconnects.
    pub reconnects: Gauge,
    /// HTTP requests by route and status.
    pub http_requests: Family<Labels, Counter>,
    /// Runs blocked, by reason class (`poison`, `effect_in_doubt`, `non_determinism`, …).
    pub blocks: Family<Labels, Counter>,
    /// Runs a worker gave back because it does not serve their workflow version.
    pub unserved: Family<Labels, Counter>,
    /// Runs whose safety-net due time moved out because the broker confirmed their task.
    pub queue_marked: Counter,
    /// Runs a pause has stopped (status `paused`), as the scheduler's pause sweep last counted.
    pub runs_paused: Gauge,
    /// Pause and resume requests, by `action` (`pause`, `resume`) and `scope` (`run`,
    /// `workflow`, `version`, `queue`, `filter`).
    pub pauses: Family<Labels, Counter>,
    /// Slices started, by how they began (`parked`: the run's body, parked at its last slice
    /// here, went on; `held`: the journal read only past what this worker kept from the run's
    /// last slice here; `whole`).
    pub resumes: Family<Labels, Counter>,
}

fn latency() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 18))
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("savepoint");
        let m = Self {
            steps: Family::default(),
            step_seconds: Family::new_with_constructor(latency as fn() -> Histogram),
            commit_seconds: latency(),
            claims: Family::default(),
            effects: Family::default(),
            slices: Family::default(),
            published: Family::default(),
            sticky: Family::default(),
            sticky_expired: Family::default(),
            handed_back: Family::default(),
            dead_lettered: Family::default(),
            runs_started: Family::default(),
            due_lag_seconds: latency(),
            scanned: Counter::default(),
            scan_tick_seconds: latency(),
            scan_partitions: Gauge::default(),
            inflight: Gauge::default(),
            reconnects: Gauge::default(),
            http_requests: Family::default(),
            blocks: Family::default(),
            unserved: Family::default(),
            queue_marked: Counter::default(),
            resumes: Family::default(),
            runs_paused: Gauge::default(),
            pauses: Family::default(),
            registry: Registry::default(),
        };
        m.register_engine(&mut registry);
        m.register_operations(&mut registry);
        Self { registry, ..m }
    }

    /// Registers what the engine's hot paths count: steps, commits, claims, effects, slices.
    fn register_engine(&self, registry: &mut Registry) {
        let m = self;
        registry.register("steps", "Journal calls committed", m.steps.clone());
        registry.register("step_duration_seconds", "Live step duration", m.step_seconds.clone());
        registry.register(
            "commit_duration_seconds",
            "Commit script round trip",
            m.commit_seconds.clone(),
        );
        registry.register("claims", "Claims by outcome", m.claims.clone());
        registry.register("effects", "Effects by outcome", m.effects.clone());
        registry.register("slices", "Slices ended, by how", m.slices.clone());
    }

    /// Registers what the scheduler, the API and the fleet count.
    fn register_operations(&self, registry: &mut Registry) {
        let m = self;
        registry.register("tasks_published", "Tasks published, by reason", m.published.clone());
        registry.register(
            "tasks_sticky",
            "Tasks a worker sent to its own sticky queue (counted in tasks_published too), by reason",
            m.sticky.clone(),
        );
        registry.register(
            "tasks_sticky_passed_on",
            "Sticky tasks a busy worker took past their queue's TTL and sent on to the task queue",
            m.sticky_expired.clone(),
        );
        registry.register(
            "tasks_handed_back",
            "Tasks a worker whose every slot was busy gave back for a worker with room, by how",
            m.handed_back.clone(),
        );
        registry.register("dead_lettered", "Messages dead-lettered", m.dead_lettered.clone());
        registry.register("runs_started", "Runs started via the API", m.runs_started.clone());
        registry.register(
            "due_lag_seconds",
            "Lateness of overdue runs when handed out",
            m.due_lag_seconds.clone(),
        );
        registry.register(
            "scanner_handed_out",
            "Runs handed out by the due scanner",
            m.scanned.clone(),
        );
        registry.register(
            "scanner_tick_seconds",
            "Duration of one due-scanner tick over the partitions this replica owns",
            m.scan_tick_seconds.clone(),
        );
        registry.register(
            "scanner_partitions",
            "Partitions this scheduler replica's due scanner owns",
            m.scan_partitions.clone(),
        );
        registry.register("runs_inflight", "Runs executing in this worker", m.inflight.clone());
        registry.register("broker_reconnects", "Broker reconnects", m.reconnects.clone());
        registry.register("http_requests", "HTTP requests", m.http_requests.clone());
        registry.register("runs_blocked", "Runs blocked, by reason class", m.blocks.clone());
        registry.register(
            "runs_unserved",
            "Runs given back because this worker does not serve their workflow version",
            m.unserved.clone(),
        );
        registry.register(
            "tasks_marked_queued",
            "Runs left to their confirmed queued task by the safety net",
            m.queue_marked.clone(),
        );
        registry.register(
            "slice_journal_reads",
            "Slices started, by how their journal was read (held: only what is new)",
            m.resumes.clone(),
        );
        registry.register(
            "runs_paused",
            "Runs a pause has stopped, as the pause sweep last counted",
            m.runs_paused.clone(),
        );
        registry.register(
            "pauses",
            "Pause and resume requests, by action and scope",
            m.pauses.clone(),
        );
    }

    /// Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// The process-wide metrics.
pub fn metrics() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(Metrics::new)
}

/// Label helper: `labels(&[("workflow", "invoice")])`.
pub fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
}

/// Increments a labelled counter.
pub fn inc(f: &Family<Labels, Counter>, pairs: &[(&'static str, &str)]) {
    f.get_or_create(&labels(pairs)).inc();
}
