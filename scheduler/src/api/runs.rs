//! Starting, reading and listing runs.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use savepoint_core::ids::ThreadId;
use savepoint_core::metrics::{inc, metrics};
use savepoint_core::protocol::TaskReason;
use savepoint_store::{CreateOptions, CreateOutcome, Flow};
use savepoint_store::{RunHeader, RunStatus, ScriptStore, StoreError};
use serde::Deserialize;
use tracing::info;

use super::extract::{thread_id, ApiJson, ApiPath, ApiQuery};
use super::model::{ErrorBody, ExportView, HistoryView, RunList, RunView, StartReply, StartRequest, Status, WaitingOn};
use super::{views, ApiError, ApiState, Reply, Services};
use crate::publish::new_traceparent;

/// Largest `limit` of `GET /v1/runs`.
const MAX_LIST: usize = 1000;
/// Default `limit` of `GET /v1/runs`.
const DEFAULT_LIST: usize = 50;
/// Events returned by history.
const HISTORY_EVENTS: usize = 1000;

async fn catalog_names(store: &ScriptStore) -> Result<Vec<String>, StoreError> {
    Ok(store.catalog().await?.into_keys().collect())
}

/// The fleet's catalog as the API last read it: a start reads Redis at most once a second,
/// and at once when the workflow is not in it (a worker that just started).
#[derive(Default)]
pub(crate) struct CatalogCache(std::sync::Mutex<Option<(tokio::time::Instant, CatalogMap)>>);

type CatalogMap = std::collections::BTreeMap<String, savepoint_store::CatalogEntry>;

/// How long the API trusts its copy of the catalog.
const CATALOG_FRESH: std::time::Duration = std::time::Duration::from_secs(1);

impl CatalogCache {
    pub(crate) async fn entry(
        &self,
        store: &ScriptStore,
        workflow: &str,
    ) -> Result<Option<savepoint_store::CatalogEntry>, StoreError> {
        if let Some((at, map)) = self.0.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            if at.elapsed() < CATALOG_FRESH {
                if let Some(e) = map.get(workflow) {
                    return Ok(Some(e.clone()));
                }
            }
        }
        let map = store.catalog().await?;
        let found = map.get(workflow).cloned();
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some((tokio::time::Instant::now(), map));
        Ok(found)
    }
}

/// Start a run
///
/// Idempotent on thread id + workflow + input: the same request again answers 200 with the
/// run as it stands; the same thread id with another workflow or input is 409. The input is
/// checked against the schema the workflow's workers published (422).
#[utoipa::path(
    post,
    path = "/v1/runs",
    operation_id = "start_run",
    tag = "runs",
    request_body = StartRequest,
    responses(
        (status = 201, description = "Created; a worker will pick it up", body = StartReply, links(
            ("GetRun" = (operation_id = "get_run", parameters(("thread_id" = "$response.body#/thread_id")))),
            ("GetHistory" = (operation_id = "get_history", parameters(("thread_id" = "$response.body#/thread_id")))),
            ("ExportRun" = (operation_id = "export_run", parameters(("thread_id" = "$response.body#/thread_id")))),
            ("AwaitResult" = (operation_id = "await_result", parameters(("thread_id" = "$response.body#/thread_id")))),
            ("ResumeRun" = (operation_id = "resume_run", parameters(("thread_id" = "$response.body#/thread_id")))),
            ("CancelRun" = (operation_id = "cancel_run", parameters(("thread_id" = "$response.body#/thread_id")))),
            ("RetryRun" = (operation_id = "retry_run", parameters(("thread_id" = "$response.body#/thread_id")))),
            ("SendSignal" = (operation_id = "send_signal", parameters(("thread_id" = "$response.body#/thread_id")))),
            ("DiagnoseRun" = (operation_id = "diagnose_run", parameters(("thread_id" = "$response.body#/thread_id")))),
            ("PauseRun" = (operation_id = "pause_run", parameters(("thread_id" = "$response.body#/thread_id")))),
            ("UnpauseRun" = (operation_id = "unpause_run", parameters(("thread_id" = "$response.body#/thread_id")))),
            ("ForkRun" = (operation_id = "fork_run", parameters(("thread_id" = "$response.body#/thread_id")))),
            ("RestartRun" = (operation_id = "restart_run", parameters(("thread_id" = "$response.body#/thread_id")))),
        )),
        (status = 200, description = "A run with this thread id, workflow and input exists: it as it stands", body = StartReply),
        (status = 409, description = "The thread id is used by a run with another workflow or input", body = ErrorBody),
        (status = 422, description = "No live worker serves the workflow, or the input breaks its schema", body = ErrorBody),
    )
)]
pub(crate) async fn start(
    State(st): State<ApiState>,
    principal: Option<axum::Extension<savepoint_runtime::security::Principal>>,
    ApiJson(mut req): ApiJson<StartRequest>,
) -> Reply<StartReply> {
    let svc = st.services()?;
    let thread = match req.thread_id.take() {
        Some(raw) => thread_id(raw)?,
        None => ThreadId::generate(&req.workflow),
    };
    let Some(entry) = svc.catalog.entry(&svc.store, &req.workflow).await? else {
        inc(&metrics().runs_started, &[("outcome", "unknown_workflow")]);
        let names = catalog_names(&svc.store).await?;
        return Err(unknown_workflow(&req.workflow, &names));
    };
    let (mut opts, input) = start_options(&req, st.max_body)?;
    check_input(svc, &req, entry.version).await?;
    // The input was checked against the newest code's schema: it is at that code's version of
    // the input's type.
    opts.input_version = entry.input_version;
    opts.input_type = entry.input_type.clone();
    // The run's trace starts at this request's span when traces are exported.
    let trace = savepoint_runtime::telemetry::current_traceparent().unwrap_or_else(new_traceparent);
    let outcome = svc
        .store
        .create_with(&thread, &req.workflow, entry.version, &input, &trace, &opts)
        .await?;
    inc(&metrics().runs_started, &[("outcome", start_outcome(&outcome))]);
    if let CreateOutcome::Created = outcome {
        info!(thread.id = %thread, workflow = %req.workflow, workflow.version = entry.version, "run created");
        if let (true, Some(p)) = (st.auth.enabled(), principal) {
            super::auth::audit(&st, thread.as_str(), &p.name, "POST start").await;
        }
        // A failed publish is only logged: the run has a due time and the scanner starts
        // it after the redelivery delay.
        let q = req.queue.as_deref();
        super::checks::ring_on(svc, (q, None), &thread, Some(0), TaskReason::Start, Some(&trace), 0).await;
    }
    start_reply(&thread, outcome)
}

/// The 422 of a start naming a workflow no live worker serves, with the ones they do.
fn unknown_workflow(workflow: &str, names: &[String]) -> ApiError {
    let known = if names.is_empty() {
        "none (no live worker serves a workflow)".to_owned()
    } else {
        names.join(", ")
    };
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        format!("unknown workflow {workflow:?}; known: {known}"),
    )
}

/// The run options and the input text a start asks for, checked: timeout, queue, flow,
/// priority and the input's size (422, 413).
fn start_options(req: &StartRequest, max_body: usize) -> Result<(CreateOptions, String), ApiError> {
    let timeout = match req.timeout_secs {
        None => None,
        Some(n) if (1.0..=31_536_000.0).contains(&n) => Some(std::time::Duration::from_secs_f64(n)),
        Some(n) => {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("timeout_secs must be between 1 and 31536000 (a year), not {n}"),
            ))
        }
    };
    if let Some(q) = &req.queue {
        savepoint_broker::valid_queue(q).map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()))?;
    }
    let flow = match &req.flow {
        Some(f) => Some(flow_of(f, &req.workflow, &req.input)?),
        None => None,
    };
    let priority = match req.priority {
        None => 0,
        Some(p) if p <= 9 => p as u8,
        Some(p) => return Err(ApiError::unprocessable(format!("priority must be 0 to 9, not {p}"))),
    };
    let input = req.input.to_string();
    if input.len() > max_body {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("input exceeds the limit of {max_body} bytes (scheduler.max_input_bytes)"),
        ));
    }
    let opts = CreateOptions {
        timeout,
        parent: None,
        queue: req.queue.clone(),
        flow,
        priority,
        input_version: None,
        input_type: None,
    };
    Ok((opts, input))
}

/// Checks a start's input against the schema its workflow version's workers published (422).
async fn check_input(svc: &Services, req: &StartRequest, version: u32) -> Result<(), ApiError> {
    let what = super::checks::Expects::Input;
    let schema = super::checks::schema_for(svc, &req.workflow, version, what).await?;
    if let Err(e) = super::checks::check_value(schema.as_ref(), &req.input, what, &req.workflow) {
        inc(&metrics().runs_started, &[("outcome", "invalid_input")]);
        return Err(e);
    }
    Ok(())
}

/// The `outcome` label of `runs_started` for what a create found.
fn start_outcome(outcome: &CreateOutcome) -> &'static str {
    match outcome {
        CreateOutcome::Created => "created",
        CreateOutcome::Exists(_) => "exists",
        CreateOutcome::Conflict(_) => "conflict",
    }
}

/// The answer to a start: 201 for a new run, 200 with the run as it stands, 409 for a
/// thread id another workflow or input uses.
fn start_reply(thread: &ThreadId, outcome: CreateOutcome) -> Reply<StartReply> {
    let (code, status) = match outcome {
        CreateOutcome::Created => (StatusCode::CREATED, Status::PENDING),
        CreateOutcome::Exists(status) => (StatusCode::OK, status.into()),
        CreateOutcome::Conflict(workflow) => {
            return Err(ApiError::conflict(format!(
            "thread id {thread} is already used by a run of workflow {workflow:?} with a different workflow or input"
        )))
        }
    };
    Ok((
        code,
        Json(StartReply {
            thread_id: thread.as_str().to_owned(),
            status,
        }),
    ))
}

/// Get a run
///
/// Status, position (`at`: the entry it is at and a sentence saying so), output or error,
/// what it waits for and why a runnable run is not moving.
#[utoipa::path(
    get,
    path = "/v1/runs/{thread_id}",
    operation_id = "get_run",
    tag = "runs",
    params(super::ThreadParam),
    responses((status = 200, description = "The run", body = RunView, links(
        ("ResolveBlockedEffect" = (operation_id = "resolve_effect", parameters(
            ("thread_id" = "$response.body#/thread_id"),
            ("key" = "$response.body#/blocked_effect"),
        ))),
        ("ResumeRun" = (operation_id = "resume_run", parameters(("thread_id" = "$response.body#/thread_id")))),
    )))
)]
pub(crate) async fn get_run(State(st): State<ApiState>, ApiPath(raw): ApiPath<String>) -> Reply<RunView> {
    let thread = thread_id(raw)?;
    let store = &st.services()?.store;
    let header = store
        .header(&thread)
        .await?
        .ok_or_else(|| ApiError::run_not_found(&thread))?;
    if header.status.is_final() {
        return Ok((StatusCode::OK, Json(run_view(store, &header).await?)));
    }
    // One clock read serves the view and its waiting cause.
    let (now, workers) = tokio::try_join!(store.server_time(), store.live_workers())?;
    let mut view = run_view_at(store, &header, now).await?;
    view.waiting = waiting_of(st.services()?, &header, &view, now, &workers).await?;
    Ok((StatusCode::OK, Json(view)))
}

/// Why run `h` (seen as `view`) is not running, reading what its cause needs.
async fn waiting_of(
    svc: &super::Services,
    h: &RunHeader,
    view: &RunView,
    now: u64,
    workers: &[savepoint_store::WorkerInfo],
) -> Result<Option<super::model::Waiting>, ApiError> {
    let held = view.pause.as_ref().filter(|p| !p.stopped).map(|p| p.pause.clone());
    let mut f = super::waiting::base_facts(svc, h, now, workers, held).await?;
    if super::waiting::needs_depth(h, &f) {
        f.depth = svc.publisher.queue_depth(h.queue.as_deref()).await;
    }
    f.timer = view
        .at
        .name
        .clone()
        .filter(|_| view.at.kind.as_deref() == Some("sleep"));
    Ok(super::waiting::waiting(h, &f))
}

/// The run view with where the run is: the store's time, and the entry it sleeps in.
pub(crate) async fn run_view(store: &ScriptStore, h: &RunHeader) -> Result<RunView, ApiError> {
    // The clock only matters where a due time or a lease can be past (an ended, blocked or
    // untimed waiting run, e.g. every answer of the result long poll, costs no extra read).
    let clocked = match h.status {
        RunStatus::Sleeping | RunStatus::Pending | RunStatus::Running => true,
        RunStatus::Waiting => h.due.is_some(),
        _ => false,
    };
    let now = if clocked { store.server_time().await? } else { 0 };
    run_view_at(store, h, now).await
}

/// [`run_view`] as of store time `now` (read by the caller).
async fn run_view_at(store: &ScriptStore, h: &RunHeader, now: u64) -> Result<RunView, ApiError> {
    let last = match (h.status, h.steps.checked_sub(1)) {
        (RunStatus::Sleeping, Some(i)) if h.wait_effect.is_none() => store.entry(&h.thread, i).await?,
        _ => None,
    };
    // A run that may still take a slice is held by a workflow, version or queue pause in force.
    let live = !h.status.is_final() && !matches!(h.status, RunStatus::Blocked | RunStatus::Paused);
    let pauses = if live { store.pauses().await? } else { Vec::new() };
    Ok(views::run_view(h, &views::Facts { now, last, pauses }))
}

/// A run's history
///
/// Its journal entries (steps, effects with their keys, sleeps, answers) and its event log
/// (claims, takeovers, crashes, effects done, …).
#[utoipa::path(
    get,
    path = "/v1/runs/{thread_id}/history",
    operation_id = "get_history",
    tag = "runs",
    params(super::ThreadParam),
    responses((status = 200, description = "Journal and events", body = HistoryView))
)]
pub(crate) async fn history(State(st): State<ApiState>, ApiPath(raw): ApiPath<String>) -> Reply<HistoryView> {
    let thread = thread_id(raw)?;
    let store = &st.services()?.store;
    let (header, journal) = store
        .get(&thread)
        .await?
        .ok_or_else(|| ApiError::run_not_found(&thread))?;
    let events = store.events(&thread, HISTORY_EVENTS).await?;
    Ok((StatusCode::OK, Json(views::history_view(&header, &journal, &events))))
}

/// Export a run
///
/// A serialisable checkpoint: input, output and the whole journal.
#[utoipa::path(
    get,
    path = "/v1/runs/{thread_id}/export",
    operation_id = "export_run",
    tag = "runs",
    params(super::ThreadParam),
    responses((status = 200, description = "The checkpoint", body = ExportView))
)]
pub(crate) async fn export(State(st): State<ApiState>, ApiPath(raw): ApiPath<String>) -> Reply<ExportView> {
    let thread = thread_id(raw)?;
    let (header, journal) = st
        .services()?
        .store
        .get(&thread)
        .await?
        .ok_or_else(|| ApiError::run_not_found(&thread))?;
    Ok((StatusCode::OK, Json(views::export_view(&header, &journal))))
}

/// Query of `GET /v1/runs` (kept as text so bad values get a precise message).
#[derive(Debug, Deserialize)]
pub(crate) struct ListQuery {
    status: Option<String>,
    limit: Option<String>,
    waiting_on: Option<String>,
}

/// The `waiting_on` of a list query, checked (an empty or unknown value is a 400).
fn parse_waiting_on(q: &ListQuery) -> Result<Option<WaitingOn>, ApiError> {
    match q.waiting_on.as_deref().map(str::trim) {
        None => Ok(None),
        Some(s) => WaitingOn::parse(s).map(Some).ok_or_else(|| {
            let known: Vec<&str> = WaitingOn::ALL.iter().map(|w| w.as_str()).collect();
            ApiError::bad_request(format!("unknown waiting_on {s:?}; use one of {}", known.join(", ")))
        }),
    }
}

fn parse_list(q: ListQuery) -> Result<(Option<RunStatus>, usize), ApiError> {
    // An empty `status=` or `limit=` is an error like any other value outside the documented
    // enum or range (schemathesis found `status=` accepted as no filter).
    let status = match q.status.as_deref().map(str::trim) {
        None => None,
        Some(s) => Some(RunStatus::parse(s).ok_or_else(|| {
            let known: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
            ApiError::bad_request(format!("unknown status {s:?}; use one of {}", known.join(", ")))
        })?),
    };
    let limit = match q.limit.as_deref().map(str::trim) {
        None => DEFAULT_LIST,
        Some(s) => s
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_LIST).contains(n))
            .ok_or_else(|| {
                ApiError::bad_request(format!("limit must be an integer from 1 to {MAX_LIST}, got {s:?}"))
            })?,
    };
    Ok((status, limit))
}

/// List runs
///
/// Recent runs, newest first, optionally of one status.
#[utoipa::path(
    get,
    path = "/v1/runs",
    operation_id = "list_runs",
    tag = "runs",
    params(
        ("status" = Option<Status>, Query, description = "Only runs with this status"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "At most this many (default 50)"),
        ("waiting_on" = Option<WaitingOn>, Query, description = "Only runs waiting on this cause, each with its `waiting` \
            (looked for among the newest runs of each status the cause can have: every waiting, blocked and paused run, \
            and the newest 2,000 pending, sleeping and running ones)"),
    ),
    responses((status = 200, description = "Runs, newest first", body = RunList, links(
        ("GetNewest" = (operation_id = "get_run", parameters(("thread_id" = "$response.body#/runs/0/thread_id")))),
        ("RetryNewest" = (operation_id = "retry_run", parameters(("thread_id" = "$response.body#/runs/0/thread_id")))),
        ("SignalNewest" = (operation_id = "send_signal", parameters(("thread_id" = "$response.body#/runs/0/thread_id")))),
        ("ResolveOnNewest" = (operation_id = "resolve_effect", parameters(("thread_id" = "$response.body#/runs/0/thread_id")))),
    )))
)]
pub(crate) async fn list(State(st): State<ApiState>, ApiQuery(q): ApiQuery<ListQuery>) -> Reply<RunList> {
    let waiting_on = parse_waiting_on(&q)?;
    let (status, limit) = parse_list(q)?;
    let svc = st.services()?;
    let runs = match waiting_on {
        Some(on) => list_waiting(svc, on, status, limit).await?,
        None => svc
            .store
            .list(status, limit)
            .await?
            .iter()
            .map(views::list_item)
            .collect(),
    };
    Ok((StatusCode::OK, Json(RunList { runs })))
}

/// Pending, sleeping and running runs a `waiting_on` list looks at, per status (the newest).
const WAITING_SCAN: usize = 2_000;

/// The statuses a run waiting on `on` can have.
fn statuses_of(on: WaitingOn) -> &'static [RunStatus] {
    use RunStatus::*;
    match on {
        WaitingOn::Human | WaitingOn::Signal | WaitingOn::Child => &[Waiting],
        WaitingOn::Timer => &[Sleeping],
        WaitingOn::FlowSlot | WaitingOn::RateLimit => &[Pending],
        WaitingOn::Worker | WaitingOn::Backlog => &[Pending, Sleeping],
        // A pause that has not stopped a run yet holds it all the same.
        WaitingOn::Paused => &[Paused, Pending, Sleeping, Waiting, Running],
        WaitingOn::BackingOff => &[Running, Sleeping, Pending],
        WaitingOn::Blocked => &[Blocked],
    }
}

/// Runs waiting on `on` (of `status` too, when given), newest first, each with its cause.
async fn list_waiting(
    svc: &super::Services,
    on: WaitingOn,
    status: Option<RunStatus>,
    limit: usize,
) -> Result<Vec<super::model::ListItem>, ApiError> {
    let (now, workers, pauses) =
        tokio::try_join!(svc.store.server_time(), svc.store.live_workers(), svc.store.pauses())?;
    let mut depths: std::collections::HashMap<Option<String>, Option<u32>> = Default::default();
    let mut out = Vec::new();
    for st in statuses_of(on).iter().filter(|s| status.is_none_or(|want| want == **s)) {
        let scan = match st {
            RunStatus::Waiting | RunStatus::Blocked | RunStatus::Paused => MAX_LIST.max(limit),
            _ => WAITING_SCAN,
        };
        for h in svc.store.list(Some(*st), scan).await? {
            // (A pause in force may hold the run whatever its header says.)
            if pauses.is_empty() && super::waiting::quick_cause(&h, now).is_some_and(|c| c != on) {
                continue;
            }
            let held = super::waiting::held_by(&h, &pauses);
            let mut f = super::waiting::base_facts(svc, &h, now, &workers, held).await?;
            // (The queue's depth only changes the numbers of these two causes.)
            if matches!(on, WaitingOn::Backlog | WaitingOn::Worker) && super::waiting::needs_depth(&h, &f) {
                if !depths.contains_key(&h.queue) {
                    let d = svc.publisher.queue_depth(h.queue.as_deref()).await;
                    depths.insert(h.queue.clone(), d);
                }
                f.depth = depths.get(&h.queue).copied().flatten();
            }
            if let Some(w) = super::waiting::waiting(&h, &f).filter(|w| w.on == on) {
                out.push(super::model::ListItem {
                    waiting: Some(w),
                    ..views::list_item(&h)
                });
            }
        }
    }
    out.sort_by(|a, b| (b.created_at, &b.thread_id).cmp(&(a.created_at, &a.thread_id)));
    out.truncate(limit);
    Ok(out)
}

/// The flow control a start asks for: its key (`<workflow>:<key>`, or the workflow alone),
/// limit and rate, checked (422).
fn flow_of(f: &super::model::FlowBody, workflow: &str, input: &serde_json::Value) -> Result<Flow, ApiError> {
    let bad = |m: String| Err(ApiError::unprocessable(m));
    let key = match (&f.key, &f.key_from) {
        (Some(_), Some(_)) => return bad("flow: give key or key_from, not both".into()),
        (Some(k), None) if k.is_empty() || k.chars().count() > 128 => {
            return bad("flow.key must be 1 to 128 characters".into())
        }
        (Some(k), None) => format!("{workflow}:{k}"),
        (None, Some(p)) => match input.pointer(p) {
            Some(serde_json::Value::String(s)) if !s.is_empty() && s.chars().count() <= 128 => {
                format!("{workflow}:{s}")
            }
            Some(v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => format!("{workflow}:{v}"),
            Some(v) => {
                return bad(format!(
                    "flow.key_from {p:?}: the input's value there is not a string (1-128 characters) or a number: {v}"
                ))
            }
            None => return bad(format!("flow.key_from {p:?}: the input has no value there")),
        },
        (None, None) => workflow.to_owned(),
    };
    let limit = match f.limit {
        None if f.rate_per_sec.is_none() => return bad("flow needs a limit, a rate_per_sec or both".into()),
        None => UNLIMITED,
        Some(n @ 1..=100_000) => n as u32,
        Some(n) => return bad(format!("flow.limit must be 1 to 100000, not {n}")),
    };
    let rate = match f.rate_per_sec {
        Some(r) if !(r > 0.0 && r <= 100_000.0) => {
            return bad(format!("flow.rate_per_sec must be above 0 and at most 100000, not {r}"))
        }
        r => r,
    };
    Ok(Flow { key, limit, rate })
}

/// The limit of a flow with only a start rate: its slots never run out.
const UNLIMITED: u32 = u32::MAX / 2;

#[cfg(test)]
mod tests {
    use super::*;

    fn q(status: Option<&str>, limit: Option<&str>) -> ListQuery {
        ListQuery {
            status: status.map(Into::into),
            limit: limit.map(Into::into),
            waiting_on: None,
        }
    }

    #[test]
    fn list_query_validation() {
        assert_eq!(parse_list(q(None, None)).unwrap(), (None, DEFAULT_LIST));
        assert_eq!(
            parse_list(q(Some("waiting"), Some("7"))).unwrap(),
            (Some(RunStatus::Waiting), 7)
        );
        assert!(parse_list(q(Some("sleepy"), None))
            .unwrap_err()
            .message
            .contains("unknown status"));
        assert!(
            parse_list(q(Some(""), None)).is_err(),
            "an empty status is not a filter"
        );
        for bad in ["0", "1001", "-1", "ten", ""] {
            assert_eq!(
                parse_list(q(None, Some(bad))).unwrap_err().status,
                StatusCode::BAD_REQUEST
            );
        }
    }
}
