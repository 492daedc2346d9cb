//! Extractors that answer bad input with [`ApiError`] JSON instead of axum's plain-text
//! rejections.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use savepoint_core::ids::ThreadId;

use super::{ApiError, ApiState};

/// Validates a thread id from a path or body (400 with the allowed characters).
pub(crate) fn thread_id(raw: String) -> Result<ThreadId, ApiError> {
    ThreadId::new(raw).map_err(ApiError::bad_request)
}

/// A JSON request body: requires a JSON content type, enforces the body size limit
/// (`scheduler.max_input_bytes`, 413) and reports parse errors (400) with serde's message.
pub(crate) struct ApiJson<T>(pub T);

fn is_json(content_type: &str) -> bool {
    let mime = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
}

pub(crate) fn too_large(max: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body exceeds the limit of {max} bytes (scheduler.max_input_bytes)"),
    )
}

/// The body, which [`super::body::read_whole`] has already read whole within the limit (the
/// bound here only guards a router built without that layer).
pub(crate) async fn read_body(req: Request, max: usize) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(req.into_body(), max)
        .await
        .map_err(|_| too_large(max))
}

/// Parses a body that must be a JSON object. (serde reads a struct from an array too, by
/// position: `[null, null]` would pass as a resume body; the API takes only objects.)
pub(crate) fn parse_object<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let invalid = |e: serde_json::Error| ApiError::bad_request(format!("invalid JSON body: {e}"));
    // A JSON text whose first token is `{` is an object (or invalid): parsed straight into
    // `T`. Only a refused body is parsed once more, to name what it is.
    if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        // (serde_path_to_error names the field a refusal is about.)
        let mut de = serde_json::Deserializer::from_slice(body);
        let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let path = e.path().to_string();
            let e = e.into_inner();
            if path.is_empty() || path == "." {
                invalid(e)
            } else {
                ApiError::bad_request(format!("invalid JSON body at {path}: {e}"))
            }
        })?;
        de.end().map_err(invalid)?;
        return Ok(value);
    }
    let got = match serde_json::from_slice(body).map_err(invalid)? {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    };
    Err(ApiError::bad_request(format!(
        "invalid JSON body: expected a JSON object, got {got}"
    )))
}

impl<T: DeserializeOwned> FromRequest<ApiState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &ApiState) -> Result<Self, ApiError> {
        let content_type = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !is_json(content_type) {
            let got = if content_type.is_empty() {
                "none".to_owned()
            } else {
                format!("{content_type:?}")
            };
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("expected a JSON body with Content-Type: application/json (got {got})"),
            ));
        }
        let body = read_body(req, state.max_body).await?;
        parse_object(&body).map(ApiJson)
    }
}

/// Path parameters, with a JSON 400 on failure.
pub(crate) struct ApiPath<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(v)| ApiPath(v))
            .map_err(|e| ApiError::bad_request(format!("invalid path: {}", e.body_text())))
    }
}

/// Query parameters, with a JSON 400 on failure.
pub(crate) struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(v)| ApiQuery(v))
            .map_err(|e| ApiError::bad_request(format!("invalid query: {}", e.body_text())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types() {
        assert!(is_json("application/json"));
        assert!(is_json("application/json; charset=utf-8"));
        assert!(is_json("Application/JSON"));
        assert!(is_json("application/merge-patch+json"));
        assert!(!is_json("text/plain"));
        assert!(!is_json(""));
    }
}
