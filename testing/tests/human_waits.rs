//! The kit past a person's answer and with the author's own resources: a crash matrix that
//! answers a run's interrupt and signal from a script and so crashes at the calls after them
//! too; resources of the test's own (a stand-in provider, a counter) handed to the workflows
//! through the registry closure; virtual time that `advance` arms and the next drive lets pass.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use savepoint::workflow::{Ctx, EffectPolicy, Interrupt, Registry, Signal, StepError, Workflow, WorkflowError};
use savepoint_store::RunStatus;
use savepoint_testing::{Answers, CrashMatrix, Setup, TestEnv, CALL_POINTS};

/// What the provider applied: (run, idempotency key) → (times, the result).
type Applied = BTreeMap<(String, String), (u32, Value)>;

/// A stand-in for a payment provider and a warehouse, owned by the test: every effect it
/// applies is recorded under its run and idempotency key, and a reconcile asks it.
#[derive(Clone, Default)]
struct Provider {
    applied: Arc<Mutex<Applied>>,
}

impl Provider {
    fn apply(&self, thread: &str, key: &str, result: Value) -> Result<Value, StepError> {
        let mut m = self
            .applied
            .lock()
            .map_err(|_| StepError::fatal("provider lock poisoned"))?;
        let e = m.entry((thread.to_owned(), key.to_owned())).or_insert((0, Value::Null));
        e.0 += 1;
        e.1 = result.clone();
        Ok(result)
    }

    fn lookup(&self, thread: &str, key: &str) -> Result<Option<Value>, StepError> {
        let m = self
            .applied
            .lock()
            .map_err(|_| StepError::fatal("provider lock poisoned"))?;
        Ok(m.get(&(thread.to_owned(), key.to_owned())).map(|(_, v)| v.clone()))
    }

    /// How many times each key of `thread` was applied.
    fn counts(&self, thread: &str) -> BTreeMap<String, u32> {
        let m = self.applied.lock().expect("provider");
        m.iter()
            .filter(|((t, _), _)| t == thread)
            .map(|((_, k), (n, _))| (k.clone(), *n))
            .collect()
    }
}

const APPROVAL: Interrupt<bool> = Interrupt::new("approval");
const DELIVERED: Signal<String> = Signal::new("delivered");
const EFFECTS: [&str; 3] = ["card.charge", "ship", "receipt.send"];

/// charge → a person approves → ship → the carrier signals delivery → send the receipt.
struct Checkout {
    provider: Provider,
}

impl Checkout {
    /// Effect `name` under `key`, applied at the provider and reconciled against it.
    async fn apply(&self, ctx: &Ctx, name: &'static str, key: String) -> Result<Value, WorkflowError> {
        let thread = ctx.thread_id().to_string();
        let (p, t) = (self.provider.clone(), thread.clone());
        let reconcile = EffectPolicy::reconcile(move |key: String| {
            let (p, t) = (p.clone(), t.clone());
            async move { p.lookup(&t, &key) }
        });
        let (p, t) = (&self.provider, &thread);
        let out = ctx
            .effect(
                name,
                key,
                |fx| async move { p.apply(t, &fx.key, json!({"done": fx.key})) },
            )
            .policy(reconcile)
            .await?;
        Ok(out)
    }
}

impl Workflow for Checkout {
    const NAME: &'static str = "checkout";
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        let order = input["order"].as_str().unwrap_or("O").to_owned();
        self.apply(ctx, "card.charge", format!("charge:{order}")).await?;
        let approved = ctx.interrupt(APPROVAL, json!({"question": "ship?"})).await?;
        if !approved {
            return Ok(json!({"shipped": false}));
        }
        self.apply(ctx, "ship", format!("ship:{order}")).await?;
        let by = ctx.wait_signal(DELIVERED).await?;
        self.apply(ctx, "receipt.send", format!("receipt:{order}")).await?;
        Ok(json!({"shipped": true, "delivered_by": by}))
    }
}

fn checkout(provider: Provider) -> Registry {
    let mut r = Registry::new();
    r.register(Checkout { provider });
    r
}

fn answers() -> Answers {
    Answers::new()
        .interrupt(APPROVAL, &true)
        .signal(DELIVERED, &"DHL".to_owned())
}

#[tokio::test(start_paused = true)]
async fn the_crash_matrix_answers_the_waits_and_covers_the_effects_after_them() {
    let provider = Provider::default();
    let p = provider.clone();
    let cases = CrashMatrix::new(
        move |_: &Setup| checkout(p.clone()),
        "checkout",
        json!({"order": "O-1"}),
    )
    .answers(answers())
    .run(|env, case| {
        let h = &case.settled.header;
        assert_eq!(h.status, RunStatus::Completed, "{}: {h:?}", case.spec);
        assert_eq!(
            h.output,
            Some(json!({"shipped": true, "delivered_by": "DHL"})),
            "{}",
            case.spec
        );
        assert_eq!(env.crashes(), 1, "{}", case.spec);
        assert_eq!(case.answered, 2, "{}", case.spec);
        for name in EFFECTS {
            assert_eq!(env.stubs().calls(name), 1, "{}: {name}", case.spec);
        }
        let counts = provider.counts(h.thread.as_str());
        assert_eq!(counts.len(), 3, "{}: {counts:?}", case.spec);
        assert!(counts.values().all(|n| *n == 1), "{}: {counts:?}", case.spec);
    })
    .await
    .unwrap();
    let specs: Vec<&str> = cases.iter().map(|c| c.spec.as_str()).collect();
    // Each effect point is hit once per effect: the second and third hits come after the
    // approval and after the delivery signal.
    for point in &CALL_POINTS[2..] {
        for n in 1..=3 {
            let want = format!("{point}=abort@{n}");
            assert!(specs.contains(&want.as_str()), "{want} in {specs:?}");
        }
        assert!(!specs.contains(&format!("{point}=abort@4").as_str()), "{specs:?}");
    }
    for answered in 0..=2 {
        assert!(
            cases.iter().any(|c| c.answered_before_crash == answered),
            "a crash after {answered} answers: {:?}",
            cases
                .iter()
                .map(|c| (&c.spec, c.answered_before_crash))
                .collect::<Vec<_>>()
        );
    }
    let after_approval = cases
        .iter()
        .find(|c| c.spec == "effect.after_call=abort@2")
        .expect("the ship effect's case");
    assert_eq!(after_approval.answered_before_crash, 1);
}

#[tokio::test(start_paused = true)]
async fn without_an_answer_the_drive_stops_at_the_wait() {
    let mut env = TestEnv::new(|_| checkout(Provider::default())).await.unwrap();
    let run = env.start_named("checkout", json!({"order": "O-2"})).await.unwrap();
    // The approval is answered; no delivery signal is scripted.
    let mut script = Answers::new().interrupt("approval", &true);
    let waiting = env.settle_answering(&run, &mut script).await.unwrap();
    assert_eq!(waiting.header.status, RunStatus::Waiting, "{:?}", waiting.header);
    let wait = waiting.header.wait.clone().expect("what it waits for");
    assert_eq!((wait.kind.as_str(), wait.name.as_str()), ("signal", "delivered"));
    assert!(script.is_empty(), "the approval was used");
    assert_eq!(env.stubs().calls("ship"), 1);

    let mut script = Answers::new().signal("delivered", &"UPS".to_owned());
    let done = env.settle_answering(&run, &mut script).await.unwrap();
    assert_eq!(done.output(), Some(&json!({"shipped": true, "delivered_by": "UPS"})));
    env.shutdown().await;
}

/// Greets with the test's prefix and counts its calls on the test's counter.
struct Greet {
    calls: Arc<AtomicU32>,
    prefix: String,
}

impl Workflow for Greet {
    const NAME: &'static str = "greet";
    type Input = String;
    type Output = String;

    async fn run(&self, ctx: &Ctx, name: String) -> Result<String, WorkflowError> {
        let calls = &self.calls;
        let n: u32 = ctx
            .step("count", || async { Ok(calls.fetch_add(1, Ordering::AcqRel) + 1) })
            .await?;
        Ok(format!("{} {name} (call {n})", self.prefix))
    }
}

#[tokio::test(start_paused = true)]
async fn a_workflow_gets_the_resources_the_registry_closure_hands_it() {
    let calls = Arc::new(AtomicU32::new(0));
    let seen = Arc::new(Mutex::new(None));
    let (c, s) = (Arc::clone(&calls), Arc::clone(&seen));
    let mut env = TestEnv::new(move |setup| {
        *s.lock().expect("seen") = Some((setup.namespace().to_owned(), setup.redis_url().to_owned()));
        let mut r = Registry::new();
        r.register(Greet {
            calls: c,
            prefix: format!("hello from {}:", setup.namespace()),
        });
        r
    })
    .await
    .unwrap();
    let (ns, url) = seen.lock().expect("seen").clone().expect("the closure ran");
    assert_eq!(ns, "test");
    assert!(url.starts_with("mem://"), "{url}");

    // Killed after the step ran and before it committed: the restarted worker runs it again,
    // on the same counter (the registry and its resources outlive a crash).
    env.crash_at("step.before_commit=abort@1").unwrap();
    let run = env.start::<Greet>(&"ada".to_owned()).await.unwrap();
    let done = env.settle(&run).await.unwrap();
    assert_eq!(env.crashes(), 1);
    assert_eq!(done.output_as::<Greet>().unwrap(), "hello from test: ada (call 2)");
    assert_eq!(calls.load(Ordering::Acquire), 2);
    assert_eq!(env.stubs().calls("count"), 2);
    env.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn advance_arms_time_that_the_next_drive_lets_pass() {
    let mut env = TestEnv::new(|_| {
        let mut r = Registry::new();
        r.register(Checkout {
            provider: Provider::default(),
        });
        r
    })
    .await
    .unwrap();
    let run = env.start_named("checkout", json!({"order": "O-3"})).await.unwrap();
    let waiting = env.settle(&run).await.unwrap();
    assert_eq!(waiting.header.status, RunStatus::Waiting);
    // Not async: nothing to forget. The time passes when the run is next driven.
    env.advance(Duration::from_secs(1800));
    env.advance(Duration::from_secs(1800));
    assert_eq!(env.pending_advance(), Duration::from_secs(3600));
    let before = tokio::time::Instant::now();
    env.resume(&run, json!(false)).await.unwrap();
    assert!(before.elapsed() >= Duration::from_secs(3600), "{:?}", before.elapsed());
    assert_eq!(env.pending_advance(), Duration::ZERO);
    let done = env.settle(&run).await.unwrap();
    assert_eq!(done.output(), Some(&json!({"shipped": false})));
    let approved_at = done.journal[1].at - done.journal[0].at;
    assert!(approved_at >= 3_600_000, "answered {approved_at} ms after the charge");
    env.shutdown().await;
}
