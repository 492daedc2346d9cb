//! One run is one trace: a scheduler process and two worker processes export OTLP spans to
//! an in-process receiver; the first worker is SIGKILLed while the run waits for approval,
//! the second resumes it. Every span of the run shares the trace started by the API request,
//! and the parent/child links hold across processes.

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use savepoint_integration_tests::procs::Proc;
use savepoint_integration_tests::{fresh_namespace, services, test_config};

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");
const SCHEDULER: &str = env!("CARGO_BIN_EXE_it-scheduler");

#[derive(Debug, Clone)]
struct Span {
    service: String,
    name: String,
    trace: String,
    id: String,
    parent: String,
}

type Spans = Arc<Mutex<Vec<Span>>>;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

async fn receive(State(spans): State<Spans>, body: Bytes) -> &'static str {
    let Ok(req) = ExportTraceServiceRequest::decode(body) else {
        return "bad";
    };
    let mut out = spans.lock().unwrap();
    for rs in req.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|r| r.attributes.iter())
            .find(|a| a.key == "service.name")
            .and_then(|a| a.value.as_ref())
            .map(|v| format!("{:?}", v.value))
            .unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                out.push(Span {
                    service: service.clone(),
                    name: s.name,
                    trace: hex(&s.trace_id),
                    id: hex(&s.span_id),
                    parent: hex(&s.parent_span_id),
                });
            }
        }
    }
    "ok"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_run_is_one_trace_across_processes_and_a_crash() {
    services().await;
    let cfg = test_config(&fresh_namespace("tr"));
    let spans: Spans = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let app = Router::new()
        .route("/v1/traces", post(receive))
        .with_state(spans.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let otel = |service: &str, extra: &[(&'static str, String)]| -> Vec<(&'static str, String)> {
        let mut v = vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.clone()),
            ("OTEL_SERVICE_NAME", service.to_owned()),
            ("OTEL_BSP_SCHEDULE_DELAY", "50".to_owned()),
        ];
        v.extend_from_slice(extra);
        v
    };
    let spawn = |bin: &str, name: &str, env: Vec<(&'static str, String)>| {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Proc::spawn(bin, name, &cfg, &env)
    };
    let _sched = spawn(
        SCHEDULER,
        "sched",
        otel("scheduler", &[("SAVEPOINT_HTTP_ADDR", addr.clone())]),
    );
    let mut a = spawn(WORKER, "worker-a", otel("worker-a", &[]));
    let http = reqwest::Client::new();
    let base = format!("http://{addr}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let thread = loop {
        let r = http
            .post(format!("{base}/v1/runs"))
            .json(&json!({"workflow": "approval", "input": {}}))
            .send()
            .await;
        if let Ok(r) = r {
            if r.status().as_u16() == 201 {
                let body: serde_json::Value = r.json().await.unwrap();
                break body["thread_id"].as_str().unwrap().to_owned();
            }
        }
        assert!(Instant::now() < deadline, "scheduler/worker did not come up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let wait_status = |want: &'static str| {
        let (http, url) = (http.clone(), format!("{base}/v1/runs/{thread}"));
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let run: serde_json::Value = http.get(&url).send().await.unwrap().json().await.unwrap();
                if run["status"] == want {
                    return;
                }
                assert!(Instant::now() < deadline, "run never reached {want}: {run}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    wait_status("waiting").await;
    // Let worker A export its spans, then kill it mid-run.
    tokio::time::sleep(Duration::from_millis(800)).await;
    a.signal("KILL");
    a.wait_exit(Duration::from_secs(10)).await;
    let _b = spawn(WORKER, "worker-b", otel("worker-b", &[]));
    let r = http
        .post(format!("{base}/v1/runs/{thread}/resume"))
        .json(&json!({"value": "yes"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 202);
    wait_status("completed").await;

    // Wait for worker B's spans (the step "gate" is journaled by B).
    let deadline = Instant::now() + Duration::from_secs(20);
    let services_of = |spans: &[Span], name: &str| -> HashSet<String> {
        spans
            .iter()
            .filter(|s| s.name == name)
            .map(|s| s.service.clone())
            .collect()
    };
    loop {
        let got = spans.lock().unwrap().clone();
        let slices = services_of(&got, "slice");
        if slices.iter().any(|s| s.contains("worker-a"))
            && slices.iter().any(|s| s.contains("worker-b"))
            && got.iter().any(|s| s.name == "finish" && s.service.contains("worker-b"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "spans from both workers did not arrive: {:?}",
            got.iter().map(|s| (&s.service, &s.name)).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let got = spans.lock().unwrap().clone();
    let by_id: HashMap<&str, &Span> = got.iter().map(|s| (s.id.as_str(), s)).collect();
    // The run's trace: the one of the API request that created it.
    let start = got
        .iter()
        .find(|s| s.name == "create" && s.service.contains("scheduler"))
        .expect("create span");
    let trace = &start.trace;
    let run_spans: Vec<&Span> = got.iter().filter(|s| &s.trace == trace).collect();
    let names: HashSet<&str> = run_spans.iter().map(|s| s.name.as_str()).collect();
    for n in [
        "api.request",
        "create",
        "publish",
        "task",
        "claim",
        "slice",
        "replay",
        "step",
        "commit",
        "suspend",
        "finish",
    ] {
        assert!(
            names.contains(n),
            "span {n} missing from the run's trace; have {names:?}; all: {:?}",
            got.iter()
                .map(|s| (&s.service, &s.name, &s.trace[..6]))
                .collect::<Vec<_>>()
        );
    }
    let svcs: HashSet<&str> = run_spans.iter().map(|s| s.service.as_str()).collect();
    assert!(
        svcs.iter().any(|s| s.contains("scheduler"))
            && svcs.iter().any(|s| s.contains("worker-a"))
            && svcs.iter().any(|s| s.contains("worker-b")),
        "{svcs:?}"
    );
    // Parent links: every slice sits under a task, every task under a publish, every step
    // under a slice; the first publish under the API request that created the run.
    let parent_name = |s: &Span| by_id.get(s.parent.as_str()).map(|p| p.name.clone()).unwrap_or_default();
    for s in &run_spans {
        match s.name.as_str() {
            "slice" => assert_eq!(parent_name(s), "task", "{s:?}"),
            "task" => assert_eq!(parent_name(s), "publish", "{s:?}"),
            "step" | "replay" => assert_eq!(parent_name(s), "slice", "{s:?}"),
            // Step commits sit in their step; interrupt/signal/value commits in the slice.
            "commit" => assert!(["step", "slice"].contains(&parent_name(s).as_str()), "{s:?}"),
            _ => {}
        }
    }
    // The resume request is its own trace; its `signal` write is recorded there.
    assert!(got
        .iter()
        .any(|s| s.name == "signal" && s.service.contains("scheduler")));
    let b_slice = run_spans
        .iter()
        .find(|s| s.name == "slice" && s.service.contains("worker-b"))
        .unwrap();
    assert_eq!(&b_slice.trace, trace, "the resumed slice continues the run's trace");
}
