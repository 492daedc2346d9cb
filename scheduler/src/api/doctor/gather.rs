//! Reading the facts the doctor's verdict rests on (all the I/O of a diagnosis).

use std::collections::BTreeMap;

use savepoint_core::ids::EffectKey;
use savepoint_core::journal::Entry;
use savepoint_store::{EffectRecord, RunEvent, RunHeader, RunStatus, WorkerInfo};

use super::probe::{healthz, probeable, ProbeError};
use super::{Facts, LAST_EVENTS, MAX_PROBES};
use crate::api::{ApiError, Services};

/// The record of an effect key (none for a key that is not a valid one).
async fn effect_record(svc: &Services, key: &str) -> Result<Option<EffectRecord>, ApiError> {
    match EffectKey::new(key.to_owned()) {
        Ok(k) => Ok(svc.store.effect_state(&k).await?),
        Err(_) => Ok(None),
    }
}

/// The run's last events: the tail of the known ones, or read.
async fn last_events(
    svc: &Services,
    h: &RunHeader,
    known: Option<(&[Entry], &[RunEvent])>,
) -> Result<Vec<RunEvent>, ApiError> {
    Ok(match known {
        Some((_, ev)) => ev[ev.len().saturating_sub(LAST_EVENTS)..].to_vec(),
        None => svc.store.events(&h.thread, LAST_EVENTS).await?,
    })
}

/// The last journal entry of a sleeping run (what it sleeps on): from the known journal, or
/// read.
async fn last_entry(
    svc: &Services,
    h: &RunHeader,
    known: Option<(&[Entry], &[RunEvent])>,
) -> Result<Option<Entry>, ApiError> {
    Ok(match (h.steps.checked_sub(1), known) {
        (Some(i), Some((journal, _))) if h.status == RunStatus::Sleeping => journal.get(i as usize).cloned(),
        (Some(i), None) if h.status == RunStatus::Sleeping => svc.store.entry(&h.thread, i).await?,
        _ => None,
    })
}

/// What the `/healthz` of the lease holder first, then of the workers that could serve the
/// run answered, each asked at once (at most [`MAX_PROBES`]).
async fn probe_health(h: &RunHeader, workers: &[WorkerInfo]) -> BTreeMap<String, Result<(), ProbeError>> {
    let owner = h.owner.as_deref().filter(|_| h.status == RunStatus::Running);
    let mut probed: Vec<(&str, &str)> = workers
        .iter()
        .filter(|w| owner == Some(w.id.as_str()) || w.serves(&h.workflow, h.workflow_version))
        .filter_map(|w| probeable(w).map(|ops| (w.id.as_str(), ops)))
        .collect();
    probed.sort_by_key(|(id, _)| Some(*id) != owner);
    let answers = futures::future::join_all(
        probed
            .into_iter()
            .take(MAX_PROBES)
            .map(|(id, ops)| async move { (id.to_owned(), healthz(ops).await) }),
    )
    .await;
    answers.into_iter().collect()
}

/// Ready tasks in the run's queue, for a run that may be queued (absent when the broker does
/// not answer in time).
async fn queue_depth(svc: &Services, h: &RunHeader) -> Option<u32> {
    match h.status {
        RunStatus::Pending | RunStatus::Running | RunStatus::Sleeping => {
            svc.publisher.queue_depth(h.queue.as_deref()).await
        }
        _ => None,
    }
}

/// Messages in the dead-letter queue, or `None` when the broker does not answer within a
/// second.
async fn dlq_depth(svc: &Services) -> Option<u32> {
    tokio::time::timeout(std::time::Duration::from_secs(1), svc.publisher.broker().dlq_depth())
        .await
        .ok()
        .and_then(Result::ok)
}

/// Why the run is not running, from the facts read for the diagnosis (and its flow line and
/// the pauses in force).
async fn waiting(svc: &Services, h: &RunHeader, f: &Facts) -> Result<Option<crate::api::model::Waiting>, ApiError> {
    if h.status.is_final() {
        return Ok(None);
    }
    let held = crate::api::waiting::held_by(h, &f.pauses);
    let mut w = crate::api::waiting::base_facts(svc, h, f.now, &f.workers, held).await?;
    w.depth = f.queue_depth;
    w.timer = f
        .last
        .as_ref()
        .filter(|e| e.kind == savepoint_core::journal::EntryKind::Sleep)
        .map(|e| e.name.clone());
    Ok(crate::api::waiting::waiting(h, &w))
}

/// The effect an unfinished run began at its next journal index and has not journaled (its
/// key and record), unless it is the one it is blocked on.
async fn begun_effect(svc: &Services, h: &RunHeader) -> Result<Option<(String, Option<EffectRecord>)>, ApiError> {
    if h.status.is_final() {
        return Ok(None);
    }
    match svc.store.effect_begun(&h.thread, h.steps).await? {
        Some(k) if h.blocked_effect.as_deref() != Some(k.as_str()) => {
            let rec = effect_record(svc, &k).await?;
            Ok(Some((k, rec)))
        }
        _ => Ok(None),
    }
}

/// The record of an effect key the run names, if it names one.
async fn named_record(svc: &Services, key: Option<&str>) -> Result<Option<EffectRecord>, ApiError> {
    match key {
        Some(k) => effect_record(svc, k).await,
        None => Ok(None),
    }
}

/// Reads the facts about a run. `known`: its journal and events, when the caller has read
/// them already (the run page), so they are not read again.
pub(crate) async fn gather(
    svc: &Services,
    h: &RunHeader,
    known: Option<(&[Entry], &[RunEvent])>,
) -> Result<Facts, ApiError> {
    let (now, workers) = tokio::try_join!(svc.store.server_time(), svc.store.live_workers())?;
    let events = last_events(svc, h, known).await?;
    let last = last_entry(svc, h, known).await?;
    let health = probe_health(h, &workers).await;
    let queue_depth = queue_depth(svc, h).await;
    let dlq_depth = match (h.status, queue_depth, h.due) {
        (RunStatus::Pending, Some(0), Some(due)) if due < now => dlq_depth(svc).await,
        _ => None,
    };
    let blocked_record = named_record(svc, h.blocked_effect.as_deref()).await?;
    let waited_record = named_record(svc, h.wait_effect.as_ref().map(|(k, _)| k.as_str())).await?;
    let begun = begun_effect(svc, h).await?;
    let mut facts = Facts {
        begun,
        now,
        workers,
        health,
        queue_depth,
        dlq_depth,
        last,
        blocked_record,
        waited_record,
        events,
        max_crashes: svc.store.config().max_crashes,
        waiting: None,
        pauses: if h.status.is_final() {
            Vec::new()
        } else {
            svc.store.pauses().await?
        },
        child: None,
        in_doubt: if h.status == RunStatus::Blocked && h.blocked_effect.is_some() {
            crate::api::control::in_doubt(svc, h)
                .await?
                .into_iter()
                .map(|d| d.key.as_str().to_owned())
                .collect()
        } else {
            Vec::new()
        },
    };
    facts.waiting = waiting(svc, h, &facts).await?;
    Ok(facts)
}

/// [`gather`], and for a run waiting for its child the child's diagnosis, down the chain (a
/// parent is not progressing when the run it waits for is not).
pub(crate) async fn gather_chain(
    svc: &Services,
    h: &RunHeader,
    known: Option<(&[Entry], &[RunEvent])>,
) -> Result<Facts, ApiError> {
    let mut facts = gather(svc, h, known).await?;
    facts.child = child_diagnosis(svc, h, super::CHILD_DEPTH).await?;
    Ok(facts)
}

/// The diagnosis of the child run `h` waits for, if it waits for one (`depth`: how many more
/// generations to follow).
fn child_diagnosis<'a>(
    svc: &'a Services,
    h: &'a RunHeader,
    depth: u32,
) -> futures::future::BoxFuture<'a, Result<Option<super::ChildVerdict>, ApiError>> {
    Box::pin(async move {
        let child = h
            .wait
            .as_ref()
            .filter(|w| w.kind == "child")
            .and_then(|w| w.payload["thread_id"].as_str())
            .and_then(|t| savepoint_core::ids::ThreadId::new(t.to_owned()).ok());
        let (Some(child), true) = (child, depth > 0) else {
            return Ok(None);
        };
        let Some(ch) = svc.store.header(&child).await? else {
            return Ok(None);
        };
        let mut facts = gather(svc, &ch, None).await?;
        facts.child = child_diagnosis(svc, &ch, depth - 1).await?;
        let d = super::diagnose(&ch, &facts);
        Ok(Some(super::ChildVerdict {
            case: d.case,
            progressing: d.progressing,
            summary: d.summary,
            actions: d.actions,
        }))
    })
}
