//! Start-up against a backend that is there but will not serve this process as configured.
//!
//! A store that is there but not answering writes. Found by the simulator
//! (seeds 2255, 2811, …: a worker whose first writes failed exited, and its runs waited for
//! a worker forever); reproduced here on a real Redis: a private `redis-server` whose writes
//! are held with `CLIENT PAUSE … WRITE` while a real worker process starts. The worker must
//! wait and retry (the namespace check, its registration), not exit.

//!
//! A store or broker URL with a first-day mistake (a password missing or refused, a plain URL
//! at a Redis Cluster node, a cluster URL at a single Redis, a RabbitMQ login refused, a
//! vhost that does not exist): the process stops at once with a one-line diagnosis naming the
//! setting and what to do (exit code 2), never a retry loop or a raw client error.
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
use savepoint_store::{ScriptStore, StoreError};
use tokio_util::sync::CancellationToken;

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");

/// A `redis-server` of this test's own, stopped by pid when dropped.
struct PrivateRedis {
    child: std::process::Child,
    url: String,
}

impl PrivateRedis {
    fn start() -> Self {
        Self::start_with(&[])
    }

    /// A `redis-server` with `extra` arguments (a password, cluster mode).
    fn start_with(extra: &[&str]) -> Self {
        let port = free_port();
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--save", "", "--appendonly", "no"])
            .args(extra)
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

/// The error a store connection to `url` ends with, within a few seconds (no retry loop).
async fn store_refusal(url: &str) -> String {
    let cfg = test_config(&fresh_namespace("diag"));
    let started = Instant::now();
    let err = match ScriptStore::connect(url, cfg.keys(), cfg.store()).await {
        Ok(_) => panic!("{url}: connected"),
        Err(e) => e,
    };
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{url}: refused only after {:?}",
        started.elapsed()
    );
    assert!(!err.is_transient(), "{url}: {err} would be retried");
    assert!(
        matches!(err, StoreError::Misconfigured(_)),
        "{url}: not a diagnosis: {err}"
    );
    err.to_string()
}

fn assert_names(text: &str, wants: &[&str]) {
    for want in wants {
        assert!(text.contains(want), "{want:?} missing from: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_url_that_points_at_the_wrong_server_or_password_is_named_at_start_up() {
    // A Redis that requires a password: none given, then a wrong one, then the right one.
    let locked = PrivateRedis::start_with(&["--requirepass", "s3cret"]);
    let _ = locked.client().await;
    let addr = locked.url.trim_start_matches("redis://").to_owned();
    let text = store_refusal(&locked.url).await;
    assert_names(
        &text,
        &[
            "requires a password",
            "SAVEPOINT_REDIS_URL",
            &format!("redis://:PASSWORD@{addr}"),
        ],
    );
    let text = store_refusal(&format!("redis://:wrong@{addr}")).await;
    assert_names(&text, &["refused the user or password", "SAVEPOINT_REDIS_URL"]);
    let cfg = test_config(&fresh_namespace("diag"));
    let store = ScriptStore::connect(&format!("redis://:s3cret@{addr}"), cfg.keys(), cfg.store())
        .await
        .expect("the right password connects");
    // An ACL user that may not run INFO still connects (the check is skipped, not failed).
    let _: () = store
        .query(
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg("app")
                .arg("on")
                .arg(">pw2")
                .arg("~*")
                .arg("&*")
                .arg("+@all")
                .arg("-info"),
        )
        .await
        .expect("ACL SETUSER");
    ScriptStore::connect(&format!("redis://app:pw2@{addr}"), cfg.keys(), cfg.store())
        .await
        .expect("a user without INFO connects");

    // A Redis Cluster node behind a plain URL (every key of another node's slots would
    // answer MOVED, retried for ever), and a cluster URL at a single Redis.
    let nodes = std::env::temp_dir().join(format!("sp-diag-nodes-{}.conf", free_port()));
    let node = PrivateRedis::start_with(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        nodes.to_str().unwrap(),
    ]);
    let _ = node.client().await;
    let node_addr = node.url.trim_start_matches("redis://").to_owned();
    let text = store_refusal(&node.url).await;
    assert_names(&text, &["Redis Cluster node", &format!("redis+cluster://{node_addr}")]);
    let single = PrivateRedis::start();
    let _ = single.client().await;
    let single_addr = single.url.trim_start_matches("redis://").to_owned();
    let text = store_refusal(&format!("redis+cluster://{single_addr}")).await;
    assert_names(&text, &["not a Redis Cluster node", &format!("redis://{single_addr}")]);

    // The worker process says so and exits with code 2 at once, where a Redis that is not up
    // yet is waited for.
    let s = services().await;
    let mut cfg = s.config(&fresh_namespace("diag"));
    cfg.redis_url = locked.url.clone();
    let mut worker = Proc::spawn(WORKER, "diag-worker", &cfg, &[]);
    let status = worker.wait_exit(Duration::from_secs(20)).await;
    assert_eq!(status.code(), Some(2), "{status:?}");
    let _ = std::fs::remove_file(nodes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_url_with_a_wrong_login_or_vhost_is_named_at_start_up() {
    let s = services().await;
    let cfg = s.config(&fresh_namespace("diagq"));
    let (scheme, rest) = cfg.amqp_url.split_once("://").expect("an AMQP URL");
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let host = host.split('/').next().unwrap_or(host).to_owned();
    let refusal = |url: String| {
        let mut c = cfg.clone();
        c.amqp_url = url;
        async move {
            let started = Instant::now();
            let err = match Broker::connect(c.broker(), Duration::from_secs(20)).await {
                Ok(_) => panic!("connected"),
                Err(e) => e,
            };
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "refused only after {:?}",
                started.elapsed()
            );
            assert!(matches!(err, BrokerError::Refused(_)), "not a diagnosis: {err}");
            err.to_string()
        }
    };
    let text = refusal(format!("{scheme}://savepoint-nobody:nope@{host}/%2f")).await;
    assert_names(
        &text,
        &["refused the login of user \"savepoint-nobody\"", "SAVEPOINT_AMQP_URL"],
    );
    let text = refusal(format!(
        "{scheme}://{}/sp-no-such-vhost",
        rest.split('/').next().unwrap_or(rest)
    ))
    .await;
    assert_names(
        &text,
        &[
            "no vhost \"sp-no-such-vhost\"",
            "rabbitmqctl add_vhost sp-no-such-vhost",
        ],
    );
}
