//! Integration tests against a running RabbitMQ (`SAVEPOINT_TEST_AMQP_URL`, default localhost).
//! They fail, rather than skip, when the broker is unreachable.
#![allow(clippy::disallowed_methods)] // real broker, real time, random namespaces

use super::*;
use futures::FutureExt;
use std::panic::AssertUnwindSafe;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const DEFAULT_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
const STEP: Duration = Duration::from_secs(10);

fn config(url: &str, ns: &str) -> BrokerConfig {
    BrokerConfig {
        amqp_url: url.to_owned(),
        topology: Topology::new(ns, "default"),
        prefetch: 10,
        delivery_limit: 20,
        reconnect_min: Duration::from_millis(50),
        reconnect_max: Duration::from_millis(500),
        tls: Default::default(),
    }
}

fn test_url() -> String {
    std::env::var("SAVEPOINT_TEST_AMQP_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// Compile-time check that the public futures can be spawned on a multi-threaded runtime.
#[allow(dead_code)]
fn futures_are_send(b: &Broker, c: &mut Consumer, d: &Delivery) {
    fn send<T: Send>(_: &T) {}
    send(&b.publish(&[], &[]));
    send(&b.queue_depth());
    send(&c.next());
    send(&d.ack());
    send(&d.dead_letter(b, "r"));
}

#[tokio::test]
async fn unreachable_broker_gives_up_after_deadline() {
    let cfg = config("amqp://guest:guest@127.0.0.1:1/%2f", "btx");
    let started = std::time::Instant::now();
    let err = Broker::connect(cfg, Duration::from_millis(300)).await.err();
    assert!(started.elapsed() < Duration::from_secs(5));
    match err {
        Some(e @ BrokerError::GaveUp { .. }) => assert!(e.is_transient(), "{e}"),
        other => panic!("expected GaveUp, got {other:?}"),
    }
    let bad = config("not a url", "btx");
    let err = Broker::connect(bad, Duration::from_secs(5)).await.err();
    assert!(matches!(err, Some(BrokerError::InvalidConfig(_))), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_consume_dead_letter_round_trip() {
    let url = test_url();
    let ns = format!("bt{:016x}", rand::random::<u64>());
    let broker = Broker::connect(config(&url, &ns), STEP)
        .await
        .unwrap_or_else(|e| panic!("RabbitMQ at {url} must be reachable for this test: {e}"));
    let outcome = AssertUnwindSafe(round_trip(&broker)).catch_unwind().await;
    let cleanup = broker.delete_topology().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    cleanup.expect("delete_topology");
}

async fn round_trip(broker: &Broker) {
    let publishes = (0..3).map(|i| {
        let headers = vec![("x-test".to_owned(), format!("v{i}"))];
        let broker = broker.clone();
        async move { broker.publish(format!("msg-{i}").as_bytes(), &headers).await }
    });
    for res in futures::future::join_all(publishes).await {
        res.expect("publish");
    }
    assert_eq!(broker.queue_depth().await.expect("queue_depth"), 3);

    let shutdown = CancellationToken::new();
    let mut consumer = broker.consumer("bt-consumer", shutdown.clone());
    let mut got = Vec::new();
    for _ in 0..3 {
        let d = tokio::time::timeout(STEP, consumer.next())
            .await
            .expect("delivery in time")
            .expect("consumer yields a delivery");
        let body = String::from_utf8(d.data.clone()).expect("utf8 body");
        let i = body.strip_prefix("msg-").expect("body prefix").to_owned();
        assert_eq!(d.headers.get("x-test"), Some(&format!("v{i}")));
        got.push((i, d));
    }
    got.sort_by_key(|(i, _)| i.clone());
    let ids: Vec<&str> = got.iter().map(|(i, _)| i.as_str()).collect();
    assert_eq!(ids, ["0", "1", "2"]);

    got[0].1.ack().await.expect("ack 0");
    got[1].1.ack().await.expect("ack 1");
    assert!(got[1].1.ack().await.is_err(), "double ack must fail");
    got[2].1.dead_letter(broker, "test reason").await.expect("dead_letter");
    assert_eq!(broker.dlq_depth().await.expect("dlq_depth"), 1);
    assert_eq!(broker.queue_depth().await.expect("queue_depth"), 0);

    shutdown.cancel();
    let end = tokio::time::timeout(STEP, consumer.next())
        .await
        .expect("stops in time");
    assert!(end.is_none());
    drop(got);
    assert_eq!(broker.reconnects(), 0);
}
