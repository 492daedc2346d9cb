//! The runs list (`/ui`): the count of runs by status as chips, filters (status, workflow,
//! thread prefix, creation time) and one page of the runs they select, newest first.

use askama::Template;
use axum::extract::{Query, State};
use serde::Deserialize;
use std::collections::BTreeMap;

use savepoint_store::{ListFilter, PageCursor, RunHeader, RunStatus};

use super::format::clock;
use super::lists::{run_row, RunRow};
use super::page::{render, Page};
use super::router::ConsoleState;

/// Runs shown per page by default, and at most.
const PAGE: usize = 50;
const MAX_PAGE: usize = 200;
/// Run headers a page of the runs list reads at most while filtering.
const SCAN_CAP: usize = 5_000;
/// Newest runs counted by status.
const COUNT_CAP: usize = 20_000;

/// Filters of the runs list (all optional; empty means no filter).
#[derive(Debug, Default, Deserialize)]
pub(super) struct RunsQuery {
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

/// The parameter's value, trimmed, unless it is empty.
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

/// `15m`, `1h`, `7d` → ms.
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

/// A status with its count, linking to the list of its runs.
struct Chip {
    status: &'static str,
    count: u64,
    href: String,
    active: bool,
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

/// A link to the runs list with the non-empty parameters of `pairs`.
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

/// What the query asks the store for, and what in it could not be read.
struct Request {
    filter: ListFilter,
    /// Runs on the page.
    limit: usize,
    /// Where the page starts (none: the newest).
    before: Option<PageCursor>,
    /// Shown above the list: the last part of the query that could not be read.
    problem: Option<String>,
}

/// What the store answered for one page of the runs list.
struct Listing {
    /// The store clock.
    now: u64,
    runs: Vec<RunHeader>,
    /// Where the next (older) page starts.
    next: Option<PageCursor>,
    /// Runs by status among the newest [`COUNT_CAP`], and whether there were more.
    counts: BTreeMap<RunStatus, u64>,
    capped: bool,
}

/// `GET /ui`.
pub(super) async fn runs_page(State(st): State<ConsoleState>, Query(q): Query<RunsQuery>) -> Page {
    let svc = st.api.services()?;
    let now = svc.store.server_time().await?;
    let req = request(&q, now);
    let ((runs, next), (counts, capped)) = tokio::try_join!(
        svc.store
            .list_page(&req.filter, req.before.as_ref(), req.limit, SCAN_CAP),
        svc.store.status_counts(COUNT_CAP)
    )?;
    let listing = Listing {
        now,
        runs,
        next,
        counts,
        capped,
    };
    Ok(render(&runs_view(&q, req, listing)))
}

/// Reads the query as of the store clock `now` (a problem found later replaces an earlier one).
fn request(q: &RunsQuery, now: u64) -> Request {
    let (status, status_problem) = wanted_status(q);
    let (from, from_problem) = created_from(q, now);
    let (until, until_problem) = created_until(q);
    Request {
        filter: ListFilter {
            status,
            workflow: nonempty(&q.workflow).map(str::to_owned),
            prefix: nonempty(&q.prefix).map(str::to_owned),
            from,
            until,
        },
        limit: q.limit.unwrap_or(PAGE).clamp(1, MAX_PAGE),
        before: nonempty(&q.before).and_then(PageCursor::parse),
        problem: until_problem.or(from_problem).or(status_problem),
    }
}

/// The status asked for; an unknown one is a problem, and every status is shown.
fn wanted_status(q: &RunsQuery) -> (Option<RunStatus>, Option<String>) {
    match nonempty(&q.status) {
        None => (None, None),
        Some(s) => match RunStatus::parse(s) {
            Some(st) => (Some(st), None),
            None => (None, Some(format!("unknown status {s:?}: showing every status"))),
        },
    }
}

/// The earliest creation time asked for: the later of `since` (before `now`) and `from`.
fn created_from(q: &RunsQuery, now: u64) -> (Option<u64>, Option<String>) {
    let from = nonempty(&q.since).and_then(since_ms).map(|d| now.saturating_sub(d));
    match nonempty(&q.from) {
        None => (from, None),
        Some(f) => match parse_utc(f) {
            Some(t) => (Some(from.map_or(t, |s| s.max(t))), None),
            None => (from, Some(unreadable_time(f))),
        },
    }
}

/// The latest creation time asked for (`to`).
fn created_until(q: &RunsQuery) -> (Option<u64>, Option<String>) {
    match nonempty(&q.to) {
        Some(t) => match parse_utc(t) {
            Some(ms) => (Some(ms), None),
            None => (None, Some(unreadable_time(t))),
        },
        None => (None, None),
    }
}

/// The problem shown for a time that does not parse.
fn unreadable_time(t: &str) -> String {
    format!("cannot read the time {t:?} (want YYYY-MM-DDTHH:MM, UTC)")
}

/// The filters as the page's form shows them and its links carry them on (empty: not set).
struct Links {
    workflow: String,
    prefix: String,
    since: String,
    from: String,
    to: String,
    /// Empty for the default page size.
    limit: String,
}

impl Links {
    /// The query's filters, and the page size `limit` it was read as.
    fn new(q: &RunsQuery, limit: usize) -> Self {
        Links {
            workflow: nonempty(&q.workflow).unwrap_or("").to_owned(),
            prefix: nonempty(&q.prefix).unwrap_or("").to_owned(),
            since: nonempty(&q.since).unwrap_or("").to_owned(),
            from: nonempty(&q.from).unwrap_or("").to_owned(),
            to: nonempty(&q.to).unwrap_or("").to_owned(),
            limit: if limit == PAGE {
                String::new()
            } else {
                limit.to_string()
            },
        }
    }

    /// A link to the list with these filters, `status` and the page starting at `before`.
    fn href(&self, status: &str, before: &str) -> String {
        query_string(&[
            ("status", status),
            ("workflow", &self.workflow),
            ("prefix", &self.prefix),
            ("since", &self.since),
            ("from", &self.from),
            ("to", &self.to),
            ("limit", &self.limit),
            ("before", before),
        ])
    }
}

/// One chip per status, the one filtered on marked.
fn chips(counts: &BTreeMap<RunStatus, u64>, status: Option<RunStatus>, links: &Links) -> Vec<Chip> {
    RunStatus::ALL
        .iter()
        .map(|s| Chip {
            status: s.as_str(),
            count: counts.get(s).copied().unwrap_or(0),
            href: links.href(s.as_str(), ""),
            active: status == Some(*s),
        })
        .collect()
}

/// Builds the page from the query, how it was read, and what the store answered.
fn runs_view(q: &RunsQuery, req: Request, listing: Listing) -> RunsPage {
    let status = req.filter.status;
    let status_s = status.map(|s| s.as_str()).unwrap_or("");
    let links = Links::new(q, req.limit);
    let now = listing.now;
    RunsPage {
        active: "runs",
        chips: chips(&listing.counts, status, &links),
        total: listing.counts.values().sum(),
        capped: listing.capped,
        rows: listing.runs.iter().map(|h| run_row(h, now)).collect(),
        status: status_s.to_owned(),
        workflow: links.workflow.clone(),
        prefix: links.prefix.clone(),
        since: links.since.clone(),
        from: links.from.clone(),
        to: links.to.clone(),
        limit: req.limit,
        newer: req.before.is_some(),
        next: listing.next.map(|c| links.href(status_s, &c.to_string())),
        first_href: links.href(status_s, ""),
        now: clock(now),
        statuses: RunStatus::ALL.iter().map(|s| s.as_str()).collect(),
        problem: req.problem,
    }
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
}
