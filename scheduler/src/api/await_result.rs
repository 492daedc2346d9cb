//! `GET /v1/runs/{thread_id}/result?timeout=<seconds>`: a long poll that answers as soon as
//! the run has ended (completed, failed, cancelled) or is blocked, or when the timeout
//! passes, so clients and the load generator can wait without polling.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use std::time::Duration;
use tokio::time::Instant;

use super::extract::thread_id;
use super::extract::{ApiPath, ApiQuery};
use super::model::RunView;
use super::{ApiError, ApiState, Reply};
use savepoint_store::RunStatus;

/// Longest accepted wait.
const MAX_WAIT: Duration = Duration::from_secs(120);

/// Query of the result long poll.
#[derive(Debug, Deserialize)]
pub(crate) struct ResultQuery {
    timeout: Option<String>,
}

fn parse_timeout(raw: Option<&str>) -> Result<Duration, ApiError> {
    let Some(raw) = raw else {
        return Ok(Duration::from_secs(30));
    };
    let secs: f64 = raw
        .trim()
        .parse()
        .map_err(|_| ApiError::bad_request(format!("timeout must be a number of seconds, got {raw:?}")))?;
    if !(0.0..=MAX_WAIT.as_secs_f64()).contains(&secs) {
        return Err(ApiError::bad_request(format!(
            "timeout must be between 0 and {} seconds",
            MAX_WAIT.as_secs()
        )));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Await a run's result
///
/// A long poll: 200 with the run once it has ended (completed, failed, cancelled) or is
/// blocked; 202 with the run as it stands when the timeout passes first.
#[utoipa::path(
    get,
    path = "/v1/runs/{thread_id}/result",
    operation_id = "await_result",
    tag = "runs",
    params(
        super::ThreadParam,
        ("timeout" = Option<f64>, Query, minimum = 0, maximum = 120,
            description = "Seconds to wait (default 30, at most 120)"),
    ),
    responses(
        (status = 200, description = "The run has ended or is blocked", body = RunView),
        (status = 202, description = "The timeout passed first: the run as it stands", body = RunView),
    )
)]
pub(crate) async fn await_result(
    State(st): State<ApiState>,
    ApiPath(raw): ApiPath<String>,
    ApiQuery(q): ApiQuery<ResultQuery>,
) -> Reply<RunView> {
    let thread = thread_id(raw)?;
    let wait = parse_timeout(q.timeout.as_deref())?;
    let store = &st.services()?.store;
    let deadline = Instant::now() + wait;
    // Poll the header with a growing interval: quick answers for short runs, little load
    // from long waits.
    let mut every = Duration::from_millis(10);
    loop {
        let header = store
            .header(&thread)
            .await?
            .ok_or_else(|| ApiError::run_not_found(&thread))?;
        if header.status.is_final() || header.status == RunStatus::Blocked {
            return Ok((StatusCode::OK, Json(super::runs::run_view(store, &header).await?)));
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok((StatusCode::ACCEPTED, Json(super::runs::run_view(store, &header).await?)));
        }
        tokio::time::sleep(every.min(deadline - now)).await;
        every = (every * 2).min(Duration::from_millis(250));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_validated() {
        assert_eq!(parse_timeout(None).unwrap(), Duration::from_secs(30));
        assert_eq!(parse_timeout(Some("0.5")).unwrap(), Duration::from_millis(500));
        assert!(parse_timeout(Some("soon")).is_err());
        assert!(parse_timeout(Some("-1")).is_err());
        assert!(parse_timeout(Some("1000")).is_err());
    }
}
