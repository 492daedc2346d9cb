//! Acting on runs: resume an interrupt, deliver a signal, cancel, retry a blocked run,
//! resolve an in-doubt effect.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::Json;
use savepoint_core::ids::{EffectKey, ThreadId};
use savepoint_core::protocol::TaskReason;
use savepoint_store::{
    EffectDone, EffectRelease, ForgetOutcome, OutputVersion, OutputVersionOutcome, Rerun, RetryOutcome, SignalOutcome,
};
use savepoint_store::{EffectRecord, Holder, RunHeader, RunStatus, StoreError};
use serde_json::Value;
use tracing::info;

use super::checks::{check_value, ring, schema_for, Expects};
use super::extract::thread_id;
use super::extract::{parse_object, read_body, ApiJson, ApiPath};
use super::model::{
    Accepted, CancelBody, CancelReply, ErrorBody, ForgetFeatureBody, InDoubtEffect, OutputVersionBody, ResolveAllBody,
    ResolveAllReply, ResolveBody, ResolveReply, Settled, SettledEffect, Status, ValueBody,
};
use super::{ApiError, ApiState, Reply, Services};

/// Longest signal name.
const MAX_SIGNAL_NAME: usize = 64;

/// Longest client id of a resume or signal.
const MAX_CLIENT_ID: usize = 128;

/// The client id of a resume or signal, checked: 1-128 characters, none a control character.
fn client_id(body: &ValueBody) -> Result<Option<&str>, ApiError> {
    match body.id.as_deref() {
        None => Ok(None),
        Some(id) if (1..=MAX_CLIENT_ID).contains(&id.chars().count()) && !id.chars().any(char::is_control) => {
            Ok(Some(id))
        }
        Some(_) => Err(ApiError::bad_request(format!(
            "id must be 1-{MAX_CLIENT_ID} characters without control characters"
        ))),
    }
}

fn settled(state: Settled, result: Option<Value>) -> SettledEffect {
    SettledEffect { state, result }
}

/// Checks a signal name: 1–64 characters of `A-Z a-z 0-9 _ . -`.
pub(crate) fn valid_signal_name(name: &str) -> bool {
    (1..=MAX_SIGNAL_NAME).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

/// [`ring`] for a run an action made runnable again.
async fn rerun(svc: &Services, thread: &ThreadId, reason: TaskReason, r: &Rerun) {
    ring(svc, thread, None, reason, r.trace.as_deref(), r.rv).await
}

fn accepted(reply: Accepted) -> Reply<Accepted> {
    Ok((StatusCode::ACCEPTED, Json(reply)))
}

fn ended(status: RunStatus, what: &str) -> ApiError {
    ApiError::conflict(format!("run is {status}; it can no longer {what}"))
}

/// Checks a value sent to a run against the schema its workflow published for `what`.
async fn check_for_run(svc: &Services, thread: &ThreadId, what: Expects<'_>, value: &Value) -> Result<(), ApiError> {
    let Some(h) = svc.store.header(thread).await? else {
        return Err(ApiError::run_not_found(thread));
    };
    // For a resume, the interrupt is the one the run waits at (if it waits at one).
    let waited;
    let what = match what {
        Expects::Interrupt(_) => match h.wait.as_ref().filter(|w| w.kind == "interrupt") {
            Some(w) => {
                waited = w.name.clone();
                Expects::Interrupt(&waited)
            }
            None => return Ok(()),
        },
        other => other,
    };
    let schema = schema_for(svc, &h.workflow, h.workflow_version, what).await?;
    check_value(schema.as_ref(), value, what, &h.workflow)
}

/// Answer an interrupt
///
/// Answers the interrupt the run waits at (the same answer under the same client `id` is
/// delivered once). The value is checked against the interrupt's published schema (422).
#[utoipa::path(
    post,
    path = "/v1/runs/{thread_id}/resume",
    operation_id = "resume_run",
    tag = "control",
    params(super::ThreadParam),
    request_body = ValueBody,
    responses(
        (status = 202, description = "Delivered: the run is pending again (or `duplicate`)", body = Accepted),
        (status = 409, description = "The run does not wait for an interrupt, or has ended", body = ErrorBody),
        (status = 422, description = "The value breaks the interrupt's schema; nothing changed", body = ErrorBody),
    )
)]
pub(crate) async fn resume(
    State(st): State<ApiState>,
    ApiPath(raw): ApiPath<String>,
    ApiJson(body): ApiJson<ValueBody>,
) -> Reply<Accepted> {
    let thread = thread_id(raw)?;
    let id = client_id(&body)?;
    check_value_size(&body.value, st.max_signal)?;
    let svc = st.services()?;
    check_for_run(svc, &thread, Expects::Interrupt(""), &body.value).await?;
    match svc.store.signal(&thread, "interrupt", "", &body.value, id).await? {
        SignalOutcome::Woke(r) => {
            info!(thread.id = %thread, "run resumed");
            rerun(svc, &thread, TaskReason::Signal, &r).await;
            accepted(Accepted::pending(thread.as_str()))
        }
        SignalOutcome::Duplicate | SignalOutcome::Settled => accepted(Accepted::duplicate(thread.as_str())),
        SignalOutcome::NotWaiting(status, kind, name) => {
            let waits = if status == "waiting" && !kind.is_empty() {
                format!(" (it waits for {kind} {name:?})")
            } else {
                String::new()
            };
            Err(ApiError::conflict(format!(
                "run is {status}, not waiting for an interrupt{waits}"
            )))
        }
        SignalOutcome::Missing => Err(ApiError::run_not_found(&thread)),
        SignalOutcome::Terminal(status) => Err(ended(status, "be resumed")),
        SignalOutcome::Buffered => accepted(Accepted::buffered(thread.as_str())),
        SignalOutcome::Full(n) => Err(full(n)),
    }
}

/// The run holds as many unconsumed signals as it may.
fn full(held: u64) -> ApiError {
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "the run already holds {held} signals it has not asked for (the limit, \
             SAVEPOINT_MAX_BUFFERED_SIGNALS): nothing was delivered"
        ),
    )
}

/// Refuses a signal or resume value larger than `max` bytes of JSON.
fn check_value_size(value: &serde_json::Value, max: usize) -> Result<(), ApiError> {
    let n = value.to_string().len();
    if n > max {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the value is {n} bytes of JSON; the limit is {max} (SAVEPOINT_MAX_SIGNAL_BYTES)"),
        ));
    }
    Ok(())
}

/// Send a signal
///
/// Wakes a run that waits for this signal, or buffers it until the run does (a retried POST
/// with the same client `id` is delivered once).
#[utoipa::path(
    post,
    path = "/v1/runs/{thread_id}/signals/{name}",
    operation_id = "send_signal",
    tag = "control",
    params(
        super::ThreadParam,
        ("name" = String, Path, pattern = "^[A-Za-z0-9_.-]{1,64}$", min_length = 1, max_length = 64,
            description = "The signal's name: 1-64 characters of A-Z a-z 0-9 _ . -"),
    ),
    request_body = ValueBody,
    responses(
        (status = 202, description = "Delivered (the run is pending again) or buffered", body = Accepted),
        (status = 409, description = "The run has ended", body = ErrorBody),
        (status = 422, description = "The value breaks the signal's schema; nothing changed", body = ErrorBody),
    )
)]
pub(crate) async fn signal(
    State(st): State<ApiState>,
    ApiPath((raw, name)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<ValueBody>,
) -> Reply<Accepted> {
    let thread = thread_id(raw)?;
    if !valid_signal_name(&name) {
        return Err(ApiError::bad_request(format!(
            "invalid signal name {name:?}: use 1-{MAX_SIGNAL_NAME} characters from A-Z a-z 0-9 _ . -"
        )));
    }
    let id = client_id(&body)?;
    check_value_size(&body.value, st.max_signal)?;
    let svc = st.services()?;
    check_for_run(svc, &thread, Expects::Signal(&name), &body.value).await?;
    match svc.store.signal(&thread, "signal", &name, &body.value, id).await? {
        SignalOutcome::Woke(r) => {
            info!(thread.id = %thread, signal = %name, "run woken by signal");
            rerun(svc, &thread, TaskReason::Signal, &r).await;
            accepted(Accepted::pending(thread.as_str()))
        }
        SignalOutcome::Duplicate | SignalOutcome::Settled => accepted(Accepted::duplicate(thread.as_str())),
        SignalOutcome::Buffered => {
            info!(thread.id = %thread, signal = %name, "signal buffered");
            accepted(Accepted::buffered(thread.as_str()))
        }
        SignalOutcome::Missing => Err(ApiError::run_not_found(&thread)),
        SignalOutcome::Terminal(status) => Err(ended(status, "receive signals")),
        SignalOutcome::NotWaiting(status, ..) => {
            Err(ApiError::conflict(format!("run is {status}; signal not delivered")))
        }
        SignalOutcome::Full(n) => Err(full(n)),
    }
}

/// Cancel a run
///
/// Ends the run as cancelled (optional body `{"reason"}`). Effects it had begun but not
/// recorded are listed: their outcome is unknown, settle them at the provider.
#[utoipa::path(
    post,
    path = "/v1/runs/{thread_id}/cancel",
    operation_id = "cancel_run",
    tag = "control",
    params(super::ThreadParam),
    request_body(content = Option<CancelBody>, description = "Optional: the reason"),
    responses(
        (status = 200, description = "Cancelled", body = CancelReply),
        (status = 409, description = "The run has already ended", body = ErrorBody),
    )
)]
pub(crate) async fn cancel(
    State(st): State<ApiState>,
    ApiPath(raw): ApiPath<String>,
    req: Request,
) -> Reply<CancelReply> {
    let thread = thread_id(raw)?;
    let body = read_body(req, st.max_body).await?;
    // No body, or `null`, is no reason. (A body of only whitespace is not JSON: 400.)
    let body: CancelBody = if body.is_empty() || body.trim_ascii() == b"null" {
        CancelBody::default()
    } else {
        parse_object(&body)?
    };
    let reason = body.reason.unwrap_or_else(|| "cancelled via API".to_owned());
    let svc = st.services()?;
    match svc.store.cancel(&thread, &reason).await {
        Ok(Ok(c)) => {
            info!(thread.id = %thread, %reason, in_doubt = c.settled.len(), children = c.cascade.cancelled.len(), "run cancelled");
            // Parents that waited for a cancelled run go on now (else at their poll).
            for (parent, r) in c.cascade.parent_woke.iter().chain(&c.cascade.woke) {
                rerun(svc, parent, TaskReason::Signal, r).await;
            }
            // Runs waiting in line for the slot it held (or its place) go on now.
            for next in &c.cascade.flow_woke {
                ring(svc, next, None, TaskReason::Due, None, 0).await;
            }
            let effects_in_doubt = c
                .settled
                .iter()
                .map(|(index, key)| InDoubtEffect {
                    index: *index,
                    key: key.clone(),
                    state: "in_doubt_owner_cancelled".into(),
                })
                .collect();
            Ok((
                StatusCode::OK,
                Json(CancelReply {
                    thread_id: thread.as_str().to_owned(),
                    status: Status::CANCELLED,
                    effects_in_doubt,
                    children_cancelled: c.cascade.cancelled.iter().map(|t| t.to_string()).collect(),
                }),
            ))
        }
        Ok(Err(status)) => Err(ApiError::conflict(format!("run already ended: it is {status}"))),
        Err(StoreError::Missing(_)) => Err(ApiError::run_not_found(&thread)),
        Err(e) => Err(e.into()),
    }
}

/// Retry a blocked run
///
/// Re-queues a blocked run after a fix (non-determinism fixed in code, a version served
/// again, a poison step fixed); the worker that claims it checks it again from the top. A
/// run blocked on an in-doubt effect is settled with resolve instead (409 says so).
#[utoipa::path(
    post,
    path = "/v1/runs/{thread_id}/retry",
    operation_id = "retry_run",
    tag = "control",
    params(super::ThreadParam),
    responses(
        (status = 202, description = "Re-queued: the run is pending", body = Accepted),
        (status = 409, description = "The run is not blocked, or is blocked on an in-doubt effect", body = ErrorBody),
    )
)]
pub(crate) async fn retry(State(st): State<ApiState>, ApiPath(raw): ApiPath<String>) -> Reply<Accepted> {
    let thread = thread_id(raw)?;
    let svc = st.services()?;
    match svc.store.retry(&thread, "operator retry via API").await {
        Ok(RetryOutcome::Queued(r)) => {
            info!(thread.id = %thread, "blocked run re-queued");
            rerun(svc, &thread, TaskReason::Operator, &r).await;
            accepted(Accepted::pending(thread.as_str()))
        }
        Ok(RetryOutcome::NotBlocked(status)) => Err(ApiError::conflict(format!(
            "run is {status}; only blocked runs are retried"
        ))),
        Ok(RetryOutcome::OnEffect(key)) => Err(ApiError::conflict(format!(
            "run is blocked on the in-doubt effect {key:?}: settle it with POST /v1/runs/{thread}/effects/{key}/resolve \
             (savepoint resolve {thread} {key} --applied true|false) instead"
        ))),
        Err(StoreError::Missing(_)) => Err(ApiError::run_not_found(&thread)),
        Err(e) => Err(e.into()),
    }
}

/// Let a run go of a value feature no build names
///
/// A run that recorded a value under a versioned type's name that no deployed build declares
/// (the type renamed or moved without `Versioned::FORMERLY`, or dropped) is given back by
/// every claim, waiting "for a worker that knows the run feature value:<type>@<version>".
/// Deploying a build that names it (FORMERLY) is the fix that keeps the run's values; this is
/// the way out when no build ever will: the run stops needing the feature, and the worker
/// that takes it next reads the value as its own code's type at the recorded version (through
/// its migrations from there), or blocks the run naming a value it cannot decode. The gate
/// this lifts is what keeps a value from code that may not read it, so it needs the admin
/// role: forget a feature only when the code now deployed reads that value (the type moved,
/// same shape). Engine features (of a newer build) are not forgotten.
#[utoipa::path(
    post,
    path = "/v1/runs/{thread_id}/forget-feature",
    operation_id = "forget_feature",
    tag = "control",
    params(super::ThreadParam),
    request_body = ForgetFeatureBody,
    responses(
        (status = 202, description = "The run no longer needs the feature (status pending: it was given back and is due now)", body = Accepted),
        (status = 422, description = "Not a value feature (value:<type name>@<version above 1>)", body = ErrorBody),
        (status = 409, description = "The run has ended, is running, or does not need the feature", body = ErrorBody),
    )
)]
pub(crate) async fn forget_feature(
    State(st): State<ApiState>,
    ApiPath(raw): ApiPath<String>,
    ApiJson(body): ApiJson<ForgetFeatureBody>,
) -> Reply<Accepted> {
    let thread = thread_id(raw)?;
    let well_formed = body
        .feature
        .strip_prefix("value:")
        .and_then(|f| f.rsplit_once('@'))
        .is_some_and(|(name, v)| !name.is_empty() && v.parse::<u32>().is_ok_and(|v| v > 1));
    if !well_formed {
        return Err(ApiError::unprocessable(format!(
            "feature must be a value feature, value:<type name>@<version above 1> (as the run's waiting_for names \
             it), got {:?}",
            body.feature
        )));
    }
    let svc = st.services()?;
    let detail = format!("{} forgotten by an operator via API", body.feature);
    match svc.store.forget_feature(&thread, &body.feature, &detail).await {
        Ok(ForgetOutcome::Forgotten(r, due)) => {
            info!(thread.id = %thread, feature = %body.feature, "run feature forgotten");
            if due {
                rerun(svc, &thread, TaskReason::Operator, &r).await;
                return accepted(Accepted::pending(thread.as_str()));
            }
            accepted(Accepted {
                thread_id: thread.to_string(),
                status: None,
                buffered: None,
                duplicate: None,
            })
        }
        Ok(ForgetOutcome::Ended(status)) => Err(ended(status, "need a feature")),
        Ok(ForgetOutcome::Running) => Err(ApiError::conflict(
            "a worker holds the run: it needs the feature only while no worker of the fleet names it; try again \
             once its slice has ended",
        )),
        Ok(ForgetOutcome::Engine) => Err(ApiError::conflict(format!(
            "{:?} is not a value feature (value:<type>@<version>): the run uses an engine feature of a newer build, \
             and only a worker of such a build can run it",
            body.feature
        ))),
        Ok(ForgetOutcome::NotNeeded(needs)) => Err(ApiError::conflict(format!(
            "the run does not need {:?}; it needs {}",
            body.feature,
            if needs.is_empty() {
                "no feature".to_owned()
            } else {
                needs.join(", ")
            }
        ))),
        Err(StoreError::Missing(_)) => Err(ApiError::run_not_found(&thread)),
        Err(e) => Err(e.into()),
    }
}

/// Say which version a child's output was written at
///
/// A child completed by a build from before 2026-12-07 kept no version of its output's type
/// (builds from 3992e27 to before 0084d6c declared versions above 1 without recording them),
/// so a parent whose code reads a later version of the type blocks on it rather than guess,
/// naming the call. This records, for that run and call, the version the child's code wrote
/// the output at (a later answer replaces an earlier one); `retry` on the run then reads the
/// output from there through the declared migrations. A version naming a type the run's code
/// does not read blocks it again, saying so.
#[utoipa::path(
    post,
    path = "/v1/runs/{thread_id}/output-version",
    operation_id = "set_output_version",
    tag = "control",
    params(super::ThreadParam),
    request_body = OutputVersionBody,
    responses(
        (status = 200, description = "Recorded for the run to read", body = Accepted),
        (status = 409, description = "The run has ended", body = ErrorBody),
        (status = 422, description = "Not `<type name>@<version>` with a version of 1 or more", body = ErrorBody),
    )
)]
pub(crate) async fn set_output_version(
    State(st): State<ApiState>,
    ApiPath(raw): ApiPath<String>,
    ApiJson(body): ApiJson<OutputVersionBody>,
) -> Reply<Accepted> {
    let thread = thread_id(raw)?;
    let Some(ov) = OutputVersion::parse(&body.output_version) else {
        return Err(ApiError::unprocessable(format!(
            "output_version must be <type name>@<version> (a version of 1 or more; a name above 1), got {:?}",
            body.output_version
        )));
    };
    let svc = st.services()?;
    let detail = format!("{} for call {} set by an operator via API", ov.field(), body.call);
    match svc.store.set_output_version(&thread, body.call, &ov, &detail).await {
        Ok(OutputVersionOutcome::Set) => {
            info!(thread.id = %thread, call = body.call, output_version = %ov.field(), "child output version set");
            Ok((
                StatusCode::OK,
                Json(Accepted {
                    thread_id: thread.to_string(),
                    status: None,
                    buffered: None,
                    duplicate: None,
                }),
            ))
        }
        Ok(OutputVersionOutcome::Ended(status)) => Err(ended(status, "read a child's output")),
        Err(StoreError::Missing(_)) => Err(ApiError::run_not_found(&thread)),
        Err(e) => Err(e.into()),
    }
}

/// Resolve an in-doubt effect
///
/// Settles the in-doubt effect a blocked run waits on, then makes the run runnable again. The run names
/// the record it waits on (the holder's run, index and fence), and only that record is
/// settled: two resolvers racing, or a resolve arriving after the run re-ran, change nothing.
#[utoipa::path(
    post,
    path = "/v1/runs/{thread_id}/effects/{key}/resolve",
    operation_id = "resolve_effect",
    tag = "control",
    params(
        super::ThreadParam,
        ("key" = String, Path, min_length = 1, max_length = 256, pattern = "^[^\\s\\x00-\\x1f\\x7f-\\x9f]{1,256}$",
            description = "The effect's idempotency key (1-256 bytes, no whitespace or control characters)"),
    ),
    request_body = ResolveBody,
    responses(
        (status = 202, description = "Settled: the run is pending again", body = ResolveReply),
        (status = 409, description = "The run is not blocked on this effect, or its record changed", body = ErrorBody),
        (status = 422, description = "`applied: true` without the result, or a result that breaks its schema", body = ErrorBody),
    )
)]
pub(crate) async fn resolve(
    State(st): State<ApiState>,
    ApiPath((raw, key)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<ResolveBody>,
) -> Reply<ResolveReply> {
    let thread = thread_id(raw)?;
    let key = EffectKey::new(key).map_err(ApiError::bad_request)?;
    let svc = st.services()?;
    let header = svc
        .store
        .header(&thread)
        .await?
        .ok_or_else(|| ApiError::run_not_found(&thread))?;
    blocked_on(&header, &key)?;
    let doubt = InDoubt {
        key,
        holder: header.blocked_effect_owner.as_deref().and_then(Holder::parse),
    };
    let effect = settle_one(svc, &thread, &header, &doubt, body.applied, body.result).await?;
    let InDoubt { key, holder } = doubt;
    let who = holder.map(|h| h.to_string()).unwrap_or_else(|| "its holder".into());
    let detail = format!("{key}: operator resolved applied={} (intent of {who})", body.applied);
    match svc.store.unblock(&thread, key.as_str(), &detail).await? {
        Ok(r) => {
            info!(thread.id = %thread, effect.key = %key, applied = body.applied, "in-doubt effect resolved");
            rerun(svc, &thread, TaskReason::Operator, &r).await;
            Ok((
                StatusCode::ACCEPTED,
                Json(ResolveReply {
                    thread_id: thread.as_str().to_owned(),
                    status: Status::PENDING,
                    effect,
                }),
            ))
        }
        Err((status, _)) => Err(ApiError::conflict(format!(
            "run is {status}, no longer blocked on effect {key}"
        ))),
    }
}

/// An effect a blocked run has in doubt: its key and the record's holder (the attempt that
/// began it).
pub(crate) struct InDoubt {
    /// The effect's key.
    pub key: EffectKey,
    /// The attempt whose intent it is.
    pub holder: Option<Holder>,
}

/// How many journal indexes past a blocked run's journal the group resolve looks at for effects
/// its crashed attempt began side by side.
const SIDE_BY_SIDE: u32 = 64;

/// Every effect a run blocked in doubt holds: the one it is blocked on, then each other one its
/// crashed attempt began side by side (recorded past its journal) and left an intent of (one
/// recorded as done is not in doubt: the run journals its result when it gets there).
pub(crate) async fn in_doubt(svc: &Services, h: &RunHeader) -> Result<Vec<InDoubt>, ApiError> {
    let Some(blocked) = h.blocked_effect.as_deref().filter(|_| h.status == RunStatus::Blocked) else {
        return Ok(Vec::new());
    };
    let first = EffectKey::new(blocked.to_owned()).map_err(ApiError::bad_request)?;
    let mut out = vec![InDoubt {
        key: first,
        holder: h.blocked_effect_owner.as_deref().and_then(Holder::parse),
    }];
    for (_, k) in svc.store.effects_begun(&h.thread, h.steps, SIDE_BY_SIDE).await? {
        let Ok(key) = EffectKey::new(k) else { continue };
        if out.iter().any(|d| d.key == key) {
            continue;
        }
        let holder = match svc.store.effect_state(&key).await? {
            Some(EffectRecord::Intent(holder) | EffectRecord::Orphaned(holder, _)) => holder,
            _ => continue,
        };
        if holder.thread == h.thread.as_str() {
            out.push(InDoubt {
                key,
                holder: Some(holder),
            });
        }
    }
    Ok(out)
}

/// Resolve every effect a run has in doubt, together
///
/// A worker killed with several effects of a run in flight side by side leaves each of them in
/// doubt; the run blocks on the first it meets. This settles every one of them at once (each
/// applied with its result, or not applied), then makes the run runnable again: the body names
/// each key the run's diagnosis lists as in doubt, and no other (422 naming the difference). Each
/// record is settled only if it is still the one its attempt left (409 otherwise, naming it;
/// those settled before it stay settled and the run stays blocked on the rest).
#[utoipa::path(
    post,
    path = "/v1/runs/{thread_id}/effects/resolve",
    operation_id = "resolve_all_effects",
    tag = "control",
    params(super::ThreadParam),
    request_body = ResolveAllBody,
    responses(
        (status = 202, description = "Every effect settled: the run is pending again", body = ResolveAllReply),
        (status = 409, description = "The run is not blocked on an effect in doubt, or a record changed", body = ErrorBody),
        (status = 422, description = "The keys given are not the run's effects in doubt, `applied: true` without a result, or a result that breaks its schema", body = ErrorBody),
    )
)]
pub(crate) async fn resolve_all(
    State(st): State<ApiState>,
    ApiPath(raw): ApiPath<String>,
    ApiJson(body): ApiJson<ResolveAllBody>,
) -> Reply<ResolveAllReply> {
    let thread = thread_id(raw)?;
    let svc = st.services()?;
    let header = svc
        .store
        .header(&thread)
        .await?
        .ok_or_else(|| ApiError::run_not_found(&thread))?;
    let doubt = in_doubt(svc, &header).await?;
    if doubt.is_empty() {
        return Err(ApiError::conflict(format!(
            "run is {}, not blocked on an effect in doubt",
            header.status
        )));
    }
    same_keys(&doubt, &body)?;
    let mut effects = std::collections::BTreeMap::new();
    // The one the run is blocked on last: until it is settled the run stays blocked.
    for d in doubt.iter().skip(1).chain(doubt.first()) {
        let how = &body.effects[d.key.as_str()];
        let settled = settle_one(svc, &thread, &header, d, how.applied, how.result.clone()).await?;
        effects.insert(d.key.as_str().to_owned(), settled);
    }
    let blocked = &doubt[0].key;
    let detail = format!("{} effect(s) in doubt resolved together by an operator", doubt.len());
    match svc.store.unblock(&thread, blocked.as_str(), &detail).await? {
        Ok(r) => {
            info!(thread.id = %thread, effects = doubt.len(), "effects in doubt resolved together");
            rerun(svc, &thread, TaskReason::Operator, &r).await;
            Ok((
                StatusCode::ACCEPTED,
                Json(ResolveAllReply {
                    thread_id: thread.as_str().to_owned(),
                    status: Status::PENDING,
                    effects,
                }),
            ))
        }
        Err((status, _)) => Err(ApiError::conflict(format!(
            "run is {status}, no longer blocked on effect {blocked}"
        ))),
    }
}

/// 422 unless the body names exactly the run's effects in doubt.
fn same_keys(doubt: &[InDoubt], body: &ResolveAllBody) -> Result<(), ApiError> {
    let want: std::collections::BTreeSet<&str> = doubt.iter().map(|d| d.key.as_str()).collect();
    let given: std::collections::BTreeSet<&str> = body.effects.keys().map(String::as_str).collect();
    if want == given {
        return Ok(());
    }
    let missing: Vec<&str> = want.difference(&given).copied().collect();
    let extra: Vec<&str> = given.difference(&want).copied().collect();
    Err(ApiError::unprocessable(format!(
        "the run has {} effect(s) in doubt: {want:?}; settle each of them and no other (missing: {missing:?}, \
         not in doubt here: {extra:?}); nothing was changed",
        want.len()
    )))
}

/// Settles one effect in doubt as its attempt left it: applied with its result (checked against
/// the effect's schema), or released.
async fn settle_one(
    svc: &Services,
    thread: &ThreadId,
    header: &RunHeader,
    d: &InDoubt,
    applied: bool,
    result: Option<Value>,
) -> Result<SettledEffect, ApiError> {
    let key = &d.key;
    if applied {
        let result = applied_result(svc, thread, key, header, d.holder.as_ref(), result).await?;
        let done = svc.store.settle_done(key, thread, &result, d.holder.as_ref()).await?;
        done_effect(done, key, result)
    } else {
        let released = svc.store.settle_released(key, thread, d.holder.as_ref()).await?;
        released_effect(released, key)
    }
}

/// 409 unless the run is blocked on effect `key` (naming the effect it is blocked on).
fn blocked_on(header: &RunHeader, key: &EffectKey) -> Result<(), ApiError> {
    if header.status == RunStatus::Blocked && header.blocked_effect.as_deref() == Some(key.as_str()) {
        return Ok(());
    }
    let on = match (&header.status, &header.blocked_effect) {
        (RunStatus::Blocked, Some(other)) => format!("; it is blocked on effect {other:?}"),
        _ => String::new(),
    };
    Err(ApiError::conflict(format!(
        "run is {}, not blocked on effect {:?}{on}",
        header.status,
        key.as_str()
    )))
}

/// The 409 of a resolve whose effect record changed since the run blocked.
fn record_changed(key: &EffectKey, now: String) -> ApiError {
    ApiError::conflict(format!(
        "effect {key}'s record changed since the run blocked (now held by {now:?}); look at the run again"
    ))
}

/// The result an `applied: true` resolve records: the one given, checked against the
/// effect's result schema, or null for an effect whose result type is () (422 otherwise).
async fn applied_result(
    svc: &Services,
    thread: &ThreadId,
    key: &EffectKey,
    header: &RunHeader,
    holder: Option<&Holder>,
    given: Option<Value>,
) -> Result<Value, ApiError> {
    let (name, schema) = effect_schema(svc, thread, header, holder).await?;
    let result = given_or_unit(given, schema.as_ref(), name.as_deref(), thread, key)?;
    if let Some(n) = &name {
        check_value(schema.as_ref(), &result, Expects::Effect(n), &header.workflow)?;
    }
    Ok(result)
}

/// The name of the effect a run is blocked on and its result schema, when known.
async fn effect_schema(
    svc: &Services,
    thread: &ThreadId,
    header: &RunHeader,
    holder: Option<&Holder>,
) -> Result<(Option<String>, Option<Value>), ApiError> {
    // The effect's name (recorded with its key at its index) finds its result schema.
    // (Only when this run holds the record: an orphaned key of another run has no
    // schema here, and the result is then required.)
    let own = holder.filter(|h| h.thread == thread.as_str());
    let name = match own.and_then(|h| u32::try_from(h.index).ok()) {
        Some(index) => svc.store.effect_name(thread, index).await?,
        None => None,
    };
    let schema = match &name {
        Some(n) => schema_for(svc, &header.workflow, header.workflow_version, Expects::Effect(n)).await?,
        None => None,
    };
    Ok((name, schema))
}

/// The given result; else null when the effect's result schema is the unit type; else 422.
fn given_or_unit(
    given: Option<Value>,
    schema: Option<&Value>,
    name: Option<&str>,
    thread: &ThreadId,
    key: &EffectKey,
) -> Result<Value, ApiError> {
    match given {
        Some(r) => Ok(r),
        None if schema.is_some_and(crate::schema::is_unit) => Ok(Value::Null),
        None => {
            let of = name.map(|n| format!(" {n:?}")).unwrap_or_default();
            Err(ApiError::unprocessable(format!(
                "applied: true needs the effect's result: the run journals it as the result of effect{of} \
                 (savepoint resolve {thread} {key} --applied true --result '<json>'); only an effect whose \
                 result type is () may omit it"
            )))
        }
    }
}

/// The effect as an `applied: true` resolve settled it, or 409 when its record changed.
fn done_effect(done: EffectDone, key: &EffectKey, result: Value) -> Result<SettledEffect, ApiError> {
    Ok(match done {
        EffectDone::Recorded => settled(Settled::Applied, Some(result)),
        // Marked done earlier: the first recorded result stands.
        EffectDone::Already(first) => settled(Settled::AlreadyApplied, Some(first)),
        EffectDone::Changed(now) | EffectDone::NotOwner(now) => return Err(record_changed(key, now)),
        EffectDone::Stale => return Err(record_changed(key, String::new())),
    })
}

/// The effect as an `applied: false` resolve settled it, or 409 when its record changed.
fn released_effect(released: EffectRelease, key: &EffectKey) -> Result<SettledEffect, ApiError> {
    Ok(match released {
        // The record says done: the effect did happen; the run will journal its result.
        EffectRelease::Done(result) => settled(Settled::AlreadyApplied, Some(result)),
        EffectRelease::Changed(now) | EffectRelease::NotOwner(now) => return Err(record_changed(key, now)),
        EffectRelease::Released | EffectRelease::Absent => settled(Settled::Released, None),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_names() {
        assert!(valid_signal_name("approve"));
        assert!(valid_signal_name("a.b-c_1"));
        assert!(valid_signal_name(&"x".repeat(64)));
        assert!(!valid_signal_name(&"x".repeat(65)));
        assert!(!valid_signal_name(""));
        assert!(!valid_signal_name("has space"));
        assert!(!valid_signal_name("colon:no"));
    }
}
