//! Named crash points (ARCHITECTURE §12). `SAVEPOINT_FAILPOINTS="name=action;…"` makes a
//! process abort (as under `kill -9`) or fail with a transient error at a named point.
//!
//! Actions: `abort`, `error`, `pause(MS)`, with an optional trigger: `abort@N` fires on the
//! N-th hit only, `abort%P` fires on each hit with probability P percent. `pause(MS)` stops
//! the task at that point for MS milliseconds (a GC-like stall; inside a run's slice the
//! lease heartbeat stalls with it, so the lease can expire under the paused worker). With
//! nothing configured a check is one branch on an empty map.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Every failpoint name the engine checks.
pub const NAMES: &[&str] = &[
    "worker.before_claim",
    "worker.after_claim",
    "worker.after_ack",
    "step.before_commit",
    "step.after_commit",
    "effect.after_intent",
    "effect.after_call",
    "effect.after_done",
    "publish.before",
    "publish.after",
    "scheduler.before_publish",
    "lineage.after_create",
    "run.deadline.before_fail",
    "schedule.before_advance",
    "schedule.before_create",
    "child.before_start",
    "child.after_link",
    "child.after_start",
    "child.before_notify",
    "route.before_yield",
];

/// What a failpoint does when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Die at once, like `kill -9` (in-process workers of `savepoint dev` use a crash hook).
    Abort,
    /// Be killed by a real SIGKILL sent to this process by `kill -KILL <pid>` (in-process
    /// workers use the crash hook, as for `abort`).
    Kill,
    /// Fail the operation with a transient error.
    Error,
    /// Stop the task here for this long, then go on.
    Pause(Duration),
}

/// When it fires.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Trigger {
    /// Every hit.
    Always,
    /// Only the N-th hit (1-based).
    Nth(u64),
    /// Each hit with this probability (0–100).
    Percent(f64),
}

#[derive(Debug)]
struct Point {
    action: Action,
    trigger: Trigger,
    hits: AtomicU64,
}

/// A bad `SAVEPOINT_FAILPOINTS` value.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FailpointParseError {
    /// The entry is not `name=action[@N|%P]`.
    #[error("failpoint entry {0:?} is not name=action[@N|%P]")]
    Syntax(String),
    /// Unknown point.
    #[error("unknown failpoint {0:?}; known: {1}")]
    UnknownName(String, String),
    /// Unknown action.
    #[error("unknown failpoint action {0:?}; use abort, error or pause(MS)")]
    UnknownAction(String),
}

/// The error a failpoint with action `error` injects.
#[derive(Debug, Clone, thiserror::Error)]
#[error("failpoint {0} injected an error")]
pub struct Injected(pub &'static str);

type CrashHook = Arc<dyn Fn(&'static str) + Send + Sync>;

/// The configured failpoints of one process (or one in-process worker).
#[derive(Clone, Default)]
pub struct Failpoints {
    points: Arc<HashMap<&'static str, Point>>,
    crash: Option<CrashHook>,
}

impl std::fmt::Debug for Failpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.points.iter().map(|(k, p)| (k, (p.action, p.trigger))))
            .finish()
    }
}

impl Failpoints {
    /// No failpoints.
    pub fn none() -> Self {
        Self::default()
    }

    /// Parses `name=action[@N|%P];…` (empty → none).
    pub fn parse(spec: &str) -> Result<Self, FailpointParseError> {
        let mut points = HashMap::new();
        for raw in spec.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, action) = raw
                .split_once('=')
                .ok_or_else(|| FailpointParseError::Syntax(raw.into()))?;
            let name = NAMES
                .iter()
                .copied()
                .find(|n| *n == name.trim())
                .ok_or_else(|| FailpointParseError::UnknownName(name.trim().into(), NAMES.join(", ")))?;
            let action = action.trim();
            let (verb, trigger) = if let Some((v, n)) = action.split_once('@') {
                let n: u64 = n.parse().map_err(|_| FailpointParseError::Syntax(raw.into()))?;
                (v, Trigger::Nth(n.max(1)))
            } else if let Some((v, p)) = action.split_once('%') {
                let p: f64 = p.parse().map_err(|_| FailpointParseError::Syntax(raw.into()))?;
                if !(0.0..=100.0).contains(&p) {
                    return Err(FailpointParseError::Syntax(raw.into()));
                }
                (v, Trigger::Percent(p))
            } else {
                (action, Trigger::Always)
            };
            let action = match verb {
                "abort" => Action::Abort,
                "kill" => Action::Kill,
                "error" => Action::Error,
                other => parse_pause(other).ok_or_else(|| FailpointParseError::UnknownAction(other.into()))?,
            };
            points.insert(
                name,
                Point {
                    action,
                    trigger,
                    hits: AtomicU64::new(0),
                },
            );
        }
        Ok(Self {
            points: Arc::new(points),
            crash: None,
        })
    }

    /// Replaces `abort`'s process exit with a hook (used by `savepoint dev` to crash one
    /// in-process worker without killing the others). The hook must stop the caller's task.
    pub fn with_crash_hook(mut self, hook: impl Fn(&'static str) + Send + Sync + 'static) -> Self {
        self.crash = Some(Arc::new(hook));
        self
    }

    /// True when nothing is configured.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// True when point `name` is configured (whether or not it will fire).
    pub fn has(&self, name: &str) -> bool {
        self.points.contains_key(name)
    }

    /// Checks point `name`: aborts the process, returns an injected error, or does nothing.
    /// With a crash hook installed, `abort` calls the hook and then never returns
    /// (the hook is expected to cancel the calling task).
    pub async fn check(&self, name: &'static str) -> Result<(), Injected> {
        if self.points.is_empty() {
            return Ok(());
        }
        match self.hit(name) {
            None => Ok(()),
            Some(action) => self.perform(name, action).await,
        }
    }

    /// Counts a hit of point `name` and says which action fires, if any, without performing
    /// it (callers that must react to a pause first, such as a run's slice stalling its
    /// heartbeat, then call [`Failpoints::perform`]).
    pub fn hit(&self, name: &str) -> Option<Action> {
        if self.points.is_empty() {
            return None;
        }
        self.fire(name)
    }

    /// Performs an action that [`Failpoints::hit`] returned.
    pub async fn perform(&self, name: &'static str, action: Action) -> Result<(), Injected> {
        match action {
            Action::Pause(d) => {
                tracing::warn!(failpoint = name, pause_ms = d.as_millis() as u64, "failpoint: pausing");
                tokio::time::sleep(d).await;
                Ok(())
            }
            Action::Error => Err(Injected(name)),
            Action::Kill if self.crash.is_none() => {
                eprintln!("savepoint: failpoint {name} fired: sending SIGKILL to this process");
                let pid = std::process::id().to_string();
                let _ = std::process::Command::new("kill").args(["-KILL", &pid]).status();
                // (If kill is missing, die anyway.)
                std::process::abort();
            }
            Action::Abort | Action::Kill => match &self.crash {
                Some(hook) => {
                    tracing::warn!(failpoint = name, "failpoint: crashing this worker");
                    hook(name);
                    std::future::pending::<()>().await;
                    Ok(())
                }
                None => {
                    eprintln!("savepoint: failpoint {name} fired: aborting the process");
                    std::process::abort();
                }
            },
        }
    }

    fn fire(&self, name: &str) -> Option<Action> {
        // (`hit` checked that something is configured.)
        let p = self.points.get(name)?;
        let hit = p.hits.fetch_add(1, Ordering::SeqCst) + 1;
        let fires = match p.trigger {
            Trigger::Always => true,
            Trigger::Nth(n) => hit == n,
            Trigger::Percent(pct) => crate::entropy::f64() * 100.0 < pct,
        };
        fires.then_some(p.action)
    }
}

/// `pause(MS)` → the pause action.
fn parse_pause(verb: &str) -> Option<Action> {
    let ms: u64 = verb.strip_prefix("pause(")?.strip_suffix(')')?.trim().parse().ok()?;
    Some(Action::Pause(Duration::from_millis(ms)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_actions_and_triggers() {
        let f =
            Failpoints::parse("step.after_commit=abort@2; effect.after_call=error;publish.before=error%50").unwrap();
        assert_eq!(f.points.len(), 3);
        assert_eq!(f.points["step.after_commit"].trigger, Trigger::Nth(2));
        assert_eq!(f.points["effect.after_call"].action, Action::Error);
        assert!(Failpoints::parse("").unwrap().is_empty());
        assert!(matches!(
            Failpoints::parse("nope=abort"),
            Err(FailpointParseError::UnknownName(..))
        ));
        assert!(matches!(
            Failpoints::parse("publish.before=explode"),
            Err(FailpointParseError::UnknownAction(_))
        ));
        assert!(matches!(
            Failpoints::parse("publish.before"),
            Err(FailpointParseError::Syntax(_))
        ));
        assert!(Failpoints::parse("publish.before=error%150").is_err());
        let p = Failpoints::parse("effect.after_intent=pause(9000)@2").unwrap();
        assert_eq!(
            p.points["effect.after_intent"].action,
            Action::Pause(Duration::from_millis(9000))
        );
        assert_eq!(p.points["effect.after_intent"].trigger, Trigger::Nth(2));
        assert!(matches!(
            Failpoints::parse("publish.before=pause(soon)"),
            Err(FailpointParseError::UnknownAction(_))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn pause_stops_then_goes_on() {
        let f = Failpoints::parse("publish.after=pause(5000)@1").unwrap();
        let t0 = tokio::time::Instant::now();
        assert!(f.check("publish.after").await.is_ok());
        assert!(t0.elapsed() >= Duration::from_millis(5000));
        let t1 = tokio::time::Instant::now();
        assert!(f.check("publish.after").await.is_ok());
        assert!(t1.elapsed() < Duration::from_millis(10), "fires on the first hit only");
    }

    #[tokio::test]
    async fn nth_fires_once() {
        let f = Failpoints::parse("publish.after=error@2").unwrap();
        assert!(f.check("publish.after").await.is_ok());
        assert!(f.check("publish.after").await.is_err());
        assert!(f.check("publish.after").await.is_ok());
        assert!(f.check("publish.before").await.is_ok());
    }

    #[tokio::test]
    async fn crash_hook_replaces_abort() {
        let hit = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let h = hit.clone();
        let f = Failpoints::parse("worker.after_claim=abort")
            .unwrap()
            .with_crash_hook(move |_| {
                h.store(true, Ordering::SeqCst);
            });
        let r = tokio::time::timeout(std::time::Duration::from_millis(50), f.check("worker.after_claim")).await;
        assert!(r.is_err(), "abort with a hook never returns");
        assert!(hit.load(Ordering::SeqCst));
    }
}
