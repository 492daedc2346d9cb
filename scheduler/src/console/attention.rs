//! Needs attention (`/ui/attention`): the pauses in force, blocked runs (most often an effect
//! in doubt) and runs a pause stopped, with the doctor's diagnosis and actions, and runnable
//! runs that no live worker serves.

use askama::Template;
use axum::extract::State;

use savepoint_store::{RunHeader, RunStatus};

use super::actions::{buttons, case_name, Button};
use super::format::clock;
use super::lists::{listed, run_row, RunRow};
use super::page::{render, Page};
use super::router::ConsoleState;
use crate::api::doctor;

/// A run in trouble, with what the doctor says of it.
struct Trouble {
    row: RunRow,
    case: String,
    summary: String,
    key: Option<String>,
    holder: Option<String>,
    buttons: Vec<Button>,
    manual: Vec<String>,
}

#[derive(Template)]
#[template(path = "console/attention.html")]
struct AttentionPage {
    active: &'static str,
    blocked: Vec<Trouble>,
    stuck: Vec<Trouble>,
    /// Runs a pause stopped.
    paused: Vec<Trouble>,
    /// The workflow, version and queue pauses in force, one sentence each, with the button
    /// that lifts it.
    pauses: Vec<(String, Vec<Button>)>,
    in_doubt: usize,
    /// Blocked runs in all (when more than the page lists).
    capped: Option<u64>,
    /// How many of the newest pending and sleeping runs were checked for a worker.
    checked: usize,
    now: String,
}

/// `GET /ui/attention`.
pub(super) async fn attention_page(State(st): State<ConsoleState>) -> Page {
    let svc = st.api.services()?;
    let (now, workers, total, in_force) = tokio::try_join!(
        svc.store.server_time(),
        svc.store.live_workers(),
        svc.store.status_index_size(RunStatus::Blocked),
        svc.store.pauses()
    )?;
    let facts = doctor::Facts {
        now,
        workers,
        max_crashes: svc.store.config().max_crashes,
        pauses: in_force.clone(),
        ..doctor::Facts::default()
    };
    let blocked: Vec<Trouble> = listed(svc, RunStatus::Blocked)
        .await?
        .iter()
        .map(|h| trouble(h, &facts))
        .collect();
    // Runnable runs no live worker serves (they wait in the store until one registers).
    let (mut stuck, mut checked) = (Vec::new(), 0);
    for status in [RunStatus::Pending, RunStatus::Sleeping] {
        let runs = listed(svc, status).await?;
        checked += runs.len();
        stuck.extend(unserved(&runs, &facts));
    }
    let paused: Vec<Trouble> = listed(svc, RunStatus::Paused)
        .await?
        .iter()
        .map(|h| trouble(h, &facts))
        .collect();
    let mut page = attention_view(blocked, stuck, checked, total, now);
    page.paused = paused;
    page.pauses = in_force.iter().map(|p| pause_banner(p, now)).collect();
    Ok(render(&page))
}

/// A pause in force as a sentence, and the button that lifts it.
fn pause_banner(p: &savepoint_store::Pause, now: u64) -> (String, Vec<Button>) {
    let note = if p.record.note.is_empty() {
        String::new()
    } else {
        format!(": {}", p.record.note)
    };
    let held = if p.record.hold_timers { " (timers held)" } else { "" };
    let text = format!(
        "{} is paused by {} since {} ({}){note}{held}",
        p.scope,
        p.record.by,
        clock(p.record.at),
        super::format::ago(p.record.at, now)
    );
    let (buttons, _) = buttons(&[doctor::unpause_action("", &p.scope.field())]);
    (text, buttons)
}

/// A run with the doctor's diagnosis of it (from the facts shared by every run on the page).
fn trouble(h: &RunHeader, facts: &doctor::Facts) -> Trouble {
    let d = doctor::diagnose(h, facts);
    let (buttons, manual) = buttons(&d.actions);
    Trouble {
        row: run_row(h, facts.now),
        case: case_name(&d),
        summary: d.summary.clone(),
        key: h.blocked_effect.clone(),
        holder: h
            .blocked_effect_owner
            .as_deref()
            .and_then(savepoint_store::Holder::parse)
            .map(|h| h.to_string()),
        buttons,
        manual,
    }
}

/// The runs among `runs` that the doctor finds no live worker for.
fn unserved(runs: &[RunHeader], facts: &doctor::Facts) -> Vec<Trouble> {
    runs.iter()
        .map(|h| trouble(h, facts))
        .filter(|t| t.case == "no_worker")
        .collect()
}

/// Builds the page from the blocked runs listed (of `total` blocked in all) and the stuck
/// ones found among the `checked` runnable runs.
fn attention_view(blocked: Vec<Trouble>, stuck: Vec<Trouble>, checked: usize, total: u64, now: u64) -> AttentionPage {
    AttentionPage {
        active: "attention",
        in_doubt: blocked.iter().filter(|t| t.key.is_some()).count(),
        capped: (total > blocked.len() as u64).then_some(total),
        blocked,
        stuck,
        paused: Vec::new(),
        pauses: Vec::new(),
        checked,
        now: clock(now),
    }
}
