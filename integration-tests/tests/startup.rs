//! Start-up against a backend that is there but will not serve this process as configured.
//!
//! A store that is there but not answering writes. Found by the simulator
//! (seeds 2255, 2811, …: a worker whose first writes failed exited, and its runs waited for
//! a worker forever); reproduced here on a real Redis: a private `redis-server` whose writes
//! are held with `CLIENT PAUSE … WRITE` while a real worker process starts. The worker must
//! wait and retry (the namespace check, its registration), not exit.

//!
//! A RabbitMQ whose queues were declared with another `SAVEPOINT_QUEUE_EXPIRES_MS` (queue
//! arguments cannot change): the process must stop at start-up with an error that names the
//! setting, its value and the queue's, and the command that deletes the queue, instead of the
//! broker's raw `PRECONDITION_FAILED`.

use std::process::Stdio;
use std::time::{Duration, Instant};

use savepoint_broker::{Broker, BrokerError, QUEUE_EXPIRES_SETTING};
use savepoint_integration_tests::procs::{free_port, Proc};
use savepoint_integration_tests::{cleanup, fresh_namespace, services, test_config, wait_until};
use savepoint_scheduler::SchedulerError;
use savepoint_store::ScriptStore;
use tokio_util::sync::CancellationToken;

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");

/// A `redis-server` of this test's own, stopped by pid when dropped.
struct PrivateRedis {
    child: std::process::Child,
    url: String,
}

impl PrivateRedis {
    fn start() -> Self {
        let port = free_port();
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts (it is installed on this machine)");
        Self {
            child,
            url: format!("redis://127.0.0.1:{port}"),
        }
    }

    async fn client(&self) -> redis::aio::MultiplexedConnection {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(c) = redis::Client::open(self.url.as_str()) {
                if let Ok(conn) = c.get_multiplexed_async_connection().await {
                    return conn;
                }
            }
            assert!(Instant::now() < deadline, "private redis-server did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_waits_for_a_store_that_holds_its_writes_instead_of_exiting() {
    services().await;
    let redis = PrivateRedis::start();
    let mut conn = redis.client().await;
    let mut cfg = test_config(&fresh_namespace("boot"));
    cfg.redis_url = redis.url.clone();
    // Writes (the namespace check's HSETNX, the registration) wait 4 s; reads answer.
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(4000)
        .arg("WRITE")
        .query_async(&mut conn)
        .await
        .expect("CLIENT PAUSE");
    let mut worker = Proc::spawn(WORKER, "boot-worker", &cfg, &[("SAVEPOINT_WORKER_NAME", "boot")]);
    // Each write times out after the command timeout (lease/3 = 500 ms): an exiting worker
    // is gone well before the pause ends.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(worker.is_running(), "the worker exited while the store held its writes");
    let store = ScriptStore::connect(&cfg.redis_url, cfg.keys(), cfg.store())
        .await
        .expect("store");
    let deadline = Instant::now() + Duration::from_secs(20);
    // (The test's own reads are scripts, held by the pause too: a timeout is retried.)
    while !matches!(store.catalog_entry("invoice").await, Ok(Some(_))) {
        assert!(worker.is_running(), "the worker exited");
        assert!(Instant::now() < deadline, "the worker never registered after the pause");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    worker.signal("TERM");
    let status = worker.wait_exit(Duration::from_secs(20)).await;
    assert!(status.success(), "clean shutdown after the pause: {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_with_another_queue_expiry_stops_at_start_up_naming_the_setting() {
    let s = services().await;
    let ns = fresh_namespace("qexp");
    // The first process (a worker, say) declares the queues with x-expires 300 000 ms.
    let first = s.config(&ns);
    assert_eq!(first.queue_expires_ms, 300_000);
    let declared = Broker::connect(first.broker(), Duration::from_secs(10))
        .await
        .expect("the first process declares the queues");
    drop(declared);

    // A scheduler with another value stops at start-up with the typed error.
    let mut second = first.clone();
    second.queue_expires_ms = 120_000;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let started = savepoint_scheduler::serve(second.clone(), listener, CancellationToken::new());
    let err = tokio::time::timeout(Duration::from_secs(30), started)
        .await
        .expect("start-up ends, it does not retry a refused declaration")
        .expect_err("a scheduler with another queue expiry must not start");
    let SchedulerError::Broker(BrokerError::QueueMismatch(m)) = &err else {
        panic!("expected the queue mismatch, got: {err}");
    };
    assert_eq!(m.queue, first.broker().topology.queue_name());
    assert_eq!(m.setting(), Some(QUEUE_EXPIRES_SETTING));
    assert_eq!(
        (m.declared.as_deref(), m.current.as_deref()),
        (Some("120000"), Some("300000"))
    );
    let text = err.to_string();
    for want in [
        "SAVEPOINT_QUEUE_EXPIRES_MS=120000",
        "SAVEPOINT_QUEUE_EXPIRES_MS=300000",
        "must be the same in every process",
        &format!("rabbitmqctl delete_queue -p '/' '{ns}.q.default'"),
    ] {
        assert!(text.contains(want), "{want:?} missing from: {text}");
    }

    // A process that leaves the setting at its default (0: no x-expires), as a CLI might.
    second.queue_expires_ms = 0;
    match Broker::connect(second.broker(), Duration::from_secs(10)).await {
        Err(BrokerError::QueueMismatch(m)) => {
            assert_eq!((m.declared.as_deref(), m.current.as_deref()), (None, Some("300000")));
            assert!(m.to_string().contains("SAVEPOINT_QUEUE_EXPIRES_MS=0"), "{m}");
        }
        other => panic!("expected the queue mismatch, got {other:?}"),
    }

    // The refusal left nothing half-open: this process connects with the queues' value and
    // its publish is stored.
    let again = Broker::connect(first.broker(), Duration::from_secs(10))
        .await
        .expect("the matching value connects");
    again.publish(b"after the refusal", &[]).await.expect("publish");
    wait_until(Duration::from_secs(10), "the message in the task queue", || async {
        (again.queue_depth().await.ok() == Some(1)).then_some(())
    })
    .await;
    assert_eq!(again.reconnects(), 0);
    cleanup(&first).await;
}
