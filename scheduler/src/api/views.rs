//! JSON shapes of the API, built from store types (plain functions, no I/O).

use savepoint::journal::{Entry, Outcome};
use savepoint::store::RunEvent;
use savepoint::store::{Holder, RunHeader, RunStatus};
use serde_json::{json, Map, Value};

/// A run answers a wait while waiting, and while blocked after an answer that did not decode
/// (it keeps the wait: the next answer resumes it).
fn answerable(h: &RunHeader) -> Option<&savepoint::store::Wait> {
    match h.status {
        RunStatus::Waiting | RunStatus::Blocked => h.wait.as_ref(),
        _ => None,
    }
}

/// Names a run waits for: `[wait name]` while it takes an answer, `[]` otherwise.
pub(crate) fn next_names(h: &RunHeader) -> Vec<String> {
    answerable(h).map(|w| vec![w.name.clone()]).unwrap_or_default()
}

/// The pending interrupt (`[{name, payload}]`) while the run takes an answer to one.
fn interrupts(h: &RunHeader) -> Vec<Value> {
    match answerable(h) {
        Some(w) if w.kind == "interrupt" => {
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

/// What the run view needs beyond the header to say where a run is.
#[derive(Debug, Clone, Default)]
pub(crate) struct Facts {
    /// Store server time (ms), the clock of due times and leases.
    pub now: u64,
    /// The last journal entry, when the run sleeps on a timer it journaled.
    pub last: Option<Entry>,
}

/// How long past its due time a runnable run may wait for a worker before the view calls it
/// overdue (a task in the queue and a claim take a moment).
const OVERDUE_AFTER_MS: u64 = 2_000;

/// Where the run is, exactly: the journal entry it is at (the sleep it sleeps in, the wait it
/// waits at, the call it runs or will run next), with the wake time and how overdue it is,
/// and a sentence saying so.
pub(crate) fn position(h: &RunHeader, f: &Facts) -> Value {
    let next = h.steps;
    let overdue = |due: u64| f.now.checked_sub(due).filter(|late| *late > OVERDUE_AFTER_MS);
    let mut m = Map::new();
    let text = match h.status {
        RunStatus::Sleeping if h.wait_effect.is_some() => {
            let (key, tries) = h.wait_effect.clone().unwrap_or_default();
            m.insert("entry".into(), next.into());
            m.insert("kind".into(), "effect".into());
            m.insert("key".into(), key.clone().into());
            put_some(&mut m, "wake_at", h.due);
            format!("backing off at entry {next}: effect key {key} is held by another run (try {tries})")
        }
        RunStatus::Sleeping => match f
            .last
            .as_ref()
            .filter(|e| e.kind == savepoint::journal::EntryKind::Sleep)
        {
            Some(e) => {
                let at = next.saturating_sub(1);
                m.insert("entry".into(), at.into());
                m.insert("kind".into(), "sleep".into());
                m.insert("name".into(), e.name.clone().into());
                put_some(&mut m, "wake_at", h.due);
                format!("sleeping at entry {at} ({:?})", e.name)
            }
            None => {
                m.insert("entry".into(), next.into());
                put_some(&mut m, "wake_at", h.due);
                format!(
                    "backing off before entry {next}{}",
                    h.waiting_for.as_deref().map(|w| format!(": {w}")).unwrap_or_default()
                )
            }
        },
        RunStatus::Waiting => {
            m.insert("entry".into(), next.into());
            let (kind, name) = h
                .wait
                .as_ref()
                .map(|w| (w.kind.clone(), w.name.clone()))
                .unwrap_or_default();
            m.insert("kind".into(), kind.clone().into());
            m.insert("name".into(), name.clone().into());
            m.insert("since".into(), h.updated_at.into());
            // A wait with a timeout waits until its deadline (its due time).
            put_some(&mut m, "wake_at", h.due);
            match h.due {
                Some(_) => format!("waiting at entry {next} for {kind} {name:?}, until its deadline"),
                None => format!("waiting at entry {next} for {kind} {name:?}"),
            }
        }
        RunStatus::Pending => {
            m.insert("entry".into(), next.into());
            put_some(&mut m, "due_at", h.due);
            match &h.waiting_for {
                Some(w) => format!("queued at entry {next}: {w}"),
                None => format!("queued at entry {next} for a worker"),
            }
        }
        RunStatus::Running => {
            m.insert("entry".into(), next.into());
            put_some(&mut m, "worker", h.owner.clone());
            m.insert("lease_until".into(), h.lease_until.into());
            let who = h.owner.clone().unwrap_or_default();
            match f.now.checked_sub(h.lease_until).filter(|late| *late > 0) {
                Some(late) => format!(
                    "at entry {next}, but the lease of {who} expired {late} ms ago: the worker is gone and the run \
                     is handed to another"
                ),
                None => format!("running entry {next} on {who}"),
            }
        }
        RunStatus::Blocked => {
            m.insert("entry".into(), next.into());
            format!(
                "blocked at entry {next}: {}",
                h.reason.as_deref().unwrap_or("(no reason recorded)")
            )
        }
        status => {
            m.insert("entry".into(), next.into());
            format!("{status} after {next} entries")
        }
    };
    let late = match h.status {
        RunStatus::Sleeping | RunStatus::Pending | RunStatus::Waiting => h.due.and_then(overdue),
        _ => None,
    };
    let text = match late {
        Some(ms) => {
            m.insert("overdue_ms".into(), ms.into());
            format!(
                "{text}; overdue by {ms} ms: no worker has picked it up (is a worker serving {} running?)",
                h.workflow
            )
        }
        None => text,
    };
    m.insert("text".into(), text.into());
    Value::Object(m)
}

/// `GET /v1/runs/{thread_id}`.
pub(crate) fn run_view(h: &RunHeader, f: &Facts) -> Value {
    let mut m = Map::new();
    m.insert("thread_id".into(), h.thread.as_str().into());
    m.insert("workflow".into(), h.workflow.clone().into());
    m.insert("workflow_version".into(), h.workflow_version.into());
    m.insert("status".into(), h.status.as_str().into());
    // (`step`: journal entries recorded; `at` says which entry the run is at.)
    m.insert("step".into(), h.steps.into());
    m.insert("at".into(), position(h, f));
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
    if let Some(w) = answerable(h) {
        m.insert(
            "wait".into(),
            json!({ "kind": w.kind, "name": w.name, "payload": w.payload }),
        );
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
    // Only a run that ended has finished (a blocked run is resumed after a fix).
    if h.status.is_final() {
        put_some(&mut m, "finished_at", h.finished_at);
    }
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

    fn facts() -> Facts {
        Facts {
            now: 100_000,
            last: None,
        }
    }

    #[test]
    fn waiting_run_shows_next_and_interrupts() {
        let v = run_view(&header(RunStatus::Waiting), &facts());
        assert_eq!(v["at"]["entry"], 2);
        assert_eq!(v["at"]["name"], "approve");
        assert_eq!(v["at"]["text"], "waiting at entry 2 for interrupt \"approve\"");
        assert_eq!(v["next"], json!(["approve"]));
        assert_eq!(v["interrupts"], json!([{"name": "approve", "payload": {"q": "ok?"}}]));
        assert_eq!(v["wait"]["kind"], "interrupt");
        assert!(v.get("blocked_reason").is_none());
        assert!(v.get("output").is_none());
    }

    #[test]
    fn blocked_run_shows_reason_not_wait() {
        let mut h = header(RunStatus::Blocked);
        h.wait = None;
        h.finished_at = Some(30);
        let v = run_view(&h, &facts());
        assert_eq!(v["blocked_effect"], "ledger:1");
        assert_eq!(v["next"], json!([]));
        assert_eq!(v["interrupts"], json!([]));
        assert!(v.get("wait").is_none());
        // A blocked run has not finished (an older record may still carry the field).
        assert!(v.get("finished_at").is_none(), "{v}");
        assert_eq!(v["at"]["text"], "blocked at entry 2: effect ledger:1 outcome unknown");
        // Blocked after an answer that did not decode: it still takes one.
        let mut h = header(RunStatus::Blocked);
        h.reason = Some("the value sent to interrupt \"approve\" does not decode".into());
        let v = run_view(&h, &facts());
        assert_eq!(v["next"], json!(["approve"]));
        assert_eq!(v["wait"]["name"], "approve");
    }

    #[test]
    fn a_sleeping_run_names_its_sleep_entry_and_how_overdue_it_is() {
        let mut h = header(RunStatus::Sleeping);
        h.wait = None;
        h.due = Some(40_000);
        let nap = Entry::new("nap", EntryKind::Sleep, Outcome::Ok(json!({"wake_at": 40_000})), 1);
        let f = Facts {
            now: 100_000,
            last: Some(nap),
        };
        let at = position(&h, &f);
        assert_eq!(at["entry"], 1, "the sleep is the last recorded entry: {at}");
        assert_eq!(at["name"], "nap");
        assert_eq!(at["wake_at"], 40_000);
        assert_eq!(at["overdue_ms"], 60_000);
        assert!(
            at["text"]
                .as_str()
                .unwrap()
                .starts_with("sleeping at entry 1 (\"nap\"); overdue by 60000 ms"),
            "{at}"
        );
        // Not yet due: not overdue.
        let f = Facts { now: 39_000, ..f };
        assert!(position(&h, &f).get("overdue_ms").is_none());
        // A run whose worker died: the lease ran out.
        let mut h = header(RunStatus::Running);
        h.owner = Some("w-1".into());
        h.lease_until = 90_000;
        let at = position(&h, &facts());
        assert!(at["text"].as_str().unwrap().contains("expired 10000 ms ago"), "{at}");
        let v = run_view(&header(RunStatus::Completed), &facts());
        assert_eq!(v["at"]["text"], "completed after 2 entries");
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
