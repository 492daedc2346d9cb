//! Operator and client actions on a run: signals and resume values, cancel, unblock, retry.

use serde_json::Value;

use super::{ms, ScriptStore};
use crate::{needs_field, OutputVersion, RunStatus, StoreError};
use savepoint_core::ids::{EffectKey, ThreadId};
use savepoint_core::outcome::Rerun;

/// Reads a [`Rerun`] from a script reply: the ring version at `at`, the trace after it.
pub(super) fn rerun_at(r: &super::reply::Reply, at: usize) -> Rerun {
    Rerun {
        rv: r.num(at),
        trace: Some(r.text(at + 1)).filter(|t| !t.is_empty()),
    }
}

/// Outcome of delivering a signal or resume value.
#[derive(Debug, Clone, PartialEq)]
pub enum SignalOutcome {
    /// The run was waiting for it and is pending again: publish a task, then mark it queued.
    Woke(Rerun),
    /// Kept until the run asks for it.
    Buffered,
    /// A delivery with this client id was accepted before: nothing changed.
    Duplicate,
    /// No such run.
    Missing,
    /// The run has ended.
    Terminal(RunStatus),
    /// (Resume only) the run is not waiting for an interrupt: (status, wait kind, wait name).
    NotWaiting(String, String, String),
    /// The run already holds this many signals it has not asked for (the store's
    /// `max_buffered_signals`): refused, nothing changed.
    Full(u64),
    /// (A child's word only) the parent's call already journaled the child: nobody would
    /// read the word, so it was not kept.
    Settled,
}

/// A cancelled run and what became of the effect intents it held.
#[derive(Debug, Clone, PartialEq)]
pub struct Cancelled {
    /// (journal index, key) of every intent the run held; each is now an explicit
    /// "in doubt, owner cancelled" record that an operator settles from any run that needs it.
    pub settled: Vec<(u32, String)>,
    /// Its parent told, and its children cancelled with it (see [`ScriptStore::cascade_cancel`]).
    pub cascade: super::Cascade,
}

impl ScriptStore {
    /// Delivers a resume value (`kind = "interrupt"`) or a signal (`kind = "signal"`). With a
    /// client `id`, a retried delivery is accepted once.
    #[tracing::instrument(level = "debug", name = "signal", skip_all, fields(thread.id = %thread, signal.kind = kind))]
    pub async fn signal(
        &self,
        thread: &ThreadId,
        kind: &str,
        name: &str,
        value: &Value,
        id: Option<&str>,
    ) -> Result<SignalOutcome, StoreError> {
        let k = self.keys.run(thread);
        let mut inv = self.scripts.signal.prepare_invoke();
        inv.key(&k.run)
            .key(&k.due)
            .key(&k.events)
            .key(&k.signals)
            .key(&k.waiting)
            .key(&k.blocked)
            .key(k.dedup());
        inv.arg(thread.as_str())
            .arg(kind)
            .arg(name)
            .arg(self.seal_run(thread, "signal", &value.to_string()).as_ref());
        inv.arg(ms(self.cfg.redeliver))
            .arg(self.cfg.event_cap)
            .arg(id.unwrap_or(""))
            .arg(self.cfg.max_buffered_signals)
            .arg(ms(self.cfg.retention).max(1));
        let r = self.invoke(&inv).await?;
        Ok(match r.tag().as_str() {
            "woke" => SignalOutcome::Woke(rerun_at(&r, 2)),
            "buffered" => SignalOutcome::Buffered,
            "duplicate" => SignalOutcome::Duplicate,
            "missing" => SignalOutcome::Missing,
            "terminal" => SignalOutcome::Terminal(RunStatus::parse(&r.text(1)).unwrap_or(RunStatus::Completed)),
            "not_waiting" => SignalOutcome::NotWaiting(r.text(1), r.text(2), r.text(3)),
            "full" => SignalOutcome::Full(r.num(1)),
            "settled" => SignalOutcome::Settled,
            other => return Err(StoreError::Reply(format!("signal: {other}"))),
        })
    }

    /// Records in the run's event log that `actor` (an API token's name) asked for `action`
    /// (event `operator`). False when the run does not exist.
    pub async fn audit(&self, thread: &ThreadId, actor: &str, action: &str) -> Result<bool, StoreError> {
        let k = self.keys.run(thread);
        let mut inv = self.scripts.audit.prepare_invoke();
        inv.key(&k.run).key(&k.events);
        inv.arg(self.cfg.event_cap)
            .arg(format!("{actor}: {action}"))
            .arg("operator");
        Ok(self.invoke(&inv).await?.tag() == "ok")
    }

    /// Appends an event of type `typ` to a run's log if the run exists (e.g. `forked` on the
    /// source of a fork, naming the new run); false when it does not.
    pub async fn annotate(&self, thread: &ThreadId, typ: &str, detail: &str) -> Result<bool, StoreError> {
        let k = self.keys.run(thread);
        let mut inv = self.scripts.audit.prepare_invoke();
        inv.key(&k.run).key(&k.events);
        inv.arg(self.cfg.event_cap).arg(detail).arg(typ);
        Ok(self.invoke(&inv).await?.tag() == "ok")
    }

    /// Cancels a run that has not ended and settles the effect intents it held as "in
    /// doubt, owner cancelled"; then tells its parent, and cancels the children it started
    /// (unless their policy says otherwise). `Ok(Err(status))` when it had already ended.
    pub async fn cancel(&self, thread: &ThreadId, reason: &str) -> Result<Result<Cancelled, RunStatus>, StoreError> {
        let mut c = match self.cancel_one(thread, reason).await? {
            Ok(c) => c,
            Err(status) => return Ok(Err(status)),
        };
        c.cascade = self.cascade_cancel(thread, reason).await;
        Ok(Ok(c))
    }

    /// [`ScriptStore::cancel`] of the run alone.
    pub(super) async fn cancel_one(
        &self,
        thread: &ThreadId,
        reason: &str,
    ) -> Result<Result<Cancelled, RunStatus>, StoreError> {
        let k = self.keys.run(thread);
        let mut inv = self.scripts.cancel.prepare_invoke();
        inv.key(&k.run).key(&k.due).key(&k.events).key(&k.signals);
        inv.key(&k.blocked).key(&k.waiting).key(&k.unserved).key(&k.unconfirmed);
        // The reason is the operator's (or a parent's cascaded) text: sealed like a payload.
        inv.arg(thread.as_str())
            .arg(ms(self.cfg.retention))
            .arg(self.cfg.event_cap)
            .arg(self.seal_run(thread, "reason", reason).as_ref())
            .arg(self.seal_run(thread, "event", reason).as_ref());
        let r = self.invoke(&inv).await?;
        match r.tag().as_str() {
            "ok" => {}
            "terminal" => return Ok(Err(RunStatus::parse(&r.text(1)).unwrap_or(RunStatus::Completed))),
            "missing" => return Err(StoreError::Missing(thread.to_string())),
            other => return Err(StoreError::Reply(format!("cancel: {other}"))),
        }
        let mut settled = Vec::new();
        for i in (1..r.0.len()).step_by(2) {
            let (Ok(index), Ok(key)) = (r.text(i).parse::<u32>(), EffectKey::new(r.text(i + 1))) else {
                continue;
            };
            // If this fails the intent stays an intent of a cancelled run: the next run that
            // meets it finds its owner ended and settles it the same way.
            // Only intents still held are in doubt (a key marked done before the crash is not).
            if self.effect_orphan(&key, thread, index, "cancelled").await? {
                settled.push((index, key.as_str().to_owned()));
            }
        }
        Ok(Ok(Cancelled {
            settled,
            cascade: Default::default(),
        }))
    }

    /// Makes a run blocked on `effect_key` runnable again. `Ok(Ok(rerun))` with what its task
    /// needs; `Ok(Err((status, key)))` when it is not blocked on that key.
    pub async fn unblock(
        &self,
        thread: &ThreadId,
        effect_key: &str,
        detail: &str,
    ) -> Result<Result<Rerun, (String, String)>, StoreError> {
        let k = self.keys.run(thread);
        let mut inv = self.scripts.unblock.prepare_invoke();
        inv.key(&k.run).key(&k.due).key(&k.events).key(&k.blocked);
        inv.arg(thread.as_str()).arg(effect_key).arg(ms(self.cfg.redeliver));
        inv.arg(self.cfg.event_cap).arg(detail);
        let r = self.invoke(&inv).await?;
        match r.tag().as_str() {
            "ok" => Ok(Ok(rerun_at(&r, 1))),
            "not_blocked" => Ok(Err((r.text(1), r.text(2)))),
            "missing" => Err(StoreError::Missing(thread.to_string())),
            other => Err(StoreError::Reply(format!("unblock: {other}"))),
        }
    }

    /// Re-queues a blocked run after a fix (non-determinism fixed in code, a version served
    /// again, a poison step fixed). Returns the ring version for the task.
    pub async fn retry(&self, thread: &ThreadId, detail: &str) -> Result<RetryOutcome, StoreError> {
        let k = self.keys.run(thread);
        let mut inv = self.scripts.retry.prepare_invoke();
        inv.key(&k.run).key(&k.due).key(&k.events).key(&k.blocked);
        inv.arg(thread.as_str())
            .arg(ms(self.cfg.redeliver))
            .arg(self.cfg.event_cap)
            .arg(detail);
        let r = self.invoke(&inv).await?;
        Ok(match r.tag().as_str() {
            "ok" => RetryOutcome::Queued(rerun_at(&r, 1)),
            "not_blocked" => RetryOutcome::NotBlocked(RunStatus::parse(&r.text(1)).unwrap_or(RunStatus::Pending)),
            "effect" => RetryOutcome::OnEffect(r.text(1)),
            "missing" => return Err(StoreError::Missing(thread.to_string())),
            other => return Err(StoreError::Reply(format!("retry: {other}"))),
        })
    }

    /// Records, for run `thread`'s child call at journal index `call`, the version `ov` its
    /// output was written at, for a child that a build from before 2026-12-07 completed
    /// without one (`output_version.lua`).
    pub async fn set_output_version(
        &self,
        thread: &ThreadId,
        call: u32,
        ov: &OutputVersion,
        detail: &str,
    ) -> Result<OutputVersionOutcome, StoreError> {
        let k = self.keys.run(thread);
        let mut inv = self.scripts.output_version.prepare_invoke();
        inv.key(&k.run).key(&k.signals).key(&k.events);
        inv.arg(call).arg(ov.field()).arg(self.cfg.event_cap).arg(detail);
        let r = self.invoke(&inv).await?;
        Ok(match r.tag().as_str() {
            "ok" => OutputVersionOutcome::Set,
            "ended" => OutputVersionOutcome::Ended(RunStatus::parse(&r.text(1)).unwrap_or(RunStatus::Completed)),
            "missing" => return Err(StoreError::Missing(thread.to_string())),
            other => return Err(StoreError::Reply(format!("output_version: {other}"))),
        })
    }

    /// Lets a run go of the value run feature `feature` (`value:<type>@<version>`) that no
    /// build will name, so claims stop giving it back (`forget_feature.lua`).
    pub async fn forget_feature(
        &self,
        thread: &ThreadId,
        feature: &str,
        detail: &str,
    ) -> Result<ForgetOutcome, StoreError> {
        let k = self.keys.run(thread);
        let mut inv = self.scripts.forget_feature.prepare_invoke();
        inv.key(&k.run).key(&k.due).key(&k.events).key(&k.unserved);
        inv.arg(thread.as_str())
            .arg(feature)
            .arg(self.cfg.event_cap)
            .arg(detail);
        let r = self.invoke(&inv).await?;
        Ok(match r.tag().as_str() {
            "ok" => ForgetOutcome::Forgotten(rerun_at(&r, 1), !r.text(3).is_empty()),
            "ended" => ForgetOutcome::Ended(RunStatus::parse(&r.text(1)).unwrap_or(RunStatus::Completed)),
            "running" => ForgetOutcome::Running,
            "engine" => ForgetOutcome::Engine,
            "not_needed" => ForgetOutcome::NotNeeded(
                r.text(1)
                    .split('\u{1f}')
                    .filter(|f| !f.is_empty())
                    .map(str::to_owned)
                    .collect(),
            ),
            "missing" => return Err(StoreError::Missing(thread.to_string())),
            other => return Err(StoreError::Reply(format!("forget_feature: {other}"))),
        })
    }
}

/// Outcome of [`ScriptStore::set_output_version`].
#[derive(Debug, Clone, PartialEq)]
pub enum OutputVersionOutcome {
    /// Recorded for the run to read.
    Set,
    /// The run has ended (its status): it reads no child's output any more.
    Ended(RunStatus),
}

/// Outcome of [`ScriptStore::forget_feature`].
#[derive(Debug, Clone, PartialEq)]
pub enum ForgetOutcome {
    /// The run no longer needs the feature; true when it was given back and is due now
    /// (publish a task, as for a retry).
    Forgotten(Rerun, bool),
    /// The run has ended.
    Ended(RunStatus),
    /// A worker holds the run: forget it once the slice has ended.
    Running,
    /// Not a value feature (`value:<type>@<version>`): engine features are not forgotten.
    Engine,
    /// The run does not need it; the features it needs.
    NotNeeded(Vec<String>),
}

/// Outcome of [`ScriptStore::retry`].
#[derive(Debug, Clone, PartialEq)]
pub enum RetryOutcome {
    /// Pending again; publish a task and mark it queued.
    Queued(Rerun),
    /// Only blocked runs are retried.
    NotBlocked(RunStatus),
    /// Blocked on an in-doubt effect: resolve it instead.
    OnEffect(String),
}

/// Outcome of [`ScriptStore::restart`].
#[derive(Debug, Clone, PartialEq)]
pub enum RestartOutcome {
    /// Pending again from the entry asked for; publish a task and mark it queued. The status
    /// it had.
    Queued(Rerun, RunStatus),
    /// Only failed, blocked and cancelled runs are restarted in place (fork the others).
    NotRestartable(RunStatus),
    /// Blocked on an in-doubt effect: resolve it first.
    OnEffect(String),
    /// The entry is past the journal (its length).
    OutOfRange(u32),
}

/// Outcome of [`ScriptStore::fork`].
#[derive(Debug, Clone, PartialEq)]
pub enum ForkOutcome {
    /// The new run, pending: publish its start task (as for a created run).
    Created,
    /// This id already holds the same fork (same run and entry): its status.
    Exists(RunStatus),
    /// This id is taken by another run (what it was forked from, if it was a fork).
    Conflict(String),
    /// The entry is past the source's journal (its length).
    OutOfRange(u32),
}

impl ScriptStore {
    /// Re-runs a failed, blocked or cancelled run in place from journal entry `from`: entries
    /// before it are kept and replayed, the rest dropped (`restart.lua`). `detail` is recorded
    /// in the `restarted` event.
    pub async fn restart(&self, thread: &ThreadId, from: u32, detail: &str) -> Result<RestartOutcome, StoreError> {
        let k = self.keys.run(thread);
        let mut inv = self.scripts.restart.prepare_invoke();
        inv.key(&k.run)
            .key(&k.due)
            .key(&k.events)
            .key(&k.signals)
            .key(&k.blocked)
            .key(&k.waiting);
        inv.arg(thread.as_str())
            .arg(from)
            .arg(ms(self.cfg.redeliver))
            .arg(self.cfg.event_cap)
            .arg(detail);
        let r = self.invoke(&inv).await?;
        Ok(match r.tag().as_str() {
            "ok" => RestartOutcome::Queued(
                rerun_at(&r, 1),
                RunStatus::parse(&r.text(3)).unwrap_or(RunStatus::Failed),
            ),
            "status" => RestartOutcome::NotRestartable(RunStatus::parse(&r.text(1)).unwrap_or(RunStatus::Running)),
            "effect" => RestartOutcome::OnEffect(r.text(1)),
            "range" => RestartOutcome::OutOfRange(r.num(1) as u32),
            "missing" => return Err(StoreError::Missing(thread.to_string())),
            other => return Err(StoreError::Reply(format!("restart: {other}"))),
        })
    }

    /// Creates run `to` whose journal is the first `from` entries of run `source` (same
    /// workflow, version, input, flow limit and priority; no deadline), pending (`fork.lua`). The source is read and its values
    /// sealed again for `to` here; the source itself is not changed (the caller may note the
    /// fork in its events). Idempotent: the same fork under the same id answers `Exists`.
    pub async fn fork(
        &self,
        source: &ThreadId,
        from: u32,
        to: &ThreadId,
        trace: &str,
    ) -> Result<ForkOutcome, StoreError> {
        let Some((h, journal)) = self.get(source).await? else {
            return Err(StoreError::Missing(source.to_string()));
        };
        if from as usize > journal.len() {
            return Ok(ForkOutcome::OutOfRange(journal.len() as u32));
        }
        let input = serde_json::to_string(&h.input).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let k = self.keys.run(to);
        let mut inv = self.scripts.fork.prepare_invoke();
        inv.key(&k.run)
            .key(&k.due)
            .key(&k.events)
            .key(&k.index)
            .key(&k.unconfirmed);
        inv.arg(to.as_str())
            .arg(&h.workflow)
            .arg(h.workflow_version)
            .arg(h.schema);
        inv.arg(self.seal_run(to, "input", &input).as_ref())
            .arg(ms(self.cfg.redeliver))
            .arg(self.cfg.event_cap)
            .arg(trace)
            .arg(ms(self.cfg.retention))
            .arg(ms(self.cfg.queued_redeliver))
            .arg(format!("{source}@{from}"))
            .arg(from)
            .arg(h.home_queue.as_deref().unwrap_or(""));
        // The fork shares the source's flow limit and priority (not its deadline).
        match &h.flow {
            Some(f) => inv
                .arg(self.seal_run(to, "fck", &f.key).as_ref())
                .arg(f.limit)
                .arg(f.rate.map(|r| r.to_string()).unwrap_or_default()),
            None => inv.arg("").arg("").arg(""),
        };
        // What the source needs its fork needs (its journal may hold calls of those features),
        // less its deadline, which the fork does not inherit.
        let needs = h.needs.iter().map(String::as_str).filter(|n| *n != "deadline");
        inv.arg(h.priority).arg(needs_field(needs));
        // The input is the source's, at the source's version of its type.
        inv.arg(h.input_version.map(|v| v.to_string()).unwrap_or_default());
        for (i, e) in journal.iter().take(from as usize).enumerate() {
            inv.arg(self.seal_entry(to, i as u32, e));
        }
        let r = self.invoke(&inv).await?;
        Ok(match r.tag().as_str() {
            "created" => ForkOutcome::Created,
            "exists" => ForkOutcome::Exists(RunStatus::parse(&r.text(1)).unwrap_or(RunStatus::Pending)),
            "conflict" => ForkOutcome::Conflict(r.text(1)),
            other => return Err(StoreError::Reply(format!("fork: {other}"))),
        })
    }
}
