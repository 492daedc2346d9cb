//! Hazards of the effect protocol, of replay and of the control API, end to end against real
//! Redis and RabbitMQ with in-process workers and purpose-built workflows: what an effect
//! function is given, lost replies around the effect writes, failed effects, intents of
//! cancelled runs, keys held by live runs, exact resolves, code that returns early, sticky
//! `patched`, one key used twice, panics, client ids of resume and signals, the listing of
//! blocked and waiting runs, and retrying a blocked run after a fix.

use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use savepoint::workflow::{Ctx, EffectCtx, EffectOptions, Registry, RetryPolicy, StepError, Workflow, WorkflowError};
use savepoint_core::ids::{EffectKey, ThreadId};
use savepoint_integration_tests::inproc::InProc;
use savepoint_integration_tests::scenario::World;
use savepoint_integration_tests::{cleanup, wait_until};
use savepoint_store::{EffectClaim, ScriptStore};

const LONG: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------
// Harness helpers (local to this file).
// ---------------------------------------------------------------------------------------

/// Counters by name (effect key, thread id, …), shared between a test and its workflows.
#[derive(Clone, Default)]
struct Counts(Arc<Mutex<HashMap<String, u32>>>);

impl Counts {
    fn bump(&self, k: &str) -> u32 {
        let mut m = self.0.lock().unwrap();
        let n = m.entry(k.to_owned()).or_insert(0);
        *n += 1;
        *n
    }

    fn get(&self, k: &str) -> u32 {
        self.0.lock().unwrap().get(k).copied().unwrap_or(0)
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn fast_retry(attempts: u32) -> RetryPolicy {
    RetryPolicy {
        initial: ms(10),
        jitter: 0.0,
        ..RetryPolicy::attempts(attempts)
    }
}

fn text(input: &Value, field: &str) -> String {
    match &input[field] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The raw dedup record of an effect key.
async fn record(w: &World, key: &str) -> Option<Value> {
    w.store
        .effect_record(&EffectKey::new(key).expect("valid key"))
        .await
        .expect("effect record")
}

/// A recorded result inside a dedup record is JSON text.
fn record_result(rec: &Value) -> Value {
    serde_json::from_str(rec["result"].as_str().expect("result text")).expect("result JSON")
}

async fn history(w: &World, t: &ThreadId) -> Value {
    let (code, body) = w.get(&format!("/v1/runs/{t}/history")).await;
    assert_eq!(code, 200, "history of {t}: {body}");
    body
}

/// (type, detail) of every event of a run, oldest first.
async fn events(w: &World, t: &ThreadId) -> Vec<(String, String)> {
    w.store
        .events(t, 1000)
        .await
        .expect("events")
        .into_iter()
        .map(|e| (e.typ, e.detail))
        .collect()
}

async fn details_of(w: &World, t: &ThreadId, typ: &str) -> Vec<String> {
    events(w, t)
        .await
        .into_iter()
        .filter(|(ty, _)| ty == typ)
        .map(|(_, d)| d)
        .collect()
}

fn reason(run: &Value) -> &str {
    run["blocked_reason"].as_str().unwrap_or("")
}

// ---------------------------------------------------------------------------------------
// 1. What an effect function is given, and the order begin → intent → call → done → commit.
// ---------------------------------------------------------------------------------------

/// A step, then an effect whose function looks at Redis while it runs (and fails its first
/// attempt, so the retry is seen with attempt 2).
struct FxProbe {
    store: ScriptStore,
    seen: Arc<Mutex<Vec<Value>>>,
}

impl Workflow for FxProbe {
    const NAME: &'static str = "fx_probe";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        let _: u32 = ctx.step("first", || async { Ok(1) }).await?;
        let key = format!("charge:{}", text(&input, "id"));
        let opts = EffectOptions {
            retry: Some(fast_retry(3)),
            ..EffectOptions::default()
        };
        let (store, seen) = (self.store.clone(), self.seen.clone());
        let out: Value = ctx
            .effect("charge", key, |fx: EffectCtx| {
                let (store, seen) = (store.clone(), seen.clone());
                async move {
                    let begun: Option<String> = store
                        .query(
                            redis::cmd("HGET")
                                .arg(store.keys().run(&fx.thread).run)
                                .arg(format!("x:{}", fx.index)),
                        )
                        .await
                        .expect("hget");
                    let rec = store
                        .effect_record(&EffectKey::new(fx.key.clone()).unwrap())
                        .await
                        .expect("record");
                    let probe = json!({
                        "key": fx.key, "fence": fx.fence, "thread": fx.thread.as_str(),
                        "index": fx.index, "attempt": fx.attempt, "begun": begun, "record": rec,
                    });
                    seen.lock().unwrap().push(probe);
                    if fx.attempt == 1 {
                        return Err(StepError::retryable("provider hiccup"));
                    }
                    Ok(json!({"charged": fx.key, "fence": fx.fence}))
                }
            })
            .options(opts)
            .await?;
        Ok(out)
    }
}

#[tokio::test]
async fn effect_function_gets_key_fence_thread_index_attempt_after_begin_and_intent() {
    let w = World::new("hzfxctx", |_| {}).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut reg = Registry::new();
    reg.register(FxProbe {
        store: w.store.clone(),
        seen: seen.clone(),
    });
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered("fx_probe").await;
    let t = w.start("fx_probe", json!({"id": 7})).await;
    let run = w.wait_status(&t, &["completed"], LONG).await;
    let fence = w.store.header(&t).await.unwrap().unwrap().fence;
    assert!(fence > 0);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "one failed attempt, one good one: {seen:?}");
    for (i, probe) in seen.iter().enumerate() {
        assert_eq!(probe["key"], "charge:7", "{probe}");
        assert_eq!(probe["thread"], t.as_str(), "{probe}");
        assert_eq!(probe["index"], 1, "the effect is journal entry 1: {probe}");
        assert_eq!(probe["attempt"], i as u64 + 1, "{probe}");
        assert_eq!(probe["fence"], fence, "the fencing token of the attempt: {probe}");
        // begin recorded the key in the run at this index before the call …
        assert_eq!(
            probe["begun"], "charge:7",
            "x:<index> is recorded before the call: {probe}"
        );
        // … and the fenced intent is held while the function runs.
        let rec = &probe["record"];
        assert_eq!(rec["state"], "intent", "{probe}");
        assert_eq!(rec["thread"], t.as_str(), "{probe}");
        assert_eq!(rec["index"], 1, "{probe}");
        assert_eq!(rec["fence"], fence, "{probe}");
    }
    assert_eq!(run["output"], json!({"charged": "charge:7", "fence": fence}));
    // done, then the journal: the key is done with the result and x:1 is settled.
    let rec = record(&w, "charge:7").await.expect("done record");
    assert_eq!(rec["state"], "done", "{rec}");
    assert_eq!(record_result(&rec), run["output"]);
    let begun: Option<String> = w
        .store
        .query(redis::cmd("HGET").arg(w.store.keys().run(&t).run).arg("x:1"))
        .await
        .unwrap();
    assert_eq!(begun, None, "the journal commit settles x:1");
    let hist = history(&w, &t).await;
    assert_eq!(hist["entries"][1]["kind"], "effect");
    assert_eq!(hist["entries"][1]["key"], "charge:7");
    assert_eq!(hist["entries"][1]["result"], run["output"]);
    wk.stop().await;
    cleanup(&w.cfg).await;
}

// ---------------------------------------------------------------------------------------
// 2. Lost replies / failed writes around intent and done are retried in-process.
// ---------------------------------------------------------------------------------------

/// One effect that counts its calls by key.
struct FxOnce {
    calls: Counts,
}

impl Workflow for FxOnce {
    const NAME: &'static str = "fx_once";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        let key = format!("send:{}", text(&input, "id"));
        let calls = self.calls.clone();
        let v: Value = ctx
            .effect("send", key, |fx: EffectCtx| {
                let calls = calls.clone();
                async move {
                    let n = calls.bump(&fx.key);
                    Ok(json!({"n": n, "fence": fx.fence}))
                }
            })
            .await?;
        Ok(v)
    }
}

#[tokio::test]
async fn lost_replies_around_intent_and_done_are_retried_in_process() {
    let w = World::new("hzlost", |_| {}).await;
    let calls = Counts::default();
    let specs = [
        // a lost reply of the intent write
        "effect.after_intent=error@1",
        // a failed done write
        "effect.after_call=error@1",
        // a lost reply of the done write (the recorded result is used)
        "effect.after_done=error@1",
        // all of them, twice each
        "effect.after_intent=error@1;effect.after_call=error@1;effect.after_done=error@2",
    ];
    for (i, spec) in specs.iter().enumerate() {
        let mut reg = Registry::new();
        reg.register(FxOnce { calls: calls.clone() });
        let wk = InProc::with_failpoints(&w.cfg, reg, spec);
        w.wait_registered("fx_once").await;
        let t = w.start("fx_once", json!({"id": i})).await;
        let run = w.wait_status(&t, &["completed", "blocked", "failed"], LONG).await;
        let evs = events(&w, &t).await;
        assert_eq!(run["status"], "completed", "{spec}: {run}\n{evs:?}");
        let key = format!("send:{i}");
        assert_eq!(calls.get(&key), 1, "{spec}: the effect ran exactly once");
        // Retried in the same attempt: no hand-back, no second claim, nothing in doubt.
        assert_eq!(run["attempt"], 1, "{spec}: {run}\n{evs:?}");
        assert!(
            !evs.iter().any(|(ty, _)| ty == "retry_later" || ty == "takeover"),
            "{spec}: {evs:?}"
        );
        assert!(evs.iter().any(|(ty, _)| ty == "effect_done"), "{spec}: {evs:?}");
        let rec = record(&w, &key).await.expect("done record");
        assert_eq!(rec["state"], "done", "{spec}: {rec}");
        assert_eq!(record_result(&rec), run["output"], "{spec}");
        assert_eq!(run["output"]["n"], 1, "{spec}");
        wk.stop().await;
    }
    cleanup(&w.cfg).await;
}

// ---------------------------------------------------------------------------------------
// 3. A failed effect releases its intent, unless the key turns out done.
// ---------------------------------------------------------------------------------------

/// An effect whose function always fails; with `mark_done` it first marks the key done as an
/// operator (or another run) would, as if the effect had been applied meanwhile.
struct FxFail {
    store: ScriptStore,
    calls: Counts,
}

impl Workflow for FxFail {
    const NAME: &'static str = "fx_fail";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        let key = format!("pay:{}", text(&input, "id"));
        let mark = input["mark_done"].as_bool().unwrap_or(false);
        let (store, calls) = (self.store.clone(), self.calls.clone());
        let opts = EffectOptions {
            retry: Some(RetryPolicy::none()),
            ..EffectOptions::default()
        };
        let r: Result<Value, WorkflowError> = ctx
            .effect("pay", key, |fx: EffectCtx| {
                let (store, calls) = (store.clone(), calls.clone());
                async move {
                    calls.bump(&fx.key);
                    if mark {
                        let k = EffectKey::new(fx.key.clone()).unwrap();
                        store
                            .settle_done(&k, &fx.thread, &json!({"by": "operator"}), None)
                            .await
                            .expect("settle done");
                    }
                    Err::<Value, _>(StepError::fatal("card declined"))
                }
            })
            .options(opts)
            .await;
        Ok(match r {
            Ok(v) => json!({"ok": v}),
            Err(WorkflowError::CallFailed { kind, message, .. }) => json!({"err": message, "kind": kind}),
            Err(e) => return Err(e),
        })
    }
}

#[tokio::test]
async fn failed_effect_releases_its_intent_or_journals_the_recorded_result_if_done() {
    let w = World::new("hzfail", |_| {}).await;
    let calls = Counts::default();
    let mut reg = Registry::new();
    reg.register(FxFail {
        store: w.store.clone(),
        calls: calls.clone(),
    });
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered("fx_fail").await;

    // The function failed: the intent is released and the failure journaled and returned.
    let t = w.start("fx_fail", json!({"id": 1})).await;
    let run = w.wait_status(&t, &["completed", "blocked", "failed"], LONG).await;
    assert_eq!(
        run["output"],
        json!({"err": "card declined", "kind": "effect"}),
        "{run}"
    );
    assert_eq!(record(&w, "pay:1").await, None, "the intent was released");
    let hist = history(&w, &t).await;
    assert_eq!(hist["entries"][0]["outcome"], "error", "{hist}");
    assert!(details_of(&w, &t, "effect_failed").await.len() == 1);

    // The key was marked done before the release: the recorded result is journaled (Ok).
    let t = w.start("fx_fail", json!({"id": 2, "mark_done": true})).await;
    let run = w.wait_status(&t, &["completed", "blocked", "failed"], LONG).await;
    assert_eq!(run["output"], json!({"ok": {"by": "operator"}}), "{run}");
    let hist = history(&w, &t).await;
    assert_eq!(hist["entries"][0]["outcome"], "ok", "{hist}");
    assert_eq!(hist["entries"][0]["result"], json!({"by": "operator"}), "{hist}");
    let types: Vec<String> = events(&w, &t).await.into_iter().map(|e| e.0).collect();
    assert!(types.contains(&"effect_skipped".to_string()), "{types:?}");
    assert!(!types.contains(&"effect_failed".to_string()), "{types:?}");
    let rec = record(&w, "pay:2").await.expect("still done");
    assert_eq!(rec["state"], "done");
    assert_eq!((calls.get("pay:1"), calls.get("pay:2")), (1, 1));
    wk.stop().await;
    cleanup(&w.cfg).await;
}

// ---------------------------------------------------------------------------------------
// 4–6. Intents of cancelled runs, keys held by live runs, exact resolves.
// ---------------------------------------------------------------------------------------

/// Holds the intent of `input.key` forever: its effect function never returns.
struct Hold {
    started: Counts,
}

impl Workflow for Hold {
    const NAME: &'static str = "fx_hold";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        let started = self.started.clone();
        let v: Value = ctx
            .effect("hold", text(&input, "key"), move |fx: EffectCtx| {
                started.bump(&fx.key);
                futures::future::pending::<Result<Value, StepError>>()
            })
            .await?;
        Ok(v)
    }
}

/// Uses `input.key`; counts body invocations by thread and effect calls by key.
struct UseKey {
    bodies: Counts,
    performed: Counts,
}

impl Workflow for UseKey {
    const NAME: &'static str = "fx_use";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        self.bodies.bump(ctx.thread_id().as_str());
        let performed = self.performed.clone();
        let v: Value = ctx
            .effect("use", text(&input, "key"), |fx: EffectCtx| {
                let performed = performed.clone();
                async move {
                    performed.bump(&fx.key);
                    Ok(json!("performed"))
                }
            })
            .await?;
        Ok(v)
    }
}

#[derive(Clone, Default)]
struct Fx {
    started: Counts,
    bodies: Counts,
    performed: Counts,
}

impl Fx {
    fn registry(&self) -> Registry {
        let mut reg = Registry::new();
        reg.register(Hold {
            started: self.started.clone(),
        });
        reg.register(UseKey {
            bodies: self.bodies.clone(),
            performed: self.performed.clone(),
        });
        reg
    }
}

/// Starts a run that takes the intent of `key` and never settles it.
async fn hold_key(w: &World, fx: &Fx, key: &str) -> ThreadId {
    let h = w.start("fx_hold", json!({"key": key})).await;
    wait_until(LONG, "the holder calls its effect", || async {
        (fx.started.get(key) > 0).then_some(())
    })
    .await;
    let rec = record(w, key).await.expect("intent recorded");
    assert_eq!(
        (rec["state"].as_str(), rec["thread"].as_str()),
        (Some("intent"), Some(h.as_str())),
        "{rec}"
    );
    h
}

/// Cancels a holder: the response lists its intent as in doubt and the record names it.
async fn cancel_holder(w: &World, h: &ThreadId, key: &str) {
    let (code, body) = w.post(&format!("/v1/runs/{h}/cancel"), json!({})).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        body["effects_in_doubt"],
        json!([{"index": 0, "key": key, "state": "in_doubt_owner_cancelled"}]),
        "{body}"
    );
    let rec = record(w, key).await.expect("record kept");
    assert_eq!(rec["state"], "orphaned", "{rec}");
    assert_eq!(rec["owner_status"], "cancelled", "{rec}");
    assert_eq!(rec["thread"], h.as_str(), "{rec}");
}

/// A run whose key's holder was cancelled is blocked with the resolve command.
fn assert_blocked_on_orphan(run: &Value, t: &ThreadId, key: &str, holder: &ThreadId) {
    assert_eq!(run["status"], "blocked", "{run}");
    assert_eq!(run["blocked_effect"], key, "{run}");
    let r = reason(run);
    assert!(r.contains("was cancelled before settling it"), "{run}");
    assert!(
        r.contains(&format!("savepoint resolve {t} {key} --applied true|false")),
        "{run}"
    );
    assert_eq!(run["blocked_effect_holder"]["thread_id"], holder.as_str(), "{run}");
    assert_eq!(run["blocked_effect_holder"]["index"], 0, "{run}");
}

#[tokio::test]
async fn cancel_orphans_intents_next_run_blocks_at_once_resolve_not_applied_performs() {
    let w = World::new("hzcancel", |_| {}).await;
    let fx = Fx::default();
    let wk = InProc::start(&w.cfg, fx.registry());
    w.wait_registered("fx_use").await;
    let h = hold_key(&w, &fx, "mail:1").await;
    cancel_holder(&w, &h, "mail:1").await;
    assert_eq!(w.run(&h).await["status"], "cancelled");

    let u = w.start("fx_use", json!({"key": "mail:1"})).await;
    let run = w
        .wait_status(&u, &["blocked", "completed"], Duration::from_secs(10))
        .await;
    assert_blocked_on_orphan(&run, &u, "mail:1", &h);
    // Blocked at once, not spinning on the key.
    let types: Vec<String> = events(&w, &u).await.into_iter().map(|e| e.0).collect();
    assert!(!types.contains(&"effect_busy".to_string()), "{types:?}");
    assert_eq!(fx.bodies.get(u.as_str()), 1, "{types:?}");
    assert_eq!(fx.performed.get("mail:1"), 0);

    // Retry is refused for a run blocked on an effect, with the resolve hint.
    let (code, body) = w.post(&format!("/v1/runs/{u}/retry"), json!({})).await;
    assert_eq!(code, 409, "{body}");
    let msg = body["error"].as_str().unwrap_or("");
    assert!(
        msg.contains(&format!("/v1/runs/{u}/effects/mail:1/resolve")) && msg.contains("savepoint resolve"),
        "{body}"
    );
    assert_eq!(w.run(&u).await["status"], "blocked");

    // Not applied: the run performs the effect itself.
    let (code, body) = w
        .post(
            &format!("/v1/runs/{u}/effects/mail:1/resolve"),
            json!({"applied": false}),
        )
        .await;
    assert_eq!(code, 202, "{body}");
    assert_eq!(body["effect"]["state"], "released", "{body}");
    let run = w.wait_status(&u, &["completed"], LONG).await;
    assert_eq!(run["output"], "performed");
    assert_eq!(fx.performed.get("mail:1"), 1);
    let rec = record(&w, "mail:1").await.expect("done");
    assert_eq!(
        (rec["state"].as_str(), rec["thread"].as_str()),
        (Some("done"), Some(u.as_str()))
    );
    wk.stop().await;
    cleanup(&w.cfg).await;
}

#[tokio::test]
async fn resolve_applied_journals_the_given_result_without_performing() {
    let w = World::new("hzapplied", |_| {}).await;
    let fx = Fx::default();
    let wk = InProc::start(&w.cfg, fx.registry());
    w.wait_registered("fx_use").await;
    let h = hold_key(&w, &fx, "mail:2").await;
    cancel_holder(&w, &h, "mail:2").await;
    let u = w.start("fx_use", json!({"key": "mail:2"})).await;
    let run = w
        .wait_status(&u, &["blocked", "completed"], Duration::from_secs(10))
        .await;
    assert_blocked_on_orphan(&run, &u, "mail:2", &h);
    let (code, body) = w
        .post(
            &format!("/v1/runs/{u}/effects/mail:2/resolve"),
            json!({"applied": true, "result": {"receipt": "r-1"}}),
        )
        .await;
    assert_eq!(code, 202, "{body}");
    let run = w.wait_status(&u, &["completed"], LONG).await;
    assert_eq!(run["output"], json!({"receipt": "r-1"}));
    assert_eq!(
        fx.performed.get("mail:2"),
        0,
        "an applied effect is not performed again"
    );
    let hist = history(&w, &u).await;
    assert_eq!(hist["entries"][0]["result"], json!({"receipt": "r-1"}), "{hist}");
    let types: Vec<String> = events(&w, &u).await.into_iter().map(|e| e.0).collect();
    assert!(types.contains(&"effect_skipped".to_string()), "{types:?}");
    wk.stop().await;
    cleanup(&w.cfg).await;
}

#[tokio::test]
async fn held_key_backs_off_without_replaying_then_blocks_when_the_holder_is_cancelled() {
    let w = World::new("hzbusy", |_| {}).await;
    let fx = Fx::default();
    let wk = InProc::start(&w.cfg, fx.registry());
    w.wait_registered("fx_use").await;
    let h = hold_key(&w, &fx, "mail:3").await;
    let u = w.start("fx_use", json!({"key": "mail:3"})).await;
    let busy = wait_until(LONG, "four back-offs on the held key", || async {
        let d = details_of(&w, &u, "effect_busy").await;
        (d.len() >= 4).then_some(d)
    })
    .await;
    for (detail, delay) in busy.iter().zip(["250ms", "500ms", "1s", "2s"]) {
        assert!(detail.ends_with(&format!("next try in {delay}")), "{busy:?}");
        assert!(detail.contains(h.as_str()), "the detail names the holder: {busy:?}");
    }
    // The run sleeps (the fourth back-off is 2 s) and says what it waits on.
    let run = w.run(&u).await;
    assert_eq!(run["status"], "sleeping", "{run}");
    assert_eq!(run["waiting_on_effect"]["key"], "mail:3", "{run}");
    assert!(run["waiting_on_effect"]["tries"].as_u64().unwrap_or(0) >= 4, "{run}");
    // Every wake-up checked the key before replaying: the body ran once.
    assert_eq!(
        fx.bodies.get(u.as_str()),
        1,
        "the body was re-executed while the key was held"
    );
    assert_eq!(fx.performed.get("mail:3"), 0);

    // The holder ends: the waiting run finds the key orphaned and blocks.
    cancel_holder(&w, &h, "mail:3").await;
    let run = w.wait_status(&u, &["blocked", "completed"], LONG).await;
    assert_blocked_on_orphan(&run, &u, "mail:3", &h);
    assert_eq!(fx.performed.get("mail:3"), 0);
    wk.stop().await;
    cleanup(&w.cfg).await;
}

#[tokio::test]
async fn held_key_of_a_run_that_expired_blocks_the_waiting_run() {
    let w = World::new("hzbusyexp", |_| {}).await;
    let fx = Fx::default();
    let wk = InProc::start(&w.cfg, fx.registry());
    w.wait_registered("fx_use").await;
    let h = hold_key(&w, &fx, "mail:7").await;
    let u = w.start("fx_use", json!({"key": "mail:7"})).await;
    wait_until(LONG, "two back-offs on the held key", || async {
        (details_of(&w, &u, "effect_busy").await.len() >= 2).then_some(())
    })
    .await;
    // The holder's run record expires (retention) while its intent is unsettled.
    let n: i64 = w
        .store
        .query(redis::cmd("DEL").arg(w.store.keys().run(&h).run))
        .await
        .unwrap();
    assert_eq!(n, 1);
    let run = w.wait_status(&u, &["blocked", "completed"], LONG).await;
    assert_eq!(run["status"], "blocked", "{run}");
    assert_eq!(run["blocked_effect"], "mail:7", "{run}");
    assert!(reason(&run).contains("was missing before settling it"), "{run}");
    assert!(
        reason(&run).contains(&format!("savepoint resolve {u} mail:7 --applied true|false")),
        "{run}"
    );
    let rec = record(&w, "mail:7").await.expect("record");
    assert_eq!(
        (rec["state"].as_str(), rec["owner_status"].as_str()),
        (Some("orphaned"), Some("missing"))
    );
    assert_eq!(fx.performed.get("mail:7"), 0);
    wk.stop().await;
    cleanup(&w.cfg).await;
}

#[tokio::test]
async fn cancelling_a_run_that_backs_off_on_another_runs_key_lists_nothing_in_doubt() {
    let w = World::new("hzbusycancel", |_| {}).await;
    let fx = Fx::default();
    let wk = InProc::start(&w.cfg, fx.registry());
    w.wait_registered("fx_use").await;
    let h = hold_key(&w, &fx, "mail:6").await;
    let u = w.start("fx_use", json!({"key": "mail:6"})).await;
    wait_until(LONG, "the run backs off on the held key", || async {
        (!details_of(&w, &u, "effect_busy").await.is_empty()).then_some(())
    })
    .await;
    // The waiting run never held the intent: cancelling it settles nothing …
    let (code, body) = w.post(&format!("/v1/runs/{u}/cancel"), json!({})).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["effects_in_doubt"], json!([]), "{body}");
    // … and the holder's intent is untouched.
    let rec = record(&w, "mail:6").await.expect("intent");
    assert_eq!(
        (rec["state"].as_str(), rec["thread"].as_str()),
        (Some("intent"), Some(h.as_str())),
        "{rec}"
    );
    assert_eq!(w.run(&h).await["status"], "running");
    cancel_holder(&w, &h, "mail:6").await;
    wk.stop().await;
    cleanup(&w.cfg).await;
}

#[tokio::test]
async fn resolve_settles_only_the_named_record_and_a_second_resolve_is_409() {
    let w = World::new("hzexact", |_| {}).await;
    let fx = Fx::default();
    let wk = InProc::start(&w.cfg, fx.registry());
    w.wait_registered("fx_use").await;

    // A resolve after the run moved on answers 409 and changes nothing.
    let h = hold_key(&w, &fx, "mail:4").await;
    let orphan_fence = {
        cancel_holder(&w, &h, "mail:4").await;
        record(&w, "mail:4").await.unwrap()["fence"].clone()
    };
    let u = w.start("fx_use", json!({"key": "mail:4"})).await;
    let run = w
        .wait_status(&u, &["blocked", "completed"], Duration::from_secs(10))
        .await;
    assert_blocked_on_orphan(&run, &u, "mail:4", &h);
    assert_eq!(run["blocked_effect_holder"]["fence"], orphan_fence, "{run}");
    let path = format!("/v1/runs/{u}/effects/mail:4/resolve");
    let (code, body) = w.post(&path, json!({"applied": false})).await;
    assert_eq!(code, 202, "{body}");
    let done = w.wait_status(&u, &["completed"], LONG).await;
    let before = record(&w, "mail:4").await.expect("done");
    assert_eq!(before["state"], "done");
    let (code, body) = w.post(&path, json!({"applied": true, "result": "forged"})).await;
    assert_eq!(code, 409, "{body}");
    assert_eq!(record(&w, "mail:4").await, Some(before), "the record is unchanged");
    assert_eq!(w.run(&u).await["output"], done["output"]);
    assert_eq!(fx.performed.get("mail:4"), 1);

    // The record changed after the run blocked (now another holder's): resolve refuses it.
    let h2 = hold_key(&w, &fx, "mail:5").await;
    cancel_holder(&w, &h2, "mail:5").await;
    let u2 = w.start("fx_use", json!({"key": "mail:5"})).await;
    let run = w
        .wait_status(&u2, &["blocked", "completed"], Duration::from_secs(10))
        .await;
    assert_blocked_on_orphan(&run, &u2, "mail:5", &h2);
    let key = EffectKey::new("mail:5").unwrap();
    let other = ThreadId::new("someone-else-1").unwrap();
    w.store.settle_released(&key, &u2, None).await.unwrap();
    assert_eq!(
        w.store.effect_intent(&key, &other, 5, 9, false).await.unwrap(),
        EffectClaim::Won
    );
    assert!(w.store.effect_orphan(&key, &other, 5, "cancelled").await.unwrap());
    let forged = record(&w, "mail:5").await.unwrap();
    let (code, body) = w
        .post(
            &format!("/v1/runs/{u2}/effects/mail:5/resolve"),
            json!({"applied": true, "result": 1}),
        )
        .await;
    assert_eq!(code, 409, "{body}");
    assert!(
        body["error"].as_str().unwrap_or("").contains("record changed"),
        "{body}"
    );
    assert_eq!(
        record(&w, "mail:5").await,
        Some(forged),
        "the other record is untouched"
    );
    assert_eq!(w.run(&u2).await["status"], "blocked");
    assert_eq!(fx.performed.get("mail:5"), 0);
    wk.stop().await;
    cleanup(&w.cfg).await;
}

// ---------------------------------------------------------------------------------------
// 7–8. Code that returns with journal entries left, and retry after the fix.
// ---------------------------------------------------------------------------------------

/// 1: steps a, b, c, then the interrupt "gate". 2: returns after step a (a bad deploy).
struct Shrink(u8);

impl Workflow for Shrink {
    const NAME: &'static str = "shrink";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let a: String = ctx.step("a", || async { Ok("a".to_owned()) }).await?;
        if self.0 == 2 {
            return Ok(json!([a]));
        }
        let b: String = ctx.step("b", || async { Ok("b".to_owned()) }).await?;
        let c: String = ctx.step("c", || async { Ok("c".to_owned()) }).await?;
        let gate: String = ctx.interrupt("gate", json!({})).await?;
        Ok(json!([a, b, c, gate]))
    }
}

fn shrink(v: u8) -> Registry {
    let mut r = Registry::new();
    r.register(Shrink(v));
    r
}

/// A run that waited under code 1, resumed under code 2: blocked. Returns it and the worker.
async fn blocked_by_early_return(w: &World) -> (ThreadId, InProc) {
    let v1 = InProc::start(&w.cfg, shrink(1));
    w.wait_registered("shrink").await;
    let t = w.start("shrink", json!(null)).await;
    let run = w.wait_status(&t, &["waiting"], LONG).await;
    assert_eq!(run["step"], 3, "{run}");
    v1.stop().await;
    let v2 = InProc::start(&w.cfg, shrink(2));
    let (code, body) = w.post(&format!("/v1/runs/{t}/resume"), json!({"value": "go"})).await;
    assert_eq!(code, 202, "{body}");
    let run = w.wait_status(&t, &["blocked", "completed"], LONG).await;
    assert_eq!(run["status"], "blocked", "{run}");
    assert_eq!(
        reason(&run),
        "non-determinism at entry 1: the workflow returned but the journal recorded step \"b\" there (3 entries)",
        "{run}"
    );
    assert!(run.get("blocked_effect").is_none(), "{run}");
    (t, v2)
}

#[tokio::test]
async fn code_that_returns_before_the_journal_ends_is_blocked_as_non_determinism() {
    let w = World::new("hzreturn", |_| {}).await;
    let (t, v2) = blocked_by_early_return(&w).await;
    let hist = history(&w, &t).await;
    assert_eq!(
        hist["entries"].as_array().unwrap().len(),
        3,
        "journal untouched: {hist}"
    );
    assert!(w.run(&t).await.get("output").is_none());
    v2.stop().await;
    cleanup(&w.cfg).await;
}

#[tokio::test]
async fn retry_requeues_a_blocked_run_after_the_fixed_code_is_deployed() {
    let w = World::new("hzretry", |_| {}).await;
    let (t, v2) = blocked_by_early_return(&w).await;
    v2.stop().await;
    let v3 = InProc::start(&w.cfg, shrink(1));
    let (code, body) = w.post(&format!("/v1/runs/{t}/retry"), json!({})).await;
    assert_eq!(code, 202, "{body}");
    assert_eq!(body["status"], "pending", "{body}");
    let run = w.wait_status(&t, &["completed", "blocked"], LONG).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["output"], json!(["a", "b", "c", "go"]));
    let types: Vec<String> = events(&w, &t).await.into_iter().map(|e| e.0).collect();
    assert!(types.contains(&"retried_by_operator".to_string()), "{types:?}");
    // Only blocked runs are retried.
    let (code, body) = w.post(&format!("/v1/runs/{t}/retry"), json!({})).await;
    assert_eq!(code, 409, "{body}");
    v3.stop().await;
    cleanup(&w.cfg).await;
}

// ---------------------------------------------------------------------------------------
// 9. `patched` is sticky per run.
// ---------------------------------------------------------------------------------------

/// false: old code (steps a, b, gate, c). true: new code asks `patched("x")` before the steps
/// and again after the gate.
struct Patchy(bool);

impl Workflow for Patchy {
    const NAME: &'static str = "patchy";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let first = if self.0 { Some(ctx.patched("x").await) } else { None };
        let _: u32 = ctx.step("a", || async { Ok(1) }).await?;
        let _: u32 = ctx.step("b", || async { Ok(2) }).await?;
        let gate: Value = ctx.interrupt("gate", json!({})).await?;
        let second = if self.0 { Some(ctx.patched("x").await) } else { None };
        let _: u32 = ctx.step("c", || async { Ok(3) }).await?;
        Ok(json!({"first": first, "second": second, "gate": gate}))
    }
}

fn patchy(new: bool) -> Registry {
    let mut r = Registry::new();
    r.register(Patchy(new));
    r
}

fn kinds(hist: &Value) -> Vec<String> {
    hist["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| format!("{} {}", e["kind"].as_str().unwrap(), e["name"].as_str().unwrap()))
        .collect()
}

#[tokio::test]
async fn patched_is_sticky_old_runs_keep_false_after_replay_ends_new_runs_keep_true() {
    let w = World::new("hzpatch", |_| {}).await;
    let old_code = InProc::start(&w.cfg, patchy(false));
    w.wait_registered("patchy").await;
    let old = w.start("patchy", json!({"n": 1})).await;
    w.wait_status(&old, &["waiting"], LONG).await;
    old_code.stop().await;

    let new_code = InProc::start(&w.cfg, patchy(true));
    w.post(&format!("/v1/runs/{old}/resume"), json!({"value": "ok"})).await;
    let run = w.wait_status(&old, &["completed", "blocked", "failed"], LONG).await;
    assert_eq!(
        run["output"],
        json!({"first": false, "second": false, "gate": "ok"}),
        "a run written without the patch takes the old path everywhere: {run}"
    );
    let hist = history(&w, &old).await;
    assert_eq!(
        kinds(&hist),
        ["step a", "step b", "interrupt gate", "step c"],
        "no patch marker is written for a run that answered false"
    );

    let new = w.start("patchy", json!({"n": 2})).await;
    w.wait_status(&new, &["waiting"], LONG).await;
    w.post(&format!("/v1/runs/{new}/resume"), json!({"value": "ok"})).await;
    let run = w.wait_status(&new, &["completed", "blocked", "failed"], LONG).await;
    assert_eq!(
        run["output"],
        json!({"first": true, "second": true, "gate": "ok"}),
        "{run}"
    );
    let hist = history(&w, &new).await;
    assert_eq!(
        kinds(&hist),
        ["patch x", "step a", "step b", "interrupt gate", "step c"],
        "one marker, and the later call answers from it"
    );
    new_code.stop().await;
    cleanup(&w.cfg).await;
}

// ---------------------------------------------------------------------------------------
// 10. One key at two indexes: at once (blocked) or one after the other (dedup skip).
// ---------------------------------------------------------------------------------------

/// Effects "a" and "b" with the same key. With `at_once`, a first effect "prep" leaves an
/// unsettled intent of this very attempt on the key at its index (what an unsettled earlier
/// call of the same attempt looks like in Redis).
struct Twice {
    store: ScriptStore,
    performed: Counts,
}

impl Workflow for Twice {
    const NAME: &'static str = "twice";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        let key = text(&input, "key");
        if input["at_once"].as_bool().unwrap_or(false) {
            let (store, k) = (self.store.clone(), key.clone());
            let _: u32 = ctx
                .effect("prep", format!("{key}-prep"), move |fx: EffectCtx| {
                    let (store, k) = (store.clone(), EffectKey::new(k.clone()).unwrap());
                    async move {
                        let claim = store
                            .effect_intent(&k, &fx.thread, fx.index, fx.fence, false)
                            .await
                            .expect("intent");
                        assert_eq!(claim, EffectClaim::Won);
                        Ok(1)
                    }
                })
                .await?;
        }
        let performed = self.performed.clone();
        let call = move |fx: EffectCtx| {
            let performed = performed.clone();
            async move {
                let n = performed.bump(&fx.key);
                Ok(json!({"n": n, "index": fx.index}))
            }
        };
        let a: Value = ctx.effect("a", key.clone(), call.clone()).await?;
        let b: Value = ctx.effect("b", key, call).await?;
        Ok(json!([a, b]))
    }
}

#[tokio::test]
async fn same_key_at_two_indexes_at_once_blocks_but_sequential_reuse_is_a_dedup_skip() {
    let w = World::new("hztwice", |_| {}).await;
    let performed = Counts::default();
    let mut reg = Registry::new();
    reg.register(Twice {
        store: w.store.clone(),
        performed: performed.clone(),
    });
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered("twice").await;

    let seq = w.start("twice", json!({"key": "k:seq"})).await;
    let run = w.wait_status(&seq, &["completed", "blocked", "failed"], LONG).await;
    assert_eq!(
        run["output"],
        json!([{"n": 1, "index": 0}, {"n": 1, "index": 0}]),
        "the second use records the first result: {run}"
    );
    assert_eq!(performed.get("k:seq"), 1);
    let skipped = details_of(&w, &seq, "effect_skipped").await;
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    let hist = history(&w, &seq).await;
    assert_eq!(hist["entries"][1]["key"], "k:seq");

    let once = w.start("twice", json!({"key": "k:once", "at_once": true})).await;
    let run = w.wait_status(&once, &["completed", "blocked", "failed"], LONG).await;
    assert_eq!(run["status"], "blocked", "{run}");
    assert_eq!(
        reason(&run),
        "effect key k:once is used at entries 0 and 1 of this run at once; use one key per effect",
        "{run}"
    );
    assert_eq!(performed.get("k:once"), 0);
    wk.stop().await;
    cleanup(&w.cfg).await;
}

// ---------------------------------------------------------------------------------------
// 11. Panics: in a step, in workflow code, in an effect.
// ---------------------------------------------------------------------------------------

/// Step "flaky" panics twice then succeeds; step "doomed" always panics.
struct StepPanic {
    calls: Counts,
}

impl Workflow for StepPanic {
    const NAME: &'static str = "step_panic";
    type Input = Value;
    type Output = Value;
    fn retry_policy(&self) -> RetryPolicy {
        fast_retry(3)
    }
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let calls = self.calls.clone();
        let n: u32 = ctx
            .step("flaky", || {
                let calls = calls.clone();
                async move {
                    let n = calls.bump("flaky");
                    if n < 3 {
                        panic!("flaky boom {n}");
                    }
                    Ok(n)
                }
            })
            .await?;
        let r: Result<u32, WorkflowError> = ctx
            .step("doomed", || {
                let calls = calls.clone();
                async move {
                    if calls.bump("doomed") > 0 {
                        panic!("doomed boom");
                    }
                    Ok(0)
                }
            })
            .await;
        match r {
            Err(WorkflowError::CallFailed {
                kind, name, message, ..
            }) => Ok(json!({"flaky": n, "doomed": {"kind": kind, "name": name, "message": message}})),
            Ok(_) => Err(WorkflowError::failed("doomed succeeded")),
            Err(e) => Err(e),
        }
    }
}

#[tokio::test]
async fn a_panic_in_a_step_is_a_failed_attempt_retried_then_returned_as_call_failed() {
    let w = World::new("hzsteppanic", |_| {}).await;
    let calls = Counts::default();
    let mut reg = Registry::new();
    reg.register(StepPanic { calls: calls.clone() });
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered("step_panic").await;
    let t = w.start("step_panic", json!(null)).await;
    let run = w.wait_status(&t, &["completed", "blocked", "failed"], LONG).await;
    assert_eq!(
        run["output"],
        json!({"flaky": 3, "doomed": {"kind": "step", "name": "doomed", "message": "panicked: doomed boom"}}),
        "{run}"
    );
    assert_eq!((calls.get("flaky"), calls.get("doomed")), (3, 3));
    let hist = history(&w, &t).await;
    let e = &hist["entries"];
    assert_eq!(
        (e[0]["outcome"].as_str(), e[0]["attempts"].as_u64()),
        (Some("ok"), Some(3))
    );
    assert_eq!(
        (e[1]["outcome"].as_str(), e[1]["attempts"].as_u64()),
        (Some("error"), Some(3))
    );
    assert_eq!(e[1]["error"], "panicked: doomed boom");
    let retried = details_of(&w, &t, "retried").await;
    assert_eq!(retried.len(), 4, "{retried:?}");
    assert!(retried[0].contains("panicked: flaky boom 1"), "{retried:?}");
    wk.stop().await;
    cleanup(&w.cfg).await;
}

/// Step "doomed" always fails (retryable), with a back-off long enough to kill the worker in.
struct AlwaysFails {
    calls: Counts,
}

impl Workflow for AlwaysFails {
    const NAME: &'static str = "always_fails";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let calls = self.calls.clone();
        let policy = RetryPolicy {
            initial: Duration::from_secs(3),
            jitter: 0.0,
            ..RetryPolicy::attempts(3)
        };
        let r: Result<u32, WorkflowError> = ctx
            .step("doomed", || {
                let calls = calls.clone();
                async move { Err::<u32, _>(StepError::retryable(format!("down {}", calls.bump("doomed")))) }
            })
            .retry(policy.clone())
            .await;
        match r {
            Err(WorkflowError::CallFailed { message, .. }) => Ok(json!(message)),
            other => Err(WorkflowError::failed(format!("unexpected: {other:?}"))),
        }
    }
}

/// The retry budget is the run's, not the slice's: a worker killed during the back-off after
/// the first failed attempt leaves the count in the run, and the worker that takes over makes
/// attempts 2 and 3 only (without it, it would start over at 1 and call the step 4 times).
#[tokio::test]
async fn a_worker_killed_between_retries_hands_on_the_attempt_count() {
    let w = World::new("hzretrykill", |_| {}).await;
    let calls = Counts::default();
    let mut reg = Registry::new();
    reg.register(AlwaysFails { calls: calls.clone() });
    let first = InProc::start(&w.cfg, reg);
    w.wait_registered("always_fails").await;
    let t = w.start("always_fails", json!(null)).await;
    wait_until(LONG, "the first retry recorded", || async {
        (!details_of(&w, &t, "retried").await.is_empty()).then_some(())
    })
    .await;
    first.kill().await;
    assert_eq!(calls.get("doomed"), 1);
    let mut reg = Registry::new();
    reg.register(AlwaysFails { calls: calls.clone() });
    let second = InProc::start(&w.cfg, reg);
    let run = w.wait_status(&t, &["completed", "blocked", "failed"], LONG).await;
    assert_eq!(run["output"], json!("down 3"), "{run}");
    assert_eq!(calls.get("doomed"), 3, "the step ran once more than its budget");
    let e = &history(&w, &t).await["entries"];
    assert_eq!(
        (e[0]["outcome"].as_str(), e[0]["attempts"].as_u64()),
        (Some("error"), Some(3))
    );
    let retried = details_of(&w, &t, "retried").await;
    assert_eq!(retried.len(), 2, "{retried:?}");
    assert!(retried[1].contains("attempt 2: down 2"), "{retried:?}");
    let count: Option<String> = w
        .store
        .query(redis::cmd("HGET").arg(w.store.keys().run(&t).run).arg("t:0"))
        .await
        .unwrap();
    assert_eq!(count, None, "the entry's commit drops its retry count");
    second.stop().await;
    cleanup(&w.cfg).await;
}

/// Panics after one step unless `input.panic` is false.
struct CodePanic;

impl Workflow for CodePanic {
    const NAME: &'static str = "code_panic";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        let _: u32 = ctx.step("before", || async { Ok(1) }).await?;
        if input["panic"].as_bool().unwrap_or(true) {
            panic!("the code is broken");
        }
        Ok(json!("fine"))
    }
}

#[tokio::test]
async fn a_panic_in_workflow_code_blocks_the_run() {
    let w = World::new("hzcodepanic", |_| {}).await;
    let mut reg = Registry::new();
    reg.register(CodePanic);
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered("code_panic").await;
    let t = w.start("code_panic", json!({"panic": true})).await;
    let run = w.wait_status(&t, &["blocked", "completed", "failed"], LONG).await;
    assert_eq!(run["status"], "blocked", "{run}");
    assert_eq!(
        reason(&run),
        "workflow code panicked after entry 1: the code is broken; fix the code and retry the run"
    );
    assert!(run.get("blocked_effect").is_none(), "{run}");
    assert_eq!(run["step"], 1, "the step before the panic stays journaled");
    wk.stop().await;
    cleanup(&w.cfg).await;
}

/// An effect whose function panics on its first call.
struct EffectPanic {
    calls: Counts,
}

impl Workflow for EffectPanic {
    const NAME: &'static str = "effect_panic";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        let calls = self.calls.clone();
        let v: Value = ctx
            .effect("charge", format!("card:{}", text(&input, "id")), |fx: EffectCtx| {
                let calls = calls.clone();
                async move {
                    let n = calls.bump(&fx.key);
                    if n == 1 {
                        panic!("provider client crashed");
                    }
                    Ok(json!({"n": n}))
                }
            })
            .await?;
        Ok(v)
    }
}

#[tokio::test]
async fn a_panic_in_an_effect_is_outcome_unknown_and_blocks_on_the_key() {
    let w = World::new("hzfxpanic", |_| {}).await;
    let calls = Counts::default();
    let mut reg = Registry::new();
    reg.register(EffectPanic { calls: calls.clone() });
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered("effect_panic").await;
    let t = w.start("effect_panic", json!({"id": 1})).await;
    let run = w.wait_status(&t, &["blocked", "completed", "failed"], LONG).await;
    assert_eq!(run["status"], "blocked", "{run}");
    assert_eq!(run["blocked_effect"], "card:1", "{run}");
    assert!(reason(&run).contains("the effect function panicked"), "{run}");
    assert!(reason(&run).contains("provider client crashed"), "{run}");
    assert_eq!(run["blocked_effect_holder"]["thread_id"], t.as_str(), "{run}");
    assert_eq!(calls.get("card:1"), 1, "a panic is not retried: it may have happened");
    let rec = record(&w, "card:1").await.expect("intent kept");
    assert_eq!(rec["state"], "intent", "in doubt: never released: {rec}");
    // Settled as not applied: the run performs it again.
    let (code, body) = w
        .post(
            &format!("/v1/runs/{t}/effects/card:1/resolve"),
            json!({"applied": false}),
        )
        .await;
    assert_eq!(code, 202, "{body}");
    let run = w.wait_status(&t, &["completed"], LONG).await;
    assert_eq!(run["output"], json!({"n": 2}));
    wk.stop().await;
    cleanup(&w.cfg).await;
}

// ---------------------------------------------------------------------------------------
// 12. Client ids make a retried resume or signal deliver once.
// ---------------------------------------------------------------------------------------

/// Two interrupts "gate" in a row, then two signals "go".
struct Gates;

impl Workflow for Gates {
    const NAME: &'static str = "gates";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let a: Value = ctx.interrupt("gate", json!({"n": 1})).await?;
        let b: Value = ctx.interrupt("gate", json!({"n": 2})).await?;
        let x: Value = ctx.wait_signal("go").await?;
        let y: Value = ctx.wait_signal("go").await?;
        Ok(json!([a, b, x, y]))
    }
}

#[tokio::test]
async fn a_retried_resume_or_signal_with_the_same_client_id_delivers_once() {
    let w = World::new("hzids", |_| {}).await;
    let mut reg = Registry::new();
    reg.register(Gates);
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered("gates").await;
    let t = w.start("gates", json!(null)).await;
    w.wait_status(&t, &["waiting"], LONG).await;
    let resume = format!("/v1/runs/{t}/resume");
    let (code, body) = w.post(&resume, json!({"value": "A", "id": "A"})).await;
    assert_eq!((code, body.get("duplicate")), (202, None), "{body}");
    // The first gate is answered; the run waits at the second.
    let run = wait_until(LONG, "the run waits at the second gate", || async {
        let run = w.run(&t).await;
        (run["status"] == "waiting" && run["step"] == 1).then_some(run)
    })
    .await;
    assert_eq!(run["interrupts"][0]["payload"], json!({"n": 2}), "{run}");
    // A retried POST of the first answer delivers nothing.
    let (code, body) = w.post(&resume, json!({"value": "A", "id": "A"})).await;
    assert_eq!((code, &body["duplicate"]), (202, &json!(true)), "{body}");
    let run = w.run(&t).await;
    assert_eq!(
        (run["status"].as_str(), run["step"].as_u64()),
        (Some("waiting"), Some(1)),
        "{run}"
    );
    let pending: Option<String> = w
        .store
        .query(redis::cmd("HGET").arg(w.store.keys().run(&t).signals).arg("i:gate"))
        .await
        .unwrap();
    assert_eq!(pending, None, "no answer was stored for the second gate");
    let (code, body) = w.post(&resume, json!({"value": "B", "id": "B"})).await;
    assert_eq!((code, body.get("duplicate")), (202, None), "{body}");
    // Signals: a retried POST with the same id is not buffered twice.
    let go = format!("/v1/runs/{t}/signals/go");
    let (code, body) = w.post(&go, json!({"value": "x", "id": "X"})).await;
    assert_eq!((code, body.get("duplicate")), (202, None), "{body}");
    let (code, body) = w.post(&go, json!({"value": "x", "id": "X"})).await;
    assert_eq!((code, &body["duplicate"]), (202, &json!(true)), "{body}");
    let (code, body) = w.post(&go, json!({"value": "y", "id": "Y"})).await;
    assert_eq!((code, body.get("duplicate")), (202, None), "{body}");
    let run = w.wait_status(&t, &["completed", "blocked", "failed"], LONG).await;
    assert_eq!(run["output"], json!(["A", "B", "x", "y"]), "{run}");
    wk.stop().await;
    cleanup(&w.cfg).await;
}

// ---------------------------------------------------------------------------------------
// 13. Blocked and waiting runs are listed from their own indexes, however old.
// ---------------------------------------------------------------------------------------

async fn listed(w: &World, status: &str) -> BTreeSet<String> {
    let (code, body) = w.get(&format!("/v1/runs?status={status}&limit=1000")).await;
    assert_eq!(code, 200, "{body}");
    body["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r["status"], status, "{r}");
            r["thread_id"].as_str().unwrap().to_owned()
        })
        .collect()
}

#[tokio::test]
async fn blocked_and_waiting_runs_are_listed_after_the_creation_index_is_trimmed() {
    let w = World::new("hzlist", |_| {}).await;
    let mut reg = Registry::new();
    reg.register(CodePanic);
    reg.register(Gates);
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered("gates").await;
    let mut blocked = BTreeSet::new();
    let mut waiting = BTreeSet::new();
    let mut completed = BTreeSet::new();
    for _ in 0..4 {
        blocked.insert(w.start("code_panic", json!({"panic": true})).await);
        waiting.insert(w.start("gates", json!(null)).await);
    }
    for _ in 0..2 {
        completed.insert(w.start("code_panic", json!({"panic": false})).await);
    }
    for t in &blocked {
        w.wait_status(t, &["blocked"], LONG).await;
    }
    for t in &waiting {
        w.wait_status(t, &["waiting"], LONG).await;
    }
    for t in &completed {
        w.wait_status(t, &["completed"], LONG).await;
    }
    let ids = |s: &BTreeSet<ThreadId>| s.iter().map(|t| t.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(listed(&w, "completed").await, ids(&completed), "before trimming");

    // The creation-time indexes are trimmed (as after the retention).
    let mut deleted = 0;
    for p in 0..w.store.keys().partitions() {
        let n: i64 = w
            .store
            .query(redis::cmd("DEL").arg(w.store.keys().index(p)))
            .await
            .unwrap();
        deleted += n;
    }
    assert!(deleted > 0, "the runs were indexed by creation time");

    assert_eq!(listed(&w, "blocked").await, ids(&blocked));
    assert_eq!(listed(&w, "waiting").await, ids(&waiting));
    assert!(
        listed(&w, "completed").await.is_empty(),
        "completed runs come from the trimmed index"
    );
    wk.stop().await;
    cleanup(&w.cfg).await;
}

/// A parallel group whose first effect ends in doubt (its attempt timed out) while the second
/// finished: the second's done record is the only proof it happened until the group's
/// entries are journaled in order (issue 24, hole 6).
struct Pair {
    quick_calls: Arc<Mutex<u32>>,
}

impl Workflow for Pair {
    const NAME: &'static str = "pair";
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let t = ctx.thread_id().to_string();
        let slow = EffectOptions {
            retry: Some(RetryPolicy::attempts(1).with_attempt_timeout(Duration::from_millis(300))),
            ..EffectOptions::default()
        };
        let calls = Arc::clone(&self.quick_calls);
        let (slow, quick) = futures::join!(
            ctx.effect("slow", format!("slow:{t}"), |_fx: EffectCtx| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Ok(json!("slow"))
            })
            .options(slow),
            ctx.effect("quick", format!("quick:{t}"), move |_fx: EffectCtx| {
                let calls = Arc::clone(&calls);
                async move {
                    *calls.lock().unwrap() += 1;
                    Ok(json!("quick"))
                }
            }),
        );
        let out = vec![slow?, quick?];
        Ok(json!(out))
    }
}

/// The run blocks on the first effect (its attempt timed out: outcome unknown); the second's
/// done record must outlive `SAVEPOINT_EFFECT_TTL_SECS` (2 s here) while the run is blocked,
/// so the resolve that comes later journals it instead of calling it again. Before, the record
/// expired and the resumed run called the second effect a second time.
#[tokio::test]
async fn a_group_effect_done_before_the_run_blocked_is_not_repeated_after_its_record_would_expire() {
    let w = World::new("keepdone", |c| c.effect_ttl_secs = 2).await;
    let quick_calls = Arc::new(Mutex::new(0));
    let mut reg = Registry::new();
    reg.register(Pair {
        quick_calls: Arc::clone(&quick_calls),
    });
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered("pair").await;
    let t = w.start("pair", json!({})).await;
    let blocked = w.wait_status(&t, &["blocked"], LONG).await;
    assert!(
        blocked["blocked_reason"].as_str().unwrap_or("").contains("timed out"),
        "{blocked}"
    );
    assert_eq!(*quick_calls.lock().unwrap(), 1);
    let quick = EffectKey::new(format!("quick:{t}")).unwrap();
    let ttl: i64 = w
        .store
        .query(redis::cmd("PTTL").arg(w.store.keys().effect(&quick)))
        .await
        .unwrap();
    assert_eq!(
        ttl, -1,
        "the done record of an effect the blocked run has not journaled never expires"
    );
    // Past the effect TTL, an operator resolves the first effect as applied.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (s, body) = w
        .post(
            &format!("/v1/runs/{t}/effects/slow:{t}/resolve"),
            json!({"applied": true, "result": "slow"}),
        )
        .await;
    assert_eq!(s, 202, "{body}");
    let done = w.wait_status(&t, &["completed"], LONG).await;
    assert_eq!(done["output"], json!(["slow", "quick"]), "{done}");
    assert_eq!(
        *quick_calls.lock().unwrap(),
        1,
        "the finished effect was not called again"
    );
    let ttl: i64 = w
        .store
        .query(redis::cmd("PTTL").arg(w.store.keys().effect(&quick)))
        .await
        .unwrap();
    assert!(ttl > 0, "journaled now, the record expires again: {ttl}");
    wk.stop().await;
    cleanup(&w.cfg).await;
}

/// One effect, counted at its provider, then a step.
struct SendOnce {
    calls: Arc<Mutex<u32>>,
}

impl Workflow for SendOnce {
    const NAME: &'static str = "send_once";
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        let calls = Arc::clone(&self.calls);
        let key = input["key"]
            .as_str()
            .map_or_else(|| format!("send:{}", ctx.thread_id()), str::to_owned);
        let sent: Value = ctx
            .effect("send", key, move |_fx: EffectCtx| {
                let calls = Arc::clone(&calls);
                async move {
                    *calls.lock().unwrap() += 1;
                    Ok(json!("sent"))
                }
            })
            .await?;
        let _: u32 = ctx.step("after", || async { Ok(1u32) }).await?;
        Ok(sent)
    }
}

fn send_once(calls: &Arc<Mutex<u32>>) -> Registry {
    let mut reg = Registry::new();
    reg.register(SendOnce {
        calls: Arc::clone(calls),
    });
    reg
}

/// The PTTL of the done record of `key` (-2: none, -1: no expiry).
async fn record_ttl(w: &World, key: &str) -> i64 {
    let key = EffectKey::new(key.to_owned()).unwrap();
    w.store
        .query(redis::cmd("PTTL").arg(w.store.keys().effect(&key)))
        .await
        .unwrap()
}

/// A worker dies right after an effect's done record and before its entry (issue 49, hole
/// 2); an operator pauses the run, which stays stopped for longer than
/// `SAVEPOINT_EFFECT_TTL_SECS` (1 s here). The record is the only proof the effect happened,
/// so it has no expiry until the entry is journaled: after the unpause the run journals the
/// recorded result and the provider is called once. (Before, the record kept its TTL, expired
/// under the paused run, and the resumed run called the provider a second time.) A run that
/// is cancelled instead gives the record its TTL: nothing needs it any more.
#[tokio::test]
async fn an_effect_done_before_a_crash_is_not_repeated_after_a_pause_longer_than_its_records_ttl() {
    let w = World::new("donepause", |c| c.effect_ttl_secs = 1).await;
    let calls = Arc::new(Mutex::new(0));
    let a = InProc::with_failpoints(&w.cfg, send_once(&calls), "effect.after_done=abort@1");
    w.wait_registered(SendOnce::NAME).await;
    let t = w.start(SendOnce::NAME, json!({})).await;
    a.crashed().await;
    let key = format!("send:{t}");
    assert_eq!(*calls.lock().unwrap(), 1);
    assert_eq!(record_ttl(&w, &key).await, -1, "the only proof has no expiry");
    let (code, body) = w.post(&format!("/v1/runs/{t}/pause"), json!({})).await;
    assert_eq!(code, 200, "{body}");
    let b = InProc::start(&w.cfg, send_once(&calls));
    w.wait_status(&t, &["paused"], LONG).await;
    // Stopped past the effect TTL.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(record_ttl(&w, &key).await, -1, "kept while the run is stopped");
    let (code, body) = w.post(&format!("/v1/runs/{t}/unpause"), json!({})).await;
    assert_eq!(code, 200, "{body}");
    let run = w.wait_status(&t, &["completed", "failed", "blocked"], LONG).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["output"], json!("sent"), "{run}");
    assert_eq!(*calls.lock().unwrap(), 1, "the provider was called again");
    let ttl = record_ttl(&w, &key).await;
    assert!(
        ttl > 0 || ttl == -2,
        "journaled, the record is in its dedup window: {ttl}"
    );

    // The same crash, then a cancel: the record no run needs any more expires.
    let c = InProc::with_failpoints(&w.cfg, send_once(&calls), "effect.after_done=abort@1");
    b.stop().await;
    let t2 = w.start(SendOnce::NAME, json!({})).await;
    c.crashed().await;
    let key2 = format!("send:{t2}");
    assert_eq!(record_ttl(&w, &key2).await, -1);
    let (code, body) = w.post(&format!("/v1/runs/{t2}/cancel"), json!({})).await;
    assert!(code < 300, "{code} {body}");
    let ttl = record_ttl(&w, &key2).await;
    assert!(ttl > 0 || ttl == -2, "a cancelled run's record expires: {ttl}");
    cleanup(&w.cfg).await;
}

/// The same crash and pause, and meanwhile another run with the same key finds the record
/// done and journals it (review of hole 2's fix): that run must not give the record its TTL
/// while its owner, paused, has not journaled it, or the owner calls the provider again.
#[tokio::test]
async fn a_run_sharing_the_key_does_not_expire_the_proof_its_paused_owner_needs() {
    let w = World::new("donepshared", |c| c.effect_ttl_secs = 1).await;
    let calls = Arc::new(Mutex::new(0));
    let key = format!("shared:{}", w.cfg.namespace);
    let a = InProc::with_failpoints(&w.cfg, send_once(&calls), "effect.after_done=abort@1");
    w.wait_registered(SendOnce::NAME).await;
    let owner = w.start(SendOnce::NAME, json!({"key": key})).await;
    a.crashed().await;
    let (code, body) = w.post(&format!("/v1/runs/{owner}/pause"), json!({})).await;
    assert_eq!(code, 200, "{body}");
    let b = InProc::start(&w.cfg, send_once(&calls));
    w.wait_status(&owner, &["paused"], LONG).await;
    let other = w.start(SendOnce::NAME, json!({"key": key})).await;
    let run = w.wait_status(&other, &["completed", "failed", "blocked"], LONG).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(record_ttl(&w, &key).await, -1, "the paused owner still needs it");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let (code, body) = w.post(&format!("/v1/runs/{owner}/unpause"), json!({})).await;
    assert_eq!(code, 200, "{body}");
    let run = w.wait_status(&owner, &["completed", "failed", "blocked"], LONG).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(*calls.lock().unwrap(), 1, "the provider was called again");
    let ttl = record_ttl(&w, &key).await;
    assert!(ttl > 0 || ttl == -2, "journaled by its owner: {ttl}");
    b.stop().await;
    cleanup(&w.cfg).await;
}

/// What the provider of [`Trio`] saw: calls begun and calls applied, by key.
#[derive(Default)]
struct TrioProvider {
    begun: Mutex<HashMap<String, u32>>,
    applied: Mutex<HashMap<String, u32>>,
}

/// Three `block` effects side by side; a first call of each hangs (the provider is slow) until
/// its worker is killed, a later one applies at once.
struct Trio(Arc<TrioProvider>);

impl Workflow for Trio {
    const NAME: &'static str = "trio";
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let t = ctx.thread_id().to_string();
        let call = |name: &'static str| {
            let p = Arc::clone(&self.0);
            let key = format!("{name}:{t}");
            ctx.effect(name, key.clone(), move |_fx: EffectCtx| {
                let (p, key) = (Arc::clone(&p), key.clone());
                async move {
                    let first = {
                        let mut b = p.begun.lock().unwrap();
                        let n = b.entry(key.clone()).or_insert(0);
                        *n += 1;
                        *n == 1
                    };
                    if first {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                    }
                    *p.applied.lock().unwrap().entry(key).or_insert(0) += 1;
                    Ok(json!(format!("{name} by the provider")))
                }
            })
        };
        let (a, b, c) = futures::join!(call("reserve.a"), call("reserve.b"), call("reserve.c"));
        Ok(json!([a?, b?, c?]))
    }
}

/// A worker killed with three effects of a run in flight side by side leaves all three in
/// doubt: the diagnosis lists every one and offers one action that settles them together; a
/// body that names another set is refused (422, nothing changed); the group resolve settles
/// each as told (two applied with the operator's results, one released and performed once)
/// and the run completes at once, with no further resolve (issue 50 §2).
#[tokio::test]
async fn every_effect_in_doubt_is_listed_and_settled_together() {
    let w = World::new("trio", |_| {}).await;
    let provider = Arc::new(TrioProvider::default());
    let registry = || {
        let mut r = Registry::new();
        r.register(Trio(Arc::clone(&provider)));
        r
    };
    let wk = InProc::start(&w.cfg, registry());
    w.wait_registered(Trio::NAME).await;
    let t = w.start(Trio::NAME, json!({})).await;
    wait_until(LONG, "three effects begun", || async {
        (provider.begun.lock().unwrap().len() == 3).then_some(())
    })
    .await;
    wk.kill().await;
    let wk = InProc::start(&w.cfg, registry());
    w.wait_status(&t, &["blocked"], LONG).await;
    let keys: Vec<String> = ["reserve.a", "reserve.b", "reserve.c"]
        .iter()
        .map(|n| format!("{n}:{t}"))
        .collect();

    let (code, d) = w.get(&format!("/v1/runs/{t}/diagnosis")).await;
    assert_eq!((code, &d["case"]), (200, &json!("blocked_in_doubt")), "{d}");
    let evidence = d["evidence"].to_string();
    for k in &keys {
        assert!(evidence.contains(k.as_str()), "{k} in {d}");
    }
    let group = &d["actions"][0];
    assert_eq!(group["path"], format!("/v1/runs/{t}/effects/resolve"), "{d}");
    assert!(group["command"].as_str().unwrap().contains("--all"), "{group}");

    let path = format!("/v1/runs/{t}/effects/resolve");
    let (code, body) = w.post(&path, json!({"effects": {&keys[0]: {"applied": false}}})).await;
    assert_eq!(code, 422, "{body}");
    assert!(body.to_string().contains("missing"), "{body}");
    assert_eq!(w.run(&t).await["status"], "blocked", "nothing changed");

    let effects = json!({
        &keys[0]: {"applied": true, "result": "reserve.a by the operator"},
        &keys[1]: {"applied": false},
        &keys[2]: {"applied": true, "result": "reserve.c by the operator"},
    });
    let (code, body) = w.post(&path, json!({ "effects": effects })).await;
    assert_eq!(code, 202, "{body}");
    assert_eq!(body["effects"][&keys[1]]["state"], "released", "{body}");
    let run = w.wait_status(&t, &["completed"], LONG).await;
    assert_eq!(
        run["output"],
        json!([
            "reserve.a by the operator",
            "reserve.b by the provider",
            "reserve.c by the operator"
        ])
    );
    let applied = provider.applied.lock().unwrap().clone();
    assert_eq!(
        applied.get(&keys[1]),
        Some(&1),
        "the released one performed once: {applied:?}"
    );
    assert_eq!(applied.len(), 1, "the others never performed again: {applied:?}");
    wk.stop().await;
}
