//! The deploy gate on live runs (issue 28 §2, `savepoint_worker::replay_check`): live runs of a
//! namespace replayed against another build's code, read-only. The same code replays them
//! cleanly; code that calls another step diverges (one finding for every run, with the patch
//! gate to write); code whose type no longer reads a recorded value would block them; a
//! workflow the build does not register is not served. Nothing is written to the runs. Run on
//! whichever backend the tier uses.

use serde_json::{json, Value};
use std::time::Duration;

use savepoint::workflow::{Ctx, Registry, Workflow, WorkflowError};
use savepoint_integration_tests::inproc::InProc;
use savepoint_integration_tests::scenario::World;
use savepoint_worker::replay_check::{replay_check, CheckOptions, Verdict};

const LONG: Duration = Duration::from_secs(60);

/// The build that started the runs: a step, then a human's answer.
struct Gate;

impl Workflow for Gate {
    const NAME: &'static str = "gate_check";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let text: String = ctx.step("read", || async { Ok("text".to_owned()) }).await?;
        let ok: Value = ctx.interrupt("approve", json!({"text": text})).await?;
        Ok(ok)
    }
}

/// A new build that renamed the step: every live run diverges at entry 0.
struct Renamed;

impl Workflow for Renamed {
    const NAME: &'static str = "gate_check";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let text: String = ctx.step("read_v2", || async { Ok("text".to_owned()) }).await?;
        ctx.interrupt("approve", json!({"text": text})).await
    }
}

/// A new build whose step now returns a number: the recorded text no longer reads.
struct Retyped;

impl Workflow for Retyped {
    const NAME: &'static str = "gate_check";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let n: u32 = ctx.step("read", || async { Ok(7u32) }).await?;
        ctx.interrupt("approve", json!({"n": n})).await
    }
}

fn registry<W: Workflow>(w: W) -> Registry {
    let mut r = Registry::new();
    r.register(w);
    r
}

#[tokio::test]
async fn a_deploy_gate_replays_live_runs_against_new_code_and_writes_nothing() {
    let w = World::new("replaychk", |_| {}).await;
    let wk = InProc::start(&w.cfg, registry(Gate));
    w.wait_registered(Gate::NAME).await;
    let mut runs = Vec::new();
    for _ in 0..5 {
        runs.push(w.start(Gate::NAME, json!({})).await);
    }
    for t in &runs {
        w.wait_status(t, &["waiting"], LONG).await;
    }
    wk.stop().await;
    let before: Vec<Value> = futures::future::join_all(runs.iter().map(|t| w.run(t))).await;
    let opts = CheckOptions {
        workflow: Some(Gate::NAME.into()),
        ..CheckOptions::default()
    };

    let same = replay_check(&w.store, &registry(Gate), &opts).await.unwrap();
    assert_eq!((same.checked, same.clean), (5, 5), "{}", same.render());
    assert!(same.findings.is_empty() && !same.blocks(), "{}", same.render());

    let renamed = replay_check(&w.store, &registry(Renamed), &opts).await.unwrap();
    let text = renamed.render();
    eprintln!("{text}");
    assert!(renamed.blocks(), "{text}");
    assert_eq!(renamed.findings.len(), 1, "identical findings are one: {text}");
    let f = &renamed.findings[0];
    assert_eq!(
        (f.verdict, f.runs, f.version),
        (Verdict::NonDeterministic, 5, 1),
        "{text}"
    );
    assert!(f.detail.contains("entry 0"), "{text}");
    assert!(f.hint.contains("ctx.patched(\"<change-id>\")"), "{text}");
    assert!(
        f.hint.contains("ctx.step(\"read_v2\", …)") && f.hint.contains("ctx.step(\"read\", …)"),
        "{text}"
    );
    assert!(text.contains("5 would block"), "{text}");

    let retyped = replay_check(&w.store, &registry(Retyped), &opts).await.unwrap();
    assert!(retyped.blocks(), "{}", retyped.render());
    assert_eq!(retyped.findings[0].verdict, Verdict::WouldBlock, "{}", retyped.render());
    assert_eq!(retyped.findings[0].runs, 5);

    // A build that does not register the workflow would leave the runs waiting, not blocked.
    let other = replay_check(&w.store, &Registry::new(), &opts).await.unwrap();
    assert_eq!(other.findings[0].verdict, Verdict::NotServed, "{}", other.render());
    assert!(!other.blocks());

    // Read-only: no run changed (its version counts every write).
    let after: Vec<Value> = futures::future::join_all(runs.iter().map(|t| w.run(t))).await;
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(
            (&b["version"], &b["status"], &b["step"]),
            (&a["version"], &a["status"], &a["step"])
        );
    }
}

/// The newcomer's first deploy gate (issue 50 §1): a field of a step's recorded output renamed.
mod rename {
    use super::*;
    use savepoint::workflow::{Migration, Versioned, Versions};
    use serde::{Deserialize, Serialize};

    /// What the running build records.
    #[derive(Serialize, Deserialize)]
    pub struct Validated {
        pub total_cents: u64,
    }

    /// The order saga as deployed: validate, reserve, wait for an approval.
    pub struct First;

    impl Workflow for First {
        const NAME: &'static str = "order_gate";
        type Input = Value;
        type Output = Value;
        async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
            let v: Validated = ctx
                .step("validate", || async { Ok(Validated { total_cents: 4200 }) })
                .await?;
            let held: u64 = ctx
                .step("stock.reserve", move || async move { Ok(v.total_cents) })
                .await?;
            ctx.interrupt("approve", json!({"cents": held})).await
        }
    }

    pub mod renamed {
        use super::*;

        /// The next build's type: `total_cents` is now `amount_cents`.
        #[derive(Serialize, Deserialize)]
        pub struct Validated {
            pub amount_cents: u64,
        }
    }

    /// The next build, as first written: the field renamed, nothing else.
    pub struct Second;

    impl Workflow for Second {
        const NAME: &'static str = "order_gate";
        type Input = Value;
        type Output = Value;
        async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
            let v: renamed::Validated = ctx
                .step("validate", || async { Ok(renamed::Validated { amount_cents: 4200 }) })
                .await?;
            let held: u64 = ctx
                .step("stock.reserve", move || async move { Ok(v.amount_cents) })
                .await?;
            ctx.interrupt("approve", json!({"cents": held})).await
        }
    }

    pub mod fixed {
        use super::*;

        /// The next build as the gate's advice has it: the same type with a version and the
        /// migration from the recorded shape (the advice's code, its placeholders filled).
        #[derive(Serialize, Deserialize)]
        pub struct Validated {
            pub amount_cents: u64,
        }

        impl Versioned for Validated {
            const NAME: &'static str = "shop.Validated";
            const VERSION: u32 = 2;
            fn upgrade(from: u32, mut v: Value) -> Result<Value, Migration> {
                match from {
                    1 => {
                        // e.g. a renamed field: move the recorded one to `amount_cents`
                        let o = v.as_object_mut().ok_or(Migration::Missing)?;
                        let old = o.remove("total_cents").ok_or(Migration::Missing)?;
                        o.insert("amount_cents".into(), old);
                        Ok(v)
                    }
                    _ => Err(Migration::Missing),
                }
            }
        }
    }

    /// The next build once fixed.
    pub struct Third;

    impl Workflow for Third {
        const NAME: &'static str = "order_gate";
        type Input = Value;
        type Output = Value;
        async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
            let v: fixed::Validated = ctx
                .step("validate", || async { Ok(fixed::Validated { amount_cents: 4200 }) })
                .await?;
            let held: u64 = ctx
                .step("stock.reserve", move || async move { Ok(v.amount_cents) })
                .await?;
            ctx.interrupt("approve", json!({"cents": held})).await
        }
        fn versions() -> Versions {
            Versions::new().of::<fixed::Validated>()
        }
    }
}

/// A renamed field of a recorded output is `WouldBlock` (not non-determinism, though the
/// code's `?` returns with entries left), naming the call, its entry, the type, the field the
/// decoder missed and the recorded fields, with a migration as advice; the build that follows
/// the advice is `Migrated`.
#[tokio::test]
async fn a_renamed_field_would_block_naming_the_field_and_the_advice_makes_it_migrate() {
    use rename::{First, Second, Third};
    let w = World::new("gaterename", |_| {}).await;
    let wk = InProc::start(&w.cfg, registry(First));
    w.wait_registered(First::NAME).await;
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(w.start(First::NAME, json!({})).await);
    }
    for t in &runs {
        w.wait_status(t, &["waiting"], LONG).await;
    }
    wk.stop().await;
    let opts = CheckOptions {
        workflow: Some(First::NAME.into()),
        ..CheckOptions::default()
    };
    let second = replay_check(&w.store, &registry(Second), &opts).await.unwrap();
    let text = second.render();
    eprintln!("{text}");
    assert_eq!(second.findings.len(), 1, "{text}");
    let f = &second.findings[0];
    assert_eq!((f.verdict, f.runs), (Verdict::WouldBlock, 3), "{text}");
    for part in [
        "value of \"validate\" (entry 0) does not decode",
        "missing field `amount_cents`",
        "renamed::Validated",
        "the recorded value has the fields `total_cents`",
    ] {
        assert!(f.detail.contains(part), "{part:?} in {text}");
    }
    for part in [
        "impl Versioned for Validated {",
        "const VERSION: u32 = 2;",
        "o.insert(\"amount_cents\".into(), old);",
        "Versions::new().of::<Validated>()",
    ] {
        assert!(f.hint.contains(part), "{part:?} in {text}");
    }
    let third = replay_check(&w.store, &registry(Third), &opts).await.unwrap();
    let text = third.render();
    assert!(!third.blocks(), "{text}");
    assert_eq!(
        third.findings.iter().map(|f| (f.verdict, f.runs)).collect::<Vec<_>>(),
        vec![(Verdict::Migrated, 3)],
        "{text}"
    );
}

/// The change shapes a deploy gate tells apart (issue 50 §1), each a build of the same
/// workflow: the recorded one (`validate`, `notify`, `charge`, then an approval), a changed
/// one, and the changed one with the gate's advice applied.
mod shapes {
    use super::*;
    use futures::future::BoxFuture;

    pub type Body = for<'a> fn(&'a Ctx) -> BoxFuture<'a, Result<Value, WorkflowError>>;

    /// One build of `shapes`.
    pub struct Build(pub Body);

    impl Workflow for Build {
        const NAME: &'static str = "shapes";
        type Input = Value;
        type Output = Value;
        async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
            (self.0)(ctx).await
        }
    }

    pub async fn call(ctx: &Ctx, name: &str) -> Result<(), WorkflowError> {
        ctx.step(name, || async { Ok(()) }).await
    }

    pub async fn approve(ctx: &Ctx) -> Result<Value, WorkflowError> {
        ctx.interrupt("approve", json!({})).await
    }

    pub fn recorded(ctx: &Ctx) -> BoxFuture<'_, Result<Value, WorkflowError>> {
        Box::pin(async move {
            call(ctx, "validate").await?;
            call(ctx, "notify").await?;
            call(ctx, "charge").await?;
            approve(ctx).await
        })
    }

    pub fn inserted(ctx: &Ctx) -> BoxFuture<'_, Result<Value, WorkflowError>> {
        Box::pin(async move {
            call(ctx, "validate").await?;
            call(ctx, "notify").await?;
            call(ctx, "fraud_check").await?;
            call(ctx, "charge").await?;
            approve(ctx).await
        })
    }

    /// The advice for an insertion: the new call gated, the recorded one after it, always.
    pub fn inserted_fixed(ctx: &Ctx) -> BoxFuture<'_, Result<Value, WorkflowError>> {
        Box::pin(async move {
            call(ctx, "validate").await?;
            call(ctx, "notify").await?;
            if ctx.patched("fraud-check").await {
                call(ctx, "fraud_check").await?;
            }
            call(ctx, "charge").await?;
            approve(ctx).await
        })
    }

    pub fn replaced(ctx: &Ctx) -> BoxFuture<'_, Result<Value, WorkflowError>> {
        Box::pin(async move {
            call(ctx, "validate").await?;
            call(ctx, "notify").await?;
            call(ctx, "charge_v2").await?;
            approve(ctx).await
        })
    }

    pub fn replaced_fixed(ctx: &Ctx) -> BoxFuture<'_, Result<Value, WorkflowError>> {
        Box::pin(async move {
            call(ctx, "validate").await?;
            call(ctx, "notify").await?;
            if ctx.patched("charge-v2").await {
                call(ctx, "charge_v2").await?;
            } else {
                call(ctx, "charge").await?;
            }
            approve(ctx).await
        })
    }

    pub fn removed(ctx: &Ctx) -> BoxFuture<'_, Result<Value, WorkflowError>> {
        Box::pin(async move {
            call(ctx, "validate").await?;
            call(ctx, "charge").await?;
            approve(ctx).await
        })
    }

    /// The advice when the code's call was recorded later: the recorded order kept.
    pub fn removed_fixed(ctx: &Ctx) -> BoxFuture<'_, Result<Value, WorkflowError>> {
        Box::pin(async move {
            call(ctx, "validate").await?;
            if ctx.patched("no-notify").await {
                call(ctx, "charge").await?;
            } else {
                call(ctx, "notify").await?;
                call(ctx, "charge").await?;
            }
            approve(ctx).await
        })
    }

    pub fn reordered(ctx: &Ctx) -> BoxFuture<'_, Result<Value, WorkflowError>> {
        Box::pin(async move {
            call(ctx, "validate").await?;
            call(ctx, "charge").await?;
            call(ctx, "notify").await?;
            approve(ctx).await
        })
    }

    pub fn reordered_fixed(ctx: &Ctx) -> BoxFuture<'_, Result<Value, WorkflowError>> {
        Box::pin(async move {
            call(ctx, "validate").await?;
            if ctx.patched("charge-first").await {
                call(ctx, "charge").await?;
                call(ctx, "notify").await?;
            } else {
                call(ctx, "notify").await?;
                call(ctx, "charge").await?;
            }
            approve(ctx).await
        })
    }

    pub fn shortened(ctx: &Ctx) -> BoxFuture<'_, Result<Value, WorkflowError>> {
        Box::pin(async move {
            call(ctx, "validate").await?;
            Ok(json!("validated"))
        })
    }

    pub fn shortened_fixed(ctx: &Ctx) -> BoxFuture<'_, Result<Value, WorkflowError>> {
        Box::pin(async move {
            call(ctx, "validate").await?;
            if !ctx.patched("validate-only").await {
                call(ctx, "notify").await?;
                call(ctx, "charge").await?;
                return approve(ctx).await;
            }
            Ok(json!("validated"))
        })
    }
}

/// A change shape: its name, the changed build, the build with the advice applied, what the
/// advice must say, and how a new run on the fixed build ends and which steps it records.
type Case = (
    &'static str,
    shapes::Body,
    shapes::Body,
    &'static [&'static str],
    &'static str,
    &'static [&'static str],
);

/// Each change shape: the gate finds the old runs diverge and says which shape it is with the
/// advice that shape needs; the build with that advice applied replays every old run cleanly,
/// and a new run on it makes every call of the new code (its journal's steps, in order).
#[tokio::test]
async fn each_change_shape_gets_advice_that_replays_old_runs_and_runs_new_code() {
    use shapes::*;
    let w = World::new("gateshape", |_| {}).await;
    let wk = InProc::start(&w.cfg, registry(Build(recorded)));
    w.wait_registered(Build::NAME).await;
    let mut runs = Vec::new();
    for _ in 0..2 {
        runs.push(w.start(Build::NAME, json!({})).await);
    }
    for t in &runs {
        w.wait_status(t, &["waiting"], LONG).await;
    }
    wk.stop().await;
    let opts = CheckOptions {
        workflow: Some(Build::NAME.into()),
        ..CheckOptions::default()
    };
    let cases: [Case; 5] = [
        (
            "inserted",
            inserted,
            inserted_fixed,
            &[
                "is new to these runs",
                "INSERTED before ctx.step(\"charge\", …)",
                "if ctx.patched(\"<change-id>\").await { ctx.step(\"fraud_check\", …).await?; }",
            ],
            "waiting",
            &["validate", "notify", "fraud_check", "charge"],
        ),
        (
            "replaced",
            replaced,
            replaced_fixed,
            &[
                "REPLACED ctx.step(\"charge\", …)",
                "{ ctx.step(\"charge_v2\", …) } else { ctx.step(\"charge\", …) }",
            ],
            "waiting",
            &["validate", "notify", "charge_v2"],
        ),
        (
            "removed",
            removed,
            removed_fixed,
            &[
                "these runs made step \"notify\" before ctx.step(\"charge\", …)",
                "removed, or moved after it",
                "<the recorded order: step \"notify\", then ctx.step(\"charge\", …), …>",
            ],
            "waiting",
            &["validate", "charge"],
        ),
        (
            "reordered",
            reordered,
            reordered_fixed,
            &["these runs made step \"notify\" before ctx.step(\"charge\", …)"],
            "waiting",
            &["validate", "charge", "notify"],
        ),
        (
            "shortened",
            shortened,
            shortened_fixed,
            &[
                "returns where these runs recorded more calls (step \"notify\", step \"charge\")",
                "if !ctx.patched(\"<change-id>\").await",
            ],
            "completed",
            &["validate"],
        ),
    ];
    for (shape, changed, fixed, advice, new_status, new_steps) in cases {
        let gate = replay_check(&w.store, &registry(Build(changed)), &opts).await.unwrap();
        let text = gate.render();
        eprintln!("{shape}:\n{text}");
        assert_eq!(gate.findings.len(), 1, "{shape}: {text}");
        let f = &gate.findings[0];
        assert_eq!((f.verdict, f.runs), (Verdict::NonDeterministic, 2), "{shape}: {text}");
        for part in advice {
            assert!(f.hint.contains(part), "{shape}: {part:?} in {text}");
        }
        let again = replay_check(&w.store, &registry(Build(fixed)), &opts).await.unwrap();
        assert_eq!(
            (again.clean, again.findings.len()),
            (2, 0),
            "{shape} fixed: {}",
            again.render()
        );
        // A new run on the fixed build takes the new path, every call of it.
        let wk = InProc::start(&w.cfg, registry(Build(fixed)));
        let t = w.start(Build::NAME, json!({})).await;
        w.wait_status(&t, &[new_status], LONG).await;
        let (_, journal) = w.store.get(&t).await.unwrap().expect("the new run");
        // Ended, so the next shape's gate checks the old runs only.
        if new_status != "completed" {
            let (code, body) = w.post(&format!("/v1/runs/{t}/cancel"), json!({})).await;
            assert!(code < 300, "{code} {body}");
            w.wait_status(&t, &["cancelled"], LONG).await;
        }
        wk.stop().await;
        let steps: Vec<&str> = journal
            .iter()
            .filter(|e| e.kind == savepoint_core::journal::EntryKind::Step)
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(steps, *new_steps, "{shape}: the new run's steps");
    }
}
