//! Time travel: fork a run from one of its journal entries into a new run, or restart a
//! failed, blocked or cancelled run in place from an entry. Both may let effects after the
//! entry run again (under the code's keys), so both need the `admin` role.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use savepoint_core::ids::{EffectKey, ThreadId};
use savepoint_core::journal::EntryKind;
use savepoint_core::protocol::TaskReason;
use savepoint_store::{ForkOutcome, RestartOutcome, StoreError};
use tracing::info;

use super::checks::ring;
use super::extract::thread_id;
use super::extract::{ApiJson, ApiPath};
use super::model::{Accepted, ErrorBody, ForkBody, ForkReply, Lineage, RestartBody, Status};
use super::{ApiError, ApiState, Reply};

/// Failpoint: a fork or restart written (its run may start at its due time), before the
/// request goes on to note it and publish its task.
const AFTER_CREATE: &str = "lineage.after_create";

/// Fork a run from a journal entry
///
/// Creates a new run of the same workflow, version and input whose journal is the source's
/// first `from_step` entries: they replay (their steps and effects are not run again) and the
/// new run goes on from there. An effect after the entry runs again only under a new key: a
/// key the source settled returns its recorded result (keys derived from the thread id are
/// new in the fork). The source is not changed; a `forked` event in its log names the fork.
#[utoipa::path(
    post,
    path = "/v1/runs/{thread_id}/fork",
    operation_id = "fork_run",
    tag = "control",
    params(super::ThreadParam),
    request_body = ForkBody,
    responses(
        (status = 201, description = "Forked: the new run is pending", body = ForkReply),
        (status = 200, description = "This fork existed already (same id, source and entry)", body = ForkReply),
        (status = 409, description = "The new id is taken by another run", body = ErrorBody),
        (status = 422, description = "`from_step` is past the source's journal", body = ErrorBody),
    )
)]
pub(crate) async fn fork(
    State(st): State<ApiState>,
    ApiPath(raw): ApiPath<String>,
    ApiJson(body): ApiJson<ForkBody>,
) -> Reply<ForkReply> {
    let source = thread_id(raw)?;
    let svc = st.services()?;
    let workflow = match svc.store.header(&source).await? {
        Some(h) => h.workflow,
        None => return Err(ApiError::run_not_found(&source)),
    };
    let to = match body.thread_id {
        Some(raw) => thread_id(raw)?,
        None => ThreadId::generate(&format!("{workflow}-fork")),
    };
    if to == source {
        return Err(ApiError::conflict("a fork needs a thread id of its own"));
    }
    let n = body.from_step;
    let rerun = effects_to_rerun(svc, &source, n, &body.rerun_effects).await?;
    // Freed before the fork exists: once it does, the scanner may start it (at its due
    // time) before this request goes on, and it would read the records it should not.
    let freed = free(svc, &source, &rerun).await?;
    let trace = savepoint_runtime::telemetry::current_traceparent().unwrap_or_else(crate::publish::new_traceparent);
    let reply = |status| ForkReply {
        thread_id: to.as_str().to_owned(),
        status,
        forked_from: Lineage {
            thread_id: source.as_str().to_owned(),
            from_step: n,
        },
    };
    match svc.store.fork(&source, n, &to, &trace).await {
        Ok(ForkOutcome::Created) => {
            info!(thread.id = %to, source = %source, from_step = n, "run forked");
            let _ = svc.publisher.failpoints().check(AFTER_CREATE).await;
            let _ = svc
                .store
                .annotate(&source, "forked", &format!("{to} from entry {n}"))
                .await;
            note_freed(svc, &to, &freed).await;
            // As for a start: a failed publish is only logged, the unconfirmed-start net
            // publishes it.
            ring(svc, &to, Some(n), TaskReason::Start, Some(&trace), 0).await;
            Ok((StatusCode::CREATED, Json(reply(Status::PENDING))))
        }
        Ok(ForkOutcome::Exists(status)) => Ok((StatusCode::OK, Json(reply(status.into())))),
        Ok(ForkOutcome::Conflict(from)) => Err(ApiError::conflict(if from.is_empty() {
            format!("thread id {to} is already used by another run")
        } else {
            format!("thread id {to} is already used by a fork of {from}")
        })),
        Ok(ForkOutcome::OutOfRange(len)) => Err(ApiError::unprocessable(format!(
            "from_step {n} is past the journal of {source}, which has {len} entries"
        ))),
        Err(StoreError::Missing(_)) => Err(ApiError::run_not_found(&source)),
        Err(e) => Err(e.into()),
    }
}

/// Restart a run in place from a journal entry
///
/// Re-runs a failed, blocked or cancelled run from `from_step`: its entries before it are
/// kept and replayed, the rest dropped, its end state cleared (and its deadline), and it is
/// pending again. Effects after the entry run again under the code's keys (a key settled
/// before returns its recorded result). Interrupt answers and signals consumed by dropped
/// entries must be sent again. A run blocked on an in-doubt effect is resolved first (409).
#[utoipa::path(
    post,
    path = "/v1/runs/{thread_id}/restart",
    operation_id = "restart_run",
    tag = "control",
    params(super::ThreadParam),
    request_body = RestartBody,
    responses(
        (status = 202, description = "Restarted: the run is pending", body = Accepted),
        (status = 409, description = "The run is not failed, blocked or cancelled, or is blocked on an in-doubt effect", body = ErrorBody),
        (status = 422, description = "`from_step` is past the journal", body = ErrorBody),
    )
)]
pub(crate) async fn restart(
    State(st): State<ApiState>,
    ApiPath(raw): ApiPath<String>,
    ApiJson(body): ApiJson<RestartBody>,
) -> Reply<Accepted> {
    let thread = thread_id(raw)?;
    let svc = st.services()?;
    let n = body.from_step;
    // (Read before the restart drops the entries that recorded them; freed before the run
    // is pending again, as for a fork.)
    let rerun = effects_to_rerun(svc, &thread, n, &body.rerun_effects).await?;
    if !rerun.is_empty() {
        // Not freed for a run the restart will refuse (it may still be running).
        match svc.store.header(&thread).await? {
            Some(h) if matches!(h.status.as_str(), "failed" | "blocked" | "cancelled") => {}
            Some(h) => {
                return Err(ApiError::conflict(format!(
                    "run is {}; only failed, blocked and cancelled runs are restarted in place (fork it instead)",
                    h.status.as_str()
                )))
            }
            None => return Err(ApiError::run_not_found(&thread)),
        }
    }
    let freed = free(svc, &thread, &rerun).await?;
    match svc.store.restart(&thread, n, "operator restart via API").await {
        Ok(RestartOutcome::Queued(r, was)) => {
            info!(thread.id = %thread, from_step = n, %was, "run restarted");
            let _ = svc.publisher.failpoints().check(AFTER_CREATE).await;
            note_freed(svc, &thread, &freed).await;
            ring(svc, &thread, None, TaskReason::Operator, r.trace.as_deref(), r.rv).await;
            Ok((StatusCode::ACCEPTED, Json(Accepted::pending(thread.as_str()))))
        }
        Ok(RestartOutcome::NotRestartable(status)) => Err(ApiError::conflict(format!(
            "run is {status}; only failed, blocked and cancelled runs are restarted in place (fork it instead)"
        ))),
        Ok(RestartOutcome::OnEffect(key)) => Err(ApiError::conflict(format!(
            "run is blocked on the in-doubt effect {key:?}: settle it with POST /v1/runs/{thread}/effects/{key}/resolve first"
        ))),
        Ok(RestartOutcome::OutOfRange(len)) => Err(ApiError::unprocessable(format!(
            "from_step {n} is past the journal of {thread}, which has {len} entries"
        ))),
        Err(StoreError::Missing(_)) => Err(ApiError::run_not_found(&thread)),
        Err(e) => Err(e.into()),
    }
}

/// The effect keys of `rerun` checked against the journal of `run`: each must be the key of an
/// effect entry at or after `from` (422 otherwise).
async fn effects_to_rerun(
    svc: &super::Services,
    run: &ThreadId,
    from: u32,
    rerun: &[String],
) -> Result<Vec<EffectKey>, ApiError> {
    if rerun.is_empty() {
        return Ok(Vec::new());
    }
    if rerun.len() > 100 {
        return Err(ApiError::unprocessable("rerun_effects names at most 100 keys"));
    }
    let Some((_, journal)) = svc.store.get(run).await? else {
        return Err(ApiError::run_not_found(run));
    };
    let recorded: Vec<&str> = journal
        .iter()
        .skip(from as usize)
        .filter(|e| e.kind == EntryKind::Effect)
        .filter_map(|e| e.key.as_deref())
        .collect();
    rerun
        .iter()
        .map(|k| {
            if !recorded.contains(&k.as_str()) {
                return Err(ApiError::unprocessable(format!(
                    "rerun_effects: {k:?} is not the key of an effect {run} recorded at or after entry {from} \
                     (those are: {recorded:?})"
                )));
            }
            EffectKey::new(k.clone()).map_err(|e| ApiError::unprocessable(e.to_string()))
        })
        .collect()
}

/// Deletes the records of `keys` that `source` settled, so the run that reaches them next
/// performs them again; the keys it freed. (Each is an effect `source` journaled, so `source`
/// itself never calls it again unless it is restarted from before it.)
async fn free<'k>(svc: &super::Services, source: &ThreadId, keys: &'k [EffectKey]) -> Result<Vec<&'k str>, ApiError> {
    let mut freed = Vec::new();
    for k in keys {
        if svc.store.effect_forget(k, source).await? {
            freed.push(k.as_str());
        }
    }
    Ok(freed)
}

/// Notes on `run` the keys [`free`] freed for it.
async fn note_freed(svc: &super::Services, run: &ThreadId, freed: &[&str]) {
    if freed.is_empty() {
        return;
    }
    info!(thread.id = %run, keys = ?freed, "settled effects freed to run again");
    let _ = svc
        .store
        .annotate(
            run,
            "effects_rerun",
            &format!("performed again on the operator's word: {}", freed.join(", ")),
        )
        .await;
}
