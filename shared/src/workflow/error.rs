//! Errors seen by workflow code.

use std::fmt;

use savepoint_core::journal::Failure;

use super::RetryPolicy;

/// A step or effect function's failure. Any `std::error::Error` converts into a retryable
/// one with `?`; use [`StepError::fatal`] for failures that retrying cannot fix.
///
/// For effects, returning an error promises the effect did NOT happen (the intent is
/// released and the effect may run again under the same key).
#[derive(Debug, Clone, PartialEq)]
pub struct StepError {
    /// What went wrong.
    pub message: String,
    /// Whether the retry policy may try again.
    pub retryable: bool,
    /// Error class, matched against the policy's `non_retryable` list.
    pub class: Option<String>,
}

impl StepError {
    /// A failure worth retrying.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: true,
            class: None,
        }
    }

    /// A failure retrying cannot fix.
    pub fn fatal(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: false,
            class: None,
        }
    }

    /// Tags the error with a class (see `RetryPolicy::non_retryable`). A call that fails
    /// for good with it journals the class, and workflow code gets it back from
    /// [`WorkflowError::class`].
    pub fn with_class(mut self, class: impl Into<String>) -> Self {
        self.class = Some(class.into());
        self
    }

    /// What to journal besides the message when this is a call's final error under `policy`:
    /// its class, and whether it was retryable (retryable, and of no class the policy lists
    /// as `non_retryable`; so true means the attempts ran out).
    pub fn to_failure(&self, policy: &RetryPolicy) -> Failure {
        let listed = self.class.as_ref().is_some_and(|c| policy.non_retryable.contains(c));
        Failure::new(self.class.clone(), self.retryable && !listed)
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Any error `anyhow` takes (every `std::error::Error + Send + Sync + 'static`, and
/// `anyhow::Error` itself) converts into a retryable step error with `?`; the message keeps
/// the whole cause chain (`outer: inner: root`).
///
/// (Through `anyhow` rather than `std::error::Error` directly: `anyhow::Error` is not a
/// `std::error::Error`, and a second impl for it would overlap this one.)
impl<E: Into<anyhow::Error>> From<E> for StepError {
    fn from(e: E) -> Self {
        StepError::retryable(format!("{:#}", e.into()))
    }
}

/// What step and effect functions return. The calls name the error type, so a closure's
/// `async` block ends in a plain `Ok(value)` and `?` inside it takes any error (each becomes
/// a retryable [`StepError`]); this alias is for functions written outside the call.
pub type StepResult<T> = Result<T, StepError>;

/// An error returned to (and from) workflow code. `?` in a workflow's `run` converts any
/// error `anyhow` takes into [`WorkflowError::Failed`] (the run fails with its message and
/// cause chain). Like `anyhow::Error`, it is not itself a `std::error::Error` (that is what
/// lets the conversion take every error); it is `Display` (`anyhow::anyhow!("{e}")` makes one of it).
#[derive(Debug, Clone, PartialEq)]
pub enum WorkflowError {
    /// A step or effect failed for good after its retry policy; the failure is journaled, so
    /// a replay returns the same error. Workflow code may compensate (saga), matching on
    /// [`class`](Self::class) and [`is_retryable`](Self::is_retryable) rather than the text.
    CallFailed {
        /// `step` or `effect`.
        kind: &'static str,
        /// The call's name.
        name: String,
        /// The final error.
        message: String,
        /// The final error's class ([`StepError::with_class`]), if it had one. `None` also
        /// for failures journaled before entry version 3.
        class: Option<String>,
        /// Whether the final error was retryable, so the call stopped because its attempts
        /// ran out; false for a fatal error, a class the policy lists as `non_retryable`, a
        /// failure that was not the function's own error, and one journaled before entry
        /// version 3.
        retryable: bool,
    },
    /// A recorded or delivered value did not decode into the type the code asked for.
    Decode {
        /// The call's name.
        name: String,
        /// The decode error.
        message: String,
    },
    /// The workflow itself decided to fail (or a `?` in its code did).
    Failed(String),
}

impl fmt::Display for WorkflowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkflowError::CallFailed {
                kind,
                name,
                message,
                class: Some(class),
                ..
            } => write!(f, "{kind} {name:?} failed ({class}): {message}"),
            WorkflowError::CallFailed {
                kind, name, message, ..
            } => write!(f, "{kind} {name:?} failed: {message}"),
            WorkflowError::Decode { name, message } => write!(f, "value of {name:?} does not decode: {message}"),
            WorkflowError::Failed(message) => f.write_str(message),
        }
    }
}

/// `?` on any error `anyhow` takes in a workflow's `run`: the run fails with the error's
/// message and cause chain (`outer: inner: root`).
impl<E: Into<anyhow::Error>> From<E> for WorkflowError {
    fn from(e: E) -> Self {
        WorkflowError::Failed(format!("{:#}", e.into()))
    }
}

/// Compensation code matches on what failed, not on the message's text:
///
/// ```
/// use savepoint::journal::Failure;
/// use savepoint::workflow::WorkflowError;
///
/// /// What an order saga does once its `charge` effect has returned.
/// fn after_charge(charged: Result<String, WorkflowError>) -> Result<&'static str, WorkflowError> {
///     match charged {
///         Ok(_) => Ok("ship"),
///         // No retry makes a declined card pay: cancel the order.
///         Err(e) if e.class() == Some("card_declined") => Ok("cancel the order"),
///         // It ran out of attempts on an error worth retrying: try again later.
///         Err(e) if e.call_name() == Some("charge") && e.is_retryable() => Ok("charge again tomorrow"),
///         Err(e) => Err(e),
///     }
/// }
///
/// let declined = Failure::new(Some("card_declined".into()), false);
/// let e = WorkflowError::call_failed("effect", "charge", "card declined", Some(declined));
/// assert_eq!(e.to_string(), r#"effect "charge" failed (card_declined): card declined"#);
/// assert_eq!(after_charge(Err(e)), Ok("cancel the order"));
/// let timeout = Failure::new(Some("timeout".into()), true);
/// let e = WorkflowError::call_failed("effect", "charge", "gateway timed out", Some(timeout));
/// assert_eq!(after_charge(Err(e)), Ok("charge again tomorrow"));
/// ```
impl WorkflowError {
    /// The workflow fails with this message.
    pub fn failed(message: impl Into<String>) -> Self {
        WorkflowError::Failed(message.into())
    }

    /// [`WorkflowError::CallFailed`] for the call `name` of `kind` (`step`, `effect`, …) whose
    /// final error was `message`, with the journaled `failure` (`None`: no class, not
    /// retryable).
    pub fn call_failed(
        kind: &'static str,
        name: impl Into<String>,
        message: impl Into<String>,
        failure: Option<Failure>,
    ) -> Self {
        let Failure { class, retryable } = failure.unwrap_or_default();
        WorkflowError::CallFailed {
            kind,
            name: name.into(),
            message: message.into(),
            class,
            retryable,
        }
    }

    /// The class of a failed call's final error (`StepError::with_class`), e.g.
    /// `Err(e) if e.class() == Some("card_declined")` in compensation code. `None` for other
    /// errors and for a call whose error had no class.
    pub fn class(&self) -> Option<&str> {
        match self {
            WorkflowError::CallFailed { class, .. } => class.as_deref(),
            _ => None,
        }
    }

    /// Whether a failed call's final error was retryable: the call gave up because its retry
    /// policy ran out of attempts, so trying again later (another call, a restarted run) may
    /// succeed. False for other errors and for fatal or `non_retryable` failures.
    pub fn is_retryable(&self) -> bool {
        matches!(self, WorkflowError::CallFailed { retryable: true, .. })
    }

    /// The name of the call the error came from: the call that failed
    /// ([`CallFailed`](Self::CallFailed)) or whose value did not decode
    /// ([`Decode`](Self::Decode)); `None` for the workflow's own failure. Tells which call of
    /// several (say, in one `?` chain) to compensate for.
    pub fn call_name(&self) -> Option<&str> {
        match self {
            WorkflowError::CallFailed { name, .. } | WorkflowError::Decode { name, .. } => Some(name),
            WorkflowError::Failed(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<u32, WorkflowError> {
        // `?` on a std error, as in a workflow's `run`.
        Ok(s.parse::<u32>()?)
    }

    fn with_context(s: &str) -> Result<u32, WorkflowError> {
        use anyhow::Context;
        // … and on an anyhow error, whose cause chain the message keeps.
        Ok(s.parse::<u32>().context("reading the amount")?)
    }

    #[test]
    fn call_failures_keep_class_retryability_and_name() {
        let plain = WorkflowError::call_failed("step", "fetch", "boom", None);
        assert_eq!(plain.to_string(), r#"step "fetch" failed: boom"#);
        assert_eq!(
            (plain.class(), plain.is_retryable(), plain.call_name()),
            (None, false, Some("fetch"))
        );
        let timeout = WorkflowError::call_failed(
            "step",
            "fetch",
            "slow",
            Some(Failure::new(Some("timeout".into()), true)),
        );
        assert_eq!(timeout.to_string(), r#"step "fetch" failed (timeout): slow"#);
        assert_eq!((timeout.class(), timeout.is_retryable()), (Some("timeout"), true));
        let decode = WorkflowError::Decode {
            name: "now".into(),
            message: "bad".into(),
        };
        assert_eq!(
            (decode.class(), decode.is_retryable(), decode.call_name()),
            (None, false, Some("now"))
        );
        let failed = WorkflowError::failed("no");
        assert_eq!(
            (failed.class(), failed.is_retryable(), failed.call_name()),
            (None, false, None)
        );
    }

    #[test]
    fn to_failure_applies_the_policys_non_retryable_classes() {
        let policy = RetryPolicy {
            non_retryable: vec!["auth".into()],
            ..RetryPolicy::default()
        };
        let failure = |e: StepError| e.to_failure(&policy);
        assert_eq!(failure(StepError::retryable("x")), Failure::new(None, true));
        assert_eq!(
            failure(StepError::fatal("x").with_class("bad")),
            Failure::new(Some("bad".into()), false)
        );
        assert_eq!(
            failure(StepError::retryable("x").with_class("auth")),
            Failure::new(Some("auth".into()), false)
        );
        assert_eq!(
            failure(StepError::retryable("x").with_class("timeout")),
            Failure::new(Some("timeout".into()), true)
        );
    }

    #[test]
    fn question_mark_takes_any_error_and_keeps_its_chain() {
        assert_eq!(parse("7"), Ok(7));
        assert_eq!(
            parse("x"),
            Err(WorkflowError::Failed("invalid digit found in string".into()))
        );
        assert_eq!(
            with_context("x").map_err(|e| e.to_string()),
            Err("reading the amount: invalid digit found in string".into())
        );
    }
}
