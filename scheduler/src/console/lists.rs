//! Runs as the console's lists show them (one row each), shared by the runs list, the inbox
//! and the needs-attention page, and the store read that fills the latter two.

use savepoint_store::{ListFilter, RunHeader, RunStatus, StoreError};

use super::format::{ago, clock};
use crate::api::Services;

/// Runs the inbox and the attention page list at most.
const QUEUE_CAP: usize = 500;

/// The line under a run in lists: why it stopped, or what it waits for.
fn note(h: &RunHeader) -> String {
    match h.status {
        RunStatus::Blocked => h.reason.clone().unwrap_or_default(),
        RunStatus::Cancelled => h.reason.clone().unwrap_or_default(),
        RunStatus::Failed => h.error.clone().unwrap_or_default(),
        RunStatus::Waiting => h
            .wait
            .as_ref()
            .map(|w| format!("waits for {} {:?}", w.kind, w.name))
            .unwrap_or_default(),
        _ => h.waiting_for.clone().unwrap_or_default(),
    }
}

/// The link to a run's page.
pub(super) fn run_href(thread: &str) -> String {
    format!("/ui/runs/{}", savepoint_client::fmt::encode(thread))
}

/// One run in a list.
pub(super) struct RunRow {
    pub(super) thread: String,
    pub(super) href: String,
    pub(super) workflow: String,
    pub(super) version: u32,
    pub(super) status: &'static str,
    pub(super) step: u32,
    pub(super) created: String,
    pub(super) updated: String,
    pub(super) note: String,
}

/// The row of a run, its times as of `now`.
pub(super) fn run_row(h: &RunHeader, now: u64) -> RunRow {
    RunRow {
        thread: h.thread.as_str().to_owned(),
        href: run_href(h.thread.as_str()),
        workflow: h.workflow.clone(),
        version: h.workflow_version,
        status: h.status.as_str(),
        step: h.steps,
        created: clock(h.created_at),
        updated: ago(h.updated_at, now),
        note: note(h),
    }
}

/// The newest runs of one status, as many as a queue page lists.
pub(super) async fn listed(svc: &Services, status: RunStatus) -> Result<Vec<RunHeader>, StoreError> {
    let filter = ListFilter {
        status: Some(status),
        ..ListFilter::default()
    };
    Ok(svc.store.list_page(&filter, None, QUEUE_CAP, QUEUE_CAP * 4).await?.0)
}
