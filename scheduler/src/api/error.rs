//! The API's error response: `{"error": "<message>"}` with a status.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use savepoint_store::StoreError;
use tracing::{error, warn};

/// An error answered to an API client.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Human-readable message (the `error` field).
    pub message: String,
}

impl ApiError {
    /// An error with any status.
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    /// 400.
    pub(crate) fn bad_request(message: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message.to_string())
    }

    /// 404 for a run.
    pub(crate) fn run_not_found(thread: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::NOT_FOUND, format!("run {thread} not found"))
    }

    /// 409.
    pub(crate) fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, message)
    }

    /// 422: well-formed, but the value does not match what the workflow takes.
    pub(crate) fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, message)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match &e {
            StoreError::Missing(thread) => Self::run_not_found(thread),
            _ if e.is_transient() => {
                warn!(error = %e, "store unavailable");
                Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("checkpoint store unavailable, retry later: {e}"),
                )
            }
            _ => {
                error!(error = %e, "store error");
                Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("checkpoint store error: {e}"),
                )
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(serde_json::json!({ "error": self.message }))).into_response()
    }
}
