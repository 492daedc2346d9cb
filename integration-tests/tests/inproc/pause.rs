//! Pause and resume through the API (ARCHITECTURE §16b): a slice in flight finishes its call
//! and yields, the paused run starts nothing until it is resumed, and every call then runs
//! once; the API's answers for each level and each refusal. Run on whichever backend the tier
//! uses (real Redis with `services`).

use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use savepoint::workflow::{Ctx, Registry, RetryPolicy, StepError, Workflow, WorkflowError};
use savepoint_integration_tests::inproc::InProc;
use savepoint_integration_tests::scenario::World;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

const LONG: Duration = Duration::from_secs(60);

/// Each step's name and start, written down outside the engine.
type Started = Arc<Mutex<Vec<(String, Instant)>>>;

/// `steps` steps of `step_ms` each; every step start is written down outside the engine.
struct Slow {
    started: Started,
}

impl Workflow for Slow {
    const NAME: &'static str = "pause_slow";
    type Input = Value;
    type Output = u32;
    async fn run(&self, ctx: &Ctx, input: Value) -> Result<u32, WorkflowError> {
        let steps = input["steps"].as_u64().unwrap_or(3) as u32;
        let ms = input["step_ms"].as_u64().unwrap_or(10);
        for i in 0..steps {
            let started = Arc::clone(&self.started);
            ctx.step(&format!("s{i}"), move || {
                let started = Arc::clone(&started);
                async move {
                    started.lock().unwrap().push((format!("s{i}"), Instant::now()));
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Ok(i)
                }
            })
            .await?;
        }
        Ok(steps)
    }
}

fn registry() -> (Registry, Started) {
    let started = Arc::new(Mutex::new(Vec::new()));
    let mut reg = Registry::new();
    reg.register(Slow {
        started: Arc::clone(&started),
    });
    (reg, started)
}

fn count(started: &Mutex<Vec<(String, Instant)>>) -> usize {
    started.lock().unwrap().len()
}

#[tokio::test]
async fn a_slice_in_flight_finishes_its_call_yields_and_starts_nothing_until_unpaused() {
    let w = World::new("pzrun", |_| {}).await;
    let (reg, started) = registry();
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered(Slow::NAME).await;
    let t = w.start(Slow::NAME, json!({"steps": 6, "step_ms": 400})).await;
    let deadline = Instant::now() + LONG;
    while count(&started) < 2 {
        assert!(Instant::now() < deadline, "the run did not start");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (code, reply) = w
        .post(&format!("/v1/runs/{t}/pause"), json!({"note": "look first"}))
        .await;
    assert_eq!(code, 200, "{reply}");
    assert_eq!(reply["pause"]["by"], "anonymous", "{reply}");
    assert_eq!(reply["pause"]["note"], "look first", "{reply}");
    // The heartbeat (a third of the lease) finds the pause; the step under way finishes.
    let run = w.wait_status(&t, &["paused"], LONG).await;
    let at_stop = count(&started);
    assert!(at_stop < 6, "the run went on to its end: {at_stop} steps started");
    assert_eq!(run["pause"]["scope"], "run", "{run}");
    assert_eq!(run["pause"]["stopped"], true, "{run}");
    assert_eq!(run["pause"]["resumes_as"], "pending", "{run}");
    assert_eq!(run["at"]["kind"], "paused", "{run}");
    assert!(
        run["at"]["text"]
            .as_str()
            .unwrap_or("")
            .contains("its own pause, by anonymous: look first"),
        "{run}"
    );
    let (_, list) = w.get("/v1/runs?status=paused").await;
    assert_eq!(list["runs"][0]["thread_id"], t.as_str(), "{list}");
    // Stopped: nothing starts, whatever rings the run (a task, the scanner).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(count(&started), at_stop, "a step started while the run was paused");
    let (code, reply) = w.post(&format!("/v1/runs/{t}/unpause"), json!({"note": "ok"})).await;
    assert_eq!(code, 200, "{reply}");
    let run = w.wait_status(&t, &["completed", "failed", "blocked"], LONG).await;
    assert_eq!(run["status"], "completed", "{run}");
    // Every call ran once: the one in flight at the pause was journaled before the yield.
    let names: Vec<String> = started.lock().unwrap().iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(names, (0..6).map(|i| format!("s{i}")).collect::<Vec<_>>());
    let types = w.event_types(&t).await;
    let order: Vec<&str> = types
        .iter()
        .map(String::as_str)
        .filter(|e| ["paused", "yielded", "unpaused", "completed"].contains(e))
        .collect();
    assert_eq!(
        order,
        ["paused", "yielded", "paused", "unpaused", "completed"],
        "{types:?}"
    );
    wk.stop().await;
}

#[tokio::test]
async fn pause_requests_are_checked_and_answered() {
    let w = World::new("pzapi", |_| {}).await;
    let (reg, _) = registry();
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered(Slow::NAME).await;
    for (body, why) in [
        (json!({}), "exactly one"),
        (json!({"workflow": "a", "queue": "b"}), "exactly one"),
        (json!({"queue": "q", "version": 2}), "version goes with workflow"),
        (json!({"workflow": ""}), "1 to 256"),
        (json!({"workflow": "a", "version": 0}), "starts at 1"),
        (json!({"filter": {"limit": 0}}), "filter.limit"),
    ] {
        let (code, reply) = w.post("/v1/pauses", body.clone()).await;
        assert_eq!(code, 422, "{body}: {reply}");
        assert!(reply["error"].as_str().unwrap().contains(why), "{body}: {reply}");
    }
    let (code, reply) = w.post("/v1/pauses", json!({"workflow": "a", "hold_timers": 1})).await;
    assert!(code == 400 || code == 422, "{code} {reply}");
    // A filter must be an object: an array would read as the empty filter, every run (found by
    // schemathesis once its paths met real runs).
    for path in ["/v1/pauses", "/v1/pauses/resume"] {
        let (code, reply) = w.post(path, json!({"filter": []})).await;
        assert!(code == 400 || code == 422, "{path}: {code} {reply}");
        assert!(
            reply["error"].as_str().unwrap().contains("expected a JSON object"),
            "{reply}"
        );
    }
    let (code, reply) = w.post("/v1/pauses/resume", json!({"workflow": Slow::NAME})).await;
    assert_eq!(code, 404, "{reply}");
    let (code, reply) = w
        .post("/v1/pauses/resume", json!({"workflow": Slow::NAME, "to_version": 9}))
        .await;
    assert_eq!(code, 422, "{reply}");
    assert!(
        reply["error"].as_str().unwrap().contains("no live worker serves"),
        "{reply}"
    );
    // A workflow pause, listed; a run started under it is stopped at its first claim.
    let (code, reply) = w
        .post(
            "/v1/pauses",
            json!({"workflow": Slow::NAME, "note": "maintenance", "hold_timers": true}),
        )
        .await;
    assert_eq!(code, 200, "{reply}");
    assert_eq!(reply["pause"]["hold_timers"], true, "{reply}");
    let t = w.start(Slow::NAME, json!({"steps": 1})).await;
    let run = w.wait_status(&t, &["paused"], LONG).await;
    assert_eq!(run["pause"]["scope"], "workflow", "{run}");
    assert_eq!(run["pause"]["workflow"], Slow::NAME, "{run}");
    let (_, list) = w.get("/v1/pauses").await;
    assert_eq!(list["pauses"][0]["note"], "maintenance", "{list}");
    assert_eq!(list["paused_runs"], 1, "{list}");
    // Its own unpause cannot lift the workflow's pause.
    let (code, reply) = w.post(&format!("/v1/runs/{t}/unpause"), json!(null)).await;
    assert_eq!(code, 409, "{reply}");
    // A filter pause gives the run a pause of its own too; resuming the workflow then leaves
    // it held by that one, and resuming the filter puts it back.
    let filter = json!({"filter": {"workflow": Slow::NAME, "status": "paused"}});
    let (code, reply) = w.post("/v1/pauses", filter.clone()).await;
    assert_eq!((code, reply["runs"].as_u64()), (200, Some(1)), "{reply}");
    let (code, reply) = w.post("/v1/pauses/resume", json!({"workflow": Slow::NAME})).await;
    assert_eq!(code, 200, "{reply}");
    assert_eq!(
        (reply["resumed"].as_u64(), reply["still_held"].as_u64()),
        (Some(0), Some(1)),
        "{reply}"
    );
    let (code, reply) = w.post("/v1/pauses/resume", filter).await;
    assert_eq!((code, reply["resumed"].as_u64()), (200, Some(1)), "{reply}");
    let run = w.wait_status(&t, &["completed", "failed", "blocked"], LONG).await;
    assert_eq!(run["status"], "completed", "{run}");
    // Ended runs are not paused; unknown runs are 404.
    let (code, reply) = w.post(&format!("/v1/runs/{t}/pause"), json!(null)).await;
    assert_eq!(code, 409, "{reply}");
    let (code, _) = w.post("/v1/runs/no-such-run/pause", json!(null)).await;
    assert_eq!(code, 404);
    let (code, reply) = w.post(&format!("/v1/runs/{t}/pause"), json!({"to_version": 2})).await;
    assert_eq!(code, 400, "an unpause field on a pause is an unknown field: {reply}");
    wk.stop().await;
}

/// One step calling a provider that refuses while `down`: with the error class `quota` (the
/// input's `class`), which the policy pauses on at once, or retryable with no class, which
/// pauses the run once its three attempts are used up.
struct Flaky {
    down: Arc<AtomicBool>,
    tries: Arc<AtomicU32>,
    policy: RetryPolicy,
}

impl Workflow for Flaky {
    const NAME: &'static str = "pause_flaky";
    type Input = Value;
    type Output = u32;
    fn retry_policy(&self) -> RetryPolicy {
        self.policy.clone()
    }
    async fn run(&self, ctx: &Ctx, input: Value) -> Result<u32, WorkflowError> {
        let class = input["class"].as_str().map(str::to_owned);
        let n = ctx
            .step("call", || {
                let (down, tries, class) = (Arc::clone(&self.down), Arc::clone(&self.tries), class.clone());
                async move {
                    let n = tries.fetch_add(1, Ordering::SeqCst) + 1;
                    if down.load(Ordering::SeqCst) {
                        let e = StepError::retryable("the provider said no");
                        return Err(match class {
                            Some(c) => e.with_class(c),
                            None => e,
                        });
                    }
                    Ok(n)
                }
            })
            .await?;
        Ok(n)
    }
}

#[tokio::test]
async fn a_step_error_the_policy_names_pauses_the_run_until_an_operator_unpauses_it() {
    let w = World::new("pzcode", |_| {}).await;
    let (down, tries) = (Arc::new(AtomicBool::new(true)), Arc::new(AtomicU32::new(0)));
    let mut reg = Registry::new();
    reg.register(Flaky {
        down: Arc::clone(&down),
        tries: Arc::clone(&tries),
        policy: RetryPolicy {
            pause_on: vec!["quota".into()],
            pause_when_exhausted: true,
            initial: Duration::from_millis(10),
            ..RetryPolicy::attempts(3)
        },
    });
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered(Flaky::NAME).await;
    // A class the policy pauses on: no retry is burned. Then retries used up: three attempts.
    for (input, attempts, why) in [
        (json!({"class": "quota"}), 1, "(class quota)"),
        (json!({}), 3, "(3 attempts used up)"),
    ] {
        down.store(true, Ordering::SeqCst);
        tries.store(0, Ordering::SeqCst);
        let t = w.start(Flaky::NAME, input.clone()).await;
        let run = w
            .wait_status(&t, &["paused", "completed", "failed", "blocked"], LONG)
            .await;
        assert_eq!(run["status"], "paused", "{input}: {run}");
        assert_eq!(run["pause"]["by"], "workflow code", "{run}");
        assert_eq!(run["pause"]["scope"], "run", "{run}");
        // The note names the step and why, never the error's words (they may quote the
        // input); those are in the `retried` event, sealed like every payload.
        assert_eq!(run["pause"]["note"], format!("step \"call\" failed {why}"), "{run}");
        let said: Vec<String> = w
            .store
            .events(&t, 100)
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.typ == "retried")
            .map(|e| e.detail)
            .collect();
        assert!(said.iter().any(|d| d.contains("the provider said no")), "{said:?}");
        assert_eq!(run["step"], 0, "the failure is not journaled: {run}");
        assert_eq!(tries.load(Ordering::SeqCst), attempts, "{input}");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            tries.load(Ordering::SeqCst),
            attempts,
            "the step ran again while paused"
        );
        // The cause is fixed; the operator unpauses: the step runs again, with a fresh budget.
        down.store(false, Ordering::SeqCst);
        let (code, reply) = w
            .post(&format!("/v1/runs/{t}/unpause"), json!({"note": "key rotated"}))
            .await;
        assert_eq!(code, 200, "{reply}");
        let run = w.wait_status(&t, &["completed", "failed", "blocked"], LONG).await;
        assert_eq!(run["status"], "completed", "{run}");
        assert_eq!(run["output"], json!(attempts + 1), "{run}");
    }
    wk.stop().await;
}

#[tokio::test]
async fn a_step_waiting_to_retry_yields_to_a_pause_and_keeps_its_budget() {
    let w = World::new("pzretry", |_| {}).await;
    let (down, tries) = (Arc::new(AtomicBool::new(true)), Arc::new(AtomicU32::new(0)));
    let mut reg = Registry::new();
    reg.register(Flaky {
        down: Arc::clone(&down),
        tries: Arc::clone(&tries),
        policy: RetryPolicy {
            initial: Duration::from_millis(700),
            multiplier: 1.0,
            jitter: 0.0,
            ..RetryPolicy::attempts(20)
        },
    });
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered(Flaky::NAME).await;
    let t = w.start(Flaky::NAME, json!({})).await;
    let deadline = Instant::now() + LONG;
    while tries.load(Ordering::SeqCst) < 1 {
        assert!(Instant::now() < deadline, "the step never ran");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (code, reply) = w.post(&format!("/v1/runs/{t}/pause"), json!(null)).await;
    assert_eq!(code, 200, "{reply}");
    // The heartbeat finds the pause within a second; the step waiting to retry yields then,
    // instead of using its twenty attempts against the provider.
    let run = w.wait_status(&t, &["paused", "completed", "failed"], LONG).await;
    assert_eq!(run["status"], "paused", "{run}");
    let before = tries.load(Ordering::SeqCst);
    assert!(before <= 4, "{before} attempts made while the run was being paused");
    down.store(false, Ordering::SeqCst);
    let (code, reply) = w.post(&format!("/v1/runs/{t}/unpause"), json!(null)).await;
    assert_eq!(code, 200, "{reply}");
    let run = w.wait_status(&t, &["completed", "failed", "blocked"], LONG).await;
    assert_eq!(run["status"], "completed", "{run}");
    // The budget went on where it stopped: the next attempt was the one after the last.
    assert_eq!(run["output"], json!(before + 1), "{run}");
    let (_, hist) = w.get(&format!("/v1/runs/{t}/history")).await;
    assert_eq!(hist["entries"][0]["attempts"], json!(before + 1), "{hist}");
    wk.stop().await;
}

/// A registration as a worker of another build writes it: `paced` (from `d84b766`, the
/// upgrade policy's floor) adds the pace fields, which a build from before pauses lacks; no
/// build before this one writes `capabilities`.
fn older_registration(queue: &str, paced: bool) -> String {
    older_serving(Slow::NAME, queue, paced)
}

/// [`older_registration`] of a worker serving `workflow`.
fn older_serving(workflow: &str, queue: &str, paced: bool) -> String {
    let mut r = json!({
        "workflows": [{"name": workflow, "version": 1, "min_version": 1}],
        "queue": queue, "ttl_ms": 3_600_000, "host": "old-host", "pid": 7, "started_at": 0,
        "concurrency": 4, "in_flight": 0, "steps": 0,
    });
    if paced {
        r["slices"] = json!(0);
        r["slices_per_sec"] = json!(0.0);
    }
    r.to_string()
}

/// A pause holds only as far as the fleet's claims know it: a worker of a build from before
/// pauses claims the runs it holds, even stopped ones (issue 49 §1.5). While one is live
/// (registered as that build registers), every pause request is refused and names it, and
/// nothing is written; `force` pauses anyway and names it in the answer. A worker of the
/// policy's floor, which registers its pace but no capabilities, keeps pauses: no refusal.
#[tokio::test]
async fn a_pause_is_refused_while_a_live_worker_would_not_honour_it() {
    let w = World::new("pzold", |_| {}).await;
    let (reg, _) = registry();
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered(Slow::NAME).await;
    let t = w.start(Slow::NAME, json!({"steps": 400, "step_ms": 50})).await;
    let hour = Duration::from_secs(3600);
    let (_, fleet) = w.get("/v1/workers").await;
    assert_eq!(fleet["workers"][0]["capabilities"], json!(["pause"]), "{fleet}");

    // The floor's worker keeps pauses: taken, nobody named.
    w.store
        .register_raw("floor-w", &older_registration(&w.cfg.queue, true), hour)
        .await
        .unwrap();
    let (code, reply) = w.post("/v1/pauses", json!({"workflow": Slow::NAME})).await;
    assert_eq!(code, 200, "{reply}");
    assert!(reply.get("unenforced_by").is_none(), "{reply}");
    let (code, reply) = w.post("/v1/pauses/resume", json!({"workflow": Slow::NAME})).await;
    assert_eq!(code, 200, "{reply}");

    // A worker from before pauses that serves another workflow on another queue claims none
    // of the runs: no refusal.
    w.store
        .register_raw("elsewhere-w", &older_serving("another", "elsewhere", false), hour)
        .await
        .unwrap();
    let (code, reply) = w.post("/v1/pauses", json!({"workflow": Slow::NAME})).await;
    assert_eq!(code, 200, "{reply}");
    let (_, list) = w.get("/v1/pauses").await;
    assert_eq!(
        list["unenforced_by"],
        json!(["elsewhere-w (old-host pid 7)"]),
        "while a pause holds, the list names every live worker that does not keep pauses: {list}"
    );
    let (code, reply) = w.post("/v1/pauses/resume", json!({"workflow": Slow::NAME})).await;
    assert_eq!(code, 200, "{reply}");
    w.store.deregister_worker("elsewhere-w").await.unwrap();
    // A pause of a run that does not exist is a 404 whoever is live.
    let missing = format!("/v1/runs/{}-00000000000000000000000000000000/pause", Slow::NAME);

    // A worker from before pauses: every kind of pause is refused, naming it.
    w.store
        .register_raw("old-w", &older_registration(&w.cfg.queue, false), hour)
        .await
        .unwrap();
    let (_, fleet) = w.get("/v1/workers").await;
    let caps = |id: &str| {
        fleet["workers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["id"] == id)
            .map(|x| x["capabilities"].clone())
    };
    assert_eq!(caps("floor-w"), Some(json!(["pause"])), "{fleet}");
    assert_eq!(caps("old-w"), Some(json!([])), "{fleet}");
    for (path, body) in [
        ("/v1/pauses".to_owned(), json!({"workflow": Slow::NAME})),
        ("/v1/pauses".to_owned(), json!({"workflow": Slow::NAME, "version": 1})),
        ("/v1/pauses".to_owned(), json!({"queue": w.cfg.queue})),
        ("/v1/pauses".to_owned(), json!({"filter": {"workflow": Slow::NAME}})),
        (format!("/v1/runs/{t}/pause"), json!({"note": "look"})),
    ] {
        let (code, reply) = w.post(&path, body.clone()).await;
        assert_eq!(code, 409, "{path} {body}: {reply}");
        let e = reply["error"].as_str().unwrap();
        assert!(e.contains("old-w (old-host pid 7)") && e.contains("force"), "{e}");
        assert!(!e.contains("floor-w"), "{e}");
    }
    let (code, reply) = w.post(&missing, json!({})).await;
    assert_eq!(code, 404, "{reply}");
    let (_, pauses) = w.get("/v1/pauses").await;
    assert_eq!(pauses["pauses"], json!([]), "a refused pause wrote nothing: {pauses}");
    let (_, run) = w.get(&format!("/v1/runs/{t}")).await;
    assert!(run.get("pause").is_none(), "{run}");

    // Forced: written, and the answer names who may not honour it.
    let (code, reply) = w
        .post("/v1/pauses", json!({"workflow": Slow::NAME, "force": true}))
        .await;
    assert_eq!(code, 200, "{reply}");
    assert_eq!(reply["unenforced_by"], json!(["old-w (old-host pid 7)"]), "{reply}");
    let (code, reply) = w.post(&format!("/v1/runs/{t}/pause"), json!({"force": true})).await;
    assert_eq!(code, 200, "{reply}");
    assert_eq!(reply["unenforced_by"], json!(["old-w (old-host pid 7)"]), "{reply}");
    w.wait_status(&t, &["paused"], LONG).await;

    // Gone from the fleet: no refusal. A registration no build wrote (unreadable) cannot
    // vouch for pauses: refused.
    w.store.deregister_worker("old-w").await.unwrap();
    w.store.register_raw("odd-w", "not json{", hour).await.unwrap();
    let (code, reply) = w.post("/v1/pauses", json!({"queue": w.cfg.queue})).await;
    assert_eq!(code, 409, "{reply}");
    assert!(reply["error"].as_str().unwrap().contains("odd-w"), "{reply}");
    w.store.deregister_worker("odd-w").await.unwrap();
    let (code, reply) = w.post("/v1/pauses", json!({"queue": w.cfg.queue})).await;
    assert_eq!(code, 200, "{reply}");
    assert!(reply.get("unenforced_by").is_none(), "{reply}");
    w.store.deregister_worker("floor-w").await.unwrap();
    wk.stop().await;
}
