//! The approvals inbox (`/ui/inbox`): runs waiting for a human's answer to an interrupt,
//! longest waiting first, each with the question and a form to answer it; and below, runs
//! waiting for a signal.

use askama::Template;
use axum::extract::State;

use savepoint_store::{RunHeader, RunStatus};

use super::format::{clock, json, Json};
use super::lists::{listed, run_href, run_row, RunRow};
use super::page::{render, Page};
use super::router::ConsoleState;
use crate::api::checks::{schema_for, Expects};
use crate::api::doctor::span;

/// A run waiting for an answer.
struct Question {
    thread: String,
    href: String,
    workflow: String,
    name: String,
    payload: Json,
    waited: String,
    resume_path: String,
    /// The workflow and version whose schema the answer follows.
    at: (String, u32),
    /// An answer of the shape the interrupt's published schema asks for (the form's
    /// placeholder; empty when the workflow published none, or none could be built).
    example: String,
}

#[derive(Template)]
#[template(path = "console/inbox.html")]
struct InboxPage {
    active: &'static str,
    questions: Vec<Question>,
    signals: Vec<RunRow>,
    /// Runs waiting in all (when more than the page lists).
    capped: Option<u64>,
    now: String,
}

/// `GET /ui/inbox`.
pub(super) async fn inbox_page(State(st): State<ConsoleState>) -> Page {
    let svc = st.api.services()?;
    let (now, total) = tokio::try_join!(svc.store.server_time(), svc.store.status_index_size(RunStatus::Waiting))?;
    let waiting = listed(svc, RunStatus::Waiting).await?;
    let mut page = inbox_view(&waiting, total, now);
    for q in &mut page.questions {
        let (wf, version) = q.at.clone();
        let schema = schema_for(svc, &wf, version, Expects::Interrupt(&q.name)).await?;
        q.example = schema
            .as_ref()
            .and_then(crate::schema::example)
            .map(|v| v.to_string())
            .unwrap_or_default();
    }
    Ok(render(&page))
}

/// Builds the inbox from the waiting runs listed (of `total` waiting in all).
fn inbox_view(waiting: &[RunHeader], total: u64, now: u64) -> InboxPage {
    let mut questions = Vec::new();
    let mut signals = Vec::new();
    for h in waiting {
        match &h.wait {
            Some(w) if w.kind == "interrupt" => questions.push(Question {
                thread: h.thread.as_str().to_owned(),
                href: run_href(h.thread.as_str()),
                workflow: format!("{} v{}", h.workflow, h.workflow_version),
                name: w.name.clone(),
                payload: json(&w.payload),
                waited: span(now.saturating_sub(h.updated_at)),
                resume_path: format!("/v1/runs/{}/resume", savepoint_client::fmt::encode(h.thread.as_str())),
                at: (h.workflow.clone(), h.workflow_version),
                example: String::new(),
            }),
            _ => signals.push(run_row(h, now)),
        }
    }
    // Longest waiting first.
    questions.reverse();
    InboxPage {
        active: "inbox",
        questions,
        signals,
        capped: (total > waiting.len() as u64).then_some(total),
        now: clock(now),
    }
}
