//! Options on the call: `ctx.step(name, f)` and `ctx.effect(name, key, f)` return a call that
//! takes its options as methods and runs when awaited,
//!
//! ```ignore
//! let embedding: Vec<f32> = ctx.step("embed", || embed(&text)).on_queue("gpu").retry(RetryPolicy::attempts(5)).await?;
//! let charge: Charge = ctx.effect("card.charge", key, |fx| charge(fx)).policy(EffectPolicy::RetrySafe).await?;
//! ```
//!
//! ```ignore
//! let approval: Option<Approval> = ctx.interrupt(APPROVAL, &question).within(Duration::from_secs(86_400)).await?;
//! ```
//!
//! instead of one method per combination of options.

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::future::{Future, IntoFuture};

use serde_json::Value;
use std::marker::PhantomData;
use std::time::Duration;

use super::{Ctx, EffectCtx, EffectOptions, EffectPolicy, RetryPolicy, StepError, WorkflowError};
use crate::journal::EntryKind;

/// A step, run when awaited (see [`Ctx::step`]): at-least-once work whose result is journaled.
#[must_use = "a step runs when it is awaited"]
pub struct StepCall<'c, F> {
    ctx: &'c mut Ctx,
    name: String,
    f: F,
    retry: Option<RetryPolicy>,
    queue: Option<String>,
}

impl<'c, F> StepCall<'c, F> {
    pub(super) fn new(ctx: &'c mut Ctx, name: &str, f: F) -> Self {
        Self {
            ctx,
            name: name.to_owned(),
            f,
            retry: None,
            queue: None,
        }
    }

    /// Retries this step by `policy` instead of the workflow's
    /// ([`Workflow::retry_policy`](super::Workflow::retry_policy)).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// Runs this step on task queue `queue` (`{ns}.q.<queue>`): the run moves to a worker that
    /// consumes that queue (`SAVEPOINT_WORKER_QUEUES`) for this call, e.g. a GPU fleet, and
    /// back to its home queue for the next call that is not routed there. That worker must
    /// host this workflow too (it replays the journal up to the call).
    pub fn on_queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }
}

impl<'c, T, F, Fut> IntoFuture for StepCall<'c, F>
where
    T: Serialize + DeserializeOwned + Send + 'c,
    F: FnMut() -> Fut + Send + 'c,
    Fut: Future<Output = Result<T, StepError>> + Send + 'c,
{
    type Output = Result<T, WorkflowError>;
    type IntoFuture = BoxFuture<'c, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let StepCall {
                ctx,
                name,
                f,
                retry,
                queue,
            } = self;
            let policy = retry.unwrap_or_else(|| ctx.default_retry());
            ctx.route = queue;
            let r = ctx.run_step(&name, &policy, f).await;
            ctx.route = None;
            r
        })
    }
}

/// An effect, run when awaited (see [`Ctx::effect`]): at most once per key, or the run blocks
/// saying so.
#[must_use = "an effect runs when it is awaited"]
pub struct EffectCall<'c, F> {
    ctx: &'c mut Ctx,
    name: String,
    key: String,
    f: F,
    opts: EffectOptions,
}

impl<'c, F> EffectCall<'c, F> {
    pub(super) fn new(ctx: &'c mut Ctx, name: &str, key: String, f: F) -> Self {
        Self {
            ctx,
            name: name.to_owned(),
            key,
            f,
            opts: EffectOptions::default(),
        }
    }

    /// What to do when an earlier attempt's outcome is unknown (default
    /// [`EffectPolicy::Block`]).
    pub fn policy(mut self, policy: EffectPolicy) -> Self {
        self.opts.policy = policy;
        self
    }

    /// Retries failures the effect function reports (the effect did not happen) by `policy`.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.opts.retry = Some(policy);
        self
    }

    /// Both options at once (as a group's `Call::effect_with` takes them).
    pub fn options(mut self, opts: EffectOptions) -> Self {
        self.opts = opts;
        self
    }
}

impl<'c, T, F, Fut> IntoFuture for EffectCall<'c, F>
where
    T: Serialize + DeserializeOwned + Send + 'c,
    F: FnMut(EffectCtx) -> Fut + Send + 'c,
    Fut: Future<Output = Result<T, StepError>> + Send + 'c,
{
    type Output = Result<T, WorkflowError>;
    type IntoFuture = BoxFuture<'c, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let EffectCall {
                ctx,
                name,
                key,
                f,
                opts,
            } = self;
            ctx.run_effect(&name, key, opts, f).await
        })
    }
}

/// A wait for an interrupt's answer or a signal, run when awaited (see [`Ctx::interrupt`],
/// [`Ctx::wait_signal`]): the value, journaled.
#[must_use = "a wait happens when it is awaited"]
pub struct WaitCall<'c, T> {
    ctx: &'c mut Ctx,
    kind: EntryKind,
    field: String,
    name: String,
    payload: Result<Value, WorkflowError>,
    ty: PhantomData<fn() -> T>,
}

impl<'c, T> WaitCall<'c, T> {
    pub(super) fn new(
        ctx: &'c mut Ctx,
        kind: EntryKind,
        field: String,
        name: String,
        payload: Result<Value, WorkflowError>,
    ) -> Self {
        Self {
            ctx,
            kind,
            field,
            name,
            payload,
            ty: PhantomData,
        }
    }

    /// Gives the wait a durable deadline: `Ok(None)` if nothing came within `timeout`. The
    /// deadline is journaled first (the value `<name>.deadline`), so a run resumed later keeps
    /// it; the run waits in Redis with the deadline as its due time, and the scanner hands it
    /// to a worker when it passes (no worker holds it meanwhile).
    pub fn within(self, timeout: Duration) -> WaitWithin<'c, T> {
        WaitWithin { call: self, timeout }
    }
}

impl<'c, T> IntoFuture for WaitCall<'c, T>
where
    T: DeserializeOwned + Send + 'c,
{
    type Output = Result<T, WorkflowError>;
    type IntoFuture = BoxFuture<'c, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let payload = self.payload?;
            self.ctx.await_answer(self.kind, &self.name, self.field, payload).await
        })
    }
}

/// A [`WaitCall`] with a durable deadline: `Some(value)`, or `None` once the deadline passed.
#[must_use = "a wait happens when it is awaited"]
pub struct WaitWithin<'c, T> {
    call: WaitCall<'c, T>,
    timeout: Duration,
}

impl<'c, T> IntoFuture for WaitWithin<'c, T>
where
    T: DeserializeOwned + Send + 'c,
{
    type Output = Result<Option<T>, WorkflowError>;
    type IntoFuture = BoxFuture<'c, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let WaitWithin { call, timeout } = self;
            let payload = call.payload?;
            call.ctx
                .await_answer_within(call.kind, &call.name, call.field, payload, timeout)
                .await
        })
    }
}
