//! `effect`: exactly-once effects by idempotency key (ARCHITECTURE §8).
//!
//! Order: begin (the key recorded in the run at this index) → intent (SET NX, fenced) →
//! perform → mark the key done with the result → journal. Marking the key first means a
//! crash before the journal write is healed by the next attempt, which finds the key done
//! and journals the recorded result without repeating the effect.
//!
//! Every write around the call is idempotent for the same attempt (thread, index, fence), so
//! a transient Redis error or a lost reply is retried in-process while the local lease
//! deadline holds; only a real crash (or a deadline that passes) leaves an effect in doubt.

use futures::future::BoxFuture;
use serde_json::Value;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::ctx::{Core, HeldIntent, SliceExit};
use super::decide::{self, Intent};
use super::{RetryPolicy, StepError};
use crate::ids::{EffectKey, IdError, ThreadId};
use crate::journal::{Entry, EntryKind, Failure, Outcome};
use savepoint_core::metrics::{inc, metrics};
use savepoint_core::model::{BlockKind, EffectClaim, Finish, Holder, RunStatus};
use savepoint_core::outcome::{EffectDone, EffectRecord, EffectRelease, Suspend};
use savepoint_core::seam::RunStore;

use super::unused::WRITE_RETRY;
use savepoint_core::StoreError;

/// Asks the provider whether the effect with this key happened: `Some(result)` if it did,
/// `None` if it did not.
pub type ReconcileFn = Arc<dyn Fn(String) -> BoxFuture<'static, Result<Option<Value>, StepError>> + Send + Sync>;

/// What an effect function is given: the idempotency key to pass to the provider, and the
/// fencing token of the attempt, which only grows (every claim of the run raises it). A
/// provider that remembers the highest token it has seen for a key and refuses lower ones
/// stops a stale worker (one paused or cut off past its lease) that the lease alone cannot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectCtx {
    /// The idempotency key (send it as `Idempotency-Key`, a unique column, …).
    pub key: String,
    /// The fencing token of this attempt (send it as `Fencing-Token`, a version column, …).
    pub fence: u64,
    /// The run.
    pub thread: ThreadId,
    /// The journal index of the call.
    pub index: u32,
    /// The attempt of the call under its retry policy (1-based).
    pub attempt: u32,
}

/// What to do when an earlier attempt of this run recorded the intent and died, so the
/// outcome is unknown.
#[derive(Clone, Default)]
pub enum EffectPolicy {
    /// Stop the run as `blocked: effect <key> outcome unknown` until an operator resolves it.
    #[default]
    Block,
    /// The provider honours the idempotency key: call again with the same key.
    RetrySafe,
    /// Ask the provider what happened.
    Reconcile(ReconcileFn),
}

impl EffectPolicy {
    /// The policy without its function (what [`decide::intent`] needs).
    pub fn kind(&self) -> decide::PolicyKind {
        match self {
            EffectPolicy::Block => decide::PolicyKind::Block,
            EffectPolicy::RetrySafe => decide::PolicyKind::RetrySafe,
            EffectPolicy::Reconcile(_) => decide::PolicyKind::Reconcile,
        }
    }
}

impl std::fmt::Debug for EffectPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EffectPolicy::Block => "block",
            EffectPolicy::RetrySafe => "retry_safe",
            EffectPolicy::Reconcile(_) => "reconcile",
        })
    }
}

impl EffectPolicy {
    /// Parses `block`, `retry_safe` (reconcile needs a function: see [`EffectPolicy::reconcile`]).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "block" => Some(EffectPolicy::Block),
            "retry_safe" => Some(EffectPolicy::RetrySafe),
            _ => None,
        }
    }

    /// A reconcile policy from an async function of the key.
    pub fn reconcile<F, Fut>(f: F) -> Self
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Option<Value>, StepError>> + Send + 'static,
    {
        EffectPolicy::Reconcile(Arc::new(move |k| Box::pin(f(k))))
    }
}

/// Options of one effect call.
#[derive(Clone, Debug, Default)]
pub struct EffectOptions {
    /// In-doubt policy.
    pub policy: EffectPolicy,
    /// Retry policy for failures the effect function reports (the effect did not happen).
    pub retry: Option<RetryPolicy>,
}

impl EffectOptions {
    /// Options with this in-doubt policy.
    pub fn policy(policy: EffectPolicy) -> Self {
        Self { policy, retry: None }
    }
}

/// First back-off of a run whose key another live run holds (doubles per try).
const BUSY_BACKOFF: Duration = Duration::from_millis(250);
/// Longest back-off on a held key.
const BUSY_BACKOFF_CAP: Duration = Duration::from_secs(30);

/// The back-off after `n` earlier tries on a key held by another run.
pub fn busy_backoff(n: u32) -> Duration {
    BUSY_BACKOFF.saturating_mul(1u32 << n.min(16)).min(BUSY_BACKOFF_CAP)
}

/// Injected errors (failpoints standing for lost replies) retried before giving up.
const MAX_INJECTED: u32 = 10;

/// What the in-doubt policy decided.
enum Doubt {
    /// It was applied, with this result: journal it.
    Applied(Value),
    /// Perform it again (take the intent over).
    Perform,
    /// The record changed meanwhile: look at the key again.
    Again,
}

impl Core {
    /// Records the key at `idx` in the run and takes its intent: `Some(result)` when the effect
    /// is already applied (skip it), `None` when this slice holds the intent and performs it.
    pub(super) async fn take_intent(
        &mut self,
        name: &str,
        key: &EffectKey,
        policy: &EffectPolicy,
        idx: u32,
    ) -> Option<Value> {
        self.begin(name, key, idx).await;
        let recorded = self.acquire(name, key, policy, idx).await;
        if recorded.is_some() {
            self.unhold(idx);
        }
        recorded
    }

    /// The key's recorded result does not decode into the code's type. An operator's result
    /// is taken back (the key is in doubt again) and the run is blocked on the key, to be
    /// resolved again with the right shape; a result a worker recorded blocks the run for a
    /// fix in the code. Never journaled, never failed.
    pub(super) async fn undecodable_result<T>(&mut self, name: &str, key: &EffectKey, idx: u32, err: &str) -> T {
        let (store, thread, fence) = (self.p.store.clone(), self.thread_id().clone(), self.p.lease.fence);
        let reopened = self.durable(|| store.effect_reopen(key, &thread, idx, fence)).await;
        if reopened {
            let holder = self.holder(idx);
            let reason = format!(
                "effect {key} outcome unknown: the result settled for effect {name:?} (by an operator or a \
                 reconcile) does not decode: {err}; resolve it again with a result of the right shape"
            );
            return self.block_on_key(&reason, key, &holder).await;
        }
        let reason = format!(
            "the result recorded for effect {name:?} (key {key}) does not decode: {err}; fix the type in the code \
             and retry the run"
        );
        // The record is the only proof the effect happened until the fixed code journals it.
        self.unjournaled.push(key.clone());
        self.block(BlockKind::Undecodable, &reason, None).await
    }

    /// Blocks the run on the in-doubt effect `key`, whose record `holder` holds.
    pub(super) async fn block_on_key<T>(&mut self, reason: &str, key: &EffectKey, holder: &Holder) -> T {
        self.block(BlockKind::InDoubt, reason, Some((key.as_str(), holder)))
            .await
    }

    /// Blocks the run at the effect `name`, whose key is not a valid effect key (`error`).
    pub(super) async fn block_on_bad_key<T>(&mut self, name: &str, error: IdError) -> T {
        let reason = format!("effect {name:?}: {error}");
        self.block(BlockKind::Other, &reason, None).await
    }

    /// Forgets the intent held at `idx` (settled).
    pub(super) fn unhold(&mut self, idx: u32) {
        self.held.retain(|h| h.index != idx);
    }

    /// Marks the intent at `idx` as acted on: its outcome is unknown if the slice stops now.
    pub(super) fn mark_called(&mut self, idx: u32) {
        for h in self.held.iter_mut().filter(|h| h.index == idx) {
            h.called = true;
        }
    }

    pub(super) fn holder(&self, index: u32) -> Holder {
        Holder {
            thread: self.thread_id().to_string(),
            index: i64::from(index),
            fence: self.p.lease.fence,
        }
    }

    /// Retries an idempotent effect write after transient errors while the local lease
    /// deadline holds; any other error (or the deadline) stops the slice.
    pub(super) async fn durable<T, Fut>(&mut self, mut op: impl FnMut() -> Fut) -> T
    where
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let mut pause = WRITE_RETRY;
        loop {
            match op().await {
                Ok(v) => return v,
                Err(e) if e.is_transient() && !self.p.clock.expired() => {
                    tracing::debug!(error = %e, "effect write failed; retrying");
                    let left = self.p.clock.remaining();
                    tokio::time::sleep(pause.min(left)).await;
                    pause = (pause * 2).min(Duration::from_millis(400));
                }
                Err(e) if e.is_transient() => {
                    return self
                        .stop(SliceExit::DeadlinePassed(format!("retrying an effect write: {e}")))
                        .await
                }
                Err(e) => return self.store_failed(e).await,
            }
        }
    }

    /// Records the key at this index in the run (cancel settles it from there; a resumed run
    /// that derives another key for the same call is non-determinism).
    async fn begin(&mut self, name: &str, key: &EffectKey, idx: u32) {
        let (store, lease) = (self.p.store.clone(), self.p.lease.clone());
        // The first send is the conservative start of the extension (a retry was sent later).
        let sent = tokio::time::Instant::now();
        let changed = self.durable(|| store.effect_begin(&lease, idx, key, name)).await;
        self.p.clock.confirmed(sent);
        if let Some(old) = changed {
            let reason = format!(
                "non-determinism at entry {idx}: effect {name:?} now has the key {:?} but this run recorded the \
                 key {old:?} for it; effect keys must be derived from the input and recorded values, never from \
                 the clock or randomness",
                key.as_str()
            );
            self.block::<()>(BlockKind::NonDeterminism, &reason, None).await;
        }
    }

    /// Takes the key's intent. `Some(result)` when the effect is already applied (skip it).
    async fn acquire(&mut self, name: &str, key: &EffectKey, policy: &EffectPolicy, idx: u32) -> Option<Value> {
        let thread = self.thread_id().clone();
        let fence = self.p.lease.fence;
        let store = self.p.store.clone();
        let (mut takeover, mut injected) = (false, 0);
        loop {
            let claim = self
                .durable(|| store.effect_intent(key, &thread, idx, fence, takeover))
                .await;
            if claim == EffectClaim::Won {
                self.unhold(idx);
                self.held.push(HeldIntent {
                    key: key.clone(),
                    index: idx,
                    called: false,
                });
                // An injected error here stands for a lost reply: the write is retried.
                if self.failpoint_err("effect.after_intent").await {
                    self.injected(&mut injected, "effect.after_intent").await;
                    continue;
                }
            }
            match decide::intent(&claim, key.as_str(), thread.as_str(), idx, policy.kind()) {
                Intent::Perform => return None,
                Intent::Skip(v) => {
                    inc(&metrics().effects, &[("outcome", "skipped")]);
                    return Some(v);
                }
                Intent::Busy(holder) => {
                    inc(&metrics().effects, &[("outcome", "busy")]);
                    if orphan_if_owner_ended(store.as_ref(), key, &holder)
                        .await
                        .unwrap_or(false)
                    {
                        continue;
                    }
                    let tries = self.p.busy_tries;
                    return self.back_off(name, key, &holder, tries, idx).await;
                }
                Intent::Block(reason, Some(holder)) => {
                    inc(&metrics().effects, &[("outcome", "in_doubt")]);
                    return self.block_on_key(&reason, key, &holder).await;
                }
                Intent::Block(reason, None) => return self.block(BlockKind::Other, &reason, None).await,
                Intent::Fenced(reason) => return self.stop(SliceExit::LeaseLost(reason)).await,
                Intent::InDoubt(holder, rule) => {
                    inc(&metrics().effects, &[("outcome", "in_doubt")]);
                    match self.in_doubt(key, &thread, &holder, rule, policy).await {
                        Doubt::Applied(recorded) => return Some(recorded),
                        Doubt::Perform => takeover = true,
                        Doubt::Again => takeover = false,
                    }
                }
            }
        }
    }

    /// Another run holds the key: sleep with a growing back-off. The worker that claims the
    /// run again checks the key before replaying (see the runtime), so waiting costs one
    /// claim and one read per try, not a replay.
    pub(super) async fn back_off<T>(&mut self, name: &str, key: &EffectKey, holder: &Holder, n: u32, idx: u32) -> T {
        let delay = busy_backoff(n);
        let detail = format!("{name}: key {key} held by {holder}; next try in {delay:?}");
        let how = Suspend {
            backoff_on: Some((key.as_str(), n + 1)),
            drop_begin: Some(idx),
            ..Suspend::until(RunStatus::Sleeping, delay)
        };
        let r = self.suspend_run(None, how, ("effect_busy", &detail)).await;
        match r {
            Ok(s) => self.stop(SliceExit::Suspended { woke: false, rv: s.rv }).await,
            Err(e) => self.store_failed(e).await,
        }
    }

    /// The function promised the effect did not happen: free the key; the entry to journal is
    /// the failure, or, if the key turns out done (another attempt or an operator applied it),
    /// the recorded result.
    pub(super) async fn failed(
        &mut self,
        name: &str,
        key: &EffectKey,
        e: StepError,
        failure: Failure,
        attempts: u32,
        idx: u32,
    ) -> (Entry, &'static str) {
        let (store, thread, fence) = (self.p.store.clone(), self.thread_id().clone(), self.p.lease.fence);
        let released = self.durable(|| store.effect_release(key, &thread, idx, fence)).await;
        self.unhold(idx);
        if let EffectRelease::Done(recorded) = released {
            // Until its turn, the key's record is the only proof the effect happened.
            self.unjournaled.push(key.clone());
            return (
                effect_entry(name, key, Outcome::Ok(recorded), attempts),
                "effect_skipped",
            );
        }
        if let EffectRelease::NotOwner(holder) = released {
            return self
                .stop(SliceExit::LeaseLost(format!(
                    "effect {key} intent now held by {holder}"
                )))
                .await;
        }
        inc(&metrics().effects, &[("outcome", "failed")]);
        (
            effect_entry(name, key, Outcome::Err(e.message), attempts).with_failure(failure),
            "effect_failed",
        )
    }

    /// Marks the key done with the result (retrying lost replies); returns the result to
    /// journal (the first recorded one if the key was done before) and the attempts.
    pub(super) async fn mark_done(&mut self, key: &EffectKey, value: Value, idx: u32) -> (Value, u32) {
        let (store, thread, fence) = (self.p.store.clone(), self.thread_id().clone(), self.p.lease.fence);
        // An injected error before the write stands for a failed write, after it for a lost
        // reply: both are retried.
        let mut injected = 0;
        while self.failpoint_err("effect.after_call").await {
            self.injected(&mut injected, "effect.after_call").await;
        }
        loop {
            let done = self
                .durable(|| store.effect_done(key, &thread, idx, fence, &value))
                .await;
            if self.failpoint_err("effect.after_done").await {
                self.injected(&mut injected, "effect.after_done").await;
                continue;
            }
            self.unhold(idx);
            if matches!(done, EffectDone::Recorded | EffectDone::Already(_)) {
                self.unjournaled.push(key.clone());
            }
            return match done {
                EffectDone::Recorded => {
                    inc(&metrics().effects, &[("outcome", "applied")]);
                    (value, 1)
                }
                EffectDone::Already(first) => (first, 1),
                EffectDone::NotOwner(holder) => {
                    self.stop(SliceExit::LeaseLost(format!(
                        "effect {key} intent now held by {holder}"
                    )))
                    .await
                }
                EffectDone::Stale | EffectDone::Changed(_) => {
                    self.stop(SliceExit::LeaseLost(format!(
                        "effect {key}: a newer attempt holds the intent"
                    )))
                    .await
                }
            };
        }
    }

    /// Counts an injected error; past [`MAX_INJECTED`] the slice stops as transient.
    async fn injected(&mut self, count: &mut u32, point: &'static str) {
        *count += 1;
        if *count >= MAX_INJECTED {
            let e = savepoint_core::failpoints::Injected(point);
            self.stop::<()>(SliceExit::Transient(e.to_string())).await;
        }
    }

    /// Applies the in-doubt policy; blocks the run when it says so.
    async fn in_doubt(
        &mut self,
        key: &EffectKey,
        thread: &ThreadId,
        holder: &Holder,
        rule: decide::DoubtRule,
        policy: &EffectPolicy,
    ) -> Doubt {
        match (rule, policy) {
            (decide::DoubtRule::Block, _) => {
                let reason = format!("effect {key} outcome unknown");
                self.block_in_doubt(&reason, key, holder).await
            }
            (decide::DoubtRule::TakeOver, _) => {
                tracing::warn!(effect.key = %key, "in-doubt effect: retry_safe, calling again with the same key");
                Doubt::Perform
            }
            (decide::DoubtRule::Reconcile, EffectPolicy::Reconcile(check)) => {
                let check = check.clone();
                match self.guarded(check(key.as_str().to_owned())).await {
                    Ok(Some(v)) => {
                        tracing::info!(effect.key = %key, "in-doubt effect reconciled: it was applied");
                        self.reconciled(key, "applied: its recorded result is the provider's")
                            .await;
                        let store = self.p.store.clone();
                        match self.durable(|| store.settle_done(key, thread, &v, Some(holder))).await {
                            EffectDone::Already(first) => Doubt::Applied(first),
                            EffectDone::Recorded => Doubt::Applied(v),
                            // Someone else settled or took it meanwhile: look again.
                            _ => Doubt::Again,
                        }
                    }
                    Ok(None) => {
                        tracing::info!(effect.key = %key, "in-doubt effect reconciled: not applied, performing it");
                        self.reconciled(key, "not applied: calling it again with the same key")
                            .await;
                        Doubt::Perform
                    }
                    Err(e) => {
                        self.reconciled(key, &format!("failed: {e}; the run blocks in doubt"))
                            .await;
                        let reason = format!("effect {key} outcome unknown: reconcile failed: {e}");
                        self.block_in_doubt(&reason, key, holder).await
                    }
                }
            }
            // (A reconcile rule comes only from a reconcile policy.)
            (decide::DoubtRule::Reconcile, _) => {
                let reason = format!("effect {key} outcome unknown");
                self.block_in_doubt(&reason, key, holder).await
            }
        }
    }

    /// Records a reconcile's decision on the in-doubt effect `key` as the run's event
    /// `effect_reconciled` (the console's timeline and `GET /v1/runs/{thread}/events` show it),
    /// best effort: the decision stands whether or not the event is written.
    async fn reconciled(&mut self, key: &EffectKey, decision: &str) {
        if self.p.replay_only {
            return;
        }
        let detail = format!("{key}: {decision}");
        if let Err(e) = self.p.store.event(&self.p.lease, "effect_reconciled", &detail).await {
            tracing::debug!(error = %e, "could not record the reconcile decision as an event");
        }
    }

    /// Blocks the run on an in-doubt intent, unless its holder (an earlier attempt of this
    /// run) recorded that it never called the effect: then the intent is taken over.
    async fn block_in_doubt(&mut self, reason: &str, key: &EffectKey, holder: &Holder) -> Doubt {
        if self.p.replay_only {
            return self.block_on_key(reason, key, holder).await;
        }
        let how = Finish::Blocked {
            reason,
            kind: BlockKind::InDoubt,
            effect: Some((key.as_str(), holder)),
        };
        match self.write_block(reason, how).await {
            Ok(()) => self.stop(SliceExit::Blocked(reason.to_owned())).await,
            Err(StoreError::UnusedIntent { .. }) => {
                tracing::info!(effect.key = %key, %holder, "the in-doubt intent was never acted on by its holder: taking it over");
                Doubt::Perform
            }
            Err(e) => self.store_failed(e).await,
        }
    }
}

/// If the run holding a key's intent has ended (cancelled, expired, failed) without
/// settling it, turns the intent into an explicit "in doubt, owner ended" record. True when
/// it did (the caller looks at the key again).
pub async fn orphan_if_owner_ended(store: &dyn RunStore, key: &EffectKey, holder: &Holder) -> Result<bool, StoreError> {
    let Ok(owner) = ThreadId::new(holder.thread.clone()) else {
        return Ok(false);
    };
    let status = match store.header(&owner).await? {
        None => "missing".to_owned(),
        Some(h) if h.status.is_final() => h.status.as_str().to_owned(),
        Some(_) => return Ok(false),
    };
    let Ok(index) = u32::try_from(holder.index) else {
        return Ok(false);
    };
    store.effect_orphan(key, &owner, index, &status).await
}

/// Whether a run backing off on `key` should try again now: true unless another live run
/// still holds the key's intent.
pub async fn key_still_held(
    store: &dyn RunStore,
    key: &EffectKey,
    me: &ThreadId,
) -> Result<Option<Holder>, StoreError> {
    match store.effect_state(key).await? {
        Some(EffectRecord::Intent(h)) if h.thread != me.as_str() => {
            if orphan_if_owner_ended(store, key, &h).await? {
                return Ok(None);
            }
            Ok(Some(h))
        }
        _ => Ok(None),
    }
}

pub(super) fn effect_entry(name: &str, key: &EffectKey, outcome: Outcome, attempts: u32) -> Entry {
    let mut e = Entry::new(name, EntryKind::Effect, outcome, attempts);
    e.key = Some(key.as_str().to_owned());
    e
}
