//! The doctor: why a run is or is not moving, in plain language, with the evidence it read and
//! the exact command that settles it (`GET /v1/runs/{thread_id}/diagnosis`, `savepoint doctor`,
//! the console's run page).
//!
//! [`gather`] reads everything the verdict rests on (the run header, the store clock, the live
//! fleet, the lease holder's `/healthz`, the queue depth, the effect records the run holds or
//! waits on, the last events); [`diagnose`] is a plain function of those facts, so each case
//! can be unit-tested as well as created for real (`integration-tests/tests/doctor.rs`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;
use serde_json::{json, Value};
use std::time::Duration;
use utoipa::ToSchema;

use savepoint_core::ids::EffectKey;
use savepoint_core::journal::{Entry, EntryKind};
use savepoint_store::{EffectRecord, Holder, RunEvent, RunHeader, RunStatus, WorkerInfo};

use super::extract::thread_id;
use super::extract::ApiPath;
use super::model::{EventView, Status};
use super::views::OVERDUE_AFTER_MS;
use super::{ApiError, ApiState, Reply, Services};

/// Events shown as evidence.
const LAST_EVENTS: usize = 10;
/// How long the doctor waits for a worker's `/healthz` or the broker's queue depth.
const PROBE: Duration = Duration::from_millis(1_000);
/// Workers whose `/healthz` one diagnosis asks at most.
const MAX_PROBES: usize = 16;

/// What the doctor concluded, as a code a program can switch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Case {
    /// Waiting for a human to answer an interrupt.
    WaitingForHuman,
    /// Waiting for a named signal.
    WaitingForSignal,
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
    /// Blocked for another reason (a panic in workflow code, an answer that did not decode,
    /// an unreadable checkpoint).
    Blocked,
    /// Ended with an output.
    Completed,
    /// Ended with an error.
    Failed,
    /// Ended by an operator.
    Cancelled,
}

/// One thing the operator can do, as the CLI command and as the API call it makes.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct Action {
    /// What it does, in a sentence (shown before it is confirmed).
    pub label: String,
    /// The `savepoint` command that does it.
    pub command: String,
    /// HTTP method of the API call (absent for an action outside the API, such as a deploy).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Path of the API call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Body of the API call (JSON), when it takes one. `"<json>"` marks a value to fill in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// True for an action that settles what the engine cannot know (resolve, cancel): the
    /// console asks for a confirmation.
    pub dangerous: bool,
}

/// The worker holding the run's lease, as the doctor found it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct LeaseHolder {
    /// Worker incarnation id.
    pub worker: String,
    /// Lease expiry (store ms).
    pub lease_until: u64,
    /// True when the lease has expired by the store clock.
    pub expired: bool,
    /// True when the worker's registration is live.
    pub registered: bool,
    /// Its last heartbeat (store ms), when registered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_at: Option<u64>,
    /// What its `/healthz` answered: `ok`, `unreachable: …`, or `not served` (a worker
    /// without a health listener: only the registration and the lease tell).
    pub healthz: String,
    /// The doctor's conclusion: the process is there and holds the lease.
    pub alive: bool,
}

/// A live worker that serves the run's workflow at its version.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct Server {
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
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct EffectFact {
    /// The idempotency key.
    pub key: String,
    /// Why it matters here: `blocked_on` (the in-doubt effect), `waiting_for` (a key another
    /// run holds) or `holds` (an effect this run began and has not journaled).
    pub role: String,
    /// Its record: `intent`, `in_doubt`, `done` or `none`.
    pub state: String,
    /// Who holds the record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
}

/// `GET /v1/runs/{thread_id}/diagnosis`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Diagnosis {
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub due_at: Option<u64>,
    /// Tasks ready in the run's queue (absent when the broker did not answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_depth: Option<u32>,
    /// The lease holder, while a worker holds or held the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseHolder>,
    /// Live workers serving the run's workflow at its version.
    pub servers: Vec<Server>,
    /// Effect keys the run holds or waits on.
    pub effects: Vec<EffectFact>,
    /// The run's last events, oldest first.
    pub events: Vec<EventView>,
}

/// Everything [`diagnose`] needs, read by [`gather`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Facts {
    /// Store time (ms).
    pub now: u64,
    /// The live fleet.
    pub workers: Vec<WorkerInfo>,
    /// What each probed worker's `/healthz` answered, by worker id (the lease holder and
    /// the workers serving the run's workflow; workers without a listener are not probed).
    pub health: std::collections::BTreeMap<String, Result<(), String>>,
    /// Ready tasks in the queue.
    pub queue_depth: Option<u32>,
    /// The last journal entry (what a sleeping run sleeps on).
    pub last: Option<Entry>,
    /// The record of the effect key the run is blocked on.
    pub blocked_record: Option<EffectRecord>,
    /// The record of the effect key the run backs off on.
    pub waited_record: Option<EffectRecord>,
    /// The effect the run began at its next journal index and has not journaled (its key and
    /// record), unless it is the one it is blocked on.
    pub begun: Option<(String, Option<EffectRecord>)>,
    /// The run's last events.
    pub events: Vec<RunEvent>,
}

/// A store time (ms) as RFC 3339, UTC.
pub(crate) fn at(ms: u64) -> String {
    savepoint_client::fmt::timestamp(ms)
}

/// A span of milliseconds, readably (`850 ms`, `4.2 s`, `3 min 5 s`, `2 h 10 min`).
pub(crate) fn span(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms} ms"),
        1_000..=59_999 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..=3_599_999 => format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000),
        _ => format!("{} h {} min", ms / 3_600_000, (ms % 3_600_000) / 60_000),
    }
}

/// `T (in 4.2 s)` or `T (3.1 s ago)` against `now`.
fn when(t: u64, now: u64) -> String {
    if t >= now {
        format!("{} (in {})", at(t), span(t - now))
    } else {
        format!("{} ({} ago)", at(t), span(now - t))
    }
}

fn holder_text(h: &Holder) -> String {
    if h.index < 0 {
        format!("an operator (on run {})", h.thread)
    } else {
        h.to_string()
    }
}

fn record_fact(key: &str, role: &str, rec: Option<&EffectRecord>) -> EffectFact {
    let (state, holder) = match rec {
        None => ("none", None),
        Some(EffectRecord::Intent(h)) => ("intent", Some(holder_text(h))),
        Some(EffectRecord::Orphaned(h, _)) => ("in_doubt", Some(holder_text(h))),
        Some(EffectRecord::Done(h, _)) => ("done", Some(holder_text(h))),
    };
    EffectFact {
        key: key.to_owned(),
        role: role.to_owned(),
        state: state.to_owned(),
        holder,
    }
}

/// The shell-quoted form of an argument (single quotes unless it is plain).
fn sh(arg: &str) -> String {
    if !arg.is_empty() && arg.chars().all(|c| c.is_ascii_alphanumeric() || "_-.:/@".contains(c)) {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

fn run_path(thread: &str, tail: &str) -> String {
    format!("/v1/runs/{}/{tail}", savepoint_client::fmt::encode(thread))
}

fn api_action(label: String, command: String, method: &str, path: String, body: Option<Value>) -> Action {
    Action {
        label,
        command,
        method: Some(method.into()),
        path: Some(path),
        body,
        dangerous: false,
    }
}

fn cancel_action(thread: &str) -> Action {
    Action {
        dangerous: true,
        ..api_action(
            "Cancel the run: it ends as cancelled and runs nothing more (effects it began stay in doubt \
             for the operator)"
                .into(),
            format!("savepoint cancel {} --reason '…'", sh(thread)),
            "POST",
            run_path(thread, "cancel"),
            Some(json!({"reason": "<text>"})),
        )
    }
}

fn retry_action(thread: &str, label: &str) -> Action {
    api_action(
        label.to_owned(),
        format!("savepoint retry {}", sh(thread)),
        "POST",
        run_path(thread, "retry"),
        None,
    )
}

fn deploy_action(label: String) -> Action {
    Action {
        label,
        command: String::new(),
        method: None,
        path: None,
        body: None,
        dangerous: false,
    }
}

/// Which kind of block a reason names (the sentences the worker and the claim script write:
/// `non-determinism at entry …`, `crashed N times at …`).
fn block_case(h: &RunHeader) -> Case {
    let reason = h.reason.as_deref().unwrap_or("");
    if h.blocked_effect.is_some() {
        Case::BlockedInDoubt
    } else if reason.starts_with("non-determinism") {
        Case::BlockedNonDeterminism
    } else if reason.starts_with("crashed ") && reason.contains(" without progress") {
        Case::BlockedPoison
    } else {
        Case::Blocked
    }
}

/// The verdict on a run from the facts.
pub(crate) fn diagnose(h: &RunHeader, f: &Facts) -> Diagnosis {
    let thread = h.thread.as_str();
    let now = f.now;
    let mut evidence = Vec::new();
    let mut actions = Vec::new();
    // Registrations whose heartbeats stopped belong to workers that are gone (killed,
    // paused, cut off) until their TTL removes them: they serve nothing.
    // So do registrations whose process does not answer its health listener.
    let gone = |w: &WorkerInfo| w.silent_for(now).is_some() || proves_gone(f.health.get(&w.id));
    let silent: Vec<&WorkerInfo> = f.workers.iter().filter(|w| gone(w)).collect();
    let servers: Vec<Server> = f
        .workers
        .iter()
        .filter(|w| !gone(w) && w.serves(&h.workflow, h.workflow_version))
        .map(|w| {
            let e = w.workflows.iter().find(|e| e.name == h.workflow);
            Server {
                worker: w.id.clone(),
                versions: e
                    .map(|e| format!("{}..={}", e.min_version, e.version))
                    .unwrap_or_default(),
                last_heartbeat_at: w.last_heartbeat(),
                in_flight: w.in_flight,
            }
        })
        .collect();
    let served_versions: Vec<String> = f
        .workers
        .iter()
        .filter(|w| !gone(w))
        .flat_map(|w| w.workflows.iter().filter(|e| e.name == h.workflow))
        .map(|e| format!("v{}..=v{}", e.min_version, e.version))
        .collect();
    let servers_text = if servers.is_empty() {
        format!(
            "no live worker serves {} v{}{}",
            h.workflow,
            h.workflow_version,
            if served_versions.is_empty() {
                " (no live worker serves this workflow at all)".to_owned()
            } else {
                format!(" (live workers serve {})", served_versions.join(", "))
            }
        )
    } else {
        format!(
            "{} live worker(s) serve {} v{}: {}",
            servers.len(),
            h.workflow,
            h.workflow_version,
            servers.iter().map(|s| s.worker.as_str()).collect::<Vec<_>>().join(", ")
        )
    };
    evidence.push(format!(
        "status {} at journal entry {}, attempt {}, fence {}; store clock {}",
        h.status,
        h.steps,
        h.attempt,
        h.fence,
        at(now)
    ));
    if let Some(due) = h.due {
        evidence.push(format!("due at {}", when(due, now)));
    }
    // The lease holder, while the run is running (or a worker holds it).
    let lease = h
        .owner
        .as_ref()
        .filter(|_| h.status == RunStatus::Running)
        .map(|owner| {
            let reg = f.workers.iter().find(|w| &w.id == owner);
            let expired = now > h.lease_until;
            let probe = f.health.get(owner);
            let healthz = match probe {
                Some(Ok(())) => "ok".to_owned(),
                Some(Err(e)) => format!("unreachable: {e}"),
                None => "not served".to_owned(),
            };
            let silent = reg.and_then(|w| w.silent_for(now));
            let alive = reg.is_some() && silent.is_none() && !expired && !proves_gone(probe);
            LeaseHolder {
                worker: owner.clone(),
                lease_until: h.lease_until,
                expired,
                registered: reg.is_some(),
                last_heartbeat_at: reg.map(WorkerInfo::last_heartbeat),
                healthz,
                alive,
            }
        });
    if let Some(l) = &lease {
        evidence.push(format!(
            "lease held by {} until {}; registration {}; /healthz {}",
            l.worker,
            when(l.lease_until, now),
            match l.last_heartbeat_at {
                Some(hb) => format!("live, last heartbeat {}", when(hb, now)),
                None => "gone (the worker stopped heartbeating)".into(),
            },
            l.healthz
        ));
    }
    if let Some(depth) = f.queue_depth {
        evidence.push(format!("{depth} task(s) ready in the queue"));
    }
    evidence.push(servers_text.clone());
    if !silent.is_empty() {
        evidence.push(format!(
            "{} registered worker(s) are gone (their registrations expire on their own): {}",
            silent.len(),
            silent
                .iter()
                .map(|w| match (w.silent_for(now), f.health.get(&w.id)) {
                    (Some(s), _) => format!("{} (no heartbeat for {})", w.id, span(s)),
                    (None, Some(Err(e))) => format!("{} (/healthz unreachable: {e})", w.id),
                    _ => w.id.clone(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let mut effects = Vec::new();
    if let Some(key) = h.blocked_effect.as_deref().filter(|_| h.status == RunStatus::Blocked) {
        effects.push(record_fact(key, "blocked_on", f.blocked_record.as_ref()));
    }
    if let Some((key, rec)) = &f.begun {
        let fact = record_fact(key, "holds", rec.as_ref());
        evidence.push(format!(
            "began the effect {key} at entry {} (not journaled yet): its record is {}{}",
            h.steps,
            fact.state,
            fact.holder
                .as_deref()
                .map(|h| format!(", held by {h}"))
                .unwrap_or_default()
        ));
        effects.push(fact);
    }
    if let Some((key, tries)) = h.wait_effect.as_ref().filter(|_| !h.status.is_final()) {
        let fact = record_fact(key, "waiting_for", f.waited_record.as_ref());
        evidence.push(format!(
            "backs off on effect key {key} (try {tries}): its record is {}{}",
            fact.state,
            fact.holder
                .as_deref()
                .map(|h| format!(", held by {h}"))
                .unwrap_or_default()
        ));
        effects.push(fact);
    }
    if h.crashes > 0 {
        evidence.push(format!(
            "taken over {} time(s) at this entry; workers that held it: {}",
            h.crashes,
            h.crashed_by.as_deref().unwrap_or("?")
        ));
    }
    // Workers that answer their heartbeats but not the doctor (a network in between).
    for w in f.workers.iter().filter(|w| !gone(w)) {
        if let Some(Err(e)) = f.health.get(&w.id) {
            evidence.push(format!(
                "{} heartbeats but its /healthz is unreachable from this scheduler ({e})",
                w.id
            ));
        }
    }
    // A runnable run no live worker serves: pending, or sleeping with its wake-up near. A
    // worker that tried it and gave it back says why (another version or checkpoint schema).
    let soon = h.due.is_none_or(|d| d <= now + 60_000);
    let given_back = h
        .waiting_for
        .as_deref()
        .filter(|_| matches!(h.status, RunStatus::Pending | RunStatus::Sleeping));
    let no_worker = (servers.is_empty()
        && (h.status == RunStatus::Pending || (h.status == RunStatus::Sleeping && soon)))
        || given_back.is_some();
    if servers.is_empty() && h.status == RunStatus::Sleeping && !soon {
        evidence.push(format!(
            "no live worker serves {} v{} now: one must be running when it wakes",
            h.workflow, h.workflow_version
        ));
    }
    let (case, progressing, summary) = match h.status {
        RunStatus::Completed => (
            Case::Completed,
            false,
            format!(
                "Completed{} after {} journal entries.",
                h.finished_at.map(|t| format!(" {}", when(t, now))).unwrap_or_default(),
                h.steps
            ),
        ),
        RunStatus::Failed => (
            Case::Failed,
            false,
            format!("Failed: {}.", h.error.as_deref().unwrap_or("(no error recorded)")),
        ),
        RunStatus::Cancelled => (
            Case::Cancelled,
            false,
            format!("Cancelled: {}.", h.reason.as_deref().unwrap_or("(no reason given)")),
        ),
        RunStatus::Waiting => {
            let (kind, name, payload) = h
                .wait
                .as_ref()
                .map(|w| {
                    (
                        w.kind.as_str(),
                        w.name.as_str(),
                        savepoint_runtime::security::shown(&w.payload),
                    )
                })
                .unwrap_or(("signal", "?", Value::Null));
            let since = span(now.saturating_sub(h.updated_at));
            let deadline = h
                .due
                .map(|d| format!("; it gives up waiting at {}", when(d, now)))
                .unwrap_or_default();
            if h.wait.is_none() {
                (
                    Case::WaitingForSignal,
                    false,
                    format!("Waiting (for {since}), but the run records nothing it waits for{deadline}."),
                )
            } else if kind == "interrupt" {
                actions.push(api_action(
                    format!("Answer the interrupt {name:?} (the value is checked against its schema)"),
                    format!("savepoint resume {} '<json>'", sh(thread)),
                    "POST",
                    run_path(thread, "resume"),
                    Some(json!({"value": "<json>"})),
                ));
                evidence.push(format!("the question: {payload}"));
                (
                    Case::WaitingForHuman,
                    false,
                    format!(
                        "Waiting for a human to answer the interrupt {name:?} (for {since}){deadline}; nothing \
                         happens until someone answers."
                    ),
                )
            } else {
                actions.push(api_action(
                    format!("Send the signal {name:?}"),
                    format!("savepoint signal {} {} '<json>'", sh(thread), sh(name)),
                    "POST",
                    run_path(thread, &format!("signals/{name}")),
                    Some(json!({"value": "<json>"})),
                ));
                (
                    Case::WaitingForSignal,
                    false,
                    format!("Waiting for the signal {name:?} (for {since}){deadline}."),
                )
            }
        }
        RunStatus::Blocked => {
            let case = block_case(h);
            let reason = h.reason.as_deref().unwrap_or("(no reason recorded)");
            match (case, h.blocked_effect.as_deref()) {
                (Case::BlockedInDoubt, Some(key)) => {
                    let path = format!(
                        "/v1/runs/{}/effects/{}/resolve",
                        savepoint_client::fmt::encode(thread),
                        savepoint_client::fmt::encode(key)
                    );
                    actions.push(Action {
                        dangerous: true,
                        ..api_action(
                            format!(
                                "The provider shows the effect {key} happened: record it as applied with its \
                                 result; the run continues without performing it again"
                            ),
                            format!(
                                "savepoint resolve {} {} --applied true --result '<json>'",
                                sh(thread),
                                sh(key)
                            ),
                            "POST",
                            path.clone(),
                            Some(json!({"applied": true, "result": "<json>"})),
                        )
                    });
                    actions.push(Action {
                        dangerous: true,
                        ..api_action(
                            format!(
                                "The provider shows the effect {key} did not happen: release it; the run \
                                 performs it (once)"
                            ),
                            format!("savepoint resolve {} {} --applied false", sh(thread), sh(key)),
                            "POST",
                            path,
                            Some(json!({"applied": false})),
                        )
                    });
                }
                (Case::BlockedNonDeterminism, _) => {
                    actions.push(deploy_action(format!(
                        "Deploy code that takes the recorded path (or guard the change with ctx.patched) for {} \
                         v{}, then retry",
                        h.workflow, h.workflow_version
                    )));
                    actions.push(retry_action(
                        thread,
                        "Check the run again from the top once fixed code serves it",
                    ));
                }
                (Case::BlockedPoison, _) => {
                    actions.push(deploy_action(format!(
                        "Fix what kills the worker at this step ({reason}), deploy it, then retry"
                    )));
                    actions.push(retry_action(
                        thread,
                        "Run it again from where it stopped once the fix is deployed",
                    ));
                }
                _ => actions.push(retry_action(thread, "Run it again from where it stopped after the fix")),
            }
            actions.push(cancel_action(thread));
            evidence.push(format!("blocked reason: {reason}"));
            let what = match case {
                Case::BlockedInDoubt => {
                    "an effect's outcome is unknown (a worker died between recording its \
                                         intent and its result); only someone who checks the provider can say \
                                         whether it happened"
                }
                Case::BlockedNonDeterminism => "the workflow code no longer takes the path its journal recorded",
                Case::BlockedPoison => "it is a poison run: every worker that ran this step died there",
                _ => "the worker stopped it",
            };
            (
                case,
                false,
                format!("Blocked until an operator acts: {what}. Reason: {reason}."),
            )
        }
        // (A running run's holder is judged first: dead, it is taken over by whoever serves it.)
        _ if no_worker && h.status != RunStatus::Running => {
            actions.push(deploy_action(format!(
                "Deploy (or scale up) a worker that serves {} v{}; the run is picked up as soon as it registers",
                h.workflow, h.workflow_version
            )));
            actions.push(cancel_action(thread));
            if let Some(w) = &h.waiting_for {
                evidence.push(format!("the last worker that tried it gave it back: {w}"));
            }
            let why = match (servers.is_empty(), given_back) {
                (false, Some(w)) => format!(
                    "{w} (the live workers serving {} v{} gave it back)",
                    h.workflow, h.workflow_version
                ),
                _ => servers_text.clone(),
            };
            (
                Case::NoWorker,
                false,
                format!("Not progressing: {why}. It waits in the store (nothing is lost) until one registers."),
            )
        }
        RunStatus::Running => match &lease {
            Some(l) if l.alive => (
                Case::Running,
                true,
                format!(
                    "Running on live worker {} (entry {}); its lease runs until {}.",
                    l.worker,
                    h.steps,
                    when(l.lease_until, now)
                ),
            ),
            Some(l) => {
                let why = if !l.registered {
                    "its registration expired".to_owned()
                } else if let Some(s) = f
                    .workers
                    .iter()
                    .find(|w| w.id == l.worker)
                    .and_then(|w| w.silent_for(now))
                {
                    format!("no heartbeat for {}", span(s))
                } else if l.expired {
                    "its lease expired without a heartbeat".to_owned()
                } else {
                    "its process does not answer /healthz".to_owned()
                };
                // The scanner rings the run once its lease and the grace after it have passed
                // (its due time while leased).
                let takeover = now.max(h.due.unwrap_or(l.lease_until).max(l.lease_until));
                (
                    Case::HeldByDeadWorker,
                    true,
                    format!(
                        "Held by a dead worker: {} is gone ({why}). {} takes the run over once the lease \
                         and its grace have passed, at {}, and resumes at entry {}.",
                        l.worker,
                        match servers.len() {
                            0 => format!(
                                "No other live worker serves {} v{} yet: the first one that starts",
                                h.workflow, h.workflow_version
                            ),
                            n => format!("Another worker ({n} live serve it)"),
                        },
                        when(takeover, now),
                        h.steps
                    ),
                )
            }
            None => (Case::Running, true, "Running.".into()),
        },
        RunStatus::Sleeping if h.wait_effect.is_some() => {
            let (key, _) = h.wait_effect.clone().unwrap_or_default();
            (
                Case::BackingOff,
                true,
                format!(
                    "Backing off: the effect key {key} is held by another run; it tries again at {}.",
                    h.due.map(|d| when(d, now)).unwrap_or_else(|| "its due time".into())
                ),
            )
        }
        RunStatus::Sleeping => {
            let due = h.due.map(|d| when(d, now)).unwrap_or_else(|| "(no due time)".into());
            let late = h
                .due
                .and_then(|d| now.checked_sub(d))
                .filter(|l| *l > OVERDUE_AFTER_MS)
                .map(|l| {
                    format!(
                        "; overdue by {}: no worker has picked it up yet (the due scanner hands it out again)",
                        span(l)
                    )
                })
                .unwrap_or_default();
            match f.last.as_ref().filter(|e| e.kind == EntryKind::Sleep) {
                Some(e) => (
                    Case::Sleeping,
                    true,
                    format!("Sleeping on the durable timer {:?} until {due}{late}.", e.name),
                ),
                None => (
                    Case::BackingOff,
                    true,
                    format!("Backing off before a retry until {due}{late}."),
                ),
            }
        }
        // Pending.
        _ => {
            let late = h.due.and_then(|d| now.checked_sub(d)).filter(|l| *l > OVERDUE_AFTER_MS);
            let backlog = f.queue_depth;
            let busy: u32 = servers.iter().map(|s| s.in_flight).sum();
            match late {
                Some(late) if backlog.is_none() => (
                    Case::Overdue,
                    true,
                    format!(
                        "Overdue by {}: due, and no worker has claimed it; the broker did not say how many \
                         tasks are queued ahead of it. The due scanner hands it out again.",
                        span(late)
                    ),
                ),
                Some(late) if backlog == Some(0) => (
                    Case::Overdue,
                    true,
                    format!(
                        "Overdue by {}: due, but no task for it is in the queue and no worker has claimed it; \
                         the due scanner hands it out again (is a scheduler running?).",
                        span(late)
                    ),
                ),
                _ => (
                    Case::Queued,
                    true,
                    format!(
                        "Queued behind a backlog of {} task(s) for {} live worker(s) serving it ({busy} \
                         run(s) in flight there){}.",
                        backlog
                            .map(|n| n.to_string())
                            .unwrap_or_else(|| "an unknown number of".into()),
                        servers.len(),
                        late.map(|l| format!("; due {} ago", span(l))).unwrap_or_default()
                    ),
                ),
            }
        }
    };
    Diagnosis {
        thread_id: thread.to_owned(),
        workflow: h.workflow.clone(),
        workflow_version: h.workflow_version,
        status: h.status.into(),
        case,
        progressing,
        summary,
        evidence,
        actions,
        now,
        due_at: h.due,
        queue_depth: f.queue_depth,
        lease,
        servers,
        effects,
        events: f.events.iter().map(super::views::event_view).collect(),
    }
}

fn probe_client() -> &'static reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT.get_or_init(|| reqwest::Client::builder().timeout(PROBE).build().unwrap_or_default())
}

/// Asks a worker's health listener whether the process is there.
/// Asks a worker's health listener whether the process is there: `Ok`, or why not. A refused
/// connection (nothing listens at the address the worker registered) is `refused: …`, the
/// one answer that proves the process gone; a timeout may be the network.
pub(crate) async fn healthz(ops: &str) -> Result<(), String> {
    let r = probe_client()
        .get(format!("{}/healthz", ops.trim_end_matches('/')))
        .send()
        .await
        .map_err(|e| {
            let refused = e.is_connect() && !e.is_timeout();
            let mut msg = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg = s.to_string();
                src = s.source();
            }
            if refused {
                format!("{REFUSED}{msg}")
            } else {
                msg
            }
        })?;
    if r.status().is_success() {
        Ok(())
    } else {
        Err(format!("answered {}", r.status()))
    }
}

/// Prefix of a probe answer that proves the worker gone.
const REFUSED: &str = "refused: ";

/// True when a probe answer proves the process gone (a refused connection, or a listener
/// answering that it is not healthy).
fn proves_gone(probe: Option<&Result<(), String>>) -> bool {
    matches!(probe, Some(Err(e)) if e.starts_with(REFUSED) || e.starts_with("answered "))
}

/// Whether the scheduler can ask this worker's listener: a loopback address means the same
/// host only (the host name it registered is this one's).
pub(crate) fn probeable(w: &WorkerInfo) -> Option<&str> {
    let ops = w.ops.as_deref()?;
    let loopback = ops.contains("//127.") || ops.contains("//[::1]") || ops.contains("//localhost");
    (!loopback || w.host == savepoint_core::ids::host_name()).then_some(ops)
}

async fn effect_record(svc: &Services, key: &str) -> Result<Option<EffectRecord>, ApiError> {
    match EffectKey::new(key.to_owned()) {
        Ok(k) => Ok(svc.store.effect_state(&k).await?),
        Err(_) => Ok(None),
    }
}

/// Reads the facts about a run. `known`: its journal and events, when the caller has read
/// them already (the run page), so they are not read again.
pub(crate) async fn gather(
    svc: &Services,
    h: &RunHeader,
    known: Option<(&[Entry], &[RunEvent])>,
) -> Result<Facts, ApiError> {
    let store = &svc.store;
    let (now, workers) = tokio::try_join!(store.server_time(), store.live_workers())?;
    let events = match known {
        Some((_, ev)) => ev[ev.len().saturating_sub(LAST_EVENTS)..].to_vec(),
        None => store.events(&h.thread, LAST_EVENTS).await?,
    };
    let last = match (h.steps.checked_sub(1), known) {
        (Some(i), Some((journal, _))) if h.status == RunStatus::Sleeping => journal.get(i as usize).cloned(),
        (Some(i), None) if h.status == RunStatus::Sleeping => store.entry(&h.thread, i).await?,
        _ => None,
    };
    // The lease holder first, then the workers that could serve the run, each asked at once.
    let owner = h.owner.as_deref().filter(|_| h.status == RunStatus::Running);
    let mut probed: Vec<(&str, &str)> = workers
        .iter()
        .filter(|w| owner == Some(w.id.as_str()) || w.serves(&h.workflow, h.workflow_version))
        .filter_map(|w| probeable(w).map(|ops| (w.id.as_str(), ops)))
        .collect();
    probed.sort_by_key(|(id, _)| Some(*id) != owner);
    let answers = futures::future::join_all(
        probed
            .into_iter()
            .take(MAX_PROBES)
            .map(|(id, ops)| async move { (id.to_owned(), healthz(ops).await) }),
    )
    .await;
    let health = answers.into_iter().collect();
    let queue_depth = match h.status {
        RunStatus::Pending | RunStatus::Running | RunStatus::Sleeping => {
            tokio::time::timeout(PROBE, svc.publisher.broker().queue_depth())
                .await
                .ok()
                .and_then(Result::ok)
        }
        _ => None,
    };
    let blocked_record = match h.blocked_effect.as_deref() {
        Some(k) => effect_record(svc, k).await?,
        None => None,
    };
    let waited_record = match &h.wait_effect {
        Some((k, _)) => effect_record(svc, k).await?,
        None => None,
    };
    let begun = match h.status {
        s if s.is_final() => None,
        _ => match store.effect_begun(&h.thread, h.steps).await? {
            Some(k) if h.blocked_effect.as_deref() != Some(k.as_str()) => {
                let rec = effect_record(svc, &k).await?;
                Some((k, rec))
            }
            _ => None,
        },
    };
    Ok(Facts {
        begun,
        now,
        workers,
        health,
        queue_depth,
        last,
        blocked_record,
        waited_record,
        events,
    })
}

/// Diagnose a run
///
/// Why the run is or is not progressing, in plain language, with the evidence (status and
/// due time against the store clock, the lease holder and whether its process answers
/// `/healthz`, the live workers that serve its workflow version, the queue depth, the effect
/// keys it holds or waits on, its last events) and, when something must be done, the exact
/// command and API call that settles it.
#[utoipa::path(
    get,
    path = "/v1/runs/{thread_id}/diagnosis",
    operation_id = "diagnose_run",
    tag = "runs",
    params(super::ThreadParam),
    responses((status = 200, description = "The diagnosis", body = Diagnosis))
)]
pub(crate) async fn diagnosis(State(st): State<ApiState>, ApiPath(raw): ApiPath<String>) -> Reply<Diagnosis> {
    let thread = thread_id(raw)?;
    let svc = st.services()?;
    let h = svc
        .store
        .header(&thread)
        .await?
        .ok_or_else(|| ApiError::run_not_found(&thread))?;
    let facts = gather(svc, &h, None).await?;
    Ok((StatusCode::OK, Json(diagnose(&h, &facts))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use savepoint_core::ids::ThreadId;
    use savepoint_store::CatalogEntry;

    fn header(status: RunStatus) -> RunHeader {
        let fields = std::collections::BTreeMap::from([
            ("status".to_owned(), status.as_str().as_bytes().to_vec()),
            ("wf".to_owned(), b"invoice".to_vec()),
            ("wfv".to_owned(), b"1".to_vec()),
        ]);
        RunHeader::from_fields(&ThreadId::new("t-1".to_owned()).unwrap(), &fields).unwrap()
    }

    fn worker(id: &str, version: u32) -> WorkerInfo {
        WorkerInfo {
            id: id.into(),
            workflows: vec![CatalogEntry {
                name: "invoice".into(),
                version,
                min_version: version,
            }],
            until: 20_000,
            ttl_ms: 10_000,
            ..WorkerInfo::default()
        }
    }

    #[test]
    fn block_reasons_are_classified_by_the_sentences_their_writers_use() {
        let mut h = header(RunStatus::Blocked);
        h.reason = Some("non-determinism at entry 1: the workflow returned but …".into());
        assert_eq!(block_case(&h), Case::BlockedNonDeterminism);
        h.reason = Some("crashed 3 times at entry 0 (read_pdf) without progress; workers: a, b, c".into());
        assert_eq!(block_case(&h), Case::BlockedPoison);
        h.blocked_effect = Some("email:1".into());
        assert_eq!(block_case(&h), Case::BlockedInDoubt);
    }

    #[test]
    fn a_running_run_whose_worker_does_not_answer_is_held_by_a_dead_worker() {
        let mut h = header(RunStatus::Running);
        h.owner = Some("w1".into());
        h.lease_until = 15_000;
        let mut f = Facts {
            now: 10_000,
            workers: vec![worker("w1", 1)],
            health: [("w1".to_owned(), Ok(()))].into(),
            ..Facts::default()
        };
        assert_eq!(diagnose(&h, &f).case, Case::Running);
        f.health
            .insert("w1".into(), Err(format!("{REFUSED}connection refused")));
        let d = diagnose(&h, &f);
        assert_eq!(d.case, Case::HeldByDeadWorker);
        assert!(d.summary.contains("at 1970-01-01T00:00:15.000Z"), "{}", d.summary);
        // A timeout is not proof: the worker still heartbeats, so it is still alive.
        f.health.insert("w1".into(), Err("operation timed out".into()));
        assert_eq!(diagnose(&h, &f).case, Case::Running);
    }

    /// A pending run of invoice v1, given back by a worker for `waiting_for` if any.
    fn pending(workers: Vec<WorkerInfo>, waiting_for: Option<&str>) -> Diagnosis {
        let mut h = header(RunStatus::Pending);
        h.waiting_for = waiting_for.map(str::to_owned);
        let f = Facts {
            now: 10_000,
            workers,
            ..Facts::default()
        };
        diagnose(&h, &f)
    }

    #[test]
    fn unserved_runs_say_which_versions_are_served_or_why_they_were_given_back() {
        let d = pending(vec![worker("w2", 2)], None);
        assert_eq!(d.case, Case::NoWorker);
        assert!(d.summary.contains("live workers serve v2..=v2"), "{}", d.summary);
        // Its version is served, but the worker that tried it reads another checkpoint schema.
        let d = pending(
            vec![worker("w1", 1)],
            Some("waiting for a worker that reads checkpoint schema v3"),
        );
        assert_eq!(d.case, Case::NoWorker);
        assert!(d.summary.contains("checkpoint schema v3"), "{}", d.summary);
    }

    #[test]
    fn a_long_sleep_without_workers_is_sleeping_with_a_warning_and_an_overdue_one_says_so() {
        let mut h = header(RunStatus::Sleeping);
        h.due = Some(10_000 + 3_600_000);
        let mut f = Facts {
            now: 10_000,
            last: Some(Entry::new(
                "nap",
                EntryKind::Sleep,
                savepoint_core::journal::Outcome::Ok(Value::Null),
                1,
            )),
            ..Facts::default()
        };
        let d = diagnose(&h, &f);
        assert_eq!(d.case, Case::Sleeping, "{}", d.summary);
        assert!(d
            .evidence
            .iter()
            .any(|e| e.contains("one must be running when it wakes")));
        // Woken an hour ago and still asleep, with a worker serving it: overdue.
        f.now = 10_000 + 7_200_000;
        f.workers = vec![WorkerInfo {
            until: f.now + 5_000,
            ..worker("w1", 1)
        }];
        let d = diagnose(&h, &f);
        assert_eq!(d.case, Case::Sleeping);
        assert!(d.summary.contains("overdue by 1 h 0 min"), "{}", d.summary);
    }

    #[test]
    fn spans_and_quoting() {
        assert_eq!(span(850), "850 ms");
        assert_eq!(span(4_200), "4.2 s");
        assert_eq!(span(185_000), "3 min 5 s");
        assert_eq!(sh("invoice-1"), "invoice-1");
        assert_eq!(sh("it's"), r"'it'\''s'");
    }
}
