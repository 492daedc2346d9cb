//! The HTTP JSON API (axum), mounted next to `/metrics`, `/healthz` and `/readyz`.
//!
//! Every error is `{"error": "<message>"}` with a meaningful status (see [`ApiError`]);
//! request bodies go through [`extract::ApiJson`] so malformed JSON, a wrong content type and
//! oversized bodies are answered in the same shape.

mod control;
mod error;
mod extract;
mod result;
mod runs;
mod views;

pub(crate) use error::ApiError;

use axum::extract::{MatchedPath, Request};
use axum::http::{Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use savepoint::metrics::{inc, metrics, ops_router, Readiness};
use savepoint::store::ScriptStore;
use std::sync::{Arc, OnceLock};

use crate::publish::Publisher;

/// What the API needs once Redis and RabbitMQ are connected.
pub(crate) struct Services {
    /// The checkpoint store.
    pub store: ScriptStore,
    /// Task publishing.
    pub publisher: Publisher,
    /// Marks confirmed tasks queued, in batches, off the request path.
    pub marker: crate::marker::Marker,
    /// The fleet's catalog, read at most once a second.
    pub catalog: runs::CatalogCache,
    /// Published schemas, read at most every two seconds per workflow version.
    pub schemas: control::SchemaCache,
}

/// Shared state of the API handlers.
#[derive(Clone)]
pub(crate) struct ApiState {
    services: Arc<OnceLock<Services>>,
    /// Largest accepted request body (bytes).
    pub max_body: usize,
}

impl ApiState {
    /// State whose services are filled in once connected.
    pub(crate) fn new(services: Arc<OnceLock<Services>>, max_body: usize) -> Self {
        Self { services, max_body }
    }

    /// The connected services, or 503 while the scheduler is still connecting.
    pub(crate) fn services(&self) -> Result<&Services, ApiError> {
        self.services.get().ok_or_else(|| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "scheduler is starting: not connected to Redis and RabbitMQ yet",
            )
        })
    }
}

/// The whole HTTP surface of the scheduler.
pub(crate) fn router(state: ApiState, readiness: Readiness) -> Router {
    let api = Router::new()
        .route("/v1/runs", post(runs::start).get(runs::list))
        .route("/v1/runs/{thread_id}", get(runs::get_run))
        .route("/v1/runs/{thread_id}/history", get(runs::history))
        .route("/v1/runs/{thread_id}/export", get(runs::export))
        .route("/v1/runs/{thread_id}/result", get(result::result))
        .route("/v1/runs/{thread_id}/resume", post(control::resume))
        .route("/v1/runs/{thread_id}/signals/{name}", post(control::signal))
        .route("/v1/runs/{thread_id}/cancel", post(control::cancel))
        .route("/v1/runs/{thread_id}/retry", post(control::retry))
        .route("/v1/runs/{thread_id}/effects/{key}/resolve", post(control::resolve))
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state);
    api.merge(ops_router(readiness))
        .fallback(not_found)
        .layer(middleware::from_fn(count_requests))
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, format!("no route for {method} {}", uri.path()))
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("method {method} is not allowed on {}", uri.path()),
    )
}

/// Counts requests by route template (never the raw path: bounded label values) and status.
async fn count_requests(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".into());
    let method = req.method().as_str().to_owned();
    // One span per request: the root of a new run's trace (`POST /v1/runs`).
    let span = tracing::info_span!("api.request", http.method = %method, http.route = %route);
    let resp = tracing::Instrument::instrument(next.run(req), span).await;
    inc(
        &metrics().http_requests,
        &[
            ("route", &route),
            ("method", &method),
            ("status", resp.status().as_str()),
        ],
    );
    resp
}
