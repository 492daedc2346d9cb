//! Pause and resume (ARCHITECTURE §16b): a run (`POST /v1/runs/{id}/pause`, `/unpause`), a
//! workflow, one of its versions, a task queue, or every run a list filter matches
//! (`POST /v1/pauses`, `POST /v1/pauses/resume`, `GET /v1/pauses`).

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use savepoint_runtime::security::Principal;
use savepoint_store::{
    ListFilter, Pause, PauseRecord, PauseScope, RunHeader, RunPaused, RunResumed, RunStatus, ScriptStore,
};
use tracing::{info, warn};

use super::extract::thread_id;
use super::extract::{parse_object, read_body, ApiJson, ApiPath};
use super::model::{
    ErrorBody, PauseFilter, PauseList, PauseReply, PauseRequest, PauseView, ResumeRequest, RunPauseBody, RunPauseReply,
    RunPauseView, RunUnpauseBody,
};
use super::{ApiError, ApiState, Reply, Services};

/// Most runs a filter pause or resume acts on.
const MAX_FILTER_RUNS: usize = 10_000;

/// Longest note.
const MAX_NOTE: usize = 1_000;

/// Counts a pause or resume request in `savepoint_pauses_total`.
fn count(action: &'static str, scope: &'static str) {
    savepoint_core::metrics::inc(
        &savepoint_core::metrics::metrics().pauses,
        &[("action", action), ("scope", scope)],
    );
}

/// The metric label of a pause's target.
fn scope_label(t: &Target) -> &'static str {
    match t {
        Target::Scope(PauseScope::Workflow(_)) => "workflow",
        Target::Scope(PauseScope::Version(..)) => "version",
        Target::Scope(PauseScope::Queue { .. }) => "queue",
        Target::Filter(_) => "filter",
    }
}

/// Who asked: the token's name (`anonymous` on an open API).
fn who(p: &Option<Extension<Principal>>) -> String {
    p.as_ref().map(|p| p.name.clone()).unwrap_or_else(|| "anonymous".into())
}

fn note_of(note: Option<String>) -> Result<String, ApiError> {
    let note = note.unwrap_or_default();
    if note.chars().count() > MAX_NOTE {
        return Err(ApiError::unprocessable(format!(
            "note is at most {MAX_NOTE} characters"
        )));
    }
    Ok(note)
}

/// A stored record as the API shows it, for `scope`.
pub(crate) fn pause_view(scope: Option<&PauseScope>, r: &PauseRecord) -> PauseView {
    let (kind, workflow, version, queue) = match scope {
        None => ("run", None, None, None),
        Some(PauseScope::Workflow(w)) => ("workflow", Some(w.clone()), None, None),
        Some(PauseScope::Version(w, v)) => ("version", Some(w.clone()), Some(*v), None),
        Some(PauseScope::Queue { name, .. }) => ("queue", None, None, Some(name.clone())),
    };
    PauseView {
        scope: kind.into(),
        workflow,
        version,
        queue,
        by: r.by.clone(),
        at: r.at,
        hold_timers: r.hold_timers,
        note: r.note.clone(),
    }
}

/// A pause field (`run`, `w:…`, `v:…`, `q:…`, `q:` for the default queue) and its record.
fn field_view(field: &str, record: &str) -> Option<PauseView> {
    let r = PauseRecord::decode(record)?;
    let scope = match field {
        "run" => None,
        f => Some(PauseScope::parse_field(f)?),
    };
    Some(pause_view(scope.as_ref(), &r))
}

/// The pause holding a run, for its view: its own, the one that stopped it, or a workflow,
/// version or queue pause in force that will stop it at its next claim.
pub(crate) fn run_pause_view(h: &RunHeader, pauses: &[Pause]) -> Option<RunPauseView> {
    if let Some((field, record, from)) = h.paused_by.as_ref().filter(|_| h.status == RunStatus::Paused) {
        return Some(RunPauseView {
            pause: field_view(field, record)?,
            stopped: true,
            resumes_as: Some((*from).into()),
        });
    }
    let pause = match &h.pause {
        Some(own) => field_view("run", own)?,
        None => {
            let p = pauses.iter().find(|p| holds(&p.scope, h))?;
            pause_view(Some(&p.scope), &p.record)
        }
    };
    Some(RunPauseView {
        pause,
        stopped: false,
        resumes_as: None,
    })
}

/// Whether a workflow, version or queue pause applies to the run.
pub(crate) fn holds(scope: &PauseScope, h: &RunHeader) -> bool {
    match scope {
        PauseScope::Workflow(w) => *w == h.workflow,
        PauseScope::Version(w, v) => *w == h.workflow && *v == h.workflow_version,
        // (A run created without a queue is on the default one.)
        PauseScope::Queue { name, default } => {
            h.queue.as_deref() == Some(name.as_str()) || (*default && h.queue.is_none())
        }
    }
}

/// `workflow invoice`, `workflow invoice v2`, `queue q`, `the run`.
fn scope_text(v: &PauseView) -> String {
    match (v.scope.as_str(), &v.workflow, v.version, &v.queue) {
        ("workflow", Some(w), _, _) => format!("the pause of workflow {w}"),
        ("version", Some(w), Some(n), _) => format!("the pause of workflow {w} v{n}"),
        ("queue", _, _, Some(q)) => format!("the pause of queue {q}"),
        _ => "its own pause".into(),
    }
}

/// The sentence of a stopped run's position.
pub(crate) fn stopped_text(h: &RunHeader) -> String {
    let by = h
        .paused_by
        .as_ref()
        .and_then(|(f, r, _)| field_view(f, r))
        .map(|v| {
            let scope = scope_text(&v);
            let note = if v.note.is_empty() {
                String::new()
            } else {
                format!(": {}", v.note)
            };
            format!(" ({scope}, by {}{note})", v.by)
        })
        .unwrap_or_default();
    format!("paused at entry {}{by}", h.steps)
}

/// What a pause body names: a scope, or a filter; 422 unless exactly one.
enum Target {
    Scope(PauseScope),
    Filter(PauseFilter),
}

/// The fields that name what a pause or resume acts on.
struct Named<'a> {
    workflow: &'a Option<String>,
    version: Option<u32>,
    queue: &'a Option<String>,
    filter: &'a Option<PauseFilter>,
}

fn target_of(svc: &Services, b: Named<'_>) -> Result<Target, ApiError> {
    let named = [b.workflow.is_some(), b.queue.is_some(), b.filter.is_some()];
    if named.iter().filter(|n| **n).count() != 1 {
        return Err(ApiError::unprocessable(
            "name exactly one of workflow, queue and filter",
        ));
    }
    if b.version.is_some() && b.workflow.is_none() {
        return Err(ApiError::unprocessable("version goes with workflow"));
    }
    let nonempty = |what: &str, s: &str| {
        if s.is_empty() || s.chars().count() > 256 {
            Err(ApiError::unprocessable(format!("{what} must be 1 to 256 characters")))
        } else {
            Ok(())
        }
    };
    if let Some(w) = b.workflow {
        nonempty("workflow", w)?;
        return Ok(Target::Scope(match b.version {
            Some(0) => return Err(ApiError::unprocessable("version starts at 1")),
            Some(v) => PauseScope::Version(w.clone(), v),
            None => PauseScope::Workflow(w.clone()),
        }));
    }
    if let Some(q) = b.queue {
        nonempty("queue", q)?;
        let default = svc.publisher.home_queue() == Some(q.as_str());
        return Ok(Target::Scope(PauseScope::Queue {
            name: q.clone(),
            default,
        }));
    }
    Ok(Target::Filter(b.filter.clone().unwrap_or_default()))
}

macro_rules! named {
    ($b:expr) => {
        Named {
            workflow: &$b.workflow,
            version: $b.version,
            queue: &$b.queue,
            filter: &$b.filter,
        }
    };
}

/// The runs a filter matches, newest first, at most its limit.
async fn filtered(store: &ScriptStore, f: &PauseFilter) -> Result<Vec<RunHeader>, ApiError> {
    let limit = match f.limit {
        None => MAX_FILTER_RUNS,
        Some(n @ 1..=10_000) => n as usize,
        Some(n) => return Err(ApiError::unprocessable(format!("filter.limit is 1 to 10000, not {n}"))),
    };
    let filter = ListFilter {
        status: f.status.as_ref().map(|s| s.0),
        workflow: f.workflow.clone(),
        prefix: f.prefix.clone(),
        from: None,
        until: None,
    };
    let (runs, _) = store.list_page(&filter, None, limit, limit * 20).await?;
    Ok(runs)
}

/// Checks that a live worker serves `version` of `workflow` (a resume onto it).
async fn check_served(store: &ScriptStore, workflow: &str, version: u32) -> Result<(), ApiError> {
    let catalog = store.catalog().await?;
    match catalog.get(workflow) {
        Some(e) if (e.min_version..=e.version).contains(&version) => Ok(()),
        Some(e) => Err(ApiError::unprocessable(format!(
            "no live worker serves {workflow} v{version} (they serve v{}-v{})",
            e.min_version, e.version
        ))),
        None => Err(ApiError::unprocessable(format!("no live worker serves {workflow}"))),
    }
}

/// Which live workers could claim a run a pause holds: one that serves the workflow, or
/// consumes the queue; any, for a filter that names no workflow. (A worker that does not
/// serve a run's workflow gives it back untouched; one that does not consume its queue never
/// receives its tasks.)
enum Reach<'a> {
    Workflow(&'a str),
    Queue(&'a str),
    Any,
}

impl Reach<'_> {
    fn of(target: &Target) -> Reach<'_> {
        match target {
            Target::Scope(PauseScope::Workflow(w) | PauseScope::Version(w, _)) => Reach::Workflow(w),
            Target::Scope(PauseScope::Queue { name, .. }) => Reach::Queue(name),
            Target::Filter(f) => f.workflow.as_deref().map_or(Reach::Any, Reach::Workflow),
        }
    }

    fn reaches(&self, w: &savepoint_store::WorkerInfo) -> bool {
        match self {
            // (One that names none is a registration this build could not read.)
            Reach::Workflow(name) => w.workflows.is_empty() || w.workflows.iter().any(|e| e.name == *name),
            // (A registration that names no queue could consume any.)
            Reach::Queue(q) => w.queue.is_empty() || w.queue.split(',').any(|x| x == *q),
            Reach::Any => true,
        }
    }
}

/// The live workers within `reach` that would not honour a pause (`id (host pid)`): a build
/// from before pauses claims the runs a pause holds, even those already stopped. Refused
/// (409, naming them) unless `force`; forced, they are named in the answer.
async fn unenforced(store: &ScriptStore, force: bool, reach: Reach<'_>) -> Result<Vec<String>, ApiError> {
    let old = not_keeping_pauses(store, &reach).await?;
    if old.is_empty() || force {
        if !old.is_empty() {
            warn!(workers = ?old, "pause forced while live workers of a build from before pauses may claim what it holds");
        }
        return Ok(old);
    }
    Err(ApiError::conflict(format!(
        "a pause would not hold: {} of a build from before pauses (older than d84b766, the upgrade \
         policy's floor) and would still claim the runs it holds: stop or upgrade {} (GET \
         /v1/workers lists capabilities; these have no `pause`), or pass \"force\": true to pause \
         anyway with them named in the answer",
        if old.len() == 1 {
            format!("live worker {} is", old[0])
        } else {
            format!("live workers {} are", old.join(", "))
        },
        if old.len() == 1 { "it" } else { "them" },
    )))
}

/// The live workers within `reach` whose build does not keep pauses, as `id (host pid)`.
async fn not_keeping_pauses(store: &ScriptStore, reach: &Reach<'_>) -> Result<Vec<String>, ApiError> {
    Ok(store
        .live_workers()
        .await?
        .iter()
        .filter(|w| !w.keeps("pause") && reach.reaches(w))
        .map(|w| format!("{} ({} pid {})", w.id, w.host, w.pid))
        .collect())
}

/// Pause a workflow, a version, a queue or the runs a filter matches
///
/// A workflow, version or queue pause is one record that every claim checks: once this
/// answers, no run it holds starts a slice; a slice in flight finishes its current call and
/// yields (within a heartbeat, a third of the lease). Signals and answers sent meanwhile are
/// kept. A filter pauses each run it matches now, on its own. Recorded with who asked and why.
#[utoipa::path(
    post,
    path = "/v1/pauses",
    operation_id = "pause",
    tag = "pause",
    request_body = PauseRequest,
    responses(
        (status = 200, description = "Paused", body = PauseReply),
        (status = 409, description = "A live worker of a build from before pauses would not honour it (named; `force` pauses anyway)", body = ErrorBody),
        (status = 422, description = "Not exactly one of workflow, queue and filter; a bad version, limit or note", body = ErrorBody),
    )
)]
pub(crate) async fn pause(
    State(st): State<ApiState>,
    principal: Option<Extension<Principal>>,
    ApiJson(body): ApiJson<PauseRequest>,
) -> Reply<PauseReply> {
    let svc = st.services()?;
    let target = target_of(svc, named!(body))?;
    let unenforced_by = unenforced(&svc.store, body.force.unwrap_or(false), Reach::of(&target)).await?;
    count("pause", scope_label(&target));
    let record = PauseRecord::new(
        &who(&principal),
        &note_of(body.note)?,
        body.hold_timers.unwrap_or(false),
    );
    let reply = match target {
        Target::Scope(scope) => {
            let old = svc.store.pause(&scope, &record).await?;
            let now = svc.store.pauses().await?;
            let written = now.iter().find(|p| p.scope.field() == scope.field());
            info!(pause = %scope, by = %record.by, "paused");
            PauseReply {
                pause: Some(pause_view(Some(&scope), written.map(|p| &p.record).unwrap_or(&record))),
                replaced: old.is_some(),
                runs: None,
                resumed: None,
                still_held: None,
                unenforced_by,
            }
        }
        Target::Filter(f) => {
            let mut n = 0;
            for h in filtered(&svc.store, &f).await? {
                if let RunPaused::Paused(_) = svc.store.pause_run(&h.thread, &record).await? {
                    n += 1;
                }
            }
            info!(runs = n, by = %record.by, "runs paused by filter");
            PauseReply {
                pause: None,
                replaced: false,
                runs: Some(n),
                resumed: None,
                still_held: None,
                unenforced_by,
            }
        }
    };
    Ok((StatusCode::OK, Json(reply)))
}

/// Resume a workflow, a version, a queue or the runs a filter matches
///
/// Lifts the pause and puts back every run it stopped where it found it (due now: the
/// scanner hands them to workers at its pace, no thundering herd); with `to_version`, on that
/// version of the workflow. A run that another pause holds (its own, or another scope's)
/// stays stopped. A filter resumes each run it matches.
#[utoipa::path(
    post,
    path = "/v1/pauses/resume",
    operation_id = "resume_pause",
    tag = "pause",
    request_body = ResumeRequest,
    responses(
        (status = 200, description = "Resumed", body = PauseReply),
        (status = 404, description = "That workflow, version or queue is not paused (copies left by an earlier try are lifted and its runs put back all the same)", body = ErrorBody),
        (status = 422, description = "Not exactly one of workflow, queue and filter; a version no live worker serves", body = ErrorBody),
    )
)]
pub(crate) async fn resume(
    State(st): State<ApiState>,
    principal: Option<Extension<Principal>>,
    ApiJson(body): ApiJson<ResumeRequest>,
) -> Reply<PauseReply> {
    let svc = st.services()?;
    let target = target_of(svc, named!(body))?;
    count("resume", scope_label(&target));
    let note = note_of(body.note.clone())?;
    let detail = resume_detail(&who(&principal), &note);
    let to = match (&body.workflow, body.to_version) {
        (Some(w), Some(v)) => {
            check_served(&svc.store, w, v).await?;
            Some((w.as_str(), v))
        }
        (None, Some(_)) => return Err(ApiError::unprocessable("to_version goes with workflow")),
        _ => None,
    };
    let reply = match target {
        Target::Scope(scope) => {
            let Some((record, back)) = svc.store.resume(&scope, &detail, to).await? else {
                return Err(ApiError::new(StatusCode::NOT_FOUND, format!("{scope} is not paused")));
            };
            info!(pause = %scope, resumed = back.resumed, still_held = back.still_held, "resumed");
            PauseReply {
                pause: Some(pause_view(Some(&scope), &record)),
                replaced: false,
                runs: None,
                resumed: Some(back.resumed),
                still_held: Some(back.still_held),
                unenforced_by: Vec::new(),
            }
        }
        Target::Filter(f) => {
            let (mut n, mut held) = (0, 0);
            for h in filtered(&svc.store, &f).await? {
                match svc.store.resume_run(&h.thread, &detail, None).await? {
                    RunResumed::Resumed(_) => n += 1,
                    RunResumed::Held(..) => held += 1,
                    _ => {}
                }
            }
            PauseReply {
                pause: None,
                replaced: false,
                runs: Some(n),
                resumed: Some(n),
                still_held: Some(held),
                unenforced_by: Vec::new(),
            }
        }
    };
    Ok((StatusCode::OK, Json(reply)))
}

fn resume_detail(by: &str, note: &str) -> String {
    if note.is_empty() {
        format!("resumed by {by}")
    } else {
        format!("resumed by {by}: {note}")
    }
}

/// List pauses
///
/// The workflow, version and queue pauses in force, and how many runs pauses have stopped.
#[utoipa::path(
    get,
    path = "/v1/pauses",
    operation_id = "list_pauses",
    tag = "pause",
    responses((status = 200, description = "Pauses in force", body = PauseList))
)]
pub(crate) async fn list(State(st): State<ApiState>) -> Reply<PauseList> {
    let svc = st.services()?;
    let home = svc.publisher.home_queue();
    let pauses: Vec<PauseView> = svc
        .store
        .pauses()
        .await?
        .into_iter()
        .map(|mut p| {
            if let PauseScope::Queue { name, default } = &mut p.scope {
                *default = home == Some(name.as_str());
            }
            pause_view(Some(&p.scope), &p.record)
        })
        .collect();
    let paused_runs = svc.store.paused_count().await?;
    // (Asked each time: a worker of an older build may have joined since a pause was taken.)
    let unenforced_by = match (pauses.is_empty(), paused_runs) {
        (true, 0) => Vec::new(),
        _ => not_keeping_pauses(&svc.store, &Reach::Any).await?,
    };
    Ok((
        StatusCode::OK,
        Json(PauseList {
            pauses,
            paused_runs,
            unenforced_by,
        }),
    ))
}

/// The optional body of a run's pause or unpause.
async fn run_body<T: serde::de::DeserializeOwned + Default>(st: &ApiState, req: Request) -> Result<T, ApiError> {
    let body = read_body(req, st.max_body).await?;
    if body.is_empty() || body.trim_ascii() == b"null" {
        Ok(T::default())
    } else {
        parse_object(&body)
    }
}

/// Pause a run
///
/// The run takes no new slice until it is unpaused: a slice in flight finishes its current
/// call and yields; a sleeping or waiting run is stopped when its timer or answer comes.
/// Signals and answers sent meanwhile are kept. Optional body `{"note", "hold_timers"}`.
#[utoipa::path(
    post,
    path = "/v1/runs/{thread_id}/pause",
    operation_id = "pause_run",
    tag = "pause",
    params(super::ThreadParam),
    request_body(content = Option<RunPauseBody>, description = "Optional: why, and whether its timers are held"),
    responses(
        (status = 200, description = "Paused (or paused already: its pause is in the answer)", body = RunPauseReply, links(
            ("UnpauseRun" = (operation_id = "unpause_run", parameters(("thread_id" = "$response.body#/thread_id")))),
            ("GetRun" = (operation_id = "get_run", parameters(("thread_id" = "$response.body#/thread_id")))),
        )),
        (status = 409, description = "The run has ended or is blocked; or a live worker of a build from before pauses would not honour it (named; `force` pauses anyway)", body = ErrorBody),
    )
)]
pub(crate) async fn pause_run(
    State(st): State<ApiState>,
    principal: Option<Extension<Principal>>,
    ApiPath(raw): ApiPath<String>,
    req: Request,
) -> Reply<RunPauseReply> {
    let thread = thread_id(raw)?;
    let body: RunPauseBody = run_body(&st, req).await?;
    let svc = st.services()?;
    let Some(run) = svc.store.header(&thread).await? else {
        return Err(ApiError::run_not_found(&thread));
    };
    let unenforced_by = unenforced(&svc.store, body.force.unwrap_or(false), Reach::Workflow(&run.workflow)).await?;
    let record = PauseRecord::new(
        &who(&principal),
        &note_of(body.note)?,
        body.hold_timers.unwrap_or(false),
    );
    count("pause", "run");
    let status = match svc.store.pause_run(&thread, &record).await? {
        RunPaused::Paused(s) => s,
        RunPaused::Already(_) => svc
            .store
            .header(&thread)
            .await?
            .map(|h| h.status)
            .unwrap_or(RunStatus::Paused),
        RunPaused::Missing => return Err(ApiError::run_not_found(&thread)),
        RunPaused::Terminal(s) => return Err(ApiError::conflict(format!("run is {s}; only a live run is paused"))),
    };
    info!(thread.id = %thread, by = %record.by, "run paused");
    let h = svc.store.header(&thread).await?;
    Ok((
        StatusCode::OK,
        Json(RunPauseReply {
            thread_id: thread.to_string(),
            status: h.as_ref().map(|h| h.status).unwrap_or(status).into(),
            pause: h
                .as_ref()
                .and_then(|h| h.pause.as_deref())
                .and_then(|r| field_view("run", r)),
            held_by: None,
            unenforced_by,
        }),
    ))
}

/// Unpause a run
///
/// Lifts the run's own pause and puts it back where the pause found it (due now), on
/// `to_version` of its workflow if given. 409 when it has no pause of its own; when a
/// workflow, version or queue pause still holds it, its own is lifted and `held_by` names the
/// other.
#[utoipa::path(
    post,
    path = "/v1/runs/{thread_id}/unpause",
    operation_id = "unpause_run",
    tag = "pause",
    params(super::ThreadParam),
    request_body(content = Option<RunUnpauseBody>, description = "Optional: why, and a version to put it back on"),
    responses(
        (status = 200, description = "Unpaused (see held_by)", body = RunPauseReply),
        (status = 409, description = "The run has no pause of its own, has ended or is blocked", body = ErrorBody),
        (status = 422, description = "A version no live worker serves", body = ErrorBody),
    )
)]
pub(crate) async fn unpause_run(
    State(st): State<ApiState>,
    principal: Option<Extension<Principal>>,
    ApiPath(raw): ApiPath<String>,
    req: Request,
) -> Reply<RunPauseReply> {
    let thread = thread_id(raw)?;
    let body: RunUnpauseBody = run_body(&st, req).await?;
    let svc = st.services()?;
    if let Some(v) = body.to_version {
        let h = svc
            .store
            .header(&thread)
            .await?
            .ok_or_else(|| ApiError::run_not_found(&thread))?;
        check_served(&svc.store, &h.workflow, v).await?;
    }
    let detail = resume_detail(&who(&principal), &note_of(body.note)?);
    count("resume", "run");
    let held_by = match svc.store.resume_run(&thread, &detail, body.to_version).await? {
        RunResumed::Resumed(_) => None,
        RunResumed::Held(field, record) => Some(field_view(&field, &record.encode())),
        RunResumed::NotOwn(field, record) => {
            let scope = field_view(&field, &record.encode())
                .map(|v| scope_text(&v))
                .unwrap_or_default();
            return Err(ApiError::conflict(format!(
                "run has no pause of its own; {scope} holds it: resume that (POST /v1/pauses/resume)"
            )));
        }
        RunResumed::NotPaused(s) => return Err(ApiError::conflict(format!("run is {s} and has no pause of its own"))),
        RunResumed::Missing => return Err(ApiError::run_not_found(&thread)),
        RunResumed::Terminal(s) => return Err(ApiError::conflict(format!("run is {s}; nothing to unpause"))),
    };
    info!(thread.id = %thread, "run unpaused");
    let h = svc
        .store
        .header(&thread)
        .await?
        .ok_or_else(|| ApiError::run_not_found(&thread))?;
    Ok((
        StatusCode::OK,
        Json(RunPauseReply {
            thread_id: thread.to_string(),
            status: h.status.into(),
            pause: None,
            held_by: held_by.flatten(),
            unenforced_by: Vec::new(),
        }),
    ))
}
