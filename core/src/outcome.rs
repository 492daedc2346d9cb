//! What the store's writes answer, as plain data the workflow context, the worker and the
//! API match on: the outcome types of creating, suspending, effects, actions and children.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::time::Duration;

pub use crate::model::Flow;
use crate::model::{Holder, OutputVersion, RunHeader, RunStatus, Wait};

/// Outcome of creating a run.
#[derive(Debug, Clone, PartialEq)]
pub enum CreateOutcome {
    /// A new run.
    Created,
    /// The same thread id, workflow and input already exist.
    Exists(RunStatus),
    /// The thread id is taken by a different workflow or input.
    Conflict(String),
}

/// Outcome of a suspend.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Suspended {
    /// The awaited value had already arrived: the run is pending again and needs a task.
    pub woke: bool,
    /// The run's new due time (server ms), if any.
    pub due: Option<u64>,
    /// The run's ring version: present it to the store's `mark_queued` after publishing
    /// the run's next task.
    pub rv: u64,
}

/// A suspension of the slice, for the store's `suspend`.
#[derive(Debug, Clone, Copy)]
pub struct Suspend<'a> {
    /// `sleeping`, `waiting` or `pending`.
    pub status: RunStatus,
    /// Due time from server now (`None`: no due time, e.g. waiting for a signal).
    pub due_in: Option<Duration>,
    /// What a waiting run waits for.
    pub wait: Option<&'a Wait>,
    /// The effect key a run backs off on and the back-off count, for a busy effect.
    pub backoff_on: Option<(&'a str, u32)>,
    /// The journal index whose begin record (`x:<index>`) to drop: the run backing off never
    /// took that key's intent.
    pub drop_begin: Option<u32>,
    /// Route the run's next task to this task queue (`q`): a yield to a call routed elsewhere.
    pub queue: Option<&'a str>,
}

impl<'a> Suspend<'a> {
    /// Pending (yield, retry later) or sleeping, due in `due_in`.
    pub fn until(status: RunStatus, due_in: Duration) -> Self {
        Self {
            status,
            due_in: Some(due_in),
            wait: None,
            backoff_on: None,
            drop_begin: None,
            queue: None,
        }
    }

    /// Waiting for an interrupt answer or a signal.
    pub fn waiting(wait: &'a Wait) -> Self {
        Self {
            status: RunStatus::Waiting,
            due_in: None,
            wait: Some(wait),
            backoff_on: None,
            drop_begin: None,
            queue: None,
        }
    }
}

/// Outcome of marking an effect done.
#[derive(Debug, Clone, PartialEq)]
pub enum EffectDone {
    /// Recorded.
    Recorded,
    /// It had been marked done before; the first result stands.
    Already(Value),
    /// Another run (or another index) holds the intent.
    NotOwner(String),
    /// A newer attempt of this run holds the intent: this attempt is fenced out.
    Stale,
    /// (Operator) the record is no longer the one the caller named: nothing changed.
    Changed(String),
}

/// Outcome of releasing an intent.
#[derive(Debug, Clone, PartialEq)]
pub enum EffectRelease {
    /// Released: the effect may run again.
    Released,
    /// There was no record.
    Absent,
    /// It is done (applied): nothing released; the recorded result.
    Done(Value),
    /// Someone else holds it.
    NotOwner(String),
    /// (Operator) the record is no longer the one the caller named: nothing changed.
    Changed(String),
}

/// Outcome of recording that an attempt never called the effect whose intent it took.
#[derive(Debug, Clone, PartialEq)]
pub enum EffectUnused {
    /// Recorded in the run (or the index is journaled already: nothing left to prove).
    Recorded,
    /// Recorded, and the run, which had blocked on that very intent as in doubt, is pending
    /// again (due after the redelivery delay: the scanner publishes its task).
    Unblocked(Rerun),
    /// The run does not exist any more.
    Missing,
    /// The run ended (its status): nothing to record.
    Ended(String),
}

/// What an effect key's record says (for the API, the doctor and back-off decisions).
#[derive(Debug, Clone, PartialEq)]
pub enum EffectRecord {
    /// An attempt recorded the intent and has not settled it.
    Intent(Holder),
    /// Its owner ended without settling it: in doubt until an operator resolves it.
    Orphaned(Holder, String),
    /// Applied, with the recorded result.
    Done(Holder, Value),
}

/// A run made runnable again by an operator or client action: what the caller needs to
/// publish its task (the run's trace) and then mark it queued (its ring version).
#[derive(Debug, Clone, PartialEq)]
pub struct Rerun {
    /// The run's ring version.
    pub rv: u64,
    /// The run's W3C trace context, if any.
    pub trace: Option<String>,
}

/// How a child run ended, as its parent sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum ChildResult {
    /// It completed with this output, at this version of the output's type as the child's
    /// code declared it (`None`: 1).
    Completed(Value, Option<OutputVersion>),
    /// It failed with this error.
    Failed(String),
    /// It was cancelled, with this reason.
    Cancelled(String),
}

impl ChildResult {
    /// The result of a run that has ended (completed, failed or cancelled); `None` while it
    /// can still go on (a blocked run can be resolved).
    pub fn of(h: &RunHeader) -> Option<Self> {
        match h.status {
            RunStatus::Completed => Some(Self::Completed(
                h.output.clone().unwrap_or(Value::Null),
                h.output_version.clone(),
            )),
            RunStatus::Failed => Some(Self::Failed(h.error.clone().unwrap_or_default())),
            RunStatus::Cancelled => Some(Self::Cancelled(h.reason.clone().unwrap_or_default())),
            _ => None,
        }
    }

    /// The value sent to the parent.
    pub fn to_value(&self) -> Value {
        match self {
            Self::Completed(v, None) => json!({"status": "completed", "output": v}),
            Self::Completed(v, Some(ov)) => json!({"status": "completed", "output": v, "ov": ov.field()}),
            Self::Failed(e) => json!({"status": "failed", "error": e}),
            Self::Cancelled(r) => json!({"status": "cancelled", "error": r}),
        }
    }

    /// Reads a value sent to the parent.
    pub fn from_value(v: &Value) -> Option<Self> {
        let error = || v["error"].as_str().unwrap_or_default().to_owned();
        match v["status"].as_str()? {
            "completed" => {
                let ov = v["ov"].as_str().and_then(OutputVersion::parse);
                Some(Self::Completed(v["output"].clone(), ov))
            }
            "failed" => Some(Self::Failed(error())),
            "cancelled" => Some(Self::Cancelled(error())),
            _ => None,
        }
    }
}

/// The signal name a child's word to its parent goes under (`:` is not allowed in the names
/// the API takes, so no client can forge one).
pub fn child_signal(index: u32) -> String {
    format!("child:{index}")
}

/// A workflow as served: its name and version range.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogEntry {
    /// Workflow name.
    pub name: String,
    /// Newest version served (new runs start at it).
    pub version: u32,
    /// Oldest version still served.
    pub min_version: u32,
    /// The version of its input's type the serving code declares (`Versioned`; `None`: 1): a
    /// run started with an input checked against this build's schema is stamped with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_version: Option<u32>,
    /// The name of its input's type when the serving code declares the type's version: with
    /// `input_version`, the run feature a run started with this input needs
    /// ([`value_feature`](crate::model::value_feature)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_type: Option<String>,
}
