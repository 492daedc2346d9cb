//! The doctor: why a run is or is not moving, in plain language, with the evidence it read and
//! the exact command that settles it (`GET /v1/runs/{thread_id}/diagnosis`, `savepoint doctor`,
//! the console's run page).
//!
//! [`gather`] reads everything the verdict rests on (the run header, the store clock, the live
//! fleet, the lease holder's `/healthz`, the queue depth, the effect records the run holds or
//! waits on, the last events); [`diagnose`] is a plain function of those facts, so each case
//! can be unit-tested as well as created for real (`integration-tests/tests/doctor.rs`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use std::time::Duration;

use savepoint_core::journal::Entry;
use savepoint_store::{EffectRecord, RunEvent, RunHeader, WorkerInfo};

use super::extract::thread_id;
use super::extract::ApiPath;
pub(crate) use super::model::{Action, Case, Diagnosis, EffectFact, LeaseHolder, Server};
use super::{ApiError, ApiState, Reply};

mod actions;
mod blocked;
mod effects;
mod fleet;
mod gather;
mod probe;
mod runnable;
mod verdict;

pub(crate) use actions::{pause_action, unpause_action};
use fleet::Fleet;
pub(crate) use gather::gather_chain;
pub(crate) use probe::{healthz, probeable, ProbeError};

/// Events shown as evidence.
const LAST_EVENTS: usize = 10;
/// How long the doctor waits for a worker's `/healthz` or the broker's queue depth.
const PROBE: Duration = Duration::from_millis(1_000);
/// Workers whose `/healthz` one diagnosis asks at most.
const MAX_PROBES: usize = 16;

/// Everything [`diagnose`] needs, read by [`gather`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Facts {
    /// Store time (ms).
    pub now: u64,
    /// The live fleet.
    pub workers: Vec<WorkerInfo>,
    /// What each probed worker's `/healthz` answered, by worker id (the lease holder and
    /// the workers serving the run's workflow; workers without a listener are not probed).
    pub health: std::collections::BTreeMap<String, Result<(), ProbeError>>,
    /// Ready tasks in the queue.
    pub queue_depth: Option<u32>,
    /// Messages in the dead-letter queue (read for a pending run found overdue with no task
    /// queued: its task may be there).
    pub dlq_depth: Option<u32>,
    /// The last journal entry (what a sleeping run sleeps on).
    pub last: Option<Entry>,
    /// The record of the effect key the run is blocked on.
    pub blocked_record: Option<EffectRecord>,
    /// The record of the effect key the run backs off on.
    pub waited_record: Option<EffectRecord>,
    /// The effect the run began at its next journal index and has not journaled (its key and
    /// record), unless it is the one it is blocked on.
    pub begun: Option<(String, Option<EffectRecord>)>,
    /// The run's last events.
    pub events: Vec<RunEvent>,
    /// Takeovers at one journal position that block a run as a poison run (the store's
    /// `max_crashes`; 0 when not read: any takeover counts).
    pub max_crashes: u32,
    /// Why the run is not running, until when ([`super::waiting`]).
    pub waiting: Option<super::model::Waiting>,
    /// The workflow, version and queue pauses in force (read for a run that has not ended).
    pub pauses: Vec<savepoint_store::Pause>,
    /// For a run blocked on an effect in doubt: every effect key it has in doubt (the one it is
    /// blocked on first, then those its crashed attempt began side by side).
    pub in_doubt: Vec<String>,
    /// For a run waiting for its child: the child's own diagnosis (followed down the chain
    /// of waiting parents, at most [`CHILD_DEPTH`] deep).
    pub child: Option<ChildVerdict>,
}

/// The verdict on a run's child, as its parent's diagnosis reads it.
#[derive(Debug, Clone)]
pub(crate) struct ChildVerdict {
    /// The child's case.
    pub case: Case,
    /// Whether the child moves on by itself.
    pub progressing: bool,
    /// Its verdict in one sentence.
    pub summary: String,
    /// What settles it.
    pub actions: Vec<Action>,
}

/// How far down a chain of parents waiting for their children the doctor follows.
pub(crate) const CHILD_DEPTH: u32 = 8;

/// A store time (ms) as RFC 3339, UTC.
pub(crate) fn at(ms: u64) -> String {
    savepoint_client::fmt::timestamp(ms)
}

/// A span of milliseconds, readably (`850 ms`, `4.2 s`, `3 min 5 s`, `2 h 10 min`).
pub(crate) fn span(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms} ms"),
        1_000..=59_999 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..=3_599_999 => format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000),
        _ => format!("{} h {} min", ms / 3_600_000, (ms % 3_600_000) / 60_000),
    }
}

/// `T (in 4.2 s)` or `T (3.1 s ago)` against `now`.
fn when(t: u64, now: u64) -> String {
    if t >= now {
        format!("{} (in {})", at(t), span(t - now))
    } else {
        format!("{} ({} ago)", at(t), span(now - t))
    }
}
/// The evidence every diagnosis starts with, in order: the status against the store clock,
/// the due time, the lease, the queue, who serves the run and who is gone, the effects it
/// holds or waits on, its takeovers, workers the doctor cannot reach, and a sleeping run's
/// missing server.
fn common_evidence(
    h: &RunHeader,
    f: &Facts,
    fleet: &Fleet<'_>,
    lease: Option<&LeaseHolder>,
    effect_lines: Vec<String>,
) -> Vec<String> {
    let now = f.now;
    let mut evidence = vec![format!(
        "status {} at journal entry {}, attempt {}, fence {}; store clock {}",
        h.status,
        h.steps,
        h.attempt,
        h.fence,
        at(now)
    )];
    evidence.extend(h.due.map(|due| format!("due at {}", when(due, now))));
    evidence.extend(lease.map(|l| fleet::lease_evidence(l, now)));
    evidence.extend(f.queue_depth.map(|depth| format!("{depth} task(s) ready in the queue")));
    evidence.push(fleet.servers_text.clone());
    evidence.extend(fleet::silent_evidence(&fleet.silent, f));
    evidence.extend(effect_lines);
    evidence.extend(crash_evidence(h));
    evidence.extend(fleet::unreachable_evidence(f));
    evidence.extend(runnable::sleep_warning(h, now, &fleet.servers));
    evidence.extend(f.waiting.as_ref().map(|w| waiting_evidence(w, now)));
    evidence
}

/// The run's waiting cause and its estimate, as evidence.
fn waiting_evidence(w: &super::model::Waiting, now: u64) -> String {
    let est = match w.estimate.at {
        Some(t) => format!("expected to run {} ({})", when(t, now), w.estimate.how),
        None => w.estimate.how.clone(),
    };
    format!("waiting on {}: {} {est}", w.on, w.summary)
}

/// The takeovers at the run's journal position, if any, and the workers that held it.
fn crash_evidence(h: &RunHeader) -> Option<String> {
    (h.crashes > 0).then(|| {
        format!(
            "taken over {} time(s) at this entry; workers that held it: {}",
            h.crashes,
            h.crashed_by.as_deref().unwrap_or("?")
        )
    })
}

/// The verdict on a run from the facts.
pub(crate) fn diagnose(h: &RunHeader, f: &Facts) -> Diagnosis {
    let fleet = fleet::fleet(h, f);
    let lease = fleet::lease_holder(h, f);
    let (effects, effect_lines) = effects::effect_facts(h, f);
    let mut evidence = common_evidence(h, f, &fleet, lease.as_ref(), effect_lines);
    let verdict = verdict::verdict(h, f, &fleet, lease.as_ref());
    evidence.extend(verdict.evidence);
    Diagnosis {
        thread_id: h.thread.as_str().to_owned(),
        workflow: h.workflow.clone(),
        workflow_version: h.workflow_version,
        status: h.status.into(),
        case: verdict.case,
        progressing: verdict.progressing,
        summary: verdict.summary,
        evidence,
        actions: verdict.actions,
        now: f.now,
        due_at: h.due,
        queue_depth: f.queue_depth,
        lease,
        servers: fleet.servers,
        waiting: f.waiting.clone(),
        effects,
        events: f.events.iter().map(super::views::event_view).collect(),
    }
}

/// Diagnose a run
///
/// Why the run is or is not progressing, in plain language, with the evidence (status and
/// due time against the store clock, the lease holder and whether its process answers
/// `/healthz`, the live workers that serve its workflow version, the queue depth, the effect
/// keys it holds or waits on, its last events) and, when something must be done, the exact
/// command and API call that settles it.
#[utoipa::path(
    get,
    path = "/v1/runs/{thread_id}/diagnosis",
    operation_id = "diagnose_run",
    tag = "runs",
    params(super::ThreadParam),
    responses((status = 200, description = "The diagnosis", body = Diagnosis))
)]
pub(crate) async fn diagnosis(State(st): State<ApiState>, ApiPath(raw): ApiPath<String>) -> Reply<Diagnosis> {
    let thread = thread_id(raw)?;
    let svc = st.services()?;
    let h = svc
        .store
        .header(&thread)
        .await?
        .ok_or_else(|| ApiError::run_not_found(&thread))?;
    let facts = gather_chain(svc, &h, None).await?;
    Ok((StatusCode::OK, Json(diagnose(&h, &facts))))
}

#[cfg(test)]
mod tests {
    use super::actions::sh;
    use super::blocked::block_case;
    use super::*;
    use savepoint_core::ids::ThreadId;
    use savepoint_core::journal::EntryKind;
    use savepoint_store::CatalogEntry;
    use savepoint_store::{BlockKind, RunStatus};

    fn header(status: RunStatus) -> RunHeader {
        let fields = std::collections::BTreeMap::from([
            ("status".to_owned(), status.as_str().as_bytes().to_vec()),
            ("wf".to_owned(), b"invoice".to_vec()),
            ("wfv".to_owned(), b"1".to_vec()),
        ]);
        RunHeader::from_fields(&ThreadId::new("t-1".to_owned()).unwrap(), &fields).unwrap()
    }

    fn worker(id: &str, version: u32) -> WorkerInfo {
        WorkerInfo {
            id: id.into(),
            workflows: vec![CatalogEntry {
                name: "invoice".into(),
                version,
                min_version: version,
                input_version: None,
                input_type: None,
            }],
            until: 20_000,
            ttl_ms: 10_000,
            ..WorkerInfo::default()
        }
    }

    #[test]
    fn blocks_are_classified_by_their_recorded_kind() {
        let mut h = header(RunStatus::Blocked);
        // The kind decides, whatever the reason says and however often the run crashed.
        h.reason = Some("non-determinism at entry 1: the workflow returned but …".into());
        h.crashes = 3;
        h.block_kind = Some(BlockKind::Panic);
        assert_eq!(block_case(&h, 3), Case::Blocked);
        h.reason = Some("anything".into());
        h.block_kind = Some(BlockKind::NonDeterminism);
        assert_eq!(block_case(&h, 3), Case::BlockedNonDeterminism);
        h.crashes = 0;
        h.block_kind = Some(BlockKind::Poison);
        assert_eq!(block_case(&h, 3), Case::BlockedPoison);
        h.block_kind = Some(BlockKind::InDoubt);
        assert_eq!(block_case(&h, 3), Case::BlockedInDoubt);
        h.block_kind = Some(BlockKind::Migration);
        assert_eq!(block_case(&h, 3), Case::BlockedMigration);
        for kind in [BlockKind::Undecodable, BlockKind::Other] {
            h.block_kind = Some(kind);
            assert_eq!(block_case(&h, 3), Case::Blocked, "{kind}");
        }
    }

    /// A run blocked on a recorded value its code cannot upgrade: the verdict says what
    /// settles it (a build with the migration, then a retry), and a cancel.
    #[test]
    fn a_missing_migration_is_settled_by_a_build_that_has_it_then_a_retry() {
        let mut h = header(RunStatus::Blocked);
        h.block_kind = Some(BlockKind::Migration);
        h.reason = Some(
            "the value recorded by step \"parse\" (entry 0) cannot be read: it was recorded at version 1 of Invoice \
             and this code reads version 3: upgrading it from version 2 to 3: no migration declared"
                .into(),
        );
        let d = diagnose(&h, &Facts::default());
        assert_eq!(d.case, Case::BlockedMigration);
        assert!(
            d.summary.contains("cannot upgrade") && d.summary.contains("from version 2 to 3"),
            "{}",
            d.summary
        );
        let commands: Vec<&str> = d.actions.iter().map(|a| a.command.as_str()).collect();
        assert!(d.actions[0].label.contains("Versioned::VERSION"), "{:?}", d.actions[0]);
        assert!(
            commands.iter().any(|c| c.starts_with("savepoint retry ")),
            "{commands:?}"
        );
        assert!(
            commands.iter().any(|c| c.starts_with("savepoint cancel ")),
            "{commands:?}"
        );
    }

    #[test]
    fn runs_blocked_before_block_kinds_are_classified_by_their_other_fields() {
        let mut h = header(RunStatus::Blocked);
        assert_eq!(h.block_kind, None);
        h.reason = Some("non-determinism at entry 1: the workflow returned but …".into());
        assert_eq!(block_case(&h, 3), Case::BlockedNonDeterminism);
        h.reason = Some("workflow code panicked after entry 0: boom; fix the code and retry the run".into());
        h.crashes = 2;
        assert_eq!(block_case(&h, 3), Case::Blocked);
        h.reason = Some("crashed 3 times at entry 0 (read_pdf) without progress; workers: a, b, c".into());
        h.crashes = 3;
        assert_eq!(block_case(&h, 3), Case::BlockedPoison);
        h.blocked_effect = Some("email:1".into());
        assert_eq!(block_case(&h, 3), Case::BlockedInDoubt);
    }

    #[test]
    fn a_running_run_whose_worker_does_not_answer_is_held_by_a_dead_worker() {
        let mut h = header(RunStatus::Running);
        h.owner = Some("w1".into());
        h.lease_until = 15_000;
        let mut f = Facts {
            now: 10_000,
            workers: vec![worker("w1", 1)],
            health: [("w1".to_owned(), Ok(()))].into(),
            ..Facts::default()
        };
        assert_eq!(diagnose(&h, &f).case, Case::Running);
        f.health
            .insert("w1".into(), Err(ProbeError::Refused("connection refused".into())));
        let d = diagnose(&h, &f);
        assert_eq!(d.case, Case::HeldByDeadWorker);
        assert!(d.summary.contains("at 1970-01-01T00:00:15.000Z"), "{}", d.summary);
        // A timeout is not proof: the worker still heartbeats, so it is still alive.
        f.health
            .insert("w1".into(), Err(ProbeError::Unreachable("operation timed out".into())));
        assert_eq!(diagnose(&h, &f).case, Case::Running);
    }

    /// A pending run of invoice v1, given back by a worker for `waiting_for` if any.
    fn pending(workers: Vec<WorkerInfo>, waiting_for: Option<&str>) -> Diagnosis {
        let mut h = header(RunStatus::Pending);
        h.waiting_for = waiting_for.map(str::to_owned);
        let f = Facts {
            now: 10_000,
            workers,
            ..Facts::default()
        };
        diagnose(&h, &f)
    }

    #[test]
    fn unserved_runs_say_which_versions_are_served_or_why_they_were_given_back() {
        let d = pending(vec![worker("w2", 2)], None);
        assert_eq!(d.case, Case::NoWorker);
        assert!(d.summary.contains("live workers serve v2..=v2"), "{}", d.summary);
        // Its version is served, but the worker that tried it reads another checkpoint schema.
        let d = pending(
            vec![worker("w1", 1)],
            Some("waiting for a worker that reads checkpoint schema v3"),
        );
        assert_eq!(d.case, Case::NoWorker);
        assert!(d.summary.contains("checkpoint schema v3"), "{}", d.summary);
    }

    #[test]
    fn an_overdue_run_with_nothing_queued_points_at_the_dead_letter_queue_when_it_holds_any() {
        let mut h = header(RunStatus::Pending);
        h.due = Some(1_000);
        let mut f = Facts {
            now: 15_000,
            workers: vec![worker("w1", 1)],
            queue_depth: Some(0),
            ..Facts::default()
        };
        let d = diagnose(&h, &f);
        assert_eq!(d.case, Case::Overdue);
        assert!(!d.summary.contains("dead-letter"), "{}", d.summary);
        f.dlq_depth = Some(3);
        let d = diagnose(&h, &f);
        assert!(
            d.summary.contains("The dead-letter queue holds 3 message(s)"),
            "{}",
            d.summary
        );
    }

    #[test]
    fn a_long_sleep_without_workers_is_sleeping_with_a_warning_and_an_overdue_one_says_so() {
        let mut h = header(RunStatus::Sleeping);
        h.due = Some(10_000 + 3_600_000);
        let mut f = Facts {
            now: 10_000,
            last: Some(Entry::new(
                "nap",
                EntryKind::Sleep,
                savepoint_core::journal::Outcome::Ok(serde_json::Value::Null),
                1,
            )),
            ..Facts::default()
        };
        let d = diagnose(&h, &f);
        assert_eq!(d.case, Case::Sleeping, "{}", d.summary);
        assert!(d
            .evidence
            .iter()
            .any(|e| e.contains("one must be running when it wakes")));
        // Woken an hour ago and still asleep, with a worker serving it: overdue.
        f.now = 10_000 + 7_200_000;
        f.workers = vec![WorkerInfo {
            until: f.now + 5_000,
            ..worker("w1", 1)
        }];
        let d = diagnose(&h, &f);
        assert_eq!(d.case, Case::Sleeping);
        assert!(d.summary.contains("overdue by 1 h 0 min"), "{}", d.summary);
    }

    #[test]
    fn probe_errors_read_as_before_and_only_refusals_and_bad_statuses_prove_a_worker_gone() {
        let refused = ProbeError::Refused("connection refused".into());
        let bad = ProbeError::BadStatus(reqwest::StatusCode::SERVICE_UNAVAILABLE);
        let timeout = ProbeError::Unreachable("operation timed out".into());
        assert_eq!(refused.to_string(), "refused: connection refused");
        assert_eq!(bad.to_string(), "answered 503 Service Unavailable");
        assert_eq!(timeout.to_string(), "operation timed out");
        assert!(refused.proves_gone() && bad.proves_gone() && !timeout.proves_gone());
    }

    #[test]
    fn a_paused_run_whose_pause_was_lifted_names_the_pause_that_holds_it_now() {
        use savepoint_store::{Pause, PauseRecord, PauseScope, RunStatus};
        let mut h = header(RunStatus::Paused);
        let stopped_by = PauseRecord::new("alice", "provider down", false).encode();
        h.paused_by = Some(("w:invoice".into(), stopped_by.clone(), RunStatus::Pending));
        let held = Pause {
            scope: PauseScope::Version("invoice".into(), 1),
            record: PauseRecord::new("bob", "v1 bug", false),
        };
        let f = Facts {
            now: 10,
            pauses: vec![held.clone()],
            ..Facts::default()
        };
        let d = diagnose(&h, &f);
        assert_eq!(d.case, Case::Paused);
        assert!(
            d.summary.contains("asked by bob") && d.summary.contains("v1 bug"),
            "{}",
            d.summary
        );
        assert_eq!(d.actions[0].command, "savepoint unpause --workflow invoice --version 1");
        // The pause that stopped it still in force: it is the one named.
        let f = Facts {
            pauses: vec![
                held,
                Pause {
                    scope: PauseScope::Workflow("invoice".into()),
                    record: PauseRecord::decode(&stopped_by).unwrap(),
                },
            ],
            ..f
        };
        let d = diagnose(&h, &f);
        assert!(d.summary.contains("asked by alice"), "{}", d.summary);
        assert_eq!(d.actions[0].command, "savepoint unpause --workflow invoice");
    }

    #[test]
    fn spans_and_quoting() {
        assert_eq!(span(850), "850 ms");
        assert_eq!(span(4_200), "4.2 s");
        assert_eq!(span(185_000), "3 min 5 s");
        assert_eq!(sh("invoice-1"), "invoice-1");
        assert_eq!(sh("it's"), r"'it'\''s'");
    }
}
