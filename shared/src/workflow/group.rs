//! Parallel calls: several steps and effects in flight at once, journaled in call order.
//!
//! `&mut Ctx` allows one call at a time, so a fan-out is written as a group: [`Call`]s are
//! descriptions (a name, a kind, a function), and [`Ctx::all`] / [`Ctx::join`] run them
//! together. The group reserves one journal index per call in call order; the calls run
//! concurrently; each result is committed at its own index, in index order, as soon as every
//! call before it is committed. So the journal after a crash always holds a prefix of the
//! group, and a resumed run replays that prefix and runs the rest again, concurrently.
//!
//! Effects keep every exactly-once rule of a lone effect: each records its key at its index
//! and takes its intent (in index order, before any call starts), and each marks its key done
//! the moment its function returns, not when its turn to be journaled comes, so a crash in
//! between is healed from the key. An effect function that was running when the slice died is
//! in doubt under its own policy.
//!
//! [`Ctx::select`] runs steps as a race against a durable timeout: the deadline is recorded
//! first, so a resumed run keeps the original one; the first call to finish wins and the
//! others are dropped. Effects are not raced: a dropped effect call would be in doubt.

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

use super::ctx::{attempts, decode_outcome, Attempted, CallTools, Ctx, Cut, SliceExit};
use super::decide::{self, Replay};
use super::effect::effect_entry;
use super::{EffectCtx, EffectOptions, RetryPolicy, StepError, WorkflowError};
use crate::ids::EffectKey;
use crate::journal::{Entry, EntryKind, Outcome};
use savepoint_core::model::{BlockKind, Holder};

/// A call's function with its result type erased: the attempt's JSON result (or the encode
/// error of a result that did not encode), or the function's error.
type ErasedFn<'a> = Box<dyn FnMut(EffectCtx) -> BoxFuture<'a, Result<Result<Value, String>, StepError>> + Send + 'a>;

/// What kind of call a [`Call`] is.
enum CallKind {
    Step { retry: Option<RetryPolicy> },
    Effect { key: String, opts: EffectOptions },
}

/// One step or effect of a parallel group ([`Ctx::all`], [`Ctx::join`], [`Ctx::select`]).
/// Its closure is the same as `ctx.step`'s or `ctx.effect`'s.
pub struct Call<'a, T> {
    name: String,
    kind: CallKind,
    run: ErasedFn<'a>,
    /// Whether a recorded result decodes into the call's type (checked before an effect that
    /// is already done is journaled).
    decodes: fn(&Value) -> Result<(), String>,
    _t: PhantomData<fn() -> T>,
}

fn decodes<T: DeserializeOwned>(v: &Value) -> Result<(), String> {
    T::deserialize(v).map(|_| ()).map_err(|e| e.to_string())
}

impl<T> std::fmt::Debug for Call<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            CallKind::Step { .. } => "step",
            CallKind::Effect { .. } => "effect",
        };
        f.debug_struct("Call")
            .field("name", &self.name)
            .field("kind", &kind)
            .finish()
    }
}

fn erase<'a, T, Fut, E>(mut f: impl FnMut(EffectCtx) -> Fut + Send + 'a) -> ErasedFn<'a>
where
    T: Serialize,
    Fut: Future<Output = Result<T, E>> + Send + 'a,
    E: Into<StepError>,
{
    Box::new(move |fx| {
        let fut = f(fx);
        Box::pin(async move {
            let v = fut.await.map_err(Into::into)?;
            Ok(serde_json::to_value(&v).map_err(|e| format!("result does not encode as JSON: {e}")))
        })
    })
}

impl<'a, T: Serialize + DeserializeOwned> Call<'a, T> {
    /// A step (at-least-once, retried by the workflow's policy), as `ctx.step`.
    pub fn step<F, Fut>(name: &str, mut f: F) -> Self
    where
        F: FnMut() -> Fut + Send + 'a,
        Fut: Future<Output = Result<T, StepError>> + Send + 'a,
    {
        Self {
            name: name.to_owned(),
            kind: CallKind::Step { retry: None },
            run: erase(move |_| f()),
            decodes: decodes::<T>,
            _t: PhantomData,
        }
    }

    /// A step with its own retry policy, as `ctx.step_with`.
    pub fn step_with<F, Fut>(name: &str, policy: RetryPolicy, f: F) -> Self
    where
        F: FnMut() -> Fut + Send + 'a,
        Fut: Future<Output = Result<T, StepError>> + Send + 'a,
    {
        let mut call = Self::step(name, f);
        call.kind = CallKind::Step { retry: Some(policy) };
        call
    }

    /// An exactly-once effect under `key` (in-doubt policy `block`), as `ctx.effect`.
    pub fn effect<F, Fut>(name: &str, key: impl Into<String>, f: F) -> Self
    where
        F: FnMut(EffectCtx) -> Fut + Send + 'a,
        Fut: Future<Output = Result<T, StepError>> + Send + 'a,
    {
        Self::effect_with(name, key, EffectOptions::default(), f)
    }

    /// An effect with options, as `ctx.effect_with`.
    pub fn effect_with<F, Fut>(name: &str, key: impl Into<String>, opts: EffectOptions, f: F) -> Self
    where
        F: FnMut(EffectCtx) -> Fut + Send + 'a,
        Fut: Future<Output = Result<T, StepError>> + Send + 'a,
    {
        Self {
            name: name.to_owned(),
            kind: CallKind::Effect { key: key.into(), opts },
            run: erase(f),
            decodes: decodes::<T>,
            _t: PhantomData,
        }
    }

    /// The same call with its result type erased to JSON (to mix types in one group).
    fn erased(self) -> Call<'a, Value> {
        Call {
            name: self.name,
            kind: self.kind,
            run: self.run,
            decodes: self.decodes,
            _t: PhantomData,
        }
    }

    fn entry_kind(&self) -> EntryKind {
        match self.kind {
            CallKind::Step { .. } => EntryKind::Step,
            CallKind::Effect { .. } => EntryKind::Effect,
        }
    }
}

/// How a [`Ctx::select`] race ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Selected<T> {
    /// The call at this position of the list finished first, with this result.
    First(usize, T),
    /// The timeout passed first.
    TimedOut,
}

/// A launched call of a group: its position and how its attempts ended.
type Finished = (
    usize,
    Result<Attempted<Result<Value, String>>, savepoint_core::StoreError>,
);

/// A live call of a group waiting for its function.
struct Live<'a> {
    pos: usize,
    idx: u32,
    name: String,
    key: Option<EffectKey>,
    policy: RetryPolicy,
    cut: Cut,
    run: ErasedFn<'a>,
}

impl Ctx {
    /// Runs the calls concurrently and returns each one's result, in call order. The journal
    /// order is the call order, whatever order they finish in; replay and crash recovery are
    /// those of the same calls made one after another.
    ///
    /// ```ignore
    /// let docs = ctx
    ///     .all(ids.iter().map(|id| Call::step(&format!("fetch {id}"), move || fetch(id))).collect())
    ///     .await
    ///     .into_iter()
    ///     .collect::<Result<Vec<Doc>, _>>()?;
    /// ```
    pub async fn all<'a, T>(&mut self, calls: Vec<Call<'a, T>>) -> Vec<Result<T, WorkflowError>>
    where
        T: Serialize + DeserializeOwned,
    {
        let erased = calls.into_iter().map(Call::erased).collect();
        self.group(erased).await.into_iter().map(decoded).collect()
    }

    /// Two calls of different result types at once (see [`Ctx::all`]).
    pub async fn join<'a, A, B>(
        &mut self,
        a: Call<'a, A>,
        b: Call<'a, B>,
    ) -> (Result<A, WorkflowError>, Result<B, WorkflowError>)
    where
        A: Serialize + DeserializeOwned,
        B: Serialize + DeserializeOwned,
    {
        let mut r = self.group(vec![a.erased(), b.erased()]).await.into_iter();
        (decoded_next(&mut r), decoded_next(&mut r))
    }

    /// Three calls of different result types at once (see [`Ctx::all`]).
    pub async fn join3<'a, A, B, C>(
        &mut self,
        a: Call<'a, A>,
        b: Call<'a, B>,
        c: Call<'a, C>,
    ) -> (
        Result<A, WorkflowError>,
        Result<B, WorkflowError>,
        Result<C, WorkflowError>,
    )
    where
        A: Serialize + DeserializeOwned,
        B: Serialize + DeserializeOwned,
        C: Serialize + DeserializeOwned,
    {
        let mut r = self.group(vec![a.erased(), b.erased(), c.erased()]).await.into_iter();
        (decoded_next(&mut r), decoded_next(&mut r), decoded_next(&mut r))
    }

    /// Races steps against a durable timeout: the first to finish (successfully or not, after
    /// its retries) wins and the others are dropped. The deadline is journaled first (as the
    /// value `<name>.deadline`), so a run resumed after a crash keeps the original deadline;
    /// the race's result is journaled as the step `name`. Effects cannot race (a dropped
    /// effect call would be in doubt): a group that holds one blocks the run.
    pub async fn select<'a, T>(
        &mut self,
        name: &str,
        calls: Vec<Call<'a, T>>,
        timeout: Duration,
    ) -> Result<Selected<T>, WorkflowError>
    where
        T: Serialize + DeserializeOwned,
    {
        let deadline_name = format!("{name}.deadline");
        let now = self.server_now_ms();
        let deadline = self
            .recorded(&deadline_name, || json!(now + timeout.as_millis() as u64))
            .await
            .as_u64()
            .unwrap_or(0);
        let outcome = match self.replayed(name, EntryKind::Step).await {
            Some(e) => e.outcome,
            None => self.race(name, calls, deadline).await,
        };
        match decode_outcome::<Value>("step", name, outcome)? {
            v if v.get("timeout") == Some(&Value::Bool(true)) => Ok(Selected::TimedOut),
            v => {
                let first = v.get("first").and_then(Value::as_u64).unwrap_or(0) as usize;
                let value = v.get("value").cloned().unwrap_or(Value::Null);
                decode_outcome("step", name, Outcome::Ok(value)).map(|t| Selected::First(first, t))
            }
        }
    }

    /// The live part of [`Ctx::select`]: runs the race and journals its outcome.
    async fn race<T>(&mut self, name: &str, calls: Vec<Call<'_, T>>, deadline: u64) -> Outcome {
        let effect = calls
            .iter()
            .find(|c| matches!(c.kind, CallKind::Effect { .. }))
            .map(|c| c.name.clone());
        if let Some(effect) = effect {
            let reason = format!(
                "select {name:?} holds the effect {effect:?}: only steps can race (a dropped effect call would be in \
                 doubt); run effects with ctx.all or ctx.join"
            );
            return self.block(BlockKind::Other, &reason, None).await;
        }
        self.before_live(name).await;
        let tools = self.call_tools();
        let default = self.p.retry.clone();
        let stubs = self.p.stubs.clone();
        let left = Duration::from_millis(deadline.saturating_sub(self.server_now_ms()));
        let idx = self.cursor;
        let mut racing: FuturesUnordered<_> = calls
            .into_iter()
            .enumerate()
            .map(|(pos, c)| {
                let policy = match &c.kind {
                    CallKind::Step { retry: Some(p) } => p.clone(),
                    _ => default.clone(),
                };
                let l = Live {
                    pos,
                    idx,
                    name: c.name,
                    key: None,
                    policy,
                    cut: Cut::Step,
                    run: c.run,
                };
                launch(&tools, stubs.clone(), l)
            })
            .collect();
        let first = self
            .guarded(async {
                if left.is_zero() {
                    return None;
                }
                tokio::select! {
                    r = racing.next() => r,
                    _ = tokio::time::sleep(left) => None,
                }
            })
            .await;
        drop(racing);
        let (outcome, attempts) = match first {
            None => (Outcome::Ok(json!({"timeout": true})), 1),
            Some((_, Err(e))) => return self.store_failed(e).await,
            Some((pos, Ok(a))) => match step_outcome(a) {
                (Outcome::Ok(v), n) => (Outcome::Ok(json!({"first": pos, "value": v})), n),
                (err, n) => (err, n),
            },
        };
        self.commit(Entry::new(name, EntryKind::Step, outcome.clone(), attempts), "", None)
            .await;
        outcome
    }

    /// Runs a group of calls: replays the recorded prefix, reserves the rest in call order,
    /// takes the effects' intents, runs the functions concurrently, settles each as it ends and
    /// journals them in order.
    async fn group(&mut self, calls: Vec<Call<'_, Value>>) -> Vec<(String, EntryKind, Outcome)> {
        let kinds: Vec<(String, EntryKind)> = calls.iter().map(|c| (c.name.clone(), c.entry_kind())).collect();
        let (mut settling, live) = self.admit_group(calls).await;
        if !live.is_empty() && self.p.clock.expired() {
            self.stop::<()>(SliceExit::DeadlinePassed("before a parallel group".into()))
                .await;
        }
        // Journal what is already settled first (effects found done): if that write fails, no
        // live effect has been called yet, so none is left in doubt.
        settling.next = (self.cursor - settling.base) as usize;
        self.journal_settled(&mut settling).await;
        self.run_group(live, &mut settling).await;
        group_results(settling.out, kinds)
    }

    /// The first part of [`Ctx::group`]: replays the recorded prefix, then passes each further
    /// call through the gate in call order and takes its effect's intent: it runs live, or it
    /// is settled already (an effect found done).
    async fn admit_group<'a>(&mut self, calls: Vec<Call<'a, Value>>) -> (Settling, Vec<Live<'a>>) {
        let base = self.cursor;
        let mut settling = Settling {
            base,
            next: 0,
            out: vec![None; calls.len()],
            ready: BTreeMap::new(),
        };
        let mut live = Vec::new();
        for (pos, call) in calls.into_iter().enumerate() {
            let idx = base + pos as u32;
            let in_group = !live.is_empty() || !settling.ready.is_empty();
            if !in_group {
                if let Some(outcome) = self.replay_in_group(&call.name, call.entry_kind(), idx).await {
                    settling.out[pos] = Some(outcome);
                    continue;
                }
            }
            self.before_live_at(&call.name, idx, in_group).await;
            match self.admit_call(pos, idx, call).await {
                Admitted::Live(l) => live.push(l),
                Admitted::Settled(entry, event) => {
                    settling.ready.insert(pos, (entry, event));
                }
            }
        }
        (settling, live)
    }

    /// The recorded outcome of the group's call `kind name` at `idx` (moving the cursor past
    /// it), or `None` when the journal ends there; blocks the run on non-determinism. (It
    /// takes the call's name, not the call: a `Call` is not `Sync`, and the workflow's future
    /// must stay `Send`.)
    async fn replay_in_group(&mut self, name: &str, kind: EntryKind, idx: u32) -> Option<Outcome> {
        match decide::replay(&self.p.journal, idx, name, kind) {
            Replay::Recorded(e) => {
                let outcome = e.outcome.clone();
                self.cursor += 1;
                Some(outcome)
            }
            Replay::Live => None,
            Replay::Diverged(reason) => self.block(BlockKind::NonDeterminism, &reason, None).await,
        }
    }

    /// A call of a group that passed the gate: a step runs live; an effect takes its intent
    /// and runs live, or is settled already when its key is done.
    async fn admit_call<'a>(&mut self, pos: usize, idx: u32, call: Call<'a, Value>) -> Admitted<'a> {
        let (key, policy, cut) = match call.kind {
            CallKind::Step { retry } => (None, retry.unwrap_or_else(|| self.p.retry.clone()), Cut::Step),
            CallKind::Effect { key, opts } => {
                let key = match EffectKey::new(key) {
                    Ok(k) => k,
                    Err(e) => return self.block_on_bad_key(&call.name, e).await,
                };
                if let Some(v) = self.take_intent(&call.name, &key, &opts.policy, idx).await {
                    if let Err(e) = (call.decodes)(&v) {
                        return self.undecodable_result(&call.name, &key, idx, &e).await;
                    }
                    self.unjournaled.push(key.clone());
                    return Admitted::Settled(effect_entry(&call.name, &key, Outcome::Ok(v), 0), "effect_skipped");
                }
                let cut = Cut::effect(&opts.policy);
                (Some(key), opts.retry.unwrap_or_else(|| self.p.retry.clone()), cut)
            }
        };
        Admitted::Live(Live {
            pos,
            idx,
            name: call.name,
            key,
            policy,
            cut,
            run: call.run,
        })
    }

    /// Journals every settled call whose predecessors are journaled.
    async fn journal_settled(&mut self, s: &mut Settling) {
        while let Some((entry, event)) = s.ready.remove(&s.next) {
            s.out[s.next] = Some(entry.outcome.clone());
            self.commit(entry, event, None).await;
            s.next += 1;
        }
    }

    /// Runs the group's live calls concurrently (each marked called first), settles each as it
    /// ends and journals the settled ones in order.
    async fn run_group(&mut self, live: Vec<Live<'_>>, s: &mut Settling) {
        let mut names = BTreeMap::new();
        for l in &live {
            names.insert(l.pos, (l.idx, l.name.clone(), l.key.clone()));
            self.mark_called(l.idx);
        }
        let tools = self.call_tools();
        let stubs = self.p.stubs.clone();
        let mut running: FuturesUnordered<BoxFuture<'_, Finished>> =
            live.into_iter().map(|l| launch(&tools, stubs.clone(), l)).collect();
        loop {
            self.journal_settled(s).await;
            let Some((pos, finished)) = self.guarded(running.next()).await else {
                break;
            };
            let (idx, name, key) = names.remove(&pos).unwrap_or_default();
            let attempted = match finished {
                Ok(a) => a,
                Err(e) => return self.store_failed(e).await,
            };
            let settled = match key {
                None => {
                    let (outcome, attempts) = step_outcome(attempted);
                    (Entry::new(&name, EntryKind::Step, outcome, attempts), "")
                }
                Some(key) => self.settle_effect(&name, &key, idx, attempted).await,
            };
            s.ready.insert(pos, settled);
        }
    }

    /// Settles an effect of a group the moment its function returns: the key is marked done
    /// (or released) now; the journal entry waits for its turn.
    async fn settle_effect(
        &mut self,
        name: &str,
        key: &EffectKey,
        idx: u32,
        attempted: Attempted<Result<Value, String>>,
    ) -> (Entry, &'static str) {
        let holder = Holder {
            thread: self.thread_id().to_string(),
            index: i64::from(idx),
            fence: self.p.lease.fence,
        };
        match attempted {
            Attempted::Done(Ok(Ok(v)), _) => {
                let (value, attempts) = self.mark_done(key, v, idx).await;
                (effect_entry(name, key, Outcome::Ok(value), attempts), "effect_done")
            }
            Attempted::Done(Ok(Err(encode)), _) => {
                let reason = format!("effect {name:?} {encode}");
                self.block_on_key(&reason, key, &holder).await
            }
            Attempted::Done(Err(e), attempts) => self.failed(name, key, e, attempts, idx).await,
            Attempted::Unknown(cause) => {
                let reason = format!("effect {key} outcome unknown: {cause}");
                self.block_on_key(&reason, key, &holder).await
            }
        }
    }
}

/// A group's calls as they settle: each one's outcome by position, and the entries settled
/// but not journaled yet (waiting for every call before them).
struct Settling {
    /// The journal index of the group's first call.
    base: u32,
    /// The position of the next call to journal.
    next: usize,
    /// Each call's outcome, once replayed or journaled.
    out: Vec<Option<Outcome>>,
    /// Settled calls by position: the entry and its event.
    ready: BTreeMap<usize, (Entry, &'static str)>,
}

/// Where a call of a group goes once it passed the gate.
enum Admitted<'a> {
    /// It runs live.
    Live(Live<'a>),
    /// It is settled already (an effect found done): this entry and event are journaled in
    /// its turn.
    Settled(Entry, &'static str),
}

/// The group's results in call order, a call that never finished as a failure.
fn group_results(out: Vec<Option<Outcome>>, kinds: Vec<(String, EntryKind)>) -> Vec<(String, EntryKind, Outcome)> {
    out.into_iter()
        .zip(kinds)
        .map(|(o, (name, kind))| {
            let o = o.unwrap_or_else(|| Outcome::Err("a parallel call did not finish".into()));
            (name, kind, o)
        })
        .collect()
}

/// A live call's attempts as a future of its own (a step's panic is a failed attempt; an
/// effect's is an unknown outcome), to run beside the others of its group or race.
fn launch<'t, 'a: 't>(tools: &'t CallTools, stubs: Option<super::Stubs>, mut l: Live<'a>) -> BoxFuture<'t, Finished> {
    let fx = EffectCtx {
        key: l.key.as_ref().map(|k| k.as_str().to_owned()).unwrap_or_default(),
        fence: tools.lease.fence,
        thread: tools.lease.thread.clone(),
        index: l.idx,
        attempt: 0,
    };
    Box::pin(async move {
        let r = attempts(tools, l.idx, &l.name, &l.policy, l.cut, |attempt| {
            invoke(stubs.as_ref(), &l.name, EffectCtx { attempt, ..fx.clone() }, &mut l.run)
        })
        .await;
        (l.pos, r)
    })
}

/// One attempt of a call: its stub if the test kit has one, else the function.
fn invoke<'a>(
    stubs: Option<&super::Stubs>,
    name: &str,
    fx: EffectCtx,
    run: &mut ErasedFn<'a>,
) -> BoxFuture<'a, Result<Result<Value, String>, StepError>> {
    match stubs.and_then(|s| s.attempt(name)) {
        Some(stub) => {
            let r = stub(fx.attempt).map(Ok);
            Box::pin(async move { r })
        }
        None => run(fx),
    }
}

/// A step's journaled outcome from its attempts (a panic is a failed attempt for steps).
fn step_outcome(a: Attempted<Result<Value, String>>) -> (Outcome, u32) {
    match a {
        Attempted::Done(Ok(Ok(v)), n) => (Outcome::Ok(v), n),
        Attempted::Done(Ok(Err(encode)), n) => (Outcome::Err(encode), n),
        Attempted::Done(Err(e), n) => (Outcome::Err(e.message), n),
        Attempted::Unknown(cause) => (Outcome::Err(cause), 1),
    }
}

/// A group result decoded into the call's type.
fn decoded<T: DeserializeOwned>((name, kind, outcome): (String, EntryKind, Outcome)) -> Result<T, WorkflowError> {
    let kind = if kind == EntryKind::Effect { "effect" } else { "step" };
    decode_outcome(kind, &name, outcome)
}

/// The next group result, decoded.
fn decoded_next<T: DeserializeOwned>(
    r: &mut impl Iterator<Item = (String, EntryKind, Outcome)>,
) -> Result<T, WorkflowError> {
    match r.next() {
        Some(x) => decoded(x),
        None => Err(WorkflowError::failed("a parallel call did not finish")),
    }
}
