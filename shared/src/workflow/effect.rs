//! `effect`: exactly-once effects by idempotency key (DESIGN §6).
//!
//! Order: intent (SET NX) → perform → mark the key done with the result → journal. Marking
//! the key first means a crash before the journal write is healed by the next attempt,
//! which finds the key done and journals the recorded result without repeating the effect.

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use super::ctx::{decode_outcome, Ctx, SliceExit};
use super::{RetryPolicy, StepError, WorkflowError};
use crate::ids::{EffectKey, ThreadId};
use crate::journal::{Entry, EntryKind, Outcome};
use crate::metrics::{inc, metrics};
use crate::store::redis::EffectDone;
use crate::store::{EffectClaim, RunStatus};

/// Asks the provider whether the effect with this key happened: `Some(result)` if it did,
/// `None` if it did not.
pub type ReconcileFn = Arc<dyn Fn(String) -> BoxFuture<'static, Result<Option<Value>, StepError>> + Send + Sync>;

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

/// How long a run backs off when another run holds the same key's intent.
const BUSY_BACKOFF: Duration = Duration::from_secs(1);

impl Ctx {
    /// `effect` with the default in-doubt policy (`block`). `f` receives the key so it can
    /// pass it on to providers that honour one.
    pub async fn effect<T, F, Fut, E>(&mut self, name: &str, key: impl Into<String>, f: F) -> Result<T, WorkflowError>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(String) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Into<StepError>,
    {
        self.effect_with(name, key, EffectOptions::default(), f).await
    }

    /// `effect` with options (in-doubt policy, retry policy).
    pub async fn effect_with<T, F, Fut, E>(
        &mut self,
        name: &str,
        key: impl Into<String>,
        opts: EffectOptions,
        mut f: F,
    ) -> Result<T, WorkflowError>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(String) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Into<StepError>,
    {
        if let Some(e) = self.replayed(name, EntryKind::Effect).await {
            return decode_outcome("effect", name, e.outcome);
        }
        self.before_live(name).await;
        let key_s: String = key.into();
        let key = match EffectKey::new(key_s.clone()) {
            Ok(k) => k,
            Err(e) => return self.block(&format!("effect {name:?}: {e}"), None).await,
        };
        let idx = self.cursor;
        let intent_span =
            tracing::debug_span!("effect.intent", effect.name = name, effect.key = %key, step.index = idx);
        if let Some(recorded) = self.acquire(name, &key, &opts.policy).instrument(intent_span).await {
            let entry = effect_entry(name, &key, Outcome::Ok(recorded.clone()), 0);
            self.commit(entry, "effect_skipped", None).await;
            return decode_outcome("effect", name, Outcome::Ok(recorded));
        }
        self.failpoint("effect.after_intent").await;
        let policy = opts.retry.clone().unwrap_or_else(|| self.p.retry.clone());
        let call_span = tracing::debug_span!("effect.call", effect.name = name, effect.key = %key, step.index = idx);
        let (r, attempts) = self
            .attempt_loop(name, &policy, || f(key_s.clone()))
            .instrument(call_span)
            .await;
        let value = match r {
            Ok(v) => match serde_json::to_value(&v) {
                Ok(j) => j,
                Err(e) => {
                    return self
                        .block(
                            &format!("effect {name:?} result does not encode as JSON: {e}"),
                            Some(key.as_str()),
                        )
                        .await
                }
            },
            Err(e) => {
                // The function promised the effect did not happen: free the key, journal the failure.
                let thread = self.thread_id().clone();
                if let Err(err) = self
                    .p
                    .store
                    .effect_release(&key, &thread, Some((idx, self.p.lease.fence)))
                    .await
                {
                    return self.store_failed(err).await;
                }
                self.commit(
                    effect_entry(name, &key, Outcome::Err(e.message.clone()), attempts),
                    "effect_failed",
                    None,
                )
                .await;
                return decode_outcome("effect", name, Outcome::Err(e.message));
            }
        };
        self.failpoint("effect.after_call").await;
        let thread = self.thread_id().clone();
        let done_span = tracing::debug_span!("effect.done", effect.key = %key, step.index = idx);
        let value = match self
            .p
            .store
            .effect_done(&key, &thread, Some(idx), &value)
            .instrument(done_span)
            .await
        {
            Ok(EffectDone::Recorded) => {
                inc(&metrics().effects, &[("outcome", "applied")]);
                value
            }
            Ok(EffectDone::Already(first)) => first,
            Ok(EffectDone::NotOwner(holder)) => {
                return self
                    .stop(SliceExit::LeaseLost(format!(
                        "effect {key} intent now held by {holder}"
                    )))
                    .await
            }
            Err(e) => return self.store_failed(e).await,
        };
        self.failpoint("effect.after_done").await;
        self.commit(
            effect_entry(name, &key, Outcome::Ok(value.clone()), attempts),
            "effect_done",
            None,
        )
        .await;
        decode_outcome("effect", name, Outcome::Ok(value))
    }

    /// Takes the key's intent. `Some(result)` when the effect is already applied (skip it).
    async fn acquire(&mut self, name: &str, key: &EffectKey, policy: &EffectPolicy) -> Option<Value> {
        let thread = self.thread_id().clone();
        let (idx, fence) = (self.cursor, self.p.lease.fence);
        let mut takeover = false;
        loop {
            let claim = match self.p.store.effect_intent(key, &thread, idx, fence, takeover).await {
                Ok(c) => c,
                Err(e) => return self.store_failed(e).await,
            };
            match claim {
                EffectClaim::Won => return None,
                EffectClaim::Done(v) => {
                    inc(&metrics().effects, &[("outcome", "skipped")]);
                    return Some(v);
                }
                EffectClaim::Busy(holder) => {
                    inc(&metrics().effects, &[("outcome", "busy")]);
                    let detail = format!("{name}: key {key} held by run {holder}");
                    let r = self
                        .p
                        .store
                        .suspend(
                            &mut self.p.lease,
                            None,
                            RunStatus::Sleeping,
                            Some(BUSY_BACKOFF),
                            None,
                            ("effect_busy", &detail),
                        )
                        .await;
                    return match r {
                        Ok(_) => self.stop(SliceExit::Suspended { woke: false }).await,
                        Err(e) => self.store_failed(e).await,
                    };
                }
                EffectClaim::InDoubt => {
                    inc(&metrics().effects, &[("outcome", "in_doubt")]);
                    match self.in_doubt(key, &thread, policy).await {
                        Some(recorded) => return Some(recorded),
                        None => takeover = true,
                    }
                }
            }
        }
    }
}

impl Ctx {
    /// Applies the in-doubt policy: `Some(result)` when the effect turns out applied,
    /// `None` to perform it again under the same key; blocks the run otherwise.
    async fn in_doubt(&mut self, key: &EffectKey, thread: &ThreadId, policy: &EffectPolicy) -> Option<Value> {
        match policy {
            EffectPolicy::Block => {
                let reason = format!("effect {key} outcome unknown");
                self.block(&reason, Some(key.as_str())).await
            }
            EffectPolicy::RetrySafe => {
                tracing::warn!(thread.id = %thread, effect.key = %key, "in-doubt effect: retry_safe, calling again with the same key");
                None
            }
            EffectPolicy::Reconcile(check) => {
                let check = check.clone();
                match self.guarded(check(key.as_str().to_owned())).await {
                    Ok(Some(v)) => {
                        tracing::info!(thread.id = %thread, effect.key = %key, "in-doubt effect reconciled: it was applied");
                        match self.p.store.effect_done(key, thread, None, &v).await {
                            Ok(EffectDone::Already(first)) => Some(first),
                            Ok(_) => Some(v),
                            Err(e) => self.store_failed(e).await,
                        }
                    }
                    Ok(None) => {
                        tracing::info!(thread.id = %thread, effect.key = %key, "in-doubt effect reconciled: not applied, performing it");
                        None
                    }
                    Err(e) => {
                        let reason = format!("effect {key} outcome unknown: reconcile failed: {e}");
                        self.block(&reason, Some(key.as_str())).await
                    }
                }
            }
        }
    }
}

fn effect_entry(name: &str, key: &EffectKey, outcome: Outcome, attempts: u32) -> Entry {
    let mut e = Entry::new(name, EntryKind::Effect, outcome, attempts);
    e.key = Some(key.as_str().to_owned());
    e
}
