//! The fleet page: live workers (what they serve, runs in flight, last heartbeat, whether
//! their process answers `/healthz`), the queue, and charts of steps per second and runs by
//! status over the last minutes. The charts come from samples this scheduler takes every
//! [`EVERY`] while someone looks at the console (it stops [`IDLE`] after the last view).

use askama::Template;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use savepoint_store::{RunStatus, StoreError, WorkerInfo};

use super::format::{ago, clock};
use super::page::{render, Page};
use super::router::ConsoleState;
use crate::api::{ApiState, Services};

/// Time between samples.
const EVERY: Duration = Duration::from_secs(5);
/// Samples kept (10 minutes).
const KEEP: usize = 120;
/// Sampling stops this long after the console was last viewed.
const IDLE: Duration = Duration::from_secs(600);
/// Newest runs counted by status per sample.
const COUNT_CAP: usize = 20_000;

/// One sample.
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    at: u64,
    steps_per_s: f64,
    counts: BTreeMap<RunStatus, u64>,
    queue: Option<u32>,
}

/// The samples of this scheduler.
#[derive(Default)]
pub(crate) struct Samples {
    ring: Mutex<VecDeque<Sample>>,
    running: AtomicBool,
    viewed: AtomicU64,
    /// Steps committed per worker at the previous sample.
    last_steps: Mutex<HashMap<String, u64>>,
}

/// Seconds since this process first asked (a monotonic clock).
fn mono_secs() -> u64 {
    static START: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(tokio::time::Instant::now).elapsed().as_secs()
}

/// Notes a view and starts the sampler if it is not running.
pub(crate) fn ensure_sampling(samples: &Arc<Samples>, api: &ApiState) {
    samples.viewed.store(mono_secs(), Ordering::Relaxed);
    if samples.running.swap(true, Ordering::AcqRel) {
        return;
    }
    let (samples, api) = (samples.clone(), api.clone());
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if mono_secs().saturating_sub(samples.viewed.load(Ordering::Relaxed)) > IDLE.as_secs() {
                break;
            }
            if let Ok(svc) = api.services() {
                if let Err(e) = sample(svc, &samples).await {
                    tracing::debug!(error = %e, "console: sampling the fleet failed");
                }
            }
        }
        samples.running.store(false, Ordering::Release);
    });
}

/// Takes one sample (unless one was taken less than a second ago) and keeps the last [`KEEP`].
async fn sample(svc: &Services, samples: &Samples) -> Result<(), StoreError> {
    let (now, workers, (counts, _)) = tokio::try_join!(
        svc.store.server_time(),
        svc.store.live_workers(),
        svc.store.status_counts(COUNT_CAP)
    )?;
    let queue = tokio::time::timeout(Duration::from_secs(1), svc.publisher.broker().queue_depth())
        .await
        .ok()
        .and_then(Result::ok);
    let prev_at = samples
        .ring
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .back()
        .map(|s| s.at);
    // (The first view samples at once, and so may the sampler's first tick: keep one.)
    if prev_at.is_some_and(|p| now.saturating_sub(p) < 1_000) {
        return Ok(());
    }
    let mut last = samples.last_steps.lock().unwrap_or_else(|p| p.into_inner());
    let mut delta = 0u64;
    for w in &workers {
        let before = match last.get(&w.id) {
            Some(n) => *n,
            // A worker seen for the first time: its steps since it started count if it started
            // since the last sample.
            None if prev_at.is_some_and(|p| w.started_at >= p) => 0,
            None => w.steps,
        };
        delta += w.steps.saturating_sub(before);
    }
    *last = workers.iter().map(|w| (w.id.clone(), w.steps)).collect();
    drop(last);
    let steps_per_s = match prev_at {
        Some(p) if now > p => delta as f64 * 1000.0 / (now - p) as f64,
        _ => 0.0,
    };
    let mut ring = samples.ring.lock().unwrap_or_else(|p| p.into_inner());
    ring.push_back(Sample {
        at: now,
        steps_per_s,
        counts,
        queue,
    });
    while ring.len() > KEEP {
        ring.pop_front();
    }
    Ok(())
}

/// A worker row.
pub(crate) struct WorkerRow {
    id: String,
    host: String,
    /// Its build: id, engine version (and the contract when the id is a label).
    build: String,
    serves: String,
    queue: String,
    in_flight: String,
    steps: u64,
    heartbeat: String,
    started: String,
    health: String,
    healthy: bool,
}

/// The fleet page.
#[derive(Template)]
#[template(path = "console/fleet.html")]
pub(crate) struct FleetPage {
    active: &'static str,
    /// The workflow, version and queue pauses in force, one sentence each.
    pauses: Vec<String>,
    workers: Vec<WorkerRow>,
    queue_depth: String,
    dlq_depth: String,
    steps_chart: String,
    status_chart: String,
    samples: usize,
    now: String,
}

/// A registration is refreshed every third of its TTL: one missed by two seconds more is a
/// worker that stopped (killed, paused, cut off); the registration outlives it until the TTL.
fn silence(w: &WorkerInfo, now: u64) -> Option<String> {
    w.silent_for(now).map(|silent| {
        format!(
            "no heartbeat for {} (expected every {}): stopped or cut off",
            crate::api::doctor::span(silent),
            crate::api::doctor::span(w.ttl_ms / 3)
        )
    })
}

/// What a worker's health check says, and whether it is healthy: silent, no listener, not
/// asked, or what its `/healthz` answered.
async fn health(w: &WorkerInfo, now: u64) -> (String, bool) {
    if let Some(s) = silence(w, now) {
        return (s, false);
    }
    let Some(ops) = &w.ops else {
        return ("no health listener".into(), true);
    };
    let Some(ops) = crate::api::doctor::probeable(w) else {
        return (format!("{ops} (another host's loopback: not asked)"), true);
    };
    match crate::api::doctor::healthz(ops).await {
        Ok(()) => (format!("ok ({ops})"), true),
        Err(e) => (format!("{e} ({ops})"), false),
    }
}

/// `GET /ui/fleet` (sampling starts with the first view).
pub(super) async fn fleet_page(State(st): State<ConsoleState>) -> Page {
    let svc = st.api.services()?;
    ensure_sampling(&st.samples, &st.api);
    let page = page(svc, &st.samples).await?;
    Ok(render(&page))
}

/// The fleet page as of now: the live workers and their health, the queues' depths, and the
/// charts of the samples so far.
pub(crate) async fn page(svc: &Services, samples: &Samples) -> Result<FleetPage, StoreError> {
    let (now, workers) = tokio::try_join!(svc.store.server_time(), svc.store.live_workers())?;
    if samples.ring.lock().unwrap_or_else(|p| p.into_inner()).is_empty() {
        // The first view: one sample now, so the page has figures at once.
        sample(svc, samples).await?;
    }
    let healths = healths(&workers, now).await;
    let depths = depths(svc).await;
    let ring: Vec<Sample> = samples
        .ring
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .cloned()
        .collect();
    let mut view = fleet_view(&workers, healths, depths, &ring, now);
    view.pauses = svc
        .store
        .pauses()
        .await?
        .iter()
        .map(|p| {
            let note = if p.record.note.is_empty() {
                String::new()
            } else {
                format!(": {}", p.record.note)
            };
            format!(
                "{} is paused by {} since {}{note}",
                p.scope,
                p.record.by,
                clock(p.record.at)
            )
        })
        .collect();
    Ok(view)
}

/// What each worker's health check says, in the workers' order.
async fn healths(workers: &[WorkerInfo], now: u64) -> Vec<(String, bool)> {
    // At most 16 probes at once, each bounded by the doctor's 1 s timeout.
    use futures::StreamExt;
    futures::stream::iter(workers.to_vec())
        .map(move |w| async move { health(&w, now).await })
        .buffered(16)
        .collect()
        .await
}

/// The depths of the work queue and of the dead-letter queue, as shown.
async fn depths(svc: &Services) -> (String, String) {
    let broker = svc.publisher.broker();
    let queue_depth = depth(tokio::time::timeout(Duration::from_secs(1), broker.queue_depth()).await);
    let dlq_depth = depth(tokio::time::timeout(Duration::from_secs(1), broker.dlq_depth()).await);
    (queue_depth, dlq_depth)
}

/// A queue's depth as the broker answered it within its time, or why it is unknown.
fn depth<E: std::fmt::Display>(r: Result<Result<u32, E>, tokio::time::error::Elapsed>) -> String {
    match r {
        Ok(Ok(n)) => n.to_string(),
        Ok(Err(e)) => format!("unknown ({e})"),
        Err(_) => "unknown (the broker did not answer)".to_owned(),
    }
}

/// Builds the page from the workers and their health, the queues' depths (work queue, dead
/// letters) and the samples, as of the store clock `now`.
fn fleet_view(
    workers: &[WorkerInfo],
    healths: Vec<(String, bool)>,
    (queue_depth, dlq_depth): (String, String),
    ring: &[Sample],
    now: u64,
) -> FleetPage {
    let rows = workers
        .iter()
        .zip(healths)
        .map(|(w, (health, healthy))| worker_row(w, health, healthy, now))
        .collect();
    FleetPage {
        active: "fleet",
        pauses: Vec::new(),
        workers: rows,
        queue_depth,
        dlq_depth,
        steps_chart: chart("Steps per second (fleet) and queue depth", &step_series(ring)),
        status_chart: chart("Runs by status (newest 20,000)", &status_series(ring)),
        samples: ring.len(),
        now: clock(now),
    }
}

/// A worker's row, with what its health check said.
fn worker_row(w: &WorkerInfo, health: String, healthy: bool, now: u64) -> WorkerRow {
    WorkerRow {
        id: w.id.clone(),
        host: if w.pid > 0 {
            format!("{} (pid {})", w.host, w.pid)
        } else {
            w.host.clone()
        },
        build: match &w.build {
            b if b.id.is_empty() => "(older build)".to_owned(),
            b if b.id == b.contract => format!("{} (engine {})", b.id, b.version),
            b => format!("{} (engine {}, contract {})", b.id, b.version, b.contract),
        },
        serves: serves(w),
        queue: w.queue.clone(),
        in_flight: if w.concurrency > 0 {
            format!("{} / {}", w.in_flight, w.concurrency)
        } else {
            w.in_flight.to_string()
        },
        steps: w.steps,
        heartbeat: ago(w.last_heartbeat(), now),
        started: if w.started_at > 0 {
            clock(w.started_at)
        } else {
            String::new()
        },
        health,
        healthy,
    }
}

/// The workflows a worker serves, with their versions (`invoice v2`, `chain v1..=v3`).
fn serves(w: &WorkerInfo) -> String {
    w.workflows
        .iter()
        .map(|e| {
            if e.min_version == e.version {
                format!("{} v{}", e.name, e.version)
            } else {
                format!("{} v{}..=v{}", e.name, e.min_version, e.version)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The series of the steps chart: steps per second, and the queue's depth when known.
fn step_series(ring: &[Sample]) -> Vec<(&'static str, Vec<(u64, f64)>)> {
    let steps: Vec<(u64, f64)> = ring.iter().map(|s| (s.at, s.steps_per_s)).collect();
    let queue: Vec<(u64, f64)> = ring
        .iter()
        .filter_map(|s| s.queue.map(|q| (s.at, f64::from(q))))
        .collect();
    let mut step_series = vec![("steps/s", steps)];
    if !queue.is_empty() {
        step_series.push(("queue depth", queue));
    }
    step_series
}

/// The series of the status chart: one per status that had runs in any sample.
fn status_series(ring: &[Sample]) -> Vec<(&'static str, Vec<(u64, f64)>)> {
    let mut series: Vec<(&'static str, Vec<(u64, f64)>)> = Vec::new();
    for st in RunStatus::ALL {
        if ring.iter().any(|s| s.counts.get(&st).copied().unwrap_or(0) > 0) {
            series.push((
                st.as_str(),
                ring.iter()
                    .map(|s| (s.at, s.counts.get(&st).copied().unwrap_or(0) as f64))
                    .collect(),
            ));
        }
    }
    series
}

/// An inline SVG line chart of a few series over the same times.
fn chart(title: &str, series: &[(&str, Vec<(u64, f64)>)]) -> String {
    let (w, h, pad) = (720.0, 170.0, 34.0);
    let points: Vec<&(u64, f64)> = series.iter().flat_map(|(_, s)| s.iter()).collect();
    let mut svg = format!(
        "<svg class=\"chart\" viewBox=\"0 0 {w} {}\" role=\"img\" aria-label=\"{title}\"><title>{title}</title>",
        h + 28.0
    );
    let times: std::collections::BTreeSet<u64> = points.iter().map(|p| p.0).collect();
    if times.len() < 2 {
        svg.push_str(&format!(
            "<text x=\"{pad}\" y=\"40\" class=\"muted\">{title}: collecting samples (one every {} s)…</text></svg>",
            EVERY.as_secs()
        ));
        return svg;
    }
    let t0 = points.iter().map(|p| p.0).min().unwrap_or(0);
    let t1 = points.iter().map(|p| p.0).max().unwrap_or(1).max(t0 + 1);
    let vmax = points.iter().map(|p| p.1).fold(0.0, f64::max).max(1.0);
    let x = |t: u64| pad + (t - t0) as f64 * (w - 2.0 * pad) / (t1 - t0) as f64;
    let y = |v: f64| h - pad / 2.0 - v * (h - pad) / vmax;
    let _ = write!(
        svg,
        "<line x1=\"{pad}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"axis\"/><text x=\"2\" y=\"{}\" class=\"muted\">{}</text>\
         <text x=\"2\" y=\"{}\" class=\"muted\">0</text>",
        y(0.0),
        w - pad,
        y(0.0),
        y(vmax) + 4.0,
        if vmax >= 100.0 { format!("{vmax:.0}") } else { format!("{vmax:.1}") },
        y(0.0)
    );
    for (i, (name, s)) in series.iter().enumerate() {
        let pts: Vec<String> = s.iter().map(|(t, v)| format!("{:.1},{:.1}", x(*t), y(*v))).collect();
        let _ = write!(
            svg,
            "<polyline class=\"series s{i} {name}\" fill=\"none\" points=\"{}\"/>\
             <text x=\"{}\" y=\"{}\" class=\"legend s{i} {name}\">■ {name}: {}</text>",
            pts.join(" "),
            pad + (i as f64) * 130.0,
            h + 22.0,
            s.last()
                .map(|p| if p.1.fract() == 0.0 {
                    format!("{}", p.1)
                } else {
                    format!("{:.1}", p.1)
                })
                .unwrap_or_default()
        );
    }
    let _ = write!(
        svg,
        "<text x=\"{pad}\" y=\"12\" class=\"muted\">{title} — {} to {} UTC</text></svg>",
        &clock(t0)[11..],
        &clock(t1)[11..]
    );
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_that_missed_its_heartbeats_is_called_stopped() {
        let w = WorkerInfo {
            until: 40_000,
            ttl_ms: 30_000,
            ..WorkerInfo::default()
        };
        // Last heartbeat at 10 s, one due every 10 s: two missed (plus 2 s) is a stopped worker.
        assert_eq!(silence(&w, 31_000), None);
        assert_eq!(
            silence(&w, 32_500).as_deref(),
            Some("no heartbeat for 22.5 s (expected every 10.0 s): stopped or cut off")
        );
    }
}
