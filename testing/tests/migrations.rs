//! Values that outlive their code: a run started by one build records values of its types;
//! a later build with changed types (a field added, renamed, retyped, removed) takes the run
//! over. The new build declares each type's version and upgrades (`Versioned`), and the
//! replay upgrades every older value before the code sees it; a value with no way up, or one
//! newer than the code knows, blocks the run, never a silent default.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use savepoint::ids::ThreadId;
use savepoint::workflow::{Ctx, Migration, Registry, Versioned, Versions, Workflow, WorkflowError};
use savepoint_testing::{
    replay_check, replay_export, CheckOptions, ReplayReport, RunStatus, TestEnv, TestError, Verdict,
};

/// The first build: what runs in flight recorded.
mod v1 {
    use super::*;

    #[derive(Debug, Clone, Serialize, Deserialize)]
    pub(crate) struct Invoice {
        pub id: String,
        pub customer: String,
        /// Euros, as text.
        pub amount: String,
        pub note: String,
    }

    #[derive(Debug, Clone, Serialize, Deserialize)]
    pub(crate) struct Approval {
        pub ok: bool,
    }

    pub(crate) struct Flow;

    impl Workflow for Flow {
        const NAME: &'static str = "invoice";
        type Input = String;
        type Output = Value;

        async fn run(&self, ctx: &Ctx, id: String) -> Result<Value, WorkflowError> {
            let inv: Invoice = ctx
                .step("parse", || async {
                    Ok(Invoice {
                        id: id.clone(),
                        customer: "ACME".into(),
                        amount: "12.50".into(),
                        note: "rush".into(),
                    })
                })
                .await?;
            let a: Approval = ctx.interrupt("approve", json!({"invoice": inv.id})).await?;
            let _: Value = ctx.interrupt("confirm", json!({})).await?;
            Ok(json!({"ok": a.ok}))
        }
    }
}

/// The new build's types. `Invoice` went through three changes after version 1: `customer`
/// renamed `client` (2), `amount` retyped from euros as text to cents (3), `note` removed (4,
/// needed because the type refuses unknown fields); `currency` was added with a default,
/// which needs no version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Invoice {
    id: String,
    client: String,
    /// Cents.
    amount: u64,
    #[serde(default)]
    currency: Option<String>,
}

fn object(v: &mut Value) -> Result<&mut serde_json::Map<String, Value>, Migration> {
    v.as_object_mut().ok_or_else(|| Migration::failed("not an object"))
}

impl Versioned for Invoice {
    const NAME: &'static str = "kit.Invoice";
    const VERSION: u32 = 4;

    fn upgrade(from: u32, mut v: Value) -> Result<Value, Migration> {
        let o = object(&mut v)?;
        match from {
            1 => {
                let c = o.remove("customer").ok_or_else(|| Migration::failed("no customer"))?;
                o.insert("client".into(), c);
            }
            2 => {
                let euros: f64 = o["amount"]
                    .as_str()
                    .ok_or_else(|| Migration::failed("amount is not text"))?
                    .parse()
                    .map_err(Migration::failed)?;
                o.insert("amount".into(), json!((euros * 100.0).round() as u64));
            }
            3 => {
                o.remove("note");
            }
            _ => return Err(Migration::Missing),
        }
        Ok(v)
    }
}

/// `ok` renamed `approved` (2).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Approval {
    approved: bool,
}

impl Versioned for Approval {
    const NAME: &'static str = "kit.Approval";
    const VERSION: u32 = 2;

    fn upgrade(from: u32, mut v: Value) -> Result<Value, Migration> {
        match from {
            1 => {
                let o = object(&mut v)?;
                let ok = o.remove("ok").ok_or_else(|| Migration::failed("no ok"))?;
                o.insert("approved".into(), ok);
                Ok(v)
            }
            _ => Err(Migration::Missing),
        }
    }
}

/// The new build: the same calls, the new types, one more step at the end.
struct Flow;

impl Workflow for Flow {
    const NAME: &'static str = "invoice";
    type Input = String;
    type Output = Value;

    fn versions() -> Versions {
        Versions::new().of::<Invoice>().of::<Approval>()
    }

    async fn run(&self, ctx: &Ctx, id: String) -> Result<Value, WorkflowError> {
        let inv: Invoice = ctx
            .step("parse", || async {
                Ok(Invoice {
                    id: id.clone(),
                    client: "ACME".into(),
                    amount: 1250,
                    currency: Some("EUR".into()),
                })
            })
            .await?;
        let a: Approval = ctx.interrupt("approve", json!({"invoice": inv.id})).await?;
        let _: Value = ctx.interrupt("confirm", json!({})).await?;
        let total: Invoice = ctx.step("total", || async { Ok(inv.clone()) }).await?;
        Ok(json!({"client": total.client, "cents": total.amount, "currency": total.currency, "approved": a.approved}))
    }
}

/// The new build with the 2 → 3 migration forgotten.
struct Forgot;

#[derive(Debug, Serialize, Deserialize)]
struct InvoiceWithoutRetype {
    id: String,
    client: String,
    amount: u64,
}

impl Versioned for InvoiceWithoutRetype {
    const NAME: &'static str = "kit.Invoice";
    const VERSION: u32 = 3;

    fn upgrade(from: u32, v: Value) -> Result<Value, Migration> {
        match from {
            1 => Invoice::upgrade(1, v),
            _ => Err(Migration::Missing),
        }
    }
}

impl Workflow for Forgot {
    const NAME: &'static str = "invoice";
    type Input = String;
    type Output = Value;

    fn versions() -> Versions {
        Versions::new().of::<InvoiceWithoutRetype>()
    }

    async fn run(&self, ctx: &Ctx, _id: String) -> Result<Value, WorkflowError> {
        let inv: InvoiceWithoutRetype = ctx
            .step("parse", || async {
                Err(savepoint::workflow::StepError::fatal("never runs live"))
            })
            .await?;
        Ok(json!({"cents": inv.amount}))
    }
}

fn build<W: Workflow>(w: W) -> Registry {
    let mut r = Registry::new();
    r.register(w);
    r
}

#[tokio::test(start_paused = true)]
async fn values_recorded_by_the_old_build_are_upgraded_before_the_new_code_sees_them() {
    let mut env = TestEnv::new(|_| build(v1::Flow)).await.unwrap();
    // One run approved under the old build (its answer recorded at version 1), waiting for
    // its confirmation; one still waiting for its approval.
    let answered = env.start::<v1::Flow>(&"INV-1".to_owned()).await.unwrap();
    assert_eq!(env.settle(&answered).await.unwrap().header.status, RunStatus::Waiting);
    env.resume(&answered, json!({"ok": true})).await.unwrap();
    let at_confirm = env.settle(&answered).await.unwrap();
    assert_eq!(
        (at_confirm.header.status, at_confirm.journal.len()),
        (RunStatus::Waiting, 2)
    );
    let waiting = env.start::<v1::Flow>(&"INV-2".to_owned()).await.unwrap();
    assert_eq!(env.settle(&waiting).await.unwrap().header.status, RunStatus::Waiting);

    // The deploy gate says the new build takes both runs on through its migrations, and that
    // the build that forgot one would block them.
    let check = replay_check(env.store(), &build(Flow), &CheckOptions::default())
        .await
        .unwrap();
    assert!(!check.blocks(), "{}", check.render());
    let migrated: usize = check
        .findings
        .iter()
        .filter(|f| f.verdict == Verdict::Migrated)
        .map(|f| f.runs)
        .sum();
    assert_eq!(migrated, 2, "{}", check.render());
    let forgot = replay_check(env.store(), &build(Forgot), &CheckOptions::default())
        .await
        .unwrap();
    assert!(forgot.blocks(), "{}", forgot.render());
    assert!(forgot.render().contains("Versioned::upgrade"), "{}", forgot.render());

    env.deploy(|_| build(Flow)).await.unwrap();
    env.resume(&waiting, json!({"approved": true})).await.unwrap();
    assert_eq!(env.settle(&waiting).await.unwrap().header.status, RunStatus::Waiting);
    for run in [&answered, &waiting] {
        env.resume(run, json!("confirmed")).await.unwrap();
        let done = env.settle(run).await.unwrap();
        assert_eq!(done.header.status, RunStatus::Completed, "{:?}", done.header);
        assert_eq!(
            done.output(),
            Some(&json!({"client": "ACME", "cents": 1250, "currency": null, "approved": true}))
        );
        // The journal keeps what the old build wrote; what the new one writes carries its
        // version (the step `total`, and the answer the new build received).
        let tv = |name: &str| done.journal.iter().find(|e| e.name == name).map(|e| e.tv);
        assert_eq!(tv("parse"), Some(None));
        assert_eq!(tv("total"), Some(Some(4)));
        let answer = if run == &waiting { Some(2) } else { None };
        assert_eq!(tv("approve"), Some(answer));
        // Versioned entries in its journal: only a worker that reads them may claim it.
        assert!(
            done.header.needs.contains(&"value_versions".to_owned()),
            "{:?}",
            done.header.needs
        );
    }
    // The recorded step ran once per run, under the old build, never again.
    assert_eq!(env.stubs().calls("parse"), 2);
    env.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_value_with_no_migration_blocks_the_run_until_a_build_that_has_it() {
    let mut env = TestEnv::new(|_| build(v1::Flow)).await.unwrap();
    let run = env.start::<v1::Flow>(&"INV-3".to_owned()).await.unwrap();
    assert_eq!(env.settle(&run).await.unwrap().header.status, RunStatus::Waiting);
    env.deploy(|_| build(Forgot)).await.unwrap();
    // The answer wakes the run: the new build replays it and meets the old value.
    env.resume(&run, json!({"approved": true})).await.unwrap();
    let blocked = env.settle(&run).await.unwrap();
    assert_eq!(blocked.header.status, RunStatus::Blocked);
    assert_eq!(
        blocked.header.block_kind,
        Some(savepoint::core::model::BlockKind::Migration)
    );
    let reason = blocked.header.reason.clone().unwrap_or_default();
    for says in [
        "step \"parse\"",
        "recorded at version 1 of",
        "InvoiceWithoutRetype",
        "reads version 3",
        "from version 2 to 3: no migration declared",
        "savepoint retry",
    ] {
        assert!(reason.contains(says), "{says:?} is not in {reason:?}");
    }
    // The fix deployed, a retry takes the run on from where it stopped.
    env.deploy(|_| build(Flow)).await.unwrap();
    env.retry(&run).await.unwrap();
    // (The answer stayed buffered: the blocked build never took it.)
    assert_eq!(env.settle(&run).await.unwrap().header.status, RunStatus::Waiting);
    env.resume(&run, json!("confirmed")).await.unwrap();
    let done = env.settle(&run).await.unwrap();
    assert_eq!(done.header.status, RunStatus::Completed, "{:?}", done.header);
    assert_eq!(done.output().unwrap()["cents"], json!(1250));
    env.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_value_newer_than_the_code_is_given_back_to_a_build_that_reads_it() {
    // Written by the new build, then the old build comes back (a rollback): its worker does not
    // claim the run (the run needs `value:…Invoice@4`, which it does not know), so the value
    // is neither misread nor does the run block; the next build that knows it goes on.
    let mut env = TestEnv::new(|_| build(Flow)).await.unwrap();
    let run = env.start::<Flow>(&"INV-4".to_owned()).await.unwrap();
    let waiting = env.settle(&run).await.unwrap();
    assert_eq!(waiting.header.status, RunStatus::Waiting);
    let feature = format!("value:{}@4", <Invoice as Versioned>::NAME);
    assert!(waiting.header.needs.contains(&feature), "{:?}", waiting.header.needs);
    env.deploy(|_| build(v1::Flow)).await.unwrap();
    env.resume(&run, json!({"approved": true})).await.unwrap();
    match env.settle(&run).await {
        Err(TestError::Stuck { status, .. }) => assert_eq!(status, "pending"),
        other => panic!("the old build must give the run back, got {other:?}"),
    }
    let h = env.store().header(&run).await.unwrap().unwrap();
    // Untouched: no claim spent a fence, nothing was journaled.
    assert_eq!(
        (h.status, h.fence, h.steps),
        (RunStatus::Pending, waiting.header.fence, waiting.header.steps),
        "{h:?}"
    );
    let why = h.waiting_for.unwrap_or_default();
    assert!(why.contains(&format!("run feature {feature}")), "{why}");
    // Rolled forward again: the run goes on where it was.
    env.deploy(|_| build(Flow)).await.unwrap();
    assert_eq!(env.settle(&run).await.unwrap().header.status, RunStatus::Waiting);
    env.resume(&run, json!("confirmed")).await.unwrap();
    let done = env.settle(&run).await.unwrap();
    assert_eq!(done.output().unwrap()["cents"], json!(1250), "{:?}", done.header);
    env.shutdown().await;
}

/// A field added with a default needs no version: the old value decodes as it is.
#[tokio::test(start_paused = true)]
async fn an_added_field_with_a_default_needs_nothing() {
    #[derive(Serialize, Deserialize)]
    struct Old {
        n: u32,
    }
    #[derive(Serialize, Deserialize)]
    struct New {
        n: u32,
        #[serde(default)]
        label: String,
    }
    struct Before;
    impl Workflow for Before {
        const NAME: &'static str = "count";
        type Input = Value;
        type Output = Value;
        async fn run(&self, ctx: &Ctx, _: Value) -> Result<Value, WorkflowError> {
            let o: Old = ctx.step("count", || async { Ok(Old { n: 7 }) }).await?;
            let _: Value = ctx.interrupt("go", json!({})).await?;
            Ok(json!(o.n))
        }
    }
    struct After;
    impl Workflow for After {
        const NAME: &'static str = "count";
        type Input = Value;
        type Output = Value;
        async fn run(&self, ctx: &Ctx, _: Value) -> Result<Value, WorkflowError> {
            let o: New = ctx
                .step("count", || async {
                    Ok(New {
                        n: 0,
                        label: "x".into(),
                    })
                })
                .await?;
            let _: Value = ctx.interrupt("go", json!({})).await?;
            Ok(json!([o.n, o.label]))
        }
    }
    let mut env = TestEnv::new(|_| build(Before)).await.unwrap();
    let run = env.start::<Before>(&json!({})).await.unwrap();
    assert_eq!(env.settle(&run).await.unwrap().header.status, RunStatus::Waiting);
    env.deploy(|_| build(After)).await.unwrap();
    env.resume(&run, json!(true)).await.unwrap();
    let done = env.settle(&run).await.unwrap();
    assert_eq!(done.output(), Some(&json!([7, ""])));
    assert_eq!(done.journal[0].tv, None);
    env.shutdown().await;
}

/// The history a `savepoint export` of a run the old build answered holds.
fn old_export(value_version: Option<u32>) -> Value {
    let mut parse = json!({"index": 0, "name": "parse", "kind": "step", "outcome": "ok",
        "result": {"id": "INV-9", "customer": "ACME", "amount": "0.99", "note": ""}, "attempts": 1, "at": 1});
    if let Some(v) = value_version {
        parse["value_version"] = json!(v);
    }
    json!({"workflow": "invoice", "thread_id": "inv-9", "input": "INV-9", "journal": [
        parse,
        {"index": 1, "name": "approve", "kind": "interrupt", "outcome": "ok", "result": {"ok": false},
         "attempts": 1, "at": 2},
        {"index": 2, "name": "confirm", "kind": "interrupt", "outcome": "ok", "result": "yes", "attempts": 1, "at": 3},
        {"index": 3, "name": "total", "kind": "step", "outcome": "ok",
         "result": {"id": "INV-9", "client": "ACME", "amount": 99, "currency": null}, "value_version": 4,
         "attempts": 1, "at": 4},
    ]})
}

#[tokio::test]
async fn replay_export_goes_through_the_migrations() {
    match replay_export(&build(Flow), &old_export(None)).await.unwrap() {
        ReplayReport::Finished(Ok(out)) => {
            assert_eq!(
                out,
                json!({"client": "ACME", "cents": 99, "currency": null, "approved": false})
            );
        }
        other => panic!("expected the export to replay through the migrations, got {other:?}"),
    }
    // A build that lacks a migration is told so, naming the call and the versions.
    match replay_export(&build(Forgot), &old_export(Some(2))).await.unwrap() {
        ReplayReport::Diverged(why) => assert!(why.contains("from version 2 to 3"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The run's input is a recorded value too: stamped at its start with the version of its type
/// the starting code declares, and upgraded before the new code sees it.
mod input {
    use super::*;

    #[derive(Serialize, Deserialize)]
    pub(crate) struct OrderV1 {
        customer: String,
    }

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct Order {
        client: String,
    }

    impl Versioned for Order {
        const NAME: &'static str = "kit.Order";
        const VERSION: u32 = 2;
        fn upgrade(from: u32, mut v: Value) -> Result<Value, Migration> {
            match from {
                1 => {
                    let o = object(&mut v)?;
                    let c = o.remove("customer").ok_or_else(|| Migration::failed("no customer"))?;
                    o.insert("client".into(), c);
                    Ok(v)
                }
                _ => Err(Migration::Missing),
            }
        }
    }

    pub(crate) struct Before;
    impl Workflow for Before {
        const NAME: &'static str = "order";
        type Input = OrderV1;
        type Output = Value;
        async fn run(&self, ctx: &Ctx, o: OrderV1) -> Result<Value, WorkflowError> {
            let _: Value = ctx.interrupt("go", json!({})).await?;
            Ok(json!(o.customer))
        }
    }

    pub(crate) struct After;
    impl Workflow for After {
        const NAME: &'static str = "order";
        type Input = Order;
        type Output = Value;
        fn versions() -> Versions {
            Versions::new().of::<Order>()
        }
        async fn run(&self, ctx: &Ctx, o: Order) -> Result<Value, WorkflowError> {
            let _: Value = ctx.interrupt("go", json!({})).await?;
            Ok(json!(o.client))
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_runs_input_is_upgraded_from_the_version_it_was_started_with() {
    let mut env = TestEnv::new(|_| build(input::Before)).await.unwrap();
    let old = env.start_named("order", json!({"customer": "ACME"})).await.unwrap();
    assert_eq!(env.settle(&old).await.unwrap().header.input_version, None);
    env.deploy(|_| build(input::After)).await.unwrap();
    // A run the new build starts is stamped with the new version and read as it is.
    let new = env.start_named("order", json!({"client": "Initech"})).await.unwrap();
    let settled = env.settle(&new).await.unwrap();
    assert_eq!(settled.header.input_version, Some(2));
    assert!(
        settled.header.needs.contains(&"input_version".to_owned()),
        "{:?}",
        settled.header.needs
    );
    for (run, client) in [(&old, "ACME"), (&new, "Initech")] {
        env.resume(run, json!(true)).await.unwrap();
        let done = env.settle(run).await.unwrap();
        assert_eq!(done.output(), Some(&json!(client)), "{:?}", done.header);
    }
    // The old build does not claim a run whose input is of a version it does not know (it
    // would only block on it): the run waits for a build that reads it.
    let newer = env.start_named("order", json!({"client": "Globex"})).await.unwrap();
    let h = env.settle(&newer).await.unwrap().header;
    let feature = format!("value:{}@2", <input::Order as Versioned>::NAME);
    assert!(h.needs.contains(&feature), "{:?}", h.needs);
    env.deploy(|_| build(input::Before)).await.unwrap();
    env.resume(&newer, json!(true)).await.unwrap();
    match env.settle(&newer).await {
        Err(TestError::Stuck { status, .. }) => assert_eq!(status, "pending"),
        other => panic!("the old build must give the run back, got {other:?}"),
    }
    let why = env.store().header(&newer).await.unwrap().unwrap().waiting_for;
    assert!(why.as_deref().unwrap_or_default().contains(&feature), "{why:?}");
    env.deploy(|_| build(input::After)).await.unwrap();
    let done = env.settle(&newer).await.unwrap();
    assert_eq!(done.output(), Some(&json!("Globex")), "{:?}", done.header);
    env.shutdown().await;
}

/// A child's output: its type is the child's, and the version of it travels with the output
/// as the child's code declared it (kept with the child's run, told to the parent), so the
/// parent's code upgrades it from there, whatever build the parent runs on.
mod child {
    use super::*;
    use savepoint::workflow::ChildSpec;

    /// The first build: a price as euros, as text.
    pub(crate) mod v1 {
        use super::*;

        #[derive(Debug, Clone, Serialize, Deserialize)]
        pub(crate) struct Price {
            pub euros: String,
        }

        pub(crate) struct Quote;

        impl Workflow for Quote {
            const NAME: &'static str = "quote";
            type Input = String;
            type Output = Price;

            async fn run(&self, ctx: &Ctx, sku: String) -> Result<Price, WorkflowError> {
                let _: Value = ctx.interrupt("price", json!({"sku": sku})).await?;
                Ok(Price { euros: "12.50".into() })
            }
        }

        pub(crate) struct Order;

        impl Workflow for Order {
            const NAME: &'static str = "order";
            type Input = String;
            type Output = Value;

            async fn run(&self, ctx: &Ctx, sku: String) -> Result<Value, WorkflowError> {
                let p: Price = ctx.child::<Quote>("quote", sku).await?;
                let _: Value = ctx.interrupt("confirm", json!({})).await?;
                Ok(json!({ "euros": p.euros }))
            }
        }
    }

    /// The new build: cents (2). Only the child's workflow declares the type; the parent
    /// reads it through the child's declaration.
    #[derive(Debug, Clone, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct Price {
        pub cents: u64,
    }

    impl Versioned for Price {
        const NAME: &'static str = "kit.Price";
        const VERSION: u32 = 2;

        fn upgrade(from: u32, v: Value) -> Result<Value, Migration> {
            match from {
                1 => {
                    let euros: f64 = v["euros"]
                        .as_str()
                        .ok_or_else(|| Migration::failed("euros is not text"))?
                        .parse()
                        .map_err(Migration::failed)?;
                    Ok(json!({ "cents": (euros * 100.0).round() as u64 }))
                }
                _ => Err(Migration::Missing),
            }
        }
    }

    pub(crate) struct Quote;

    impl Workflow for Quote {
        const NAME: &'static str = "quote";
        type Input = String;
        type Output = Price;

        fn versions() -> Versions {
            Versions::new().of::<Price>()
        }

        async fn run(&self, ctx: &Ctx, sku: String) -> Result<Price, WorkflowError> {
            let _: Value = ctx.interrupt("price", json!({"sku": sku})).await?;
            Ok(Price { cents: 1250 })
        }
    }

    pub(crate) struct Order;

    impl Workflow for Order {
        const NAME: &'static str = "order";
        type Input = String;
        type Output = Value;

        async fn run(&self, ctx: &Ctx, sku: String) -> Result<Value, WorkflowError> {
            let p: Price = ctx.child::<Quote>("quote", sku).await?;
            let _: Value = ctx.interrupt("confirm", json!({})).await?;
            Ok(json!({ "cents": p.cents }))
        }
    }

    /// The new build's `order` for a fleet that serves parents without registering `quote`:
    /// it lists the child's declarations, so its workers name the output's feature.
    pub(crate) struct OrderAlone;

    impl Workflow for OrderAlone {
        const NAME: &'static str = "order";
        type Input = String;
        type Output = Value;

        fn versions() -> Versions {
            Versions::new().child::<Quote>()
        }

        async fn run(&self, ctx: &Ctx, sku: String) -> Result<Value, WorkflowError> {
            Order.run(ctx, sku).await
        }
    }

    /// A parent that starts the child by name and reads its output as JSON: it gets the
    /// output as the child wrote it, whatever its version, and never blocks on it.
    pub(crate) struct ByName;

    impl Workflow for ByName {
        const NAME: &'static str = "order_by_name";
        type Input = String;
        type Output = Value;

        async fn run(&self, ctx: &Ctx, sku: String) -> Result<Value, WorkflowError> {
            let out: Value = ctx.child_with("quote", ChildSpec::named("quote", 1, sku)).await?;
            Ok(out)
        }
    }

    pub(crate) fn old(quote_only: bool) -> Registry {
        let mut r = Registry::new();
        r.register(v1::Quote);
        if !quote_only {
            r.register(v1::Order);
        }
        r
    }

    pub(crate) fn new(quote_only: bool) -> Registry {
        let mut r = Registry::new();
        r.register(Quote);
        if !quote_only {
            r.register(Order).register(ByName);
        }
        r
    }
}

/// Starts `workflow` and settles it and its child (at its interrupt); returns both.
async fn parent_waiting_on_child(env: &mut TestEnv, workflow: &str, sku: &str) -> (ThreadId, ThreadId) {
    let parent = env.start_named(workflow, json!(sku)).await.expect("the parent starts");
    let settled = env.settle(&parent).await.expect("the parent settles");
    assert_eq!(settled.header.status, RunStatus::Waiting);
    let kid = savepoint::workflow::child_thread_id(&parent, 0);
    let settled = env.settle(&kid).await.expect("the child settles");
    assert_eq!(settled.header.status, RunStatus::Waiting);
    (parent, kid)
}

/// The child's entry in its parent's journal: its recorded version.
fn child_entry_version(done: &savepoint_testing::Settled) -> Option<u32> {
    let e = done
        .journal
        .iter()
        .find(|e| e.name == "quote")
        .expect("the child's entry");
    e.tv
}

#[tokio::test(start_paused = true)]
async fn a_childs_output_is_upgraded_from_the_version_its_own_code_wrote_it_at() {
    let mut env = TestEnv::new(|_| child::old(false)).await.unwrap();
    let (early, early_kid) = parent_waiting_on_child(&mut env, "order", "A").await;
    let (late, late_kid) = parent_waiting_on_child(&mut env, "order", "B").await;
    // The first child completes under the old build (version 1) while no worker serves its
    // parent, which takes the output only once the new build is deployed.
    env.deploy(|_| child::old(true)).await.unwrap();
    env.resume(&early_kid, json!("priced")).await.unwrap();
    let kid = env.settle(&early_kid).await.unwrap();
    // (Recorded at version 1: the old code declares no version of its output's type.)
    assert_eq!(
        (kid.header.status, kid.header.output_version.map(|o| o.field())),
        (RunStatus::Completed, Some("@1".to_owned()))
    );
    env.deploy(|_| child::new(false)).await.unwrap();
    // The second completes under the new build: its output is at version 2, kept with it.
    env.resume(&late_kid, json!("priced")).await.unwrap();
    let kid = env.settle(&late_kid).await.unwrap();
    assert_eq!(
        kid.header.output_version.as_ref().map(|o| o.version),
        Some(2),
        "{:?}",
        kid.header
    );
    assert_eq!(kid.output(), Some(&json!({"cents": 1250})));
    for (run, recorded) in [(&early, None), (&late, Some(2))] {
        assert_eq!(env.settle(run).await.unwrap().header.status, RunStatus::Waiting);
        env.resume(run, json!("confirmed")).await.unwrap();
        let done = env.settle(run).await.unwrap();
        assert_eq!(done.header.status, RunStatus::Completed, "{:?}", done.header);
        // Read as the new code reads it, whichever build wrote it; journaled as it was written.
        assert_eq!(done.output(), Some(&json!({"cents": 1250})), "{:?}", done.header);
        assert_eq!(child_entry_version(&done), recorded);
    }
    // A parent that reads the child's output by name as JSON takes it as the child wrote it.
    let (by_name, kid) = parent_waiting_on_child(&mut env, "order_by_name", "C").await;
    env.resume(&kid, json!("priced")).await.unwrap();
    assert_eq!(env.settle(&kid).await.unwrap().header.status, RunStatus::Completed);
    let done = env.settle(&by_name).await.unwrap();
    assert_eq!(done.output(), Some(&json!({"cents": 1250})), "{:?}", done.header);
    // (Journaled without a version: it is never upgraded, so no worker need read one.)
    assert_eq!(child_entry_version(&done), None);
    assert!(done.header.needs.is_empty(), "{:?}", done.header.needs);
    env.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_childs_output_newer_than_its_parents_code_is_given_back_never_misread() {
    let mut env = TestEnv::new(|_| child::new(false)).await.unwrap();
    let feature = format!("value:{}@2", <child::Price as Versioned>::NAME);
    // D: the new build's parent took its child's output (version 2): it needs the type's
    // feature.
    let (read, kid) = parent_waiting_on_child(&mut env, "order", "D").await;
    env.resume(&kid, json!("priced")).await.unwrap();
    assert_eq!(env.settle(&kid).await.unwrap().header.status, RunStatus::Completed);
    let waiting = env.settle(&read).await.unwrap();
    assert_eq!(waiting.header.status, RunStatus::Waiting);
    assert!(waiting.header.needs.contains(&feature), "{:?}", waiting.header.needs);
    // E: its child completed under the new build while no worker served the parent, so the
    // output waits in the child's word.
    let (unread, kid) = parent_waiting_on_child(&mut env, "order", "E").await;
    env.deploy(|_| child::new(true)).await.unwrap();
    env.resume(&kid, json!("priced")).await.unwrap();
    let ov = env.settle(&kid).await.unwrap().header.output_version;
    assert_eq!(ov.map(|o| o.version), Some(2));
    let before = env.store().header(&unread).await.unwrap().unwrap();
    // Rolled back: the old parent code knows only version 1 of the child's output.
    env.deploy(|_| child::old(false)).await.unwrap();
    env.resume(&read, json!("confirmed")).await.unwrap();
    for run in [&read, &unread] {
        match env.settle(run).await {
            Err(TestError::Stuck { status, .. }) => assert_eq!(status, "pending"),
            other => panic!("the old build must give {run} back, got {other:?}"),
        }
        let h = env.store().header(run).await.unwrap().unwrap();
        assert!(h.needs.contains(&feature), "{:?}", h.needs);
        let why = h.waiting_for.clone().unwrap_or_default();
        assert!(why.contains(&format!("run feature {feature}")), "{why}");
        assert_eq!(h.status, RunStatus::Pending, "{h:?}");
    }
    // D was not claimed at all; E was claimed once, met the output in the child's word, and
    // went back with nothing journaled (the word still buffered).
    let d = env.store().header(&read).await.unwrap().unwrap();
    assert_eq!(
        (d.fence, d.steps),
        (waiting.header.fence, waiting.header.steps),
        "{d:?}"
    );
    let e = env.store().header(&unread).await.unwrap().unwrap();
    assert_eq!(e.steps, before.steps, "{e:?}");
    let events = env.store().events(&unread, 100).await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.typ == "given_back" && e.detail.contains(&feature)),
        "{events:?}"
    );
    // Rolled forward, to a fleet that serves the parents without registering `quote` (their
    // workflow lists its declarations): both go on and read the output at its version (D's
    // confirmation was answered during the rollback, E's is now).
    env.deploy(|_| build(child::OrderAlone)).await.unwrap();
    assert_eq!(env.settle(&unread).await.unwrap().header.status, RunStatus::Waiting);
    env.resume(&unread, json!("confirmed")).await.unwrap();
    for run in [&read, &unread] {
        let done = env.settle(run).await.unwrap();
        assert_eq!(done.output(), Some(&json!({"cents": 1250})), "{:?}", done.header);
        assert_eq!(child_entry_version(&done), Some(2));
    }
    env.shutdown().await;
}
