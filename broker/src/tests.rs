//! Tests that need no broker: an unreachable or malformed URL. The broker's contract runs
//! against RabbitMQ and the embedded queue in `integration-tests` (`conformance_broker`).
#![allow(clippy::disallowed_methods)] // real time

use super::*;
use std::time::Duration;

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

/// Without the embedded queue, `mem://` is refused with a configuration error (not retried).
#[cfg(not(feature = "mem"))]
#[tokio::test]
async fn a_build_without_the_embedded_queue_refuses_mem_urls() {
    let Err(err) = Broker::connect(config("mem://x", "nomem"), Duration::from_secs(1)).await else {
        panic!("mem:// must be refused");
    };
    assert!(
        matches!(err, BrokerError::InvalidConfig(ref m) if m.contains("`mem`")),
        "{err}"
    );
}
