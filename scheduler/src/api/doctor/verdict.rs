//! The verdict on a run: one pure function per case, chosen by the run's status.

use savepoint_store::{RunHeader, RunStatus};

use super::actions::{resume_action, signal_action, unpause_action};
use super::fleet::Fleet;
use super::{blocked, runnable};
use super::{span, when, Action, Case, Facts, LeaseHolder};
use crate::api::model::{Waiting, WaitingOn};

/// What the doctor concluded, with the evidence and actions its case adds.
pub(super) struct Verdict {
    /// The verdict, as a code.
    pub case: Case,
    /// True when the run moves on by itself.
    pub progressing: bool,
    /// The verdict in one sentence.
    pub summary: String,
    /// The evidence this case adds after the common evidence.
    pub evidence: Vec<String>,
    /// What settles it.
    pub actions: Vec<Action>,
}

impl Verdict {
    /// A verdict that adds no evidence and offers no action.
    pub(super) fn new(case: Case, progressing: bool, summary: String) -> Self {
        Self {
            case,
            progressing,
            summary,
            evidence: Vec::new(),
            actions: Vec::new(),
        }
    }
}

/// The verdict on run `h` from the facts, the fleet and the lease holder.
pub(super) fn verdict(h: &RunHeader, f: &Facts, fleet: &Fleet<'_>, lease: Option<&LeaseHolder>) -> Verdict {
    let now = f.now;
    match h.status {
        RunStatus::Completed => completed(h, now),
        RunStatus::Failed => failed(h),
        RunStatus::Cancelled => cancelled(h),
        RunStatus::Waiting => waiting(h, now, f.child.as_ref()),
        RunStatus::Blocked => blocked::blocked(h, f.max_crashes, &f.in_doubt),
        RunStatus::Paused => paused(h, now, &f.pauses),
        // (A running run's holder is judged first: dead, it is taken over by whoever serves it.)
        _ if runnable::unserved(h, now, &fleet.servers) && h.status != RunStatus::Running => {
            runnable::no_worker(h, fleet)
        }
        RunStatus::Running => runnable::running(h, f, fleet.servers.len(), lease),
        RunStatus::Sleeping => match &h.wait_effect {
            Some((key, _)) => runnable::backing_off_on_key(h, key, now),
            None => runnable::sleeping(h, f),
        },
        // Pending: in a flow-control line, or queued.
        _ => match f
            .waiting
            .as_ref()
            .filter(|w| matches!(w.on, WaitingOn::FlowSlot | WaitingOn::RateLimit))
        {
            Some(w) => in_line(w, now),
            None => runnable::pending(h, f, &fleet.servers),
        },
    }
}

/// A parent whose child is not progressing: neither is the parent, for the child's reason,
/// and what settles the child settles it.
fn stuck_child(child: &str, since: &str, d: &super::ChildVerdict) -> Verdict {
    let case = serde_json::to_value(d.case)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    Verdict {
        evidence: vec![format!(
            "the child run {child}: {} ({case}, not progressing)",
            d.summary
        )],
        actions: d.actions.clone(),
        ..Verdict::new(
            Case::WaitingForChild,
            false,
            format!(
                "Not progressing: it waits (for {since}) for its child run {child}, which is not progressing \
                 ({case}): {} Settle the child and this run goes on.",
                d.summary
            ),
        )
    }
}

/// A pending run in its flow-control key's line: it runs when a slot (or a start token)
/// comes its turn; the line moves by itself.
fn in_line(w: &Waiting, now: u64) -> Verdict {
    let est = match w.estimate.at {
        Some(t) => format!(" Its turn is expected {} ({}).", when(t, now), w.estimate.how),
        None => format!(" When its turn comes is {}.", w.estimate.how),
    };
    Verdict::new(Case::InLine, true, format!("{}{est}", w.summary))
}

/// The pause that holds a stopped run now: the one that stopped it, unless that one was lifted
/// while another holds it (a wider pause, or its own): then that one, with its record.
fn holding(h: &RunHeader, pauses: &[savepoint_store::Pause]) -> Option<(String, String)> {
    let (field, record, _) = h.paused_by.as_ref()?;
    let lifted = field != "run" && !pauses.iter().any(|p| p.scope.field() == *field);
    if !lifted {
        return Some((field.clone(), record.clone()));
    }
    match pauses.iter().find(|p| crate::api::pause::holds(&p.scope, h)) {
        Some(p) => Some((p.scope.field(), p.record.encode())),
        None => h.pause.clone().map(|own| ("run".to_owned(), own)),
    }
}

/// A run a pause stopped: which pause, who, when, why, and how to lift it.
fn paused(h: &RunHeader, now: u64, pauses: &[savepoint_store::Pause]) -> Verdict {
    let from = h.paused_by.as_ref().map_or(RunStatus::Pending, |p| p.2);
    let (field, record) = holding(h, pauses)
        .or_else(|| h.paused_by.clone().map(|(f, r, _)| (f, r)))
        .unwrap_or_default();
    let r = savepoint_store::PauseRecord::decode(&record);
    let scope = match savepoint_store::PauseScope::parse_field(&field) {
        Some(s) => format!("the pause of {s}"),
        None => "its own pause".into(),
    };
    let (by, at, note) = r
        .map(|r| (r.by, when(r.at, now), r.note))
        .unwrap_or_else(|| ("?".into(), String::new(), String::new()));
    let note = if note.is_empty() {
        String::new()
    } else {
        format!(": {note}")
    };
    let mut v = Verdict::new(
        Case::Paused,
        false,
        format!(
            "Paused at entry {} by {scope}, asked by {by} {at}{note}; it takes no slice until resumed.",
            h.steps
        ),
    );
    v.evidence
        .push(format!("A resume puts it back {from} where the pause found it."));
    v.actions.push(unpause_action(h.thread.as_str(), &field));
    v
}

/// A completed run: when, after how many entries.
fn completed(h: &RunHeader, now: u64) -> Verdict {
    Verdict::new(
        Case::Completed,
        false,
        format!(
            "Completed{} after {} journal entries.",
            h.finished_at.map(|t| format!(" {}", when(t, now))).unwrap_or_default(),
            h.steps
        ),
    )
}

/// A failed run: its error.
fn failed(h: &RunHeader) -> Verdict {
    Verdict::new(
        Case::Failed,
        false,
        format!("Failed: {}.", h.error.as_deref().unwrap_or("(no error recorded)")),
    )
}

/// A cancelled run: the operator's reason.
fn cancelled(h: &RunHeader) -> Verdict {
    Verdict::new(
        Case::Cancelled,
        false,
        format!("Cancelled: {}.", h.reason.as_deref().unwrap_or("(no reason given)")),
    )
}

/// A waiting run: for a human's answer, a signal, or (recorded nothing) for nothing known.
fn waiting(h: &RunHeader, now: u64, child_diagnosis: Option<&super::ChildVerdict>) -> Verdict {
    let since = span(now.saturating_sub(h.updated_at));
    let deadline = h
        .due
        .map(|d| format!("; it gives up waiting at {}", when(d, now)))
        .unwrap_or_default();
    let thread = h.thread.as_str();
    match &h.wait {
        None => Verdict::new(
            Case::WaitingForSignal,
            false,
            format!("Waiting (for {since}), but the run records nothing it waits for{deadline}."),
        ),
        Some(w) if w.kind == "interrupt" => Verdict {
            evidence: vec![format!(
                "the question: {}",
                savepoint_runtime::security::shown(&w.payload)
            )],
            actions: vec![resume_action(thread, &w.name)],
            ..Verdict::new(
                Case::WaitingForHuman,
                false,
                format!(
                    "Waiting for a human to answer the interrupt {:?} (for {since}){deadline}; nothing \
                     happens until someone answers.",
                    w.name
                ),
            )
        },
        Some(w) if w.kind == "child" => {
            let child = w.payload["thread_id"].as_str().unwrap_or("?");
            if let Some(d) = child_diagnosis.filter(|d| !d.progressing) {
                return stuck_child(child, &since, d);
            }
            Verdict {
                evidence: vec![format!("the child run: {child} (the call {})", w.payload["call"])],
                ..Verdict::new(
                    Case::WaitingForChild,
                    true,
                    format!(
                        "Waiting for its child run {child} to end (for {since}); it goes on when the child \
                         completes, fails or is cancelled (its diagnosis says why it is not done)."
                    ),
                )
            }
        }
        Some(w) => Verdict {
            actions: vec![signal_action(thread, &w.name)],
            ..Verdict::new(
                Case::WaitingForSignal,
                false,
                format!("Waiting for the signal {:?} (for {since}){deadline}.", w.name),
            )
        },
    }
}
