//! [`ApiClient`]: a small typed client of the scheduler's HTTP API, shared by every CLI
//! subcommand (and usable from tests and tools).

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::time::Duration;

/// Default base URL of the scheduler API.
pub const DEFAULT_API: &str = "http://127.0.0.1:7070";

/// Why an API call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing answers at the base URL.
    #[error(
        "the scheduler is not reachable at {url}: {reason}\n\
         Start one with `cargo run --release --bin savepoint -- dev` (scheduler and workers in one process), \
         or point --api / SAVEPOINT_API at a running scheduler"
    )]
    Unreachable {
        /// Base URL tried.
        url: String,
        /// The innermost cause (e.g. "Connection refused (os error 111)").
        reason: String,
    },
    /// The API answered 4xx/5xx; `message` is its `error` field.
    #[error("{message} (HTTP {status})")]
    Api {
        /// HTTP status.
        status: u16,
        /// The API's error message.
        message: String,
    },
    /// The request failed in another way (timeout, broken connection…).
    #[error("request to {url} failed: {source}")]
    Http {
        /// URL requested.
        url: String,
        /// Cause.
        #[source]
        source: reqwest::Error,
    },
    /// The answer was not JSON (or, for the typed client, not of the expected type).
    #[error("invalid response from {url}: {message}")]
    Decode {
        /// URL requested.
        url: String,
        /// What was wrong.
        message: String,
    },
    /// (Typed client) a value to send does not encode as JSON.
    #[error("the value does not encode as JSON: {0}")]
    Encode(String),
    /// (Typed client) the run ended without an output, or is blocked for an operator.
    #[error("run {thread} is {status}: {detail}")]
    Run {
        /// The run.
        thread: String,
        /// `failed`, `cancelled` or `blocked`.
        status: String,
        /// Its error or blocked reason.
        detail: String,
    },
    /// (Typed client) the run was still going when the wait ended.
    #[error("run {thread} was still going after {waited:?}")]
    Timeout {
        /// The run.
        thread: String,
        /// How long it was waited for.
        waited: Duration,
    },
}

impl ClientError {
    /// The HTTP status of an API error, if this is one.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }
}

use crate::fmt::encode;

/// A client of one scheduler. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ApiClient {
    base: String,
    http: reqwest::Client,
    /// Never printed by `Debug`.
    token: Option<savepoint::core::secret::Redacted>,
}

impl ApiClient {
    /// A client of the API at `base` (e.g. `http://127.0.0.1:7070`), with a 30 s request timeout.
    pub fn new(base: impl Into<String>) -> Self {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        Self {
            base: base.into().trim_end_matches('/').to_owned(),
            http,
            token: None,
        }
    }

    /// Sends `Authorization: Bearer <token>` with every request (when `Some`).
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token.filter(|t| !t.is_empty()).map(savepoint::core::secret::Redacted);
        self
    }

    /// The base URL.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// Any API call: `path` starts with `/`; `body` is sent as JSON. Returns the answer's JSON.
    pub async fn request(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value, ClientError> {
        let url = format!("{}{path}", self.base);
        let mut req = self.http.request(method, &url);
        if let Some(t) = &self.token {
            req = req.bearer_auth(&t.0);
        }
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = req.send().await.map_err(|source| {
            if source.is_connect() {
                ClientError::Unreachable {
                    url: self.base.clone(),
                    reason: root_cause(&source),
                }
            } else {
                ClientError::Http {
                    url: url.clone(),
                    source,
                }
            }
        })?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|source| ClientError::Http {
            url: url.clone(),
            source,
        })?;
        if status.is_success() && bytes.is_empty() {
            return Ok(Value::Null); // 204 No Content
        }
        let parsed: Result<Value, _> = serde_json::from_slice(&bytes);
        if status.is_client_error() || status.is_server_error() {
            let message = match &parsed {
                Ok(v) => v
                    .get("error")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .unwrap_or_else(|| v.to_string()),
                Err(_) => String::from_utf8_lossy(&bytes).trim().to_owned(),
            };
            let message = if message.is_empty() { canonical(status) } else { message };
            return Err(ClientError::Api {
                status: status.as_u16(),
                message,
            });
        }
        parsed.map_err(|e| ClientError::Decode {
            url,
            message: e.to_string(),
        })
    }

    /// `POST /v1/runs`.
    pub async fn start(
        &self,
        workflow: &str,
        input: Option<Value>,
        thread_id: Option<&str>,
    ) -> Result<Value, ClientError> {
        self.start_with_timeout(workflow, input, thread_id, None).await
    }

    /// `POST /v1/runs` with a run timeout (`timeout_secs`).
    pub async fn start_with_timeout(
        &self,
        workflow: &str,
        input: Option<Value>,
        thread_id: Option<&str>,
        timeout_secs: Option<u64>,
    ) -> Result<Value, ClientError> {
        let mut body = json!({ "workflow": workflow, "input": input.unwrap_or(Value::Null) });
        if let Some(t) = thread_id {
            body["thread_id"] = Value::from(t);
        }
        if let Some(n) = timeout_secs {
            body["timeout_secs"] = Value::from(n);
        }
        self.request(Method::POST, "/v1/runs", Some(&body)).await
    }

    /// `GET /v1/runs/{thread}`.
    pub async fn get(&self, thread: &str) -> Result<Value, ClientError> {
        self.request(Method::GET, &format!("/v1/runs/{}", encode(thread)), None)
            .await
    }

    /// `GET /v1/runs/{thread}/result?timeout=S` (operation `await_result`), a long poll: the
    /// run once it has ended or is blocked, or as it stands after `timeout_s` seconds.
    pub async fn await_result(&self, thread: &str, timeout_s: f64) -> Result<Value, ClientError> {
        let path = format!("/v1/runs/{}/result?timeout={timeout_s:.3}", encode(thread));
        self.request(Method::GET, &path, None).await
    }

    /// `GET /v1/runs/{thread}/diagnosis`: why the run is or is not progressing.
    pub async fn diagnosis(&self, thread: &str) -> Result<Value, ClientError> {
        self.request(Method::GET, &format!("/v1/runs/{}/diagnosis", encode(thread)), None)
            .await
    }

    /// `GET /v1/runs/{thread}/history`.
    pub async fn history(&self, thread: &str) -> Result<Value, ClientError> {
        self.request(Method::GET, &format!("/v1/runs/{}/history", encode(thread)), None)
            .await
    }

    /// `GET /v1/runs/{thread}/export`.
    pub async fn export(&self, thread: &str) -> Result<Value, ClientError> {
        self.request(Method::GET, &format!("/v1/runs/{}/export", encode(thread)), None)
            .await
    }

    /// `POST /v1/runs/{thread}/resume`; with a client `id`, a retried call delivers once.
    pub async fn resume(&self, thread: &str, value: Value, id: Option<&str>) -> Result<Value, ClientError> {
        let path = format!("/v1/runs/{}/resume", encode(thread));
        self.request(Method::POST, &path, Some(&value_body(value, id))).await
    }

    /// `POST /v1/runs/{thread}/signals/{name}`; with a client `id`, a retried call delivers once.
    pub async fn signal(&self, thread: &str, name: &str, value: Value, id: Option<&str>) -> Result<Value, ClientError> {
        let path = format!("/v1/runs/{}/signals/{}", encode(thread), encode(name));
        self.request(Method::POST, &path, Some(&value_body(value, id))).await
    }

    /// `POST /v1/runs/{thread}/retry`: re-queue a blocked run after a fix.
    pub async fn retry(&self, thread: &str) -> Result<Value, ClientError> {
        self.request(Method::POST, &format!("/v1/runs/{}/retry", encode(thread)), None)
            .await
    }

    /// `POST /v1/runs/{thread}/forget-feature`: the run stops needing a value feature
    /// (`value:<type>@<version>`) that no build names.
    pub async fn forget_feature(&self, thread: &str, feature: &str) -> Result<Value, ClientError> {
        let body = serde_json::json!({ "feature": feature });
        self.request(
            Method::POST,
            &format!("/v1/runs/{}/forget-feature", encode(thread)),
            Some(&body),
        )
        .await
    }

    /// `POST /v1/runs/{thread}/output-version`: the version (`<type>@<version>`) the output
    /// of the run's child call at journal index `call` was written at, for a child an older
    /// build completed without one.
    pub async fn set_output_version(
        &self,
        thread: &str,
        call: u32,
        output_version: &str,
    ) -> Result<Value, ClientError> {
        let body = serde_json::json!({ "call": call, "output_version": output_version });
        self.request(
            Method::POST,
            &format!("/v1/runs/{}/output-version", encode(thread)),
            Some(&body),
        )
        .await
    }

    /// `POST /v1/runs/{thread}/fork`.
    pub async fn fork(
        &self,
        thread: &str,
        from_step: u32,
        thread_id: Option<&str>,
        rerun_effects: &[String],
    ) -> Result<Value, ClientError> {
        let mut body = json!({ "from_step": from_step, "rerun_effects": rerun_effects });
        if let Some(t) = thread_id {
            body["thread_id"] = Value::from(t);
        }
        self.request(Method::POST, &format!("/v1/runs/{}/fork", encode(thread)), Some(&body))
            .await
    }

    /// `POST /v1/runs/{thread}/restart`.
    pub async fn restart(&self, thread: &str, from_step: u32, rerun_effects: &[String]) -> Result<Value, ClientError> {
        let body = json!({ "from_step": from_step, "rerun_effects": rerun_effects });
        self.request(
            Method::POST,
            &format!("/v1/runs/{}/restart", encode(thread)),
            Some(&body),
        )
        .await
    }

    /// `POST /v1/schedules` with a schedule body.
    pub async fn schedule_create(&self, body: &Value) -> Result<Value, ClientError> {
        self.request(Method::POST, "/v1/schedules", Some(body)).await
    }

    /// `GET /v1/schedules`, or `GET /v1/schedules/{id}`.
    pub async fn schedule_get(&self, id: Option<&str>) -> Result<Value, ClientError> {
        match id {
            Some(id) => {
                self.request(Method::GET, &format!("/v1/schedules/{}", encode(id)), None)
                    .await
            }
            None => self.request(Method::GET, "/v1/schedules", None).await,
        }
    }

    /// `POST /v1/schedules/{id}/{action}` (pause, resume, trigger) or `DELETE
    /// /v1/schedules/{id}` (action `delete`).
    pub async fn schedule_action(&self, id: &str, action: &str, body: Option<&Value>) -> Result<Value, ClientError> {
        let path = format!("/v1/schedules/{}", encode(id));
        match action {
            "delete" => self.request(Method::DELETE, &path, None).await,
            _ => self.request(Method::POST, &format!("{path}/{action}"), body).await,
        }
    }

    /// `POST /v1/runs/{thread}/cancel`.
    pub async fn cancel(&self, thread: &str, reason: Option<&str>) -> Result<Value, ClientError> {
        let body = reason.map(|r| json!({ "reason": r }));
        self.request(
            Method::POST,
            &format!("/v1/runs/{}/cancel", encode(thread)),
            body.as_ref(),
        )
        .await
    }

    /// `POST /v1/runs/{thread}/effects/{key}/resolve`.
    pub async fn resolve(
        &self,
        thread: &str,
        key: &str,
        applied: bool,
        result: Option<Value>,
    ) -> Result<Value, ClientError> {
        let path = format!("/v1/runs/{}/effects/{}/resolve", encode(thread), encode(key));
        let mut body = json!({ "applied": applied });
        if let Some(r) = result {
            body["result"] = r;
        }
        self.request(Method::POST, &path, Some(&body)).await
    }

    /// `POST /v1/runs/{thread}/effects/resolve`: settles every effect the run has in doubt
    /// together (`effects`: each key the run's diagnosis lists, `{"applied": bool, "result"?}`).
    pub async fn resolve_all(&self, thread: &str, effects: Value) -> Result<Value, ClientError> {
        let path = format!("/v1/runs/{}/effects/resolve", encode(thread));
        self.request(Method::POST, &path, Some(&json!({ "effects": effects })))
            .await
    }

    /// `POST /v1/runs/{thread}/pause` with an optional [`crate::model::RunPauseBody`].
    pub async fn pause_run(&self, thread: &str, body: Option<&Value>) -> Result<Value, ClientError> {
        self.request(Method::POST, &format!("/v1/runs/{}/pause", encode(thread)), body)
            .await
    }

    /// `POST /v1/runs/{thread}/unpause` with an optional [`crate::model::RunUnpauseBody`].
    pub async fn unpause_run(&self, thread: &str, body: Option<&Value>) -> Result<Value, ClientError> {
        self.request(Method::POST, &format!("/v1/runs/{}/unpause", encode(thread)), body)
            .await
    }

    /// `POST /v1/pauses` with a [`crate::model::PauseRequest`].
    pub async fn pause(&self, body: &Value) -> Result<Value, ClientError> {
        self.request(Method::POST, "/v1/pauses", Some(body)).await
    }

    /// `POST /v1/pauses/resume` with a [`crate::model::ResumeRequest`].
    pub async fn resume_pause(&self, body: &Value) -> Result<Value, ClientError> {
        self.request(Method::POST, "/v1/pauses/resume", Some(body)).await
    }

    /// `GET /v1/pauses`: the pauses in force ([`crate::model::PauseList`]).
    pub async fn pauses(&self) -> Result<Value, ClientError> {
        self.request(Method::GET, "/v1/pauses", None).await
    }

    /// `GET /v1/workers`: the live workers ([`crate::model::WorkerList`]).
    pub async fn workers(&self) -> Result<Value, ClientError> {
        self.request(Method::GET, "/v1/workers", None).await
    }

    /// `GET /v1/workflows`: the workflows live workers serve ([`crate::model::WorkflowList`]).
    pub async fn workflows(&self) -> Result<Value, ClientError> {
        self.request(Method::GET, "/v1/workflows", None).await
    }

    /// `GET /v1/runs?status=&limit=`.
    pub async fn list(&self, status: Option<&str>, limit: Option<u32>) -> Result<Value, ClientError> {
        self.list_waiting(status, limit, None).await
    }

    /// `GET /v1/runs?status=&limit=&waiting_on=` (operation `list_runs`): runs, newest first;
    /// with `waiting_on`, only those waiting on that cause, each with its `waiting`.
    pub async fn list_waiting(
        &self,
        status: Option<&str>,
        limit: Option<u32>,
        waiting_on: Option<&str>,
    ) -> Result<Value, ClientError> {
        let mut query = Vec::new();
        if let Some(s) = status {
            query.push(format!("status={}", encode(s)));
        }
        if let Some(n) = limit {
            query.push(format!("limit={n}"));
        }
        if let Some(w) = waiting_on {
            query.push(format!("waiting_on={}", encode(w)));
        }
        let path = if query.is_empty() {
            "/v1/runs".to_owned()
        } else {
            format!("/v1/runs?{}", query.join("&"))
        };
        self.request(Method::GET, &path, None).await
    }
}

fn value_body(value: Value, id: Option<&str>) -> Value {
    match id {
        Some(id) => json!({ "value": value, "id": id }),
        None => json!({ "value": value }),
    }
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

fn canonical(status: StatusCode) -> String {
    status.canonical_reason().unwrap_or("error").to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_segments() {
        assert_eq!(encode("invoice-42"), "invoice-42");
        assert_eq!(encode("a:b/c d"), "a%3Ab%2Fc%20d");
        assert_eq!(encode("ü"), "%C3%BC");
    }

    #[test]
    fn trims_base() {
        assert_eq!(ApiClient::new("http://x:1/").base_url(), "http://x:1");
    }
}
