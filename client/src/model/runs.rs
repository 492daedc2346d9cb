//! Runs: start, view, history, export, list, and the bodies and answers of the calls that
//! steer a run (resume, signal, cancel, retry, fork, restart, resolve).

use savepoint::core::model::RunStatus;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::numbers::{whole_u32, whole_u64_opt};

/// Every error: a sentence saying what was wrong and, where there is one, what to do.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(example = json!({"error": "run invoice-1 not found"})))]
pub struct ErrorBody {
    /// What went wrong.
    pub error: String,
}

/// A run's status, as the API names it: the store's own [`RunStatus`], so the document's enum
/// is [`RunStatus::ALL`] and cannot miss one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status(pub RunStatus);

impl Status {
    /// Created or made runnable again.
    pub const PENDING: Status = Status(RunStatus::Pending);
    /// Ended by an operator.
    pub const CANCELLED: Status = Status(RunStatus::Cancelled);
}

impl From<RunStatus> for Status {
    fn from(s: RunStatus) -> Self {
        Status(s)
    }
}

impl Serialize for Status {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.as_str())
    }
}

impl<'de> Deserialize<'de> for Status {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        RunStatus::deserialize(d).map(Status)
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for Status {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some(
                "`pending` (runnable; a task is or will be queued), `running` (a worker holds the lease), \
                 `sleeping` (on a durable timer or a back-off), `waiting` (at an interrupt or signal), \
                 `completed`, `failed`, `cancelled` (ended), `blocked` (stopped until an operator acts: \
                 in-doubt effect, non-determinism, poison run, an answer that did not decode)",
            ))
            .enum_values(Some(RunStatus::ALL.iter().map(|s| s.as_str())))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for Status {}

/// Body of `POST /v1/runs`.
#[derive(Debug, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// A workflow a live worker serves (`GET /v1/runs` lists runs; 422 names the known ones).
    #[cfg_attr(feature = "openapi", schema(min_length = 1, example = "approval"))]
    pub workflow: String,
    /// The run's input: any JSON value the workflow's input schema accepts.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(example = json!({"amount_cents": 1200})))]
    pub input: Value,
    /// The run's id (idempotency: the same id, workflow and input answer 200 with the run;
    /// another workflow or input is 409). Generated when absent.
    #[serde(default)]
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[A-Za-z0-9_.:-]{1,128}$", example = "approval-1")
    )]
    pub thread_id: Option<String>,
    /// The run's timeout in seconds: it fails with `timed out: …` if it has not ended this
    /// long after its creation, whatever it is doing then (durable: kept in the run).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 31_536_000, example = 3600))]
    pub timeout_secs: Option<f64>,
    /// The task queue the run's calls go to (`{ns}.q.<queue>`, served by workers with it in
    /// `SAVEPOINT_WORKER_QUEUES`); by default the deployment's queue. A call may still be
    /// routed elsewhere by the code (`ctx.step_on`).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(pattern = "^[a-z0-9_-]{1,64}$", example = "gpu"))]
    pub queue: Option<String>,
    /// Flow control: at most `limit` runs of a key running at once (the rest wait in line,
    /// by `priority` then arrival), and at most `rate_per_sec` starts per second of the key.
    #[serde(default, deserialize_with = "super::object_opt")]
    pub flow: Option<FlowBody>,
    /// The run's place in its flow key's waiting line: 0 (default) to 9, higher first.
    #[serde(default, deserialize_with = "whole_u64_opt")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<u64>, minimum = 0, maximum = 9, example = 5))]
    pub priority: Option<u64>,
}

/// A run's flow control as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FlowView {
    /// `<workflow>:<key>`, or the workflow alone (a per-workflow limit).
    pub key: String,
    /// Most runs of the key running at once.
    pub limit: u32,
    /// Most starts per second of the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_sec: Option<f64>,
}

/// Flow control of a run (`flow` on start). The key is `key`, else the input's value at
/// `key_from` (a JSON Pointer, e.g. `/customer`), else the workflow itself (a per-workflow
/// limit); runs of one workflow and key share the limit and the rate.
#[derive(Debug, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct FlowBody {
    /// The key.
    #[serde(default)]
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 128, example = "customer-7")
    )]
    pub key: Option<String>,
    /// Where in the input the key is (a JSON Pointer); its value must be a string or a number.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(pattern = "^/.*$", example = "/customer"))]
    pub key_from: Option<String>,
    /// Most runs of the key running (holding a worker) at once.
    #[serde(default, deserialize_with = "whole_u64_opt")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<u64>, minimum = 1, maximum = 100000, example = 2))]
    pub limit: Option<u64>,
    /// Most starts per second of the key.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(exclusive_minimum = 0, maximum = 100000, example = 5))]
    pub rate_per_sec: Option<f64>,
}

/// Body of `POST /v1/runs/{thread_id}/fork`.
#[derive(Debug, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ForkBody {
    /// How many of the source's journal entries the new run starts with (0 = from the top;
    /// at most the source's journal length).
    #[serde(deserialize_with = "whole_u32")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 4_294_967_295u64, example = 2))]
    pub from_step: u32,
    /// The new run's id (generated when absent). Forking again under the same id, from the
    /// same run and entry, answers 200 with that run.
    #[serde(default)]
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[A-Za-z0-9_.:-]{1,128}$", example = "invoice-1-retake")
    )]
    pub thread_id: Option<String>,
    /// Effect keys the source recorded at or after `from_step` that the operator wants
    /// performed again (their records are deleted before the fork starts); by default a
    /// settled key is never repeated.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 100, example = json!(["ledger:INV-1"])))]
    pub rerun_effects: Vec<String>,
}

/// Body of `POST /v1/runs/{thread_id}/restart`.
#[derive(Debug, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RestartBody {
    /// The journal entry to go on from: entries before it are kept and replayed, the rest
    /// dropped (at most the journal length).
    #[serde(deserialize_with = "whole_u32")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 4_294_967_295u64, example = 2))]
    pub from_step: u32,
    /// Effect keys the run recorded at or after `from_step` that the operator wants performed
    /// again (see fork); by default a settled key is never repeated.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 100, example = json!(["ledger:INV-1"])))]
    pub rerun_effects: Vec<String>,
}

/// The run that started a run as its child.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ParentView {
    /// The parent run's id.
    pub thread_id: String,
    /// The journal index of the parent's call that started this run.
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 4_294_967_295u64, example = 2))]
    pub index: u32,
}

/// A child run of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ChildView {
    /// The journal index of the call that started it.
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 4_294_967_295u64, example = 2))]
    pub index: u32,
    /// The child run's id.
    pub thread_id: String,
    /// What cancelling this run does to it: `cancel` (the default) or `abandon`.
    pub on_parent_cancel: String,
}

/// Where a run came from: the run it was forked from and the entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Lineage {
    /// The source run's id.
    pub thread_id: String,
    /// The source's entries the fork started with.
    pub from_step: u32,
}

/// Answer of fork.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ForkReply {
    /// The new run's id.
    pub thread_id: String,
    /// `pending` for a new fork; the fork's current status when it existed already.
    pub status: Status,
    /// The run and entry it was forked from.
    pub forked_from: Lineage,
}

/// Answer of `POST /v1/runs`.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StartReply {
    /// The run's id.
    pub thread_id: String,
    /// `pending` for a new run; the run's current status when it existed already.
    pub status: Status,
}

/// Where a run is: the journal entry it is at, its wake time, and a sentence saying so.
#[derive(Debug, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Position {
    /// The journal entry (index) the run is at.
    pub entry: u32,
    /// `sleep`, `effect`, `interrupt` or `signal` where the run is at one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The sleep's, interrupt's or signal's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The effect key another run holds (back-off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// When it wakes (ms since the epoch, store clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_at: Option<u64>,
    /// When a pending run is due (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at: Option<u64>,
    /// The worker holding the lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// When the lease runs out (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_until: Option<u64>,
    /// Since when a run waits (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
    /// How long past its due time a runnable run waits for a worker (ms), when over 2 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overdue_ms: Option<u64>,
    /// The same in a sentence.
    pub text: String,
}

/// The run that holds the in-doubt record a blocked run waits on.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EffectHolder {
    /// The holder's run.
    pub thread_id: String,
    /// Its journal index.
    pub index: i64,
    /// Its fence.
    pub fence: u64,
}

/// The interrupt or signal a run waits for.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaitView {
    /// `interrupt` or `signal`.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// The interrupt's payload (the question).
    pub payload: Value,
}

/// A pending interrupt.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InterruptView {
    /// The interrupt's name.
    pub name: String,
    /// Its payload (the question).
    pub payload: Value,
}

/// An effect key held by another run that this run backs off on.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaitingOnEffect {
    /// The key.
    pub key: String,
    /// Tries so far.
    pub tries: u32,
}

/// `GET /v1/runs/{thread_id}` (and the result long poll).
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunView {
    /// The run's id.
    pub thread_id: String,
    /// Its workflow.
    pub workflow: String,
    /// The workflow version the run is pinned to.
    pub workflow_version: u32,
    /// Status.
    pub status: Status,
    /// Journal entries recorded.
    pub step: u32,
    /// Where it is.
    pub at: Position,
    /// The run record's version (compare-and-swap counter).
    pub version: u64,
    /// Claims so far.
    pub attempt: u32,
    /// The output of a completed run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// The error of a failed run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why a blocked run is blocked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_reason: Option<String>,
    /// The in-doubt effect key a blocked run waits on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_effect: Option<String>,
    /// Who holds that key's record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_effect_holder: Option<EffectHolder>,
    /// Why a cancelled run was cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_reason: Option<String>,
    /// Names of the interrupt or signal the run takes an answer for.
    pub next: Vec<String>,
    /// The pending interrupt, if any.
    pub interrupts: Vec<InterruptView>,
    /// The wait it takes an answer for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<WaitView>,
    /// Why a runnable run is not moving, when the engine knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
    /// The effect key it backs off on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_on_effect: Option<WaitingOnEffect>,
    /// Worker crashes this run lived through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crashes: Option<u32>,
    /// The worker that crashed last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crashed_by: Option<String>,
    /// Its due time (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at: Option<u64>,
    /// When it fails with a timeout if it has not ended (ms; started with `timeout_secs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_at: Option<u64>,
    /// The pause holding the run (its own, or its workflow's, version's or queue's), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<super::RunPauseView>,
    /// Why it is not running, since and until when, with an estimate of when it runs again
    /// (absent while it runs, and once it has ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<super::Waiting>,
    /// The task queue its next task goes to (absent: the deployment's default queue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// The task queue it was started on, where its calls run unless routed elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home_queue: Option<String>,
    /// Its flow control, if it was started with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<FlowView>,
    /// Its priority in its flow key's waiting line (absent: 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// The run this one was forked from, and the entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<Lineage>,
    /// Restarts in place so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarts: Option<u32>,
    /// The entry the last restart went on from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarted_from: Option<u32>,
    /// The run that started this one as its child (`ctx.child`), and the call's entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentView>,
    /// The child runs this run started, by the entry of the call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ChildView>,
    /// Created (ms).
    pub created_at: u64,
    /// Last changed (ms).
    pub updated_at: u64,
    /// When an ended run ended (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<u64>,
}

/// Whether a journal entry succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum EntryOutcome {
    /// It has a result.
    Ok,
    /// It recorded an error.
    Error,
}

/// One journal entry.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EntryView {
    /// Its index.
    pub index: usize,
    /// The step's, effect's, sleep's or wait's name.
    pub name: String,
    /// `step`, `effect`, `sleep`, `interrupt`, `signal`, `value`, `patch` or `child` (its key: the
    /// child run's id).
    #[cfg_attr(feature = "openapi", schema(example = "effect"))]
    pub kind: String,
    /// Ok or error.
    pub outcome: EntryOutcome,
    /// The recorded result (null for an error).
    pub result: Value,
    /// The recorded error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The recorded error's class (`StepError::with_class`), if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_class: Option<String>,
    /// Whether the recorded error was retryable (it ran out of attempts); absent for a
    /// success and for entries written before entry version 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
    /// An effect's idempotency key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The version of the result's type as the code that recorded it declared it
    /// (`Versioned::VERSION`); absent: version 1. A replay upgrades an older result through
    /// the workflow's declared migrations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_version: Option<u32>,
    /// Attempts it took.
    pub attempts: u32,
    /// When it was recorded (ms).
    pub at: u64,
}

/// One event of a run's log (`claimed`, `takeover`, `effect_done`, `slept`, …).
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventView {
    /// Its position in the log.
    pub id: String,
    /// The event type.
    #[serde(rename = "type")]
    pub typ: String,
    /// What happened.
    pub detail: String,
    /// When (ms).
    pub at: u64,
}

/// `GET /v1/runs/{thread_id}/history`.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HistoryView {
    /// The run's id.
    pub thread_id: String,
    /// Status.
    pub status: Status,
    /// The journal.
    pub entries: Vec<EntryView>,
    /// The newest 1,000 events, oldest first.
    pub events: Vec<EventView>,
}

/// `GET /v1/runs/{thread_id}/export`: a serialisable checkpoint.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExportView {
    /// The run's id.
    pub thread_id: String,
    /// Its workflow.
    pub workflow: String,
    /// The workflow version.
    pub workflow_version: u32,
    /// The record's schema version.
    pub schema: u32,
    /// Status.
    pub status: Status,
    /// Journal entries recorded.
    pub step: u32,
    /// The record's version.
    pub version: u64,
    /// Names of the recorded entries, in order.
    pub completed: Vec<String>,
    /// Names of the wait it takes an answer for.
    pub pending: Vec<String>,
    /// The input.
    pub input: Value,
    /// The version of the input's type as the starting code declared it (`Versioned`;
    /// absent: 1): a replay upgrades the input through the workflow's migrations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_version: Option<u32>,
    /// The output (null until completed).
    pub output: Option<Value>,
    /// The version of the output's type as the completing code declared it (`Versioned`;
    /// absent: 1): a parent awaiting the run as a child upgrades the output from there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_version: Option<u32>,
    /// The journal.
    pub journal: Vec<EntryView>,
}

/// One row of `GET /v1/runs`.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ListItem {
    /// The run's id.
    pub thread_id: String,
    /// Its workflow.
    pub workflow: String,
    /// Status.
    pub status: Status,
    /// Journal entries recorded.
    pub step: u32,
    /// Created (ms).
    pub created_at: u64,
    /// Last changed (ms).
    pub updated_at: u64,
    /// Why it waits (only in a list filtered by `waiting_on`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<super::Waiting>,
}

/// `GET /v1/runs`.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunList {
    /// Newest first.
    pub runs: Vec<ListItem>,
}

/// Body of resume and signal.
#[derive(Debug, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ValueBody {
    /// The answer: any JSON value the interrupt's or signal's schema accepts.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(example = json!({"approved": true})))]
    pub value: Value,
    /// A client id (1–128 characters, no control characters) that makes a retried POST
    /// deliver once.
    #[serde(default)]
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 128, pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]{1,128}$")
    )]
    pub id: Option<String>,
}

/// Answer of resume, signal and retry.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Accepted {
    /// The run's id.
    pub thread_id: String,
    /// `pending`: the run is runnable again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// A signal the run does not wait for yet: kept until it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffered: Option<bool>,
    /// The same client id was delivered before: nothing changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicate: Option<bool>,
}

impl Accepted {
    /// The run is runnable again.
    pub fn pending(thread: &str) -> Self {
        Self {
            status: Some(Status::PENDING),
            ..Self::of(thread)
        }
    }

    /// Kept until the run waits for it.
    pub fn buffered(thread: &str) -> Self {
        Self {
            buffered: Some(true),
            ..Self::of(thread)
        }
    }

    /// Delivered before under the same client id.
    pub fn duplicate(thread: &str) -> Self {
        Self {
            duplicate: Some(true),
            ..Self::of(thread)
        }
    }

    fn of(thread: &str) -> Self {
        Self {
            thread_id: thread.to_owned(),
            status: None,
            buffered: None,
            duplicate: None,
        }
    }
}

/// Body of cancel (optional).
#[derive(Debug, Default, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    /// Recorded as the run's cancel reason (default `cancelled via API`).
    #[serde(default)]
    pub reason: Option<String>,
}

/// An effect whose outcome a cancel left unknown.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InDoubtEffect {
    /// Its journal index.
    pub index: u32,
    /// Its key.
    pub key: String,
    /// `in_doubt_owner_cancelled`.
    pub state: String,
}

/// Answer of cancel.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CancelReply {
    /// The run's id.
    pub thread_id: String,
    /// `cancelled`.
    pub status: Status,
    /// Effects the run had begun but not recorded: settle them at the provider.
    pub effects_in_doubt: Vec<InDoubtEffect>,
    /// Child runs cancelled with it (those started with the default policy, and theirs).
    pub children_cancelled: Vec<String>,
}

/// Body of output-version.
#[derive(Debug, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct OutputVersionBody {
    /// The journal index of the run's child call whose output came without a version (as
    /// the run's block reason names it).
    #[serde(deserialize_with = "whole_u32")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 4_294_967_295u64, example = 0))]
    pub call: u32,
    /// The version the child's output was written at, `<type name>@<version>` as the block
    /// reason names the type (`@1` for a build that declared no version of it).
    #[cfg_attr(feature = "openapi", schema(example = "billing.Price@2"))]
    pub output_version: String,
}

/// Body of forget-feature.
#[derive(Debug, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ForgetFeatureBody {
    /// The value run feature to let go of, as the run's `waiting_for` names it:
    /// `value:<type name>@<version>`.
    pub feature: String,
}

/// Body of resolve.
#[derive(Debug, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ResolveBody {
    /// Whether the effect happened at the provider.
    pub applied: bool,
    /// With `applied: true`: the effect's result as the run will journal it (required unless
    /// the effect's result type is `()`).
    #[serde(default)]
    pub result: Option<Value>,
}

/// Body of the resolve of every effect a run has in doubt, together
/// (`POST /v1/runs/{thread_id}/effects/resolve`).
#[derive(Debug, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ResolveAllBody {
    /// Each effect key the run has in doubt (its diagnosis lists them), with how it is settled:
    /// every one of them, and no other.
    pub effects: std::collections::BTreeMap<String, ResolveBody>,
}

/// Answer of the resolve of every effect in doubt.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResolveAllReply {
    /// The run's id.
    pub thread_id: String,
    /// `pending`: the run is runnable again.
    pub status: Status,
    /// How each effect was settled, by key.
    pub effects: std::collections::BTreeMap<String, SettledEffect>,
}

/// How resolve settled the effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Settled {
    /// Recorded as done with the given result.
    Applied,
    /// It was recorded done before: that result stands.
    AlreadyApplied,
    /// Released: the run calls the effect again.
    Released,
}

/// The settled effect.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SettledEffect {
    /// How it was settled.
    pub state: Settled,
    /// The result the run journals (applied, already applied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
}

/// Answer of resolve.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResolveReply {
    /// The run's id.
    pub thread_id: String,
    /// `pending`: the run is runnable again.
    pub status: Status,
    /// The settled effect.
    pub effect: SettledEffect,
}

#[cfg(all(test, feature = "openapi"))]
mod tests {
    use super::*;

    #[test]
    fn every_store_status_is_in_the_documented_enum() {
        let schema = serde_json::to_value(<Status as utoipa::PartialSchema>::schema()).unwrap();
        for s in RunStatus::ALL {
            assert_eq!(serde_json::to_value(Status::from(s)).unwrap(), s.as_str());
            assert!(
                schema["enum"].as_array().unwrap().contains(&s.as_str().into()),
                "{s:?}: {schema}"
            );
        }
    }
}
