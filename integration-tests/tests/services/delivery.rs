//! At-least-once delivery made harmless: duplicates, malformed messages.

use lapin::options::BasicGetOptions;
use serde_json::json;
use std::time::{Duration, Instant};

use savepoint_broker::Broker;
use savepoint_core::ids::ThreadId;
use savepoint_core::protocol::{Task, TaskReason};
use savepoint_integration_tests::scenario::World;

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");
const LONG: Duration = Duration::from_secs(40);

/// The same task delivered three times → one execution.
#[tokio::test]
async fn same_task_three_times_runs_once() {
    let w = World::new("dl", |_| {}).await;
    let t = ThreadId::generate("invoice");
    let inv = format!("INV-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    w.store
        .create(&t, "invoice", 1, &json!({"invoice_id": inv}).to_string(), "")
        .await
        .unwrap();
    let broker = Broker::connect(w.cfg.broker(), LONG).await.unwrap();
    let task = Task::new(t.clone(), w.store.keys().partition(&t), Some(0), TaskReason::Start);
    for _ in 0..3 {
        broker.publish(&task.encode(), &[]).await.unwrap();
    }
    let _wk = w.worker(WORKER, "wk", "");
    let run = w.wait_status(&t, &["completed"], LONG).await;
    assert_eq!(run["step"], 4);
    let claims = w
        .event_types(&t)
        .await
        .iter()
        .filter(|e| *e == "claimed" || *e == "takeover")
        .count();
    assert_eq!(claims, 1, "one execution");
    let deadline = Instant::now() + LONG;
    while broker.queue_depth().await.unwrap() > 0 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let counts = w.effect_counts().await;
    assert_eq!(counts.values().copied().collect::<Vec<_>>(), vec![1, 1], "{counts:?}");
}

/// Malformed messages land in the dead-letter queue with the reason in a header.
#[tokio::test]
async fn malformed_messages_are_dead_lettered_with_a_reason() {
    let w = World::new("dq", |_| {}).await;
    let broker = Broker::connect(w.cfg.broker(), LONG).await.unwrap();
    broker.publish(b"this is not messagepack", &[]).await.unwrap();
    let mut future = Task::new(ThreadId::new("t-1").unwrap(), 0, None, TaskReason::Due);
    future.v = 9;
    broker
        .publish(&rmp_serde::to_vec_named(&future).unwrap(), &[])
        .await
        .unwrap();
    let _wk = w.worker(WORKER, "wk", "");
    let deadline = Instant::now() + LONG;
    while broker.dlq_depth().await.unwrap() < 2 {
        assert!(Instant::now() < deadline, "messages did not reach the DLQ");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let conn = lapin::Connection::connect(&w.cfg.amqp_url, lapin::ConnectionProperties::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    let mut reasons = Vec::new();
    for _ in 0..2 {
        let msg = ch
            .basic_get(broker_dlq(&w).as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap()
            .expect("a dead letter");
        let headers = msg.delivery.properties.headers().clone().unwrap_or_default();
        let reason = headers
            .inner()
            .iter()
            .find(|(k, _)| k.as_str() == "x-savepoint-reason")
            .map(|(_, v)| match v {
                lapin::types::AMQPValue::LongString(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
                other => format!("{other:?}"),
            });
        reasons.push(reason.expect("reason header"));
    }
    assert!(
        reasons.iter().any(|r| r.contains("malformed task message")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("unsupported task version 9")),
        "{reasons:?}"
    );
    let _ = conn.close(0, "done".into()).await;
}

fn broker_dlq(w: &World) -> String {
    savepoint_broker::Topology::new(&w.cfg.namespace, &w.cfg.queue).dlq()
}
