//! Schedules: a schedule as created, stored and shown, and the bodies and answers of its
//! calls.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a schedule does when a firing comes while its previous run has not ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Skip the firing (counted in `skipped`).
    #[default]
    Skip,
    /// Hold one firing and start it when the previous run ends (further ones are skipped).
    BufferOne,
    /// Start it anyway.
    AllowAll,
    /// Cancel the previous run, then start it.
    CancelPrevious,
}

/// What a schedule does with firings it missed by more than the catch-up window (the
/// schedulers were down, or it was created with a past start).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Catchup {
    /// Start one run, for the latest missed firing.
    #[default]
    Latest,
    /// Start a run for each missed firing, up to `catchup_limit` (the latest ones).
    All,
    /// Start none.
    None,
}

/// A schedule (`POST /v1/schedules`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ScheduleBody {
    /// The schedule's id (1-64 characters of `A-Z a-z 0-9 _ . -`); its runs are named
    /// `<id>-<firing time, UTC, e.g. 20261202T093000Z>`.
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[A-Za-z0-9_.-]{1,64}$", example = "nightly-report")
    )]
    pub id: String,
    /// The workflow each firing starts.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, example = "chain"))]
    pub workflow: String,
    /// The input of every run.
    #[serde(default)]
    pub input: Value,
    /// A cron pattern: 5 fields (minute hour day-of-month month day-of-week) or 6 with
    /// seconds first; `L`, `#` and `W` as in croner. One of `cron` and `every_secs`.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(example = "0 30 9 * * MON-FRI"))]
    pub cron: Option<String>,
    /// A fixed interval in whole seconds (1 to 31,536,000), firing at multiples of it since
    /// the Unix epoch.
    #[serde(default, deserialize_with = "super::numbers::whole_u64_opt")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 31_536_000))]
    pub every_secs: Option<u64>,
    /// The IANA time zone the cron pattern is read in (default `UTC`).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(example = "Europe/Berlin"))]
    pub timezone: Option<String>,
    /// What a firing does while the previous run has not ended (default `skip`).
    #[serde(default)]
    pub overlap: Overlap,
    /// What happens to firings missed by more than `catchup_window_secs` (default `latest`).
    #[serde(default)]
    pub catchup: Catchup,
    /// With `catchup: all`, the most missed firings started (default 10).
    #[serde(default = "default_catchup_limit", deserialize_with = "super::numbers::whole_u32")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1000))]
    pub catchup_limit: u32,
    /// How late a firing may be and still run as itself (default 60 s).
    #[serde(default = "default_catchup_window", deserialize_with = "super::numbers::whole_u64")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 31_536_000))]
    pub catchup_window_secs: u64,
    /// The timeout of each run it starts (`timeout_secs` of a start).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 31_536_000))]
    pub timeout_secs: Option<f64>,
}

/// When and how a schedule fires, and what it starts (stored as JSON; the input is kept
/// apart, sealed like a run's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScheduleSpec {
    /// The workflow each firing starts.
    pub workflow: String,
    /// The cron pattern, if it is a cron schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// The interval in seconds, if it is an interval schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_secs: Option<u64>,
    /// The cron pattern's time zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// The overlap policy.
    pub overlap: Overlap,
    /// The catch-up policy.
    pub catchup: Catchup,
    /// The most missed firings started with `catchup: all`.
    pub catchup_limit: u32,
    /// How late a firing may be and still run as itself (s).
    pub catchup_window_secs: u64,
    /// The timeout of each run (s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<f64>,
    /// The version of the input's type the input was checked at (the serving code's,
    /// `Versioned`; absent: 1): each run it starts is stamped with it, so a worker upgrades the
    /// input through the workflow's migrations after the type changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_version: Option<u32>,
}

impl ScheduleBody {
    /// What the schedule stores of this body: everything but its id and input.
    pub fn spec(&self) -> ScheduleSpec {
        ScheduleSpec {
            workflow: self.workflow.clone(),
            cron: self.cron.clone(),
            every_secs: self.every_secs,
            timezone: self.timezone.clone(),
            overlap: self.overlap,
            catchup: self.catchup,
            catchup_limit: self.catchup_limit,
            catchup_window_secs: self.catchup_window_secs,
            timeout_secs: self.timeout_secs,
            input_version: None,
        }
    }
}

fn default_catchup_limit() -> u32 {
    10
}

fn default_catchup_window() -> u64 {
    60
}

/// A schedule as the API shows it.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScheduleView {
    /// Its id.
    pub id: String,
    /// The input of every run.
    pub input: Value,
    /// What it starts, when and how.
    pub spec: ScheduleSpec,
    /// `active` or `paused`.
    pub state: String,
    /// The operator's note when paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Its next firing (ms), unless paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_at: Option<u64>,
    /// The next few firings (ms).
    pub upcoming: Vec<u64>,
    /// The run of its latest firing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<String>,
    /// That firing's time (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_at: Option<u64>,
    /// A firing held until the previous run ends (`buffer_one`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffered_at: Option<u64>,
    /// Runs started so far.
    pub fired: u64,
    /// Firings skipped (overlap or catch-up).
    pub skipped: u64,
    /// Created (ms).
    pub created_at: u64,
}

/// `GET /v1/schedules`.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScheduleList {
    /// Every schedule, oldest first.
    pub schedules: Vec<ScheduleView>,
}

/// Body of pause.
#[derive(Debug, Default, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PauseBody {
    /// Why (shown with the schedule).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 1000))]
    pub note: Option<String>,
}

/// Answer of trigger.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TriggerReply {
    /// The run started.
    pub thread_id: String,
}
