//! The doctor's diagnosis of a run (`GET /v1/runs/{thread_id}/diagnosis`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::runs::{EventView, Status};

/// What the doctor concluded, as a code a program can switch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Case {
    /// Waiting for a human to answer an interrupt.
    WaitingForHuman,
    /// Waiting for a named signal.
    WaitingForSignal,
    /// Waiting for a child run it started to end.
    WaitingForChild,
    /// In line for a slot or a start token of its flow-control key.
    InLine,
    /// On a durable timer until its due time.
    Sleeping,
    /// Backing off: a retry's back-off, or an effect key another run holds.
    BackingOff,
    /// Runnable, its task in the queue (possibly behind a backlog).
    Queued,
    /// Runnable and past its due time with no worker on it yet.
    Overdue,
    /// A live worker holds the lease and is executing it.
    Running,
    /// The lease holder is gone (not registered, or its `/healthz` does not answer, or the
    /// lease expired): another worker takes the run over when the lease expires.
    HeldByDeadWorker,
    /// No live worker serves the run's workflow at its recorded version.
    NoWorker,
    /// Blocked: an effect's outcome is unknown until an operator resolves it.
    BlockedInDoubt,
    /// Blocked: the code no longer takes the path the journal recorded.
    BlockedNonDeterminism,
    /// Blocked: a poison run, taken over too often at one journal position.
    BlockedPoison,
    /// Blocked: a recorded value is at a version of its type the code cannot upgrade from (no
    /// migration declared, a migration that failed, or a version newer than the code knows).
    BlockedMigration,
    /// Blocked for another reason (a panic in workflow code, an answer that did not decode,
    /// an unreadable checkpoint).
    Blocked,
    /// Ended with an output.
    Completed,
    /// Ended with an error.
    Failed,
    /// Ended by an operator.
    Cancelled,
    /// Stopped by a pause (its own, its workflow's, its version's or its queue's) until it is
    /// resumed.
    Paused,
}

/// One thing the operator can do, as the CLI command and as the API call it makes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Action {
    /// What it does, in a sentence (shown before it is confirmed).
    pub label: String,
    /// The `savepoint` command that does it.
    pub command: String,
    /// HTTP method of the API call (absent for an action outside the API, such as a deploy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Path of the API call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Body of the API call (JSON), when it takes one. `"<json>"` marks a value to fill in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// True for an action that settles what the engine cannot know (resolve, cancel): the
    /// console asks for a confirmation.
    pub dangerous: bool,
}

/// The worker holding the run's lease, as the doctor found it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaseHolder {
    /// Worker incarnation id.
    pub worker: String,
    /// Lease expiry (store ms).
    pub lease_until: u64,
    /// True when the lease has expired by the store clock.
    pub expired: bool,
    /// True when the worker's registration is live.
    pub registered: bool,
    /// Its last heartbeat (store ms), when registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_at: Option<u64>,
    /// What its `/healthz` answered: `ok`, `unreachable: …`, or `not served` (a worker
    /// without a health listener: only the registration and the lease tell).
    pub healthz: String,
    /// The doctor's conclusion: the process is there and holds the lease.
    pub alive: bool,
}

/// A live worker that serves the run's workflow at its version.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Server {
    /// Worker incarnation id.
    pub worker: String,
    /// The versions it serves of this workflow (`min..=max`).
    pub versions: String,
    /// Its last heartbeat (store ms).
    pub last_heartbeat_at: u64,
    /// Runs it executes now, at its last heartbeat.
    pub in_flight: u32,
}

/// An effect key the run holds or waits on.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EffectFact {
    /// The idempotency key.
    pub key: String,
    /// Why it matters here: `blocked_on` (the in-doubt effect), `waiting_for` (a key another
    /// run holds) or `holds` (an effect this run began and has not journaled).
    pub role: String,
    /// Its record: `intent`, `in_doubt`, `done` or `none`.
    pub state: String,
    /// Who holds the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
}

/// `GET /v1/runs/{thread_id}/diagnosis`.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Diagnosis {
    /// The run.
    pub thread_id: String,
    /// Workflow name.
    pub workflow: String,
    /// Workflow version the run is recorded at.
    pub workflow_version: u32,
    /// Status.
    pub status: Status,
    /// The verdict, as a code.
    pub case: Case,
    /// True when the run moves on by itself (a worker runs it, or will when its time comes).
    pub progressing: bool,
    /// The verdict in one sentence.
    pub summary: String,
    /// What the verdict rests on, a sentence each.
    pub evidence: Vec<String>,
    /// What settles it, when something must be done.
    pub actions: Vec<Action>,
    /// Store time (ms) of the diagnosis: the clock of due times and leases.
    pub now: u64,
    /// Due time (store ms), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at: Option<u64>,
    /// Tasks ready in the run's queue (absent when the broker did not answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_depth: Option<u32>,
    /// The lease holder, while a worker holds or held the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseHolder>,
    /// Live workers serving the run's workflow at its version.
    pub servers: Vec<Server>,
    /// Why it is not running, since and until when, with an estimate (as on the run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<super::Waiting>,
    /// Effect keys the run holds or waits on.
    pub effects: Vec<EffectFact>,
    /// The run's last events, oldest first.
    pub events: Vec<EventView>,
}
