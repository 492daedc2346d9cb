//! Pipelined checkpoints (ARCHITECTURE §4a) under store faults placed exactly: the embedded
//! engine's fault plan delays, refuses or loses the reply of the `commit` scripts of a run, so
//! a batch is in flight, lost or applied-unanswered at a known moment. Always on the embedded
//! backend (whatever the tier): only it lets a test place a fault at one script. The same
//! mechanism runs on Redis in every other suite, and the simulator places faults at random
//! with its barrier witness (invariant 13).

use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use savepoint::journal::Outcome;
use savepoint::workflow::{Ctx, Registry, Workflow, WorkflowError};
use savepoint_core::mem::{Fault, Faults, Op};
use savepoint_integration_tests::embedded_config;
use savepoint_integration_tests::inproc::InProc;
use savepoint_integration_tests::scenario::World;
use savepoint_runtime::config::Config;

const LONG: Duration = Duration::from_secs(20);
const STEPS: u32 = 12;

/// Times each step ran and each effect key was applied, outside the engine.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<HashMap<String, u32>>>);

impl Seen {
    fn bump(&self, k: &str) {
        *self.0.lock().unwrap().entry(k.to_owned()).or_default() += 1;
    }

    fn get(&self, k: &str) -> u32 {
        self.0.lock().unwrap().get(k).copied().unwrap_or(0)
    }
}

/// `STEPS` instant steps, `s<i>` returning `i * 10` (each `.durable()` when `durable`); with
/// `effect_at`, an effect at that position whose key is derived from the step before it.
struct Chain {
    seen: Seen,
    effect_at: Option<u32>,
    durable: bool,
}

impl Workflow for Chain {
    const NAME: &'static str = "pipe_chain";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let mut last = 0u32;
        for i in 0..STEPS {
            if self.effect_at == Some(i) {
                let seen = self.seen.clone();
                let key = format!("mail:{last}");
                let _: Value = ctx
                    .effect("mail", key, move |fx| {
                        let seen = seen.clone();
                        async move {
                            seen.bump(&fx.key);
                            Ok(json!(fx.key))
                        }
                    })
                    .await?;
            }
            let seen = self.seen.clone();
            let step = ctx.step(&format!("s{i}"), move || {
                let seen = seen.clone();
                async move {
                    seen.bump(&format!("s{i}"));
                    Ok(i * 10)
                }
            });
            last = if self.durable {
                step.durable().await?
            } else {
                step.await?
            };
        }
        Ok(json!(last))
    }
}

/// The fault plan: every script named, timed; `commit` scripts delayed, and the `nth` one (from
/// 1) given `fault`.
struct Plan {
    log: Mutex<Vec<(Instant, String)>>,
    commit_delay: Duration,
    nth: Option<(usize, Fault)>,
    commits: Mutex<usize>,
}

impl Plan {
    fn new(commit_delay: Duration, nth: Option<(usize, Fault)>) -> Arc<Self> {
        Arc::new(Self {
            log: Mutex::default(),
            commit_delay,
            nth,
            commits: Mutex::new(0),
        })
    }

    fn scripts(&self, name: &str) -> Vec<Instant> {
        let log = self.log.lock().unwrap();
        log.iter().filter(|(_, n)| n == name).map(|(t, _)| *t).collect()
    }
}

impl Faults for Plan {
    fn decide(&self, op: Op<'_>) -> Fault {
        let Op::Script(name) = op else { return Fault::Pass };
        self.log.lock().unwrap().push((Instant::now(), name.to_owned()));
        if name != "commit" {
            return Fault::Pass;
        }
        let mut n = self.commits.lock().unwrap();
        *n += 1;
        match self.nth {
            Some((at, fault)) if at == *n => fault,
            _ if self.commit_delay.is_zero() => Fault::Pass,
            _ => Fault::Delay(self.commit_delay),
        }
    }
}

/// A world on the embedded backend with the fault plan installed (`tune` adjusts the config).
async fn embedded_world(prefix: &str, plan: Arc<Plan>, tune: impl FnOnce(&mut Config)) -> World {
    let w = World::new(prefix, move |cfg| {
        let e = embedded_config(&cfg.namespace);
        cfg.redis_url = e.redis_url;
        cfg.amqp_url = e.amqp_url;
        tune(cfg);
    })
    .await;
    w.store
        .mem_engine()
        .expect("the embedded backend")
        .set_faults(Some(plan as Arc<dyn Faults>));
    w
}

/// [`embedded_world`] with a 1 s lease, `checkpoints`, and a worker serving `chain`.
async fn world(prefix: &str, plan: Arc<Plan>, checkpoints: &str, chain: Chain) -> (World, InProc) {
    let mode = checkpoints.to_owned();
    let w = embedded_world(prefix, plan, move |cfg| {
        cfg.worker.checkpoints = mode;
        cfg.lease_ms = 1000;
        cfg.lease_margin_ms = 200;
    })
    .await;
    let mut reg = Registry::new();
    reg.register(chain);
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered(Chain::NAME).await;
    (w, wk)
}

/// The run's journal as (name, value) pairs, read from the store.
async fn journal(w: &World, t: &savepoint_core::ids::ThreadId) -> Vec<(String, Value)> {
    let (_, entries) = w.store.get(t).await.expect("read").expect("the run");
    entries
        .iter()
        .map(|e| match &e.outcome {
            Outcome::Ok(v) => (e.name.clone(), v.clone()),
            Outcome::Err(m) => (e.name.clone(), json!({ "error": m })),
        })
        .collect()
}

fn chain_journal(effect_at: Option<u32>) -> Vec<(String, Value)> {
    let mut j = Vec::new();
    for i in 0..STEPS {
        if effect_at == Some(i) {
            j.push(("mail".to_owned(), json!(format!("mail:{}", (i - 1) * 10))));
        }
        j.push((format!("s{i}"), json!(i * 10)));
    }
    j
}

#[tokio::test]
async fn steps_go_on_while_their_commit_is_in_flight_and_the_end_carries_the_rest() {
    // (checkpoints setting, every step `.durable()`, most commits)
    let cases = [
        ("pipelined", false, 2),
        ("sync", false, STEPS as usize),
        ("pipelined", true, STEPS as usize),
    ];
    for (mode, durable, most_commits) in cases {
        let plan = Plan::new(Duration::from_millis(40), None);
        let seen = Seen::default();
        let chain = Chain {
            seen: seen.clone(),
            effect_at: None,
            durable,
        };
        let (w, wk) = world("pipebatch", plan.clone(), mode, chain).await;
        let t = w.start(Chain::NAME, json!({})).await;
        let run = w.wait_status(&t, &["completed"], LONG).await;
        assert_eq!(run["output"], json!((STEPS - 1) * 10), "{mode}: {run}");
        assert_eq!(journal(&w, &t).await, chain_journal(None), "{mode}");
        let commits = plan.scripts("commit").len();
        if mode == "pipelined" && !durable {
            // The first step's commit went out alone; the eleven steps after it ran while it
            // was in flight and the finish carried them: one commit, not twelve.
            assert!(commits <= most_commits, "{mode}: {commits} commits for {STEPS} steps");
        } else {
            assert_eq!(commits, most_commits, "{mode}, durable {durable}: one commit per step");
        }
        for i in 0..STEPS {
            assert_eq!(seen.get(&format!("s{i}")), 1, "{mode}: step s{i} ran once");
        }
        wk.stop().await;
    }
}

#[tokio::test]
async fn an_effect_keyed_on_a_step_result_waits_until_that_result_is_durable() {
    let delay = Duration::from_millis(150);
    let plan = Plan::new(delay, None);
    let seen = Seen::default();
    let chain = Chain {
        seen: seen.clone(),
        effect_at: Some(5),
        durable: false,
    };
    let (w, wk) = world("pipebarrier", plan.clone(), "pipelined", chain).await;
    let t = w.start(Chain::NAME, json!({})).await;
    w.wait_status(&t, &["completed"], LONG).await;
    assert_eq!(journal(&w, &t).await, chain_journal(Some(5)));
    // Every commit sent before the effect's first write had landed (each takes `delay`)
    // when that write went out.
    let begin = plan.scripts("effect_begin")[0];
    let landed_before = plan
        .scripts("commit")
        .into_iter()
        .filter(|sent| *sent < begin)
        .map(|sent| sent + delay)
        .max()
        .expect("a commit before the effect");
    assert!(
        begin >= landed_before,
        "the effect's begin record went out {:?} before the step commit under it landed",
        landed_before - begin
    );
    assert_eq!(
        seen.get("mail:40"),
        1,
        "the effect ran once, keyed on s4's recorded result"
    );
    wk.stop().await;
}

#[tokio::test]
async fn a_batch_refused_or_answered_into_the_void_ends_the_slice_and_the_run_completes_once() {
    for fault in [Fault::Fail, Fault::LoseReply] {
        // The second commit is the batch behind the first: it fails before it is applied,
        // or is applied and its reply is lost; the slice stops there, the lease runs out,
        // and the next slice replays what landed and runs the rest.
        let plan = Plan::new(Duration::from_millis(30), Some((2, fault)));
        let seen = Seen::default();
        let chain = Chain {
            seen: seen.clone(),
            effect_at: Some(8),
            durable: false,
        };
        let (w, wk) = world("pipelost", plan.clone(), "pipelined", chain).await;
        let t = w.start(Chain::NAME, json!({})).await;
        let run = w.wait_status(&t, &["completed"], LONG).await;
        assert_eq!(run["output"], json!((STEPS - 1) * 10), "{fault:?}");
        assert_eq!(journal(&w, &t).await, chain_journal(Some(8)), "{fault:?}");
        assert_eq!(
            seen.get("mail:70"),
            1,
            "{fault:?}: the effect after the lost batch ran once"
        );
        assert_eq!(seen.get("s0"), 1, "{fault:?}: s0's commit landed: never run again");
        // The batch s1..s7 ran again only if it was never applied.
        let again = u32::from(fault == Fault::Fail);
        for i in 1..8 {
            assert_eq!(seen.get(&format!("s{i}")), 1 + again, "{fault:?}: s{i}");
        }
        for i in 8..STEPS {
            assert_eq!(
                seen.get(&format!("s{i}")),
                1,
                "{fault:?}: s{i} came after the slice that stopped"
            );
        }
        wk.stop().await;
    }
}

#[tokio::test]
async fn a_worker_killed_with_a_batch_in_flight_loses_only_steps_after_its_last_effect() {
    // Commits take 300 ms: the worker is killed while the batch after the effect is in flight
    // (never applied); another worker takes the run over after the lease.
    let plan = Plan::new(Duration::from_millis(300), None);
    let seen = Seen::default();
    let chain = Chain {
        seen: seen.clone(),
        effect_at: Some(2),
        durable: false,
    };
    let (w, victim) = world("pipekill", plan.clone(), "pipelined", chain).await;
    let t = w.start(Chain::NAME, json!({})).await;
    let deadline = Instant::now() + LONG;
    while seen.get("s11") == 0 {
        assert!(Instant::now() < deadline, "the steps never ran");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    victim.kill().await;
    let durable = journal(&w, &t).await.len();
    assert!(
        durable < chain_journal(Some(2)).len(),
        "the kill came before the end was written"
    );
    let mut reg = Registry::new();
    reg.register(Chain {
        seen: seen.clone(),
        effect_at: Some(2),
        durable: false,
    });
    let rescuer = InProc::start(&w.cfg, reg);
    let run = w.wait_status(&t, &["completed"], LONG).await;
    assert_eq!(run["output"], json!((STEPS - 1) * 10));
    assert_eq!(journal(&w, &t).await, chain_journal(Some(2)));
    assert_eq!(seen.get("mail:10"), 1, "the effect ran once");
    assert_eq!(seen.get("s0"), 1, "s0 was durable before the effect: never run again");
    assert_eq!(seen.get("s1"), 1, "s1 was durable before the effect: never run again");
    assert_eq!(
        seen.get("s11"),
        2,
        "the last step's commit was lost with the worker: it ran again"
    );
    rescuer.stop().await;
}

/// `n` instant steps in one slice.
struct Long {
    n: u32,
}

impl Workflow for Long {
    const NAME: &'static str = "pipe_long";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let mut sum = 0u64;
        for i in 0..self.n {
            sum += ctx.step(&format!("s{i}"), || async move { Ok(u64::from(i)) }).await?;
        }
        Ok(json!(sum))
    }
}

#[tokio::test]
async fn thousands_of_steps_behind_one_slow_commit_land_in_one_write() {
    // The first commit takes 500 ms; the other 4,999 steps pile up behind it and the finish
    // carries them all (10,000 fields: more than Lua's unpack takes at once).
    let n = 5_000u32;
    let plan = Plan::new(Duration::from_millis(500), None);
    let w = embedded_world("pipelong", plan.clone(), |cfg| {
        cfg.worker.slice_max_steps = 10_000;
        cfg.worker.slice_max_ms = 60_000;
    })
    .await;
    let mut reg = Registry::new();
    reg.register(Long { n });
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered(Long::NAME).await;
    let t = w.start(Long::NAME, json!({})).await;
    let run = w.wait_status(&t, &["completed"], LONG).await;
    assert_eq!(run["output"], json!(u64::from(n) * u64::from(n - 1) / 2));
    let j = journal(&w, &t).await;
    assert_eq!(j.len(), n as usize);
    assert!(j
        .iter()
        .enumerate()
        .all(|(i, (name, v))| *name == format!("s{i}") && *v == json!(i)));
    assert!(
        plan.scripts("commit").len() <= 2,
        "{} commits",
        plan.scripts("commit").len()
    );
    wk.stop().await;
}

#[tokio::test]
async fn a_batch_fenced_out_in_flight_ends_the_slice_and_nothing_after_it_is_written() {
    // The first commit takes 500 ms; the run is cancelled while it is in flight (every other
    // step has run and waits behind it), so the commit lands on a run this slice no longer
    // holds: it is refused, and the slice writes nothing more (no finish).
    let plan = Plan::new(Duration::from_millis(500), None);
    let seen = Seen::default();
    let chain = Chain {
        seen: seen.clone(),
        effect_at: None,
        durable: false,
    };
    let (w, wk) = world("pipefenced", plan.clone(), "pipelined", chain).await;
    let t = w.start(Chain::NAME, json!({})).await;
    let deadline = Instant::now() + LONG;
    while seen.get(&format!("s{}", STEPS - 1)) == 0 {
        assert!(Instant::now() < deadline, "the steps never ran");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (code, body) = w.post(&format!("/v1/runs/{t}/cancel"), json!({})).await;
    assert_eq!(code, 200, "{body}");
    // A graceful stop waits for the slice, which waits for its commit in flight.
    wk.stop().await;
    assert_eq!(plan.scripts("commit").len(), 1, "only the first step's commit went out");
    assert!(
        plan.scripts("finish").is_empty(),
        "a slice whose batch was refused ended the run"
    );
    assert_eq!(w.run(&t).await["status"], "cancelled");
    assert!(
        journal(&w, &t).await.is_empty(),
        "the refused batch left nothing in the journal"
    );
}

/// A step, an effect abandoned by a timeout while it waits for the step's commit, then an
/// effect keyed on the step's result.
struct Abandons {
    seen: Seen,
}

impl Workflow for Abandons {
    const NAME: &'static str = "pipe_abandons";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let a: u32 = ctx.step("a", || async { Ok(7) }).await?;
        let seen = self.seen.clone();
        let gave_up = tokio::time::timeout(
            Duration::from_millis(50),
            ctx.effect("first", format!("first:{a}"), move |fx| {
                let seen = seen.clone();
                async move {
                    seen.bump(&fx.key);
                    Ok(json!(1))
                }
            }),
        )
        .await;
        assert!(
            gave_up.is_err(),
            "the first effect waits for the step's commit (300 ms)"
        );
        let seen = self.seen.clone();
        let out: Value = ctx
            .effect("second", format!("second:{a}"), move |fx| {
                let seen = seen.clone();
                async move {
                    seen.bump(&fx.key);
                    Ok(json!(2))
                }
            })
            .await?;
        Ok(out)
    }
}

#[tokio::test]
async fn a_call_dropped_while_it_waits_for_a_commit_leaves_the_commit_tracked() {
    let delay = Duration::from_millis(300);
    let plan = Plan::new(delay, None);
    let seen = Seen::default();
    let w = embedded_world("pipedrop", plan.clone(), |_| {}).await;
    let mut reg = Registry::new();
    reg.register(Abandons { seen: seen.clone() });
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered(Abandons::NAME).await;
    let t = w.start(Abandons::NAME, json!({})).await;
    let run = w.wait_status(&t, &["completed"], LONG).await;
    assert_eq!(run["output"], json!(2));
    // The second effect's barrier still waited for the step's commit, which the abandoned
    // effect had been waiting for: its first write went out after that commit landed.
    let sent = plan.scripts("commit")[0];
    let begin = plan.scripts("effect_begin")[0];
    assert!(
        begin >= sent + delay,
        "an effect went out {:?} after the step's commit was sent, before it landed",
        begin - sent
    );
    assert_eq!(seen.get("first:7"), 0, "the abandoned effect never ran");
    assert_eq!(seen.get("second:7"), 1);
    wk.stop().await;
}

/// A durable step abandoned by a timeout while its commit is on its way, then a child.
struct AbandonsWrite;

/// The child: returns its input.
struct Echo;

impl Workflow for Echo {
    const NAME: &'static str = "pipe_echo";
    type Input = Value;
    type Output = Value;
    async fn run(&self, _ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        Ok(input)
    }
}

impl Workflow for AbandonsWrite {
    const NAME: &'static str = "pipe_abandons_write";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let s = ctx.step("s", || async { Ok(3) }).durable();
        let s = match tokio::time::timeout(Duration::from_millis(50), s).await {
            Ok(v) => v?,
            Err(_) => 0,
        };
        ctx.child::<Echo>("echo", json!(s)).await
    }
}

#[tokio::test]
async fn a_write_abandoned_before_its_answer_stops_the_slice_before_anything_else_goes_out() {
    // The first commit (the durable step's) takes 300 ms; the step is abandoned at 50 ms, so
    // whether its entry landed is unknown to the slice: the child's start must not go out in
    // that slice. The next slice commits the step at once and starts the child.
    let plan = Plan::new(Duration::ZERO, Some((1, Fault::Delay(Duration::from_millis(300)))));
    let w = embedded_world("pipeabandon", plan.clone(), |cfg| {
        cfg.lease_ms = 1000;
        cfg.lease_margin_ms = 200;
    })
    .await;
    let mut reg = Registry::new();
    reg.register(AbandonsWrite).register(Echo);
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered(AbandonsWrite::NAME).await;
    let t = w.start(AbandonsWrite::NAME, json!({})).await;
    let run = w.wait_status(&t, &["completed"], LONG).await;
    assert_eq!(run["output"], json!(3), "the second slice ran the step to the end");
    let claims = plan.scripts("claim");
    let link = plan.scripts("child_link")[0];
    assert!(
        claims.len() >= 2 && link > claims[1],
        "the child's link went out in the slice that abandoned a write"
    );
    wk.stop().await;
}
