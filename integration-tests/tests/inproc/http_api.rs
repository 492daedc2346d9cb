//! The scheduler's HTTP API against real Redis and RabbitMQ: every bad request gets its 4xx
//! with a JSON message, the happy path has the documented shapes, and the due scanner of two
//! replicas publishes each overdue run exactly once per period.

use savepoint_core::protocol::TaskReason;
use savepoint_integration_tests::http::{assert_error, TestApi};
use savepoint_integration_tests::tasks::collect_tasks;
use savepoint_integration_tests::{register_test_workflow, register_test_workflow_version, start_scheduler};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[tokio::test]
async fn unknown_workflow_is_422_and_lists_the_known_ones() {
    let api = TestApi::new("api", |_| {}).await;
    register_test_workflow(&api.cfg, "invoice").await;
    let r = api.post("/v1/runs", json!({"workflow": "nope"})).await;
    assert_error(r, 422, "unknown workflow \"nope\"; known: echo, invoice");
    api.done().await;
}

#[tokio::test]
async fn malformed_json_is_400_and_a_wrong_content_type_415() {
    let api = TestApi::new("api", |_| {}).await;
    assert_error(
        api.post_raw("/v1/runs", "application/json", "{\"workflow\": ").await,
        400,
        "invalid JSON body",
    );
    assert_error(
        api.post_raw("/v1/runs", "text/plain", "{\"workflow\": \"echo\"}").await,
        415,
        "Content-Type: application/json",
    );
    assert_error(
        api.post("/v1/runs", json!({"input": 1})).await,
        400,
        "missing field `workflow`",
    );
    assert_error(
        api.post("/v1/runs", json!({"workflow": "echo", "inptu": 1})).await,
        400,
        "unknown field `inptu`",
    );
    assert_error(
        api.post_raw("/v1/runs/x-1/resume", "application/json", "[1,").await,
        400,
        "invalid JSON body",
    );
    assert_error(
        api.post_raw("/v1/runs/x-1/cancel", "application/json", "{oops").await,
        400,
        "invalid JSON body",
    );
    // Bodies are JSON objects: serde would read a struct from an array by position
    // (schemathesis found `[null, null]` accepted as a resume).
    assert_error(
        api.post_raw("/v1/runs/x-1/resume", "application/json", "[null, null]")
            .await,
        400,
        "expected a JSON object, got an array",
    );
    assert_error(
        api.post_raw("/v1/runs", "application/json", " \"echo\"").await,
        400,
        "expected a JSON object, got a string",
    );
    // A cancel's body is optional: `null` is no reason (the run is then looked up: 404).
    assert_error(
        api.post_raw("/v1/runs/x-1/cancel", "application/json", "null").await,
        404,
        "run x-1 not found",
    );
    api.done().await;
}

#[tokio::test]
async fn bad_thread_id_is_400() {
    let api = TestApi::new("api", |_| {}).await;
    let r = api
        .post("/v1/runs", json!({"workflow": "echo", "thread_id": "has space"}))
        .await;
    assert_error(
        r,
        400,
        "invalid thread id \"has space\": use 1-128 characters from A-Z a-z 0-9 _ - . :",
    );
    assert_error(
        api.post("/v1/runs", json!({"workflow": "echo", "thread_id": ""})).await,
        400,
        "invalid thread id",
    );
    assert_error(
        api.get("/v1/runs/brace%7Bx%7D").await,
        400,
        "invalid thread id \"brace{x}\"",
    );
    assert_error(
        api.post("/v1/runs/a%20b/cancel", json!({})).await,
        400,
        "invalid thread id",
    );
    api.done().await;
}

#[tokio::test]
async fn oversized_input_is_413() {
    let api = TestApi::new("api", |c| c.scheduler.max_input_bytes = 1024).await;
    let big = "x".repeat(2000);
    let r = api.post("/v1/runs", json!({"workflow": "echo", "input": big})).await;
    assert_error(r, 413, "exceeds the limit of 1024 bytes");
    // Just under the limit is accepted.
    let (status, body) = api
        .post("/v1/runs", json!({"workflow": "echo", "input": "x".repeat(900)}))
        .await;
    assert_eq!(status, 201, "{body}");
    api.done().await;
}

#[tokio::test]
async fn unknown_run_is_404_everywhere() {
    let api = TestApi::new("api", |_| {}).await;
    let want = "run nope-1 not found";
    assert_error(api.get("/v1/runs/nope-1").await, 404, want);
    assert_error(api.get("/v1/runs/nope-1/history").await, 404, want);
    assert_error(api.get("/v1/runs/nope-1/export").await, 404, want);
    assert_error(api.post("/v1/runs/nope-1/resume", json!({"value": 1})).await, 404, want);
    assert_error(
        api.post("/v1/runs/nope-1/signals/go", json!({"value": 1})).await,
        404,
        want,
    );
    assert_error(api.post("/v1/runs/nope-1/cancel", json!({})).await, 404, want);
    assert_error(
        api.post("/v1/runs/nope-1/effects/fx:1/resolve", json!({"applied": true}))
            .await,
        404,
        want,
    );
    assert_error(
        api.get("/v1/nothing-here").await,
        404,
        "no route for GET /v1/nothing-here",
    );
    assert_error(
        TestApi::answer(api.http.delete(api.url("/v1/runs")).send().await.unwrap()).await,
        405,
        "not allowed",
    );
    api.done().await;
}

#[tokio::test]
async fn resume_of_a_run_that_is_not_waiting_is_409() {
    let api = TestApi::new("api", |_| {}).await;
    api.start_echo("r-1", json!(1)).await;
    let r = api.post("/v1/runs/r-1/resume", json!({"value": true})).await;
    assert_error(r, 409, "run is pending, not waiting for an interrupt");
    api.done().await;
}

#[tokio::test]
async fn bad_list_query_is_400() {
    let api = TestApi::new("api", |_| {}).await;
    assert_error(
        api.get("/v1/runs?status=sleepy").await,
        400,
        "unknown status \"sleepy\"; use one of pending, running",
    );
    assert_error(
        api.get("/v1/runs?limit=0").await,
        400,
        "limit must be an integer from 1 to 1000",
    );
    assert_error(api.get("/v1/runs?limit=1001").await, 400, "limit must be");
    // Empty values are not "no filter" (schemathesis found `status=` read as none).
    assert_error(api.get("/v1/runs?status=").await, 400, "unknown status \"\"");
    assert_error(api.get("/v1/runs?limit=").await, 400, "limit must be");
    assert_error(api.get("/v1/runs?limit=ten").await, 400, "limit must be");
    api.done().await;
}

#[tokio::test]
async fn thread_id_reuse_is_idempotent_for_the_same_input_only() {
    let api = TestApi::new("api", |_| {}).await;
    register_test_workflow(&api.cfg, "other").await;
    api.start_echo("dup-1", json!({"a": 1, "b": [1, 2]})).await;
    let (status, body) = api
        .post(
            "/v1/runs",
            json!({"workflow": "echo", "input": {"b": [1, 2], "a": 1}, "thread_id": "dup-1"}),
        )
        .await;
    assert_eq!(
        (status, &body),
        (200, &json!({"thread_id": "dup-1", "status": "pending"}))
    );
    let r = api
        .post(
            "/v1/runs",
            json!({"workflow": "echo", "input": {"a": 2}, "thread_id": "dup-1"}),
        )
        .await;
    assert_error(r, 409, "thread id dup-1 is already used");
    let r = api
        .post(
            "/v1/runs",
            json!({"workflow": "other", "input": {"a": 1, "b": [1, 2]}, "thread_id": "dup-1"}),
        )
        .await;
    assert_error(r, 409, "already used");
    api.done().await;
}

#[tokio::test]
async fn resolve_on_a_run_that_is_not_blocked_is_409() {
    let api = TestApi::new("api", |_| {}).await;
    api.start_echo("b-1", Value::Null).await;
    let r = api
        .post(
            "/v1/runs/b-1/effects/ledger:1/resolve",
            json!({"applied": true, "result": 5}),
        )
        .await;
    assert_error(r, 409, "run is pending, not blocked on effect \"ledger:1\"");
    assert_error(
        api.post("/v1/runs/b-1/effects/ledger:1/resolve", json!({})).await,
        400,
        "missing field `applied`",
    );
    api.done().await;
}

#[tokio::test]
async fn invalid_signal_name_is_400() {
    let api = TestApi::new("api", |_| {}).await;
    api.start_echo("s-1", Value::Null).await;
    let r = api.post("/v1/runs/s-1/signals/bad%20name!", json!({"value": 1})).await;
    assert_error(r, 400, "invalid signal name \"bad name!\": use 1-64 characters");
    let long = "x".repeat(65);
    assert_error(
        api.post(&format!("/v1/runs/s-1/signals/{long}"), json!({"value": 1}))
            .await,
        400,
        "invalid signal name",
    );
    api.done().await;
}

#[tokio::test]
async fn happy_path_create_inspect_cancel() {
    let api = TestApi::new("api", |_| {}).await;
    register_test_workflow_version(&api.cfg, "echo", 3).await;
    let (status, body) = api
        .post("/v1/runs", json!({"workflow": "echo", "input": {"n": 1}}))
        .await;
    assert_eq!(status, 201, "{body}");
    let thread = body["thread_id"].as_str().expect("generated thread id").to_owned();
    assert!(thread.starts_with("echo-"), "{thread}");

    let (status, run) = api.get(&format!("/v1/runs/{thread}")).await;
    assert_eq!(status, 200);
    assert_eq!(run["status"], "pending");
    assert_eq!(
        (
            run["step"].as_u64(),
            run["workflow"].as_str(),
            run["workflow_version"].as_u64()
        ),
        (Some(0), Some("echo"), Some(3))
    );
    assert_eq!((&run["next"], &run["interrupts"]), (&json!([]), &json!([])));
    assert!(
        run["due_at"].as_u64().unwrap() >= run["created_at"].as_u64().unwrap(),
        "{run}"
    );
    for key in ["version", "attempt", "updated_at"] {
        assert!(run[key].is_u64(), "{key} in {run}");
    }

    let (status, hist) = api.get(&format!("/v1/runs/{thread}/history")).await;
    assert_eq!(status, 200);
    assert_eq!(
        (&hist["thread_id"], &hist["status"], &hist["entries"]),
        (&json!(thread), &json!("pending"), &json!([]))
    );
    let types: Vec<&str> = hist["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["created"], "{hist}");
    assert_eq!(hist["events"][0]["detail"], "echo@3");

    let (status, export) = api.get(&format!("/v1/runs/{thread}/export")).await;
    assert_eq!(status, 200);
    assert_eq!(export["input"], json!({"n": 1}));
    assert_eq!(
        (&export["completed"], &export["pending"], &export["journal"]),
        (&json!([]), &json!([]), &json!([]))
    );
    assert_eq!((export["schema"].as_u64(), export["step"].as_u64()), (Some(1), Some(0)));

    let (status, list) = api.get("/v1/runs?status=pending&limit=10").await;
    assert_eq!(status, 200);
    assert_eq!(list["runs"][0]["thread_id"], json!(thread), "{list}");

    let (status, sig) = api
        .post(&format!("/v1/runs/{thread}/signals/go"), json!({"value": 7}))
        .await;
    assert_eq!((status, &sig["buffered"]), (202, &json!(true)), "{sig}");

    // The start task carries step 0 and the run's trace context.
    let tasks = collect_tasks(&api.cfg, Duration::from_secs(10), |got| {
        got.iter().any(|s| s.task.reason == TaskReason::Start)
    })
    .await;
    let start = tasks.iter().find(|s| s.task.reason == TaskReason::Start).unwrap();
    let (task, headers) = (&start.task, &start.headers);
    assert_eq!((task.thread.as_str(), task.step), (thread.as_str(), Some(0)));
    let tp = headers.get("traceparent").expect("traceparent header");
    assert!(tp.starts_with("00-") && tp.ends_with("-01") && tp.len() == 55, "{tp}");

    let (status, body) = api
        .post(
            &format!("/v1/runs/{thread}/cancel"),
            json!({"reason": "test says stop"}),
        )
        .await;
    assert_eq!((status, &body["status"]), (200, &json!("cancelled")), "{body}");
    let (_, run) = api.get(&format!("/v1/runs/{thread}")).await;
    assert_eq!(
        (&run["status"], &run["cancel_reason"]),
        (&json!("cancelled"), &json!("test says stop")),
        "{run}"
    );
    assert!(run["finished_at"].is_u64() && run.get("due_at").is_none(), "{run}");
    assert_error(
        api.post(&format!("/v1/runs/{thread}/cancel"), json!({})).await,
        409,
        "run already ended: it is cancelled",
    );
    assert_error(
        api.post(&format!("/v1/runs/{thread}/resume"), json!({"value": 1}))
            .await,
        409,
        "run is cancelled",
    );
    assert_error(
        api.post(&format!("/v1/runs/{thread}/signals/go"), json!({"value": 1}))
            .await,
        409,
        "run is cancelled",
    );

    let metrics = api
        .http
        .get(api.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("savepoint_http_requests_total{route=\"/v1/runs/{thread_id}\""),
        "metrics:\n{metrics}"
    );
    api.done().await;
}

#[tokio::test]
async fn failed_start_publish_is_recovered_by_the_scanner() {
    let api = TestApi::new("api", |c| c.failpoints = "scheduler.before_publish=error@1".into()).await;
    let created = Instant::now();
    api.start_echo("lost-1", Value::Null).await;
    let tasks = collect_tasks(&api.cfg, Duration::from_secs(10), |got| !got.is_empty()).await;
    let (task, at) = (&tasks[0].task, tasks[0].at);
    assert_eq!(
        (task.thread.as_str(), task.reason, task.step),
        ("lost-1", TaskReason::Due, None)
    );
    let waited = at.duration_since(created);
    assert!(
        waited >= Duration::from_millis(1900),
        "the due task came after the redelivery delay, not {waited:?}"
    );
    api.done().await;
}

/// Two scheduler replicas on one namespace: each overdue run is published exactly once (no
/// double publish by racing replicas, none missed), and once the broker confirmed that task,
/// the safety net leaves the run to the queue: no second message while nobody consumes it.
#[tokio::test]
async fn two_replicas_publish_each_due_run_once() {
    const RUNS: usize = 50;
    let api = TestApi::new("scan", |_| {}).await;
    let second = start_scheduler(&api.cfg).await;
    let store = savepoint_store::ScriptStore::connect(&api.cfg.redis_url, api.cfg.keys(), api.cfg.store())
        .await
        .unwrap();
    let redeliver = Duration::from_millis(api.cfg.redeliver_ms);
    let mut threads = Vec::new();
    // Created without a start task (as if every start publish had failed): only the due
    // scanners of the two replicas can ring them, once their redelivery delay passes.
    for i in 0..RUNS {
        let t = savepoint_core::ids::ThreadId::new(format!("due-{i}")).unwrap();
        store.create(&t, "echo", 1, "null", "").await.unwrap();
        threads.push(t.to_string());
    }
    // Watch for three redelivery periods (the old scanner rang every run once per period),
    // and on until every run's task has been read: a task published in time but still in the
    // queue when the watch ends (a slow machine: the collector connects late, reads behind)
    // is not a missed run.
    let watch = redeliver * 3 + Duration::from_secs(1);
    let started = Instant::now();
    let all_due = |seen: &[savepoint_integration_tests::tasks::SeenTask]| {
        let due: std::collections::BTreeSet<String> = seen
            .iter()
            .filter(|s| s.task.reason == TaskReason::Due)
            .map(|s| s.task.thread.to_string())
            .collect();
        threads.iter().all(|t| due.contains(t))
    };
    let tasks = collect_tasks(&api.cfg, watch + Duration::from_secs(30), |seen| {
        started.elapsed() >= watch && all_due(seen)
    })
    .await;
    let mut per_thread: BTreeMap<String, usize> = BTreeMap::new();
    for s in tasks.iter().filter(|s| s.task.reason == TaskReason::Due) {
        *per_thread.entry(s.task.thread.to_string()).or_default() += 1;
    }
    let missed: Vec<&String> = threads.iter().filter(|t| !per_thread.contains_key(*t)).collect();
    assert!(missed.is_empty(), "runs never published as due: {missed:?}");
    let twice: Vec<(&String, &usize)> = per_thread.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "runs published more than once although their first task was confirmed and never consumed: {twice:?}"
    );
    second.stop().await.expect("second replica stops cleanly");
    api.done().await;
}

/// Watches Redis with `MONITOR`, which only Redis has: in the `services` tier only, and left out
/// of the embedded pass (`--skip result_long_poll_waits_until_the_run_ends`).
#[cfg(feature = "services")]
#[tokio::test]
async fn result_long_poll_waits_until_the_run_ends() {
    let api = TestApi::new("api", |_| {}).await;
    api.start_echo("lp-1", json!(1)).await;
    // Not ended: answers 202 with the run as it stands once the timeout passes.
    let t0 = Instant::now();
    let (code, body) = api.get("/v1/runs/lp-1/result?timeout=0.3").await;
    assert_eq!((code, body["status"].as_str()), (202, Some("pending")), "{body}");
    assert!(t0.elapsed() >= Duration::from_millis(300));
    // Ends while a poll waits: the poll answers 200 soon after. Watch Redis (MONITOR) for
    // the handler's header reads of this run, so the test knows the poll is in its waiting
    // loop (it read the pending run several times without answering) before cancelling.
    let thread = savepoint_core::ids::ThreadId::new("lp-1").unwrap();
    let needle = format!("\"HMGET\" \"{}\"", api.cfg.keys().run(&thread).run);
    let client = redis::Client::open(api.cfg.redis_url.as_str()).unwrap();
    let mut reads = client.get_async_monitor().await.unwrap().into_on_message::<String>();
    let waiter = {
        let url = api.url("/v1/runs/lp-1/result?timeout=10");
        tokio::spawn(async move { reqwest::get(url).await.unwrap() })
    };
    const POLLS: usize = 3;
    let seen = tokio::time::timeout(Duration::from_secs(5), async {
        let mut seen = 0;
        while let Some(line) = futures::StreamExt::next(&mut reads).await {
            if line.contains(&needle) {
                seen += 1;
                if seen == POLLS {
                    break;
                }
            }
        }
        seen
    })
    .await
    .expect("the long poll read the run's header 3 times within 5 s");
    drop(reads);
    assert_eq!(seen, POLLS, "MONITOR stream ended early");
    assert!(
        !waiter.is_finished(),
        "the long poll answered while the run was still pending"
    );
    let t1 = Instant::now();
    assert_eq!(api.post("/v1/runs/lp-1/cancel", json!({})).await.0, 200);
    let r = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the waiting poll answered within 2 s of the cancel")
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(t1.elapsed() < Duration::from_secs(2), "answered promptly");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["status"], "cancelled");
    assert_error(
        api.get("/v1/runs/lp-1/result?timeout=abc").await,
        400,
        "timeout must be a number",
    );
    assert_error(api.get("/v1/runs/nope/result?timeout=1").await, 404, "not found");
    api.done().await;
}
