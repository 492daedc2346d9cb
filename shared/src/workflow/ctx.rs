//! The workflow context: replay of recorded entries, live execution with a fenced commit
//! per call, and suspension without user-visible errors.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{RetryPolicy, StepError, WorkflowError};
use crate::failpoints::Failpoints;
use crate::ids::ThreadId;
use crate::journal::{Entry, EntryKind, Outcome};
use crate::metrics::{inc, labels, metrics};
use crate::store::{Lease, RedisStore, RunStatus, StoreError};

/// Why a slice of a run ended without the workflow returning. The runtime acts on it.
#[derive(Debug, Clone, PartialEq)]
pub enum SliceExit {
    /// Sleeping, waiting or backing off; committed. `woke`: it is already runnable again
    /// and needs a task.
    Suspended {
        /// Needs a task now.
        woke: bool,
    },
    /// Yielded after the slice budget or on shutdown; committed as pending: publish a
    /// continuation task.
    Yielded,
    /// Blocked with a reason; committed.
    Blocked(String),
    /// Failed by the runtime (journal limit); committed.
    Failed(String),
    /// Another worker or an operator took the run; nothing was written.
    LeaseLost(String),
    /// Redis unreachable or an injected error; the lease will expire and the run resumes.
    Transient(String),
    /// Replay-only mode reached a call that is not in the journal.
    WouldRunLive(String),
}

/// Budgets of one slice and of one run.
#[derive(Debug, Clone)]
pub struct SliceLimits {
    /// Live calls per slice before yielding to a continuation task.
    pub max_steps: u32,
    /// Wall time per slice before yielding.
    pub max_time: Duration,
    /// Journal entries per run; a run that would exceed it fails.
    pub max_entries: u32,
}

impl Default for SliceLimits {
    fn default() -> Self {
        Self {
            max_steps: 64,
            max_time: Duration::from_secs(10),
            max_entries: 10_000,
        }
    }
}

/// What the runtime hands a context.
pub struct CtxParts {
    /// The store to commit to.
    pub store: RedisStore,
    /// The lease from the claim.
    pub lease: Lease,
    /// Recorded entries.
    pub journal: Vec<Entry>,
    /// Buffered signal values.
    pub signals: BTreeMap<String, Value>,
    /// Budgets.
    pub limits: SliceLimits,
    /// Failpoints of this worker.
    pub failpoints: Failpoints,
    /// Cancelled when the lease is lost (a running step is dropped).
    pub lease_lost: CancellationToken,
    /// Cancelled when the worker shuts down (the run yields at the next call).
    pub shutdown: CancellationToken,
    /// Default retry policy of the workflow.
    pub retry: RetryPolicy,
    /// Replay-only: never execute or write anything (determinism checks).
    pub replay_only: bool,
    /// Workflow name (metric label).
    pub workflow: String,
}

/// The handle workflow code journals its calls through.
pub struct Ctx {
    pub(super) p: CtxParts,
    pub(super) cursor: u32,
    live_in_slice: u32,
    started: Instant,
    exit: Option<SliceExit>,
    notify: Arc<Notify>,
    /// Open while recorded entries are being replayed; closed at the first live call.
    replay_span: Option<tracing::Span>,
}

impl Ctx {
    /// A context over a claimed run.
    pub fn new(parts: CtxParts) -> Self {
        let replay_span = Some(tracing::debug_span!("replay", journal.entries = parts.journal.len()));
        Self {
            replay_span,
            p: parts,
            cursor: 0,
            live_in_slice: 0,
            started: Instant::now(),
            exit: None,
            notify: Arc::new(Notify::new()),
        }
    }

    /// The run's thread id.
    pub fn thread_id(&self) -> &ThreadId {
        &self.p.lease.thread
    }

    /// The index the next call will have.
    pub fn next_index(&self) -> u32 {
        self.cursor
    }

    /// True while re-executing recorded calls.
    pub fn is_replaying(&self) -> bool {
        (self.cursor as usize) < self.p.journal.len()
    }

    /// Live calls executed in this slice.
    pub fn live_calls(&self) -> u32 {
        self.live_in_slice
    }

    /// The journal as it stands (recorded plus committed in this slice).
    pub fn journal(&self) -> &[Entry] {
        &self.p.journal
    }

    /// The lease (after the slice: its latest version).
    pub fn lease(&self) -> &Lease {
        &self.p.lease
    }

    /// The store.
    pub fn store(&self) -> &RedisStore {
        &self.p.store
    }

    /// Why the slice stopped, once it has (taken by the runtime).
    pub fn take_exit(&mut self) -> Option<SliceExit> {
        self.exit.take()
    }

    /// Signalled when the slice stops without the workflow returning.
    pub fn exit_signal(&self) -> Arc<Notify> {
        self.notify.clone()
    }

    /// Stops the slice: records why, wakes the runtime, and never returns (the runtime drops
    /// the workflow future).
    pub(super) async fn stop<T>(&mut self, exit: SliceExit) -> T {
        tracing::debug!(thread.id = %self.p.lease.thread, ?exit, "slice stops");
        self.exit = Some(exit);
        self.notify.notify_one();
        std::future::pending::<T>().await
    }

    /// Maps a store error to the slice exit it forces.
    pub(super) async fn store_failed<T>(&mut self, e: StoreError) -> T {
        if e.is_lease_lost() || matches!(e, StoreError::Missing(_)) {
            self.stop(SliceExit::LeaseLost(e.to_string())).await
        } else {
            self.stop(SliceExit::Transient(e.to_string())).await
        }
    }

    /// Checks a failpoint; an injected error stops the slice as transient.
    pub(super) async fn failpoint(&mut self, name: &'static str) {
        if let Err(e) = self.p.failpoints.check(name).await {
            self.stop::<()>(SliceExit::Transient(e.to_string())).await;
        }
    }

    /// The recorded entry at the cursor if it matches; blocks the run on non-determinism.
    pub(super) async fn replayed(&mut self, name: &str, kind: EntryKind) -> Option<Entry> {
        let idx = self.cursor;
        let e = self.p.journal.get(idx as usize)?.clone();
        if e.name == name && e.kind == kind {
            self.cursor += 1;
            return Some(e);
        }
        let reason = format!(
            "non-determinism at entry {idx}: the workflow called {} {name:?} but the journal recorded {} {:?}",
            kind.as_str(),
            e.kind.as_str(),
            e.name
        );
        self.block(&reason, None).await
    }

    /// Stops the run as blocked with a reason (and the in-doubt effect key, if any).
    pub(super) async fn block<T>(&mut self, reason: &str, effect: Option<&str>) -> T {
        if self.p.replay_only {
            return self.stop(SliceExit::Blocked(reason.to_owned())).await;
        }
        let r = self
            .p
            .store
            .finish(
                &mut self.p.lease,
                None,
                RunStatus::Blocked,
                None,
                None,
                Some(reason),
                effect,
                ("blocked", reason),
            )
            .await;
        match r {
            Ok(()) => self.stop(SliceExit::Blocked(reason.to_owned())).await,
            Err(e) => self.store_failed(e).await,
        }
    }

    /// Gate before every live call: replay-only refusal, shutdown and budget yields, the
    /// journal limit.
    pub(super) async fn before_live(&mut self, name: &str) {
        self.replay_span = None;
        if self.p.replay_only {
            self.stop::<()>(SliceExit::WouldRunLive(name.to_owned())).await;
        }
        let over_budget = self.live_in_slice > 0
            && (self.live_in_slice >= self.p.limits.max_steps || self.started.elapsed() >= self.p.limits.max_time);
        if self.p.shutdown.is_cancelled() || over_budget {
            let redeliver = self.p.store.config().redeliver;
            let r = self
                .p
                .store
                .suspend(
                    &mut self.p.lease,
                    None,
                    RunStatus::Pending,
                    Some(redeliver),
                    None,
                    ("yielded", name),
                )
                .await;
            match r {
                Ok(_) => self.stop::<()>(SliceExit::Yielded).await,
                Err(e) => self.store_failed::<()>(e).await,
            }
        }
        if self.cursor >= self.p.limits.max_entries {
            let reason = format!(
                "journal would exceed the maximum of {} entries",
                self.p.limits.max_entries
            );
            let r = self
                .p
                .store
                .finish(
                    &mut self.p.lease,
                    None,
                    RunStatus::Failed,
                    None,
                    Some(&reason),
                    None,
                    None,
                    ("failed", &reason),
                )
                .await;
            match r {
                Ok(()) => self.stop::<()>(SliceExit::Failed(reason)).await,
                Err(e) => self.store_failed::<()>(e).await,
            }
        }
        self.live_in_slice += 1;
    }

    /// Commits the entry at the cursor (fenced, compare-and-swap) and advances.
    pub(super) async fn commit(&mut self, entry: Entry, event: &str, consume_signal: Option<&str>) {
        let idx = self.cursor;
        let is_step = entry.kind == EntryKind::Step;
        if is_step {
            self.failpoint("step.before_commit").await;
        }
        // Plain step commits record no event (the journal entry is the record).
        let detail = if event.is_empty() {
            String::new()
        } else {
            format!("{idx} {}", entry.name)
        };
        let started = Instant::now();
        let r = self
            .p
            .store
            .commit(&mut self.p.lease, idx, &entry, (event, &detail), consume_signal)
            .instrument(tracing::debug_span!("commit", step.index = idx))
            .await;
        if let Err(e) = r {
            return self.store_failed(e).await;
        }
        let m = metrics();
        m.commit_seconds.observe(started.elapsed().as_secs_f64());
        let outcome = match (&entry.outcome, event) {
            (_, "effect_skipped") => "skipped",
            (Outcome::Ok(_), _) => "ok",
            (Outcome::Err(_), _) => "error",
        };
        let kind = entry.kind.as_str();
        inc(
            &m.steps,
            &[("workflow", &self.p.workflow), ("kind", kind), ("outcome", outcome)],
        );
        self.p.journal.push(entry);
        self.cursor += 1;
        if is_step {
            self.failpoint("step.after_commit").await;
        }
    }

    /// Runs `fut` unless the lease is lost first (then the slice stops and `fut` is dropped).
    pub(super) async fn guarded<T>(&mut self, fut: impl Future<Output = T>) -> T {
        let lost = self.p.lease_lost.clone();
        tokio::select! {
            biased;
            _ = lost.cancelled() => self.stop(SliceExit::LeaseLost("lease lost during a call".into())).await,
            v = fut => v,
        }
    }

    /// Runs `f` with the retry policy; returns the outcome and the attempts it took.
    pub(super) async fn attempt_loop<T, F, Fut, E>(
        &mut self,
        name: &str,
        policy: &RetryPolicy,
        mut f: F,
    ) -> (Result<T, StepError>, u32)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Into<StepError>,
    {
        let mut attempt = 1;
        loop {
            let r = self.guarded(f()).await.map_err(Into::into);
            match r {
                Err(e) if policy.should_retry(attempt, &e) => {
                    let delay = policy.backoff(attempt);
                    tracing::warn!(thread.id = %self.p.lease.thread, step.name = name, task.attempt = attempt, error = %e, ?delay, "call failed, retrying");
                    let detail = format!("{name} attempt {attempt}: {e}");
                    if let Err(err) = self.p.store.event(&self.p.lease, "retried", &detail).await {
                        return self.store_failed(err).await;
                    }
                    self.guarded(tokio::time::sleep(delay)).await;
                    attempt += 1;
                }
                other => return (other, attempt),
            }
        }
    }

    /// `step`: at-least-once work, retried by the workflow's policy; the result (or final
    /// error) is journaled and replayed.
    pub async fn step<T, F, Fut, E>(&mut self, name: &str, f: F) -> Result<T, WorkflowError>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Into<StepError>,
    {
        let policy = self.p.retry.clone();
        self.step_with(name, &policy, f).await
    }

    /// `step` with its own retry policy.
    pub async fn step_with<T, F, Fut, E>(&mut self, name: &str, policy: &RetryPolicy, f: F) -> Result<T, WorkflowError>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Into<StepError>,
    {
        if let Some(e) = self.replayed(name, EntryKind::Step).await {
            return decode_outcome("step", name, e.outcome);
        }
        let span = tracing::debug_span!("step", step.name = name, step.index = self.cursor);
        let outcome = async {
            self.before_live(name).await;
            let started = Instant::now();
            let (r, attempts) = self.attempt_loop(name, policy, f).await;
            let m = metrics();
            let step_labels = labels(&[("workflow", &self.p.workflow)]);
            m.step_seconds
                .get_or_create(&step_labels)
                .observe(started.elapsed().as_secs_f64());
            let outcome = match r {
                Ok(v) => match serde_json::to_value(&v) {
                    Ok(j) => Outcome::Ok(j),
                    Err(e) => Outcome::Err(format!("result does not encode as JSON: {e}")),
                },
                Err(e) => Outcome::Err(e.message),
            };
            self.commit(Entry::new(name, EntryKind::Step, outcome.clone(), attempts), "", None)
                .await;
            outcome
        }
        .instrument(span)
        .await;
        decode_outcome("step", name, outcome)
    }
}

/// Decodes a recorded outcome into the type the code asks for.
pub(super) fn decode_outcome<T: DeserializeOwned>(
    kind: &'static str,
    name: &str,
    o: Outcome,
) -> Result<T, WorkflowError> {
    match o {
        Outcome::Ok(v) => serde_json::from_value(v).map_err(|e| WorkflowError::Decode {
            name: name.to_owned(),
            message: e.to_string(),
        }),
        Outcome::Err(message) => Err(WorkflowError::CallFailed {
            kind,
            name: name.to_owned(),
            message,
        }),
    }
}
