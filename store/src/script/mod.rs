//! The Redis implementation of the checkpoint store.

mod children;
mod control;
mod effects;
mod fleet;
mod flow;
mod naming;
mod query;
pub(crate) mod reply;
mod scan;
mod schedules;
pub(crate) mod scripts;
mod seal;

use crate::RedisResultExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::sync::Arc;

use super::cluster;
use super::engine::{Conn, Engine, Invocation, ReplicaAck};
#[cfg(feature = "embedded")]
use crate::mem::{self, MemEngine};
use std::time::Duration;

use super::model::{
    journal_from_fields, needs_field, ClaimOutcome, Claimed, CreateOptions, Finish, Lease, RunHeader, RunStatus,
};
use super::StoreError;
use reply::Reply;
use savepoint_core::ids::ThreadId;
use savepoint_core::journal::Entry;
use savepoint_core::keys::Keys;
use scripts::Scripts;

// The outcome types the scripts answer with live in the core crate (plain data).
pub use savepoint_core::outcome::{
    child_signal, CatalogEntry, ChildResult, CreateOutcome, EffectDone, EffectRecord, EffectRelease, EffectUnused,
    Flow, Rerun, Suspend, Suspended,
};

pub use children::Cascade;
pub use control::{Cancelled, ForkOutcome, RestartOutcome, RetryOutcome, SignalOutcome};
pub use fleet::{owns_partition, ServedSpec, WorkerInfo};
pub use flow::{Acquired, FLOW_PARK};
pub use query::{ListFilter, PageCursor, RunEvent};
pub use scan::Rung;
pub use schedules::{Advance, Resealed, SchedulePut, ScheduleRecord};

/// Checkpoint schema version written by this build.
pub const SCHEMA_VERSION: u32 = 1;

/// First back-off of a run given back because the worker does not serve it (doubles).
const UNSERVED_BACKOFF: Duration = Duration::from_millis(250);
/// Longest back-off of a run no live worker serves.
const UNSERVED_BACKOFF_CAP: Duration = Duration::from_secs(10);

/// Timing and retention settings of the store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Lease length; a worker that stops heartbeating loses its runs after this.
    pub lease: Duration,
    /// Extra time after a lease expires before the scanner rings again.
    pub grace: Duration,
    /// Safety margin of a worker's local lease deadline (see [`savepoint_core::lease`]).
    pub lease_margin: Duration,
    /// Redis command (response) timeout: a fraction of the lease.
    pub command_timeout: Duration,
    /// First re-ring delay for a run whose task the broker confirmed (doubles per ring).
    pub queued_redeliver: Duration,
    /// Lifetime of a worker's registration without a heartbeat.
    pub worker_ttl: Duration,
    /// Takeovers at one journal position before a run is blocked as a poison run.
    pub max_crashes: u32,
    /// Safety-net delay: a run made runnable gets a due time this far out in case its task is lost.
    pub redeliver: Duration,
    /// How long finished runs are kept.
    pub retention: Duration,
    /// How long effect dedup records are kept.
    pub effect_ttl: Duration,
    /// Events kept per run (approximate cap of the stream).
    pub event_cap: u32,
    /// Replication acknowledgement of writes (`WAIT`), off when `None`.
    pub replica_ack: Option<ReplicaAck>,
    /// Signals a run may hold before it asks for them.
    pub max_buffered_signals: u32,
    /// How often a parent waiting for a child run looks at it again.
    pub child_poll: Duration,
    /// Seals user payloads before they reach Redis (README "Security"); `None`: plaintext.
    pub codec: Option<crate::codec::PayloadCodec>,
    /// CA and client certificate for `rediss://`.
    pub tls: savepoint_core::tls::TlsMaterial,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            lease: Duration::from_millis(3000),
            grace: Duration::from_millis(250),
            lease_margin: Duration::from_millis(500),
            command_timeout: Duration::from_millis(1000),
            queued_redeliver: Duration::from_secs(300),
            worker_ttl: Duration::from_secs(10),
            max_crashes: 5,
            redeliver: Duration::from_secs(5),
            retention: Duration::from_secs(7 * 24 * 3600),
            effect_ttl: Duration::from_secs(30 * 24 * 3600),
            event_cap: 1000,
            max_buffered_signals: 1000,
            child_poll: Duration::from_secs(30),
            codec: None,
            tls: Default::default(),
            replica_ack: None,
        }
    }
}

/// The checkpoint store. Cheap to clone. On Redis: one multiplexed, auto-reconnecting
/// connection; embedded: a shared handle on the in-process engine.
#[derive(Clone)]
pub struct ScriptStore {
    engine: Engine,
    keys: Keys,
    cfg: StoreConfig,
    scripts: Arc<Scripts>,
    /// The namespace's naming secret, once read (`naming.rs`).
    naming: Arc<tokio::sync::OnceCell<[u8; 32]>>,
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

impl ScriptStore {
    /// Connects (the connection manager reconnects with exponential backoff on its own).
    /// `mem://NAME` opens the process-wide embedded instance `NAME` instead of a server;
    /// `redis+cluster://host:port,…` a Redis Cluster through its seed nodes.
    pub async fn connect(url: &str, keys: Keys, cfg: StoreConfig) -> Result<Self, StoreError> {
        if let Some(name) = savepoint_core::mem::instance_name(url) {
            #[cfg(feature = "embedded")]
            return Ok(Self::embedded(mem::engine(name), keys, cfg));
            #[cfg(not(feature = "embedded"))]
            return Err(StoreError::Unsupported(format!(
                "the store URL names the embedded engine ({name}), which this build leaves out \
                 (savepoint-store's feature `embedded`)"
            )));
        }
        let conn = match cluster::seed_urls(url) {
            Some(seeds) => Conn::Cluster(cluster::ClusterConn::connect(seeds?, cfg.command_timeout, &cfg.tls).await?),
            None => {
                let client = if url.starts_with("rediss://") {
                    crate::tls::install_crypto_provider();
                    redis::Client::build_with_tls(url, crate::tls::redis_certs(&cfg.tls)).store()?
                } else {
                    redis::Client::open(url).store()?
                };
                let mcfg = ConnectionManagerConfig::new()
                    .set_min_delay(Duration::from_millis(50))
                    .set_max_delay(Duration::from_secs(2))
                    .set_number_of_retries(6)
                    .set_connection_timeout(Some(cfg.command_timeout.max(Duration::from_millis(500))))
                    .set_response_timeout(Some(cfg.command_timeout));
                Conn::Redis(ConnectionManager::new_with_config(client, mcfg).await.store()?)
            }
        };
        Ok(Self::on(conn, keys, cfg))
    }

    /// A store on an embedded engine (the same scripts, run in-process).
    #[cfg(feature = "embedded")]
    pub fn embedded(engine: Arc<MemEngine>, keys: Keys, cfg: StoreConfig) -> Self {
        Self::on(Conn::Mem(engine), keys, cfg)
    }

    fn on(conn: Conn, keys: Keys, cfg: StoreConfig) -> Self {
        Self {
            engine: Engine {
                conn,
                ack: cfg.replica_ack,
            },
            keys,
            cfg,
            scripts: Arc::new(Scripts::new()),
            naming: Arc::default(),
        }
    }

    /// The embedded engine this store runs on, if it is not Redis.
    #[cfg(feature = "embedded")]
    pub fn mem_engine(&self) -> Option<&Arc<MemEngine>> {
        match &self.engine.conn {
            Conn::Mem(m) => Some(m),
            Conn::Redis(_) | Conn::Cluster(_) => None,
        }
    }

    /// True when the store runs on a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.engine.conn, Conn::Cluster(_))
    }

    /// Runs one plain command (demo effects, the load generator, tests).
    pub async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, StoreError> {
        self.engine.query(cmd).await
    }

    /// Runs a pipeline of plain commands in one round trip and converts the replies.
    pub async fn pipeline<T: redis::FromRedisValue>(&self, pipe: &redis::Pipeline) -> Result<T, StoreError> {
        self.engine.pipeline(pipe).await
    }

    /// The key layout.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The timing settings.
    pub fn config(&self) -> &StoreConfig {
        &self.cfg
    }

    /// A script invocation for a lease holder: the run's four keys, then thread, owner,
    /// fence and the version read (the compare-and-swap and fencing arguments).
    fn fenced<'a>(script: &'a scripts::ScriptDef, lease: &Lease) -> Invocation<'a> {
        let k = &lease.keys;
        let mut inv = script.prepare_invoke();
        inv.key(&k.run).key(&k.due).key(&k.events).key(&k.signals);
        inv.key(&k.blocked).key(&k.waiting);
        inv.arg(lease.thread.as_str())
            .arg(&lease.owner)
            .arg(lease.fence)
            .arg(lease.version);
        inv
    }

    /// Optional journal entry arguments: index and (sealed) bytes, or two empty strings.
    fn entry_args(&self, inv: &mut Invocation<'_>, thread: &ThreadId, entry: Option<(u32, &Entry)>) {
        match entry {
            Some((i, e)) => inv.arg(i).arg(self.seal_entry(thread, i, e)),
            None => inv.arg("").arg(""),
        };
    }

    async fn invoke(&self, inv: &Invocation<'_>) -> Result<Reply, StoreError> {
        Reply::new(self.engine.eval(inv).await?)
    }

    /// Starts a run (idempotent on thread id + workflow + input).
    pub async fn create(
        &self,
        thread: &ThreadId,
        workflow: &str,
        workflow_version: u32,
        input: &str,
        trace: &str,
    ) -> Result<CreateOutcome, StoreError> {
        self.create_with(
            thread,
            workflow,
            workflow_version,
            input,
            trace,
            &CreateOptions::default(),
        )
        .await
    }

    /// [`ScriptStore::create`] with options (a run timeout). The options of an existing run are
    /// not compared: a repeated start answers with the run as it is.
    #[tracing::instrument(level = "debug", name = "create", skip_all, fields(thread.id = %thread))]
    pub async fn create_with(
        &self,
        thread: &ThreadId,
        workflow: &str,
        workflow_version: u32,
        input: &str,
        trace: &str,
        opts: &CreateOptions,
    ) -> Result<CreateOutcome, StoreError> {
        let k = self.keys.run(thread);
        let mut inv = self.scripts.create.prepare_invoke();
        inv.key(&k.run)
            .key(&k.due)
            .key(&k.events)
            .key(&k.index)
            .key(&k.unconfirmed);
        inv.arg(thread.as_str())
            .arg(workflow)
            .arg(workflow_version)
            .arg(SCHEMA_VERSION);
        inv.arg(self.seal_run(thread, "input", input).as_ref())
            .arg(ms(self.cfg.redeliver))
            .arg(self.cfg.event_cap)
            .arg(trace)
            .arg(ms(self.cfg.retention))
            .arg(ms(self.cfg.queued_redeliver))
            .arg(opts.timeout.map(|d| ms(d).to_string()).unwrap_or_default());
        match &opts.parent {
            Some(p) => inv.arg(p.thread.as_str()).arg(p.index),
            None => inv.arg("").arg(""),
        };
        inv.arg(opts.queue.as_deref().unwrap_or(""));
        // (The flow key may be an input's value: sealed in the run like one.)
        match &opts.flow {
            Some(f) => inv
                .arg(self.seal_run(thread, "fck", &f.key).as_ref())
                .arg(f.limit)
                .arg(f.rate.map(|r| r.to_string()).unwrap_or_default()),
            None => inv.arg("").arg("").arg(""),
        };
        inv.arg(opts.priority).arg(needs_field(opts.needs()));
        let r = self.invoke(&inv).await?;
        match r.tag().as_str() {
            "created" => Ok(CreateOutcome::Created),
            "exists" => Ok(CreateOutcome::Exists(
                RunStatus::parse(&r.text(1)).unwrap_or(RunStatus::Pending),
            )),
            // Sealed inputs differ byte for byte (random nonces): the same input is found by
            // opening the stored one.
            "conflict" if self.cfg.codec.is_some() && r.text(1) == workflow => match self.header(thread).await? {
                Some(h) if serde_json::from_str::<serde_json::Value>(input).ok().as_ref() == Some(&h.input) => {
                    Ok(CreateOutcome::Exists(h.status))
                }
                _ => Ok(CreateOutcome::Conflict(r.text(1))),
            },
            "conflict" => Ok(CreateOutcome::Conflict(r.text(1))),
            other => Err(StoreError::Reply(format!("create: {other}"))),
        }
    }

    /// Claims the run's lease for `owner` (ARCHITECTURE §7, step 3). A worker passes what it
    /// serves, so a run it cannot execute is given back untouched (`Unserved`) in the same
    /// atomic step instead of being claimed and blocked.
    pub async fn claim(
        &self,
        thread: &ThreadId,
        owner: &str,
        task_step: Option<u32>,
        served: &ServedSpec,
    ) -> Result<ClaimOutcome, StoreError> {
        let k = self.keys.run(thread);
        let mut inv = self.scripts.claim.prepare_invoke();
        inv.key(&k.run)
            .key(&k.due)
            .key(&k.events)
            .key(&k.signals)
            .key(&k.blocked)
            .key(&k.unserved)
            .key(&k.unconfirmed)
            .key(&k.waiting);
        inv.arg(thread.as_str())
            .arg(owner)
            .arg(ms(self.cfg.lease))
            .arg(ms(self.cfg.grace));
        inv.arg(task_step.map(|s| s.to_string()).unwrap_or_default())
            .arg(self.cfg.event_cap);
        inv.arg(served.as_arg()).arg(SCHEMA_VERSION).arg(self.cfg.max_crashes);
        inv.arg(ms(UNSERVED_BACKOFF)).arg(ms(UNSERVED_BACKOFF_CAP));
        inv.arg(served.queues_arg()).arg(served.features_arg());
        let sent_at = tokio::time::Instant::now();
        let r = self.invoke(&inv).await?;
        let received_at = tokio::time::Instant::now();
        Ok(match r.tag().as_str() {
            "ok" => {
                let mut fields = r.map(2);
                self.open_fields(thread, &mut fields)?;
                let header = RunHeader::from_fields(thread, &fields)?;
                let journal = journal_from_fields(&header, &fields);
                let mut signals = r.map(3);
                signals.retain(|f, _| f.starts_with("i:") || f.starts_with("s:"));
                self.open_fields(thread, &mut signals)?;
                let signals = signals
                    .into_iter()
                    .map(|(f, v)| (f, serde_json::from_slice(&v).unwrap_or(serde_json::Value::Null)))
                    .collect();
                let tries = fields
                    .iter()
                    .filter_map(|(f, v)| {
                        let index = f.strip_prefix("t:")?.parse().ok()?;
                        Some((index, std::str::from_utf8(v).ok()?.parse().ok()?))
                    })
                    .collect();
                let takeover = r.num(4) == 1;
                let lease = Lease {
                    thread: thread.clone(),
                    keys: k,
                    owner: owner.to_owned(),
                    fence: header.fence,
                    version: header.version,
                };
                ClaimOutcome::Claimed(Box::new(Claimed {
                    lease,
                    header,
                    journal,
                    signals,
                    tries,
                    server_now: r.num(1),
                    takeover,
                    sent_at,
                    received_at,
                }))
            }
            "missing" => ClaimOutcome::Missing,
            "terminal" => ClaimOutcome::Terminal(RunStatus::parse(&r.text(1)).unwrap_or(RunStatus::Completed)),
            "waiting" => ClaimOutcome::Waiting,
            "not_due" => ClaimOutcome::NotDue(r.num(1)),
            "leased" => ClaimOutcome::Leased(r.text(1)),
            "stale" => ClaimOutcome::Stale(r.num(1) as u32),
            "unserved" => ClaimOutcome::Unserved {
                reason: r.text(1),
                retry_in_ms: r.num(2),
                workflow: r.text(3),
                version: r.num(4) as u32,
                rv: r.num(5),
                tries: r.num(6) as u32,
            },
            "poison" => ClaimOutcome::Poison(r.text(1)),
            "misrouted" => ClaimOutcome::Misrouted(r.text(1)),
            other => return Err(StoreError::Reply(format!("claim: {other}"))),
        })
    }

    pub(crate) fn rejected(&self, lease: &Lease, r: &Reply) -> StoreError {
        let thread = lease.thread.to_string();
        match r.tag().as_str() {
            "missing" => StoreError::Missing(thread),
            "fenced" => StoreError::Fenced {
                thread,
                status: r.text(1),
                owner: r.text(2),
                fence: r.text(3),
            },
            "conflict" => StoreError::Conflict {
                thread,
                version: r.text(1),
            },
            "index" => StoreError::Index {
                thread,
                steps: r.num(1) as u32,
            },
            "unused" => StoreError::UnusedIntent {
                index: r.num(1) as u32,
                fence: r.num(2),
            },
            other => StoreError::Reply(format!("unexpected reply {other:?}")),
        }
    }

    /// Appends journal entry `index` and extends the lease (one round trip per live step).
    /// An effect entry also clears the run's record of the key at that index.
    pub async fn commit(
        &self,
        lease: &mut Lease,
        index: u32,
        entry: &Entry,
        event: (&str, &str),
        consume_signal: Option<&str>,
    ) -> Result<(), StoreError> {
        let settles = if entry.kind == savepoint_core::journal::EntryKind::Effect {
            index.to_string()
        } else {
            String::new()
        };
        let mut inv = Self::fenced(&self.scripts.commit, lease);
        inv.arg(index)
            .arg(self.seal_entry(&lease.thread, index, entry))
            .arg(ms(self.cfg.lease))
            .arg(ms(self.cfg.grace));
        inv.arg(self.cfg.event_cap)
            .arg(event.0)
            .arg(event.1)
            .arg(consume_signal.unwrap_or(""))
            .arg(settles)
            .arg(if entry.attempts > 1 { "1" } else { "" });
        let r = self.invoke(&inv).await?;
        if r.tag() == "ok" {
            lease.version = r.num(1);
            Ok(())
        } else {
            Err(self.rejected(lease, &r))
        }
    }

    /// Ends a slice without ending the run: sleeping, waiting or pending (yield / retry later).
    #[tracing::instrument(level = "debug", name = "suspend", skip_all, fields(run.status = how.status.as_str()))]
    pub async fn suspend(
        &self,
        lease: &mut Lease,
        entry: Option<(u32, &Entry)>,
        how: Suspend<'_>,
        event: (&str, &str),
    ) -> Result<Suspended, StoreError> {
        let mut inv = Self::fenced(&self.scripts.suspend, lease);
        self.entry_args(&mut inv, &lease.thread, entry);
        inv.arg(how.status.as_str())
            .arg(how.due_in.map(|d| ms(d).to_string()).unwrap_or_default());
        match how.wait {
            Some(w) => inv.arg(&w.kind).arg(&w.name).arg(
                self.seal_run(&lease.thread, "wait_payload", &w.payload.to_string())
                    .as_ref(),
            ),
            None => inv.arg("").arg("").arg(""),
        };
        let event = self.seal_event(&lease.thread, event.0, event.1);
        inv.arg(self.cfg.event_cap)
            .arg(event.0)
            .arg(event.1)
            .arg(ms(self.cfg.redeliver));
        match how.backoff_on {
            Some((key, n)) => inv.arg(key).arg(n),
            None => inv.arg("").arg(""),
        };
        inv.arg(how.drop_begin.map(|i| i.to_string()).unwrap_or_default())
            .arg(how.queue.unwrap_or(""));
        let r = self.invoke(&inv).await?;
        match r.tag().as_str() {
            tag @ ("ok" | "woke") => {
                lease.version = r.num(1);
                let due = Some(r.num(2)).filter(|d| *d > 0);
                Ok(Suspended {
                    woke: tag == "woke",
                    due,
                    rv: r.num(3),
                })
            }
            _ => Err(self.rejected(lease, &r)),
        }
    }

    /// Ends the run (completed, failed) or stops it (blocked), optionally with a last entry.
    #[tracing::instrument(level = "debug", name = "finish", skip_all, fields(run.status = how.status().as_str()))]
    pub async fn finish(
        &self,
        lease: &mut Lease,
        entry: Option<(u32, &Entry)>,
        how: Finish<'_>,
        event: (&str, &str),
    ) -> Result<(), StoreError> {
        let mut inv = Self::fenced(&self.scripts.finish, lease);
        self.entry_args(&mut inv, &lease.thread, entry);
        let (output, error, reason, effect) = match how {
            Finish::Completed(o) => (o.to_string(), "", "", None),
            Finish::Failed(e) => (String::new(), e, "", None),
            Finish::Blocked { reason, effect } => (String::new(), "", reason, effect),
            Finish::Rejected { reason, .. } => (String::new(), "", reason, None),
        };
        let t = &lease.thread;
        inv.arg(how.status().as_str())
            .arg(self.seal_run(t, "output", &output).as_ref());
        inv.arg(self.seal_run(t, "error", error).as_ref())
            .arg(self.seal_run(t, "reason", reason).as_ref())
            .arg(effect.map(|e| e.0).unwrap_or(""));
        let event = self.seal_event(t, event.0, event.1);
        inv.arg(ms(self.cfg.retention))
            .arg(self.cfg.event_cap)
            .arg(event.0)
            .arg(event.1);
        inv.arg(effect.map(|e| e.1.token()).unwrap_or_default());
        match how {
            Finish::Rejected { wait, consumed, .. } => inv.arg(consumed).arg(&wait.kind).arg(&wait.name).arg(
                self.seal_run(&lease.thread, "wait_payload", &wait.payload.to_string())
                    .as_ref(),
            ),
            _ => inv.arg("").arg("").arg("").arg(""),
        };
        let r = self.invoke(&inv).await?;
        if r.tag() == "ok" {
            lease.version = r.num(1);
            Ok(())
        } else {
            Err(self.rejected(lease, &r))
        }
    }

    /// Extends the lease; returns the new expiry (server ms).
    pub async fn heartbeat(&self, lease: &Lease) -> Result<u64, StoreError> {
        let k = &lease.keys;
        let mut inv = self.scripts.heartbeat.prepare_invoke();
        inv.key(&k.run).key(&k.due);
        inv.arg(lease.thread.as_str()).arg(&lease.owner).arg(lease.fence);
        inv.arg(ms(self.cfg.lease)).arg(ms(self.cfg.grace));
        let r = self.invoke(&inv).await?;
        if r.tag() == "ok" {
            Ok(r.num(1))
        } else {
            Err(self.rejected(lease, &r))
        }
    }

    /// Records an event for a run the caller holds.
    pub async fn event(&self, lease: &Lease, typ: &str, detail: &str) -> Result<(), StoreError> {
        self.event_with(lease, typ, detail, None).await
    }

    /// Records that attempt `attempt` of the call at journal `index` failed and is retried
    /// (a `retried` event), and keeps the count in the run (`t:<index>`), so a later slice
    /// goes on from the next attempt instead of starting the retry budget over.
    pub async fn retried(&self, lease: &Lease, index: u32, attempt: u32, detail: &str) -> Result<(), StoreError> {
        self.event_with(lease, "retried", detail, Some((index, attempt))).await
    }

    async fn event_with(
        &self,
        lease: &Lease,
        typ: &str,
        detail: &str,
        tries: Option<(u32, u32)>,
    ) -> Result<(), StoreError> {
        let k = &lease.keys;
        let mut inv = self.scripts.event.prepare_invoke();
        inv.key(&k.run).key(&k.events);
        let (typ, detail) = self.seal_event(&lease.thread, typ, detail);
        inv.arg(&lease.owner)
            .arg(lease.fence)
            .arg(self.cfg.event_cap)
            .arg(typ)
            .arg(detail);
        match tries {
            Some((index, attempt)) => inv.arg(index).arg(attempt),
            None => inv.arg("").arg(""),
        };
        let r = self.invoke(&inv).await?;
        if r.tag() == "ok" {
            Ok(())
        } else {
            Err(self.rejected(lease, &r))
        }
    }

    /// Sets a bookkeeping field of a run the caller holds (e.g. `cur`, the live call after a
    /// crash, so a poison run's reason can name it).
    pub async fn note(&self, lease: &Lease, field: &str, value: &str) -> Result<(), StoreError> {
        let mut inv = self.scripts.note.prepare_invoke();
        inv.key(&lease.keys.run);
        inv.arg(&lease.owner).arg(lease.fence).arg(field).arg(value);
        let r = self.invoke(&inv).await?;
        if r.tag() == "ok" {
            Ok(())
        } else {
            Err(self.rejected(lease, &r))
        }
    }
}
