//! The doctor (`GET /v1/runs/{id}/diagnosis`, `savepoint doctor`): each case is created for
//! real against RabbitMQ and Redis — worker processes paused, SIGKILLed, started with the
//! wrong build; runs crashed at failpoints, queued with nobody consuming, waiting for a human
//! — and the diagnosis is checked against what the test did.

use serde_json::{json, Value};
use std::time::Duration;

use savepoint::workflow::{Ctx, Registry, Workflow, WorkflowError};
use savepoint_core::ids::ThreadId;
use savepoint_integration_tests::inproc::InProc;
use savepoint_integration_tests::procs::{free_port, killed_by_signal};
use savepoint_integration_tests::scenario::World;
use savepoint_integration_tests::{cleanup, register_test_workflow, wait_until};

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");
const LONG: Duration = Duration::from_secs(40);

async fn diagnosis(w: &World, t: &ThreadId) -> Value {
    let (code, body) = w.get(&format!("/v1/runs/{t}/diagnosis")).await;
    assert_eq!(code, 200, "diagnosis of {t}: {body}");
    body
}

/// Waits until the diagnosis says `case`; returns it.
async fn diagnosed(w: &World, t: &ThreadId, case: &str) -> Value {
    let mut last = Value::Null;
    let found = tokio::time::timeout(LONG, async {
        loop {
            let d = diagnosis(w, t).await;
            if d["case"] == case {
                return d;
            }
            last = d;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("diagnosis of {t} never became {case}; last: {last:#}"))
}

fn summary(d: &Value) -> &str {
    d["summary"].as_str().unwrap_or("")
}

fn commands(d: &Value) -> Vec<String> {
    d["actions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| a["command"].as_str().unwrap_or("").to_owned())
        .collect()
}

fn evidence(d: &Value) -> String {
    d["evidence"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn waiting_for_a_human_names_the_question_and_the_resume_command() {
    let w = World::new("dr-human", |_| {}).await;
    let _wk = w.worker(WORKER, "wk", "");
    w.wait_registered("approval").await;
    let t = w.start("approval", json!({})).await;
    w.wait_status(&t, &["waiting"], LONG).await;
    let d = diagnosed(&w, &t, "waiting_for_human").await;
    assert_eq!(d["progressing"], false);
    assert!(summary(&d).contains("answer the interrupt \"gate\""), "{d:#}");
    assert!(evidence(&d).contains("Approve this payment?"), "{d:#}");
    assert_eq!(commands(&d), vec![format!("savepoint resume {t} '<json>'")]);
    let resume = &d["actions"][0];
    assert_eq!(
        (resume["method"].as_str(), resume["path"].as_str()),
        (Some("POST"), Some(&*format!("/v1/runs/{t}/resume")))
    );
    // The CLI prints the same diagnosis readably.
    let text = savepoint_cli::render::diagnosis(&d);
    assert!(text.contains("[waiting_for_human, not progressing]"), "{text}");
    assert!(text.contains(&format!("$ savepoint resume {t} '<json>'")), "{text}");
    cleanup(&w.cfg).await;
}

/// Sleeps one minute on a durable timer.
struct Nap;

impl Workflow for Nap {
    const NAME: &'static str = "nap";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        ctx.step("before", || async { Ok(1) }).await?;
        ctx.sleep("cool_off", Duration::from_secs(60)).await?;
        Ok(json!("woke"))
    }
}

#[tokio::test]
async fn a_sleeping_run_says_which_timer_and_until_when() {
    let w = World::new("dr-sleep", |_| {}).await;
    let mut r = Registry::new();
    r.register(Nap);
    let wk = InProc::start(&w.cfg, r);
    w.wait_registered("nap").await;
    let t = w.start("nap", json!(null)).await;
    let run = w.wait_status(&t, &["sleeping"], LONG).await;
    let d = diagnosed(&w, &t, "sleeping").await;
    let due = run["due_at"].as_u64().expect("due time");
    assert_eq!(d["due_at"], due);
    let until = savepoint_cli::render::timestamp(due);
    assert!(
        summary(&d).contains(&format!("Sleeping on the durable timer \"cool_off\" until {until}")),
        "{d:#}"
    );
    assert!(d["progressing"] == true && d["actions"] == json!([]), "{d:#}");
    wk.stop().await;
    cleanup(&w.cfg).await;
}

#[tokio::test]
async fn a_run_behind_a_backlog_reports_the_queue_depth() {
    let w = World::new("dr-queue", |_| {}).await;
    // A registration stands in for a worker that serves the workflow but consumes nothing now.
    register_test_workflow(&w.cfg, "invoice").await;
    let mut runs = Vec::new();
    for i in 0..6 {
        runs.push(w.start("invoice", json!({"invoice_id": format!("INV-Q{i}")})).await);
    }
    let t = runs.last().expect("runs").clone();
    let d = wait_until(LONG, "six tasks in the queue", || async {
        let d = diagnosis(&w, &t).await;
        (d["queue_depth"].as_u64().unwrap_or(0) >= 6).then_some(d)
    })
    .await;
    assert_eq!(d["case"], "queued", "{d:#}");
    let depth = d["queue_depth"].as_u64().unwrap();
    assert!(
        summary(&d).starts_with(&format!(
            "Queued behind a backlog of {depth} task(s) for 1 live worker(s)"
        )),
        "{d:#}"
    );
    cleanup(&w.cfg).await;
}

#[tokio::test]
async fn a_live_holder_then_a_killed_one_whose_lease_is_taken_over_when_the_doctor_said() {
    // Long leases: the worker paused inside the ledger post holds the run for 20 s, so the
    // doctor has time to look.
    let w = World::new("dr-lease", |c| {
        c.lease_ms = 20_000;
        c.worker_ttl_ms = 60_000;
    })
    .await;
    let port = free_port();
    let http = format!("127.0.0.1:{port}");
    let mut held = w.worker_env(
        WORKER,
        "holder",
        "effect.after_intent=pause(120000)",
        &[("SAVEPOINT_WORKER_HTTP_ADDR", &http)],
    );
    w.wait_registered("invoice").await;
    let t = w.start("invoice", json!({"invoice_id": "INV-HELD"})).await;
    let d = diagnosed(&w, &t, "running").await;
    let lease = &d["lease"];
    assert_eq!(lease["alive"], true, "{d:#}");
    assert_eq!(lease["healthz"], "ok", "{d:#}");
    assert_eq!(lease["registered"], true);
    assert!(lease["worker"].as_str().unwrap().starts_with("holder-"), "{d:#}");
    assert!(summary(&d).starts_with("Running on live worker holder-"), "{d:#}");
    // Paused between the ledger post's intent and its call: the run holds that key.
    let d = wait_until(LONG, "the ledger intent held", || async {
        let d = diagnosis(&w, &t).await;
        (d["effects"].as_array().is_some_and(|e| !e.is_empty())).then_some(d)
    })
    .await;
    assert_eq!(d["effects"][0]["key"], "ledger:INV-HELD", "{d:#}");
    assert_eq!(d["effects"][0]["role"], "holds");
    assert_eq!(d["effects"][0]["state"], "intent");
    assert!(
        evidence(&d).contains("began the effect ledger:INV-HELD at entry 2"),
        "{d:#}"
    );
    // SIGKILL: the registration outlives the process (60 s TTL), /healthz does not.
    held.signal("KILL");
    assert!(killed_by_signal(&held.wait_exit(LONG).await));
    let d = diagnosed(&w, &t, "held_by_dead_worker").await;
    // The scanner rings the run once its lease and the grace after it have passed.
    let until = d["lease"]["lease_until"].as_u64().unwrap();
    let until = d["due_at"].as_u64().unwrap_or(until).max(until);
    assert!(
        d["lease"]["healthz"].as_str().unwrap().starts_with("unreachable"),
        "{d:#}"
    );
    assert_eq!(d["lease"]["registered"], true, "{d:#}");
    let at = savepoint_cli::render::timestamp(until);
    assert!(summary(&d).contains("its process does not answer /healthz"), "{d:#}");
    assert!(
        summary(&d).contains("No other live worker serves invoice v1 yet: the first one that starts"),
        "{d:#}"
    );
    assert_eq!(d["servers"], json!([]), "the dead holder serves nothing: {d:#}");
    assert!(
        summary(&d).contains(&format!("its grace have passed, at {at}")),
        "{d:#}"
    );
    // A new worker takes the run over once the lease has expired, not before.
    let _next = w.worker(WORKER, "next", "");
    let run = w.wait_status(&t, &["completed"], Duration::from_secs(60)).await;
    let (_, hist) = w.get(&format!("/v1/runs/{t}/history")).await;
    let takeover = hist["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "takeover")
        .unwrap_or_else(|| panic!("no takeover: {hist}"));
    assert!(
        takeover["at"].as_u64().unwrap() >= until,
        "taken over at the predicted time or later: {run}"
    );
    cleanup(&w.cfg).await;
}

#[tokio::test]
async fn no_worker_serving_the_runs_version_says_which_versions_are_served() {
    let w = World::new("dr-version", |_| {}).await;
    // The run is created at v1 while a registration serves v1…
    savepoint_integration_tests::register_test_workflow_version(&w.cfg, "invoice", 1).await;
    let t = w.start("invoice", json!({"invoice_id": "INV-V1"})).await;
    // …then v1 leaves the fleet and only a v2 build runs.
    w.store
        .deregister_worker("test-registration-invoice-v1")
        .await
        .expect("deregister");
    let _v2 = w.worker_env(WORKER, "v2", "", &[("IT_WORKFLOWS", "invoice@2:2")]);
    w.wait_registered("invoice").await;
    let d = diagnosed(&w, &t, "no_worker").await;
    assert!(
        summary(&d).contains("no live worker serves invoice v1 (live workers serve v2..=v2)"),
        "{d:#}"
    );
    assert_eq!(d["servers"], json!([]));
    assert!(
        d["actions"][0]["label"].as_str().unwrap().contains("serves invoice v1"),
        "{d:#}"
    );
    cleanup(&w.cfg).await;
}

#[tokio::test]
async fn an_effect_in_doubt_gives_both_resolve_commands_with_its_key() {
    let w = World::new("dr-doubt", |_| {}).await;
    // The second effect call (the email) is made, then the worker dies before recording it.
    let mut a = w.worker(WORKER, "a", "effect.after_call=abort@2");
    w.wait_registered("invoice").await;
    let t = w.start("invoice", json!({"invoice_id": "INV-DOUBT"})).await;
    assert!(killed_by_signal(&a.wait_exit(LONG).await));
    let _b = w.worker(WORKER, "b", "");
    let d = diagnosed(&w, &t, "blocked_in_doubt").await;
    // (The README's sample: `cargo test -p savepoint-integration-tests --features services --test services -- doctor::in_doubt --nocapture`.)
    println!("{}", savepoint_cli::render::diagnosis(&d));
    let key = format!("email:{t}");
    assert!(
        summary(&d).starts_with("Blocked until an operator acts: an effect's outcome is unknown"),
        "{d:#}"
    );
    assert_eq!(d["effects"][0]["key"], key, "{d:#}");
    assert_eq!(d["effects"][0]["role"], "blocked_on");
    assert_eq!(d["effects"][0]["state"], "intent", "{d:#}");
    let cmds = commands(&d);
    assert!(
        cmds.contains(&format!("savepoint resolve {t} {key} --applied true --result '<json>'")),
        "{cmds:?}"
    );
    assert!(
        cmds.contains(&format!("savepoint resolve {t} {key} --applied false")),
        "{cmds:?}"
    );
    assert!(cmds.contains(&format!("savepoint cancel {t} --reason '…'")), "{cmds:?}");
    cleanup(&w.cfg).await;
}

/// 1: step a, then the interrupt "gate". 2: step x first (a change that breaks replay).
struct Drift(u8);

impl Workflow for Drift {
    const NAME: &'static str = "drift";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let first = if self.0 == 1 { "a" } else { "x" };
        ctx.step(first, || async { Ok(1) }).await?;
        let v: Value = ctx.interrupt("gate", json!({})).await?;
        Ok(v)
    }
}

fn drift(v: u8) -> Registry {
    let mut r = Registry::new();
    r.register(Drift(v));
    r
}

#[tokio::test]
async fn non_determinism_says_to_deploy_the_recorded_path_then_retry() {
    let w = World::new("dr-nondet", |_| {}).await;
    let v1 = InProc::start(&w.cfg, drift(1));
    w.wait_registered("drift").await;
    let t = w.start("drift", json!(null)).await;
    w.wait_status(&t, &["waiting"], LONG).await;
    v1.stop().await;
    let v2 = InProc::start(&w.cfg, drift(2));
    let (code, body) = w.post(&format!("/v1/runs/{t}/resume"), json!({"value": "go"})).await;
    assert_eq!(code, 202, "{body}");
    let d = diagnosed(&w, &t, "blocked_non_determinism").await;
    assert!(
        summary(&d).contains("the workflow code no longer takes the path its journal recorded"),
        "{d:#}"
    );
    assert!(summary(&d).contains("non-determinism at entry 0"), "{d:#}");
    assert!(commands(&d).contains(&format!("savepoint retry {t}")), "{d:#}");
    assert!(
        d["actions"][0]["label"].as_str().unwrap().contains("ctx.patched"),
        "{d:#}"
    );
    v2.stop().await;
    cleanup(&w.cfg).await;
}

#[tokio::test]
async fn a_poison_run_names_the_step_and_the_workers_it_killed() {
    let w = World::new("dr-poison", |c| c.max_crashes = 2).await;
    let mut victim = w.worker(WORKER, "p0", "step.before_commit=abort");
    w.wait_registered("invoice").await;
    let t = w.start("invoice", json!({"invoice_id": "INV-POISON"})).await;
    let mut crashes = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while w.run(&t).await["status"] != "blocked" {
        assert!(
            std::time::Instant::now() < deadline,
            "not blocked after {crashes} crashes"
        );
        if !victim.is_running() {
            crashes += 1;
            victim = w.worker(WORKER, &format!("p{crashes}"), "step.before_commit=abort");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let d = diagnosed(&w, &t, "blocked_poison").await;
    assert!(
        summary(&d).contains("it is a poison run: every worker that ran this step died there"),
        "{d:#}"
    );
    assert!(summary(&d).contains("crashed 2 times at entry 0 (read_pdf)"), "{d:#}");
    assert!(evidence(&d).contains("workers that held it: p"), "{d:#}");
    assert!(commands(&d).contains(&format!("savepoint retry {t}")), "{d:#}");
    cleanup(&w.cfg).await;
}

#[tokio::test]
async fn an_unknown_run_is_404_and_a_bad_id_400() {
    let w = World::new("dr-404", |_| {}).await;
    let (code, body) = w.get("/v1/runs/nope-nothing-here/diagnosis").await;
    assert_eq!(
        (code, body["error"].as_str()),
        (404, Some("run nope-nothing-here not found"))
    );
    let (code, _) = w.get("/v1/runs/bad%20id/diagnosis").await;
    assert_eq!(code, 400);
    cleanup(&w.cfg).await;
}
