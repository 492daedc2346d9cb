//! The broker's conformance suite: the contract the worker and scheduler rely on, run against
//! both backends (a real RabbitMQ quorum queue and the embedded queue), so they cannot drift.
//! - a confirmed publish is delivered, with its headers;
//! - ack removes a message, a second ack of the same delivery fails;
//! - dead-lettering moves it to the dead-letter queue;
//! - an unsettled delivery comes back, flagged redelivered, when its consumer goes away;
//! - a message counted half the delivery limit is published again as new, however often, so
//!   the limit never dead-letters it;
//! - shutdown ends the consumer.

use std::time::Duration;
use tokio_util::sync::CancellationToken;

use savepoint_broker::{Broker, BrokerConfig, Topology};
use savepoint_integration_tests::fresh_namespace;

const STEP: Duration = Duration::from_secs(10);

fn config(url: &str, ns: &str, delivery_limit: u32) -> BrokerConfig {
    BrokerConfig {
        amqp_url: url.to_owned(),
        topology: Topology::new(ns, "default").with_expiry(300_000),
        prefetch: 10,
        delivery_limit,
        reconnect_min: Duration::from_millis(50),
        reconnect_max: Duration::from_millis(500),
        tls: Default::default(),
    }
}

#[cfg(feature = "services")]
async fn rabbitmq(delivery_limit: u32) -> Broker {
    let s = savepoint_integration_tests::services().await;
    let ns = fresh_namespace("bc");
    Broker::connect(config(&s.amqp_url, &ns, delivery_limit), STEP)
        .await
        .expect("RabbitMQ must be reachable")
}

async fn embedded(delivery_limit: u32) -> Broker {
    let ns = fresh_namespace("bc");
    let url = format!("{}{ns}", savepoint_core::mem::SCHEME);
    Broker::connect(config(&url, &ns, delivery_limit), STEP)
        .await
        .expect("embedded broker")
}

async fn eventually_depth(b: &Broker, dlq: bool, want: u32) {
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let got = if dlq {
            b.dlq_depth().await
        } else {
            b.queue_depth().await
        }
        .expect("depth");
        if got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} depth stayed {got}, expected {want}",
            if dlq { "dead-letter queue" } else { "task queue" }
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn publish_ack_and_dead_letter(b: Broker) {
    for i in 0..3 {
        b.publish(format!("msg-{i}").as_bytes(), &[("x-test".into(), format!("v{i}"))])
            .await
            .expect("publish");
    }
    eventually_depth(&b, false, 3).await;
    let stop = CancellationToken::new();
    let mut c = b.consumer("bc", stop.clone());
    let mut got = Vec::new();
    for _ in 0..3 {
        let d = tokio::time::timeout(STEP, c.next())
            .await
            .expect("in time")
            .expect("a delivery");
        let i = String::from_utf8(d.data.clone()).expect("utf8")["msg-".len()..].to_owned();
        assert_eq!(d.headers.get("x-test"), Some(&format!("v{i}")));
        assert!(!d.redelivered);
        got.push(d);
    }
    got[0].ack().await.expect("ack");
    got[1].ack().await.expect("ack");
    assert!(got[1].ack().await.is_err(), "a second ack of one delivery fails");
    got[2].dead_letter(&b, "test reason").await.expect("dead letter");
    eventually_depth(&b, true, 1).await;
    eventually_depth(&b, false, 0).await;
    stop.cancel();
    drop(got);
    assert!(tokio::time::timeout(STEP, c.next())
        .await
        .expect("stops in time")
        .is_none());
    assert_eq!(b.reconnects(), 0, "the round trip needed no reconnect");
    b.delete_topology().await.expect("cleanup");
}

async fn unsettled_delivery_returns_when_its_consumer_goes(b: Broker) {
    b.publish(b"once", &[]).await.expect("publish");
    let stop_a = CancellationToken::new();
    let mut a = b.consumer("bc-a", stop_a.clone());
    let d = tokio::time::timeout(STEP, a.next())
        .await
        .expect("in time")
        .expect("a delivery");
    assert_eq!(d.data, b"once");
    // A crashes: its delivery is never settled.
    drop(d);
    stop_a.cancel();
    assert!(tokio::time::timeout(STEP, a.next()).await.expect("stops").is_none());
    drop(a);
    let stop_b = CancellationToken::new();
    let mut c = b.consumer("bc-b", stop_b.clone());
    let d = tokio::time::timeout(STEP, c.next())
        .await
        .expect("redelivered in time")
        .expect("a delivery");
    assert_eq!(d.data, b"once");
    assert!(d.redelivered, "the broker flags the second delivery");
    d.ack().await.expect("ack");
    eventually_depth(&b, false, 0).await;
    stop_b.cancel();
    b.delete_topology().await.expect("cleanup");
}

/// A task the queue counted half its delivery limit (returns nobody failed on: a dead
/// worker's held tasks, a claim requeued while the store is away) is published again as new,
/// the renewals counted in a header, however often: the limit never dead-letters it. Limit 4:
/// two deliveries a round (the renewal itself is not handed out), for thirty rounds.
async fn counted_half_the_limit_it_is_renewed_and_never_dead_lettered(b: Broker) {
    use savepoint_broker::RENEWALS_HEADER;
    b.publish(b"held", &[]).await.expect("publish");
    let stop = CancellationToken::new();
    let mut c = b.consumer("bc", stop.clone());
    let mut seen = Vec::new();
    while seen.len() < 60 {
        let d = tokio::time::timeout(STEP, c.next())
            .await
            .expect("never dead-lettered: a delivery in time")
            .expect("a delivery");
        let renewals: u32 = d
            .headers
            .get(RENEWALS_HEADER)
            .map_or(0, |v| v.parse().expect("a number"));
        let first_of_round = seen.last().is_none_or(|last| *last != renewals);
        assert_eq!(d.redelivered, !first_of_round, "redelivered flag after {seen:?}");
        seen.push(renewals);
        d.requeue().await.expect("requeue");
    }
    let want: Vec<u32> = (0..30).flat_map(|r| [r, r]).collect();
    assert_eq!(seen, want, "renewals of each delivery seen");
    assert_eq!(b.dlq_depth().await.expect("dlq depth"), 0);
    stop.cancel();
    b.delete_topology().await.expect("cleanup");
}

/// A consumer that hands back gives up what the broker pushed to it and it never took:
/// another consumer takes those, not counted as redeliveries; it takes nothing more until it
/// consumes again.
async fn what_a_consumer_hands_back_goes_to_another_uncounted(b: Broker) {
    let (stop_busy, stop_free) = (CancellationToken::new(), CancellationToken::new());
    let mut busy = b.consumer("busy", stop_busy.clone());
    busy.ready().await;
    for body in [b"one".as_slice(), b"two", b"three"] {
        b.publish(body, &[]).await.expect("publish");
    }
    // The broker pushes to the only consumer, whether or not it takes.
    eventually_depth(&b, false, 0).await;
    let mut back = 0;
    let deadline = tokio::time::Instant::now() + STEP;
    while back < 3 {
        back += busy.hand_back().await;
        assert!(tokio::time::Instant::now() < deadline, "{back} of 3 handed back");
        if back < 3 {
            busy.resume().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let mut free = b.consumer("free", stop_free.clone());
    let mut got = Vec::new();
    while got.len() < 3 {
        let d = tokio::time::timeout(STEP, free.next())
            .await
            .expect("in time")
            .expect("a delivery");
        assert!(!d.redelivered, "a task handed back is not a redelivery");
        assert!(!d.headers.contains_key("x-delivery-count"), "{:?}", d.headers);
        got.push(d.data.clone());
        d.ack().await.expect("ack");
    }
    got.sort();
    assert_eq!(got, vec![b"one".to_vec(), b"three".to_vec(), b"two".to_vec()]);
    stop_busy.cancel();
    stop_free.cancel();
    b.delete_topology().await.expect("cleanup");
}

macro_rules! conformance {
    ($($name:ident ($limit:expr)),* $(,)?) => {
        #[cfg(feature = "services")]
        mod on_rabbitmq {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::rabbitmq($limit).await).await
                }
            )*
        }
        mod on_embedded {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::embedded($limit).await).await
                }
            )*
        }
    };
}

conformance!(
    publish_ack_and_dead_letter(20),
    unsettled_delivery_returns_when_its_consumer_goes(20),
    counted_half_the_limit_it_is_renewed_and_never_dead_lettered(4),
    what_a_consumer_hands_back_goes_to_another_uncounted(20),
);

/// A sticky queue: a task its worker does not take within the TTL goes on to the task queue,
/// where another consumer takes it; so does a task already handed to the worker's consumer
/// (within its prefetch) that its worker comes to take only after the TTL; and the queue
/// goes with its consumer's connection, after which a publish to it is unroutable (an error,
/// so the publisher falls back to the task queue).
async fn a_sticky_task_not_taken_within_its_ttl_goes_on_to_the_task_queue(b: Broker) {
    let (stop_sticky, stop_home) = (CancellationToken::new(), CancellationToken::new());
    let mut sticky = b
        .sticky_consumer("w-test", 300, "sticky", stop_sticky.clone())
        .expect("RabbitMQ has sticky queues");
    sticky.ready().await;
    b.publish_sticky("w-test", b"one", &[])
        .await
        .expect("routed to the sticky queue");
    b.publish_sticky("w-test", b"two", &[])
        .await
        .expect("routed to the sticky queue");
    // "one" fills the sticky consumer's prefetch of one and is not settled; "two" waits in the
    // queue, expires after 300 ms and is dead-lettered to the task queue.
    let mut home = b.consumer("home", stop_home.clone());
    let d = tokio::time::timeout(STEP, home.next())
        .await
        .expect("in time")
        .expect("a delivery");
    assert_eq!(d.data, b"two");
    d.ack().await.expect("ack");
    // "one", held in the sticky consumer's prefetch past the TTL, is not started late when its
    // worker comes to take it: it goes on to the task queue too (issue 49).
    assert!(
        tokio::time::timeout(Duration::from_millis(500), sticky.next())
            .await
            .is_err(),
        "a sticky task held past its TTL was handed to its busy worker"
    );
    let d = tokio::time::timeout(STEP, home.next())
        .await
        .expect("in time")
        .expect("a delivery");
    assert_eq!(d.data, b"one", "the overdue prefetched task went on to the task queue");
    d.ack().await.expect("ack");
    stop_sticky.cancel();
    while sticky.next().await.is_some() {}
    drop(sticky);
    let deadline = tokio::time::Instant::now() + STEP;
    while b.publish_sticky("w-test", b"three", &[]).await.is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sticky queue outlived its consumer"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop_home.cancel();
    b.delete_topology().await.expect("cleanup");
}

#[cfg(feature = "services")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sticky_task_not_taken_within_its_ttl_goes_on_to_the_task_queue_on_rabbitmq() {
    let s = savepoint_integration_tests::services().await;
    let ns = fresh_namespace("bs");
    let cfg = BrokerConfig {
        prefetch: 1,
        ..config(&s.amqp_url, &ns, 20)
    };
    let b = Broker::connect(cfg, STEP).await.expect("RabbitMQ must be reachable");
    a_sticky_task_not_taken_within_its_ttl_goes_on_to_the_task_queue(b).await;
}

#[tokio::test]
async fn a_sticky_task_not_taken_within_its_ttl_goes_on_to_the_task_queue_on_embedded() {
    let ns = fresh_namespace("bs");
    let url = format!("{}{ns}", savepoint_core::mem::SCHEME);
    let cfg = BrokerConfig {
        prefetch: 1,
        ..config(&url, &ns, 20)
    };
    let b = Broker::connect(cfg, STEP).await.expect("embedded broker");
    a_sticky_task_not_taken_within_its_ttl_goes_on_to_the_task_queue(b).await;
}
