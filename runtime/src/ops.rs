//! The ops endpoints every process serves: `/metrics` (the registry of
//! [`savepoint_core::metrics`]), `/healthz` and `/readyz`.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub use savepoint_core::metrics::*;

/// Readiness flag shared by a process's parts.
#[derive(Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Marks ready or not.
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::SeqCst);
    }
    /// Whether ready.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// `GET /healthz`: `ok` while the process serves HTTP.
pub async fn healthz_handler() -> &'static str {
    "ok"
}

/// `GET /metrics`: every metric in the OpenMetrics text format.
pub async fn metrics_handler() -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics().render(),
    )
}

/// `GET /readyz`: 200 `ready` once connected and serving, 503 `not ready` before.
pub async fn ready_handler(State(r): State<Readiness>) -> impl IntoResponse {
    if r.is_ready() {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

/// `/metrics`, `/healthz` (alive) and `/readyz` (connected and serving).
pub fn ops_router(ready: Readiness) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(healthz_handler))
        .route("/readyz", get(ready_handler))
        .with_state(ready)
}
