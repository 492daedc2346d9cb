//! Errors seen by workflow code.

use std::fmt;

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

    /// Tags the error with a class (see `RetryPolicy::non_retryable`).
    pub fn with_class(mut self, class: impl Into<String>) -> Self {
        self.class = Some(class.into());
        self
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
    /// a replay returns the same error. Workflow code may compensate (saga).
    CallFailed {
        /// `step` or `effect`.
        kind: &'static str,
        /// The call's name.
        name: String,
        /// The final error.
        message: String,
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
            WorkflowError::CallFailed { kind, name, message } => write!(f, "{kind} {name:?} failed: {message}"),
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

impl WorkflowError {
    /// The workflow fails with this message.
    pub fn failed(message: impl Into<String>) -> Self {
        WorkflowError::Failed(message.into())
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
