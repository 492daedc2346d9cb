//! The operator console at `/ui`: server-rendered pages (askama templates compiled into the
//! binary) over the same store reads as the API, and one small script (`assets/console.js`)
//! for live refresh and for actions. Every action is a call of the public `/v1` API made by
//! the browser, so the console can do nothing an API client cannot, and it never writes to
//! Redis itself.
//!
//! Pages: runs (`/ui`), a run (`/ui/runs/{thread_id}`), the approvals inbox (`/ui/inbox`),
//! needs attention (`/ui/attention`) and the fleet (`/ui/fleet`).

mod fleet;
mod timeline;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;

use savepoint_core::ids::ThreadId;
use savepoint_core::journal::{Entry, Outcome};
use savepoint_store::{ListFilter, PageCursor, RunHeader, RunStatus, StoreError};

use crate::api::doctor::{self, span, Action, Diagnosis};
use crate::api::{ApiError, ApiState, Services};

pub(crate) use fleet::Samples;

/// Runs shown per page by default, and at most.
const PAGE: usize = 50;
const MAX_PAGE: usize = 200;
/// Run headers a page of the runs list reads at most while filtering.
const SCAN_CAP: usize = 5_000;
/// Newest runs counted by status.
const COUNT_CAP: usize = 20_000;
/// Runs the inbox and the attention page list at most.
const QUEUE_CAP: usize = 500;
/// A JSON value longer than this is collapsed.
const COLLAPSE_AT: usize = 600;

/// State of the console's handlers.
#[derive(Clone)]
pub(crate) struct ConsoleState {
    api: ApiState,
    samples: Arc<Samples>,
}

/// The console's routes, under `/ui`.
pub(crate) fn routes(api: ApiState) -> Router {
    let samples = Arc::new(Samples::default());
    Router::new()
        .route("/ui", get(runs_page))
        .route("/ui/", get(runs_page))
        .route("/ui/runs/{thread_id}", get(run_page))
        .route("/ui/inbox", get(inbox_page))
        .route("/ui/attention", get(attention_page))
        .route("/ui/fleet", get(fleet_page))
        .route("/ui/assets/console.js", get(script))
        .route("/ui/assets/console.css", get(style))
        .route("/ui/assets/favicon.svg", get(favicon))
        .with_state(ConsoleState { api, samples })
}

async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("../../assets/console.js"),
    )
        .into_response()
}

async fn favicon() -> Response {
    (
        [(header::CONTENT_TYPE, "image/svg+xml")],
        include_str!("../../assets/favicon.svg"),
    )
        .into_response()
}

async fn style() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../../assets/console.css"),
    )
        .into_response()
}

/// A page that could not be built: shown as a page with the reason, never a blank one.
struct PageError(StatusCode, String);

impl From<ApiError> for PageError {
    fn from(e: ApiError) -> Self {
        PageError(e.status, e.message)
    }
}

impl From<StoreError> for PageError {
    fn from(e: StoreError) -> Self {
        ApiError::from(e).into()
    }
}

#[derive(Template)]
#[template(path = "console/error.html")]
struct ErrorPage {
    active: &'static str,
    status: u16,
    message: String,
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let page = ErrorPage {
            active: "",
            status: self.0.as_u16(),
            message: self.1,
        };
        (self.0, render(&page)).into_response()
    }
}

fn render(t: &impl Template) -> Response {
    match t.render() {
        Ok(html) => Html(html).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("rendering the page failed: {e}"),
        )
            .into_response(),
    }
}

type Page = Result<Response, PageError>;

/// `2026-12-01 20:31:05` (UTC) from store ms.
fn clock(ms: u64) -> String {
    let t = savepoint_client::fmt::timestamp(ms);
    t.get(..19).map(|s| s.replace('T', " ")).unwrap_or(t)
}

fn ago(ms: u64, now: u64) -> String {
    if ms >= now {
        format!("in {}", span(ms - now))
    } else {
        format!("{} ago", span(now - ms))
    }
}

/// A JSON value for a page: pretty-printed, and collapsed when long.
#[derive(Debug, Clone, Default)]
struct Json {
    text: String,
    collapsed: bool,
    summary: String,
}

fn json(v: &Value) -> Json {
    // Secrets are never shown, whoever asks.
    let v = &savepoint_runtime::security::shown(v);
    let text = serde_json::to_string_pretty(v).unwrap_or_default();
    let collapsed = text.len() > COLLAPSE_AT || text.lines().count() > 24;
    let flat = v.to_string();
    let summary = if flat.chars().count() > 80 {
        format!("{}… ({} bytes)", flat.chars().take(80).collect::<String>(), flat.len())
    } else {
        flat
    };
    Json {
        text,
        collapsed,
        summary,
    }
}

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

fn run_href(thread: &str) -> String {
    format!("/ui/runs/{}", savepoint_client::fmt::encode(thread))
}

// ---------------------------------------------------------------------------------------
// Runs
// ---------------------------------------------------------------------------------------

/// Filters of the runs list (all optional; empty means no filter).
#[derive(Debug, Default, Deserialize)]
struct RunsQuery {
    status: Option<String>,
    workflow: Option<String>,
    prefix: Option<String>,
    /// Created within the last: `15m`, `1h`, `6h`, `24h`, `7d`.
    since: Option<String>,
    /// Created at or after `YYYY-MM-DDTHH:MM[:SS]` (UTC).
    from: Option<String>,
    /// Created at or before `YYYY-MM-DDTHH:MM[:SS]` (UTC).
    to: Option<String>,
    /// Cursor of the page (`<ms>.<thread>`).
    before: Option<String>,
    limit: Option<usize>,
}

fn nonempty(s: &Option<String>) -> Option<&str> {
    s.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

/// `YYYY-MM-DDTHH:MM[:SS]` (UTC, as a `datetime-local` input sends it) → ms.
fn parse_utc(s: &str) -> Option<u64> {
    let (date, time) = s.split_once('T').or_else(|| s.split_once(' '))?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    if !(1970..=9999).contains(&y) {
        return None;
    }
    let mut t = time.trim_end_matches('Z').split(':').map(|p| p.parse::<f64>().ok());
    let (hh, mm) = (t.next()??, t.next()??);
    let ss = t.next().flatten().unwrap_or(0.0);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || hh >= 24.0 || mm >= 60.0 || ss >= 61.0 {
        return None;
    }
    // Days from civil (Howard Hinnant), the inverse of `render::timestamp`.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let ms = (days as f64 * 86_400.0 + hh * 3600.0 + mm * 60.0 + ss) * 1000.0;
    (ms >= 0.0).then_some(ms as u64)
}

fn since_ms(s: &str) -> Option<u64> {
    let unit = match s.chars().last()? {
        'm' => 60_000,
        'h' => 3_600_000,
        'd' => 86_400_000,
        _ => return None,
    };
    let n: u64 = s[..s.len() - 1].parse().ok()?;
    n.checked_mul(unit)
}

struct Chip {
    status: &'static str,
    count: u64,
    href: String,
    active: bool,
}

struct RunRow {
    thread: String,
    href: String,
    workflow: String,
    version: u32,
    status: &'static str,
    step: u32,
    created: String,
    updated: String,
    note: String,
}

fn run_row(h: &RunHeader, now: u64) -> RunRow {
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

#[derive(Template)]
#[template(path = "console/runs.html")]
struct RunsPage {
    active: &'static str,
    chips: Vec<Chip>,
    total: u64,
    capped: bool,
    rows: Vec<RunRow>,
    status: String,
    workflow: String,
    prefix: String,
    since: String,
    from: String,
    to: String,
    limit: usize,
    newer: bool,
    next: Option<String>,
    first_href: String,
    now: String,
    statuses: Vec<&'static str>,
    problem: Option<String>,
}

fn query_string(pairs: &[(&str, &str)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", savepoint_client::fmt::encode(v)))
        .collect();
    if parts.is_empty() {
        "/ui".into()
    } else {
        format!("/ui?{}", parts.join("&"))
    }
}

async fn runs_page(State(st): State<ConsoleState>, Query(q): Query<RunsQuery>) -> Page {
    let svc = st.api.services()?;
    let now = svc.store.server_time().await?;
    let mut problem = None;
    let status = match nonempty(&q.status) {
        None => None,
        Some(s) => match RunStatus::parse(s) {
            Some(st) => Some(st),
            None => {
                problem = Some(format!("unknown status {s:?}: showing every status"));
                None
            }
        },
    };
    let mut from = nonempty(&q.since).and_then(since_ms).map(|d| now.saturating_sub(d));
    if let Some(f) = nonempty(&q.from) {
        match parse_utc(f) {
            Some(t) => from = Some(from.map_or(t, |s| s.max(t))),
            None => problem = Some(format!("cannot read the time {f:?} (want YYYY-MM-DDTHH:MM, UTC)")),
        }
    }
    let until = match nonempty(&q.to) {
        Some(t) => match parse_utc(t) {
            Some(ms) => Some(ms),
            None => {
                problem = Some(format!("cannot read the time {t:?} (want YYYY-MM-DDTHH:MM, UTC)"));
                None
            }
        },
        None => None,
    };
    let filter = ListFilter {
        status,
        workflow: nonempty(&q.workflow).map(str::to_owned),
        prefix: nonempty(&q.prefix).map(str::to_owned),
        from,
        until,
    };
    let limit = q.limit.unwrap_or(PAGE).clamp(1, MAX_PAGE);
    let before = nonempty(&q.before).and_then(PageCursor::parse);
    let ((runs, next), (counts, capped)) = tokio::try_join!(
        svc.store.list_page(&filter, before.as_ref(), limit, SCAN_CAP),
        svc.store.status_counts(COUNT_CAP)
    )?;
    let status_s = status.map(|s| s.as_str()).unwrap_or("");
    let (workflow, prefix) = (
        nonempty(&q.workflow).unwrap_or("").to_owned(),
        nonempty(&q.prefix).unwrap_or("").to_owned(),
    );
    let (since, from_s, to_s) = (
        nonempty(&q.since).unwrap_or("").to_owned(),
        nonempty(&q.from).unwrap_or("").to_owned(),
        nonempty(&q.to).unwrap_or("").to_owned(),
    );
    let limit_s = if limit == PAGE {
        String::new()
    } else {
        limit.to_string()
    };
    let base = |status: &str, before: &str| {
        query_string(&[
            ("status", status),
            ("workflow", &workflow),
            ("prefix", &prefix),
            ("since", &since),
            ("from", &from_s),
            ("to", &to_s),
            ("limit", &limit_s),
            ("before", before),
        ])
    };
    let chips = RunStatus::ALL
        .iter()
        .map(|s| Chip {
            status: s.as_str(),
            count: counts.get(s).copied().unwrap_or(0),
            href: base(s.as_str(), ""),
            active: status == Some(*s),
        })
        .collect();
    let page = RunsPage {
        active: "runs",
        chips,
        total: counts.values().sum(),
        capped,
        rows: runs.iter().map(|h| run_row(h, now)).collect(),
        status: status_s.to_owned(),
        workflow: workflow.clone(),
        prefix: prefix.clone(),
        since: since.clone(),
        from: from_s.clone(),
        to: to_s.clone(),
        limit,
        newer: before.is_some(),
        next: next.map(|c| base(status_s, &c.to_string())),
        first_href: base(status_s, ""),
        now: clock(now),
        statuses: RunStatus::ALL.iter().map(|s| s.as_str()).collect(),
        problem,
    };
    Ok(render(&page))
}

// ---------------------------------------------------------------------------------------
// One run
// ---------------------------------------------------------------------------------------

struct Field {
    name: &'static str,
    value: String,
}

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

struct EventRow {
    at: String,
    typ: String,
    detail: String,
}

/// An action as the page's buttons carry it.
struct Button {
    label: String,
    command: String,
    method: String,
    path: String,
    body: String,
    dangerous: bool,
    /// A value the action needs from a text field (`<json>` in its body).
    needs_value: bool,
    /// A reason the action needs (`<text>` in its body).
    needs_reason: bool,
    /// Short text on the button.
    short: String,
}

fn short(a: &Action) -> String {
    let p = a.path.as_deref().unwrap_or("");
    if p.ends_with("/resume") {
        "Answer".into()
    } else if p.ends_with("/cancel") {
        "Cancel run".into()
    } else if p.ends_with("/retry") {
        "Retry".into()
    } else if p.ends_with("/resolve") {
        if a.body.as_ref().and_then(|b| b.get("applied")) == Some(&Value::Bool(true)) {
            "Resolve: applied".into()
        } else {
            "Resolve: not applied".into()
        }
    } else if p.contains("/signals/") {
        "Send signal".into()
    } else {
        "Do it".into()
    }
}

fn buttons(actions: &[Action]) -> (Vec<Button>, Vec<String>) {
    let (mut api, mut manual) = (Vec::new(), Vec::new());
    for a in actions {
        match (&a.method, &a.path) {
            (Some(m), Some(p)) => {
                let body = a.body.as_ref().map(Value::to_string).unwrap_or_default();
                api.push(Button {
                    label: a.label.clone(),
                    command: a.command.clone(),
                    method: m.clone(),
                    path: p.clone(),
                    needs_value: body.contains("\"<json>\""),
                    needs_reason: body.contains("\"<text>\""),
                    body,
                    dangerous: a.dangerous,
                    short: short(a),
                })
            }
            _ => manual.push(a.label.clone()),
        }
    }
    (api, manual)
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

fn case_name(d: &Diagnosis) -> String {
    serde_json::to_value(d.case)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

async fn run_page(State(st): State<ConsoleState>, Path(raw): Path<String>) -> Page {
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
    let facts = doctor::gather(svc, &h, Some((&journal, &events))).await?;
    let now = facts.now;
    let d = doctor::diagnose(&h, &facts);
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
    fields.push(Field {
        name: "journal",
        value: format!("{} entries", h.steps),
    });
    if let Some((source, n)) = &h.forked_from {
        fields.push(Field {
            name: "forked from",
            value: format!("{source} at entry {n}"),
        });
    }
    if let Some(q) = &h.queue {
        let home = h.home_queue.as_deref().unwrap_or(q);
        fields.push(Field {
            name: "task queue",
            value: if home == q {
                q.clone()
            } else {
                format!("{q} (routed there for its next call; home {home})")
            },
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
        fields.push(Field {
            name: "children",
            value: list.join(", "),
        });
    }
    if let Some((count, from)) = h.restarts {
        fields.push(Field {
            name: "restarted",
            value: format!("{count} time(s), last from entry {from}"),
        });
    }
    fields.push(Field {
        name: "attempt / fence",
        value: format!("{} / {}", h.attempt, h.fence),
    });
    match &d.lease {
        Some(l) => fields.push(Field {
            name: "lease holder",
            value: format!(
                "{} — {}{} (lease until {}, /healthz {})",
                l.worker,
                if l.alive { "alive" } else { "dead" },
                l.last_heartbeat_at
                    .map(|hb| format!(", last heartbeat {}", ago(hb, now)))
                    .unwrap_or_default(),
                clock(l.lease_until),
                l.healthz
            ),
        }),
        None => fields.push(Field {
            name: "lease holder",
            value: h
                .owner
                .clone()
                .map(|o| format!("none (last: {o})"))
                .unwrap_or_else(|| "none".into()),
        }),
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
    let (buttons, manual) = buttons(&d.actions);
    let timeline = timeline::build(&h, &journal, &events, now);
    let page = RunPage {
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
        events: events
            .iter()
            .rev()
            .map(|e| EventRow {
                at: clock(e.at),
                typ: e.typ.clone(),
                detail: e.detail.clone(),
            })
            .collect(),
        now: clock(now),
    };
    Ok(render(&page))
}

// ---------------------------------------------------------------------------------------
// Inbox and needs attention
// ---------------------------------------------------------------------------------------

struct Question {
    thread: String,
    href: String,
    workflow: String,
    name: String,
    payload: Json,
    waited: String,
    resume_path: String,
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

async fn listed(svc: &Services, status: RunStatus) -> Result<Vec<RunHeader>, StoreError> {
    let filter = ListFilter {
        status: Some(status),
        ..ListFilter::default()
    };
    Ok(svc.store.list_page(&filter, None, QUEUE_CAP, QUEUE_CAP * 4).await?.0)
}

async fn inbox_page(State(st): State<ConsoleState>) -> Page {
    let svc = st.api.services()?;
    let (now, total) = tokio::try_join!(svc.store.server_time(), svc.store.status_index_size(RunStatus::Waiting))?;
    let waiting = listed(svc, RunStatus::Waiting).await?;
    let mut questions = Vec::new();
    let mut signals = Vec::new();
    for h in &waiting {
        match &h.wait {
            Some(w) if w.kind == "interrupt" => questions.push(Question {
                thread: h.thread.as_str().to_owned(),
                href: run_href(h.thread.as_str()),
                workflow: format!("{} v{}", h.workflow, h.workflow_version),
                name: w.name.clone(),
                payload: json(&w.payload),
                waited: span(now.saturating_sub(h.updated_at)),
                resume_path: format!("/v1/runs/{}/resume", savepoint_client::fmt::encode(h.thread.as_str())),
            }),
            _ => signals.push(run_row(h, now)),
        }
    }
    // Longest waiting first.
    questions.reverse();
    let page = InboxPage {
        active: "inbox",
        questions,
        signals,
        capped: (total > waiting.len() as u64).then_some(total),
        now: clock(now),
    };
    Ok(render(&page))
}

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
    in_doubt: usize,
    /// Blocked runs in all (when more than the page lists).
    capped: Option<u64>,
    /// How many of the newest pending and sleeping runs were checked for a worker.
    checked: usize,
    now: String,
}

async fn attention_page(State(st): State<ConsoleState>) -> Page {
    let svc = st.api.services()?;
    let (now, workers, total) = tokio::try_join!(
        svc.store.server_time(),
        svc.store.live_workers(),
        svc.store.status_index_size(RunStatus::Blocked)
    )?;
    let facts = doctor::Facts {
        now,
        workers,
        ..doctor::Facts::default()
    };
    let trouble = |h: &RunHeader| {
        let d = doctor::diagnose(h, &facts);
        let (buttons, manual) = buttons(&d.actions);
        Trouble {
            row: run_row(h, now),
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
    };
    let blocked: Vec<Trouble> = listed(svc, RunStatus::Blocked).await?.iter().map(trouble).collect();
    // Runnable runs no live worker serves (they wait in the store until one registers).
    let (mut stuck, mut checked) = (Vec::new(), 0);
    for status in [RunStatus::Pending, RunStatus::Sleeping] {
        let runs = listed(svc, status).await?;
        checked += runs.len();
        for h in runs {
            let t = trouble(&h);
            if t.case == "no_worker" {
                stuck.push(t);
            }
        }
    }
    let page = AttentionPage {
        active: "attention",
        in_doubt: blocked.iter().filter(|t| t.key.is_some()).count(),
        capped: (total > blocked.len() as u64).then_some(total),
        blocked,
        stuck,
        checked,
        now: clock(now),
    };
    Ok(render(&page))
}

// ---------------------------------------------------------------------------------------
// Fleet
// ---------------------------------------------------------------------------------------

async fn fleet_page(State(st): State<ConsoleState>) -> Page {
    let svc = st.api.services()?;
    fleet::ensure_sampling(&st.samples, &st.api);
    let page = fleet::page(svc, &st.samples).await?;
    Ok(render(&page))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_times_parse_as_the_inverse_of_the_timestamps_shown() {
        let ms = parse_utc("2026-12-01T20:31:05").unwrap();
        assert_eq!(savepoint_client::fmt::timestamp(ms), "2026-12-01T20:31:05.000Z");
        assert_eq!(parse_utc("2024-02-29T00:00"), Some(1_709_164_800_000));
        assert_eq!(parse_utc("2026-13-01T00:00"), None);
        assert_eq!(parse_utc("yesterday"), None);
        assert_eq!(since_ms("15m"), Some(900_000));
        assert_eq!(since_ms("7d"), Some(604_800_000));
        assert_eq!(since_ms("x"), None);
        assert_eq!(since_ms("5é"), None);
        assert_eq!(since_ms("99999999999999999d"), None);
        assert_eq!(parse_utc("99999999999-01-01T00:00"), None);
        assert_eq!(parse_utc("1969-12-31T23:59"), None);
    }

    #[test]
    fn long_values_are_collapsed_with_a_summary() {
        let big = json(&serde_json::json!({"text": "x".repeat(2000)}));
        assert!(big.collapsed);
        assert!(big.summary.ends_with("bytes)"), "{}", big.summary);
        assert!(!json(&serde_json::json!({"ok": 1})).collapsed);
    }
}
