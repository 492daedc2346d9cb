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
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use serde_json::Value;
use std::time::Duration;

use super::{Ctx, EffectOptions, EffectPolicy, RetryPolicy, WorkflowError};
use crate::journal::EntryKind;

/// What starts a call from its options on its first poll (built where the call is made, so
/// the call's future type names no closure and its `Future` impl has no lifetime bounds, which
/// an `async fn`'s `Send` check could not prove).
type Start<'c, O, R> = Box<dyn FnOnce(O) -> BoxFuture<'c, R> + Send + 'c>;

/// A call's options until it is first polled, then the call running.
enum Lazy<'c, O, R> {
    Options(O, Start<'c, O, R>),
    Running(BoxFuture<'c, R>),
    Taken,
}

impl<'c, O, R> Lazy<'c, O, R> {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<R> {
        if let Lazy::Options(..) = self {
            if let Lazy::Options(o, start) = std::mem::replace(self, Lazy::Taken) {
                *self = Lazy::Running(start(o));
            }
        }
        let Lazy::Running(fut) = self else {
            // (A call is polled again after it finished only by a broken executor.)
            return Poll::Pending;
        };
        let r = fut.as_mut().poll(cx);
        if r.is_ready() {
            *self = Lazy::Taken;
        }
        r
    }

    fn options(&mut self) -> Option<&mut O> {
        match self {
            Lazy::Options(o, _) => Some(o),
            _ => None,
        }
    }
}

/// A step's options.
#[derive(Debug, Default)]
pub(super) struct StepOptions {
    pub retry: Option<RetryPolicy>,
    pub queue: Option<String>,
    pub durable: bool,
}

/// A step, run when awaited (see [`Ctx::step`]): at-least-once work whose result is journaled.
/// A future: `futures::join!` runs several side by side.
#[must_use = "a step runs when it is awaited"]
pub struct StepCall<'c, T> {
    call: Lazy<'c, StepOptions, Result<T, WorkflowError>>,
}

impl<'c, T> StepCall<'c, T> {
    pub(super) fn new(start: Start<'c, StepOptions, Result<T, WorkflowError>>) -> Self {
        Self {
            call: Lazy::Options(StepOptions::default(), start),
        }
    }

    /// Retries this step by `policy` instead of the workflow's
    /// ([`Workflow::retry_policy`](super::Workflow::retry_policy)).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        if let Some(o) = self.call.options() {
            o.retry = Some(policy);
        }
        self
    }

    /// Runs this step on task queue `queue` (`{ns}.q.<queue>`): the run moves to a worker that
    /// consumes that queue (`SAVEPOINT_WORKER_QUEUES`) for this call, e.g. a GPU fleet, and
    /// back to its home queue for the next call that is not routed there. That worker must
    /// host this workflow too (it replays the journal up to the call). (A step that starts
    /// while other calls are in flight runs where they run.)
    pub fn on_queue(mut self, queue: impl Into<String>) -> Self {
        if let Some(o) = self.call.options() {
            o.queue = Some(queue.into());
        }
        self
    }

    /// Checkpoints this step synchronously: the workflow goes on only once its result (and
    /// every entry before it) is acknowledged by the store, so a crash right after it never
    /// runs it again. For a step that is pure but must not run twice (an expensive model
    /// call, say); other steps' checkpoints are pipelined (`SAVEPOINT_CHECKPOINTS`).
    pub fn durable(mut self) -> Self {
        if let Some(o) = self.call.options() {
            o.durable = true;
        }
        self
    }
}

impl<T> Future for StepCall<'_, T> {
    type Output = Result<T, WorkflowError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().call.poll(cx)
    }
}

/// An effect, run when awaited (see [`Ctx::effect`]): at most once per key, or the run blocks
/// saying so. A future: `futures::join!` runs several side by side.
#[must_use = "an effect runs when it is awaited"]
pub struct EffectCall<'c, T> {
    call: Lazy<'c, EffectOptions, Result<T, WorkflowError>>,
}

impl<'c, T> EffectCall<'c, T> {
    pub(super) fn new(start: Start<'c, EffectOptions, Result<T, WorkflowError>>) -> Self {
        Self {
            call: Lazy::Options(EffectOptions::default(), start),
        }
    }

    /// What to do when an earlier attempt's outcome is unknown (default
    /// [`EffectPolicy::Block`]).
    pub fn policy(mut self, policy: EffectPolicy) -> Self {
        if let Some(o) = self.call.options() {
            o.policy = policy;
        }
        self
    }

    /// Retries failures the effect function reports (the effect did not happen) by `policy`.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        if let Some(o) = self.call.options() {
            o.retry = Some(policy);
        }
        self
    }

    /// Both options at once.
    pub fn options(mut self, opts: EffectOptions) -> Self {
        if let Some(o) = self.call.options() {
            *o = opts;
        }
        self
    }
}

impl<T> Future for EffectCall<'_, T> {
    type Output = Result<T, WorkflowError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().call.poll(cx)
    }
}

/// A wait for an interrupt's answer or a signal, run when awaited (see [`Ctx::interrupt`],
/// [`Ctx::wait_signal`]): the value, journaled.
#[must_use = "a wait happens when it is awaited"]
pub struct WaitCall<'c, T> {
    args: Option<WaitArgs<'c>>,
    call: Option<BoxFuture<'c, Result<T, WorkflowError>>>,
}

struct WaitArgs<'c> {
    ctx: &'c Ctx,
    kind: EntryKind,
    field: String,
    name: String,
    payload: Result<Value, WorkflowError>,
}

impl<'c, T> WaitCall<'c, T> {
    pub(super) fn new(
        ctx: &'c Ctx,
        kind: EntryKind,
        field: String,
        name: String,
        payload: Result<Value, WorkflowError>,
    ) -> Self {
        let a = WaitArgs {
            ctx,
            kind,
            field,
            name,
            payload,
        };
        Self {
            args: Some(a),
            call: None,
        }
    }

    /// Gives the wait a durable deadline: `Ok(None)` if nothing came within `timeout`. The
    /// deadline is journaled first (the value `<name>.deadline`), so a run resumed later keeps
    /// it; the run waits in Redis with the deadline as its due time, and the scanner hands it
    /// to a worker when it passes (no worker holds it meanwhile).
    pub fn within(self, timeout: Duration) -> WaitWithin<'c, T> {
        WaitWithin {
            args: self.args,
            call: None,
            timeout,
        }
    }
}

impl<'c, T> Future for WaitCall<'c, T>
where
    T: DeserializeOwned + Send + 'static,
{
    type Output = Result<T, WorkflowError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some(a) = this.args.take() {
            this.call = Some(Box::pin(async move {
                let payload = a.payload?;
                a.ctx
                    .exclusive(&a.name)
                    .await
                    .await_answer(a.kind, &a.name, a.field, payload)
                    .await
            }));
        }
        match &mut this.call {
            Some(fut) => fut.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }
}

/// A [`WaitCall`] with a durable deadline: `Some(value)`, or `None` once the deadline passed.
#[must_use = "a wait happens when it is awaited"]
pub struct WaitWithin<'c, T> {
    args: Option<WaitArgs<'c>>,
    call: Option<BoxFuture<'c, Result<Option<T>, WorkflowError>>>,
    timeout: Duration,
}

impl<'c, T> Future for WaitWithin<'c, T>
where
    T: DeserializeOwned + Send + 'static,
{
    type Output = Result<Option<T>, WorkflowError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some(a) = this.args.take() {
            let timeout = this.timeout;
            this.call = Some(Box::pin(async move {
                let payload = a.payload?;
                a.ctx
                    .exclusive(&a.name)
                    .await
                    .await_answer_within(a.kind, &a.name, a.field, payload, timeout)
                    .await
            }));
        }
        match &mut this.call {
            Some(fut) => fut.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }
}
