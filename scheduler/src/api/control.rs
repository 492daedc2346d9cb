//! Acting on runs: resume an interrupt, deliver a signal, cancel, resolve an in-doubt effect.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::Json;
use savepoint::ids::{EffectKey, ThreadId};
use savepoint::protocol::TaskReason;
use savepoint::store::redis::{EffectDone, SignalOutcome};
use savepoint::store::{RunStatus, StoreError};
use serde::Deserialize;
use serde_json::{json, Value};
use tracing::{info, warn};

use super::extract::{read_body, ApiJson, ApiPath};
use super::runs::thread_id;
use super::{ApiError, ApiState, Services};

type Reply = Result<(StatusCode, Json<Value>), ApiError>;

/// Longest signal name.
const MAX_SIGNAL_NAME: usize = 64;

/// Body of resume and signal.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ValueBody {
    #[serde(default)]
    value: Value,
}

/// Body of resolve.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResolveBody {
    applied: bool,
    #[serde(default)]
    result: Option<Value>,
}

/// Body of cancel (optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CancelBody {
    #[serde(default)]
    reason: Option<String>,
}

/// Checks a signal name: 1–64 characters of `A-Z a-z 0-9 _ . -`.
pub(crate) fn valid_signal_name(name: &str) -> bool {
    (1..=MAX_SIGNAL_NAME).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

/// Rings a worker after a state change made the run runnable. A failed publish is only
/// logged: the change gave the run a due time, so the scanner rings it later.
async fn ring(svc: &Services, thread: &ThreadId, reason: TaskReason) {
    let mut conn = svc.store.connection();
    let trace: Option<String> = redis::cmd("HGET")
        .arg(svc.store.keys().run(thread).run)
        .arg("trace")
        .query_async(&mut conn)
        .await
        .unwrap_or(None);
    if let Err(e) = svc.publisher.publish(thread, None, reason, trace.as_deref()).await {
        warn!(thread.id = %thread, error = %e, "publishing a task failed; the due scanner will retry");
    }
}

fn pending(thread: &ThreadId) -> Json<Value> {
    Json(json!({ "thread_id": thread.as_str(), "status": "pending" }))
}

fn ended(status: RunStatus, what: &str) -> ApiError {
    ApiError::conflict(format!("run is {status}; it can no longer {what}"))
}

/// `POST /v1/runs/{thread_id}/resume` `{"value"}`: answers the pending interrupt.
pub(crate) async fn resume(
    State(st): State<ApiState>,
    ApiPath(raw): ApiPath<String>,
    ApiJson(body): ApiJson<ValueBody>,
) -> Reply {
    let thread = thread_id(raw)?;
    let svc = st.services()?;
    match svc.store.signal(&thread, "interrupt", "", &body.value).await? {
        SignalOutcome::Woke => {
            info!(thread.id = %thread, "run resumed");
            ring(svc, &thread, TaskReason::Signal).await;
            Ok((StatusCode::ACCEPTED, pending(&thread)))
        }
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
        SignalOutcome::Buffered => Ok((
            StatusCode::ACCEPTED,
            Json(json!({ "thread_id": thread.as_str(), "buffered": true })),
        )),
    }
}

/// `POST /v1/runs/{thread_id}/signals/{name}` `{"value"}`: delivers (or buffers) a signal.
pub(crate) async fn signal(
    State(st): State<ApiState>,
    ApiPath((raw, name)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<ValueBody>,
) -> Reply {
    let thread = thread_id(raw)?;
    if !valid_signal_name(&name) {
        return Err(ApiError::bad_request(format!(
            "invalid signal name {name:?}: use 1-{MAX_SIGNAL_NAME} characters from A-Z a-z 0-9 _ . -"
        )));
    }
    let svc = st.services()?;
    match svc.store.signal(&thread, "signal", &name, &body.value).await? {
        SignalOutcome::Woke => {
            info!(thread.id = %thread, signal = %name, "run woken by signal");
            ring(svc, &thread, TaskReason::Signal).await;
            Ok((StatusCode::ACCEPTED, pending(&thread)))
        }
        SignalOutcome::Buffered => {
            info!(thread.id = %thread, signal = %name, "signal buffered");
            Ok((
                StatusCode::ACCEPTED,
                Json(json!({ "thread_id": thread.as_str(), "buffered": true })),
            ))
        }
        SignalOutcome::Missing => Err(ApiError::run_not_found(&thread)),
        SignalOutcome::Terminal(status) => Err(ended(status, "receive signals")),
        SignalOutcome::NotWaiting(status, ..) => {
            Err(ApiError::conflict(format!("run is {status}; signal not delivered")))
        }
    }
}

/// `POST /v1/runs/{thread_id}/cancel` (optional body `{"reason"}`).
pub(crate) async fn cancel(State(st): State<ApiState>, ApiPath(raw): ApiPath<String>, req: Request) -> Reply {
    let thread = thread_id(raw)?;
    let body = read_body(req, st.max_body).await?;
    let body: CancelBody = if body.iter().all(u8::is_ascii_whitespace) {
        CancelBody::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))?
    };
    let reason = body.reason.unwrap_or_else(|| "cancelled via API".to_owned());
    match st.services()?.store.cancel(&thread, &reason).await {
        Ok(None) => {
            info!(thread.id = %thread, %reason, "run cancelled");
            Ok((
                StatusCode::OK,
                Json(json!({ "thread_id": thread.as_str(), "status": "cancelled" })),
            ))
        }
        Ok(Some(status)) => Err(ApiError::conflict(format!("run already ended: it is {status}"))),
        Err(StoreError::Missing(_)) => Err(ApiError::run_not_found(&thread)),
        Err(e) => Err(e.into()),
    }
}

/// `POST /v1/runs/{thread_id}/effects/{key}/resolve` `{"applied", "result"?}`: settles the
/// in-doubt effect a blocked run waits on, then makes the run runnable again.
pub(crate) async fn resolve(
    State(st): State<ApiState>,
    ApiPath((raw, key)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<ResolveBody>,
) -> Reply {
    let thread = thread_id(raw)?;
    let key = EffectKey::new(key).map_err(ApiError::bad_request)?;
    let svc = st.services()?;
    let header = svc
        .store
        .header(&thread)
        .await?
        .ok_or_else(|| ApiError::run_not_found(&thread))?;
    if header.status != RunStatus::Blocked || header.blocked_effect.as_deref() != Some(key.as_str()) {
        let on = match (&header.status, &header.blocked_effect) {
            (RunStatus::Blocked, Some(other)) => format!("; it is blocked on effect {other:?}"),
            _ => String::new(),
        };
        return Err(ApiError::conflict(format!(
            "run is {}, not blocked on effect {:?}{on}",
            header.status,
            key.as_str()
        )));
    }
    let effect = if body.applied {
        let result = body.result.unwrap_or(Value::Null);
        match svc.store.effect_done(&key, &thread, None, &result).await? {
            EffectDone::Recorded => json!({ "state": "applied", "result": result }),
            // Marked done earlier: the first recorded result stands.
            EffectDone::Already(first) => json!({ "state": "already_applied", "result": first }),
            EffectDone::NotOwner(holder) => {
                return Err(ApiError::conflict(format!("effect {key} is held by run {holder}")));
            }
        }
    } else {
        match svc.store.effect_release(&key, &thread, None).await?.as_str() {
            // The record says done: the effect did happen; the run will journal its result.
            "done" => json!({ "state": "already_applied" }),
            "not_owner" => return Err(ApiError::conflict(format!("effect {key} is held by another run"))),
            _ => json!({ "state": "released" }),
        }
    };
    let detail = format!("{key}: operator resolved applied={}", body.applied);
    match svc.store.unblock(&thread, key.as_str(), &detail).await? {
        Ok(()) => {
            info!(thread.id = %thread, effect.key = %key, applied = body.applied, "in-doubt effect resolved");
            ring(svc, &thread, TaskReason::Operator).await;
            Ok((
                StatusCode::ACCEPTED,
                Json(json!({ "thread_id": thread.as_str(), "status": "pending", "effect": effect })),
            ))
        }
        Err((status, _)) => Err(ApiError::conflict(format!(
            "run is {status}, no longer blocked on effect {key}"
        ))),
    }
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
