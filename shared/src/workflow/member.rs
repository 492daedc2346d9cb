//! Steps and effects: the calls that run side by side. Each reserves its journal index when
//! first polled, runs its function without holding the context, and journals its entry in
//! index order (see `seq.rs` for the order, `effect.rs` for the effect's exactly-once rules).

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::future::Future;
use tokio::time::Instant;
use tracing::Instrument;

use super::calls::StepOptions;
use super::ctx::{attempts, decode_entry, decode_outcome, watched, Attempted, Cut, Reader, SliceExit};
use super::effect::effect_entry;
use super::seq::{in_function, Locked, Reserved};
use super::{Ctx, EffectCtx, EffectOptions, RetryPolicy, StepError, WorkflowError};
use crate::ids::EffectKey;
use crate::journal::{Entry, EntryKind, Outcome};
use savepoint_core::metrics::{labels, metrics};

impl Ctx {
    /// `step`: at-least-once work, retried by the workflow's policy; the result (or final
    /// error) is journaled and replayed. Runs when awaited; options go on the call:
    /// `.retry(policy)`, `.on_queue("gpu")` ([`StepCall`](super::StepCall)). Steps run side by
    /// side under `futures::join!` and `join_all`, journaled in the order written.
    pub fn step<'c, T, F, Fut>(&'c self, name: &str, f: F) -> super::StepCall<'c, T>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        F: FnMut() -> Fut + Send + 'c,
        Fut: Future<Output = Result<T, StepError>> + Send + 'c,
    {
        let name = name.to_owned();
        super::StepCall::new(Box::new(move |o: StepOptions| {
            Box::pin(async move { self.run_step(&name, o, f).await })
        }))
    }

    /// `effect`: a side effect performed at most once per `key`, or the run blocks saying so.
    /// `f` receives an [`EffectCtx`] with the key and the fencing token so it can pass both
    /// to providers that honour them. Runs when awaited; options go on the call:
    /// `.policy(EffectPolicy::RetrySafe)`, `.retry(policy)` ([`EffectCall`](super::EffectCall)).
    /// Effects run side by side under `futures::join!` too, each under every rule of a lone
    /// effect; they are never raced (one dropped while its function runs blocks the run in
    /// doubt).
    ///
    /// `name` is an [`Effect<T>`](super::Effect) constant (the result's type is its `T`, and its
    /// schema is published), or a name.
    pub fn effect<'c, T, F, Fut>(
        &'c self,
        name: impl Into<super::Effect<T>>,
        key: impl Into<String>,
        f: F,
    ) -> super::EffectCall<'c, T>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        F: FnMut(EffectCtx) -> Fut + Send + 'c,
        Fut: Future<Output = Result<T, StepError>> + Send + 'c,
    {
        let (name, key) = (name.into().name().to_owned(), key.into());
        super::EffectCall::new(Box::new(move |opts: EffectOptions| {
            Box::pin(async move { self.run_effect(&name, key, opts, f).await })
        }))
    }

    /// Runs a step (what awaiting a [`StepCall`](super::StepCall) does) with its options: its
    /// own retry policy, the task queue it is routed to, a synchronous checkpoint.
    pub(super) async fn run_step<T, F, Fut>(&self, name: &str, opts: StepOptions, f: F) -> Result<T, WorkflowError>
    where
        T: Serialize + DeserializeOwned + 'static,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StepError>>,
    {
        let (mut core, index) = self.reserve(name).await;
        let claim = Reserved::new(self, index, name);
        let reader = Reader::of::<T>();
        if let Some(e) = replayed_at(&mut core, name, EntryKind::Step, index).await {
            let e = core.upgraded_entry(reader, e).await;
            claim.journaled();
            return decode_entry("step", e);
        }
        let tv = core.stamp(reader).await;
        let span = tracing::debug_span!("step", step.name = name, step.index = index);
        let StepOptions { retry, queue, durable } = opts;
        let entry = async {
            core.route = queue;
            let in_flight = core.cursor < index;
            core.before_live_at(name, index, in_flight).await;
            core.route = None;
            let policy = retry.unwrap_or_else(|| core.default_retry());
            let (stubs, workflow) = (core.p.stubs.clone(), core.p.workflow.clone());
            let started = Instant::now();
            let mut f = f;
            let attempted = match &stubs {
                Some(stubs) => {
                    self.attempts(core, index, name, &policy, Cut::Step, |attempt| {
                        stubs.choose(name, attempt, &mut f).run::<T, StepError>(name)
                    })
                    .await
                }
                None => self.attempts(core, index, name, &policy, Cut::Step, |_| f()).await,
            };
            let (r, attempts) = match attempted {
                // (Inside a group of calls side by side the failure is journaled: stopping
                // the slice would cut the other calls off mid-flight.)
                Attempted::Done(Err(e), n) if policy.pauses(&e) && self.alone(index) => {
                    return self
                        .turn(index)
                        .await
                        .pause_from_code::<Entry>(index, name, &e, n)
                        .await;
                }
                Attempted::Stopped => return self.turn(index).await.yield_here::<Entry>(name).await,
                Attempted::Done(r, attempts) => (r, attempts),
                // (Unreachable: a step's panic is a failed attempt.)
                Attempted::Unknown(msg) => (Err(StepError::retryable(msg)), 1),
            };
            let m = metrics();
            m.step_seconds
                .get_or_create(&labels(&[("workflow", &workflow)]))
                .observe(started.elapsed().as_secs_f64());
            let entry = match r {
                Ok(v) => match serde_json::to_value(&v) {
                    Ok(j) => Entry::new(name, EntryKind::Step, Outcome::Ok(j), attempts).with_value_version(tv),
                    Err(e) => {
                        let message = format!("result does not encode as JSON: {e}");
                        Entry::new(name, EntryKind::Step, Outcome::Err(message), attempts)
                    }
                },
                Err(e) => {
                    let failure = e.to_failure(&policy);
                    Entry::failed(name, EntryKind::Step, e.message, failure, attempts)
                }
            };
            let mut core = self.turn(index).await;
            core.commit_step(entry.clone(), durable).await;
            entry
        }
        .instrument(span)
        .await;
        claim.journaled();
        decode_entry("step", entry)
    }

    /// Runs `f(attempt)` under the retry policy as the call at `index`, letting go of the
    /// state meanwhile (other calls go on), watched for the lease and the deadlines.
    async fn attempts<T, F, Fut, E>(
        &self,
        core: Locked<'_>,
        index: u32,
        name: &str,
        policy: &RetryPolicy,
        cut: Cut,
        f: F,
    ) -> Attempted<T>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Into<StepError>,
    {
        let (tools, watch, depth) = (core.call_tools(), core.watch(), core.in_function.clone());
        drop(core);
        let alone = || self.alone(index);
        let stoppable: Option<&(dyn Fn() -> bool + Sync)> = (cut == Cut::Step).then_some(&alone);
        let run = in_function(&depth, attempts(&tools, index, name, policy, cut, stoppable, f));
        match watched(&watch, run).await {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => self.lock().await.store_failed(e).await,
            Err(broke) => self.lock().await.broke(broke).await,
        }
    }

    /// Journals the entry of the call at `index` once every call before it is journaled.
    async fn journal_in_turn(&self, index: u32, entry: Entry, event: &str) {
        let mut core = self.turn(index).await;
        core.commit(entry, event, None).await;
    }

    /// Runs an effect with `opts` (what awaiting an [`EffectCall`](super::EffectCall) does).
    pub(super) async fn run_effect<T, F, Fut>(
        &self,
        name: &str,
        key: String,
        opts: EffectOptions,
        f: F,
    ) -> Result<T, WorkflowError>
    where
        T: Serialize + DeserializeOwned + 'static,
        F: FnMut(EffectCtx) -> Fut,
        Fut: Future<Output = Result<T, StepError>>,
    {
        let (mut core, index) = self.reserve(name).await;
        let mut claim = Reserved::new(self, index, name);
        let reader = Reader::of::<T>();
        if let Some(e) = replayed_at(&mut core, name, EntryKind::Effect, index).await {
            let e = core.upgraded_entry(reader, e).await;
            claim.journaled();
            return decode_entry("effect", e);
        }
        let tv = core.stamp(reader).await;
        let in_flight = core.cursor < index;
        core.before_live_at(name, index, in_flight).await;
        // Outside the run: every entry before the effect's intent is durable first, so its key
        // never derives from a result a crash could change.
        core.barrier().await;
        let key = match EffectKey::new(key) {
            Ok(k) => k,
            Err(e) => return core.block_on_bad_key(name, e).await,
        };
        claim.effect(key.clone());
        let intent_span =
            tracing::debug_span!("effect.intent", effect.name = name, effect.key = %key, step.index = index);
        if let Some(recorded) = core
            .take_intent(name, &key, &opts.policy, index)
            .instrument(intent_span)
            .await
        {
            if let Err(e) = serde_json::from_value::<T>(recorded.clone()) {
                return core.undecodable_result(name, &key, index, &e.to_string()).await;
            }
            // Until its turn, the key's record is the only proof the effect happened.
            core.unjournaled.push(key.clone());
            drop(core);
            // (An effect's record keeps no version: a result it holds is taken as this code's,
            // after the decode check above.)
            let entry = effect_entry(name, &key, Outcome::Ok(recorded.clone()), 0).with_value_version(tv);
            self.journal_in_turn(index, entry, "effect_skipped").await;
            claim.journaled();
            return decode_outcome("effect", name, Outcome::Ok(recorded));
        }
        claim.called(true);
        let (entry, event) = self.call_effect(core, name, &key, index, opts, f).await;
        // A result this call's function returned is at this code's version; one found in the
        // key's record (another attempt's, an operator's) only if it reads as this code's type
        // (else the decode below blocks the run).
        let own = event == "effect_done"
            || matches!(&entry.outcome, Outcome::Ok(v) if serde_json::from_value::<T>(v.clone()).is_ok());
        let entry = entry.with_value_version(tv.filter(|_| own));
        claim.called(false);
        self.journal_in_turn(index, entry.clone(), event).await;
        claim.journaled();
        decode_entry("effect", entry)
    }

    /// Calls the effect function under its retry policy with the key and the fencing token,
    /// and settles the key the moment it returns: the entry to journal and its event.
    async fn call_effect<T, F, Fut>(
        &self,
        mut core: Locked<'_>,
        name: &str,
        key: &EffectKey,
        index: u32,
        opts: EffectOptions,
        mut f: F,
    ) -> (Entry, &'static str)
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(EffectCtx) -> Fut,
        Fut: Future<Output = Result<T, StepError>>,
    {
        if core.p.clock.expired() {
            core.stop::<()>(SliceExit::DeadlinePassed(format!("before effect {name:?}")))
                .await;
        }
        core.mark_called(index);
        let fx = EffectCtx {
            key: key.as_str().to_owned(),
            fence: core.fence(),
            thread: core.thread_id().clone(),
            index,
            attempt: 0,
        };
        let policy = opts.retry.clone().unwrap_or_else(|| core.default_retry());
        let cut = Cut::effect(&opts.policy);
        let stubs = core.p.stubs.clone();
        let call_span = tracing::debug_span!("effect.call", effect.name = name, effect.key = %key, step.index = index);
        let attempted = match &stubs {
            Some(stubs) => {
                self.attempts(core, index, name, &policy, cut, |attempt| {
                    let fx = EffectCtx { attempt, ..fx.clone() };
                    stubs.choose(name, attempt, || f(fx)).run::<T, StepError>(name)
                })
                .instrument(call_span)
                .await
            }
            None => {
                self.attempts(core, index, name, &policy, cut, |attempt| {
                    f(EffectCtx { attempt, ..fx.clone() })
                })
                .instrument(call_span)
                .await
            }
        };
        let mut core = self.lock().await;
        let holder = core.holder(index);
        match attempted {
            Attempted::Done(Ok(v), _) => match serde_json::to_value(&v) {
                Ok(value) => {
                    let done_span = tracing::debug_span!("effect.done", effect.key = %key, step.index = index);
                    let (value, attempts) = core.mark_done(key, value, index).instrument(done_span).await;
                    (effect_entry(name, key, Outcome::Ok(value), attempts), "effect_done")
                }
                Err(e) => {
                    let reason = format!("effect {name:?} result does not encode as JSON: {e}");
                    core.block_on_key(&reason, key, &holder).await
                }
            },
            Attempted::Done(Err(e), attempts) => {
                let failure = e.to_failure(&policy);
                core.failed(name, key, e, failure, attempts, index).await
            }
            // (Not reached: an effect's attempts never stop between retries; were they to, its
            // last attempt may have happened.)
            Attempted::Stopped => {
                let reason = format!("effect {key} outcome unknown: its slice stopped between attempts");
                core.block_on_key(&reason, key, &holder).await
            }
            Attempted::Unknown(cause) => {
                // It may have happened: in doubt, as after a crash, under the same policy.
                let reason = format!("effect {key} outcome unknown: {cause}");
                core.block_on_key(&reason, key, &holder).await
            }
        }
    }
}

/// The recorded outcome of the call `kind name` at `index` (moving the cursor past it), or
/// `None` when the journal ends before it; blocks the run on non-determinism. (A call's index
/// is inside the recorded journal only when every call before it was replayed, so the cursor
/// is at it.)
async fn replayed_at(core: &mut Locked<'_>, name: &str, kind: EntryKind, index: u32) -> Option<Entry> {
    if index as usize >= core.journal().len() || core.cursor != index {
        return None;
    }
    core.replayed(name, kind).await
}
