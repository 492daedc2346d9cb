//! The fleet: the live workers (`GET /v1/workers`) and the workflows they serve
//! (`GET /v1/workflows`), as the workers' registrations in Redis say.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// A workflow a worker serves: the newest version (where its new runs start) and the oldest
/// it still runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Served {
    /// The workflow's name.
    pub workflow: String,
    /// The newest version served.
    pub version: u32,
    /// The oldest version served.
    pub min_version: u32,
}

/// A live worker, as its last heartbeat registered it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerView {
    /// The worker's incarnation id (`<name>-<12 hex>`, new at every start).
    pub id: String,
    /// Its host name.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// When it started (ms since the epoch, its own clock).
    pub started_at: u64,
    /// The task queues it consumes.
    pub queues: Vec<String>,
    /// What it serves, by workflow name.
    pub serves: Vec<Served>,
    /// Runs it may execute at once (`worker.concurrency`).
    pub concurrency: u32,
    /// Runs executing in it at its last heartbeat.
    pub in_flight: u32,
    /// Journal entries it committed since it started, at its last heartbeat.
    pub steps: u64,
    /// Slices it started per second recently (a moving mean over its heartbeats): the pace
    /// it takes tasks off its queues at, behind a queued run's estimate.
    #[serde(default)]
    pub slices_per_sec: f64,
    /// The promises its build keeps that an older build the upgrade policy allows may not
    /// (`pause`: it stops the runs a pause holds). Empty for a worker of a build from before
    /// pauses: while one is live, a pause is refused unless forced (ARCHITECTURE §16b).
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Its last heartbeat (server ms).
    pub last_heartbeat_at: u64,
    /// How often it refreshes its registration (ms).
    pub heartbeat_every_ms: u64,
    /// When its registration lapses unless refreshed (server ms).
    pub expires_at: u64,
    /// Set when its heartbeat is overdue (by more than two seconds past the expected
    /// interval): how long it has been silent (ms). A worker killed, paused or cut off shows
    /// here until its registration lapses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silent_ms: Option<u64>,
    /// Its health and metrics address (`http://host:port`: `/healthz`, `/metrics`), when it
    /// serves one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_address: Option<String>,
    /// The build it runs (empty for a build from before builds were registered).
    #[serde(default)]
    pub build: BuildView,
}

/// A worker's build: what tells the builds of a rollout apart.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BuildView {
    /// The engine's version.
    #[serde(default)]
    pub version: String,
    /// The build's id: `SAVEPOINT_BUILD_ID` when the worker was given one (an image tag, a
    /// commit), else `contract`.
    #[serde(default)]
    pub id: String,
    /// 12 hex digits of the SHA-256 of what the build serves (engine version, workflows and
    /// versions, value types and versions, run features): builds with one contract are
    /// interchangeable to the engine.
    #[serde(default)]
    pub contract: String,
    /// The versioned value types it reads, `NAME@VERSION`.
    #[serde(default)]
    pub values: Vec<String>,
}

/// `GET /v1/workers`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerList {
    /// Every live worker, by id.
    pub workers: Vec<WorkerView>,
    /// How many live workers run each build, by build id: one entry once a rollout finished.
    #[serde(default)]
    pub builds: BTreeMap<String, u32>,
    /// The store's clock when it was read (server ms), for `last_heartbeat_at` and `expires_at`.
    pub server_time: u64,
}

/// One version of a workflow that live workers serve.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkflowVersion {
    /// The version.
    pub version: u32,
    /// Live workers that serve it.
    pub workers: u32,
    /// The JSON Schemas a worker published for it (`input`, `interrupts`, `signals`,
    /// `effects`), if any did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub schemas: Option<Value>,
}

/// A workflow live workers serve.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkflowView {
    /// Its name.
    pub name: String,
    /// The newest version served (new runs start at it).
    pub version: u32,
    /// The oldest version served.
    pub min_version: u32,
    /// Every version served, oldest first, with its workers and published schemas.
    pub versions: Vec<WorkflowVersion>,
    /// The task queues its workers consume.
    pub queues: Vec<String>,
    /// Live workers that serve some version of it.
    pub workers: u32,
    /// Its runs by status: among the newest runs of the namespace (`runs_counted` in the
    /// list), and every blocked, waiting and paused run however old.
    pub runs: BTreeMap<String, u64>,
    /// The pauses in force on it: the workflow's own and its versions' (absent: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paused: Vec<super::PauseView>,
}

/// `GET /v1/workflows`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkflowList {
    /// Every workflow some live worker serves, by name.
    pub workflows: Vec<WorkflowView>,
    /// How many of the newest runs were counted by status (blocked and waiting runs are all
    /// counted); `runs_capped` says whether there were more.
    pub runs_counted: u64,
    /// True when the namespace holds more runs than were counted.
    pub runs_capped: bool,
}
