//! The fleet as an API: the live workers (`GET /v1/workers`) and the workflows they serve
//! (`GET /v1/workflows`), from the workers' registrations in Redis (the console's fleet page
//! and the doctor read the same registrations).

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use savepoint_store::{PauseScope, WorkerInfo, WorkflowCounts};

use super::model::{BuildView, Served, WorkerList, WorkerView, WorkflowList, WorkflowVersion, WorkflowView};
use super::{ApiState, Reply};

/// Newest runs counted by status for `GET /v1/workflows` (blocked and waiting runs come from
/// their own indexes, up to as many again each).
const COUNT_CAP: usize = 20_000;

/// The queues a worker consumes, from its registration (comma-separated).
fn queues_of(w: &WorkerInfo) -> Vec<String> {
    w.queue
        .split(',')
        .filter(|q| !q.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A worker's registration as the API shows it, as of the store clock `now`.
fn worker_view(w: &WorkerInfo, now: u64) -> WorkerView {
    WorkerView {
        id: w.id.clone(),
        host: w.host.clone(),
        pid: w.pid,
        started_at: w.started_at,
        queues: queues_of(w),
        serves: w
            .workflows
            .iter()
            .map(|e| Served {
                workflow: e.name.clone(),
                version: e.version,
                min_version: e.min_version,
            })
            .collect(),
        concurrency: w.concurrency,
        in_flight: w.in_flight,
        steps: w.steps,
        slices_per_sec: (w.slices_per_sec * 100.0).round() / 100.0,
        capabilities: w.capabilities.clone(),
        last_heartbeat_at: w.last_heartbeat(),
        heartbeat_every_ms: w.ttl_ms / 3,
        expires_at: w.until,
        silent_ms: w.silent_for(now),
        health_address: w.ops.clone(),
        build: BuildView {
            version: w.build.version.clone(),
            id: w.build.id.clone(),
            contract: w.build.contract.clone(),
            values: w.build.values.clone(),
        },
    }
}

/// List the live workers
#[utoipa::path(
    get,
    path = "/v1/workers",
    operation_id = "list_workers",
    tag = "fleet",
    responses((status = 200, description = "Every live worker: what it serves, its queues, its load and its last heartbeat", body = WorkerList))
)]
pub(crate) async fn workers(State(st): State<ApiState>) -> Reply<WorkerList> {
    let svc = st.services()?;
    let (now, mut live) = tokio::try_join!(svc.store.server_time(), svc.store.live_workers())?;
    live.sort_by(|a, b| a.id.cmp(&b.id));
    let workers: Vec<WorkerView> = live.iter().map(|w| worker_view(w, now)).collect();
    let mut builds = BTreeMap::new();
    for w in &workers {
        *builds.entry(w.build.id.clone()).or_insert(0) += 1;
    }
    Ok((
        StatusCode::OK,
        Json(WorkerList {
            builds,
            workers,
            server_time: now,
        }),
    ))
}

/// List the workflows live workers serve
#[utoipa::path(
    get,
    path = "/v1/workflows",
    operation_id = "list_workflows",
    tag = "fleet",
    responses((status = 200, description = "Every workflow a live worker serves: its versions with their published schemas, its queues, its runs by status", body = WorkflowList))
)]
pub(crate) async fn workflows(State(st): State<ApiState>) -> Reply<WorkflowList> {
    let svc = st.services()?;
    let (live, counts, pauses) = tokio::try_join!(
        svc.store.live_workers(),
        svc.store.status_counts_by_workflow(COUNT_CAP),
        svc.store.pauses()
    )?;
    let mut out = fleet_workflows(&live, &counts);
    for wf in &mut out {
        wf.paused = pauses
            .iter()
            .filter(|p| matches!(&p.scope, PauseScope::Workflow(w) | PauseScope::Version(w, _) if *w == wf.name))
            .map(|p| super::pause::pause_view(Some(&p.scope), &p.record))
            .collect();
    }
    for wf in &mut out {
        for v in &mut wf.versions {
            v.schemas = svc
                .store
                .schemas(&wf.name, v.version)
                .await?
                .and_then(|s| serde_json::to_value(s).ok());
        }
    }
    Ok((
        StatusCode::OK,
        Json(WorkflowList {
            workflows: out,
            runs_counted: counts.counted,
            runs_capped: counts.capped,
        }),
    ))
}

/// The workflows the live workers serve, by name: the versions each serves (with how many
/// workers serve each), their queues, and the runs counted by status (schemas not yet read).
fn fleet_workflows(live: &[WorkerInfo], counts: &WorkflowCounts) -> Vec<WorkflowView> {
    #[derive(Default)]
    struct Acc {
        versions: BTreeMap<u32, u32>,
        queues: BTreeSet<String>,
        workers: u32,
    }
    let mut by_name: BTreeMap<&str, Acc> = BTreeMap::new();
    for w in live {
        for e in &w.workflows {
            let acc = by_name.entry(&e.name).or_default();
            acc.workers += 1;
            acc.queues.extend(queues_of(w));
            for v in e.min_version..=e.version {
                *acc.versions.entry(v).or_default() += 1;
            }
        }
    }
    by_name
        .into_iter()
        .map(|(name, acc)| WorkflowView {
            name: name.to_owned(),
            version: acc.versions.keys().next_back().copied().unwrap_or(1),
            min_version: acc.versions.keys().next().copied().unwrap_or(1),
            versions: acc
                .versions
                .into_iter()
                .map(|(version, workers)| WorkflowVersion {
                    version,
                    workers,
                    schemas: None,
                })
                .collect(),
            queues: acc.queues.into_iter().collect(),
            workers: acc.workers,
            runs: counts
                .by_workflow
                .get(name)
                .map(|m| m.iter().map(|(s, n)| (s.as_str().to_owned(), *n)).collect())
                .unwrap_or_default(),
            paused: Vec::new(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use savepoint_store::{CatalogEntry, RunStatus};

    fn worker(id: &str, queue: &str, serves: &[(&str, u32, u32)]) -> WorkerInfo {
        WorkerInfo {
            id: id.into(),
            workflows: serves
                .iter()
                .map(|(n, lo, hi)| CatalogEntry {
                    name: (*n).into(),
                    version: *hi,
                    min_version: *lo,
                    input_version: None,
                    input_type: None,
                })
                .collect(),
            queue: queue.into(),
            until: 30_000,
            ttl_ms: 15_000,
            ops: None,
            host: "h".into(),
            pid: 1,
            started_at: 0,
            concurrency: 8,
            in_flight: 2,
            steps: 40,
            slices: 0,
            slices_per_sec: 0.0,
            capabilities: WorkerInfo::all_capabilities(),
            build: Default::default(),
        }
    }

    #[test]
    fn workflows_gather_versions_queues_workers_and_runs() {
        let live = [
            worker("a", "default", &[("order", 1, 2), ("mail", 1, 1)]),
            worker("b", "default,gpu", &[("order", 2, 3)]),
        ];
        let mut counts = WorkflowCounts::default();
        counts
            .by_workflow
            .entry("order".into())
            .or_default()
            .insert(RunStatus::Waiting, 4);
        let out = fleet_workflows(&live, &counts);
        assert_eq!(
            out.iter().map(|w| w.name.as_str()).collect::<Vec<_>>(),
            ["mail", "order"]
        );
        let order = &out[1];
        assert_eq!((order.min_version, order.version, order.workers), (1, 3, 2));
        let served: Vec<_> = order.versions.iter().map(|v| (v.version, v.workers)).collect();
        assert_eq!(served, [(1, 1), (2, 2), (3, 1)]);
        assert_eq!(order.queues, ["default", "gpu"]);
        assert_eq!(order.runs.get("waiting"), Some(&4));
        assert!(out[0].runs.is_empty());
    }

    #[test]
    fn a_worker_silent_past_its_heartbeat_says_for_how_long() {
        let w = worker("a", "default,gpu", &[("order", 1, 1)]);
        // Registered until 30 s with a 15 s TTL: last heartbeat at 15 s, every 5 s.
        let fresh = worker_view(&w, 16_000);
        assert_eq!((fresh.last_heartbeat_at, fresh.heartbeat_every_ms), (15_000, 5_000));
        assert_eq!(fresh.silent_ms, None);
        assert_eq!(fresh.queues, ["default", "gpu"]);
        assert_eq!(worker_view(&w, 40_000).silent_ms, Some(25_000));
    }
}
