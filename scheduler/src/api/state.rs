//! What every handler is given: the connected services and the API's limits and tokens.

use axum::http::StatusCode;
use savepoint_store::ScriptStore;
use std::sync::{Arc, OnceLock};

use super::{auth, checks, runs, ApiError};
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
