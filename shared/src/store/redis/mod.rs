//! The Redis implementation of the checkpoint store.

mod effects;
mod query;
pub(crate) mod reply;
mod scripts;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::sync::Arc;
use std::time::Duration;

use super::model::{journal_from_fields, ClaimOutcome, Claimed, Lease, RunHeader, RunStatus, Wait};
use super::StoreError;
use crate::ids::ThreadId;
use crate::journal::Entry;
use crate::keys::Keys;
use reply::Reply;
use scripts::Scripts;

pub use effects::EffectDone;
pub use query::{CatalogEntry, RunEvent};

/// Checkpoint schema version written by this build.
pub const SCHEMA_VERSION: u32 = 1;

/// Timing and retention settings of the store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Lease length; a worker that stops heartbeating loses its runs after this.
    pub lease: Duration,
    /// Extra time after a lease expires before the scanner rings again.
    pub grace: Duration,
    /// Safety-net delay: a run made runnable gets a due time this far out in case its task is lost.
    pub redeliver: Duration,
    /// How long finished runs are kept.
    pub retention: Duration,
    /// How long effect dedup records are kept.
    pub effect_ttl: Duration,
    /// Events kept per run (approximate cap of the stream).
    pub event_cap: u32,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            lease: Duration::from_millis(3000),
            grace: Duration::from_millis(250),
            redeliver: Duration::from_secs(5),
            retention: Duration::from_secs(7 * 24 * 3600),
            effect_ttl: Duration::from_secs(30 * 24 * 3600),
            event_cap: 1000,
        }
    }
}

/// Outcome of creating a run.
#[derive(Debug, Clone, PartialEq)]
pub enum CreateOutcome {
    /// A new run.
    Created,
    /// The same thread id, workflow and input already exist.
    Exists(RunStatus),
    /// The thread id is taken by a different workflow or input.
    Conflict(String),
}

/// Outcome of a suspend.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Suspended {
    /// The awaited value had already arrived: the run is pending again and needs a task.
    pub woke: bool,
    /// The run's new due time (server ms), if any.
    pub due: Option<u64>,
}

/// Outcome of delivering a signal or resume value.
#[derive(Debug, Clone, PartialEq)]
pub enum SignalOutcome {
    /// The run was waiting for it and is pending again: publish a task.
    Woke,
    /// Kept until the run asks for it.
    Buffered,
    /// No such run.
    Missing,
    /// The run has ended.
    Terminal(RunStatus),
    /// (Resume only) the run is not waiting for an interrupt: (status, wait kind, wait name).
    NotWaiting(String, String, String),
}

/// The Redis store. Cheap to clone; one multiplexed, auto-reconnecting connection.
#[derive(Clone)]
pub struct RedisStore {
    conn: ConnectionManager,
    keys: Keys,
    cfg: StoreConfig,
    scripts: Arc<Scripts>,
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

impl RedisStore {
    /// Connects (the connection manager reconnects with exponential backoff on its own).
    pub async fn connect(url: &str, keys: Keys, cfg: StoreConfig) -> Result<Self, StoreError> {
        let client = redis::Client::open(url)?;
        let mcfg = ConnectionManagerConfig::new()
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_secs(2))
            .set_number_of_retries(6)
            .set_connection_timeout(Some(Duration::from_secs(3)))
            .set_response_timeout(Some(Duration::from_secs(5)));
        let conn = ConnectionManager::new_with_config(client, mcfg).await?;
        Ok(Self {
            conn,
            keys,
            cfg,
            scripts: Arc::new(Scripts::new()),
        })
    }

    /// The key layout.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The timing settings.
    pub fn config(&self) -> &StoreConfig {
        &self.cfg
    }

    /// A connection for ad-hoc commands (demo effects, tests).
    pub fn connection(&self) -> ConnectionManager {
        self.conn.clone()
    }

    /// A script invocation for a lease holder: the run's four keys, then thread, owner,
    /// fence and the version read (the compare-and-swap and fencing arguments).
    fn fenced<'a>(script: &'a redis::Script, lease: &Lease) -> redis::ScriptInvocation<'a> {
        let k = &lease.keys;
        let mut inv = script.prepare_invoke();
        inv.key(&k.run).key(&k.due).key(&k.events).key(&k.signals);
        inv.arg(lease.thread.as_str())
            .arg(&lease.owner)
            .arg(lease.fence)
            .arg(lease.version);
        inv
    }

    /// Optional journal entry arguments: index and bytes, or two empty strings.
    fn entry_args(inv: &mut redis::ScriptInvocation<'_>, entry: Option<(u32, &Entry)>) {
        match entry {
            Some((i, e)) => inv.arg(i).arg(e.encode()),
            None => inv.arg("").arg(""),
        };
    }

    async fn invoke(&self, inv: &redis::ScriptInvocation<'_>) -> Result<Reply, StoreError> {
        let mut conn = self.conn.clone();
        let v: redis::Value = inv.invoke_async(&mut conn).await?;
        Reply::new(v)
    }

    /// Starts a run (idempotent on thread id + workflow + input).
    #[tracing::instrument(level = "debug", name = "create", skip_all, fields(thread.id = %thread))]
    pub async fn create(
        &self,
        thread: &ThreadId,
        workflow: &str,
        workflow_version: u32,
        input: &str,
        trace: &str,
    ) -> Result<CreateOutcome, StoreError> {
        let k = self.keys.run(thread);
        let mut inv = self.scripts.create.prepare_invoke();
        inv.key(&k.run).key(&k.due).key(&k.events).key(&k.index);
        inv.arg(thread.as_str())
            .arg(workflow)
            .arg(workflow_version)
            .arg(SCHEMA_VERSION);
        inv.arg(input)
            .arg(ms(self.cfg.redeliver))
            .arg(self.cfg.event_cap)
            .arg(trace)
            .arg(ms(self.cfg.retention));
        let r = self.invoke(&inv).await?;
        match r.tag().as_str() {
            "created" => Ok(CreateOutcome::Created),
            "exists" => Ok(CreateOutcome::Exists(
                RunStatus::parse(&r.text(1)).unwrap_or(RunStatus::Pending),
            )),
            "conflict" => Ok(CreateOutcome::Conflict(r.text(1))),
            other => Err(StoreError::Reply(format!("create: {other}"))),
        }
    }

    /// Claims the run's lease for `owner` (DESIGN §5 step 2).
    pub async fn claim(
        &self,
        thread: &ThreadId,
        owner: &str,
        task_step: Option<u32>,
    ) -> Result<ClaimOutcome, StoreError> {
        let k = self.keys.run(thread);
        let mut inv = self.scripts.claim.prepare_invoke();
        inv.key(&k.run).key(&k.due).key(&k.events).key(&k.signals);
        inv.arg(thread.as_str())
            .arg(owner)
            .arg(ms(self.cfg.lease))
            .arg(ms(self.cfg.grace));
        inv.arg(task_step.map(|s| s.to_string()).unwrap_or_default())
            .arg(self.cfg.event_cap);
        let r = self.invoke(&inv).await?;
        Ok(match r.tag().as_str() {
            "ok" => {
                let fields = r.map(2);
                let header = RunHeader::from_fields(thread, &fields)?;
                let journal = journal_from_fields(&header, &fields).map_err(|e| e.to_string());
                let signals = r
                    .map(3)
                    .into_iter()
                    .filter(|(f, _)| !f.starts_with('#'))
                    .map(|(f, v)| (f, serde_json::from_slice(&v).unwrap_or(serde_json::Value::Null)))
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
                    server_now: r.num(1),
                    takeover,
                }))
            }
            "missing" => ClaimOutcome::Missing,
            "terminal" => ClaimOutcome::Terminal(RunStatus::parse(&r.text(1)).unwrap_or(RunStatus::Completed)),
            "waiting" => ClaimOutcome::Waiting,
            "not_due" => ClaimOutcome::NotDue(r.num(1)),
            "leased" => ClaimOutcome::Leased(r.text(1)),
            "stale" => ClaimOutcome::Stale(r.num(1) as u32),
            other => return Err(StoreError::Reply(format!("claim: {other}"))),
        })
    }

    fn rejected(&self, lease: &Lease, r: &Reply) -> StoreError {
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
            other => StoreError::Reply(format!("unexpected reply {other:?}")),
        }
    }

    /// Appends journal entry `index` and extends the lease (one round trip per live step).
    pub async fn commit(
        &self,
        lease: &mut Lease,
        index: u32,
        entry: &Entry,
        event: (&str, &str),
        consume_signal: Option<&str>,
    ) -> Result<(), StoreError> {
        let mut inv = Self::fenced(&self.scripts.commit, lease);
        inv.arg(index)
            .arg(entry.encode())
            .arg(ms(self.cfg.lease))
            .arg(ms(self.cfg.grace));
        inv.arg(self.cfg.event_cap)
            .arg(event.0)
            .arg(event.1)
            .arg(consume_signal.unwrap_or(""));
        let r = self.invoke(&inv).await?;
        if r.tag() == "ok" {
            lease.version = r.num(1);
            Ok(())
        } else {
            Err(self.rejected(lease, &r))
        }
    }

    /// Ends a slice without ending the run: sleeping, waiting or pending (yield / retry later).
    #[allow(clippy::too_many_arguments)]
    #[tracing::instrument(level = "debug", name = "suspend", skip_all, fields(thread.id = %lease.thread, run.status = status.as_str()))]
    pub async fn suspend(
        &self,
        lease: &mut Lease,
        entry: Option<(u32, &Entry)>,
        status: RunStatus,
        due_in: Option<Duration>,
        wait: Option<&Wait>,
        event: (&str, &str),
    ) -> Result<Suspended, StoreError> {
        let mut inv = Self::fenced(&self.scripts.suspend, lease);
        Self::entry_args(&mut inv, entry);
        inv.arg(status.as_str())
            .arg(due_in.map(|d| ms(d).to_string()).unwrap_or_default());
        match wait {
            Some(w) => inv.arg(&w.kind).arg(&w.name).arg(w.payload.to_string()),
            None => inv.arg("").arg("").arg(""),
        };
        inv.arg(self.cfg.event_cap)
            .arg(event.0)
            .arg(event.1)
            .arg(ms(self.cfg.redeliver));
        let r = self.invoke(&inv).await?;
        match r.tag().as_str() {
            tag @ ("ok" | "woke") => {
                lease.version = r.num(1);
                let due = Some(r.num(2)).filter(|d| *d > 0);
                Ok(Suspended {
                    woke: tag == "woke",
                    due,
                })
            }
            _ => Err(self.rejected(lease, &r)),
        }
    }

    /// Ends the run (completed, failed) or stops it (blocked), optionally with a last entry.
    #[allow(clippy::too_many_arguments)]
    #[tracing::instrument(level = "debug", name = "finish", skip_all, fields(thread.id = %lease.thread, run.status = status.as_str()))]
    pub async fn finish(
        &self,
        lease: &mut Lease,
        entry: Option<(u32, &Entry)>,
        status: RunStatus,
        output: Option<&serde_json::Value>,
        error: Option<&str>,
        reason: Option<&str>,
        blocked_effect: Option<&str>,
        event: (&str, &str),
    ) -> Result<(), StoreError> {
        let mut inv = Self::fenced(&self.scripts.finish, lease);
        Self::entry_args(&mut inv, entry);
        inv.arg(status.as_str())
            .arg(output.map(|o| o.to_string()).unwrap_or_default());
        inv.arg(error.unwrap_or(""))
            .arg(reason.unwrap_or(""))
            .arg(blocked_effect.unwrap_or(""));
        inv.arg(ms(self.cfg.retention))
            .arg(self.cfg.event_cap)
            .arg(event.0)
            .arg(event.1);
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

    /// Records an event for a run the caller holds (e.g. `retried`).
    pub async fn event(&self, lease: &Lease, typ: &str, detail: &str) -> Result<(), StoreError> {
        let k = &lease.keys;
        let mut inv = self.scripts.event.prepare_invoke();
        inv.key(&k.run).key(&k.events);
        inv.arg(&lease.owner)
            .arg(lease.fence)
            .arg(self.cfg.event_cap)
            .arg(typ)
            .arg(detail);
        let r = self.invoke(&inv).await?;
        if r.tag() == "ok" {
            Ok(())
        } else {
            Err(self.rejected(lease, &r))
        }
    }

    /// Delivers a resume value (`kind = "interrupt"`) or a signal (`kind = "signal"`).
    #[tracing::instrument(level = "debug", name = "signal", skip_all, fields(thread.id = %thread, signal.kind = kind))]
    pub async fn signal(
        &self,
        thread: &ThreadId,
        kind: &str,
        name: &str,
        value: &serde_json::Value,
    ) -> Result<SignalOutcome, StoreError> {
        let k = self.keys.run(thread);
        let mut inv = self.scripts.signal.prepare_invoke();
        inv.key(&k.run).key(&k.due).key(&k.events).key(&k.signals);
        inv.arg(thread.as_str()).arg(kind).arg(name).arg(value.to_string());
        inv.arg(ms(self.cfg.redeliver)).arg(self.cfg.event_cap);
        let r = self.invoke(&inv).await?;
        Ok(match r.tag().as_str() {
            "woke" => SignalOutcome::Woke,
            "buffered" => SignalOutcome::Buffered,
            "missing" => SignalOutcome::Missing,
            "terminal" => SignalOutcome::Terminal(RunStatus::parse(&r.text(1)).unwrap_or(RunStatus::Completed)),
            "not_waiting" => SignalOutcome::NotWaiting(r.text(1), r.text(2), r.text(3)),
            other => return Err(StoreError::Reply(format!("signal: {other}"))),
        })
    }

    /// Cancels a run that has not ended. `Ok(None)` when cancelled, `Ok(Some(status))` when it
    /// had already ended.
    pub async fn cancel(&self, thread: &ThreadId, reason: &str) -> Result<Option<RunStatus>, StoreError> {
        let k = self.keys.run(thread);
        let mut inv = self.scripts.cancel.prepare_invoke();
        inv.key(&k.run).key(&k.due).key(&k.events).key(&k.signals);
        inv.arg(thread.as_str())
            .arg(ms(self.cfg.retention))
            .arg(self.cfg.event_cap)
            .arg(reason);
        let r = self.invoke(&inv).await?;
        match r.tag().as_str() {
            "ok" => Ok(None),
            "terminal" => Ok(Some(RunStatus::parse(&r.text(1)).unwrap_or(RunStatus::Completed))),
            "missing" => Err(StoreError::Missing(thread.to_string())),
            other => Err(StoreError::Reply(format!("cancel: {other}"))),
        }
    }

    /// Makes a run blocked on `effect_key` runnable again. `Err(status, key)` when it is not.
    pub async fn unblock(
        &self,
        thread: &ThreadId,
        effect_key: &str,
        detail: &str,
    ) -> Result<Result<(), (String, String)>, StoreError> {
        let k = self.keys.run(thread);
        let mut inv = self.scripts.unblock.prepare_invoke();
        inv.key(&k.run).key(&k.due).key(&k.events);
        inv.arg(thread.as_str()).arg(effect_key).arg(ms(self.cfg.redeliver));
        inv.arg(self.cfg.event_cap).arg(detail);
        let r = self.invoke(&inv).await?;
        match r.tag().as_str() {
            "ok" => Ok(Ok(())),
            "not_blocked" => Ok(Err((r.text(1), r.text(2)))),
            "missing" => Err(StoreError::Missing(thread.to_string())),
            other => Err(StoreError::Reply(format!("unblock: {other}"))),
        }
    }

    /// Hands out up to `limit` overdue runs of partition `p`; each is not handed out again for
    /// `period`. Returns (server time, threads).
    pub async fn scan_due(&self, p: u16, limit: u32, period: Duration) -> Result<(u64, Vec<ThreadId>), StoreError> {
        let mut inv = self.scripts.scan_due.prepare_invoke();
        inv.key(self.keys.due(p)).arg(limit).arg(ms(period));
        let r = self.invoke(&inv).await?;
        let now = r.num(0);
        let threads = (1..r.0.len()).filter_map(|i| ThreadId::new(r.text(i)).ok()).collect();
        Ok((now, threads))
    }
}
