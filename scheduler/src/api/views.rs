//! JSON shapes of the API, built from store types (plain functions, no I/O).

use savepoint::journal::{Entry, Outcome};
use savepoint::store::RunEvent;
use savepoint::store::{Holder, RunHeader, RunStatus};
use serde_json::{json, Map, Value};

/// Names a run waits for: `[wait name]` while waiting, `[]` otherwise.
pub(crate) fn next_names(h: &RunHeader) -> Vec<String> {
    match (&h.status, &h.wait) {
        (RunStatus::Waiting, Some(w)) => vec![w.name.clone()],
        _ => Vec::new(),
    }
}

/// The pending interrupt (`[{name, payload}]`) while waiting on one.
fn interrupts(h: &RunHeader) -> Vec<Value> {
    match (&h.status, &h.wait) {
        (RunStatus::Waiting, Some(w)) if w.kind == "interrupt" => {
            vec![json!({ "name": w.name, "payload": w.payload })]
        }
        _ => Vec::new(),
    }
}

fn put_some<T: Into<Value>>(m: &mut Map<String, Value>, key: &str, v: Option<T>) {
    if let Some(v) = v {
        m.insert(key.to_owned(), v.into());
    }
}

/// `GET /v1/runs/{thread_id}`.
pub(crate) fn run_view(h: &RunHeader) -> Value {
    let mut m = Map::new();
    m.insert("thread_id".into(), h.thread.as_str().into());
    m.insert("workflow".into(), h.workflow.clone().into());
    m.insert("workflow_version".into(), h.workflow_version.into());
    m.insert("status".into(), h.status.as_str().into());
    m.insert("step".into(), h.steps.into());
    m.insert("version".into(), h.version.into());
    m.insert("attempt".into(), h.attempt.into());
    put_some(&mut m, "output", h.output.clone());
    put_some(&mut m, "error", h.error.clone());
    if h.status == RunStatus::Blocked {
        put_some(&mut m, "blocked_reason", h.reason.clone());
        put_some(&mut m, "blocked_effect", h.blocked_effect.clone());
        if let Some(holder) = h.blocked_effect_owner.as_deref().and_then(Holder::parse) {
            m.insert(
                "blocked_effect_holder".into(),
                json!({ "thread_id": holder.thread, "index": holder.index, "fence": holder.fence }),
            );
        }
    } else if h.status == RunStatus::Cancelled {
        put_some(&mut m, "cancel_reason", h.reason.clone());
    }
    m.insert("next".into(), next_names(h).into());
    m.insert("interrupts".into(), interrupts(h).into());
    if let Some(w) = &h.wait {
        if h.status == RunStatus::Waiting {
            m.insert(
                "wait".into(),
                json!({ "kind": w.kind, "name": w.name, "payload": w.payload }),
            );
        }
    }
    if !h.status.is_final() && h.status != RunStatus::Blocked {
        // Why a runnable run is not moving, when the engine knows.
        put_some(&mut m, "waiting_for", h.waiting_for.clone());
        if let Some((key, tries)) = &h.wait_effect {
            m.insert("waiting_on_effect".into(), json!({ "key": key, "tries": tries }));
        }
    }
    if h.crashes > 0 {
        m.insert("crashes".into(), h.crashes.into());
        put_some(&mut m, "crashed_by", h.crashed_by.clone());
    }
    put_some(&mut m, "due_at", h.due);
    m.insert("created_at".into(), h.created_at.into());
    m.insert("updated_at".into(), h.updated_at.into());
    put_some(&mut m, "finished_at", h.finished_at);
    Value::Object(m)
}

/// One journal entry as shown by history and export.
pub(crate) fn entry_view(index: usize, e: &Entry) -> Value {
    let (outcome, result, error) = match &e.outcome {
        Outcome::Ok(v) => ("ok", v.clone(), None),
        Outcome::Err(msg) => ("error", Value::Null, Some(msg.clone())),
    };
    let mut m = Map::new();
    m.insert("index".into(), index.into());
    m.insert("name".into(), e.name.clone().into());
    m.insert("kind".into(), e.kind.as_str().into());
    m.insert("outcome".into(), outcome.into());
    m.insert("result".into(), result);
    put_some(&mut m, "error", error);
    put_some(&mut m, "key", e.key.clone());
    m.insert("attempts".into(), e.attempts.into());
    m.insert("at".into(), e.at.into());
    Value::Object(m)
}

fn entries(journal: &[Entry]) -> Vec<Value> {
    journal.iter().enumerate().map(|(i, e)| entry_view(i, e)).collect()
}

/// `GET /v1/runs/{thread_id}/history`.
pub(crate) fn history_view(h: &RunHeader, journal: &[Entry], events: &[RunEvent]) -> Value {
    let events: Vec<Value> = events
        .iter()
        .map(|e| json!({ "id": e.id, "type": e.typ, "detail": e.detail, "at": e.at }))
        .collect();
    json!({
        "thread_id": h.thread.as_str(),
        "status": h.status.as_str(),
        "entries": entries(journal),
        "events": events,
    })
}

/// `GET /v1/runs/{thread_id}/export`: a serialisable checkpoint of the run.
pub(crate) fn export_view(h: &RunHeader, journal: &[Entry]) -> Value {
    let completed: Vec<&str> = journal.iter().map(|e| e.name.as_str()).collect();
    json!({
        "thread_id": h.thread.as_str(),
        "workflow": h.workflow,
        "workflow_version": h.workflow_version,
        "schema": h.schema,
        "status": h.status.as_str(),
        "step": h.steps,
        "version": h.version,
        "completed": completed,
        "pending": next_names(h),
        "input": h.input,
        "output": h.output,
        "journal": entries(journal),
    })
}

/// One row of `GET /v1/runs`.
pub(crate) fn list_item(h: &RunHeader) -> Value {
    json!({
        "thread_id": h.thread.as_str(),
        "workflow": h.workflow,
        "status": h.status.as_str(),
        "step": h.steps,
        "created_at": h.created_at,
        "updated_at": h.updated_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use savepoint::ids::ThreadId;
    use savepoint::journal::EntryKind;
    use savepoint::store::Wait;

    fn header(status: RunStatus) -> RunHeader {
        RunHeader {
            thread: ThreadId::new("t-1").unwrap(),
            workflow: "invoice".into(),
            workflow_version: 2,
            schema: 1,
            status,
            steps: 2,
            version: 7,
            owner: None,
            fence: 1,
            lease_until: 0,
            attempt: 1,
            due: None,
            created_at: 10,
            updated_at: 20,
            finished_at: None,
            input: json!({"id": 1}),
            output: None,
            error: None,
            reason: Some("effect ledger:1 outcome unknown".into()),
            blocked_effect: Some("ledger:1".into()),
            blocked_effect_owner: None,
            waiting_for: None,
            wait_effect: None,
            crashes: 0,
            crashed_by: None,
            wait: Some(Wait {
                kind: "interrupt".into(),
                name: "approve".into(),
                payload: json!({"q": "ok?"}),
            }),
            trace: None,
        }
    }

    #[test]
    fn waiting_run_shows_next_and_interrupts() {
        let v = run_view(&header(RunStatus::Waiting));
        assert_eq!(v["next"], json!(["approve"]));
        assert_eq!(v["interrupts"], json!([{"name": "approve", "payload": {"q": "ok?"}}]));
        assert_eq!(v["wait"]["kind"], "interrupt");
        assert!(v.get("blocked_reason").is_none());
        assert!(v.get("output").is_none());
    }

    #[test]
    fn blocked_run_shows_reason_not_wait() {
        let v = run_view(&header(RunStatus::Blocked));
        assert_eq!(v["blocked_effect"], "ledger:1");
        assert_eq!(v["next"], json!([]));
        assert_eq!(v["interrupts"], json!([]));
        assert!(v.get("wait").is_none());
    }

    #[test]
    fn entries_and_export() {
        let mut fx = Entry::new("ledger.post", EntryKind::Effect, Outcome::Ok(json!(5)), 1);
        fx.key = Some("ledger:1".into());
        let failed = Entry::new("read", EntryKind::Step, Outcome::Err("boom".into()), 3);
        let e = entry_view(1, &failed);
        assert_eq!(
            (e["outcome"].as_str(), e["error"].as_str(), &e["result"]),
            (Some("error"), Some("boom"), &Value::Null)
        );
        let x = export_view(&header(RunStatus::Waiting), &[fx, failed]);
        assert_eq!(x["completed"], json!(["ledger.post", "read"]));
        assert_eq!(x["pending"], json!(["approve"]));
        assert_eq!(x["journal"][0]["key"], "ledger:1");
        assert_eq!(x["schema"], 1);
    }
}
