//! Why a run is not running, and until when (`waiting` on a run, its diagnosis, and the
//! filter `GET /v1/runs?waiting_on=`).

use serde::{Deserialize, Serialize};

/// What a run that is not running waits on, as a code a program can switch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum WaitingOn {
    /// A human's answer to an interrupt.
    Human,
    /// A named signal.
    Signal,
    /// A child run it started.
    Child,
    /// A durable timer (`ctx.sleep`).
    Timer,
    /// A slot of its flow-control key: every slot is held, or runs wait ahead of it.
    FlowSlot,
    /// A token of its flow-control key's start rate.
    RateLimit,
    /// A live worker that serves its workflow at its version (or its task queue).
    Worker,
    /// Its turn in its task queue: due, served, behind the tasks ahead of it.
    Backlog,
    /// A pause (its own, its workflow's, its version's or its queue's).
    Paused,
    /// A back-off before it tries again: a failed call's retry, an effect key another run
    /// holds, or a transient store error.
    BackingOff,
    /// An operator: it is blocked.
    Blocked,
}

impl WaitingOn {
    /// Every cause, in the order above.
    pub const ALL: [WaitingOn; 11] = [
        WaitingOn::Human,
        WaitingOn::Signal,
        WaitingOn::Child,
        WaitingOn::Timer,
        WaitingOn::FlowSlot,
        WaitingOn::RateLimit,
        WaitingOn::Worker,
        WaitingOn::Backlog,
        WaitingOn::Paused,
        WaitingOn::BackingOff,
        WaitingOn::Blocked,
    ];

    /// The API name (`waiting_on=`).
    pub fn as_str(self) -> &'static str {
        match self {
            WaitingOn::Human => "human",
            WaitingOn::Signal => "signal",
            WaitingOn::Child => "child",
            WaitingOn::Timer => "timer",
            WaitingOn::FlowSlot => "flow_slot",
            WaitingOn::RateLimit => "rate_limit",
            WaitingOn::Worker => "worker",
            WaitingOn::Backlog => "backlog",
            WaitingOn::Paused => "paused",
            WaitingOn::BackingOff => "backing_off",
            WaitingOn::Blocked => "blocked",
        }
    }

    /// Parses an API name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.as_str() == s)
    }
}

impl std::fmt::Display for WaitingOn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// When the run is expected to run again, and how that was worked out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Estimate {
    /// Store time (ms) it is expected to run again; absent: unknown (a human, a signal, a
    /// child, an operator, or nothing to measure a rate by).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<u64>,
    /// How `at` was computed, or why it cannot be.
    pub how: String,
}

/// A run's place in its flow-control key's line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FlowLine {
    /// The flow-control key.
    pub key: String,
    /// Runs ahead of it in line (0: it is first).
    pub ahead: u64,
    /// Runs in line, itself included.
    pub in_line: u64,
    /// Slots held now.
    pub holders: u64,
    /// Slots the key has.
    pub limit: u32,
    /// The key's start rate (starts per second), if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_sec: Option<f64>,
    /// Recent slot turnover: the mean time between two slots being given back (ms), once
    /// two have been.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turnover_ms: Option<u64>,
    /// Store time (ms) of the last slot given back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_release_at: Option<u64>,
}

/// The task queue a runnable run waits in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Backlog {
    /// The queue (absent: the deployment's default queue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Tasks ready in it (absent when the broker did not answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<u32>,
    /// Live workers consuming it that serve the run.
    pub workers: u32,
    /// Slices per second those workers started recently, as their last heartbeats report.
    pub consume_per_sec: f64,
}

/// Why a run that is not running waits, since when, and until when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Waiting {
    /// The cause, as a code.
    pub on: WaitingOn,
    /// The cause in one sentence.
    pub summary: String,
    /// Store time (ms) it started waiting on this, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
    /// Store time (ms) the wait ends by itself: a timer's or back-off's end, a wait's
    /// timeout, the next token of a rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
    /// What it waits on by name: the interrupt, signal or timer, the child run, the effect
    /// key, the flow-control key, the pause's scope, the worker version it needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its place in a flow-control line (`flow_slot`, `rate_limit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<FlowLine>,
    /// Its task queue (`backlog`, `worker`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog: Option<Backlog>,
    /// When it is expected to run again.
    pub estimate: Estimate,
}
