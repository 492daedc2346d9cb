use axum::http::Method;
use savepoint_core::ids::ThreadId;
use savepoint_store::{RunHeader, RunStatus};
use std::time::Duration;

use super::world::World;

/// The simulated schedules: id, seconds between firings, overlap policy.
pub(super) const SCHEDULES: [(&str, u64, &str); 3] =
    [("tick", 1, "skip"), ("tock", 2, "allow_all"), ("tack", 1, "buffer_one")];

/// The firing schedule `id` holds back until its last run ends (`buffer_one`), if any,
/// unless that run is blocked: a blocked run has not ended, so the firing waits for its
/// operator (as the README says).
pub(super) async fn buffered_of(w: &World, id: &str) -> Option<String> {
    let key = w.store.keys().schedule(id);
    let (held, last): (Option<String>, Option<String>) = w
        .store
        .query(redis::cmd("HMGET").arg(&key).arg("buffered").arg("last"))
        .await
        .unwrap_or((None, None));
    let held = held?;
    let last = last.and_then(|t| ThreadId::new(t).ok());
    if let Some(t) = last {
        if w.read(&t).await.is_some_and(|(h, _)| h.status == RunStatus::Blocked) {
            return None;
        }
    }
    Some(held)
}

/// What the schedules still owe: a firing decided before the pause whose run is not created
/// yet (its create stalled, or its replica died) is created by the next pass, paused or not;
/// a firing `buffer_one` held back starts when the run before it ends, paused or not (unless
/// that run is blocked); and their runs end like any other.
pub(super) async fn schedules_open(w: &World) -> usize {
    let mut open = 0;
    for (id, _, _) in SCHEDULES {
        open += usize::from(pending_of(w, id).await.is_some());
        open += usize::from(buffered_of(w, id).await.is_some());
    }
    open + schedule_runs(w)
        .await
        .iter()
        .filter(|r| !r.status.is_final() && r.status != RunStatus::Blocked)
        .count()
}

/// The runs schedule `id` decided and has not created yet (its raw `pending` field), if any.
pub(super) async fn pending_of(w: &World, id: &str) -> Option<String> {
    w.store
        .query(redis::cmd("HGET").arg(w.store.keys().schedule(id)).arg("pending"))
        .await
        .unwrap_or(None)
}

/// Every run the simulated schedules started, by thread id.
pub(super) async fn schedule_runs(w: &World) -> Vec<RunHeader> {
    let (status, list) = w.api(Method::GET, "/v1/runs?limit=1000", None).await;
    if status != 200 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for r in list["runs"].as_array().into_iter().flatten() {
        let Some(t) = r["thread_id"].as_str() else { continue };
        if !SCHEDULES.iter().any(|(id, _, _)| t.starts_with(&format!("{id}-"))) {
            continue;
        }
        let Ok(t) = ThreadId::new(t.to_owned()) else { continue };
        if let Some((h, _)) = w.read(&t).await {
            out.push(h);
        }
    }
    out.sort_by(|a, b| a.thread.as_str().cmp(b.thread.as_str()));
    out
}

/// Invariant 9, schedules: each firing time has at most one run, and every run the schedule
/// started is one it counted (none untracked); `skip` and `buffer_one` never have two runs
/// open at once; `allow_all` misses no firing time between its first and its last; nothing
/// is left pending or buffered.
pub(super) async fn schedule_checks(w: &World, bad: &mut Vec<String>) {
    let runs = schedule_runs(w).await;
    for (id, every, overlap) in SCHEDULES {
        let (status, s) = w.api(Method::GET, &format!("/v1/schedules/{id}"), None).await;
        if status != 200 {
            bad.push(format!("schedule {id}: GET answered {status}: {s}"));
            continue;
        }
        let prefix = format!("{id}-");
        let mine: Vec<&RunHeader> = runs.iter().filter(|r| r.thread.as_str().starts_with(&prefix)).collect();
        w.trace.count(&format!("schedule.{id}.runs.{}", mine.len().min(20)));
        let fired = s["fired"].as_u64().unwrap_or(0);
        if fired != mine.len() as u64 {
            bad.push(format!(
                "schedule {id}: counted {fired} runs fired, {} exist: {:?}",
                mine.len(),
                mine.iter().map(|r| r.thread.as_str()).collect::<Vec<_>>()
            ));
        }
        if let Some(last) = mine.last() {
            if s["last_run"].as_str() != Some(last.thread.as_str()) {
                bad.push(format!(
                    "schedule {id}: last run {} but the latest run is {}",
                    s["last_run"], last.thread
                ));
            }
        }
        if let Some(p) = pending_of(w, id).await {
            bad.push(format!("schedule {id}: runs left pending at the end: {p}"));
        }
        if let Some(b) = buffered_of(w, id).await {
            bad.push(format!("schedule {id}: a firing left buffered at the end: {b}"));
        }
        match overlap {
            "skip" | "buffer_one" => {
                for pair in mine.windows(2) {
                    let (a, b) = (pair[0], pair[1]);
                    if a.finished_at.is_none_or(|f| b.created_at < f) {
                        bad.push(format!(
                            "schedule {id} ({overlap}): {} created at {} while {} was open (ended {:?})",
                            b.thread, b.created_at, a.thread, a.finished_at
                        ));
                    }
                }
            }
            _ => {
                let times = firing_times(id, &runs);
                for pair in times.windows(2) {
                    if pair[1] - pair[0] != every as i64 {
                        bad.push(format!(
                            "schedule {id} (allow_all): firings {} and {} are not {every} s apart",
                            pair[0], pair[1]
                        ));
                    }
                }
                if s["skipped"].as_u64().unwrap_or(0) > 0 {
                    bad.push(format!("schedule {id} (allow_all): skipped firings: {s}"));
                }
            }
        }
    }
}

/// The firing times (s) of the runs of schedule `id`, from their thread ids.
pub(super) fn firing_times(id: &str, runs: &[RunHeader]) -> Vec<i64> {
    let prefix = format!("{id}-");
    runs.iter()
        .filter_map(|r| {
            let stamp = r.thread.as_str().strip_prefix(&prefix)?;
            chrono::NaiveDateTime::parse_from_str(stamp, "%Y%m%dT%H%M%SZ")
                .ok()
                .map(|t| t.and_utc().timestamp())
        })
        .collect()
}

/// A resume's catch-up rule, and delete: `allow_all`, resumed after the checks, makes up no
/// firing missed while it was paused (its next run fires at or after the resume), and once
/// deleted it is gone.
pub(super) async fn schedule_resume_checks(w: &World, bad: &mut Vec<String>) {
    let Some((id, _, _)) = SCHEDULES.iter().find(|(_, _, overlap)| *overlap == "allow_all") else {
        return;
    };
    let before = firing_times(id, &schedule_runs(w).await);
    let resumed_ms = w.server_ms() as i64;
    match w.api(Method::POST, &format!("/v1/schedules/{id}/resume"), None).await {
        (200, _) => {}
        (code, body) => {
            bad.push(format!("schedule {id}: resume answered {code}: {body}"));
            return;
        }
    }
    let mut new = Vec::new();
    for _ in 0..300 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        new = firing_times(id, &schedule_runs(w).await);
        new.retain(|t| !before.contains(t));
        if !new.is_empty() {
            break;
        }
    }
    w.trace.count("schedule.resumed");
    if new.is_empty() {
        bad.push(format!("schedule {id}: no firing within 30 s of its resume"));
    }
    if let Some(t) = new.iter().find(|t| **t * 1000 < resumed_ms) {
        bad.push(format!(
            "schedule {id}: resumed at {resumed_ms} ms, it made up the firing at {t} s missed while paused"
        ));
    }
    match w.api(Method::DELETE, &format!("/v1/schedules/{id}"), None).await {
        (200 | 204, _) => {}
        (code, body) => bad.push(format!("schedule {id}: delete answered {code}: {body}")),
    }
    match w.api(Method::GET, &format!("/v1/schedules/{id}"), None).await {
        (404, _) => {}
        (code, body) => bad.push(format!("schedule {id}: deleted, GET answered {code}: {body}")),
    }
}
