//! Replay-only execution: runs a workflow against its recorded journal without executing
//! or writing anything. Proves determinism and that a replay re-fires nothing.

use serde_json::Value;
use std::collections::BTreeMap;
use tokio_util::sync::CancellationToken;

use savepoint::failpoints::Failpoints;
use savepoint::ids::ThreadId;
use savepoint::journal::{Entry, EntryKind, Outcome, ENTRY_VERSION};
use savepoint::store::{Lease, ScriptStore, StoreError};
use savepoint::workflow::{Ctx, CtxParts, Registry, SliceExit, SliceLimits};

/// What a replay found.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayReport {
    /// The workflow returned using recorded results only (its output, or error text).
    Finished(Result<Value, String>),
    /// The journal ends before the workflow does: the next call would run live.
    WouldRunLive(String),
    /// The code and the journal disagree.
    Diverged(String),
    /// The run cannot be replayed here (unknown workflow, unreadable journal…).
    Unavailable(String),
}

/// Replays the run `thread` against its journal with the registered code.
pub async fn replay(store: &ScriptStore, registry: &Registry, thread: &ThreadId) -> Result<ReplayReport, StoreError> {
    let Some((header, journal)) = store.get(thread).await? else {
        return Err(StoreError::Missing(thread.to_string()));
    };
    Ok(replay_as(
        store,
        registry,
        thread,
        header.version,
        &header.workflow,
        header.input,
        journal,
    )
    .await)
}

/// Replays `journal` (e.g. rebuilt from an export with [`journal_from_export`]) against the
/// registered code of `workflow` with this `input`, in replay-only mode: nothing is executed
/// or written. The run need not exist in the store; workflow code that asks for its thread
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

/// Rebuilds a journal from an export (`GET /v1/runs/{thread_id}/export`): its `journal`
/// array of `{index, name, kind, outcome, result, error?, key?, attempts, at}`, in index order.
pub fn journal_from_export(export: &Value) -> Result<Vec<Entry>, String> {
    let entries = export
        .get("journal")
        .and_then(Value::as_array)
        .ok_or("the export has no `journal` array")?;
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| entry_from_export(i, e).map_err(|msg| format!("journal entry {i}: {msg}")))
        .collect()
}

fn entry_from_export(position: usize, e: &Value) -> Result<Entry, String> {
    let field = |name: &str| e.get(name).ok_or_else(|| format!("missing `{name}`"));
    let text = |name: &str| {
        field(name)?
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("`{name}` is not a string"))
    };
    let number = |name: &str| field(name)?.as_u64().ok_or_else(|| format!("`{name}` is not a number"));
    let index = number("index")?;
    if index != position as u64 {
        return Err(format!("index {index} out of order (expected {position})"));
    }
    let kind_name = text("kind")?;
    let kind: EntryKind =
        serde_json::from_value(Value::String(kind_name.clone())).map_err(|_| format!("unknown kind {kind_name:?}"))?;
    let outcome = match text("outcome")?.as_str() {
        "ok" => Outcome::Ok(e.get("result").cloned().unwrap_or(Value::Null)),
        "error" => Outcome::Err(text("error")?),
        other => return Err(format!("unknown outcome {other:?} (expected \"ok\" or \"error\")")),
    };
    let key = match e.get("key") {
        None | Some(Value::Null) => None,
        Some(Value::String(k)) => Some(k.clone()),
        Some(_) => return Err("`key` is not a string".into()),
    };
    let attempts = u32::try_from(number("attempts")?).map_err(|_| "`attempts` is out of range".to_owned())?;
    Ok(Entry {
        v: ENTRY_VERSION,
        name: text("name")?,
        kind,
        outcome,
        at: number("at")?,
        attempts,
        key,
    })
}

pub(crate) async fn replay_as(
    store: &ScriptStore,
    registry: &Registry,
    thread: &ThreadId,
    version: u64,
    workflow: &str,
    input: Value,
    journal: Vec<Entry>,
) -> ReplayReport {
    let Some(wf) = registry.get(workflow) else {
        return ReplayReport::Unavailable(format!("unknown workflow {workflow}"));
    };
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
    let mut ctx = Ctx::new(CtxParts {
        store: store.clone(),
        lease,
        journal,
        signals: BTreeMap::new(),
        limits,
        failpoints: Failpoints::none(),
        lease_lost: CancellationToken::new(),
        clock: savepoint::lease::LeaseClock::new(
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
        server_clock: savepoint::lease::ServerClock::fixed(savepoint::journal::now_ms()),
    });
    let stopped = ctx.exit_signal();
    let result = {
        let body = wf.run(&mut ctx, input);
        tokio::select! {
            biased;
            _ = stopped.notified() => None,
            r = body => Some(r),
        }
    };
    let (at, recorded) = (ctx.next_index() as usize, ctx.journal().len());
    match result {
        Some(_) if at < recorded => {
            let e = &ctx.journal()[at];
            ReplayReport::Diverged(format!(
                "non-determinism at entry {at}: the workflow returned but the journal recorded {} {:?} there",
                e.kind.as_str(),
                e.name
            ))
        }
        Some(r) => ReplayReport::Finished(r.map_err(|e| e.to_string())),
        None => match ctx.take_exit() {
            Some(SliceExit::WouldRunLive(name)) => ReplayReport::WouldRunLive(name),
            Some(SliceExit::Blocked(reason)) => ReplayReport::Diverged(reason),
            other => ReplayReport::Unavailable(format!("{other:?}")),
        },
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
        let bad = |e: Value| journal_from_export(&json!({ "journal": [e] })).unwrap_err();
        let ok = json!({"index": 0, "name": "x", "kind": "step", "outcome": "ok", "result": 1, "attempts": 1, "at": 0});
        let with = |k: &str, v: Value| {
            let mut e = ok.clone();
            e[k] = v;
            e
        };
        assert!(journal_from_export(&json!({})).unwrap_err().contains("no `journal`"));
        assert!(bad(with("kind", json!("teleport"))).contains("unknown kind"));
        assert!(bad(with("outcome", json!("maybe"))).contains("unknown outcome"));
        assert!(bad(with("outcome", json!("error"))).contains("missing `error`"));
        assert!(bad(with("index", json!(3))).contains("out of order"));
        assert!(bad(with("attempts", json!("1"))).contains("`attempts`"));
    }
}
