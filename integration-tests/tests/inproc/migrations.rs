//! Versioned recorded values through the whole system (issue 28 §1): runs started through the
//! API by one build are taken over by a build whose types changed. The API stamps a start's
//! input with the serving code's version of the input's type; the export shows every value's
//! version; the deploy gate says which runs need a migration; a run whose value has no
//! migration blocks, the doctor says what settles it, and a retry after the fix completes it.
//! Run on whichever backend the tier uses.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::time::Duration;

use savepoint::workflow::{Ctx, Migration, Registry, Versioned, Versions, Workflow, WorkflowError};
use savepoint_integration_tests::inproc::InProc;
use savepoint_integration_tests::scenario::World;
use savepoint_worker::replay_check::{replay_check, CheckOptions, Verdict};

const LONG: Duration = Duration::from_secs(60);
const NAME: &str = "migrating";

#[derive(Serialize, Deserialize)]
struct OrderV1 {
    customer: String,
}

#[derive(Serialize, Deserialize)]
struct PriceV1 {
    euros: String,
}

/// The first build: prices an order, then waits for a human.
struct First;

impl Workflow for First {
    const NAME: &'static str = NAME;
    type Input = OrderV1;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, o: OrderV1) -> Result<Value, WorkflowError> {
        let p: PriceV1 = ctx
            .step("price", || async { Ok(PriceV1 { euros: "2.50".into() }) })
            .await?;
        let _: Value = ctx.interrupt("approve", json!({"customer": o.customer})).await?;
        Ok(json!([o.customer, p.euros]))
    }
}

/// `customer` renamed `client` (2).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Order {
    client: String,
}

impl Versioned for Order {
    const NAME: &'static str = "it.Order";
    const VERSION: u32 = 2;
    fn upgrade(from: u32, v: Value) -> Result<Value, Migration> {
        match (from, v) {
            (1, Value::Object(mut o)) => {
                let c = o.remove("customer").ok_or_else(|| Migration::failed("no customer"))?;
                Ok(json!({ "client": c }))
            }
            _ => Err(Migration::Missing),
        }
    }
}

/// Euros as text became cents (2).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Price {
    cents: u64,
}

impl Versioned for Price {
    const NAME: &'static str = "it.Price";
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

/// The second build, with the migrations.
struct Second;

impl Workflow for Second {
    const NAME: &'static str = NAME;
    type Input = Order;
    type Output = Value;
    fn versions() -> Versions {
        Versions::new().of::<Order>().of::<Price>()
    }
    async fn run(&self, ctx: &Ctx, o: Order) -> Result<Value, WorkflowError> {
        let p: Price = ctx.step("price", || async { Ok(Price { cents: 250 }) }).await?;
        let _: Value = ctx.interrupt("approve", json!({"client": o.client})).await?;
        Ok(json!([o.client, p.cents]))
    }
}

/// A second build that declares the new price type but forgot its migration.
struct Forgot;

#[derive(Serialize, Deserialize)]
struct PriceNoWayUp {
    cents: u64,
}

impl Versioned for PriceNoWayUp {
    const NAME: &'static str = "it.PriceNoWayUp";
    const VERSION: u32 = 2;
    fn upgrade(_from: u32, _v: Value) -> Result<Value, Migration> {
        Err(Migration::Missing)
    }
}

impl Workflow for Forgot {
    const NAME: &'static str = NAME;
    type Input = Value;
    type Output = Value;
    fn versions() -> Versions {
        Versions::new().of::<PriceNoWayUp>()
    }
    async fn run(&self, ctx: &Ctx, _: Value) -> Result<Value, WorkflowError> {
        let p: PriceNoWayUp = ctx.step("price", || async { Ok(PriceNoWayUp { cents: 250 }) }).await?;
        Ok(json!(p.cents))
    }
}

fn registry<W: Workflow>(w: W) -> Registry {
    let mut r = Registry::new();
    r.register(w);
    r
}

async fn export(w: &World, t: &savepoint::ids::ThreadId) -> Value {
    let (status, body) = w.get(&format!("/v1/runs/{t}/export")).await;
    assert!(matches!(status, 200 | 202), "{status} {body}");
    body
}

#[tokio::test]
async fn runs_of_the_old_build_migrate_block_without_a_migration_and_complete_after_the_fix() {
    let w = World::new("migrate", |_| {}).await;
    let first = InProc::start(&w.cfg, registry(First));
    w.wait_registered(NAME).await;
    let mut runs = Vec::new();
    for c in ["a", "b", "c"] {
        runs.push(w.start(NAME, json!({"customer": c})).await);
    }
    for t in &runs {
        w.wait_status(t, &["waiting"], LONG).await;
    }
    first.stop().await;
    let old = export(&w, &runs[0]).await;
    assert_eq!(
        (old.get("input_version"), old["journal"][0].get("value_version")),
        (None, None),
        "{old}"
    );

    // The gate: the second build takes all three on through its migrations; the one that
    // forgot a migration would block them, and says what to declare.
    let opts = CheckOptions {
        workflow: Some(NAME.into()),
        ..CheckOptions::default()
    };
    let gate = replay_check(&w.store, &registry(Second), &opts).await.unwrap();
    assert!(!gate.blocks(), "{}", gate.render());
    assert_eq!(
        (gate.findings.len(), gate.findings[0].verdict, gate.findings[0].runs),
        (1, Verdict::Migrated, 3),
        "{}",
        gate.render()
    );
    let forgot = replay_check(&w.store, &registry(Forgot), &opts).await.unwrap();
    assert!(forgot.blocks(), "{}", forgot.render());
    assert!(
        forgot.findings[0].detail.contains("from version 1 to 2"),
        "{}",
        forgot.render()
    );

    // The forgetful build meets one run: it blocks, and the doctor says what settles it.
    let forgetful = InProc::start(&w.cfg, registry(Forgot));
    w.wait_registered(NAME).await;
    let (status, body) = w
        .post(&format!("/v1/runs/{}/resume", runs[0]), json!({"value": true}))
        .await;
    assert!(matches!(status, 200 | 202), "{status} {body}");
    w.wait_status(&runs[0], &["blocked"], LONG).await;
    forgetful.stop().await;
    let (_, d) = w.get(&format!("/v1/runs/{}/diagnosis", runs[0])).await;
    assert_eq!(d["case"], json!("blocked_migration"), "{d}");
    let commands: Vec<&str> = d["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["command"].as_str())
        .collect();
    assert!(commands.iter().any(|c| c.starts_with("savepoint retry ")), "{d}");

    // The second build: the blocked run retried, the others resumed, every value upgraded.
    let second = InProc::start(&w.cfg, registry(Second));
    w.wait_registered(NAME).await;
    let (status, body) = w.post(&format!("/v1/runs/{}/retry", runs[0]), json!({})).await;
    assert!(matches!(status, 200 | 202), "{status} {body}");
    for t in &runs[1..] {
        let (status, body) = w.post(&format!("/v1/runs/{t}/resume"), json!({"value": true})).await;
        assert!(matches!(status, 200 | 202), "{status} {body}");
    }
    for (t, c) in runs.iter().zip(["a", "b", "c"]) {
        let done = w.wait_status(t, &["completed"], LONG).await;
        assert_eq!(done["output"], json!([c, 250]), "{done}");
    }

    // A run this build starts: the API stamped its input with the version the serving code
    // declares (after the catalog the API reads has seen the new worker), and its step's value
    // carries its version.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let new = w.start(NAME, json!({"client": "d"})).await;
    w.wait_status(&new, &["waiting"], LONG).await;
    let e = export(&w, &new).await;
    assert_eq!(
        (&e["input_version"], &e["journal"][0]["value_version"]),
        (&json!(2), &json!(2)),
        "{e}"
    );
    second.stop().await;
}

/// A versioned type as one build names it and a later build, having moved it, names it
/// (issue 49 §1.3): three Rust types of one shape, each declared under the name its build
/// gives it.
mod moved {
    use super::*;

    fn up(from: u32, v: Value) -> Result<Value, Migration> {
        match from {
            1 => Ok(json!({"cents": v["euros"].as_u64().unwrap_or(0) * 100})),
            _ => Err(Migration::Missing),
        }
    }

    macro_rules! totals {
        ($ty:ident, $name:expr, $formerly:expr) => {
            #[derive(Serialize, Deserialize, Clone)]
            pub(super) struct $ty {
                pub(super) cents: u64,
            }
            impl Versioned for $ty {
                const NAME: &'static str = $name;
                const FORMERLY: &'static [&'static str] = $formerly;
                const VERSION: u32 = 2;
                fn upgrade(from: u32, v: Value) -> Result<Value, Migration> {
                    up(from, v)
                }
            }
        };
    }
    // The build that recorded the runs: the name a build before `Versioned::NAME` recorded,
    // the type's Rust path.
    totals!(Old, "old_crate::a::Totals", &[]);
    // Moved and named, without its former name.
    totals!(Named, "billing.Totals", &[]);
    // Moved and named, listing its former name.
    totals!(Formerly, "billing.Totals", &["old_crate::a::Totals"]);

    /// A step that records the totals, a human's answer, then the cents.
    pub(super) struct Bill<T>(pub(super) std::marker::PhantomData<T>);

    pub(super) trait Cents: Versioned + Clone + Send + Sync {
        fn new(cents: u64) -> Self;
        fn cents(&self) -> u64;
    }
    macro_rules! cents {
        ($($ty:ident),*) => {$(
            impl Cents for $ty {
                fn new(cents: u64) -> Self { Self { cents } }
                fn cents(&self) -> u64 { self.cents }
            }
        )*};
    }
    cents!(Old, Named, Formerly);

    impl<T: Cents> Workflow for Bill<T> {
        const NAME: &'static str = "moved_type";
        type Input = Value;
        type Output = u64;
        fn versions() -> Versions {
            Versions::new().of::<T>()
        }
        async fn run(&self, ctx: &Ctx, _input: Value) -> Result<u64, WorkflowError> {
            let t: T = ctx.step("totals", || async { Ok(T::new(1250)) }).await?;
            let _: Value = ctx.interrupt("approve", json!({})).await?;
            Ok(t.cents())
        }
    }

    pub(super) fn build<T: Cents>() -> Registry {
        let mut r = Registry::new();
        r.register(Bill::<T>(std::marker::PhantomData));
        r
    }
}

/// Waits until the store's header of `t` says it waits for a worker naming `feature`.
async fn wait_given_back(w: &World, t: &savepoint::ids::ThreadId, feature: &str) {
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let h = w.store.header(t).await.expect("read").expect("the run");
        if h.waiting_for.as_deref().is_some_and(|why| why.contains(feature)) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never given back for {feature}: {h:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_moved_type_is_read_under_its_former_name_and_one_no_build_names_is_let_go() {
    use moved::{build, Formerly, Named, Old};
    let feature = "value:old_crate::a::Totals@2";
    let w = World::new("movedtype", |_| {}).await;
    let old = InProc::start(&w.cfg, build::<Old>());
    w.wait_registered("moved_type").await;
    let (a, b) = (
        w.start("moved_type", json!({})).await,
        w.start("moved_type", json!({})).await,
    );
    for t in [&a, &b] {
        w.wait_status(t, &["waiting"], LONG).await;
        let h = w.store.header(t).await.unwrap().unwrap();
        assert!(h.needs.iter().any(|n| n == feature), "{:?}", h.needs);
    }
    old.stop().await;

    // The deploy gate: a build that moved the type without its former name would give these
    // runs back for ever (exit 1, with the fix); one that lists it reads them.
    let opts = CheckOptions {
        workflow: Some("moved_type".into()),
        ..CheckOptions::default()
    };
    let gate = replay_check(&w.store, &build::<Named>(), &opts).await.unwrap();
    let text = gate.render();
    assert!(gate.blocks(), "{text}");
    assert_eq!(
        (gate.findings[0].verdict, gate.findings[0].runs),
        (Verdict::WouldWait, 2),
        "{text}"
    );
    assert!(gate.findings[0].detail.contains(feature), "{text}");
    assert!(
        gate.findings[0].hint.contains("FORMERLY") && gate.findings[0].hint.contains("forget-feature"),
        "{text}"
    );
    let gate = replay_check(&w.store, &build::<Formerly>(), &opts).await.unwrap();
    assert!(!gate.blocks() && gate.findings.is_empty(), "{}", gate.render());

    // Deployed without the former name: the claim gives run A back, naming the feature.
    let named = InProc::start(&w.cfg, build::<Named>());
    let (code, body) = w.post(&format!("/v1/runs/{a}/resume"), json!({"value": true})).await;
    assert_eq!(code, 202, "{body}");
    wait_given_back(&w, &a, feature).await;
    // The way out: only a value feature the run needs, and not while a worker holds it.
    let (code, body) = w
        .post(
            &format!("/v1/runs/{a}/forget-feature"),
            json!({"feature": "value_versions"}),
        )
        .await;
    assert_eq!(code, 422, "not a value feature: {body}");
    let (code, body) = w
        .post(
            &format!("/v1/runs/{a}/forget-feature"),
            json!({"feature": "value:billing.Totals@2"}),
        )
        .await;
    assert_eq!(code, 409, "{body}");
    assert!(body.to_string().contains(feature), "{body}");
    let (code, body) = w
        .post(&format!("/v1/runs/{a}/forget-feature"), json!({"feature": feature}))
        .await;
    assert_eq!(code, 202, "{body}");
    assert_eq!(body["status"], "pending", "{body}");
    // The new build reads the value (its shape is the same): the run completes.
    let run = w.wait_status(&a, &["completed", "blocked", "failed"], LONG).await;
    assert_eq!(
        (&run["status"], &run["output"]),
        (&json!("completed"), &json!(1250)),
        "{run}"
    );
    assert!(w.event_types(&a).await.iter().any(|e| e == "feature_forgotten"));
    named.stop().await;

    // Deployed with the former name: run B is read without anyone's help.
    let formerly = InProc::start(&w.cfg, build::<Formerly>());
    let (code, body) = w.post(&format!("/v1/runs/{b}/resume"), json!({"value": true})).await;
    assert_eq!(code, 202, "{body}");
    let run = w.wait_status(&b, &["completed", "blocked", "failed"], LONG).await;
    assert_eq!(
        (&run["status"], &run["output"]),
        (&json!("completed"), &json!(1250)),
        "{run}"
    );
    let (code, body) = w
        .post(&format!("/v1/runs/{b}/forget-feature"), json!({"feature": feature}))
        .await;
    assert_eq!(code, 409, "an ended run needs nothing: {body}");
    formerly.stop().await;
}

/// A child whose output type is at version 2, and a parent that reads it (issue 49 §1.4).
mod unversioned {
    use super::*;

    #[derive(Serialize, Deserialize)]
    pub(super) struct Price {
        pub(super) cents: u64,
    }

    impl Versioned for Price {
        const NAME: &'static str = "it.ChildPrice";
        const VERSION: u32 = 2;
        fn upgrade(from: u32, v: Value) -> Result<Value, Migration> {
            // Version 1 was euros as a number; a lenient migration, as authors write them: a
            // value already at 2 read as 1 would become 0 cents, not an error.
            match from {
                1 => Ok(json!({"cents": (v["euros"].as_f64().unwrap_or(0.0) * 100.0).round() as u64})),
                _ => Err(Migration::Missing),
            }
        }
    }

    pub(super) struct Quote;
    impl Workflow for Quote {
        const NAME: &'static str = "uv_quote";
        type Input = Value;
        type Output = Price;
        fn versions() -> Versions {
            Versions::new().of::<Price>()
        }
        async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Price, WorkflowError> {
            let _: Value = ctx.interrupt("price", json!({})).await?;
            Ok(Price { cents: 1250 })
        }
    }

    pub(super) struct Order;
    impl Workflow for Order {
        const NAME: &'static str = "uv_order";
        type Input = Value;
        type Output = u64;
        async fn run(&self, ctx: &Ctx, _input: Value) -> Result<u64, WorkflowError> {
            let p: Price = ctx.child::<Quote>("quote", json!({})).await?;
            Ok(p.cents)
        }
    }

    pub(super) fn build(orders: bool) -> Registry {
        let mut r = Registry::new();
        r.register(Quote);
        if orders {
            r.register(Order);
        }
        r
    }
}

#[tokio::test]
async fn a_childs_output_without_a_version_is_never_read_as_version_one() {
    // A build from 3992e27 to before 0084d6c completed children whose output type it declared
    // at version 2 without recording `ov`; a parent read such an output as version 1, applied
    // the 1 → 2 migration to a value already at 2, and went on with 0 cents instead of 1250.
    // The child's record and its word to the parent are left as such a build left them; the
    // parent blocks instead, the operator says the version, and a retry reads 1250.
    use unversioned::{build, Order};
    let w = World::new("noov", |_| {}).await;
    let wk = InProc::start(&w.cfg, build(true));
    w.wait_registered(Order::NAME).await;
    let parent = w.start(Order::NAME, json!({})).await;
    let kid = savepoint::workflow::child_thread_id(&parent, 0);
    w.wait_status(&parent, &["waiting"], LONG).await;
    w.wait_status(&kid, &["waiting"], LONG).await;
    wk.stop().await;
    // The child completes on a fleet that does not serve the parent: its word waits there.
    let quotes = InProc::start(&w.cfg, build(false));
    let (code, body) = w.post(&format!("/v1/runs/{kid}/resume"), json!({"value": 1})).await;
    assert_eq!(code, 202, "{body}");
    w.wait_status(&kid, &["completed"], LONG).await;
    quotes.stop().await;
    let h = w.store.header(&kid).await.unwrap().unwrap();
    assert_eq!(
        h.output_version.as_ref().map(|o| o.field()),
        Some("it.ChildPrice@2".to_owned())
    );
    // As the older build left them: no `ov` on the child, none in its word.
    let k = w.store.keys();
    let _: i64 = w
        .store
        .query(redis::cmd("HDEL").arg(&k.run(&kid).run).arg("ov"))
        .await
        .unwrap();
    let signals = &k.run(&parent).signals;
    let fields: std::collections::HashMap<String, String> =
        w.store.query(redis::cmd("HGETALL").arg(signals)).await.unwrap();
    let (field, word) = fields
        .iter()
        .find(|(f, _)| f.starts_with("s:child:"))
        .expect("the child's word waits in the parent's signals");
    let mut word: Value = serde_json::from_str(word).expect("the word is JSON");
    assert_eq!(word["ov"], "it.ChildPrice@2", "{word}");
    word.as_object_mut().unwrap().remove("ov");
    let _: i64 = w
        .store
        .query(redis::cmd("HSET").arg(signals).arg(field).arg(word.to_string()))
        .await
        .unwrap();

    let wk = InProc::start(&w.cfg, build(true));
    let run = w.wait_status(&parent, &["completed", "blocked", "failed"], LONG).await;
    assert_eq!(run["status"], "blocked", "read as a guess: {run}");
    let reason = run["blocked_reason"].as_str().unwrap_or_default().to_owned();
    let command = format!("savepoint output-version {parent} 0 it.ChildPrice@<version>");
    for says in [
        "carries no version",
        "it.ChildPrice",
        command.as_str(),
        "savepoint retry",
    ] {
        assert!(reason.contains(says), "{says:?} not in {reason:?}");
    }
    // The operator says which version the child's code wrote it at, for the parent's call,
    // then retries the parent. A type the parent's code does not read is refused at the read.
    let path = format!("/v1/runs/{parent}/output-version");
    let (code, body) = w
        .post(&path, json!({"call": 0, "output_version": "it.ChildPrice@0"}))
        .await;
    assert_eq!(code, 422, "{body}");
    let (code, body) = w
        .post(&path, json!({"call": 0, "output_version": "other.Price@2"}))
        .await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = w.post(&format!("/v1/runs/{parent}/retry"), json!({})).await;
    assert_eq!(code, 202, "{body}");
    let run = w.wait_status(&parent, &["completed", "blocked"], LONG).await;
    let reason = run["blocked_reason"].as_str().unwrap_or_default().to_owned();
    assert!(reason.contains("names a type this code does not read"), "{run}");
    let (code, body) = w
        .post(&path, json!({"call": 0, "output_version": "it.ChildPrice@2"}))
        .await;
    assert_eq!(code, 200, "a later answer replaces an earlier one: {body}");
    let (code, body) = w.post(&format!("/v1/runs/{parent}/retry"), json!({})).await;
    assert_eq!(code, 202, "{body}");
    let run = w.wait_status(&parent, &["completed", "blocked", "failed"], LONG).await;
    assert_eq!(
        (&run["status"], &run["output"]),
        (&json!("completed"), &json!(1250)),
        "{run}"
    );
    let (code, body) = w
        .post(&path, json!({"call": 0, "output_version": "it.ChildPrice@2"}))
        .await;
    assert_eq!(code, 409, "an ended run reads no output: {body}");
    wk.stop().await;
}
