//! Start-up against a store that is there but not answering writes. Found by the simulator
//! (seeds 2255, 2811, …: a worker whose first writes failed exited, and its runs waited for
//! a worker forever); reproduced here on a real Redis: a private `redis-server` whose writes
//! are held with `CLIENT PAUSE … WRITE` while a real worker process starts. The worker must
//! wait and retry (the namespace check, its registration), not exit.

use std::process::Stdio;
use std::time::{Duration, Instant};

use savepoint_integration_tests::procs::{free_port, Proc};
use savepoint_integration_tests::{fresh_namespace, services, test_config};
use savepoint_store::ScriptStore;

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
