//! One run's page (`/ui/runs/{thread_id}`): its facts, the doctor's diagnosis and actions,
//! its input, output and what it waits for, the waterfall of its journal, the journal itself
//! and its events.

use askama::Template;
use axum::extract::{Path, State};

use savepoint_core::ids::ThreadId;
use savepoint_core::journal::{Entry, Outcome};
use savepoint_store::{RunEvent, RunHeader, RunStatus};
use serde_json::Value;

use super::actions::{buttons, case_name, Button};
use super::format::{ago, clock, json, Json};
use super::page::{render, Page};
use super::router::ConsoleState;
use super::timeline;
use crate::api::doctor::{self, Diagnosis};
use crate::api::ApiError;

/// One of the run's facts: a name and its value.
struct Field {
    name: &'static str,
    value: String,
}

/// One journal entry.
struct EntryRow {
    index: usize,
    name: String,
    kind: &'static str,
    key: String,
    attempts: u32,
    at: String,
    ok: bool,
    result: Json,
}

/// One event of the run.
struct EventRow {
    at: String,
    typ: String,
    detail: String,
}

#[derive(Template)]
#[template(path = "console/run.html")]
struct RunPage {
    active: &'static str,
    thread: String,
    status: &'static str,
    workflow: String,
    version: u32,
    fields: Vec<Field>,
    input: Json,
    output: Option<Json>,
    error: Option<String>,
    wait_payload: Option<Json>,
    doctor: Diagnosis,
    case: String,
    buttons: Vec<Button>,
    manual: Vec<String>,
    timeline: timeline::Timeline,
    entries: Vec<EntryRow>,
    events: Vec<EventRow>,
    effects_in_doubt: usize,
    now: String,
}

/// The row of the journal's entry `i`.
fn entry_row(i: usize, e: &Entry) -> EntryRow {
    let (ok, v) = match &e.outcome {
        Outcome::Ok(v) => (true, v.clone()),
        Outcome::Err(m) => (false, Value::String(m.clone())),
    };
    EntryRow {
        index: i,
        name: e.name.clone(),
        kind: e.kind.as_str(),
        key: e.key.clone().unwrap_or_default(),
        attempts: e.attempts,
        at: clock(e.at),
        ok,
        result: json(&v),
    }
}

/// `GET /ui/runs/{thread_id}`.
pub(super) async fn run_page(State(st): State<ConsoleState>, Path(raw): Path<String>) -> Page {
    let thread = ThreadId::new(raw).map_err(ApiError::bad_request)?;
    let svc = st.api.services()?;
    let (h, journal) = svc
        .store
        .get(&thread)
        .await?
        .ok_or_else(|| ApiError::run_not_found(&thread))?;
    let events = svc.store.events(&thread, 1000).await?;
    // The doctor's own reads of the journal's last entry and the last events are served
    // from what this page read.
    let facts = doctor::gather_chain(svc, &h, Some((&journal, &events))).await?;
    let d = doctor::diagnose(&h, &facts);
    Ok(render(&run_view(&h, &journal, &events, d, facts.now)))
}

/// Builds the page from the run's header, journal and events, and the doctor's diagnosis, as
/// of the store clock `now`.
fn run_view(h: &RunHeader, journal: &[Entry], events: &[RunEvent], d: Diagnosis, now: u64) -> RunPage {
    let fields = fields(h, &d, now);
    let mut actions = d.actions.clone();
    let live = !h.status.is_final() && !matches!(h.status, RunStatus::Blocked | RunStatus::Paused);
    if live && h.pause.is_none() {
        actions.push(doctor::pause_action(h.thread.as_str()));
    }
    let (buttons, manual) = buttons(&actions);
    let timeline = timeline::build(h, journal, events, now);
    RunPage {
        active: "runs",
        thread: h.thread.as_str().to_owned(),
        status: h.status.as_str(),
        workflow: h.workflow.clone(),
        version: h.workflow_version,
        fields,
        input: json(&h.input),
        output: h.output.as_ref().map(json),
        error: h.error.clone(),
        wait_payload: h
            .wait
            .as_ref()
            .filter(|_| matches!(h.status, RunStatus::Waiting | RunStatus::Blocked))
            .map(|w| json(&w.payload)),
        case: case_name(&d),
        doctor: d,
        buttons,
        manual,
        effects_in_doubt: timeline.bars.iter().filter(|b| b.state == "in doubt").count(),
        timeline,
        entries: journal.iter().enumerate().map(|(i, e)| entry_row(i, e)).collect(),
        events: event_rows(events),
        now: clock(now),
    }
}

/// The run's events, newest first.
fn event_rows(events: &[RunEvent]) -> Vec<EventRow> {
    events
        .iter()
        .rev()
        .map(|e| EventRow {
            at: clock(e.at),
            typ: e.typ.clone(),
            detail: e.detail.clone(),
        })
        .collect()
}

/// The run's facts in the order shown: its times, where it runs, who holds it.
fn fields(h: &RunHeader, d: &Diagnosis, now: u64) -> Vec<Field> {
    let mut fields = waiting_fields(d, now);
    fields.extend(times(h, now));
    fields.extend(placement(h));
    fields.extend(ownership(h, d, now));
    fields
}

/// Why the run is not running and when it is expected to run again (the run's `waiting`).
fn waiting_fields(d: &Diagnosis, now: u64) -> Vec<Field> {
    let Some(w) = &d.waiting else {
        return Vec::new();
    };
    let mut fields = vec![Field {
        name: "waiting on",
        value: format!("{}: {}", w.on, w.summary),
    }];
    if let Some(since) = w.since {
        fields.push(Field {
            name: "waiting since",
            value: format!("{} ({})", clock(since), ago(since, now)),
        });
    }
    fields.push(Field {
        name: "runs again",
        value: match w.estimate.at {
            Some(t) => format!("{} ({}): {}", clock(t), ago(t, now), w.estimate.how),
            None => w.estimate.how.clone(),
        },
    });
    fields
}

/// Created, updated, finished, due and deadline.
fn times(h: &RunHeader, now: u64) -> Vec<Field> {
    let mut fields = vec![
        Field {
            name: "created",
            value: clock(h.created_at),
        },
        Field {
            name: "updated",
            value: format!("{} ({})", clock(h.updated_at), ago(h.updated_at, now)),
        },
    ];
    if let Some(f) = h.finished_at.filter(|_| h.status.is_final()) {
        fields.push(Field {
            name: "finished",
            value: clock(f),
        });
    }
    if let Some(due) = h.due {
        fields.push(Field {
            name: "due",
            value: format!("{} ({})", clock(due), ago(due, now)),
        });
    }
    if let Some(d) = h.deadline {
        fields.push(Field {
            name: "deadline",
            value: format!("{} ({})", clock(d), ago(d, now)),
        });
    }
    fields
}

/// Its journal, where it came from, its queue and flow control, its parent and children,
/// its restarts.
fn placement(h: &RunHeader) -> Vec<Field> {
    let mut fields = vec![Field {
        name: "journal",
        value: format!("{} entries", h.steps),
    }];
    if let Some((source, n)) = &h.forked_from {
        fields.push(Field {
            name: "forked from",
            value: format!("{source} at entry {n}"),
        });
    }
    if let Some(q) = &h.queue {
        fields.push(Field {
            name: "task queue",
            value: task_queue(q, h.home_queue.as_deref()),
        });
    }
    if let Some(f) = &h.flow {
        let rate = f.rate.map(|r| format!(", {r} starts/s")).unwrap_or_default();
        fields.push(Field {
            name: "flow control",
            value: format!("key {} (limit {}{rate}), priority {}", f.key, f.limit, h.priority),
        });
    }
    if let Some(p) = &h.parent {
        fields.push(Field {
            name: "parent",
            value: format!("{} (its entry {})", p.thread, p.index),
        });
    }
    if !h.children.is_empty() {
        fields.push(Field {
            name: "children",
            value: children(h),
        });
    }
    if let Some((count, from)) = h.restarts {
        fields.push(Field {
            name: "restarted",
            value: format!("{count} time(s), last from entry {from}"),
        });
    }
    fields
}

/// The queue the run is on, and its home queue when it was routed elsewhere.
fn task_queue(q: &str, home: Option<&str>) -> String {
    let home = home.unwrap_or(q);
    if home == q {
        q.to_owned()
    } else {
        format!("{q} (routed there for its next call; home {home})")
    }
}

/// The run's children, each with its entry and what its parent's cancel does to it.
fn children(h: &RunHeader) -> String {
    let list: Vec<String> = h
        .children
        .iter()
        .map(|c| {
            format!(
                "{} (entry {}, on cancel: {})",
                c.thread,
                c.index,
                c.on_parent_cancel.as_str()
            )
        })
        .collect();
    list.join(", ")
}

/// Its attempt and fence, the lease holder, takeovers and its trace.
fn ownership(h: &RunHeader, d: &Diagnosis, now: u64) -> Vec<Field> {
    let mut fields = vec![
        Field {
            name: "attempt / fence",
            value: format!("{} / {}", h.attempt, h.fence),
        },
        Field {
            name: "lease holder",
            value: lease_holder(h, d, now),
        },
    ];
    if let Some(p) = pause_field(h) {
        fields.push(Field {
            name: "paused",
            value: p,
        });
    }
    if h.crashes > 0 {
        fields.push(Field {
            name: "takeovers here",
            value: format!("{} ({})", h.crashes, h.crashed_by.clone().unwrap_or_default()),
        });
    }
    if let Some(t) = &h.trace {
        fields.push(Field {
            name: "trace",
            value: t.clone(),
        });
    }
    fields
}

/// The run's own pause, or the one that stopped it: who, when, why.
fn pause_field(h: &RunHeader) -> Option<String> {
    let (field, record) = match (&h.paused_by, &h.pause) {
        (Some((f, r, _)), _) => (f.as_str(), r.as_str()),
        (None, Some(own)) => ("run", own.as_str()),
        _ => return None,
    };
    let r = savepoint_store::PauseRecord::decode(record)?;
    let scope = savepoint_store::PauseScope::parse_field(field).map_or_else(|| "the run".into(), |s| s.to_string());
    let stopped = if h.status == RunStatus::Paused {
        "stopped"
    } else {
        "stops at its next call"
    };
    let note = if r.note.is_empty() {
        String::new()
    } else {
        format!(": {}", r.note)
    };
    Some(format!("{scope}, by {} at {}{note} ({stopped})", r.by, clock(r.at)))
}

/// Who holds the run's lease as the doctor found it (alive or not), or who held it last.
fn lease_holder(h: &RunHeader, d: &Diagnosis, now: u64) -> String {
    match &d.lease {
        Some(l) => format!(
            "{} — {}{} (lease until {}, /healthz {})",
            l.worker,
            if l.alive { "alive" } else { "dead" },
            l.last_heartbeat_at
                .map(|hb| format!(", last heartbeat {}", ago(hb, now)))
                .unwrap_or_default(),
            clock(l.lease_until),
            l.healthz
        ),
        None => h
            .owner
            .clone()
            .map(|o| format!("none (last: {o})"))
            .unwrap_or_else(|| "none".into()),
    }
}
