//! Schedules: cron or fixed-interval firings that start runs of a workflow with a given
//! input. Every scheduler replica runs the firing loop; a firing's run has a thread id made
//! of the schedule id and the firing time (`nightly-20261202T093000Z`), so however many
//! replicas fire one time, and whichever dies half-way, the time has exactly one run. The
//! schedule moves on by compare-and-set on its next firing (`sched_advance.lua`).

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{TimeZone, Utc};
use savepoint_core::ids::ThreadId;
use savepoint_core::protocol::TaskReason;
use savepoint_store::{Advance, CreateOptions, CreateOutcome, Resealed, SchedulePut, ScheduleRecord, StoreError};
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::checks::ring_on;
use super::extract::{ApiJson, ApiPath};
use super::model::ErrorBody;
pub(crate) use super::model::{
    Catchup, Overlap, PauseBody, ScheduleBody, ScheduleList, ScheduleSpec, ScheduleView, TriggerReply,
};
use super::{ApiError, ApiState, Reply, Services};

/// Longest schedule id.
const MAX_ID: usize = 64;
/// Most firing times looked at in one pass (a schedule far behind skips the rest).
const MAX_PASS: usize = 1000;
/// The failpoint between a firing's runs and the schedule's advance.
const BEFORE_ADVANCE: &str = "schedule.before_advance";
/// A failpoint: the schedule moved on with runs pending, not yet created.
const BEFORE_CREATE: &str = "schedule.before_create";

/// When a spec fires.
enum Timing {
    Cron(Box<croner::Cron>, chrono_tz::Tz),
    Every(u64),
}

/// Why a schedule's timing is refused; the message is the API's 422 text.
#[derive(Debug, thiserror::Error)]
enum TimingError {
    /// The cron pattern does not parse.
    #[error("cron {pattern:?}: {source}")]
    Cron {
        /// The pattern as given.
        pattern: String,
        /// Why croner refused it.
        source: croner::errors::CronError,
    },
    /// The time zone is not an IANA name.
    #[error("unknown time zone {0:?} (an IANA name such as Europe/Berlin)")]
    TimeZone(String),
    /// A time zone on an interval schedule.
    #[error("timezone applies to cron schedules only")]
    TimeZoneOnInterval,
    /// An interval outside 1 second to a year.
    #[error("every_secs must be between 1 and 31536000, not {0}")]
    Interval(u64),
    /// Neither or both of cron and every_secs.
    #[error("give exactly one of cron and every_secs")]
    NotOne,
}

impl Timing {
    /// The timing a spec gives: its cron pattern in its time zone, or its interval.
    fn of(spec: &ScheduleSpec) -> Result<Self, TimingError> {
        match (&spec.cron, spec.every_secs) {
            (Some(c), None) => {
                let cron = croner::Cron::from_str(c).map_err(|source| TimingError::Cron {
                    pattern: c.clone(),
                    source,
                })?;
                let tz_name = spec.timezone.as_deref().unwrap_or("UTC");
                let tz = chrono_tz::Tz::from_str(tz_name).map_err(|_| TimingError::TimeZone(tz_name.to_owned()))?;
                Ok(Self::Cron(Box::new(cron), tz))
            }
            (None, Some(n)) if (1..=31_536_000).contains(&n) => {
                if spec.timezone.is_some() {
                    return Err(TimingError::TimeZoneOnInterval);
                }
                Ok(Self::Every(n * 1000))
            }
            (None, Some(n)) => Err(TimingError::Interval(n)),
            _ => Err(TimingError::NotOne),
        }
    }

    /// The first firing strictly after `t` (ms).
    fn after(&self, t: u64) -> Option<u64> {
        match self {
            Self::Every(ms) => Some((t / ms + 1) * ms),
            Self::Cron(cron, tz) => {
                // Cron times are whole seconds: from the second `t` falls in, strictly after.
                let at = Utc.timestamp_opt((t / 1000) as i64, 0).single()?.with_timezone(tz);
                let next = cron.find_next_occurrence(&at, false).ok()?;
                u64::try_from(next.timestamp_millis()).ok()
            }
        }
    }
}

/// The thread id of the run of firing `at` (ms) of schedule `id`.
pub(crate) fn firing_thread(id: &str, at: u64) -> String {
    let t = Utc.timestamp_millis_opt(at as i64).single().unwrap_or_default();
    format!("{id}-{}", t.format("%Y%m%dT%H%M%SZ"))
}

fn valid_id(id: &str) -> bool {
    (1..=MAX_ID).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

fn parse_spec(raw: &str) -> Result<ScheduleSpec, StoreError> {
    serde_json::from_str(raw).map_err(|e| StoreError::Corrupt(format!("schedule spec: {e}")))
}

fn view(r: ScheduleRecord) -> Result<ScheduleView, ApiError> {
    let spec = parse_spec(&r.spec)?;
    let upcoming = match (Timing::of(&spec), r.next.filter(|_| r.paused.is_none())) {
        (Ok(t), Some(mut at)) => {
            let mut v = vec![at];
            while v.len() < 5 {
                match t.after(at) {
                    Some(n) => {
                        v.push(n);
                        at = n;
                    }
                    None => break,
                }
            }
            v
        }
        _ => Vec::new(),
    };
    Ok(ScheduleView {
        id: r.id,
        input: r.input,
        state: if r.paused.is_some() { "paused" } else { "active" }.to_owned(),
        note: r.paused.as_ref().map(|p| p.1.clone()).filter(|n| !n.is_empty()),
        next_at: r.next.filter(|_| r.paused.is_none()),
        upcoming,
        last_run: r.last.as_ref().map(|l| l.0.clone()),
        last_at: r.last.map(|l| l.1),
        buffered_at: r.buffered,
        fired: r.fired,
        skipped: r.skipped,
        created_at: r.created_at,
        spec,
    })
}

fn schedule_id(raw: String) -> Result<String, ApiError> {
    if valid_id(&raw) {
        Ok(raw)
    } else {
        Err(ApiError::bad_request(
            "a schedule id is 1-64 characters of A-Z a-z 0-9 _ . -",
        ))
    }
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, format!("no schedule {id:?}"))
}

/// The schedule `id`, or 404.
async fn record(svc: &Services, id: &str) -> Result<ScheduleRecord, ApiError> {
    svc.store.schedule_get(id).await?.ok_or_else(|| not_found(id))
}

/// Create a schedule
///
/// Starts a run of `workflow` with `input` at each firing of `cron` (in `timezone`) or every
/// `every_secs`. Idempotent: the same id and body again answers 200; another body under the
/// same id is 409 (delete it first).
#[utoipa::path(
    post,
    path = "/v1/schedules",
    operation_id = "create_schedule",
    tag = "schedules",
    request_body = ScheduleBody,
    responses(
        (status = 201, description = "Created", body = ScheduleView, links(
            ("GetSchedule" = (operation_id = "get_schedule", parameters(("id" = "$response.body#/id")))),
            ("PauseSchedule" = (operation_id = "pause_schedule", parameters(("id" = "$response.body#/id")))),
            ("ResumeSchedule" = (operation_id = "resume_schedule", parameters(("id" = "$response.body#/id")))),
            ("TriggerSchedule" = (operation_id = "trigger_schedule", parameters(("id" = "$response.body#/id")))),
            ("DeleteSchedule" = (operation_id = "delete_schedule", parameters(("id" = "$response.body#/id")))),
        )),
        (status = 200, description = "The same schedule existed already", body = ScheduleView),
        (status = 409, description = "The id holds another schedule", body = ErrorBody),
        (status = 422, description = "An unknown workflow, a bad cron pattern or time zone, or an input that breaks the workflow's schema", body = ErrorBody),
    )
)]
pub(crate) async fn create(State(st): State<ApiState>, ApiJson(body): ApiJson<ScheduleBody>) -> Reply<ScheduleView> {
    let svc = st.services()?;
    let id = schedule_id(body.id.clone())?;
    let mut spec = body.spec();
    let timing = Timing::of(&spec).map_err(|e| ApiError::unprocessable(e.to_string()))?;
    if !(1..=1000).contains(&spec.catchup_limit) || !(1..=31_536_000).contains(&spec.catchup_window_secs) {
        return Err(ApiError::unprocessable(
            "catchup_limit is 1-1000 and catchup_window_secs 1-31536000",
        ));
    }
    if spec.timeout_secs.is_some_and(|t| !(1.0..=31_536_000.0).contains(&t)) {
        return Err(ApiError::unprocessable("timeout_secs must be between 1 and 31536000"));
    }
    let Some(entry) = svc.catalog.entry(&svc.store, &body.workflow).await? else {
        return Err(ApiError::unprocessable(format!(
            "unknown workflow {:?}: no live worker serves it",
            body.workflow
        )));
    };
    let what = super::checks::Expects::Input;
    let schema = super::checks::schema_for(svc, &body.workflow, entry.version, what).await?;
    super::checks::check_value(schema.as_ref(), &body.input, what, &body.workflow)?;
    spec.input_version = entry.input_version;
    let now = svc.store.server_time().await?;
    let first = timing
        .after(now)
        .ok_or_else(|| ApiError::unprocessable("the schedule never fires"))?;
    let stored =
        serde_json::to_string(&spec).map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let code = match svc.store.schedule_put(&id, &stored, &body.input, first).await? {
        SchedulePut::Created(_) => {
            info!(schedule = %id, workflow = %body.workflow, "schedule created");
            StatusCode::CREATED
        }
        SchedulePut::Exists => StatusCode::OK,
        SchedulePut::Conflict => {
            return Err(ApiError::conflict(format!(
                "schedule {id:?} exists with another workflow, input or timing; delete it first"
            )))
        }
    };
    let rec = record(svc, &id).await?;
    Ok((code, Json(view(rec)?)))
}

/// List schedules
#[utoipa::path(
    get,
    path = "/v1/schedules",
    operation_id = "list_schedules",
    tag = "schedules",
    responses((status = 200, description = "Every schedule", body = ScheduleList))
)]
pub(crate) async fn list(State(st): State<ApiState>) -> Reply<ScheduleList> {
    let svc = st.services()?;
    let mut schedules = Vec::new();
    for id in svc.store.schedule_ids().await? {
        if let Some(r) = svc.store.schedule_get(&id).await? {
            schedules.push(view(r)?);
        }
    }
    Ok((StatusCode::OK, Json(ScheduleList { schedules })))
}

/// Get a schedule
#[utoipa::path(
    get,
    path = "/v1/schedules/{id}",
    operation_id = "get_schedule",
    tag = "schedules",
    params(("id" = String, Path, pattern = "^[A-Za-z0-9_.-]{1,64}$", description = "The schedule's id")),
    responses(
        (status = 200, description = "The schedule", body = ScheduleView),
        (status = 404, description = "No such schedule", body = ErrorBody),
    )
)]
pub(crate) async fn get(State(st): State<ApiState>, ApiPath(raw): ApiPath<String>) -> Reply<ScheduleView> {
    let id = schedule_id(raw)?;
    let svc = st.services()?;
    let rec = record(svc, &id).await?;
    Ok((StatusCode::OK, Json(view(rec)?)))
}

/// Delete a schedule
///
/// Stops its firings; runs it started are not touched.
#[utoipa::path(
    delete,
    path = "/v1/schedules/{id}",
    operation_id = "delete_schedule",
    tag = "schedules",
    params(("id" = String, Path, pattern = "^[A-Za-z0-9_.-]{1,64}$", description = "The schedule's id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such schedule", body = ErrorBody),
    )
)]
pub(crate) async fn delete(State(st): State<ApiState>, ApiPath(raw): ApiPath<String>) -> Result<StatusCode, ApiError> {
    let id = schedule_id(raw)?;
    let svc = st.services()?;
    if svc.store.schedule_state(&id, "delete", "").await? {
        info!(schedule = %id, "schedule deleted");
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found(&id))
    }
}

/// Pause a schedule
///
/// No firing starts a run until it is resumed; firings missed meanwhile are not made up.
#[utoipa::path(
    post,
    path = "/v1/schedules/{id}/pause",
    operation_id = "pause_schedule",
    tag = "schedules",
    params(("id" = String, Path, pattern = "^[A-Za-z0-9_.-]{1,64}$", description = "The schedule's id")),
    request_body = PauseBody,
    responses(
        (status = 200, description = "Paused", body = ScheduleView),
        (status = 404, description = "No such schedule", body = ErrorBody),
        (status = 422, description = "A note over 1000 characters", body = ErrorBody),
    )
)]
pub(crate) async fn pause(
    State(st): State<ApiState>,
    ApiPath(raw): ApiPath<String>,
    ApiJson(body): ApiJson<PauseBody>,
) -> Reply<ScheduleView> {
    let id = schedule_id(raw)?;
    let note = body.note.unwrap_or_default();
    if note.chars().count() > 1000 {
        return Err(ApiError::unprocessable("a note is at most 1000 characters"));
    }
    let svc = st.services()?;
    if !svc.store.schedule_state(&id, "pause", &note).await? {
        return Err(not_found(&id));
    }
    let rec = record(svc, &id).await?;
    Ok((StatusCode::OK, Json(view(rec)?)))
}

/// Resume a paused schedule
///
/// It fires next at its first firing after now.
#[utoipa::path(
    post,
    path = "/v1/schedules/{id}/resume",
    operation_id = "resume_schedule",
    tag = "schedules",
    params(("id" = String, Path, pattern = "^[A-Za-z0-9_.-]{1,64}$", description = "The schedule's id")),
    responses(
        (status = 200, description = "Active", body = ScheduleView),
        (status = 404, description = "No such schedule", body = ErrorBody),
    )
)]
pub(crate) async fn resume(State(st): State<ApiState>, ApiPath(raw): ApiPath<String>) -> Reply<ScheduleView> {
    let id = schedule_id(raw)?;
    let svc = st.services()?;
    let rec = record(svc, &id).await?;
    if rec.paused.is_some() {
        let spec = parse_spec(&rec.spec)?;
        let now = svc.store.server_time().await?;
        let next = Timing::of(&spec).ok().and_then(|t| t.after(now));
        let next = next.map(|n| n.to_string()).unwrap_or_default();
        if !svc.store.schedule_state(&id, "resume", &next).await? {
            return Err(not_found(&id));
        }
    }
    let rec = record(svc, &id).await?;
    Ok((StatusCode::OK, Json(view(rec)?)))
}

/// Trigger a schedule now
///
/// Starts one run of the schedule's workflow and input now, outside its timing (and its
/// overlap policy), named `<id>-manual-<time with ms>`.
#[utoipa::path(
    post,
    path = "/v1/schedules/{id}/trigger",
    operation_id = "trigger_schedule",
    tag = "schedules",
    params(("id" = String, Path, pattern = "^[A-Za-z0-9_.-]{1,64}$", description = "The schedule's id")),
    responses(
        (status = 201, description = "Started", body = TriggerReply),
        (status = 404, description = "No such schedule", body = ErrorBody),
        (status = 422, description = "No live worker serves its workflow", body = ErrorBody),
    )
)]
pub(crate) async fn trigger(State(st): State<ApiState>, ApiPath(raw): ApiPath<String>) -> Reply<TriggerReply> {
    let id = schedule_id(raw)?;
    let svc = st.services()?;
    let rec = record(svc, &id).await?;
    let spec = parse_spec(&rec.spec)?;
    let now = svc.store.server_time().await?;
    let at = Utc.timestamp_millis_opt(now as i64).single().unwrap_or_default();
    let thread = format!("{id}-manual-{}", at.format("%Y%m%dT%H%M%S%3fZ"));
    match start(svc, &spec, &rec.input, &thread).await? {
        Started::Yes | Started::Already => Ok((StatusCode::CREATED, Json(TriggerReply { thread_id: thread }))),
        Started::Unserved => Err(ApiError::unprocessable(format!(
            "no live worker serves {:?}",
            spec.workflow
        ))),
    }
}

enum Started {
    Yes,
    Already,
    Unserved,
}

/// Starts (idempotently) run `thread` of a schedule and rings a worker.
async fn start(svc: &Services, spec: &ScheduleSpec, input: &Value, thread: &str) -> Result<Started, StoreError> {
    let Some(entry) = svc.catalog.entry(&svc.store, &spec.workflow).await? else {
        return Ok(Started::Unserved);
    };
    let t = ThreadId::new(thread.to_owned()).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let trace = crate::publish::new_traceparent();
    let opts = CreateOptions {
        timeout: spec.timeout_secs.map(Duration::from_secs_f64),
        parent: None,
        queue: None,
        flow: None,
        priority: 0,
        input_version: spec.input_version,
        // The input's type is the newest code's (its name, not its version, is taken here).
        input_type: entry.input_type.clone(),
    };
    match svc
        .store
        .create_with(&t, &spec.workflow, entry.version, &input.to_string(), &trace, &opts)
        .await?
    {
        CreateOutcome::Created => {
            // (Started on the default queue, as `opts` says: no read of the run's queue.)
            ring_on(svc, (None, None), &t, Some(0), TaskReason::Start, Some(&trace), 0).await;
            Ok(Started::Yes)
        }
        CreateOutcome::Exists(_) | CreateOutcome::Conflict(_) => Ok(Started::Already),
    }
}

/// Whether run `thread` has not ended (a blocked run has not).
async fn active(svc: &Services, thread: Option<&str>) -> Result<Option<ThreadId>, StoreError> {
    let Some(t) = thread.and_then(|t| ThreadId::new(t.to_owned()).ok()) else {
        return Ok(None);
    };
    Ok(match svc.store.header(&t).await? {
        Some(h) if !h.status.is_final() => Some(t),
        _ => None,
    })
}

/// One pass over schedule `id`, due at `next` (ms), at server time `now`.
///
/// The order makes each firing one decision: runs an earlier move left pending are created
/// first; then this replica decides (overlap judged against the last run), moves the
/// schedule on with the runs it decided recorded as pending (compare-and-set on the next
/// firing, the last run it read and no pending runs), and only then creates them. A replica
/// that loses the race creates nothing, so no run is left untracked by the schedule.
async fn fire(svc: &Services, id: &str, next: u64, now: u64) -> Result<Fired, StoreError> {
    let mut rec = match still_due(svc, id, next).await? {
        ControlFlow::Continue(rec) => rec,
        ControlFlow::Break(fired) => return Ok(fired),
    };
    let read_last = rec.last.as_ref().map(|l| l.0.as_str());
    let spec = parse_spec(&rec.spec)?;
    let timing = match Timing::of(&spec) {
        Ok(t) => t,
        Err(e) => return stop_unparsable(svc, id, next, read_last, &e).await,
    };
    // With no live worker for the workflow (a deploy that replaced every worker at once),
    // nothing is decided: the schedule stays due, as if its schedulers were down, and once a
    // worker registers the catch-up policy decides the firings it missed.
    if svc.catalog.entry(&svc.store, &spec.workflow).await?.is_none() {
        return Ok(Fired::Unserved(spec.workflow));
    }
    let (times, skipped, new_next) = due_firings(&spec, &timing, next, now);
    let mut pass = Pass::new(skipped, rec.buffered.is_some());
    for at in times {
        let thread = firing_thread(id, at);
        // The run this firing would overlap: one the pass knows of, or the last run if it
        // has not ended.
        let busy = match pass.known_overlap(spec.overlap) {
            Some(busy) => busy,
            None => active(svc, read_last)
                .await?
                .filter(|p| p.as_str() != thread)
                .map(Busy::Running),
        };
        if let Some(prev) = pass.decide(spec.overlap, busy, thread, at) {
            let reason = format!("schedule {id}: the firing at {at} cancels the previous run");
            let _ = svc.store.cancel(&prev, &reason).await?;
        }
    }
    if svc.publisher.failpoints().check(BEFORE_ADVANCE).await.is_err() {
        return Ok(Fired::Stayed);
    }
    if svc
        .store
        .schedule_advance(id, next, &pass.advance(new_next, read_last))
        .await?
    {
        if !pass.decided.is_empty() || pass.skipped > 0 {
            info!(schedule = %id, fired = pass.decided.len(), skipped = pass.skipped, next = ?new_next, "schedule fired");
        }
        rec.pending = pass.decided;
        create_pending(svc, &rec).await?;
    }
    Ok(Fired::Moved)
}

/// Schedule `id` as a pass over it at `next` finds it: first creating runs an earlier move
/// left pending; or what the pass did when it is no longer due at `next` (or paused).
async fn still_due(svc: &Services, id: &str, next: u64) -> Result<ControlFlow<Fired, ScheduleRecord>, StoreError> {
    let Some(rec) = svc.store.schedule_get(id).await? else {
        return Ok(ControlFlow::Break(Fired::Moved));
    };
    if rec.next != Some(next) || rec.paused.is_some() {
        return Ok(ControlFlow::Break(Fired::Moved));
    }
    if rec.pending.is_empty() {
        return Ok(ControlFlow::Continue(rec));
    }
    create_pending(svc, &rec).await?;
    Ok(match svc.store.schedule_get(id).await? {
        Some(r) if r.pending.is_empty() && r.next == Some(next) => ControlFlow::Continue(r),
        _ => ControlFlow::Break(Fired::Stayed),
    })
}

/// Stops a schedule whose stored spec no longer parses (it will not fire again).
async fn stop_unparsable(
    svc: &Services,
    id: &str,
    next: u64,
    read_last: Option<&str>,
    e: &TimingError,
) -> Result<Fired, StoreError> {
    warn!(schedule = %id, error = %e, "a stored schedule no longer parses; it stops");
    let stop = Advance {
        read_last,
        ..Advance::default()
    };
    svc.store.schedule_advance(id, next, &stop).await?;
    Ok(Fired::Moved)
}

/// The decisions of one pass over a schedule's due firings.
struct Pass {
    /// Firings to start (thread id, firing time), oldest first.
    decided: Vec<(String, u64)>,
    /// Firings skipped (missed ones included).
    skipped: u64,
    /// What becomes of the held firing (see [`Advance::buffered`]).
    buffered: Option<Option<u64>>,
    /// A firing was held before this pass.
    held_before: bool,
}

impl Pass {
    /// A pass with `skipped` firings missed so far, nothing decided.
    fn new(skipped: u64, held_before: bool) -> Self {
        Self {
            decided: Vec::new(),
            skipped,
            buffered: None,
            held_before,
        }
    }

    /// The run a firing would overlap when the pass knows it without a read: one decided in
    /// this pass (not created yet), or a held firing; `None`: the last run must be read.
    /// (allow_all starts every firing: no read.)
    fn known_overlap(&self, overlap: Overlap) -> Option<Option<Busy>> {
        match (overlap, self.decided.last()) {
            (Overlap::AllowAll, _) => Some(None),
            (_, Some(_)) => Some(Some(Busy::Decided)),
            // A firing held back (before this pass, or by it) starts first (when the run
            // before it ended, the buffer's pass starts it): a later firing never overtakes
            // it, even when that run ended while this pass went on.
            (Overlap::BufferOne, None) if self.held_before || matches!(self.buffered, Some(Some(_))) => {
                Some(Some(Busy::Held))
            }
            (_, None) => None,
        }
    }

    /// Decides firing `at` (run `thread`) by the overlap policy, given the run it overlaps:
    /// skipped, held, or to start; returns the running run to cancel before it starts.
    fn decide(&mut self, overlap: Overlap, busy: Option<Busy>, thread: String, at: u64) -> Option<ThreadId> {
        let mut cancel = None;
        if let Some(prev) = busy {
            match overlap {
                Overlap::Skip => {
                    self.skipped += 1;
                    return None;
                }
                Overlap::BufferOne => {
                    if self.held_before || self.buffered.is_some() {
                        self.skipped += 1;
                    } else {
                        self.buffered = Some(Some(at));
                    }
                    return None;
                }
                Overlap::CancelPrevious => match prev {
                    // Not created yet: it is not started at all. (Nothing is held under
                    // this policy.)
                    Busy::Decided | Busy::Held => {
                        self.decided.pop();
                        self.skipped += 1;
                    }
                    Busy::Running(prev) => cancel = Some(prev),
                },
                Overlap::AllowAll => {}
            }
        }
        self.decided.push((thread, at));
        cancel
    }

    /// The schedule's move: on to `next`, with the runs decided recorded as pending.
    fn advance<'a>(&'a self, next: Option<u64>, read_last: Option<&'a str>) -> Advance<'a> {
        Advance {
            next,
            last: self.decided.last().map(|(t, at)| (t.as_str(), *at)),
            fired: self.decided.len() as u64,
            skipped: self.skipped,
            buffered: self.buffered,
            read_last,
            pending: &self.decided,
        }
    }
}

/// What one pass over a due schedule did.
#[derive(Debug)]
enum Fired {
    /// It is no longer due at the time it was read (this pass or another moved it on, or it
    /// was paused or deleted).
    Moved,
    /// Still due (a replica stalled between its decision and its move, or lost the race).
    Stayed,
    /// Still due: no live worker serves this workflow, so nothing was decided.
    Unserved(String),
}

/// The firings a pass over a schedule due at `next` considers at `now` (those the catch-up
/// policy keeps, oldest first), how many it skips as missed, and the firing after them.
fn due_firings(spec: &ScheduleSpec, timing: &Timing, next: u64, now: u64) -> (Vec<u64>, u64, Option<u64>) {
    // Every firing from `next` up to now; those later than the window are missed.
    let mut times = vec![next];
    while times.len() < MAX_PASS {
        match timing.after(*times.last().unwrap_or(&next)) {
            Some(t) if t <= now => times.push(t),
            _ => break,
        }
    }
    let new_next = timing.after(now.max(*times.last().unwrap_or(&next)));
    let window = spec.catchup_window_secs * 1000;
    let split = times.partition_point(|t| now.saturating_sub(*t) > window);
    let kept = match spec.catchup {
        Catchup::Latest => split.min(1),
        Catchup::All => split.min(spec.catchup_limit as usize),
        Catchup::None => 0,
    };
    let skipped = (split - kept) as u64;
    (times.split_off(split - kept), skipped, new_next)
}

/// The run a firing would overlap.
enum Busy {
    /// Decided in this pass, not created yet.
    Decided,
    /// Created and not ended.
    Running(ThreadId),
    /// An earlier firing `buffer_one` holds back, not started yet.
    Held,
}

/// Creates the runs a schedule's last move recorded as pending (idempotently: a run's thread
/// id is its firing's) and forgets them. Every replica does this for any schedule it finds
/// with pending runs, so a replica that died between the move and the creates loses none.
/// With no live worker for the workflow they stay pending (and the schedule waits) until one
/// registers.
async fn create_pending(svc: &Services, rec: &ScheduleRecord) -> Result<(), StoreError> {
    if rec.pending.is_empty() {
        return Ok(());
    }
    if svc.publisher.failpoints().check(BEFORE_CREATE).await.is_err() {
        return Ok(());
    }
    let spec = parse_spec(&rec.spec)?;
    for (thread, _) in &rec.pending {
        if let Started::Unserved = start(svc, &spec, &rec.input, thread).await? {
            warn!(schedule = %rec.id, workflow = %spec.workflow, thread = %thread, "no live worker serves the workflow; the decided run is created once one registers");
            return Ok(());
        }
    }
    svc.store.schedule_settle(&rec.id, &rec.pending).await?;
    Ok(())
}

/// A buffered firing whose previous run ended is started.
async fn unbuffer(svc: &Services, id: &str, at: u64) -> Result<(), StoreError> {
    let Some(rec) = svc.store.schedule_get(id).await? else {
        return Ok(());
    };
    if !rec.pending.is_empty() {
        return create_pending(svc, &rec).await;
    }
    let read_last = rec.last.as_ref().map(|l| l.0.as_str());
    if rec.buffered != Some(at) || active(svc, read_last).await?.is_some() {
        return Ok(());
    }
    let spec = parse_spec(&rec.spec)?;
    if svc.catalog.entry(&svc.store, &spec.workflow).await?.is_none() {
        return Ok(());
    }
    let thread = firing_thread(id, at);
    if svc.store.schedule_unbuffer(id, at, &thread, read_last).await? {
        let mut rec = rec.clone();
        rec.pending = vec![(thread, at)];
        create_pending(svc, &rec).await?;
    }
    Ok(())
}

/// Due schedules read per query, and at most this many handled in one pass.
const DUE_PAGE: usize = 64;
const MAX_DUE: usize = 4096;
/// How often each replica re-seals schedules whose input another payload key sealed.
const RESEAL_EVERY: Duration = Duration::from_secs(300);

/// The firing loop every scheduler replica runs, every `tick`, until `stop`. It also
/// re-seals schedules with the sealing payload key at start-up and every [`RESEAL_EVERY`]
/// (README "Key rotation"), so no schedule depends on a key the runbook drops.
pub(crate) async fn run(slot: Arc<OnceLock<Services>>, tick: Duration, stop: CancellationToken) {
    let mut every = tokio::time::interval(tick);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = Failing::default();
    let mut reseal_due = Instant::now();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = every.tick() => {}
        }
        let Some(svc) = slot.get() else { continue };
        if Instant::now() >= reseal_due {
            match reseal_all(svc).await {
                Ok(()) => reseal_due = Instant::now() + RESEAL_EVERY,
                Err(e) => warn!(error = %e, "re-sealing schedules failed; the next tick tries again"),
            }
        }
        if let Err(e) = pass(svc, &mut failing).await {
            warn!(error = %e, "schedule pass failed; the next tick tries again");
        }
    }
}

/// The schedules whose last firing attempt failed, with the error logged for each: a
/// schedule that keeps failing (its input sealed with a key no longer configured) is logged
/// once, not on every tick, and logged again when it recovers.
#[derive(Default)]
struct Failing(HashMap<String, String>);

impl Failing {
    fn failed(&mut self, id: &str, e: &StoreError) {
        let text = e.to_string();
        if self.0.get(id) != Some(&text) {
            warn!(schedule = %id, error = %text, "firing a schedule failed; it is tried again on each tick, and the other schedules go on");
            self.0.insert(id.to_owned(), text);
        }
    }

    /// Logged once while no live worker serves the schedule's workflow.
    fn unserved(&mut self, id: &str, workflow: &str) {
        let text = format!("no live worker serves {workflow:?}");
        if self.0.get(id) != Some(&text) {
            warn!(schedule = %id, workflow = %workflow, "no live worker serves the workflow: the schedule waits, and once one registers its catch-up policy decides the firings it missed");
            self.0.insert(id.to_owned(), text);
        }
    }

    fn ok(&mut self, id: &str) {
        if self.0.remove(id).is_some() {
            info!(schedule = %id, "a schedule that could not fire fires again");
        }
    }
}

/// One pass: fires every due schedule. A schedule that fails stays due, and the ones due
/// after it are read past it, so no number of failing schedules holds the others back.
async fn pass(svc: &Services, failing: &mut Failing) -> Result<(), StoreError> {
    let now = svc.store.server_time().await?;
    // Runs decided by a move whose replica died (or stalled) before creating them.
    for id in svc.store.schedules_pending().await? {
        let done = match svc.store.schedule_get(&id).await {
            Ok(Some(rec)) => create_pending(svc, &rec).await,
            Ok(None) => svc.store.schedule_settle(&id, &[]).await.map(|_| ()),
            Err(e) => Err(e),
        };
        if let Err(e) = done {
            failing.failed(&id, &e);
        }
    }
    let (mut stayed, mut handled) = (0, 0);
    while handled < MAX_DUE {
        let page = svc.store.schedules_due(now, stayed, DUE_PAGE).await?;
        let n = page.len();
        for (id, next) in page {
            match fire(svc, &id, next, now).await {
                Ok(Fired::Moved) => failing.ok(&id),
                Ok(Fired::Stayed) => stayed += 1,
                Ok(Fired::Unserved(workflow)) => {
                    stayed += 1;
                    failing.unserved(&id, &workflow);
                }
                Err(e) => {
                    stayed += 1;
                    failing.failed(&id, &e);
                }
            }
        }
        handled += n;
        if n < DUE_PAGE {
            break;
        }
    }
    for (id, at) in svc.store.schedules_buffered().await? {
        if let Err(e) = unbuffer(svc, &id, at).await {
            failing.failed(&id, &e);
        }
    }
    Ok(())
}

/// Seals every schedule's input (and the namespace's flow naming secret) anew with the
/// sealing key when another key (or none) sealed it. A schedule that no configured key opens
/// is named (it cannot fire until a key that opens it is configured again).
async fn reseal_all(svc: &Services) -> Result<(), StoreError> {
    let (mut done, mut unreadable) = (0, Vec::new());
    for id in svc.store.schedule_ids().await? {
        match svc.store.schedule_reseal(&id).await {
            Ok(Resealed::Done) => done += 1,
            Ok(Resealed::Current | Resealed::Changed) => {}
            Err(e @ (StoreError::Sealed(_) | StoreError::Corrupt(_))) => unreadable.push(format!("{id}: {e}")),
            Err(e) => return Err(e),
        }
    }
    if svc.store.naming_reseal().await? == Resealed::Done {
        info!("the namespace's flow naming secret re-sealed with the sealing payload key");
    }
    if done > 0 {
        info!(schedules = done, "schedules re-sealed with the sealing payload key");
    }
    if !unreadable.is_empty() {
        warn!(
            count = unreadable.len(),
            first = %unreadable[0],
            "schedules whose input no configured payload key opens: they cannot fire until the key that sealed them is configured again (SAVEPOINT_PAYLOAD_KEYS)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(cron: Option<&str>, every: Option<u64>, tz: Option<&str>) -> ScheduleSpec {
        ScheduleSpec {
            workflow: "w".into(),
            cron: cron.map(str::to_owned),
            every_secs: every,
            timezone: tz.map(str::to_owned),
            overlap: Overlap::Skip,
            catchup: Catchup::Latest,
            catchup_limit: 10,
            catchup_window_secs: 60,
            timeout_secs: None,
            input_version: None,
        }
    }

    fn ms(s: &str) -> u64 {
        chrono::DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis() as u64
    }

    #[test]
    fn cron_fires_in_its_time_zone_and_intervals_on_multiples() {
        // 09:30 on weekdays in Berlin is 08:30 UTC in winter, 07:30 UTC in summer.
        let t = Timing::of(&spec(Some("30 9 * * MON-FRI"), None, Some("Europe/Berlin"))).unwrap();
        assert_eq!(t.after(ms("2026-12-04T08:30:00Z")), Some(ms("2026-12-07T08:30:00Z")));
        assert_eq!(t.after(ms("2026-07-01T00:00:00Z")), Some(ms("2026-07-01T07:30:00Z")));
        let t = Timing::of(&spec(Some("*/5 * * * * *"), None, None)).unwrap();
        assert_eq!(t.after(ms("2026-12-02T10:00:02Z")), Some(ms("2026-12-02T10:00:05Z")));
        assert_eq!(
            t.after(ms("2026-12-02T10:00:02.700Z")),
            Some(ms("2026-12-02T10:00:05Z"))
        );
        let t = Timing::of(&spec(None, Some(60), None)).unwrap();
        assert_eq!(t.after(ms("2026-12-02T10:00:00Z")), Some(ms("2026-12-02T10:01:00Z")));
        assert_eq!(
            firing_thread("nightly", ms("2026-12-02T10:01:00Z")),
            "nightly-20261202T100100Z"
        );
    }

    #[test]
    fn bad_specs_are_refused_with_the_reason() {
        let e = |s| Timing::of(&s).err().unwrap().to_string();
        assert!(e(spec(Some("61 * * * *"), None, None)).contains("cron"));
        assert!(e(spec(Some("* * * * *"), None, Some("Mars/Olympus"))).contains("unknown time zone"));
        assert!(e(spec(None, None, None)).contains("exactly one"));
        assert!(e(spec(Some("* * * * *"), Some(5), None)).contains("exactly one"));
        assert!(e(spec(None, Some(0), None)).contains("every_secs"));
        assert!(e(spec(None, Some(5), Some("UTC"))).contains("cron schedules only"));
    }
}
