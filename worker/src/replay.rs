//! Replay-only execution: runs a workflow against its recorded journal without executing
//! or writing anything. Proves determinism and that a replay re-fires nothing.

use serde_json::Value;
use std::collections::BTreeMap;
use tokio_util::sync::CancellationToken;

use savepoint::workflow::engine::{CtxParts, DynWorkflow, SliceExit};
use savepoint::workflow::{Ctx, Registry, SliceLimits};
use savepoint::workflow::{RunError, WorkflowError};
use savepoint_core::decide::{slice_end, Body, SliceEnd};
use savepoint_core::failpoints::Failpoints;
use savepoint_core::ids::ThreadId;
use savepoint_core::journal::{Entry, EntryKind, Outcome, ENTRY_VERSION};
use savepoint_store::{Lease, ScriptStore, StoreError};

/// What a replay found.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayReport {
    /// The workflow returned using recorded results only (its output, or error text).
    Finished(Result<Value, String>),
    /// The journal ends before the workflow does: the next call would run live.
    WouldRunLive(String),
    /// The code and the journal disagree.
    Diverged(String),
    /// A recorded value does not read into the type the code asks for (the worker blocks
    /// such a run `undecodable`): the call, its entry, the type and the decoder's complaint.
    Undecodable(String),
    /// The run cannot be replayed here (unknown workflow, unreadable journal…).
    Unavailable(String),
}

/// Replays the run `thread` against its journal with the registered code.
pub async fn replay(store: &ScriptStore, registry: &Registry, thread: &ThreadId) -> Result<ReplayReport, StoreError> {
    Ok(replay_stored(store, registry, thread).await?.0)
}

/// [`replay`], with how many migrations the replay applied to recorded values.
pub(crate) async fn replay_stored(
    store: &ScriptStore,
    registry: &Registry,
    thread: &ThreadId,
) -> Result<(ReplayReport, u32), StoreError> {
    let Some((header, journal)) = store.get(thread).await? else {
        return Err(StoreError::Missing(thread.to_string()));
    };
    let run = RunToReplay {
        thread,
        version: header.version,
        workflow: &header.workflow,
        input: header.input,
        input_version: header.input_version,
        journal,
    };
    Ok(replay_counted(store, registry, run).await)
}

/// Replays `journal` (e.g. rebuilt from an export with [`journal_from_export`]) against the
/// registered code of `workflow` with this `input` (taken at version 1 of its type; the test
/// kit's `replay_export` passes an export's `input_version`), in replay-only mode: nothing is
/// executed or written. The run need not exist in the store; workflow code that asks for its thread
/// id sees [`REPLAY_THREAD`].
pub async fn replay_journal(
    store: &ScriptStore,
    registry: &Registry,
    workflow: &str,
    input: Value,
    journal: Vec<Entry>,
) -> ReplayReport {
    let thread = match ThreadId::new(REPLAY_THREAD) {
        Ok(t) => t,
        Err(e) => return ReplayReport::Unavailable(e.to_string()),
    };
    replay_as(store, registry, &thread, 0, workflow, input, journal).await
}

/// The thread id a [`replay_journal`] replay runs as.
pub const REPLAY_THREAD: &str = "replay-only";

/// Why an export could not be read back into a journal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExportError {
    /// No `journal` array.
    #[error("the export has no `journal` array")]
    NoJournal,
    /// No `workflow` name.
    #[error("the export has no \"workflow\"")]
    NoWorkflow,
    /// An entry that does not read back.
    #[error("journal entry {index}: {problem}")]
    Entry {
        /// Its position in the array.
        index: usize,
        /// What is wrong with it.
        problem: EntryProblem,
    },
}

/// What is wrong with one exported journal entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryProblem {
    /// A field is missing.
    #[error("missing `{0}`")]
    Missing(&'static str),
    /// A field is not a string.
    #[error("`{0}` is not a string")]
    NotString(&'static str),
    /// A field is not a number.
    #[error("`{0}` is not a number")]
    NotNumber(&'static str),
    /// The entries are not in index order.
    #[error("index {found} out of order (expected {expected})")]
    OutOfOrder {
        /// The entry's index.
        found: u64,
        /// Its position.
        expected: usize,
    },
    /// A kind this build does not know.
    #[error("unknown kind {0:?}")]
    Kind(String),
    /// An outcome other than `ok` or `error`.
    #[error("unknown outcome {0:?} (expected \"ok\" or \"error\")")]
    Outcome(String),
    /// `attempts` does not fit in 32 bits.
    #[error("`attempts` is out of range")]
    Attempts,
}

/// Rebuilds a journal from an export (`GET /v1/runs/{thread_id}/export`): its `journal`
/// array of `{index, name, kind, outcome, result, error?, key?, value_version?, attempts, at}`, in index order.
pub fn journal_from_export(export: &Value) -> Result<Vec<Entry>, ExportError> {
    let entries = export
        .get("journal")
        .and_then(Value::as_array)
        .ok_or(ExportError::NoJournal)?;
    entries
        .iter()
        .enumerate()
        .map(|(index, e)| entry_from_export(index, e).map_err(|problem| ExportError::Entry { index, problem }))
        .collect()
}

fn entry_from_export(position: usize, e: &Value) -> Result<Entry, EntryProblem> {
    let field = |name: &'static str| e.get(name).ok_or(EntryProblem::Missing(name));
    let text = |name: &'static str| {
        field(name)?
            .as_str()
            .map(str::to_owned)
            .ok_or(EntryProblem::NotString(name))
    };
    let number = |name: &'static str| field(name)?.as_u64().ok_or(EntryProblem::NotNumber(name));
    let index = number("index")?;
    if index != position as u64 {
        return Err(EntryProblem::OutOfOrder {
            found: index,
            expected: position,
        });
    }
    let kind_name = text("kind")?;
    let kind: EntryKind =
        serde_json::from_value(Value::String(kind_name.clone())).map_err(|_| EntryProblem::Kind(kind_name))?;
    let outcome = match text("outcome")?.as_str() {
        "ok" => Outcome::Ok(e.get("result").cloned().unwrap_or(Value::Null)),
        "error" => Outcome::Err(text("error")?),
        other => return Err(EntryProblem::Outcome(other.to_owned())),
    };
    let key = match e.get("key") {
        None | Some(Value::Null) => None,
        Some(Value::String(k)) => Some(k.clone()),
        Some(_) => return Err(EntryProblem::NotString("key")),
    };
    let attempts = u32::try_from(number("attempts")?).map_err(|_| EntryProblem::Attempts)?;
    // An export from entry version 3 on carries a failure's class and retryability, which
    // compensation code may branch on: the replay must see them as the run did.
    let failure = match (&outcome, e.get("error_class"), e.get("retryable")) {
        (Outcome::Err(_), class, Some(Value::Bool(retryable))) => Some(savepoint_core::journal::Failure::new(
            class.and_then(Value::as_str).map(str::to_owned),
            *retryable,
        )),
        _ => None,
    };
    // A result recorded at a version of its type above 1 is upgraded by the migrations the
    // replayed code declares, as the run's own replay would.
    let tv = match e.get("value_version") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .ok_or(EntryProblem::NotNumber("value_version"))?,
        ),
    };
    Ok(Entry {
        v: ENTRY_VERSION,
        name: text("name")?,
        kind,
        outcome,
        at: number("at")?,
        attempts,
        key,
        failure,
        tv,
    })
}

#[doc(hidden)] // the test kit's replay of an export; not a stable API
pub async fn replay_as(
    store: &ScriptStore,
    registry: &Registry,
    thread: &ThreadId,
    version: u64,
    workflow: &str,
    input: Value,
    journal: Vec<Entry>,
) -> ReplayReport {
    let run = RunToReplay {
        thread,
        version,
        workflow,
        input,
        input_version: None,
        journal,
    };
    replay_counted(store, registry, run).await.0
}

#[doc(hidden)] // the test kit's replay of an export; not a stable API
/// A run's recorded facts, as a replay takes them.
pub struct RunToReplay<'a> {
    /// Its thread id.
    pub thread: &'a ThreadId,
    /// Its version (the lease's).
    pub version: u64,
    /// Its workflow.
    pub workflow: &'a str,
    /// Its input.
    pub input: Value,
    /// The version of its input's type (`None`: 1).
    pub input_version: Option<u32>,
    /// Its journal.
    pub journal: Vec<Entry>,
}

#[doc(hidden)] // the test kit's replay of an export; not a stable API
/// [`replay_as`], with how many migrations the replay applied to recorded values.
pub async fn replay_counted(store: &ScriptStore, registry: &Registry, run: RunToReplay<'_>) -> (ReplayReport, u32) {
    let RunToReplay {
        thread,
        version,
        workflow,
        input,
        input_version,
        journal,
    } = run;
    let Some(wf) = registry.get(workflow) else {
        return (ReplayReport::Unavailable(format!("unknown workflow {workflow}")), 0);
    };
    let ctx = replay_context(store, &*wf, (thread, version, workflow), journal, input_version);
    replay_body(&*wf, ctx, input).await
}

/// A replay-only context over `journal` (no lease, no writes, no budget).
fn replay_context(
    store: &ScriptStore,
    wf: &dyn DynWorkflow,
    (thread, version, workflow): (&ThreadId, u64, &str),
    journal: Vec<Entry>,
    input_version: Option<u32>,
) -> Ctx {
    let lease = Lease {
        thread: thread.clone(),
        keys: store.keys().run(thread),
        owner: "replay".into(),
        fence: 0,
        version,
    };
    let limits = SliceLimits {
        max_steps: u32::MAX,
        max_time: std::time::Duration::MAX,
        ..SliceLimits::default()
    };
    Ctx::new(CtxParts {
        store: std::sync::Arc::new(store.clone()),
        lease,
        journal,
        journal_bytes: None,
        signals: BTreeMap::new(),
        limits,
        failpoints: Failpoints::none(),
        lease_lost: CancellationToken::new(),
        clock: savepoint_core::lease::LeaseClock::new(
            tokio::time::Instant::now(),
            std::time::Duration::from_secs(365 * 24 * 3600),
            std::time::Duration::ZERO,
        ),
        crashes: 0,
        busy_tries: 0,
        tries: Default::default(),
        deadline: None,
        shutdown: CancellationToken::new(),
        retry: wf.retry_policy(),
        replay_only: true,
        workflow: workflow.to_owned(),
        stubs: None,
        tasks: None,
        routing: None,
        server_clock: savepoint_core::lease::ServerClock::fixed(savepoint_core::journal::now_ms()),
        traceparent: || None,
        versions: wf.versions(),
        input_version,
        needs: Vec::new(),
        value_features: std::sync::Arc::from([]),
        park: false,
    })
}

/// Ends a replay: what it found, and how many migrations it applied.
async fn replay_body(wf: &dyn DynWorkflow, mut ctx: Ctx, input: Value) -> (ReplayReport, u32) {
    let stopped = ctx.exit_signal();
    let result = {
        let body = wf.run(&ctx, input);
        tokio::select! {
            biased;
            _ = stopped.notified() => None,
            r = body => Some(r),
        }
    };
    let (at, recorded) = (ctx.next_index() as usize, ctx.journal().len());
    let migrated = ctx.migrations_applied();
    let report = match result {
        Some(r) => ended(&mut ctx, r, at, recorded),
        None => match ctx.take_exit() {
            Some(SliceExit::WouldRunLive(name)) => ReplayReport::WouldRunLive(name),
            Some(SliceExit::Blocked(reason)) => ReplayReport::Diverged(reason),
            other => ReplayReport::Unavailable(format!("{other:?}")),
        },
    };
    let report = match report {
        ReplayReport::Diverged(reason) => {
            let shape = shape(&reason, ctx.journal());
            ReplayReport::Diverged(format!("{reason}{shape}"))
        }
        other => other,
    };
    (report, migrated)
}

/// Where the new code leaves the recorded path, what the journal says about the change (the
/// advice differs): " — new call: …" (the code's call is in no entry from there: inserted
/// before the recorded call, or in its place), " — recorded later: …" (the code's call is a
/// later entry: the calls before it were removed, or moved after it; the recorded calls
/// between are listed), " — returned early: …" (the code returns where calls were recorded).
fn shape(reason: &str, journal: &[Entry]) -> String {
    let Some((k, rest)) = reason
        .strip_prefix("non-determinism at entry ")
        .and_then(|r| r.split_once(": "))
        .and_then(|(k, rest)| Some((k.parse::<usize>().ok()?, rest)))
    else {
        return String::new();
    };
    let recorded = |to: usize| {
        journal[k.min(journal.len())..to.min(journal.len())]
            .iter()
            .map(|e| format!("{} {:?}", e.kind.as_str(), e.name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if rest.starts_with("the workflow returned") {
        return format!(
            " — returned early: these runs recorded {} from entry {k}",
            recorded(journal.len())
        );
    }
    let Some(name) = rest
        .strip_prefix("the workflow called ")
        .and_then(|r| r.split_once(' '))
        .and_then(|(_, r)| r.split_once(" but "))
        .and_then(|(n, _)| serde_json::from_str::<String>(n).ok())
    else {
        return String::new();
    };
    match journal.iter().enumerate().skip(k + 1).find(|(_, e)| e.name == name) {
        Some((i, _)) => format!(
            " — recorded later: these runs recorded {name:?} at entry {i}, after {}",
            recorded(i)
        ),
        None => format!(" — new call: these runs never made {name:?} from entry {k} on"),
    }
}

/// What a body that returned means, decided as the worker decides the end of a slice
/// (`slice_end`), so the gate says what the worker would do: a value that does not decode
/// blocks the run at its call, even when the code's `?` then returned with entries left.
fn ended(ctx: &mut Ctx, r: Result<Value, RunError>, at: usize, recorded: usize) -> ReplayReport {
    let journal = ctx.journal();
    let body = match &r {
        Ok(v) => Body::Returned(v),
        Err(RunError::Workflow(WorkflowError::Decode { name, message })) => {
            // The entry of the call whose value failed: the last of its name before `at`.
            let entry = journal[..at.min(journal.len())].iter().rposition(|e| e.name == *name);
            let at = entry.map_or_else(String::new, |i| format!(" (entry {i})"));
            // The recorded shape's fields: where one was renamed, its old name is among them.
            let fields = entry
                .and_then(|i| match &journal[i].outcome {
                    Outcome::Ok(Value::Object(o)) => Some(o.keys().map(|k| format!("`{k}`")).collect::<Vec<_>>()),
                    _ => None,
                })
                .map_or_else(String::new, |k| {
                    format!("; the recorded value has the fields {}", k.join(", "))
                });
            return ReplayReport::Undecodable(format!("value of {name:?}{at} does not decode: {message}{fields}"));
        }
        Err(e) => Body::Errored(e.to_string()),
    };
    match slice_end(body, at as u32, recorded as u32, journal.get(at)) {
        SliceEnd::Complete(v) => ReplayReport::Finished(Ok(v)),
        SliceEnd::Fail(e) => ReplayReport::Finished(Err(e)),
        SliceEnd::Block(reason, _) => ReplayReport::Diverged(reason),
        // (Only a stopped body follows the context's exit.)
        SliceEnd::FollowExit => ReplayReport::Unavailable("the body returned and was stopped".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn journal_from_export_reads_every_field() {
        let export = json!({"journal": [
            {"index": 0, "name": "read_pdf", "kind": "step", "outcome": "ok", "result": "text", "attempts": 1, "at": 5},
            {"index": 1, "name": "ledger.post", "kind": "effect", "outcome": "ok", "result": {"posted": "k"},
             "key": "ledger:1", "attempts": 2, "at": 6},
            {"index": 2, "name": "gate", "kind": "interrupt", "outcome": "error", "result": null, "error": "boom",
             "attempts": 3, "at": 7},
        ]});
        let j = journal_from_export(&export).unwrap();
        assert_eq!(j.len(), 3);
        assert_eq!(
            (j[0].name.as_str(), j[0].kind, &j[0].outcome, j[0].at),
            ("read_pdf", EntryKind::Step, &Outcome::Ok(json!("text")), 5)
        );
        assert_eq!(
            (j[1].kind, j[1].key.as_deref(), j[1].attempts),
            (EntryKind::Effect, Some("ledger:1"), 2)
        );
        assert_eq!(
            (j[2].kind, &j[2].outcome),
            (EntryKind::Interrupt, &Outcome::Err("boom".into()))
        );
        for kind in ["sleep", "signal", "value", "patch"] {
            let one = json!({"journal": [{"index": 0, "name": "x", "kind": kind, "outcome": "ok", "result": 1,
                                          "attempts": 1, "at": 0}]});
            assert_eq!(journal_from_export(&one).unwrap()[0].kind.as_str(), kind);
        }
    }

    #[test]
    fn journal_from_export_rejects_malformed_entries() {
        let bad = |e: Value| match journal_from_export(&json!({ "journal": [e] })).unwrap_err() {
            ExportError::Entry { index: 0, problem } => problem,
            other => panic!("expected a problem with entry 0, got {other:?}"),
        };
        let ok = json!({"index": 0, "name": "x", "kind": "step", "outcome": "ok", "result": 1, "attempts": 1, "at": 0});
        let with = |k: &str, v: Value| {
            let mut e = ok.clone();
            e[k] = v;
            e
        };
        assert_eq!(journal_from_export(&json!({})).unwrap_err(), ExportError::NoJournal);
        assert_eq!(
            bad(with("kind", json!("teleport"))),
            EntryProblem::Kind("teleport".into())
        );
        assert_eq!(
            bad(with("outcome", json!("maybe"))),
            EntryProblem::Outcome("maybe".into())
        );
        assert_eq!(bad(with("outcome", json!("error"))), EntryProblem::Missing("error"));
        assert_eq!(
            bad(with("index", json!(3))),
            EntryProblem::OutOfOrder { found: 3, expected: 0 }
        );
        assert_eq!(bad(with("attempts", json!("1"))), EntryProblem::NotNumber("attempts"));
        // The message still names the entry and the problem.
        let e = journal_from_export(&json!({ "journal": [with("kind", json!("teleport"))] })).unwrap_err();
        assert_eq!(e.to_string(), "journal entry 0: unknown kind \"teleport\"");
    }
}
