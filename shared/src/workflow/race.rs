//! Races: [`Ctx::select`] runs steps against a durable timeout and journals the winner.
//!
//! Calls that all finish compose with plain Rust (`futures::join!` over `ctx.step(..)`); a
//! race cannot, because which call wins must be journaled, or a replay could pick another.
//! So a race is one call of its own: the deadline is recorded first (a resumed run keeps the
//! original one); the first step to finish (successfully or not, after its retries) wins, the
//! others are dropped; the result is journaled as the step `name`. Only steps race: a dropped
//! effect call would be in doubt.

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

use super::ctx::{attempts, decode_outcome, Attempted, CallTools, Core, Cut, Reader};
use super::{Ctx, EffectCtx, RetryPolicy, StepError, WorkflowError};
use crate::journal::{Entry, EntryKind, Outcome};

/// A step's function with its result type erased: the attempt's JSON result (or the encode
/// error of a result that did not encode), or the function's error.
type ErasedFn<'a> = Box<dyn FnMut(EffectCtx) -> BoxFuture<'a, Result<Result<Value, String>, StepError>> + Send + 'a>;

/// One step of a race ([`Ctx::select`]). Its closure is the same as `ctx.step`'s.
pub struct Call<'a, T> {
    name: String,
    retry: Option<RetryPolicy>,
    run: ErasedFn<'a>,
    _t: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for Call<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call").field("name", &self.name).finish()
    }
}

impl<'a, T: Serialize + DeserializeOwned> Call<'a, T> {
    /// A step (at-least-once, retried by the workflow's policy), as `ctx.step`.
    pub fn step<F, Fut>(name: &str, mut f: F) -> Self
    where
        F: FnMut() -> Fut + Send + 'a,
        Fut: Future<Output = Result<T, StepError>> + Send + 'a,
    {
        let run: ErasedFn<'a> = Box::new(move |_| {
            let fut = f();
            Box::pin(async move {
                let v = fut.await?;
                Ok(serde_json::to_value(&v).map_err(|e| format!("result does not encode as JSON: {e}")))
            })
        });
        Self {
            name: name.to_owned(),
            retry: None,
            run,
            _t: PhantomData,
        }
    }

    /// Retries this step by `policy` instead of the workflow's.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
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

impl Ctx {
    /// Races steps against a durable timeout: the first to finish (successfully or not, after
    /// its retries) wins and the others are dropped. The deadline is journaled first (as the
    /// value `<name>.deadline`), so a run resumed after a crash keeps the original deadline;
    /// the race's result is journaled as the step `name`.
    ///
    /// ```ignore
    /// let slow = Call::step("quote.slow", || slow_quote());
    /// let fast = Call::step("quote.fast", || fast_quote());
    /// match ctx.select("quote", vec![slow, fast], Duration::from_secs(20)).await? {
    ///     Selected::First(_, quote) => quote,
    ///     Selected::TimedOut => default_quote(),
    /// }
    /// ```
    pub async fn select<T>(
        &self,
        name: &str,
        calls: Vec<Call<'_, T>>,
        timeout: Duration,
    ) -> Result<Selected<T>, WorkflowError>
    where
        T: Serialize + DeserializeOwned + 'static,
    {
        let outcome = self.exclusive(name).await.race(name, calls, timeout).await;
        match decode_outcome::<Value>("step", name, outcome)? {
            v if v.get("timeout") == Some(&Value::Bool(true)) => Ok(Selected::TimedOut),
            v => {
                let first = v.get("first").and_then(Value::as_u64).unwrap_or(0) as usize;
                let value = v.get("value").cloned().unwrap_or(Value::Null);
                decode_outcome("step", name, Outcome::Ok(value)).map(|t| Selected::First(first, t))
            }
        }
    }
}

impl Core {
    /// [`Ctx::select`]'s work: the deadline, then the recorded outcome or the race run live.
    async fn race<T: 'static>(&mut self, name: &str, calls: Vec<Call<'_, T>>, timeout: Duration) -> Outcome {
        let deadline_name = format!("{name}.deadline");
        let now = self.server_now_ms();
        let deadline = self
            .recorded(&deadline_name, || json!(now + timeout.as_millis() as u64))
            .await
            .as_u64()
            .unwrap_or(0);
        let reader = Reader::of::<T>();
        match self.replayed(name, EntryKind::Step).await {
            // The winner's result is `{"first", "value"}`'s value.
            Some(Entry {
                outcome: Outcome::Ok(mut v),
                tv,
                ..
            }) => {
                if let Some(value) = v.get_mut("value") {
                    *value = self.upgraded(reader, (EntryKind::Step, name), tv, value.take()).await;
                }
                Outcome::Ok(v)
            }
            Some(e) => e.outcome,
            None => {
                let tv = self.stamp(reader).await;
                self.race_live(name, calls, (deadline, tv)).await
            }
        }
    }

    /// Runs the race and journals its outcome.
    async fn race_live<T>(
        &mut self,
        name: &str,
        calls: Vec<Call<'_, T>>,
        (deadline, tv): (u64, Option<u32>),
    ) -> Outcome {
        self.before_live(name).await;
        let tools = self.call_tools();
        let default = self.default_retry();
        let stubs = self.p.stubs.clone();
        let left = Duration::from_millis(deadline.saturating_sub(self.server_now_ms()));
        let idx = self.cursor;
        let mut racing: FuturesUnordered<_> = calls
            .into_iter()
            .enumerate()
            .map(|(pos, c)| {
                let policy = c.retry.unwrap_or_else(|| default.clone());
                launch(&tools, stubs.clone(), pos, idx, c.name, policy, c.run)
            })
            .collect();
        let depth = self.in_function.clone();
        let first = self
            .guarded(async {
                if left.is_zero() {
                    return None;
                }
                tokio::select! {
                    r = super::seq::in_function(&depth, racing.next()) => r,
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
        let won = matches!(&outcome, Outcome::Ok(v) if v.get("value").is_some());
        let entry = Entry::new(name, EntryKind::Step, outcome.clone(), attempts).with_value_version(tv.filter(|_| won));
        self.commit(entry, "", None).await;
        outcome
    }
}

/// A racing step's position and how its attempts ended.
type Finished = (
    usize,
    Result<Attempted<Result<Value, String>>, savepoint_core::StoreError>,
);

/// A racing step's attempts as a future of its own (a panic is a failed attempt).
fn launch<'t, 'a: 't>(
    tools: &'t CallTools,
    stubs: Option<super::Stubs>,
    pos: usize,
    idx: u32,
    name: String,
    policy: RetryPolicy,
    mut run: ErasedFn<'a>,
) -> BoxFuture<'t, Finished> {
    let fx = EffectCtx {
        key: String::new(),
        fence: tools.lease.fence,
        thread: tools.lease.thread.clone(),
        index: idx,
        attempt: 0,
    };
    Box::pin(async move {
        let r = attempts(tools, idx, &name, &policy, Cut::Step, None, |attempt| {
            invoke(stubs.as_ref(), &name, EffectCtx { attempt, ..fx.clone() }, &mut run)
        })
        .await;
        (pos, r)
    })
}

/// One attempt of a step: its stub if the test kit has one, else the function.
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
        // (Not reached: a race's steps are not stopped between retries.)
        Attempted::Stopped => (Outcome::Err("the slice stopped between attempts".into()), 1),
    }
}
