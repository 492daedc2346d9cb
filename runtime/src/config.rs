//! Configuration: defaults → optional TOML file → `SAVEPOINT_*` environment → CLI flags,
//! validated at start into typed errors (ARCHITECTURE §11). The environment is read through
//! [`Env`] so tests never mutate the process environment.

use serde::Deserialize;
use std::collections::HashMap;
use std::time::Duration;

use crate::security::{SecuritySection, TokenSpec};
use savepoint_broker::{BrokerConfig, Topology};
use savepoint_core::ids::Namespace;
use savepoint_core::keys::{Keys, DEFAULT_PARTITIONS};
use savepoint_core::model::{Checkpoints, SliceLimits};
use savepoint_store::{AckScope, ReplicaAck, StoreConfig};

/// Where environment variables come from.
pub trait Env {
    /// The variable's value, if set.
    fn get(&self, key: &str) -> Option<String>;
}

/// The process environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn get(&self, key: &str) -> Option<String> {
        std::env::var(key).ok()
    }
}

/// A fixed map (tests, embedding).
#[derive(Default, Clone)]
pub struct MapEnv(pub HashMap<String, String>);

impl Env for MapEnv {
    fn get(&self, key: &str) -> Option<String> {
        self.0.get(key).cloned()
    }
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The TOML file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// Path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The TOML file is malformed or has unknown fields.
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// Path.
        path: String,
        /// Cause.
        message: String,
    },
    /// An environment variable does not parse.
    #[error("invalid value {value:?} for {var}: {message}")]
    Env {
        /// Variable.
        var: String,
        /// Value.
        value: String,
        /// Why.
        message: String,
    },
    /// A value is out of range.
    #[error("invalid config: {0}")]
    Invalid(String),
    /// A security setting was refused: tokens, payload keys or TLS files (README "Security").
    #[error("invalid config: {0}")]
    Security(#[from] crate::security::SecurityError),
}

/// Worker settings (`[worker]` in TOML).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkerSection {
    /// Runs executed at once.
    pub concurrency: usize,
    /// AMQP prefetch.
    pub prefetch: u16,
    /// The build's id in its registration (`SAVEPOINT_BUILD_ID`; empty: the digest of what it
    /// serves).
    pub build_id: String,
    /// Live calls per slice before yielding.
    pub slice_max_steps: u32,
    /// Wall time per slice before yielding (ms).
    pub slice_max_ms: u64,
    /// Journal entries per run.
    pub max_entries: u32,
    /// Bytes of journal per run (entries as stored); a run past it fails with the reason.
    pub max_journal_bytes: u64,
    /// When a step's checkpoint is acknowledged: `pipelined` (sent at once, acknowledged
    /// before anything the run does outside itself) or `sync` (before the next call).
    pub checkpoints: String,
    /// Journal entries this worker keeps, over all runs, between a run's slices, so that its
    /// next slice here reads only the entries past them (0: keep none; each resume reads the
    /// whole journal).
    pub journal_cache_entries: usize,
    /// Workflow bodies this worker keeps parked at most: a body that suspends (a sleep, a
    /// wait) or yields with its journal durable stays parked, and the run's next slice on this
    /// worker goes on from it instead of replaying the journal (its entries count in
    /// `journal_cache_entries`; past this many, the bodies parked longest give way to their
    /// journals; 0: every slice replays from the top). A parked body of a small workflow
    /// holds about 30 KB (docs/PERFORMANCE.md).
    pub parked_bodies: usize,
    /// How long (ms) the task of a run whose journal or parked body this worker keeps waits
    /// in the worker's own sticky queue for it before it goes on to the run's task queue,
    /// where any worker takes it (0: every task goes to the task queue).
    pub sticky_ms: u32,
    /// How long (ms) every slot of this worker may be busy before it gives back the tasks the
    /// broker pushed to it and it has not started (sticky ones included), for a worker with a
    /// free slot, when the fleet has one; 0: it never does (a task it holds waits for its own
    /// next free slot, however long that takes).
    pub hand_back_ms: u64,
    /// How long SIGTERM waits for in-flight slices (ms).
    pub shutdown_grace_ms: u64,
    /// Health/metrics listener.
    pub http_addr: String,
    /// Name prefix of the worker's incarnation id.
    pub name: String,
    /// Task queues this worker consumes, comma-separated (e.g. `gpu` or `default,gpu`);
    /// empty: the deployment's queue (`queue`) alone.
    pub queues: String,
}

impl WorkerSection {
    /// The sticky queues' TTL in effect (ms; 0: none): `sticky_ms`, if the worker keeps
    /// journals (a sticky queue serves only the runs whose journal or body it keeps).
    pub fn sticky_in_effect(&self) -> u32 {
        if self.journal_cache_entries > 0 {
            self.sticky_ms
        } else {
            0
        }
    }
}

impl Default for WorkerSection {
    fn default() -> Self {
        Self {
            concurrency: 64,
            prefetch: 128,
            build_id: String::new(),
            slice_max_steps: 64,
            slice_max_ms: 10_000,
            max_entries: 10_000,
            max_journal_bytes: 16 * 1024 * 1024,
            checkpoints: "pipelined".into(),
            journal_cache_entries: 100_000,
            parked_bodies: 2_000,
            sticky_ms: 2_000,
            hand_back_ms: 1_000,
            shutdown_grace_ms: 10_000,
            http_addr: "127.0.0.1:7071".into(),
            name: "worker".into(),
            queues: String::new(),
        }
    }
}

/// Scheduler settings (`[scheduler]` in TOML).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerSection {
    /// HTTP API listener.
    pub http_addr: String,
    /// Due scanner tick (ms).
    pub scan_interval_ms: u64,
    /// Runs handed out per partition per tick.
    pub scan_batch: u32,
    /// Largest accepted run input / request body (bytes).
    pub max_input_bytes: usize,
    /// Largest accepted signal or resume value (bytes of JSON).
    pub max_signal_bytes: usize,
}

impl Default for SchedulerSection {
    fn default() -> Self {
        Self {
            http_addr: "127.0.0.1:7070".into(),
            scan_interval_ms: 200,
            scan_batch: 500,
            max_input_bytes: 256 * 1024,
            max_signal_bytes: 64 * 1024,
        }
    }
}

/// The whole configuration of a Savepoint process.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// RabbitMQ URL.
    pub amqp_url: String,
    /// Redis URL: `redis://` / `rediss://` for one server, `redis+cluster://host:port,…` (or
    /// `rediss+cluster://`) for a Redis Cluster through its seed nodes, `mem://NAME` for the
    /// embedded engine.
    pub redis_url: String,
    /// Replicas that must confirm a write in scope (`WAIT`) before it counts; 0 = off.
    pub redis_wait_replicas: u32,
    /// How long a write waits for those replicas (ms); less than the Redis command timeout.
    pub redis_wait_timeout_ms: u64,
    /// Which writes wait: `effects` (effect intent and done) or `writes` (every script).
    pub redis_wait_scope: String,
    /// Namespace of keys and queues.
    pub namespace: String,
    /// Partitions (fixed when a deployment is created).
    pub partitions: u16,
    /// Task queue name.
    pub queue: String,
    /// Delete queues unused this long (`x-expires`, ms); 0 = never. For throwaway namespaces.
    /// Must be the same in every process of the namespace: RabbitMQ keeps a queue's arguments,
    /// and a process with another value stops at start-up (`BrokerError::QueueMismatch`).
    pub queue_expires_ms: u32,
    /// Lease length (ms).
    pub lease_ms: u64,
    /// Grace after lease expiry before the scanner rings again (ms).
    pub grace_ms: u64,
    /// Safety margin of the worker's local lease deadline (ms): a worker acts under a lease
    /// only until `sent + lease_ms - lease_margin_ms` of the request Redis last confirmed.
    pub lease_margin_ms: u64,
    /// Redis command (response) timeout (ms); 0 = a third of the lease. At most half the
    /// lease, so a hung command cannot outlive the lease it runs under.
    pub redis_timeout_ms: u64,
    /// How long a run whose task the broker confirmed waits before the scanner rings it
    /// again (ms); doubles with every unanswered ring, up to an hour. Only a lost message
    /// needs this, so it is long: the queue, not the scanner, carries the backlog.
    pub queued_redeliver_ms: u64,
    /// How long a worker's registration (the workflows and versions it serves) lives
    /// without a heartbeat (ms). New runs start at the newest version a live worker serves.
    pub worker_ttl_ms: u64,
    /// Takeovers of a run at the same journal position (its worker died or stalled each
    /// time) before the run is blocked as a poison run.
    pub max_crashes: u32,
    /// Safety-net redelivery delay (ms).
    pub redeliver_ms: u64,
    /// Retention of finished runs (s).
    pub retention_secs: u64,
    /// Retention of effect dedup records (s).
    pub effect_ttl_secs: u64,
    /// Events kept per run.
    pub event_cap: u32,
    /// Signals a run may hold before it asks for them; more are refused (HTTP 429).
    pub max_buffered_signals: u32,
    /// How often a parent waiting for a child run looks at it again (ms). The child's word
    /// when it ends wakes the parent at once; this only bounds the delay when that word was
    /// lost to a crash.
    pub child_poll_ms: u64,
    /// `text` or `json` logs.
    pub log_format: String,
    /// Failpoints (`name=action;…`).
    pub failpoints: String,
    /// Worker section.
    pub worker: WorkerSection,
    /// Scheduler section.
    pub scheduler: SchedulerSection,
    /// Security section: API tokens, payload keys, TLS (README "Security").
    pub security: SecuritySection,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            amqp_url: "amqp://guest:guest@127.0.0.1:5672/%2f".into(),
            redis_url: "redis://127.0.0.1:6379".into(),
            redis_wait_replicas: 0,
            redis_wait_timeout_ms: 100,
            redis_wait_scope: "effects".into(),
            namespace: "sp".into(),
            partitions: DEFAULT_PARTITIONS,
            queue: "default".into(),
            queue_expires_ms: 0,
            lease_ms: 3000,
            grace_ms: 250,
            lease_margin_ms: 500,
            redis_timeout_ms: 0,
            queued_redeliver_ms: 300_000,
            worker_ttl_ms: 10_000,
            max_crashes: 5,
            redeliver_ms: 5000,
            retention_secs: 7 * 24 * 3600,
            effect_ttl_secs: 30 * 24 * 3600,
            event_cap: 1000,
            max_buffered_signals: 1000,
            child_poll_ms: 30_000,
            log_format: "text".into(),
            failpoints: String::new(),
            worker: WorkerSection::default(),
            scheduler: SchedulerSection::default(),
            security: SecuritySection::default(),
        }
    }
}

fn env_parse<T: std::str::FromStr>(env: &dyn Env, var: &str, slot: &mut T) -> Result<(), ConfigError>
where
    T::Err: std::fmt::Display,
{
    if let Some(v) = env.get(var) {
        *slot = v.trim().parse().map_err(|e: T::Err| ConfigError::Env {
            var: var.into(),
            value: v.clone(),
            message: e.to_string(),
        })?;
    }
    Ok(())
}

impl Config {
    /// Defaults, then the TOML file named by `file` or `SAVEPOINT_CONFIG`, then the environment.
    /// Validated.
    pub fn load(file: Option<&str>, env: &dyn Env) -> Result<Self, ConfigError> {
        let path = file.map(str::to_owned).or_else(|| env.get("SAVEPOINT_CONFIG"));
        let mut cfg = match path {
            Some(path) => {
                let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                })?;
                toml::from_str(&text).map_err(|e| ConfigError::Parse {
                    path,
                    message: e.to_string(),
                })?
            }
            None => Config::default(),
        };
        cfg.apply_env(env)?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Overrides fields from `SAVEPOINT_*` variables.
    pub fn apply_env(&mut self, env: &dyn Env) -> Result<(), ConfigError> {
        env_parse(env, "SAVEPOINT_AMQP_URL", &mut self.amqp_url)?;
        env_parse(env, "SAVEPOINT_REDIS_URL", &mut self.redis_url)?;
        env_parse(env, "SAVEPOINT_REDIS_WAIT_REPLICAS", &mut self.redis_wait_replicas)?;
        env_parse(env, "SAVEPOINT_REDIS_WAIT_TIMEOUT_MS", &mut self.redis_wait_timeout_ms)?;
        env_parse(env, "SAVEPOINT_REDIS_WAIT_SCOPE", &mut self.redis_wait_scope)?;
        env_parse(env, "SAVEPOINT_NAMESPACE", &mut self.namespace)?;
        env_parse(env, "SAVEPOINT_PARTITIONS", &mut self.partitions)?;
        env_parse(env, "SAVEPOINT_QUEUE", &mut self.queue)?;
        env_parse(env, "SAVEPOINT_QUEUE_EXPIRES_MS", &mut self.queue_expires_ms)?;
        env_parse(env, "SAVEPOINT_LEASE_MS", &mut self.lease_ms)?;
        env_parse(env, "SAVEPOINT_GRACE_MS", &mut self.grace_ms)?;
        env_parse(env, "SAVEPOINT_LEASE_MARGIN_MS", &mut self.lease_margin_ms)?;
        env_parse(env, "SAVEPOINT_REDIS_TIMEOUT_MS", &mut self.redis_timeout_ms)?;
        env_parse(env, "SAVEPOINT_QUEUED_REDELIVER_MS", &mut self.queued_redeliver_ms)?;
        env_parse(env, "SAVEPOINT_WORKER_TTL_MS", &mut self.worker_ttl_ms)?;
        env_parse(env, "SAVEPOINT_MAX_CRASHES", &mut self.max_crashes)?;
        env_parse(env, "SAVEPOINT_REDELIVER_MS", &mut self.redeliver_ms)?;
        env_parse(env, "SAVEPOINT_RETENTION_SECS", &mut self.retention_secs)?;
        env_parse(env, "SAVEPOINT_EFFECT_TTL_SECS", &mut self.effect_ttl_secs)?;
        env_parse(env, "SAVEPOINT_EVENT_CAP", &mut self.event_cap)?;
        env_parse(env, "SAVEPOINT_LOG_FORMAT", &mut self.log_format)?;
        env_parse(env, "SAVEPOINT_FAILPOINTS", &mut self.failpoints)?;
        let w = &mut self.worker;
        env_parse(env, "SAVEPOINT_WORKER_CONCURRENCY", &mut w.concurrency)?;
        env_parse(env, "SAVEPOINT_WORKER_PREFETCH", &mut w.prefetch)?;
        env_parse(env, "SAVEPOINT_BUILD_ID", &mut w.build_id)?;
        env_parse(env, "SAVEPOINT_SLICE_MAX_STEPS", &mut w.slice_max_steps)?;
        env_parse(env, "SAVEPOINT_SLICE_MAX_MS", &mut w.slice_max_ms)?;
        env_parse(env, "SAVEPOINT_MAX_ENTRIES", &mut w.max_entries)?;
        env_parse(env, "SAVEPOINT_MAX_JOURNAL_BYTES", &mut w.max_journal_bytes)?;
        env_parse(env, "SAVEPOINT_CHECKPOINTS", &mut w.checkpoints)?;
        env_parse(env, "SAVEPOINT_JOURNAL_CACHE_ENTRIES", &mut w.journal_cache_entries)?;
        env_parse(env, "SAVEPOINT_PARKED_BODIES", &mut w.parked_bodies)?;
        env_parse(env, "SAVEPOINT_STICKY_MS", &mut w.sticky_ms)?;
        env_parse(env, "SAVEPOINT_HAND_BACK_MS", &mut w.hand_back_ms)?;
        env_parse(env, "SAVEPOINT_SHUTDOWN_GRACE_MS", &mut w.shutdown_grace_ms)?;
        env_parse(env, "SAVEPOINT_WORKER_HTTP_ADDR", &mut w.http_addr)?;
        env_parse(env, "SAVEPOINT_WORKER_QUEUES", &mut w.queues)?;
        env_parse(env, "SAVEPOINT_WORKER_NAME", &mut w.name)?;
        let s = &mut self.scheduler;
        env_parse(env, "SAVEPOINT_HTTP_ADDR", &mut s.http_addr)?;
        env_parse(env, "SAVEPOINT_SCAN_INTERVAL_MS", &mut s.scan_interval_ms)?;
        env_parse(env, "SAVEPOINT_SCAN_BATCH", &mut s.scan_batch)?;
        env_parse(env, "SAVEPOINT_MAX_INPUT_BYTES", &mut s.max_input_bytes)?;
        env_parse(env, "SAVEPOINT_MAX_SIGNAL_BYTES", &mut s.max_signal_bytes)?;
        env_parse(env, "SAVEPOINT_MAX_BUFFERED_SIGNALS", &mut self.max_buffered_signals)?;
        env_parse(env, "SAVEPOINT_CHILD_POLL_MS", &mut self.child_poll_ms)?;
        let sec = &mut self.security;
        if let Some(v) = env.get("SAVEPOINT_API_TOKENS") {
            let specs = TokenSpec::parse_list(&v).map_err(|e| ConfigError::Env {
                var: "SAVEPOINT_API_TOKENS".into(),
                value: "<not shown>".into(),
                message: e.to_string(),
            })?;
            sec.api_tokens.extend(specs);
        }
        env_parse(env, "SAVEPOINT_API_TOKENS_FILE", &mut sec.api_tokens_file)?;
        env_parse(env, "SAVEPOINT_ALLOW_OPEN_BIND", &mut sec.allow_open_bind)?;
        env_parse(env, "SAVEPOINT_RATE_LIMIT_PER_SEC", &mut sec.rate_limit_per_sec)?;
        env_parse(env, "SAVEPOINT_RATE_LIMIT_BURST", &mut sec.rate_limit_burst)?;
        if let Some(v) = env.get("SAVEPOINT_PAYLOAD_KEYS") {
            sec.payload_keys.0 = v;
        }
        env_parse(env, "SAVEPOINT_PAYLOAD_KEYS_FILE", &mut sec.payload_keys_file)?;
        env_parse(env, "SAVEPOINT_REDIS_TLS_CA", &mut sec.redis_tls.ca)?;
        env_parse(env, "SAVEPOINT_REDIS_TLS_CERT", &mut sec.redis_tls.cert)?;
        env_parse(env, "SAVEPOINT_REDIS_TLS_KEY", &mut sec.redis_tls.key)?;
        env_parse(env, "SAVEPOINT_AMQP_TLS_CA", &mut sec.amqp_tls.ca)?;
        env_parse(env, "SAVEPOINT_AMQP_TLS_CERT", &mut sec.amqp_tls.cert)?;
        env_parse(env, "SAVEPOINT_AMQP_TLS_KEY", &mut sec.amqp_tls.key)?;
        Ok(())
    }

    /// Checks ranges and formats.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_store()?;
        self.validate_runs()?;
        self.validate_limits()?;
        savepoint_core::failpoints::Failpoints::parse(&self.failpoints)
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        self.validate_security()
    }

    /// The store's settings: namespace, partitions, lease and Redis timeouts, cluster seeds and
    /// replication acknowledgement.
    fn validate_store(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        Namespace::new(self.namespace.clone()).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        if self.partitions == 0 || self.partitions > 1024 {
            return bad(format!("partitions must be 1..=1024, got {}", self.partitions));
        }
        if self.lease_ms < 200 {
            return bad(format!("lease_ms must be at least 200, got {}", self.lease_ms));
        }
        if self.lease_margin_ms * 2 >= self.lease_ms {
            return bad(format!(
                "lease_margin_ms ({}) must be less than half of lease_ms ({})",
                self.lease_margin_ms, self.lease_ms
            ));
        }
        if self.redis_timeout_ms != 0 && (self.redis_timeout_ms < 50 || self.redis_timeout_ms * 2 > self.lease_ms) {
            return bad(format!(
                "redis_timeout_ms ({}) must be 0 (a third of the lease) or from 50 to half of lease_ms ({}): \
                 a Redis command must not outlive the lease it runs under",
                self.redis_timeout_ms, self.lease_ms
            ));
        }
        if let Some(Err(e)) = savepoint_store::cluster::seed_urls(&self.redis_url) {
            return bad(e.to_string());
        }
        if !["effects", "writes"].contains(&self.redis_wait_scope.as_str()) {
            return bad(format!(
                "redis_wait_scope must be effects or writes, got {:?}",
                self.redis_wait_scope
            ));
        }
        if self.redis_wait_replicas > 0
            && (self.redis_wait_timeout_ms == 0 || self.redis_wait_timeout_ms >= self.redis_command_timeout_ms())
        {
            return bad(format!(
                "redis_wait_timeout_ms ({}) must be positive and less than the Redis command timeout ({} ms)",
                self.redis_wait_timeout_ms,
                self.redis_command_timeout_ms()
            ));
        }
        Ok(())
    }

    /// Run timing and retention: redelivery, worker liveness and crashes, worker queues, the
    /// positive durations and the child poll against the retention.
    fn validate_runs(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.queued_redeliver_ms < self.redeliver_ms {
            return bad(format!(
                "queued_redeliver_ms ({}) must be at least redeliver_ms ({})",
                self.queued_redeliver_ms, self.redeliver_ms
            ));
        }
        if self.worker_ttl_ms < 1000 || self.max_crashes == 0 {
            return bad("worker_ttl_ms must be at least 1000 and max_crashes at least 1".into());
        }
        for q in self.worker_queues() {
            if q != self.queue {
                savepoint_broker::valid_queue(&q).map_err(|e| ConfigError::Invalid(format!("worker.queues: {e}")))?;
            }
        }
        if self.retention_secs == 0
            || self.effect_ttl_secs == 0
            || self.redeliver_ms == 0
            || self.event_cap == 0
            || self.child_poll_ms == 0
        {
            return bad(
                "retention_secs, effect_ttl_secs, redeliver_ms, event_cap and child_poll_ms must be positive".into(),
            );
        }
        // A waiting parent learns a child's end from its word, or at the latest at its next
        // poll; a child that ended is kept for the retention only, so a poll as slow as the
        // retention would read a child that was there as "does not exist".
        if self.child_poll_ms.saturating_mul(10) > self.retention_secs.saturating_mul(1000) {
            return bad(format!(
                "child_poll_ms ({} ms, SAVEPOINT_CHILD_POLL_MS) must be at most a tenth of retention_secs ({} s, \
                 SAVEPOINT_RETENTION_SECS): a parent polls its children, and a child that ended is kept for the \
                 retention only",
                self.child_poll_ms, self.retention_secs
            ));
        }
        Ok(())
    }

    /// Worker and scheduler limits and the log format.
    fn validate_limits(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.worker.concurrency == 0 {
            return bad("worker.concurrency must be at least 1".into());
        }
        if self.worker.sticky_ms > 600_000 {
            return bad(format!(
                "worker.sticky_ms (SAVEPOINT_STICKY_MS) is {} ms; a task waits that long for a worker that may \
                 be gone: use at most 600000 (a few seconds is plenty; 0 turns sticky queues off)",
                self.worker.sticky_ms
            ));
        }
        if self.worker.hand_back_ms > 600_000 {
            return bad(format!(
                "worker.hand_back_ms (SAVEPOINT_HAND_BACK_MS) is {} ms; a task held by a busy worker waits that \
                 long while another worker has room: use at most 600000 (the default 1000; 0 never hands back)",
                self.worker.hand_back_ms
            ));
        }
        if self.worker.slice_max_steps == 0 || self.worker.max_entries == 0 {
            return bad("worker.slice_max_steps and worker.max_entries must be at least 1".into());
        }
        if Checkpoints::parse(&self.worker.checkpoints).is_none() {
            return bad(format!(
                "worker.checkpoints (SAVEPOINT_CHECKPOINTS) must be pipelined or sync, got {:?}",
                self.worker.checkpoints
            ));
        }
        if !["text", "json"].contains(&self.log_format.as_str()) {
            return bad(format!("log_format must be text or json, got {:?}", self.log_format));
        }
        if self.scheduler.scan_interval_ms == 0 || self.scheduler.max_input_bytes == 0 {
            return bad("scheduler.scan_interval_ms and max_input_bytes must be positive".into());
        }
        if self.scheduler.max_signal_bytes == 0 || self.max_buffered_signals == 0 || self.worker.max_journal_bytes == 0
        {
            return bad(
                "scheduler.max_signal_bytes, max_buffered_signals and worker.max_journal_bytes must be positive".into(),
            );
        }
        Ok(())
    }

    /// Tokens parse, payload keys parse, TLS files exist and match the URLs' schemes.
    fn validate_security(&self) -> Result<(), ConfigError> {
        let sec = &self.security;
        sec.tokens()?;
        sec.codec()?;
        if sec.rate_limit_per_sec > 0 && sec.rate_limit_burst == 0 {
            return Err(ConfigError::Invalid(
                "rate_limit_burst must be at least 1 when rate_limit_per_sec is set".into(),
            ));
        }
        let redis_tls = self.redis_url.starts_with("rediss://") || self.redis_url.starts_with("rediss+cluster://");
        sec.redis_tls.check("redis_tls", redis_tls)?;
        sec.redis_tls.load("redis_tls")?;
        let nodes: Vec<&str> = self
            .amqp_url
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .collect();
        let amqps = nodes.iter().filter(|u| u.starts_with("amqps://")).count();
        if amqps != 0 && amqps != nodes.len() {
            return Err(ConfigError::Invalid(
                "amqp_url mixes amqps:// and amqp:// nodes: every node of a cluster is TLS or none is".into(),
            ));
        }
        sec.amqp_tls.check("amqp_tls", amqps != 0)?;
        sec.amqp_tls.load("amqp_tls")?;
        Ok(())
    }

    /// The key layout.
    pub fn keys(&self) -> Keys {
        // validate() checked the namespace; an invalid one degrades to the default.
        let ns = Namespace::new(self.namespace.clone()).unwrap_or_else(|_| Namespace::default_ns());
        Keys::new(ns, self.partitions)
    }

    /// The task queues a worker consumes (`worker.queues`, else the deployment's `queue`).
    pub fn worker_queues(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for q in self.worker.queues.split(',').map(str::trim).filter(|q| !q.is_empty()) {
            if !out.iter().any(|o| o == q) {
                out.push(q.to_owned());
            }
        }
        if out.is_empty() {
            out.push(self.queue.clone());
        }
        out
    }

    /// Store timings.
    pub fn store(&self) -> StoreConfig {
        StoreConfig {
            lease: Duration::from_millis(self.lease_ms),
            grace: Duration::from_millis(self.grace_ms),
            lease_margin: Duration::from_millis(self.lease_margin_ms),
            command_timeout: Duration::from_millis(self.redis_command_timeout_ms()),
            queued_redeliver: Duration::from_millis(self.queued_redeliver_ms),
            worker_ttl: Duration::from_millis(self.worker_ttl_ms),
            max_crashes: self.max_crashes,
            redeliver: Duration::from_millis(self.redeliver_ms),
            retention: Duration::from_secs(self.retention_secs),
            effect_ttl: Duration::from_secs(self.effect_ttl_secs),
            event_cap: self.event_cap,
            max_buffered_signals: self.max_buffered_signals,
            child_poll: Duration::from_millis(self.child_poll_ms),
            // validate() read both; a file that vanished since degrades to none here and the
            // store then refuses sealed values it cannot open (never writes plaintext silently
            // in place of sealed ones: see README "Key rotation").
            codec: self.security.codec().ok().flatten(),
            tls: self.security.redis_tls.load("redis_tls").unwrap_or_default(),
            // A worker that consumes sticky queues turns it on for its own store.
            sticky: false,
            replica_ack: (self.redis_wait_replicas > 0).then(|| ReplicaAck {
                replicas: self.redis_wait_replicas,
                timeout: Duration::from_millis(self.redis_wait_timeout_ms),
                scope: if self.redis_wait_scope == "writes" {
                    AckScope::Writes
                } else {
                    AckScope::Effects
                },
            }),
        }
    }

    /// The Redis command timeout in force: `redis_timeout_ms`, or a third of the lease.
    pub fn redis_command_timeout_ms(&self) -> u64 {
        if self.redis_timeout_ms == 0 {
            (self.lease_ms / 3).max(50)
        } else {
            self.redis_timeout_ms
        }
    }

    /// Broker settings.
    pub fn broker(&self) -> BrokerConfig {
        BrokerConfig {
            amqp_url: self.amqp_url.clone(),
            topology: Topology::new(&self.namespace, &self.queue).with_expiry(self.queue_expires_ms),
            prefetch: self.worker.prefetch,
            delivery_limit: 20,
            reconnect_min: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(5),
            tls: self.security.amqp_tls.load("amqp_tls").unwrap_or_default(),
        }
    }

    /// Slice budgets.
    pub fn limits(&self) -> SliceLimits {
        SliceLimits {
            max_steps: self.worker.slice_max_steps,
            max_time: Duration::from_millis(self.worker.slice_max_ms),
            max_entries: self.worker.max_entries,
            max_journal_bytes: self.worker.max_journal_bytes,
            checkpoints: Checkpoints::parse(&self.worker.checkpoints).unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> MapEnv {
        MapEnv(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    #[test]
    fn defaults_validate() {
        let c = Config::load(None, &env(&[])).unwrap();
        assert_eq!(c.scheduler.http_addr, "127.0.0.1:7070");
        assert_eq!(c.namespace, "sp");
    }

    #[test]
    fn env_overrides_and_errors() {
        let c = Config::load(
            None,
            &env(&[("SAVEPOINT_NAMESPACE", "t1"), ("SAVEPOINT_LEASE_MS", "1500")]),
        )
        .unwrap();
        assert_eq!((c.namespace.as_str(), c.lease_ms), ("t1", 1500));
        assert!(matches!(
            Config::load(None, &env(&[("SAVEPOINT_LEASE_MS", "soon")])),
            Err(ConfigError::Env { .. })
        ));
        assert!(matches!(
            Config::load(None, &env(&[("SAVEPOINT_NAMESPACE", "Bad NS")])),
            Err(ConfigError::Invalid(_))
        ));
        assert!(matches!(
            Config::load(None, &env(&[("SAVEPOINT_FAILPOINTS", "x=abort")])),
            Err(ConfigError::Invalid(_))
        ));
        // The Redis timeout is a fraction of the lease; the margin leaves room to act.
        let c = Config::load(None, &env(&[("SAVEPOINT_LEASE_MS", "1500")])).unwrap();
        assert_eq!(c.redis_command_timeout_ms(), 500);
        for (var, val) in [
            ("SAVEPOINT_REDIS_TIMEOUT_MS", "2000"),
            ("SAVEPOINT_LEASE_MARGIN_MS", "1500"),
            ("SAVEPOINT_QUEUED_REDELIVER_MS", "10"),
        ] {
            match Config::load(None, &env(&[(var, val)])) {
                Err(ConfigError::Invalid(m)) => assert!(m.contains(&var[10..].to_ascii_lowercase()), "{m}"),
                other => panic!("{var}={val} accepted: {other:?}"),
            }
        }
    }

    /// A parent's poll of its children must come well within the time an ended child is
    /// kept, or a child that was there would be read as missing.
    #[test]
    fn a_child_poll_as_slow_as_the_retention_is_refused_at_start_up() {
        let slow = [("SAVEPOINT_RETENTION_SECS", "60"), ("SAVEPOINT_CHILD_POLL_MS", "30000")];
        match Config::load(None, &env(&slow)) {
            Err(ConfigError::Invalid(m)) => {
                assert!(m.contains("SAVEPOINT_CHILD_POLL_MS") && m.contains("a tenth"), "{m}")
            }
            other => panic!("accepted: {other:?}"),
        }
        let fine = [("SAVEPOINT_RETENTION_SECS", "60"), ("SAVEPOINT_CHILD_POLL_MS", "6000")];
        assert!(Config::load(None, &env(&fine)).is_ok());
    }

    #[test]
    fn toml_rejects_unknown_fields() {
        let dir = std::env::temp_dir().join(format!("sp-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.toml");
        std::fs::write(&good, "namespace = \"abc\"\n[worker]\nconcurrency = 4\n").unwrap();
        let c = Config::load(Some(good.to_str().unwrap()), &env(&[])).unwrap();
        assert_eq!((c.namespace.as_str(), c.worker.concurrency), ("abc", 4));
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, "namespce = \"abc\"\n").unwrap();
        assert!(matches!(
            Config::load(Some(bad.to_str().unwrap()), &env(&[])),
            Err(ConfigError::Parse { .. })
        ));
    }
}
