//! Test doubles for step and effect functions (the test kit's `stub` and call counts).
//!
//! A worker given [`Stubs`] counts every live call of a step or effect function by name (a
//! replayed call is not counted: it is not called) and, for a name with a stub, calls the stub
//! instead of the workflow's closure. The stub gets the attempt number (1, 2, …) and returns
//! the JSON the closure would have returned, or a [`StepError`]: a retryable error is retried
//! under the call's policy, as the real function's would be. Journaling, intents, fencing and
//! replay are unchanged, so a stubbed run exercises the engine exactly as a real one does.

use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use super::StepError;

/// A stub: attempt number → the call's result as JSON.
pub type StubFn = Arc<dyn Fn(u32) -> Result<Value, StepError> + Send + Sync>;

/// Stubs and live-call counts, shared by clones (the test keeps one, the worker another).
#[derive(Clone, Default)]
pub struct Stubs {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    stubs: RwLock<HashMap<String, StubFn>>,
    calls: Mutex<BTreeMap<String, u32>>,
}

impl std::fmt::Debug for Stubs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stubs")
            .field("calls", &self.all_calls())
            .finish_non_exhaustive()
    }
}

impl Stubs {
    /// No stubs, counting calls.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces the function of the step or effect `name` with `f`.
    pub fn stub(&self, name: &str, f: impl Fn(u32) -> Result<Value, StepError> + Send + Sync + 'static) {
        if let Ok(mut s) = self.inner.stubs.write() {
            s.insert(name.to_owned(), Arc::new(f));
        }
    }

    /// Replaces the function of `name` with one that returns `value`.
    pub fn stub_value(&self, name: &str, value: Value) {
        self.stub(name, move |_| Ok(value.clone()));
    }

    /// Live calls (attempts) of the function of `name` so far, stubbed or not.
    pub fn calls(&self, name: &str) -> u32 {
        self.all_calls().get(name).copied().unwrap_or(0)
    }

    /// Every name's live calls.
    pub fn all_calls(&self) -> BTreeMap<String, u32> {
        self.inner.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Counts one live attempt of `name` and returns its stub, if any.
    pub(crate) fn attempt(&self, name: &str) -> Option<StubFn> {
        if let Ok(mut c) = self.inner.calls.lock() {
            *c.entry(name.to_owned()).or_default() += 1;
        }
        self.inner.stubs.read().ok().and_then(|s| s.get(name).cloned())
    }
}

/// One attempt of a step or effect function: the stub's result, or the real call.
pub(crate) enum Attempt<Fut> {
    Stubbed(Result<Value, StepError>),
    Real(Fut),
}

impl Stubs {
    /// Counts one attempt of `name` and picks what runs: its stub if it has one, else `real`.
    pub(crate) fn choose<Fut>(&self, name: &str, attempt: u32, real: impl FnOnce() -> Fut) -> Attempt<Fut> {
        match self.attempt(name) {
            Some(stub) => Attempt::Stubbed(stub(attempt)),
            None => Attempt::Real(real()),
        }
    }
}

impl<Fut> Attempt<Fut> {
    /// Runs it: the stub's JSON as the call's type (a mismatch is a non-retryable failure).
    pub(crate) async fn run<T, E>(self, name: &str) -> Result<T, StepError>
    where
        T: serde::de::DeserializeOwned,
        Fut: std::future::Future<Output = Result<T, E>>,
        E: Into<StepError>,
    {
        match self {
            Attempt::Stubbed(r) => r.and_then(|v| {
                serde_json::from_value(v)
                    .map_err(|e| StepError::fatal(format!("stub of {name:?} returned a value of the wrong type: {e}")))
            }),
            Attempt::Real(fut) => fut.await.map_err(Into::into),
        }
    }
}
