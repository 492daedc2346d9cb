//! `/healthz`, `/readyz` and `/metrics` on the API's port, described in the OpenAPI document
//! like every other route (they answer without a token once authentication exists: probes
//! and scrapers must keep working).

use axum::extract::State;
use axum::response::IntoResponse;
use savepoint_runtime::ops::Readiness;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Liveness
///
/// `ok` while the process serves HTTP (it does not ask Redis or RabbitMQ).
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    tag = "ops",
    responses((status = 200, description = "Alive", body = String, content_type = "text/plain", example = "ok"))
)]
async fn healthz() -> &'static str {
    savepoint_runtime::ops::healthz_handler().await
}

/// Readiness
///
/// `ready` once the scheduler is connected to Redis and RabbitMQ; 503 `not ready` before.
#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "readyz",
    tag = "ops",
    responses(
        (status = 200, description = "Connected and serving", body = String, content_type = "text/plain", example = "ready"),
        (status = 503, description = "Still connecting", body = String, content_type = "text/plain", example = "not ready"),
    )
)]
async fn readyz(ready: State<Readiness>) -> impl IntoResponse {
    savepoint_runtime::ops::ready_handler(ready).await
}

/// Metrics
///
/// Every metric of the scheduler in the OpenMetrics text format (runs started, requests by
/// route and status, scanner ticks, …).
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "ops",
    responses((status = 200, description = "OpenMetrics text", body = String,
        content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8"))
)]
async fn metrics() -> impl IntoResponse {
    savepoint_runtime::ops::metrics_handler().await
}

/// The probe and metrics routes with their description.
pub(super) fn routes() -> OpenApiRouter<Readiness> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
}
