//! The whole HTTP surface of the scheduler: the API, the ops endpoints, the API document,
//! the console and its login pages, under one body limit, one guard and one request counter.
//! It composes [`api`] and [`console`], which know nothing of each other.

use axum::extract::{MatchedPath, Request};
use axum::http::{Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use savepoint_core::metrics::{inc, metrics};
use savepoint_runtime::ops::Readiness;

use crate::api::{self, ApiError, ApiState};
use crate::console;

/// The whole HTTP surface of the scheduler.
pub(crate) fn router(state: ApiState, readiness: Readiness) -> Router {
    let max_body = state.max_body;
    let (api, ops, doc) = api::spec::parts(max_body);
    api.with_state(state.clone())
        .merge(ops.with_state(readiness))
        .method_not_allowed_fallback(method_not_allowed)
        .merge(api::spec::docs_router(doc))
        .merge(console::routes(state.clone()))
        .route(
            "/ui/login",
            axum::routing::get(api::auth::login_page)
                .post(api::auth::login)
                .with_state(state.clone()),
        )
        .route("/ui/logout", axum::routing::post(api::auth::logout))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(max_body, api::body::read_whole))
        .layer(middleware::from_fn_with_state(state.clone(), api::auth::guard))
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
