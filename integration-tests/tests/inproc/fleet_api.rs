//! The fleet as an API (`GET /v1/workers`, `GET /v1/workflows`) and the typed client's
//! reading of it, against live in-process workers: what each registers is what the API
//! says, a stopped worker leaves the list, and runs are counted by workflow and status.

use serde_json::{json, Value};
use std::time::Duration;

use savepoint::workflow::{Ctx, Registry, Schemas, Workflow, WorkflowError};
use savepoint_client::Client;
use savepoint_integration_tests::inproc::InProc;
use savepoint_integration_tests::scenario::World;

/// A workflow with a published input schema, served at versions 1 to 2.
struct Greet;

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct Name {
    name: String,
}

impl Workflow for Greet {
    const NAME: &'static str = "fleet_greet";
    const VERSION: u32 = 2;
    const MIN_VERSION: u32 = 1;
    type Input = Name;
    type Output = String;
    async fn run(&self, ctx: &Ctx, input: Name) -> Result<String, WorkflowError> {
        ctx.step("greet", move || {
            let name = input.name.clone();
            async move { Ok(format!("hello {name}")) }
        })
        .await
    }
    fn schemas(&self) -> Schemas {
        Schemas::new().input::<Name>()
    }
}

/// A second workflow, served by one worker only, on another queue.
struct Tally;

impl Workflow for Tally {
    const NAME: &'static str = "fleet_tally";
    type Input = Value;
    type Output = u32;
    async fn run(&self, _ctx: &Ctx, _input: Value) -> Result<u32, WorkflowError> {
        Ok(1)
    }
}

fn greet_only() -> Registry {
    let mut reg = Registry::new();
    reg.register(Greet);
    reg
}

#[tokio::test]
async fn the_fleet_and_its_workflows_as_the_api_shows_them() {
    let w = World::new("fleet", |_| {}).await;
    let a = InProc::start(&w.cfg, greet_only());
    let mut b_cfg = w.cfg.clone();
    b_cfg.worker.queues = format!("{},books", w.cfg.queue);
    b_cfg.worker.build_id = "books-2026.12".into();
    let mut reg = greet_only();
    reg.register(Tally);
    let b = InProc::start(&b_cfg, reg);
    w.wait_registered(Greet::NAME).await;
    w.wait_registered(Tally::NAME).await;
    let client = Client::new(w.sched.base_url.clone());

    // (Both workflows registered can be B alone: wait until A has registered too.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let workers = loop {
        let workers = client.workers().await.expect("GET /v1/workers");
        if workers.workers.len() >= 2 || std::time::Instant::now() > deadline {
            break workers;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(workers.workers.len(), 2, "{workers:?}");
    let both: Vec<_> = workers
        .workers
        .iter()
        .filter(|w| {
            w.serves
                .iter()
                .any(|s| s.workflow == Greet::NAME && s.min_version == 1 && s.version == 2)
        })
        .collect();
    assert_eq!(both.len(), 2);
    let b_view = workers
        .workers
        .iter()
        .find(|w| w.serves.iter().any(|s| s.workflow == Tally::NAME))
        .expect("the worker serving the tally");
    assert_eq!(b_view.queues, [w.cfg.queue.clone(), "books".to_owned()]);
    // Two builds (B serves one workflow more): two contracts, each counted once; B's id is
    // the label it was given.
    let a_view = workers.workers.iter().find(|v| v.id != b_view.id).unwrap();
    assert_eq!(b_view.build.id, "books-2026.12");
    assert!(
        a_view.build.id.len() == 12 && a_view.build.id == a_view.build.contract,
        "{a_view:?}"
    );
    assert_ne!(a_view.build.contract, b_view.build.contract);
    assert_eq!(a_view.build.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(
        workers.builds,
        [(a_view.build.id.clone(), 1), ("books-2026.12".to_owned(), 1)]
            .into_iter()
            .collect()
    );
    for v in &workers.workers {
        assert!(v.last_heartbeat_at <= workers.server_time && v.expires_at > workers.server_time);
        assert!(v.silent_ms.is_none() && v.heartbeat_every_ms > 0);
        assert_eq!(v.pid, std::process::id());
        assert!(v.concurrency > 0);
    }

    // Two runs: one completes, one is refused at the start (its input does not match the
    // published schema) and so is never counted.
    let t = w.start(Greet::NAME, json!({"name": "ada"})).await;
    let run = w.wait_status(&t, &["completed"], Duration::from_secs(30)).await;
    assert_eq!(run["output"], json!("hello ada"));
    let (code, _) = w
        .post("/v1/runs", json!({"workflow": Greet::NAME, "input": {"nom": 1}}))
        .await;
    assert_eq!(code, 422);

    let list = client.workflows().await.expect("GET /v1/workflows");
    let names: Vec<_> = list.workflows.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(names, [Greet::NAME, Tally::NAME]);
    let greet = &list.workflows[0];
    assert_eq!((greet.min_version, greet.version, greet.workers), (1, 2, 2));
    let versions: Vec<_> = greet.versions.iter().map(|v| (v.version, v.workers)).collect();
    assert_eq!(versions, [(1, 2), (2, 2)]);
    let schema = greet.versions[1].schemas.as_ref().expect("the published schemas");
    assert!(schema["input"]["properties"]["name"].is_object(), "{schema}");
    assert_eq!(greet.runs.get("completed"), Some(&1), "{:?}", greet.runs);
    assert_eq!(greet.runs.values().sum::<u64>(), 1);
    let tally = &list.workflows[1];
    assert_eq!((tally.workers, tally.runs.len()), (1, 0));
    let mut queues = vec![w.cfg.queue.clone(), "books".to_owned()];
    queues.sort();
    assert_eq!(tally.queues, queues, "a workflow's queues, by name");
    assert!(!list.runs_capped && list.runs_counted >= 1);

    // A worker that stops deregisters: it leaves the list, and so does what only it served.
    b.stop().await;
    let workers = client.workers().await.expect("GET /v1/workers");
    assert_eq!(workers.workers.len(), 1);
    let list = client.workflows().await.expect("GET /v1/workflows");
    assert_eq!(list.workflows.len(), 1);
    assert_eq!(list.workflows[0].workers, 1);
    a.stop().await;
}

/// A workflow that asks a typed question.
struct Ship;

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
enum Carrier {
    Dhl,
    Ups,
}

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct ShipAnswer {
    send: bool,
    carrier: Carrier,
}

impl Workflow for Ship {
    const NAME: &'static str = "inbox_ship";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let a: ShipAnswer = ctx.interrupt("ship", json!({"question": "ship it?"})).await?;
        Ok(json!({"send": a.send, "carrier": matches!(a.carrier, Carrier::Dhl)}))
    }
    fn schemas(&self) -> Schemas {
        Schemas::new().interrupt::<ShipAnswer>("ship")
    }
}

/// The console inbox suggests an answer of the shape the interrupt's schema asks for (never
/// one the API would refuse), and the API takes that very answer.
#[tokio::test]
async fn the_inbox_suggests_an_answer_the_schema_accepts() {
    let w = World::new("inboxex", |_| {}).await;
    let mut reg = Registry::new();
    reg.register(Ship);
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered(Ship::NAME).await;
    let t = w.start(Ship::NAME, json!({})).await;
    w.wait_status(&t, &["waiting"], Duration::from_secs(60)).await;
    let html = w
        .http
        .get(format!("{}/ui/inbox", w.sched.base_url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let suggested = "{&#34;carrier&#34;:&#34;Dhl&#34;,&#34;send&#34;:false}";
    assert!(html.contains(&format!("placeholder=\"{suggested}\"")), "{html}");
    assert!(!html.contains("approved"), "{html}");
    let (code, body) = w
        .post(
            &format!("/v1/runs/{t}/resume"),
            json!({"value": {"carrier": "Dhl", "send": false}}),
        )
        .await;
    assert!(code < 300, "{code} {body}");
    w.wait_status(&t, &["completed"], Duration::from_secs(60)).await;
    wk.stop().await;
}
