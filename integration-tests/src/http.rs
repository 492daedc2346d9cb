//! [`TestApi`]: one test's namespace, in-process scheduler and HTTP client, with helpers that
//! return `(status, JSON body)` and panic on a non-JSON answer.

use savepoint_runtime::config::Config;
use serde_json::{json, Value};

use crate::{
    backend_ready, cleanup, fresh_namespace, register_test_workflow, start_scheduler, test_config, SchedulerHandle,
};

/// One test's scheduler, namespace (with workflow `echo` registered) and HTTP client.
pub struct TestApi {
    /// The config (fresh namespace).
    pub cfg: Config,
    /// The scheduler.
    pub sched: SchedulerHandle,
    /// HTTP client.
    pub http: reqwest::Client,
}

impl TestApi {
    /// A fresh namespace `prefix…`, tuned by `tune`, with `echo` registered and a scheduler.
    pub async fn new(prefix: &str, tune: impl FnOnce(&mut Config)) -> Self {
        backend_ready().await;
        let mut cfg = test_config(&fresh_namespace(prefix));
        tune(&mut cfg);
        register_test_workflow(&cfg, "echo").await;
        let sched = start_scheduler(&cfg).await;
        Self {
            cfg,
            sched,
            http: reqwest::Client::new(),
        }
    }

    /// Absolute URL of an API path.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.sched.base_url)
    }

    /// `(status, JSON body)` of a response; panics if the body is not JSON.
    pub async fn answer(r: reqwest::Response) -> (u16, Value) {
        let status = r.status().as_u16();
        let text = r.text().await.expect("body");
        let body =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("HTTP {status}: body is not JSON ({e}): {text:?}"));
        (status, body)
    }

    /// POST a JSON body.
    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self.http.post(self.url(path)).json(&body).send().await;
        Self::answer(r.expect("api reachable")).await
    }

    /// POST raw bytes with a content type.
    pub async fn post_raw(&self, path: &str, content_type: &str, body: &'static str) -> (u16, Value) {
        let r = self
            .http
            .post(self.url(path))
            .header("content-type", content_type)
            .body(body);
        Self::answer(r.send().await.expect("api reachable")).await
    }

    /// GET.
    pub async fn get(&self, path: &str) -> (u16, Value) {
        Self::answer(self.http.get(self.url(path)).send().await.expect("api reachable")).await
    }

    /// Starts an `echo` run with this thread id; asserts 201 pending.
    pub async fn start_echo(&self, thread: &str, input: Value) {
        let body = json!({"workflow": "echo", "input": input, "thread_id": thread});
        let (status, body) = self.post("/v1/runs", body).await;
        assert_eq!((status, body["status"].as_str()), (201, Some("pending")), "{body}");
    }

    /// Stops the scheduler (asserting a clean stop) and deletes the namespace.
    pub async fn done(self) {
        let TestApi { cfg, sched, .. } = self;
        sched.stop().await.expect("scheduler stops cleanly");
        cleanup(&cfg).await;
    }
}

/// Asserts an API error: `status == code` and `{"error": message containing want}`.
pub fn assert_error((status, body): (u16, Value), code: u16, want: &str) {
    let msg = body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error message in {body}"));
    assert_eq!(status, code, "{body}");
    assert!(msg.contains(want), "error {msg:?} should contain {want:?}");
}
