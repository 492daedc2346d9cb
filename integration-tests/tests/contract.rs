//! The HTTP API held to its published contract (`docs/openapi.json`), against a real
//! scheduler and real workers on real RabbitMQ and Redis, by tools in other languages:
//!
//! - Python's urllib and requests send oversized and early-rejected bodies and get the JSON
//!   error, not a connection reset;
//! - schemathesis runs every operation (examples, coverage, fuzzing, and the stateful links
//!   start → get → history → resume → cancel) and fails on any 5xx or any response that breaks
//!   the spec, while the scheduler is probed for readiness throughout;
//! - a client generated from the spec by openapi-python-client answers the approval example.
//!
//! The Python tools live in a venv made on first use ([`savepoint_integration_tests::python`]).

use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use savepoint_integration_tests::procs::{free_port, Proc};
use savepoint_integration_tests::python::{contract_dir, venv_bin};
use savepoint_integration_tests::scenario::World;
use savepoint_integration_tests::{fresh_namespace, services, test_config};

const SCHEDULER: &str = env!("CARGO_BIN_EXE_it-scheduler");
const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");

/// Runs a Python tool from the venv; returns (success, stdout, stderr).
async fn python_tool(bin: &str, args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let venv = venv_bin().to_owned();
    let mut cmd = tokio::process::Command::new(venv.join(bin));
    cmd.args(args)
        .current_dir(contract_dir())
        .env(
            "PATH",
            format!("{}:{}", venv.display(), std::env::var("PATH").unwrap_or_default()),
        )
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().await.unwrap_or_else(|e| panic!("cannot run {bin}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn wait_ready(base: &str) {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = http.get(format!("{base}/readyz")).send().await {
            if r.status() == 200 {
                return;
            }
        }
        assert!(Instant::now() < deadline, "the scheduler at {base} never became ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn python_clients_get_the_413_and_every_early_rejection_as_json() {
    let w = World::new("contract413", |_| {}).await;
    let limit = w.cfg.scheduler.max_input_bytes.to_string();
    let (ok, out, err) = python_tool("python", &["oversized.py", &w.sched.base_url, &limit], &[]).await;
    println!("{out}");
    assert!(ok, "a Python client did not get its error answer:\n{out}\n{err}");
    // 16 requests per client: 3 oversized starts, an oversized resume, an oversized body with
    // the wrong content type, and three early rejections with a body attached.
    assert_eq!(out.matches("\"ok\": true").count(), 16, "{out}");
    w.sched.stop().await.expect("scheduler stopped");
}

#[tokio::test]
async fn schemathesis_finds_no_5xx_and_no_response_outside_the_spec() {
    services().await;
    let cfg = test_config(&fresh_namespace("contract"));
    let addr = format!("127.0.0.1:{}", free_port());
    let base = format!("http://{addr}");
    let mut sched = Proc::spawn(SCHEDULER, "sched", &cfg, &[("SAVEPOINT_HTTP_ADDR", &addr)]);
    let _w1 = Proc::spawn(WORKER, "w1", &cfg, &[("SAVEPOINT_WORKER_NAME", "w1")]);
    let _w2 = Proc::spawn(WORKER, "w2", &cfg, &[("SAVEPOINT_WORKER_NAME", "w2")]);
    wait_ready(&base).await;

    // The scheduler must stay ready while it is fuzzed.
    let probes = Arc::new(AtomicUsize::new(0));
    let unready = Arc::new(AtomicUsize::new(0));
    let stop = tokio_util::sync::CancellationToken::new();
    let prober = tokio::spawn({
        let (base, probes, unready, stop) = (base.clone(), probes.clone(), unready.clone(), stop.clone());
        async move {
            let http = reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .unwrap();
            while !stop.is_cancelled() {
                let ok = matches!(http.get(format!("{base}/readyz")).send().await, Ok(r) if r.status() == 200);
                probes.fetch_add(1, Ordering::Relaxed);
                if !ok {
                    unready.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    });

    let seconds = std::env::var("SAVEPOINT_CONTRACT_SECONDS").unwrap_or_else(|_| "60".into());
    let report = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/contract-report");
    let spec = format!("{base}/openapi.json");
    let report_dir = report.display().to_string();
    // One worker: several threads hit a CPython 3.11 race in compile() ("AST constructor
    // recursion depth mismatch") inside schemathesis' coverage phase.
    let args = [
        "--config-file",
        "schemathesis.toml",
        "run",
        &spec,
        "--workers",
        "1",
        "--max-time",
        &seconds,
        "--report",
        "junit",
        "--report-dir",
        &report_dir,
    ];
    let runs = waiting_runs(&base, 3).await.join(",");
    let env = [
        ("SCHEMATHESIS_HOOKS", "hooks"),
        ("PYTHONPATH", "."),
        ("SAVEPOINT_CONTRACT_WORKFLOWS", "approval"),
        ("SAVEPOINT_CONTRACT_RUNS", runs.as_str()),
        ("NO_COLOR", "1"),
    ];
    let (ok, out, err) = python_tool("schemathesis", &args, &env).await;
    stop.cancel();
    prober.await.unwrap();
    println!("{out}");
    eprintln!("{err}");
    println!(
        "schemathesis report: {}; readiness probes: {} ({} not ready)",
        report.display(),
        probes.load(Ordering::Relaxed),
        unready.load(Ordering::Relaxed)
    );
    assert!(ok, "schemathesis found a failure (above)");
    assert!(out.contains("passed"), "schemathesis ran no test case:\n{out}");
    assert_eq!(
        unready.load(Ordering::Relaxed),
        0,
        "the scheduler was not ready during the run"
    );
    assert!(sched.is_running(), "the scheduler exited during the run");
}

/// Starts `n` approval runs and waits until each waits for its answer: the hooks put their
/// ids in generated paths, so the operations on a run meet a real one.
async fn waiting_runs(base: &str, n: usize) -> Vec<String> {
    let http = reqwest::Client::new();
    let mut ids = Vec::new();
    for i in 0..n {
        let id = format!("contract-run-{i}");
        let r = http
            .post(format!("{base}/v1/runs"))
            .json(&serde_json::json!({"workflow": "approval", "input": {}, "thread_id": id}))
            .send()
            .await
            .expect("start");
        assert!(r.status().is_success(), "start {id}: {}", r.status());
        ids.push(id);
    }
    for id in &ids {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let run: serde_json::Value = http
                .get(format!("{base}/v1/runs/{id}"))
                .send()
                .await
                .expect("get")
                .json()
                .await
                .expect("json");
            if run["status"] == "waiting" {
                break;
            }
            assert!(Instant::now() < deadline, "{id} never waited: {run}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    ids
}

#[tokio::test]
async fn a_client_generated_from_the_spec_answers_the_approval_example() {
    let w = World::new("contractgen", |_| {}).await;
    let _worker = w.worker(WORKER, "w1", "");
    w.wait_registered("approval").await;

    let out_dir = std::env::temp_dir().join(format!("savepoint-client-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&out_dir).unwrap();
    let package = out_dir.join("savepoint_client");
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json");
    let (spec, package_s) = (spec.display().to_string(), package.display().to_string());
    let gen_args = [
        "generate",
        "--path",
        &spec,
        "--meta",
        "none",
        "--output-path",
        &package_s,
    ];
    let (ok, out, err) = python_tool("openapi-python-client", &gen_args, &[]).await;
    assert!(ok, "openapi-python-client could not generate a client:\n{out}\n{err}");
    assert!(package.join("api/runs/start_run.py").exists(), "{out}");

    let thread = format!("approval-{}", w.cfg.namespace);
    let dir = out_dir.display().to_string();
    let (ok, out, err) = python_tool("python", &["approval_client.py", &dir, &w.sched.base_url, &thread], &[]).await;
    assert!(ok, "the generated client did not answer the approval:\n{out}\n{err}");
    let seen: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(seen["status"], "completed");
    assert_eq!(seen["output"], serde_json::json!({"log": ["first", "gate=yes"]}));
    // The server's record agrees.
    let run = w.run(&savepoint_core::ids::ThreadId::new(thread).unwrap()).await;
    assert_eq!(run["status"], "completed", "{run}");
    let _ = std::fs::remove_dir_all(&out_dir);
    w.sched.stop().await.expect("scheduler stopped");
}
