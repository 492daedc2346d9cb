//! The API's views of store types (plain functions, no I/O): each builds one of the typed
//! bodies of [`super::model`].

use savepoint_core::journal::{Entry, Outcome};
use savepoint_runtime::security::shown;
use savepoint_store::RunEvent;
use savepoint_store::{Holder, RunHeader, RunStatus};

use super::model::{
    EffectHolder, EntryOutcome, EntryView, EventView, ExportView, HistoryView, InterruptView, ListItem, Position,
    RunView, WaitView, WaitingOnEffect,
};

/// A run answers a wait while waiting, and while blocked after an answer that did not decode
/// (it keeps the wait: the next answer resumes it).
fn answerable(h: &RunHeader) -> Option<&savepoint_store::Wait> {
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
fn interrupts(h: &RunHeader) -> Vec<InterruptView> {
    match answerable(h) {
        Some(w) if w.kind == "interrupt" => vec![InterruptView {
            name: w.name.clone(),
            payload: shown(&w.payload),
        }],
        _ => Vec::new(),
    }
}

/// What the run view needs beyond the header to say where a run is.
#[derive(Debug, Clone, Default)]
pub(crate) struct Facts {
    /// Store server time (ms), the clock of due times and leases.
    pub now: u64,
    /// The last journal entry, when the run sleeps on a timer it journaled.
    pub last: Option<Entry>,
    /// The workflow, version and queue pauses in force.
    pub pauses: Vec<savepoint_store::Pause>,
}

/// How long past its due time a runnable run may wait for a worker before the view calls it
/// overdue (a task in the queue and a claim take a moment).
pub(crate) const OVERDUE_AFTER_MS: u64 = 2_000;

/// Where the run is, exactly: the journal entry it is at (the sleep it sleeps in, the wait it
/// waits at, the call it runs or will run next), with the wake time and how overdue it is,
/// and a sentence saying so.
pub(crate) fn position(h: &RunHeader, f: &Facts) -> Position {
    let next = h.steps;
    let mut p = Position {
        entry: next,
        ..Position::default()
    };
    let text = match h.status {
        RunStatus::Sleeping if h.wait_effect.is_some() => backing_off_on_effect(h, &mut p),
        RunStatus::Sleeping => sleeping(h, f, &mut p),
        RunStatus::Waiting => waiting(h, &mut p),
        RunStatus::Pending => {
            p.due_at = h.due;
            match &h.waiting_for {
                Some(w) => format!("queued at entry {next}: {w}"),
                None => format!("queued at entry {next} for a worker"),
            }
        }
        RunStatus::Running => running(h, f, &mut p),
        RunStatus::Blocked => format!(
            "blocked at entry {next}: {}",
            h.reason.as_deref().unwrap_or("(no reason recorded)")
        ),
        RunStatus::Paused => {
            p.kind = Some("paused".into());
            super::pause::stopped_text(h)
        }
        status => format!("{status} after {next} entries"),
    };
    with_overdue(h, f, p, text)
}

/// A run sleeping because an effect key it needs is held by another run: the key, and the
/// sentence.
fn backing_off_on_effect(h: &RunHeader, p: &mut Position) -> String {
    let next = h.steps;
    let (key, tries) = h.wait_effect.clone().unwrap_or_default();
    p.kind = Some("effect".into());
    p.key = Some(key.clone());
    p.wake_at = h.due;
    format!("backing off at entry {next}: effect key {key} is held by another run (try {tries})")
}

/// A sleeping run: in the sleep it journaled last, or backing off before its next entry.
fn sleeping(h: &RunHeader, f: &Facts, p: &mut Position) -> String {
    let next = h.steps;
    match f
        .last
        .as_ref()
        .filter(|e| e.kind == savepoint_core::journal::EntryKind::Sleep)
    {
        Some(e) => {
            let at = next.saturating_sub(1);
            p.entry = at;
            p.kind = Some("sleep".into());
            p.name = Some(e.name.clone());
            p.wake_at = h.due;
            format!("sleeping at entry {at} ({:?})", e.name)
        }
        None => {
            p.wake_at = h.due;
            format!(
                "backing off before entry {next}{}",
                h.waiting_for.as_deref().map(|w| format!(": {w}")).unwrap_or_default()
            )
        }
    }
}

/// A waiting run: what it waits for, since when and until when.
fn waiting(h: &RunHeader, p: &mut Position) -> String {
    let next = h.steps;
    let (kind, name) = h
        .wait
        .as_ref()
        .map(|w| (w.kind.clone(), w.name.clone()))
        .unwrap_or_default();
    p.kind = Some(kind.clone());
    p.name = Some(name.clone());
    p.since = Some(h.updated_at);
    // A wait with a timeout waits until its deadline (its due time).
    p.wake_at = h.due;
    let child = h.wait.as_ref().and_then(|w| w.payload["thread_id"].as_str());
    match h.due {
        Some(_) if kind == "child" => format!(
            "waiting at entry {next} for child run {} to end (woken when it does; looks again at its due time)",
            child.unwrap_or("?")
        ),
        Some(_) => format!("waiting at entry {next} for {kind} {name:?}, until its deadline"),
        None => format!("waiting at entry {next} for {kind} {name:?}"),
    }
}

/// A running run: its worker and lease, and whether the lease has expired.
fn running(h: &RunHeader, f: &Facts, p: &mut Position) -> String {
    let next = h.steps;
    p.worker = h.owner.clone();
    p.lease_until = Some(h.lease_until);
    let who = h.owner.clone().unwrap_or_default();
    match f.now.checked_sub(h.lease_until).filter(|late| *late > 0) {
        Some(late) => format!(
            "at entry {next}, but the lease of {who} expired {late} ms ago: the worker is gone and the run \
             is handed to another"
        ),
        None => format!("running entry {next} on {who}"),
    }
}

/// The position with its sentence, and how overdue a run waiting for a worker is (said in
/// the sentence too).
fn with_overdue(h: &RunHeader, f: &Facts, mut p: Position, text: String) -> Position {
    let overdue = |due: u64| f.now.checked_sub(due).filter(|late| *late > OVERDUE_AFTER_MS);
    let late = match h.status {
        RunStatus::Sleeping | RunStatus::Pending | RunStatus::Waiting => h.due.and_then(overdue),
        _ => None,
    };
    p.overdue_ms = late;
    p.text = match late {
        Some(ms) => format!(
            "{text}; overdue by {ms} ms: no worker has picked it up (is a worker serving {} running?)",
            h.workflow
        ),
        None => text,
    };
    p
}

/// `GET /v1/runs/{thread_id}`.
pub(crate) fn run_view(h: &RunHeader, f: &Facts) -> RunView {
    let blocked = h.status == RunStatus::Blocked;
    // Why a runnable run is not moving, when the engine knows.
    let runnable = !h.status.is_final() && !blocked;
    RunView {
        thread_id: h.thread.as_str().to_owned(),
        workflow: h.workflow.clone(),
        workflow_version: h.workflow_version,
        status: h.status.into(),
        // (`step`: journal entries recorded; `at` says which entry the run is at.)
        step: h.steps,
        at: position(h, f),
        version: h.version,
        attempt: h.attempt,
        output: h.output.as_ref().map(shown),
        error: h.error.clone(),
        blocked_reason: h.reason.clone().filter(|_| blocked),
        blocked_effect: h.blocked_effect.clone().filter(|_| blocked),
        blocked_effect_holder: effect_holder(h).filter(|_| blocked),
        cancel_reason: h.reason.clone().filter(|_| h.status == RunStatus::Cancelled),
        next: next_names(h),
        interrupts: interrupts(h),
        wait: answerable(h).map(|w| WaitView {
            kind: w.kind.clone(),
            name: w.name.clone(),
            payload: shown(&w.payload),
        }),
        pause: super::pause::run_pause_view(h, &f.pauses),
        waiting: None,
        waiting_for: h.waiting_for.clone().filter(|_| runnable),
        waiting_on_effect: waiting_on_effect(h).filter(|_| runnable),
        crashes: Some(h.crashes).filter(|n| *n > 0),
        crashed_by: h.crashed_by.clone().filter(|_| h.crashes > 0),
        due_at: h.due,
        deadline_at: h.deadline,
        queue: h.queue.clone(),
        home_queue: h.home_queue.clone(),
        flow: flow_view(h),
        priority: Some(h.priority).filter(|p| *p > 0),
        forked_from: h.forked_from.as_ref().map(|(thread, n)| super::model::Lineage {
            thread_id: thread.clone(),
            from_step: *n,
        }),
        restarts: h.restarts.map(|r| r.0),
        restarted_from: h.restarts.map(|r| r.1),
        parent: h.parent.as_ref().map(|p| super::model::ParentView {
            thread_id: p.thread.to_string(),
            index: p.index,
        }),
        children: child_views(h),
        created_at: h.created_at,
        updated_at: h.updated_at,
        // Only a run that ended has finished (a blocked run is resumed after a fix).
        finished_at: h.finished_at.filter(|_| h.status.is_final()),
    }
}

/// The holder of the effect key a run is blocked on, as recorded.
fn effect_holder(h: &RunHeader) -> Option<EffectHolder> {
    h.blocked_effect_owner
        .as_deref()
        .and_then(Holder::parse)
        .map(|holder| EffectHolder {
            thread_id: holder.thread,
            index: holder.index,
            fence: holder.fence,
        })
}

/// The effect key a run backs off on, and its tries.
fn waiting_on_effect(h: &RunHeader) -> Option<WaitingOnEffect> {
    h.wait_effect.as_ref().map(|(key, tries)| WaitingOnEffect {
        key: key.clone(),
        tries: *tries,
    })
}

/// A run's flow control as stored.
fn flow_view(h: &RunHeader) -> Option<super::model::FlowView> {
    h.flow.as_ref().map(|f| super::model::FlowView {
        key: f.key.clone(),
        limit: f.limit,
        rate_per_sec: f.rate,
    })
}

/// The child runs a run started.
fn child_views(h: &RunHeader) -> Vec<super::model::ChildView> {
    h.children
        .iter()
        .map(|c| super::model::ChildView {
            index: c.index,
            thread_id: c.thread.to_string(),
            on_parent_cancel: c.on_parent_cancel.as_str().to_owned(),
        })
        .collect()
}

/// One journal entry as shown by history and export.
pub(crate) fn entry_view(index: usize, e: &Entry) -> EntryView {
    let (outcome, result, error) = match &e.outcome {
        Outcome::Ok(v) => (EntryOutcome::Ok, shown(v), None),
        Outcome::Err(msg) => (EntryOutcome::Error, serde_json::Value::Null, Some(msg.clone())),
    };
    let failure = e.failure.as_ref().filter(|_| error.is_some());
    EntryView {
        index,
        name: e.name.clone(),
        kind: e.kind.as_str().to_owned(),
        outcome,
        result,
        error,
        error_class: failure.and_then(|f| f.class.clone()),
        retryable: failure.map(|f| f.retryable),
        key: e.key.clone(),
        value_version: e.tv,
        attempts: e.attempts,
        at: e.at,
    }
}

fn entries(journal: &[Entry]) -> Vec<EntryView> {
    journal.iter().enumerate().map(|(i, e)| entry_view(i, e)).collect()
}

/// `GET /v1/runs/{thread_id}/history`.
pub(crate) fn history_view(h: &RunHeader, journal: &[Entry], events: &[RunEvent]) -> HistoryView {
    HistoryView {
        thread_id: h.thread.as_str().to_owned(),
        status: h.status.into(),
        entries: entries(journal),
        events: events.iter().map(event_view).collect(),
    }
}

/// One event of a run's log, as history and the doctor show it.
pub(crate) fn event_view(e: &RunEvent) -> EventView {
    EventView {
        id: e.id.clone(),
        typ: e.typ.clone(),
        detail: e.detail.clone(),
        at: e.at,
    }
}

/// `GET /v1/runs/{thread_id}/export`: a serialisable checkpoint of the run.
pub(crate) fn export_view(h: &RunHeader, journal: &[Entry]) -> ExportView {
    ExportView {
        thread_id: h.thread.as_str().to_owned(),
        workflow: h.workflow.clone(),
        workflow_version: h.workflow_version,
        schema: h.schema,
        status: h.status.into(),
        step: h.steps,
        version: h.version,
        completed: journal.iter().map(|e| e.name.clone()).collect(),
        pending: next_names(h),
        input: shown(&h.input),
        input_version: h.input_version,
        output: h.output.as_ref().map(shown),
        output_version: h.output_version.as_ref().map(|o| o.version).filter(|v| *v > 1),
        journal: entries(journal),
    }
}

/// One row of `GET /v1/runs`.
pub(crate) fn list_item(h: &RunHeader) -> ListItem {
    ListItem {
        thread_id: h.thread.as_str().to_owned(),
        workflow: h.workflow.clone(),
        status: h.status.into(),
        step: h.steps,
        created_at: h.created_at,
        updated_at: h.updated_at,
        waiting: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use savepoint_core::ids::ThreadId;
    use savepoint_core::journal::EntryKind;
    use savepoint_store::Wait;
    use serde_json::{json, Value};

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
            block_kind: Some(savepoint_store::BlockKind::InDoubt),
            blocked_effect: Some("ledger:1".into()),
            blocked_effect_owner: None,
            waiting_for: None,
            wait_effect: None,
            deadline: None,
            forked_from: None,
            restarts: None,
            parent: None,
            children: Vec::new(),
            queue: None,
            home_queue: None,
            flow: None,
            priority: 0,
            needs: Vec::new(),
            input_version: None,
            output_version: None,
            crashes: 0,
            crashed_by: None,
            wait: Some(Wait {
                kind: "interrupt".into(),
                name: "approve".into(),
                payload: json!({"q": "ok?"}),
            }),
            trace: None,
            pause: None,
            paused_by: None,
            retry_backoff: None,
        }
    }

    fn to(v: impl serde::Serialize) -> Value {
        serde_json::to_value(v).unwrap()
    }

    fn facts() -> Facts {
        Facts {
            now: 100_000,
            last: None,
            pauses: Vec::new(),
        }
    }

    #[test]
    fn waiting_run_shows_next_and_interrupts() {
        let v = to(run_view(&header(RunStatus::Waiting), &facts()));
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
        let v = to(run_view(&h, &facts()));
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
        let v = to(run_view(&h, &facts()));
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
            pauses: Vec::new(),
        };
        let at = to(position(&h, &f));
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
        assert!(to(position(&h, &f)).get("overdue_ms").is_none());
        // A run whose worker died: the lease ran out.
        let mut h = header(RunStatus::Running);
        h.owner = Some("w-1".into());
        h.lease_until = 90_000;
        let at = to(position(&h, &facts()));
        assert!(at["text"].as_str().unwrap().contains("expired 10000 ms ago"), "{at}");
        let v = to(run_view(&header(RunStatus::Completed), &facts()));
        assert_eq!(v["at"]["text"], "completed after 2 entries");
    }

    #[test]
    fn entries_and_export() {
        let mut fx = Entry::new("ledger.post", EntryKind::Effect, Outcome::Ok(json!(5)), 1);
        fx.key = Some("ledger:1".into());
        let failed = Entry::new("read", EntryKind::Step, Outcome::Err("boom".into()), 3);
        let e = to(entry_view(1, &failed));
        assert_eq!(
            (e["outcome"].as_str(), e["error"].as_str(), &e["result"]),
            (Some("error"), Some("boom"), &Value::Null)
        );
        let x = to(export_view(&header(RunStatus::Waiting), &[fx, failed]));
        assert_eq!(x["completed"], json!(["ledger.post", "read"]));
        assert_eq!(x["pending"], json!(["approve"]));
        assert_eq!(x["journal"][0]["key"], "ledger:1");
        assert_eq!(x["schema"], 1);
    }
}
