//! Fork and restart (issue 10, time travel) against real RabbitMQ and Redis: a fork replays
//! the source's first N entries and performs an effect after N only under a new key; a restart
//! re-runs a failed run in place from entry N; a scheduler killed between the fork (or the
//! restart) and its publish loses nothing.

use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use savepoint::workflow::{Ctx, Registry, StepError, Workflow, WorkflowError};
use savepoint_core::ids::ThreadId;
use savepoint_integration_tests::cleanup;
use savepoint_integration_tests::inproc::InProc;
use savepoint_integration_tests::procs::{killed_by_signal, Proc};
use savepoint_integration_tests::scenario::World;

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");
const SCHEDULER: &str = env!("CARGO_BIN_EXE_it-scheduler");
const LONG: Duration = Duration::from_secs(30);

fn tid(s: &str) -> ThreadId {
    ThreadId::new(s.to_owned()).unwrap()
}

async fn history(w: &World, t: &ThreadId) -> Value {
    let (code, body) = w.get(&format!("/v1/runs/{t}/history")).await;
    assert_eq!(code, 200, "{body}");
    body
}

/// A scheduler process with these failpoints, once it is ready.
async fn scheduler_proc(w: &World, failpoints: &str) -> (Proc, String) {
    let mut cfg = w.cfg.clone();
    cfg.failpoints = failpoints.to_owned();
    w.scheduler_proc(SCHEDULER, "sched-victim", &cfg).await
}

fn count(counts: &std::collections::BTreeMap<String, usize>, key: &str) -> usize {
    counts.get(key).copied().unwrap_or(0)
}

/// `invoice` (read_pdf, extract_totals, effect ledger:<invoice id>, effect email:<thread>),
/// run by a worker process. Forked from entry 2 the ledger key is the source's (settled: not
/// posted again) and the email key is the fork's own (sent again); forked from entry 4 the
/// whole journal replays and nothing is performed.
#[tokio::test]
async fn a_fork_replays_its_first_entries_and_performs_only_effects_under_new_keys() {
    let w = World::new("lnfork", |_| {}).await;
    let mut wk = w.worker(WORKER, "w1", "");
    w.wait_registered("invoice").await;
    let src = tid("inv-src");
    let (code, body) = w
        .post(
            "/v1/runs",
            json!({"workflow": "invoice", "thread_id": src.as_str(), "input": {"invoice_id": "INV-F"}}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let done = w.wait_status(&src, &["completed", "failed", "blocked"], LONG).await;
    assert_eq!(done["status"], "completed", "{done}");
    let before = w.effect_counts().await;
    assert_eq!(count(&before, "ledger:INV-F"), 1, "{before:?}");
    assert_eq!(count(&before, "email:inv-src"), 1, "{before:?}");

    // From entry 2: the effects run again under the code's keys.
    let (code, body) = w
        .post(
            &format!("/v1/runs/{src}/fork"),
            json!({"from_step": 2, "thread_id": "inv-fork-2"}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        body["forked_from"],
        json!({"thread_id": "inv-src", "from_step": 2}),
        "{body}"
    );
    let fork = tid("inv-fork-2");
    let run = w.wait_status(&fork, &["completed", "failed", "blocked"], LONG).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["output"], done["output"], "{run}");
    assert_eq!(
        run["forked_from"],
        json!({"thread_id": "inv-src", "from_step": 2}),
        "{run}"
    );
    let after = w.effect_counts().await;
    assert_eq!(
        count(&after, "ledger:INV-F"),
        1,
        "a settled key is not performed again: {after:?}"
    );
    assert_eq!(
        count(&after, "email:inv-fork-2"),
        1,
        "a new key is performed: {after:?}"
    );
    assert_eq!(count(&after, "email:inv-src"), 1, "{after:?}");
    let entries = &history(&w, &fork).await["entries"];
    assert_eq!(entries.as_array().map(Vec::len), Some(4), "{entries}");

    // From entry 4: nothing runs again.
    let (code, body) = w
        .post(
            &format!("/v1/runs/{src}/fork"),
            json!({"from_step": 4, "thread_id": "inv-fork-4"}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let run = w
        .wait_status(&tid("inv-fork-4"), &["completed", "failed", "blocked"], LONG)
        .await;
    assert_eq!(run["output"], done["output"], "{run}");
    assert_eq!(w.effect_counts().await, after, "a full replay performs nothing");

    // The same fork again is the same run; the id under another entry is a conflict.
    let (code, body) = w
        .post(
            &format!("/v1/runs/{src}/fork"),
            json!({"from_step": 2, "thread_id": "inv-fork-2"}),
        )
        .await;
    assert_eq!((code, &body["status"]), (200, &json!("completed")), "{body}");
    let (code, body) = w
        .post(
            &format!("/v1/runs/{src}/fork"),
            json!({"from_step": 1, "thread_id": "inv-fork-2"}),
        )
        .await;
    assert_eq!(code, 409, "{body}");
    let (code, body) = w.post(&format!("/v1/runs/{src}/fork"), json!({"from_step": 5})).await;
    assert_eq!(code, 422, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("which has 4 entries"),
        "{body}"
    );
    let (code, _) = w.post("/v1/runs/no-such-run/fork", json!({"from_step": 0})).await;
    assert_eq!(code, 404);
    // A generated id, and the lineage in the source's log.
    let (code, body) = w.post(&format!("/v1/runs/{src}/fork"), json!({"from_step": 0})).await;
    assert_eq!(code, 201, "{body}");
    assert!(
        body["thread_id"].as_str().unwrap().starts_with("invoice-fork"),
        "{body}"
    );
    let forked: Vec<String> = history(&w, &src).await["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "forked")
        .map(|e| e["detail"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(forked.len(), 3, "{forked:?}");
    assert_eq!(forked[0], "inv-fork-2 from entry 2");
    w.wait_status(&tid(body["thread_id"].as_str().unwrap()), &["completed"], LONG)
        .await;
    wk.signal("TERM");
    wk.wait_exit(LONG).await;
    cleanup(&w.cfg).await;
}

/// `load` (a step), `charge` (an effect under `charge:<id>`), `ship` (fails for good until
/// the fix is in).
struct Fragile {
    fixed: Arc<AtomicBool>,
    load: Arc<AtomicU32>,
    charge: Arc<AtomicU32>,
    ship: Arc<AtomicU32>,
}

impl Workflow for Fragile {
    const NAME: &'static str = "fragile";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        let load = self.load.clone();
        let n: u32 = ctx
            .step("load", || {
                let load = load.clone();
                async move { Ok(load.fetch_add(1, Ordering::SeqCst) + 1) }
            })
            .await?;
        let charge = self.charge.clone();
        let key = format!("charge:{}", input["id"].as_str().unwrap_or("?"));
        let c: u32 = ctx
            .effect("charge", key, |_fx| {
                let charge = charge.clone();
                async move { Ok(charge.fetch_add(1, Ordering::SeqCst) + 1) }
            })
            .await?;
        let (fixed, ship) = (self.fixed.clone(), self.ship.clone());
        let s: String = ctx
            .step("ship", || {
                let (fixed, ship) = (fixed.clone(), ship.clone());
                async move {
                    ship.fetch_add(1, Ordering::SeqCst);
                    if fixed.load(Ordering::SeqCst) {
                        Ok("shipped".to_owned())
                    } else {
                        Err(StepError::fatal("the carrier API rejects the label"))
                    }
                }
            })
            .await?;
        Ok(json!({"load": n, "charge": c, "ship": s}))
    }
}

#[tokio::test]
async fn a_failed_run_restarted_in_place_keeps_its_earlier_entries_and_effects() {
    let w = World::new("lnrestart", |_| {}).await;
    let fixed = Arc::new(AtomicBool::new(false));
    let (load, charge, ship) = (Arc::default(), Arc::default(), Arc::<AtomicU32>::default());
    let mut reg = Registry::new();
    reg.register(Fragile {
        fixed: fixed.clone(),
        load: Arc::clone(&load),
        charge: Arc::clone(&charge),
        ship: Arc::clone(&ship),
    });
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered("fragile").await;
    let t = w.start("fragile", json!({"id": "o-1"})).await;
    let run = w.wait_status(&t, &["failed", "completed", "blocked"], LONG).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["step"], 3, "the failed step's error is journaled: {run}");

    // Not restartable while running or completed; the entry must be in the journal.
    let (code, body) = w.post(&format!("/v1/runs/{t}/restart"), json!({"from_step": 4})).await;
    assert_eq!(code, 422, "{body}");
    let (code, body) = w.post(&format!("/v1/runs/{t}/restart"), json!({"from_step": -1})).await;
    assert_eq!(code, 400, "{body}");

    fixed.store(true, Ordering::SeqCst);
    let (code, body) = w.post(&format!("/v1/runs/{t}/restart"), json!({"from_step": 2})).await;
    assert_eq!(code, 202, "{body}");
    let run = w.wait_status(&t, &["completed", "failed", "blocked"], LONG).await;
    assert_eq!(
        run["output"],
        json!({"load": 1, "charge": 1, "ship": "shipped"}),
        "{run}"
    );
    assert_eq!(
        (
            load.load(Ordering::SeqCst),
            charge.load(Ordering::SeqCst),
            ship.load(Ordering::SeqCst)
        ),
        (1, 1, 2),
        "only the step after entry 2 ran again"
    );
    assert_eq!(
        (run["restarts"].as_u64(), run["restarted_from"].as_u64()),
        (Some(1), Some(2)),
        "{run}"
    );
    assert!(run.get("error").is_none() && run.get("finished_at").is_some(), "{run}");
    let (code, body) = w.post(&format!("/v1/runs/{t}/restart"), json!({"from_step": 0})).await;
    assert_eq!(code, 409, "a completed run is forked, not restarted: {body}");

    // A restart from the top runs the effect again under the same key: settled, not repeated.
    fixed.store(false, Ordering::SeqCst);
    let u = w.start("fragile", json!({"id": "o-2"})).await;
    w.wait_status(&u, &["failed"], LONG).await;
    fixed.store(true, Ordering::SeqCst);
    let (code, body) = w.post(&format!("/v1/runs/{u}/restart"), json!({"from_step": 0})).await;
    assert_eq!(code, 202, "{body}");
    let run = w.wait_status(&u, &["completed", "failed", "blocked"], LONG).await;
    assert_eq!(run["output"]["charge"], 2, "the recorded result of charge:o-2: {run}");
    assert_eq!(charge.load(Ordering::SeqCst), 2, "charge:o-2 was performed once");
    let events: Vec<Value> = history(&w, &u).await["events"].as_array().unwrap().clone();
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "restarted" && e["detail"].as_str().unwrap().starts_with("from entry 0 (was failed)")),
        "{events:?}"
    );
    wk.stop().await;
    cleanup(&w.cfg).await;
}

/// A scheduler process SIGKILLed by `scheduler.before_publish=kill@1` after the fork's
/// script (and, for the second, the restart's) but before its task was published: the
/// surviving scheduler's nets start the run anyway, and it completes once.
#[tokio::test]
async fn a_scheduler_killed_between_fork_or_restart_and_publish_loses_nothing() {
    let w = World::new("lncrash", |_| {}).await;
    let mut wk = w.worker(WORKER, "w1", "");
    w.wait_registered("invoice").await;
    let src = tid("inv-crash");
    let (code, body) = w
        .post(
            "/v1/runs",
            json!({"workflow": "invoice", "thread_id": src.as_str(), "input": {"invoice_id": "INV-K"}}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let done = w.wait_status(&src, &["completed"], LONG).await;

    let (mut victim, base) = scheduler_proc(&w, "scheduler.before_publish=kill@1").await;
    let r = w
        .http
        .post(format!("{base}/v1/runs/{src}/fork"))
        .json(&json!({"from_step": 2, "thread_id": "inv-crash-fork"}))
        .send()
        .await;
    assert!(
        r.is_err() || !r.unwrap().status().is_success(),
        "it should have died first"
    );
    assert!(killed_by_signal(&victim.wait_exit(LONG).await));
    let fork = tid("inv-crash-fork");
    let run = w.wait_status(&fork, &["completed", "failed", "blocked"], LONG).await;
    assert_eq!(run["output"], done["output"], "{run}");
    let counts = w.effect_counts().await;
    assert_eq!(count(&counts, "ledger:INV-K"), 1, "{counts:?}");
    assert_eq!(count(&counts, "email:inv-crash-fork"), 1, "{counts:?}");

    // A restart, same failpoint: a run that failed reading its PDF, restarted from the top
    // once the file is there.
    let dir = std::env::temp_dir().join(format!("sp-lineage-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pdf = dir.join("inv-r.txt");
    let _ = std::fs::remove_file(&pdf);
    let r = tid("inv-crash-r");
    let input = json!({"invoice_id": "INV-R", "pdf_path": pdf.to_str().unwrap()});
    let (code, body) = w
        .post(
            "/v1/runs",
            json!({"workflow": "invoice", "thread_id": r.as_str(), "input": input}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let run = w.wait_status(&r, &["failed", "completed", "blocked"], LONG).await;
    assert_eq!(run["status"], "failed", "{run}");
    std::fs::write(&pdf, "Invoice INV-R\nconsulting 10.00 EUR\n").unwrap();
    let (mut victim, base) = scheduler_proc(&w, "scheduler.before_publish=kill@1").await;
    let resp = w
        .http
        .post(format!("{base}/v1/runs/{r}/restart"))
        .json(&json!({"from_step": 0}))
        .send()
        .await;
    assert!(
        resp.is_err() || !resp.unwrap().status().is_success(),
        "it should have died first"
    );
    assert!(killed_by_signal(&victim.wait_exit(LONG).await));
    let run = w.wait_status(&r, &["completed", "failed", "blocked"], LONG).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["output"]["total_cents"], 1000, "{run}");
    assert_eq!(run["restarts"], 1, "{run}");
    let counts = w.effect_counts().await;
    assert_eq!(count(&counts, "ledger:INV-R"), 1, "{counts:?}");
    assert_eq!(count(&counts, "email:inv-crash-r"), 1, "{counts:?}");
    let _ = std::fs::remove_dir_all(&dir);
    wk.signal("TERM");
    wk.wait_exit(LONG).await;
    cleanup(&w.cfg).await;
}

/// The operator's word: a fork with `rerun_effects` performs a key the source settled once
/// more (and only that key); a key not recorded at or after the entry is a 422.
#[tokio::test]
async fn a_fork_with_rerun_effects_performs_a_settled_key_again_on_the_operators_word() {
    let w = World::new("lnrerun", |_| {}).await;
    let mut wk = w.worker(WORKER, "w1", "");
    w.wait_registered("invoice").await;
    let src = tid("inv-rr");
    let (code, body) = w
        .post(
            "/v1/runs",
            json!({"workflow": "invoice", "thread_id": src.as_str(), "input": {"invoice_id": "INV-RR"}}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let done = w.wait_status(&src, &["completed", "failed", "blocked"], LONG).await;
    assert_eq!(done["status"], "completed", "{done}");
    // A key the source recorded before the entry, or never: refused, nothing forked.
    let (code, body) = w
        .post(
            &format!("/v1/runs/{src}/fork"),
            json!({"from_step": 2, "thread_id": "inv-rr-bad", "rerun_effects": ["email:nope"]}),
        )
        .await;
    assert_eq!(code, 422, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("not the key of an effect"),
        "{body}"
    );
    assert!(w.store.header(&tid("inv-rr-bad")).await.unwrap().is_none());
    let (code, body) = w
        .post(
            &format!("/v1/runs/{src}/fork"),
            json!({"from_step": 2, "thread_id": "inv-rr-2", "rerun_effects": ["ledger:INV-RR"]}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let run = w
        .wait_status(&tid("inv-rr-2"), &["completed", "failed", "blocked"], LONG)
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    let counts = w.effect_counts().await;
    assert_eq!(
        count(&counts, "ledger:INV-RR"),
        2,
        "performed again, as asked: {counts:?}"
    );
    assert_eq!(count(&counts, "email:inv-rr"), 1, "{counts:?}");
    assert_eq!(count(&counts, "email:inv-rr-2"), 1, "{counts:?}");
    let types = w.event_types(&tid("inv-rr-2")).await;
    assert!(types.iter().any(|e| e == "effects_rerun"), "{types:?}");
    wk.signal("TERM");
    wk.wait_exit(Duration::from_secs(30)).await;
    cleanup(&w.cfg).await;
}

/// The fork's run may start (at its due time) before the request that wrote it goes on: here
/// the scheduler process answering the fork pauses 6 s right after writing it
/// (`lineage.after_create`), while the other scheduler's scanner starts the fork after the
/// 2 s redelivery delay. The key the operator named is performed again all the same, because
/// its record was freed before the fork was written (issue 24, mend: before, it was freed
/// after, and the fork that had started meanwhile returned the recorded result).
#[tokio::test]
async fn a_fork_that_starts_before_its_request_ends_still_performs_the_named_key_again() {
    let w = World::new("lnrace", |_| {}).await;
    let mut wk = w.worker(WORKER, "w1", "");
    w.wait_registered("invoice").await;
    let src = tid("inv-race");
    let (code, body) = w
        .post(
            "/v1/runs",
            json!({"workflow": "invoice", "thread_id": src.as_str(), "input": {"invoice_id": "INV-RACE"}}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let done = w.wait_status(&src, &["completed", "failed", "blocked"], LONG).await;
    assert_eq!(done["status"], "completed", "{done}");
    let (mut sched, base) = scheduler_proc(&w, "lineage.after_create=pause(6000)").await;
    let fork = tid("inv-race-2");
    let resp = w
        .http
        .post(format!("{base}/v1/runs/{src}/fork"))
        .json(&json!({"from_step": 2, "thread_id": fork.as_str(), "rerun_effects": ["ledger:INV-RACE"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    // The fork ran while its request was paused.
    let header = w.store.header(&fork).await.unwrap().expect("the fork exists");
    assert!(
        header.status.is_final(),
        "the fork ended during the pause: {:?}",
        header.status
    );
    let run = w.wait_status(&fork, &["completed", "failed", "blocked"], LONG).await;
    assert_eq!(run["status"], "completed", "{run}");
    let counts = w.effect_counts().await;
    assert_eq!(
        count(&counts, "ledger:INV-RACE"),
        2,
        "performed again, as asked: {counts:?}"
    );
    sched.signal("TERM");
    sched.wait_exit(LONG).await;
    wk.signal("TERM");
    wk.wait_exit(LONG).await;
    cleanup(&w.cfg).await;
}

/// A fork shares its source's flow limit and priority (issue 24, mend): before, it silently
/// ran outside the key's limit at the default priority. It takes no deadline from the source
/// (an absolute time that may have passed).
#[tokio::test]
async fn a_fork_keeps_the_flow_key_and_priority_and_takes_no_deadline() {
    let w = World::new("lnflow", |_| {}).await;
    let mut wk = w.worker(WORKER, "w1", "");
    w.wait_registered("metered").await;
    let src = tid("met-src");
    let (code, body) = w
        .post(
            "/v1/runs",
            json!({"workflow": "metered", "thread_id": src.as_str(),
                "input": {"customer": "acme", "steps": 1, "step_ms": 1},
                "flow": {"key_from": "/customer", "limit": 2, "rate_per_sec": 50}, "priority": 5, "timeout_secs": 3600}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    w.wait_status(&src, &["completed"], LONG).await;
    let (code, body) = w
        .post(
            &format!("/v1/runs/{src}/fork"),
            json!({"from_step": 0, "thread_id": "met-fork"}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let source = w.store.header(&src).await.unwrap().unwrap();
    let fork = w.store.header(&tid("met-fork")).await.unwrap().unwrap();
    assert_eq!(
        fork.flow, source.flow,
        "the fork shares the source's flow key and limit"
    );
    assert_eq!(fork.flow.as_ref().map(|f| f.key.as_str()), Some("metered:acme"));
    assert_eq!((fork.priority, source.priority), (5, 5));
    assert!(
        source.deadline.is_some() && fork.deadline.is_none(),
        "{:?}",
        fork.deadline
    );
    w.wait_status(&tid("met-fork"), &["completed"], LONG).await;
    wk.signal("TERM");
    wk.wait_exit(LONG).await;
    cleanup(&w.cfg).await;
}
