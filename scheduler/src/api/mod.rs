//! The HTTP JSON API (axum), mounted next to `/metrics`, `/healthz` and `/readyz`.
//!
//! Every error is `{"error": "<message>"}` with a meaningful status (see [`ApiError`]);
//! request bodies go through [`extract::ApiJson`] so malformed JSON, a wrong content type and
//! oversized bodies are answered in the same shape.
//!
//! The routes are registered through [`utoipa_axum`] from the handlers' own `#[utoipa::path]`
//! annotations and typed bodies ([`model`]), so the OpenAPI document ([`openapi`], served at
//! `/openapi.json`, rendered at `/docs`, committed as `docs/openapi.json`) describes exactly
//! the routes that exist.

pub(crate) mod auth;
pub(crate) mod body;
mod checks;
mod control;
pub(crate) mod doctor;
mod error;
mod extract;
#[doc(hidden)]
pub mod fuzzing;
mod lineage;
mod model;
mod ops;
mod result;
mod runs;
pub(crate) mod schedules;
pub(crate) mod spec;
mod views;

pub(crate) use error::ApiError;

/// A handler's answer: a status with a typed JSON body, or an [`ApiError`].
pub(crate) type Reply<T> = Result<(StatusCode, axum::Json<T>), ApiError>;
pub use spec::openapi_json;

use axum::http::StatusCode;
use savepoint_store::ScriptStore;
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
    pub schemas: checks::SchemaCache,
}

/// Shared state of the API handlers.
#[derive(Clone)]
pub(crate) struct ApiState {
    services: Arc<OnceLock<Services>>,
    /// Largest accepted request body (bytes).
    pub max_body: usize,
    /// Largest accepted signal or resume value (bytes of JSON).
    pub max_signal: usize,
    /// Tokens, roles and the rate limit.
    pub auth: auth::SharedAuth,
}

impl ApiState {
    /// State whose services are filled in once connected; limits and tokens from `cfg`.
    pub(crate) fn new(
        services: Arc<OnceLock<Services>>,
        cfg: &savepoint_runtime::config::Config,
    ) -> Result<Self, savepoint_runtime::security::SecurityError> {
        Ok(Self {
            services,
            max_body: cfg.scheduler.max_input_bytes,
            max_signal: cfg.scheduler.max_signal_bytes,
            auth: Arc::new(auth::Auth::from_config(cfg)?),
        })
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

/// The `{thread_id}` path parameter of every per-run operation.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // Read by the OpenAPI derive only: handlers take the raw text and validate it.
pub(crate) struct ThreadParam {
    /// The run's id: 1-128 characters of `A-Z a-z 0-9 _ - . :`.
    #[param(
        min_length = 1,
        max_length = 128,
        pattern = "^[A-Za-z0-9_.:-]{1,128}$",
        example = "invoice-INV-1"
    )]
    thread_id: String,
}

/// Every route of the API with its OpenAPI description: the one list both the router and
/// the document are built from.
fn api_routes() -> utoipa_axum::router::OpenApiRouter<ApiState> {
    use utoipa_axum::routes;
    utoipa_axum::router::OpenApiRouter::with_openapi(<spec::ApiDoc as utoipa::OpenApi>::openapi())
        .routes(routes!(runs::start, runs::list))
        .routes(routes!(runs::get_run))
        .routes(routes!(runs::history))
        .routes(routes!(doctor::diagnosis))
        .routes(routes!(runs::export))
        .routes(routes!(result::result))
        .routes(routes!(control::resume))
        .routes(routes!(control::signal))
        .routes(routes!(control::cancel))
        .routes(routes!(control::retry))
        .routes(routes!(control::resolve))
        .routes(routes!(lineage::fork))
        .routes(routes!(lineage::restart))
        .routes(routes!(schedules::create, schedules::list))
        .routes(routes!(schedules::get, schedules::delete))
        .routes(routes!(schedules::pause))
        .routes(routes!(schedules::resume))
        .routes(routes!(schedules::trigger))
}
