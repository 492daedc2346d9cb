//! Retry policy of steps and effects: exponential backoff with jitter.

use std::time::Duration;

use super::StepError;

/// How a failing step is retried before its failure is journaled and returned.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all (1 = no retry).
    pub max_attempts: u32,
    /// Delay before the second attempt.
    pub initial: Duration,
    /// Cap on the delay.
    pub max_delay: Duration,
    /// Growth factor per attempt.
    pub multiplier: f64,
    /// Random spread, 0.0–1.0, as a fraction of the delay (avoids retry storms).
    pub jitter: f64,
    /// Error classes that are never retried.
    pub non_retryable: Vec<String>,
    /// Time one attempt may take (`None`: no limit). An attempt that takes longer is dropped
    /// (cancelled at its next await) and counts as a retryable failure of class `timeout`;
    /// an effect's last attempt that times out leaves its outcome unknown (it may have
    /// happened), as a crash does.
    pub attempt_timeout: Option<Duration>,
    /// Error classes that pause the run instead of retrying or failing the call (a provider's
    /// `auth` or `quota` error: retries would only burn the budget). The failure is not
    /// journaled; the run is paused with the error as the note (its own pause, by `workflow
    /// code`), and once an operator unpauses it, after fixing the cause, the step runs again
    /// with a fresh budget. Steps only: an effect's failure is journaled as always.
    pub pause_on: Vec<String>,
    /// Pause the run, instead of journaling the step's failure, when a retryable error has
    /// used up every attempt (off by default; a workflow sets it in its `retry_policy`).
    pub pause_when_exhausted: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            initial: Duration::from_millis(100),
            max_delay: Duration::from_secs(10),
            multiplier: 2.0,
            jitter: 0.2,
            non_retryable: Vec::new(),
            attempt_timeout: None,
            pause_on: Vec::new(),
            pause_when_exhausted: false,
        }
    }
}

impl RetryPolicy {
    /// No retries.
    pub fn none() -> Self {
        Self {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// `n` attempts with the default backoff.
    pub fn attempts(n: u32) -> Self {
        Self {
            max_attempts: n.max(1),
            ..Self::default()
        }
    }

    /// This policy with a limit on each attempt's time.
    pub fn with_attempt_timeout(self, limit: Duration) -> Self {
        Self {
            attempt_timeout: Some(limit),
            ..self
        }
    }

    /// Whether attempt `attempt` (1-based) that failed with `err` may be retried (a step's
    /// error of a class that pauses the run is not: see [`RetryPolicy::pauses_at_once`]).
    pub fn should_retry(&self, attempt: u32, err: &StepError) -> bool {
        err.retryable
            && attempt < self.max_attempts
            && !err.class.as_ref().is_some_and(|c| self.non_retryable.contains(c))
    }

    /// Whether a step's error is of a class that pauses the run at once (`pause_on`).
    pub fn pauses_at_once(&self, err: &StepError) -> bool {
        err.class.as_ref().is_some_and(|c| self.pause_on.contains(c))
    }

    /// Whether a step's final failure `err` pauses the run instead of being journaled: its
    /// class is in `pause_on`, or it was retryable and the attempts ran out while
    /// `pause_when_exhausted` is set.
    pub fn pauses(&self, err: &StepError) -> bool {
        let non_retryable = err.class.as_ref().is_some_and(|c| self.non_retryable.contains(c));
        self.pauses_at_once(err) || (self.pause_when_exhausted && err.retryable && !non_retryable)
    }

    /// Delay after failed attempt `attempt` (1-based), jittered.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let base = self.initial.as_secs_f64() * self.multiplier.powi(attempt.saturating_sub(1) as i32);
        let capped = base.min(self.max_delay.as_secs_f64());
        let spread = capped * self.jitter.clamp(0.0, 1.0);
        let jittered = capped - spread + savepoint_core::entropy::f64() * 2.0 * spread;
        Duration::from_secs_f64(jittered.max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_caps_and_jitters() {
        let p = RetryPolicy {
            jitter: 0.0,
            ..RetryPolicy::default()
        };
        assert_eq!(p.backoff(1), Duration::from_millis(100));
        assert_eq!(p.backoff(2), Duration::from_millis(200));
        assert_eq!(p.backoff(30), Duration::from_secs(10));
        let j = RetryPolicy::default();
        for _ in 0..100 {
            let d = j.backoff(2).as_millis();
            assert!((160..=240).contains(&d), "{d}");
        }
    }

    #[test]
    fn retry_decisions() {
        let p = RetryPolicy {
            non_retryable: vec!["auth".into()],
            ..RetryPolicy::attempts(3)
        };
        assert!(p.should_retry(1, &StepError::retryable("x")));
        assert!(!p.should_retry(3, &StepError::retryable("x")));
        assert!(!p.should_retry(1, &StepError::fatal("x")));
        assert!(!p.should_retry(1, &StepError::retryable("x").with_class("auth")));
        let pausing = RetryPolicy {
            pause_on: vec!["quota".into()],
            ..RetryPolicy::attempts(3)
        };
        let quota = StepError::retryable("x").with_class("quota");
        assert!(
            pausing.pauses_at_once(&quota),
            "a pausing class burns no retry of a step"
        );
        assert!(pausing.should_retry(1, &quota), "an effect's retries are its own");
        assert!(pausing.pauses(&quota));
        assert!(!pausing.pauses(&StepError::retryable("x")));
        let exhausted = RetryPolicy {
            pause_when_exhausted: true,
            ..p
        };
        assert!(exhausted.pauses(&StepError::retryable("x")));
        assert!(
            !exhausted.pauses(&StepError::fatal("x")),
            "a fatal error fails the step"
        );
        assert!(!exhausted.pauses(&StepError::retryable("x").with_class("auth")));
    }
}
