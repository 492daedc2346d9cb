//! Pauses: a run's own, and a workflow's, a version's or a task queue's, and what a pause
//! holds (ARCHITECTURE §16b).

use serde::{Deserialize, Serialize};

use super::numbers::whole_u32_opt;
use super::runs::Status;

/// Body of `POST /v1/pauses`: what to pause. Exactly one of `workflow` (with `version`: only
/// that version), `queue` or `filter`.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PauseRequest {
    /// Every run of this workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// With `workflow`: only runs of this version.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "whole_u32_opt")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 4_294_967_295_u64))]
    pub version: Option<u32>,
    /// Every run whose next task goes to this task queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Every run the list filter matches now, each on its own.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::object_opt"
    )]
    pub filter: Option<PauseFilter>,
    /// Why (recorded with who asked, shown on the runs it holds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Hold the timers and deadlines of the runs it stops (they move later by the pause's
    /// length when resumed). Default: kept (a timer that came due meanwhile fires at the
    /// resume; a deadline that passed fails the run then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_timers: Option<bool>,
    /// Pause even while a live worker of a build from before pauses would not honour it
    /// (default: refused with 409 naming those workers). The answer's `unenforced_by` names
    /// them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
}

/// Body of `POST /v1/pauses/resume`: what to resume, as it was paused. Exactly one of
/// `workflow` (with `version`), `queue` or `filter`.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ResumeRequest {
    /// Every run of this workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// With `workflow`: only runs of this version.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "whole_u32_opt")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 4_294_967_295_u64))]
    pub version: Option<u32>,
    /// Every run whose next task goes to this task queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Every run the list filter matches now, each on its own.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::object_opt"
    )]
    pub filter: Option<PauseFilter>,
    /// Why (recorded with who asked, shown on the runs it holds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// With `workflow`: move the runs it puts back to this version, e.g. after a fix; a live
    /// worker must serve it.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "whole_u32_opt")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 4_294_967_295_u64))]
    pub to_version: Option<u32>,
}

/// The runs a filter pause or resume acts on: those of `GET /v1/runs` that match.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PauseFilter {
    /// Only runs with this status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// Only runs of this workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// Only runs whose id starts with this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// At most this many runs, newest first (default and most 10000).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "whole_u32_opt")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 10000))]
    pub limit: Option<u32>,
}

/// Body of `POST /v1/runs/{id}/pause` (optional).
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RunPauseBody {
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Hold the run's timer and deadline while paused (default: kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_timers: Option<bool>,
    /// Pause even while a live worker of a build from before pauses would not honour it
    /// (default: refused with 409 naming those workers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
}

/// Body of `POST /v1/runs/{id}/unpause` (optional).
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RunUnpauseBody {
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Put the run back on this version of its workflow.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "whole_u32_opt")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 4_294_967_295_u64))]
    pub to_version: Option<u32>,
}

/// A pause: what it holds, who asked, when, why.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PauseView {
    /// `run`, `workflow`, `version` or `queue`.
    pub scope: String,
    /// The workflow (scope `workflow` and `version`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// The version (scope `version`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
    /// The task queue (scope `queue`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Who paused (an API token's name; `api` without authentication).
    pub by: String,
    /// When (ms, server clock).
    pub at: u64,
    /// Timers and deadlines of the runs it stops are held.
    pub hold_timers: bool,
    /// Why.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// Answer of `GET /v1/pauses`.
#[derive(Debug, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PauseList {
    /// The workflow, version and queue pauses in force.
    pub pauses: Vec<PauseView>,
    /// Runs a pause has stopped (status `paused`), any scope.
    pub paused_runs: u64,
    /// While a pause is in force or a run is paused: the live workers (`id (host pid)`) of a
    /// build from before pauses, which claim paused runs (a worker that joined after the
    /// pause, or one a forced pause named). Stop or upgrade them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unenforced_by: Vec<String>,
}

/// Answer of `POST /v1/pauses` and `POST /v1/pauses/resume`.
#[derive(Debug, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PauseReply {
    /// The workflow, version or queue pause written or lifted (absent for a filter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<PauseView>,
    /// Pause: the scope was paused already (the record is replaced by this one).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replaced: bool,
    /// Filter: runs paused, or resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<u64>,
    /// Resume: runs put back where the pause found them (the scanner hands them to workers at
    /// its pace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed: Option<u64>,
    /// Resume: runs another pause still holds (their own, or another scope's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub still_held: Option<u64>,
    /// A forced pause: the live workers (`id (host pid)`) of a build from before pauses, which
    /// may still claim the runs it holds until they are stopped or upgraded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unenforced_by: Vec<String>,
}

/// Answer of `POST /v1/runs/{id}/pause` and `/unpause`.
#[derive(Debug, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunPauseReply {
    /// The run.
    pub thread_id: String,
    /// Its status now.
    pub status: Status,
    /// Its own pause, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<PauseView>,
    /// Unpause: a workflow, version or queue pause still holds the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<PauseView>,
    /// A forced pause: the live workers (`id (host pid)`) of a build from before pauses, which
    /// may still claim the run until they are stopped or upgraded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unenforced_by: Vec<String>,
}

/// What a pause does to a run, in its view: the pause holding it and whether it has stopped it.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunPauseView {
    /// The pause.
    #[serde(flatten)]
    pub pause: PauseView,
    /// The pause has stopped the run (status `paused`); false: the run takes no new slice
    /// once its current one ends or its timer or wait comes due.
    pub stopped: bool,
    /// The status a resume puts it back in (when stopped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumes_as: Option<Status>,
}
