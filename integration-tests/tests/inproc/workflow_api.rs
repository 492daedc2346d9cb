//! The workflow API end to end with in-process workers and purpose-built workflows:
//! durable timers, recorded values, retries and compensation, signals, non-determinism,
//! `patched`, version checks, the journal limit, heartbeats and cancellation mid-step.

use serde_json::{json, Value};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use savepoint::workflow::{Ctx, Registry, RetryPolicy, StepError, Workflow, WorkflowError};
use savepoint_core::ids::ThreadId;
use savepoint_integration_tests::inproc::InProc;
use savepoint_integration_tests::scenario::World;
use savepoint_worker::replay::{replay, ReplayReport};

const LONG: Duration = Duration::from_secs(30);

/// step → durable sleep → recorded now and uuid.
struct Timer;
impl Workflow for Timer {
    const NAME: &'static str = "timer";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let _: u32 = ctx.step("before", || async { Ok(1) }).await?;
        ctx.sleep("nap", Duration::from_millis(400)).await?;
        let now = ctx.now().await?;
        let id = ctx.uuid().await?;
        let now_ms = now
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Ok(json!({"now": now_ms, "uuid": id.to_string()}))
    }
}

#[tokio::test]
async fn durable_timer_and_recorded_values() {
    let w = World::new("wt", |_| {}).await;
    let mut reg = Registry::new();
    reg.register(Timer);
    let wk = InProc::start(&w.cfg, reg.clone());
    w.wait_registered("timer").await;
    let t = w.start("timer", json!(null)).await;
    let sleeping = w.wait_status(&t, &["sleeping"], LONG).await;
    assert!(sleeping["due_at"].as_u64().is_some(), "{sleeping}");
    assert_eq!(sleeping["step"], 2);
    // Where it is: in the sleep at entry 1 (two entries recorded), with its wake time.
    assert_eq!(sleeping["at"]["entry"], 1, "{sleeping}");
    assert_eq!(sleeping["at"]["name"], "nap", "{sleeping}");
    assert_eq!(sleeping["at"]["wake_at"], sleeping["due_at"], "{sleeping}");
    assert!(sleeping.get("finished_at").is_none(), "{sleeping}");
    let done = w.wait_status(&t, &["completed"], LONG).await;
    assert_eq!(done["step"], 4);
    // Replay sees the recorded time and uuid, not fresh ones.
    let report = replay(&w.store, &reg, &t).await.unwrap();
    assert_eq!(report, ReplayReport::Finished(Ok(done["output"].clone())));
    wk.stop().await;
}

/// Retries with backoff; a final failure is journaled and returned so the code compensates.
struct Saga {
    flaky_calls: Arc<AtomicU32>,
    doomed_calls: Arc<AtomicU32>,
}
impl Workflow for Saga {
    const NAME: &'static str = "saga";
    type Input = Value;
    type Output = Value;
    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            initial: Duration::from_millis(20),
            ..RetryPolicy::attempts(4)
        }
    }
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let flaky = self.flaky_calls.clone();
        let n: u32 = ctx
            .step("flaky", || {
                let flaky = flaky.clone();
                async move {
                    let n = flaky.fetch_add(1, Ordering::SeqCst) + 1;
                    if n < 3 {
                        Err(StepError::retryable(format!("transient failure {n}")))
                    } else {
                        Ok(n)
                    }
                }
            })
            .await?;
        let doomed = self.doomed_calls.clone();
        let r: Result<u32, WorkflowError> = ctx
            .step("charge", || {
                let doomed = doomed.clone();
                async move {
                    doomed.fetch_add(1, Ordering::SeqCst);
                    Err::<u32, _>(StepError::fatal("card declined"))
                }
            })
            .await;
        let err = r.expect_err("charge always fails");
        let undo: String = ctx.step("compensate", || async { Ok("refunded".to_owned()) }).await?;
        Ok(json!({"flaky": n, "error": err.to_string(), "undo": undo}))
    }
}

#[tokio::test]
async fn retries_then_final_failure_is_returned_for_compensation() {
    let w = World::new("wr", |_| {}).await;
    let (flaky, doomed) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let mut reg = Registry::new();
    reg.register(Saga {
        flaky_calls: flaky.clone(),
        doomed_calls: doomed.clone(),
    });
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered("saga").await;
    let t = w.start("saga", json!(null)).await;
    let run = w.wait_status(&t, &["completed"], LONG).await;
    assert_eq!(run["output"]["flaky"], 3);
    assert_eq!(run["output"]["undo"], "refunded");
    assert!(run["output"]["error"].as_str().unwrap().contains("card declined"));
    assert_eq!(
        (flaky.load(Ordering::SeqCst), doomed.load(Ordering::SeqCst)),
        (3, 1),
        "fatal errors are not retried"
    );
    let (_, hist) = w.get(&format!("/v1/runs/{t}/history")).await;
    assert_eq!(hist["entries"][0]["attempts"], 3);
    assert_eq!(hist["entries"][1]["outcome"], "error");
    let retried = w.event_types(&t).await.iter().filter(|e| *e == "retried").count();
    assert_eq!(retried, 2);
    wk.stop().await;
}

/// Two signals, sent before the run asks for them, are delivered in order.
struct Signals;
impl Workflow for Signals {
    const NAME: &'static str = "signals";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let gate: Value = ctx
            .interrupt("ready", json!({"why": "let the test send signals first"}))
            .await?;
        let a: Value = ctx.wait_signal("go").await?;
        let b: Value = ctx.wait_signal("go").await?;
        let c: Value = ctx.wait_signal("late").await?;
        Ok(json!([gate, a, b, c]))
    }
}

#[tokio::test]
async fn signals_are_buffered_in_order_and_wake_waiting_runs() {
    let w = World::new("ws", |_| {}).await;
    let mut reg = Registry::new();
    reg.register(Signals);
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered("signals").await;
    let t = w.start("signals", json!(null)).await;
    w.wait_status(&t, &["waiting"], LONG).await;
    for v in [1, 2] {
        let (code, body) = w.post(&format!("/v1/runs/{t}/signals/go"), json!({"value": v})).await;
        assert_eq!(code, 202, "{body}");
    }
    w.post(&format!("/v1/runs/{t}/resume"), json!({"value": "ok"})).await;
    let run = w.wait_status(&t, &["waiting"], LONG).await;
    assert_eq!(run["next"], json!(["late"]), "{run}");
    let (code, _) = w.post(&format!("/v1/runs/{t}/signals/late"), json!({"value": 3})).await;
    assert_eq!(code, 202);
    let run = w.wait_status(&t, &["completed"], LONG).await;
    assert_eq!(run["output"], json!(["ok", 1, 2, 3]));
    wk.stop().await;
}

/// Three versions of one workflow's code: 1 records a, b; 2 changed b into c without a
/// guard (non-determinism); 3 guards the change with `patched`.
struct Shape(u8);
impl Workflow for Shape {
    const NAME: &'static str = "shape";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let mut log = vec![ctx.step("a", || async { Ok("a".to_owned()) }).await?];
        let second = match self.0 {
            1 => "b",
            2 => "c",
            _ if ctx.patched("use-c").await => "c",
            _ => "b",
        };
        log.push(ctx.step(second, || async move { Ok(second.to_owned()) }).await?);
        let answer: String = ctx.interrupt("gate", json!({})).await?;
        log.push(answer);
        Ok(json!(log))
    }
}

fn shape(v: u8) -> Registry {
    let mut r = Registry::new();
    r.register(Shape(v));
    r
}

#[tokio::test]
async fn changed_code_blocks_with_the_mismatch_and_patched_keeps_old_runs_going() {
    let w = World::new("wn", |_| {}).await;
    let v1 = InProc::start(&w.cfg, shape(1));
    w.wait_registered("shape").await;
    let old_a = w.start("shape", json!({"n": 1})).await;
    let old_b = w.start("shape", json!({"n": 2})).await;
    w.wait_status(&old_a, &["waiting"], LONG).await;
    w.wait_status(&old_b, &["waiting"], LONG).await;
    v1.stop().await;
    // Unguarded change: replay finds step "b" where the code now calls "c".
    let v2 = InProc::start(&w.cfg, shape(2));
    w.post(&format!("/v1/runs/{old_a}/resume"), json!({"value": "yes"}))
        .await;
    let run = w.wait_status(&old_a, &["blocked"], LONG).await;
    assert_eq!(
        run["blocked_reason"],
        "non-determinism at entry 1: the workflow called step \"c\" but the journal recorded step \"b\""
    );
    v2.stop().await;
    // Guarded change: old runs keep the old path, new runs take the new one.
    let v3 = InProc::start(&w.cfg, shape(3));
    w.post(&format!("/v1/runs/{old_b}/resume"), json!({"value": "yes"}))
        .await;
    let run = w.wait_status(&old_b, &["completed"], LONG).await;
    assert_eq!(run["output"], json!(["a", "b", "yes"]));
    let new = w.start("shape", json!({"n": 3})).await;
    w.wait_status(&new, &["waiting"], LONG).await;
    w.post(&format!("/v1/runs/{new}/resume"), json!({"value": "yes"})).await;
    let run = w.wait_status(&new, &["completed"], LONG).await;
    assert_eq!(run["output"], json!(["a", "c", "yes"]));
    v3.stop().await;
}

#[tokio::test]
async fn unserved_version_is_given_back_and_journal_limit_fails() {
    let w = World::new("wv", |c| c.worker.max_entries = 3).await;
    let wk = InProc::start(&w.cfg, savepoint_demo::registry(&w.store));
    w.wait_registered("chain").await;
    let t = ThreadId::generate("chain");
    w.store
        .create(&t, "chain", 7, &json!({"steps": 2}).to_string(), "")
        .await
        .unwrap();
    // Not blocked: given back untouched (no claim, no fence), with the reason on the run,
    // for a worker that serves v7 to pick up.
    let run = savepoint_integration_tests::wait_until(LONG, "the run says what it waits for", || async {
        let run = w.run(&t).await;
        run.get("waiting_for").is_some().then_some(run)
    })
    .await;
    assert_eq!(run["waiting_for"], "waiting for a worker that serves chain v7", "{run}");
    assert_eq!(
        (run["status"].as_str(), run["step"].as_u64(), run["attempt"].as_u64()),
        (Some("pending"), Some(0), Some(0))
    );
    let h = w.store.header(&t).await.unwrap().unwrap();
    assert_eq!(h.fence, 0, "no fence spent on a run this worker cannot serve");
    let long = w.start("chain", json!({"steps": 5})).await;
    let run = w.wait_status(&long, &["failed"], LONG).await;
    assert_eq!(run["error"], "journal would exceed the maximum of 3 entries");
    assert_eq!(run["step"], 3);
    wk.stop().await;
}

/// A step longer than the lease: heartbeats keep the lease; cancelling the run drops the step.
struct Slow {
    finished: Arc<AtomicU32>,
}
impl Workflow for Slow {
    const NAME: &'static str = "slow";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let finished = self.finished.clone();
        let v: u32 = ctx
            .step("long", || {
                let finished = finished.clone();
                async move {
                    tokio::time::sleep(Duration::from_secs(6)).await;
                    finished.fetch_add(1, Ordering::SeqCst);
                    Ok(1)
                }
            })
            .await?;
        Ok(json!(v))
    }
}

#[tokio::test]
async fn heartbeat_keeps_a_long_step_and_cancel_drops_it() {
    let w = World::new("wh", |_| {}).await;
    let finished = Arc::new(AtomicU32::new(0));
    let mut reg = Registry::new();
    reg.register(Slow {
        finished: finished.clone(),
    });
    let a = InProc::start(&w.cfg, reg.clone());
    let b = InProc::start(&w.cfg, reg);
    w.wait_registered("slow").await;
    let t = w.start("slow", json!(null)).await;
    w.wait_status(&t, &["running"], LONG).await;
    // Three lease lengths later the first owner still holds it: no takeover.
    tokio::time::sleep(Duration::from_millis(w.cfg.lease_ms * 3)).await;
    let events = w.event_types(&t).await;
    assert!(!events.contains(&"takeover".to_string()), "{events:?}");
    assert_eq!(w.run(&t).await["status"], "running");
    let (code, body) = w.post(&format!("/v1/runs/{t}/cancel"), json!({})).await;
    assert_eq!(code, 200, "{body}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        finished.load(Ordering::SeqCst),
        0,
        "the step in flight was dropped when the lease was lost"
    );
    assert_eq!(w.run(&t).await["status"], "cancelled");
    a.stop().await;
    b.stop().await;
}

/// An answer of the wrong shape, with no schema declared: the worker cannot decode it, so the
/// run is blocked with the decode error (not failed) and keeps its wait; the next answer, of
/// the right shape, resumes it. Same for a signal.
#[derive(serde::Deserialize, serde::Serialize)]
struct Approval {
    approved: bool,
    carrier: String,
}

struct Ship;
impl Workflow for Ship {
    const NAME: &'static str = "ship";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let a: Approval = ctx.interrupt("shipping_approval", json!({"question": "ship?"})).await?;
        let n: u32 = ctx.wait_signal("count").await?;
        Ok(json!({"approved": a.approved, "carrier": a.carrier, "count": n}))
    }
}

#[tokio::test]
async fn a_wrong_shaped_answer_blocks_the_run_which_still_takes_the_right_one() {
    let w = World::new("wa", |_| {}).await;
    let mut reg = Registry::new();
    reg.register(Ship);
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered("ship").await;
    let t = w.start("ship", json!({})).await;
    w.wait_status(&t, &["waiting"], LONG).await;
    let (code, body) = w.post(&format!("/v1/runs/{t}/resume"), json!({"value": "yes"})).await;
    assert_eq!(code, 202, "no schema is declared: the API accepts it: {body}");
    let blocked = w.wait_status(&t, &["blocked"], LONG).await;
    let reason = blocked["blocked_reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("shipping_approval") && reason.contains("does not decode") && reason.contains("still waits"),
        "{blocked}"
    );
    assert_eq!(blocked["wait"]["name"], "shipping_approval", "{blocked}");
    assert!(blocked.get("finished_at").is_none(), "{blocked}");
    let (code, body) = w
        .post(
            &format!("/v1/runs/{t}/resume"),
            json!({"value": {"approved": true, "carrier": "DHL"}}),
        )
        .await;
    assert_eq!(code, 202, "{body}");
    let waiting = w.wait_waiting_for(&t, "count", LONG).await;
    assert!(waiting.get("blocked_reason").is_none(), "{waiting}");
    let (code, _) = w
        .post(&format!("/v1/runs/{t}/signals/count"), json!({"value": "three"}))
        .await;
    assert_eq!(code, 202);
    let blocked = w.wait_status(&t, &["blocked"], LONG).await;
    assert!(
        blocked["blocked_reason"]
            .as_str()
            .unwrap_or("")
            .contains("signal \"count\""),
        "{blocked}"
    );
    let (code, _) = w
        .post(&format!("/v1/runs/{t}/signals/count"), json!({"value": 3}))
        .await;
    assert_eq!(code, 202);
    let done = w.wait_status(&t, &["completed"], LONG).await;
    assert_eq!(done["output"], json!({"approved": true, "carrier": "DHL", "count": 3}));
    assert!(done["finished_at"].as_u64().is_some(), "{done}");
    let events = w.event_types(&t).await;
    assert_eq!(events.iter().filter(|e| *e == "blocked").count(), 2, "{events:?}");
    wk.stop().await;
}

/// The new user's mistake: an effect key built from the wall clock. The worker dies right
/// after the charge; the resumed run computes another key for the same call. The engine knows
/// the key it recorded at that journal index, so the run is blocked as non-determinism,
/// naming both keys, instead of charging the card a second time.
struct ClockKey {
    charges: Arc<AtomicU32>,
}
impl Workflow for ClockKey {
    const NAME: &'static str = "clock_key";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        let order = input["order_id"].as_str().unwrap_or("").to_owned();
        #[allow(clippy::disallowed_methods)] // the mistake under test
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let charges = self.charges.clone();
        let v: Value = ctx
            .effect("card.charge", format!("charge:{order}:{ms}"), |fx| {
                let charges = charges.clone();
                async move {
                    charges.fetch_add(1, Ordering::SeqCst);
                    Ok(json!({"charged": fx.key}))
                }
            })
            .await?;
        Ok(v)
    }
}

#[tokio::test]
async fn an_effect_key_from_the_clock_blocks_instead_of_charging_twice() {
    let w = World::new("wk", |_| {}).await;
    let charges = Arc::new(AtomicU32::new(0));
    let reg = || {
        let mut r = Registry::new();
        r.register(ClockKey {
            charges: charges.clone(),
        });
        r
    };
    let a = InProc::with_failpoints(&w.cfg, reg(), "effect.after_call=abort@1");
    w.wait_registered("clock_key").await;
    let t = w.start("clock_key", json!({"order_id": "O-1"})).await;
    a.crashed().await;
    assert_eq!(charges.load(Ordering::SeqCst), 1, "charged once before the crash");
    tokio::time::sleep(Duration::from_millis(5)).await; // (a later clock reading)
    let b = InProc::start(&w.cfg, reg());
    let run = w.wait_status(&t, &["blocked", "completed"], LONG).await;
    assert_eq!(run["status"], "blocked", "{run}");
    let reason = run["blocked_reason"].as_str().unwrap_or("");
    assert!(
        reason.starts_with("non-determinism at entry 0: effect \"card.charge\" now has the key \"charge:O-1:")
            && reason.contains("but this run recorded the key \"charge:O-1:")
            && reason.contains("never from the clock or randomness"),
        "{reason}"
    );
    // Counted at the provider: one charge, not two.
    assert_eq!(charges.load(Ordering::SeqCst), 1, "{run}");
    b.stop().await;
    a.stop().await;
}

/// An operator resolves an in-doubt charge as applied with a result of the wrong shape, and no
/// schema is declared to refuse it: the code cannot decode it, so the run is not failed but
/// blocked on the key again (the operator's record taken back), and a second resolve with
/// the right shape lets it finish. The provider was charged once.
#[derive(serde::Deserialize, serde::Serialize)]
struct Charged {
    charge_id: String,
}

struct Pay {
    charges: Arc<AtomicU32>,
}
impl Workflow for Pay {
    const NAME: &'static str = "pay";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let charges = self.charges.clone();
        let c: Charged = ctx
            .effect("card.charge", "charge:P-1", |fx| {
                let charges = charges.clone();
                async move {
                    charges.fetch_add(1, Ordering::SeqCst);
                    Ok(Charged { charge_id: fx.key })
                }
            })
            .await?;
        Ok(json!({"charge_id": c.charge_id}))
    }
}

#[tokio::test]
async fn a_wrong_shaped_resolve_result_blocks_on_the_key_again_instead_of_failing() {
    let w = World::new("wr", |_| {}).await;
    let charges = Arc::new(AtomicU32::new(0));
    let reg = || {
        let mut r = Registry::new();
        r.register(Pay {
            charges: charges.clone(),
        });
        r
    };
    let a = InProc::with_failpoints(&w.cfg, reg(), "effect.after_call=abort@1");
    w.wait_registered("pay").await;
    let t = w.start("pay", json!({})).await;
    a.crashed().await;
    let b = InProc::start(&w.cfg, reg());
    let run = w.wait_status(&t, &["blocked"], LONG).await;
    assert_eq!(run["blocked_reason"], "effect charge:P-1 outcome unknown", "{run}");
    let path = format!("/v1/runs/{t}/effects/charge:P-1/resolve");
    let (code, body) = w.post(&path, json!({"applied": true, "result": {"id": 7}})).await;
    assert_eq!(code, 202, "no schema: accepted: {body}");
    let run = w.wait_status(&t, &["blocked", "failed", "completed"], LONG).await;
    assert_eq!(run["status"], "blocked", "{run}");
    let reason = run["blocked_reason"].as_str().unwrap_or("");
    assert!(
        reason.starts_with("effect charge:P-1 outcome unknown: the result settled for effect")
            && reason.contains("charge_id"),
        "{run}"
    );
    assert_eq!(run["blocked_effect"], "charge:P-1", "{run}");
    let (code, body) = w
        .post(&path, json!({"applied": true, "result": {"charge_id": "ch_1"}}))
        .await;
    assert_eq!(code, 202, "{body}");
    let done = w.wait_status(&t, &["completed", "failed"], LONG).await;
    assert_eq!(done["output"], json!({"charge_id": "ch_1"}), "{done}");
    assert_eq!(charges.load(Ordering::SeqCst), 1, "charged once");
    b.stop().await;
    a.stop().await;
}

/// A wait with a deadline on real Redis and RabbitMQ: the run waits in Redis with the
/// deadline as its due time (no worker holds it), the scanner hands it to a worker when the
/// deadline passes, and the timeout is journaled; an answer in time is returned instead.
struct Escalate;
impl Workflow for Escalate {
    const NAME: &'static str = "escalate";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        let ms = input["timeout_ms"].as_u64().unwrap_or(500);
        let answer: Option<String> = ctx
            .interrupt("approve", json!({"question": "approve?"}))
            .within(Duration::from_millis(ms))
            .await?;
        Ok(json!({"answer": answer}))
    }
}

#[tokio::test]
async fn a_wait_with_a_deadline_times_out_in_redis_or_takes_the_answer() {
    let w = World::new("wd", |_| {}).await;
    let mut reg = Registry::new();
    reg.register(Escalate);
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered("escalate").await;
    let t = w.start("escalate", json!({"timeout_ms": 800})).await;
    let waiting = w.wait_status(&t, &["waiting"], LONG).await;
    assert!(waiting["at"]["wake_at"].as_u64().is_some(), "{waiting}");
    assert!(
        waiting["at"]["text"].as_str().unwrap().contains("until its deadline"),
        "{waiting}"
    );
    let done = w.wait_status(&t, &["completed"], LONG).await;
    assert_eq!(done["output"], json!({"answer": null}));
    let events = w.event_types(&t).await;
    assert!(events.iter().any(|e| e == "wait_timed_out"), "{events:?}");
    let (_, waiting_list) = w.get("/v1/runs?status=waiting").await;
    assert!(
        !waiting_list["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r["thread_id"] == t.as_str()),
        "{waiting_list}"
    );

    let t = w.start("escalate", json!({"timeout_ms": 60_000})).await;
    w.wait_status(&t, &["waiting"], LONG).await;
    let (code, body) = w.post(&format!("/v1/runs/{t}/resume"), json!({"value": "yes"})).await;
    assert_eq!(code, 202, "{body}");
    let done = w.wait_status(&t, &["completed"], LONG).await;
    assert_eq!(done["output"], json!({"answer": "yes"}));
    wk.stop().await;
}
