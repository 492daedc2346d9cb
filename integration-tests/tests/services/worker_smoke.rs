#![allow(clippy::disallowed_methods)] // a test: real ids and real time are what it wants
//! In-process smoke test of the worker runtime against the real RabbitMQ and Redis:
//! start runs of every demo workflow and watch them complete.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use savepoint_broker::Broker;
use savepoint_core::ids::ThreadId;
use savepoint_core::protocol::{Task, TaskReason};
use savepoint_runtime::config::{Config, MapEnv};
use savepoint_store::{RunStatus, ScriptStore};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn cfg() -> Config {
    let ns = format!("ws{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let mut env = MapEnv::default();
    for (k, v) in [
        ("SAVEPOINT_TEST_AMQP_URL", "SAVEPOINT_AMQP_URL"),
        ("SAVEPOINT_TEST_REDIS_URL", "SAVEPOINT_REDIS_URL"),
    ] {
        if let Ok(val) = std::env::var(k) {
            env.0.insert(v.into(), val);
        }
    }
    let mut c = Config::load(None, &env).unwrap();
    c.namespace = ns;
    c.partitions = 4;
    c.worker.http_addr = String::new();
    c.worker.slice_max_steps = 3;
    c
}

async fn start(store: &ScriptStore, broker: &Broker, wf: &str, input: serde_json::Value) -> ThreadId {
    let t = ThreadId::generate(wf);
    store.create(&t, wf, 1, &input.to_string(), "").await.unwrap();
    let task = Task::new(t.clone(), store.keys().partition(&t), Some(0), TaskReason::Start);
    broker.publish(&task.encode(), &[]).await.unwrap();
    t
}

async fn wait_status(store: &ScriptStore, t: &ThreadId, want: RunStatus) -> savepoint_store::RunHeader {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let h = store.header(t).await.unwrap().unwrap();
        if h.status == want {
            return h;
        }
        assert!(
            Instant::now() < deadline,
            "run {t} stuck in {:?} (want {want:?}): {h:?}",
            h.status
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_workflows_run_end_to_end() {
    let cfg = cfg();
    let store = ScriptStore::connect(&cfg.redis_url, cfg.keys(), cfg.store())
        .await
        .unwrap();
    let broker = Broker::connect(cfg.broker(), Duration::from_secs(10)).await.unwrap();
    let stop = CancellationToken::new();
    let registry = savepoint_demo::registry(&store);
    let worker = tokio::spawn(savepoint_worker::run(cfg.clone(), registry, stop.clone()));

    let chain = start(&store, &broker, "chain", json!({"steps": 10})).await;
    let h = wait_status(&store, &chain, RunStatus::Completed).await;
    assert_eq!(h.steps, 10);
    assert_eq!(h.output, Some(json!({"i": 10, "acc": 45})));

    let inv = start(&store, &broker, "invoice", json!({"invoice_id": "INV-1"})).await;
    let h = wait_status(&store, &inv, RunStatus::Completed).await;
    assert_eq!(h.output.unwrap()["total_cents"], 125_000);
    let log = savepoint_demo::EffectLog::new(&store).all().await.unwrap();
    assert_eq!(log.len(), 2, "{log:?}");

    let appr = start(&store, &broker, "approval", json!({})).await;
    let h = wait_status(&store, &appr, RunStatus::Waiting).await;
    assert_eq!(h.wait.unwrap().name, "gate");
    let woke = store.signal(&appr, "interrupt", "", &json!("yes"), None).await.unwrap();
    assert!(matches!(woke, savepoint_store::SignalOutcome::Woke(_)), "{woke:?}");
    let task = Task::new(appr.clone(), store.keys().partition(&appr), None, TaskReason::Signal);
    broker.publish(&task.encode(), &[]).await.unwrap();
    let h = wait_status(&store, &appr, RunStatus::Completed).await;
    assert_eq!(h.output, Some(json!({"log": ["first", "gate=yes"]})));

    let replay = savepoint_worker::replay::replay(&store, &savepoint_demo::registry(&store), &inv)
        .await
        .unwrap();
    assert!(
        matches!(replay, savepoint_worker::replay::ReplayReport::Finished(Ok(_))),
        "{replay:?}"
    );
    assert_eq!(savepoint_demo::EffectLog::new(&store).all().await.unwrap().len(), 2);

    stop.cancel();
    worker.await.unwrap().unwrap();
    broker.delete_topology().await.unwrap();
}
