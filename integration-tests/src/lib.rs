//! Integration-test harness: real RabbitMQ and Redis (from the environment, from
//! testcontainers, or local), one fresh namespace per test, in-process schedulers, polling
//! with deadlines, and cleanup.
//!
//! ```ignore
//! services().await;
//! let cfg = test_config(&fresh_namespace("api"));
//! register_test_workflow(&cfg, "echo").await;
//! let sched = start_scheduler(&cfg).await;
//! // ... talk to sched.base_url ...
//! cleanup(&cfg).await;
//! ```
#![forbid(unsafe_code)]

pub mod browser;
pub mod http;
pub mod inproc;
pub mod procs;
pub mod proxy;
pub mod python;
pub mod rabbitmq_cluster;
pub mod redis_cluster;
pub mod scenario;
pub mod tasks;

use savepoint_broker::Broker;
use savepoint_runtime::config::Config;
use savepoint_scheduler::SchedulerError;
use savepoint_store::ScriptStore;
use savepoint_store::{CatalogEntry, WorkerInfo};
use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use testcontainers_modules::testcontainers::runners::AsyncRunner;
use testcontainers_modules::testcontainers::ContainerAsync;
use testcontainers_modules::{rabbitmq::RabbitMq, redis::Redis};
use tokio::sync::OnceCell;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Local RabbitMQ used when neither the environment nor Docker provides one.
pub const LOCAL_AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// Local Redis used when neither the environment nor Docker provides one.
pub const LOCAL_REDIS: &str = "redis://127.0.0.1:6379";

/// The RabbitMQ and Redis every test of this binary talks to.
pub struct Services {
    /// AMQP URL.
    pub amqp_url: String,
    /// Redis URL.
    pub redis_url: String,
    /// Containers started for this test binary (kept alive for its whole life).
    _containers: Option<(ContainerAsync<RabbitMq>, ContainerAsync<Redis>)>,
}

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Services")
            .field("amqp_url", &self.amqp_url)
            .field("redis_url", &self.redis_url)
            .finish()
    }
}

impl Services {
    /// A test configuration on these services (see [`test_config`]).
    pub fn config(&self, namespace: &str) -> Config {
        config_on(&self.amqp_url, &self.redis_url, namespace)
    }
}

/// The test configuration on the given URLs (see [`test_config`]).
fn config_on(amqp_url: &str, redis_url: &str, namespace: &str) -> Config {
    {
        let mut cfg = Config {
            amqp_url: amqp_url.to_owned(),
            redis_url: redis_url.to_owned(),
            namespace: namespace.to_owned(),
            partitions: 8,
            // Test queues vanish once unused, so test runs do not pile up quorum queues.
            queue_expires_ms: 300_000,
            lease_ms: 1500,
            grace_ms: 300,
            redeliver_ms: 2000,
            ..Config::default()
        };
        cfg.scheduler.scan_interval_ms = 100;
        cfg.scheduler.http_addr = "127.0.0.1:0".into();
        cfg
    }
}

static SERVICES: OnceCell<Services> = OnceCell::const_new();

fn env_url(var: &str) -> Option<String> {
    std::env::var(var)
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

fn docker_reachable() -> bool {
    if env_url("DOCKER_HOST").is_some() {
        return true;
    }
    #[cfg(unix)]
    {
        std::os::unix::net::UnixStream::connect("/var/run/docker.sock").is_ok()
    }
    #[cfg(not(unix))]
    false
}

async fn start_containers() -> Services {
    let rabbit = RabbitMq::default().start().await.unwrap_or_else(|e| {
        panic!("starting a RabbitMQ container failed: {e}\n(set SAVEPOINT_TEST_FORCE_LOCAL=1 to use local services)")
    });
    let redis = Redis::default().start().await.unwrap_or_else(|e| {
        panic!("starting a Redis container failed: {e}\n(set SAVEPOINT_TEST_FORCE_LOCAL=1 to use local services)")
    });
    let host = rabbit.get_host().await.expect("rabbitmq container host");
    let amqp_port = rabbit.get_host_port_ipv4(5672).await.expect("rabbitmq container port");
    let redis_host = redis.get_host().await.expect("redis container host");
    let redis_port = redis.get_host_port_ipv4(6379).await.expect("redis container port");
    Services {
        amqp_url: format!("amqp://guest:guest@{host}:{amqp_port}/%2f"),
        redis_url: format!("redis://{redis_host}:{redis_port}"),
        _containers: Some((rabbit, redis)),
    }
}

/// Fails (never skips) when a service does not answer, saying which one and how to fix it.
async fn check_reachable(s: &Services, source: &str) {
    // Through the store's own connect, so a Redis Cluster URL is checked the same way.
    let redis_ok = async {
        let cfg = Config::default();
        let store = ScriptStore::connect(&s.redis_url, cfg.keys(), cfg.store())
            .await
            .map_err(|e| e.to_string())?;
        store.server_time().await.map_err(|e| e.to_string())
    };
    match tokio::time::timeout(Duration::from_secs(10), redis_ok).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => panic!("Redis at {} ({source}) is not reachable: {e}. {HINT}", s.redis_url),
        Err(_) => panic!("Redis at {} ({source}) did not answer within 10 s. {HINT}", s.redis_url),
    }
    let amqp = lapin::Connection::connect(&s.amqp_url, lapin::ConnectionProperties::default());
    match tokio::time::timeout(Duration::from_secs(10), amqp).await {
        Ok(Ok(conn)) => {
            let _ = conn.close(200, "ok".into()).await;
        }
        Ok(Err(e)) => panic!("RabbitMQ at {} ({source}) is not reachable: {e}. {HINT}", s.amqp_url),
        Err(_) => panic!(
            "RabbitMQ at {} ({source}) did not answer within 10 s. {HINT}",
            s.amqp_url
        ),
    }
}

const HINT: &str = "Set SAVEPOINT_TEST_AMQP_URL / SAVEPOINT_TEST_REDIS_URL, make Docker reachable, \
                    or start RabbitMQ on 127.0.0.1:5672 and Redis on 127.0.0.1:6379";

/// The services of this test binary, resolved once: `SAVEPOINT_TEST_AMQP_URL` /
/// `SAVEPOINT_TEST_REDIS_URL` if set; else containers when Docker is reachable (unless
/// `SAVEPOINT_TEST_FORCE_LOCAL` is set); else the local defaults. Panics with a clear message
/// when they do not answer.
pub async fn services() -> &'static Services {
    if !cfg!(feature = "services") {
        panic!(
            "this test needs RabbitMQ and Redis: it belongs to the `services` tier \
             (cargo test -p savepoint-integration-tests --features services; README \"Tests\")"
        );
    }
    SERVICES
        .get_or_init(|| async {
            let (amqp, redis) = (env_url("SAVEPOINT_TEST_AMQP_URL"), env_url("SAVEPOINT_TEST_REDIS_URL"));
            let force_local = env_url("SAVEPOINT_TEST_FORCE_LOCAL").is_some();
            let (s, source) = if amqp.is_some() || redis.is_some() {
                let s = Services {
                    amqp_url: amqp.unwrap_or_else(|| LOCAL_AMQP.into()),
                    redis_url: redis.unwrap_or_else(|| LOCAL_REDIS.into()),
                    _containers: None,
                };
                (s, "from SAVEPOINT_TEST_* variables")
            } else if !force_local && docker_reachable() {
                eprintln!("savepoint tests: starting RabbitMQ and Redis containers (testcontainers)");
                (start_containers().await, "testcontainers")
            } else {
                let s = Services {
                    amqp_url: LOCAL_AMQP.into(),
                    redis_url: LOCAL_REDIS.into(),
                    _containers: None,
                };
                (s, "local defaults")
            };
            eprintln!(
                "savepoint tests: services {source}: amqp={} redis={}",
                s.amqp_url, s.redis_url
            );
            check_reachable(&s, source).await;
            s
        })
        .await
}

/// A fresh namespace `t<prefix><8 hex>` (lowercase, at most 32 characters) so tests run in
/// parallel without seeing each other's keys and queues.
pub fn fresh_namespace(prefix: &str) -> String {
    let clean: String = prefix
        .to_ascii_lowercase()
        .chars()
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_' || *c == '-')
        .take(22)
        .collect();
    let hex = uuid::Uuid::new_v4().simple().to_string();
    format!("t{clean}{}", &hex[..8])
}

/// A test configuration on namespace `ns`: the services' URLs, 8 partitions, short leases
/// (1.5 s lease, 0.3 s grace, 2 s redelivery), a 100 ms scan interval and an ephemeral HTTP
/// port. Call [`services`] first (panics otherwise).
pub fn test_config(ns: &str) -> Config {
    if on_embedded() {
        return embedded_config(ns);
    }
    SERVICES
        .get()
        .expect("call savepoint_integration_tests::services().await before test_config")
        .config(ns)
}

/// Whether [`test_config`] is on the embedded backend: always without the `services` tier
/// (plain `cargo test` needs no services), and with it when `SAVEPOINT_TEST_BACKEND=embedded`
/// (the in-process suites once more on the embedded backend; suites that spawn worker
/// processes need the real services).
pub fn on_embedded() -> bool {
    !cfg!(feature = "services") || std::env::var("SAVEPOINT_TEST_BACKEND").is_ok_and(|b| b == "embedded")
}

/// Makes the backend of [`test_config`] ready: nothing to do on the embedded backend, else
/// [`services`] (resolved and checked once).
pub async fn backend_ready() {
    if !on_embedded() {
        services().await;
    }
}

/// The test configuration of [`test_config`] on the embedded backend: `mem://<ns>` for both
/// the store and the broker (a fresh in-process instance per namespace). Needs no services.
pub fn embedded_config(ns: &str) -> Config {
    let url = format!("{}{ns}", savepoint_core::mem::SCHEME);
    config_on(&url, &url, ns)
}

/// An in-process scheduler (API + due scanner) started with [`start_scheduler`]. Dropping it
/// shuts it down.
pub struct SchedulerHandle {
    /// `http://127.0.0.1:<port>`.
    pub base_url: String,
    /// The listening address.
    pub addr: SocketAddr,
    shutdown: CancellationToken,
    join: Option<JoinHandle<Result<(), SchedulerError>>>,
}

impl SchedulerHandle {
    /// Shuts the scheduler down and waits for it; returns how it ended.
    pub async fn stop(mut self) -> Result<(), SchedulerError> {
        self.shutdown.cancel();
        match self.join.take() {
            Some(join) => join.await.unwrap_or_else(|e| panic!("scheduler task panicked: {e}")),
            None => Ok(()),
        }
    }

    /// The token that stops this scheduler.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }
}

impl Drop for SchedulerHandle {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Starts [`savepoint_scheduler::serve`] on `127.0.0.1:0` and waits until `/readyz` says ready
/// (Redis and RabbitMQ connected). Panics if it fails to start within 30 s.
pub async fn start_scheduler(cfg: &Config) -> SchedulerHandle {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    let shutdown = CancellationToken::new();
    let join = tokio::spawn(savepoint_scheduler::serve(cfg.clone(), listener, shutdown.clone()));
    let mut handle = SchedulerHandle {
        base_url: format!("http://{addr}"),
        addr,
        shutdown,
        join: Some(join),
    };
    let http = reqwest::Client::new();
    let ready = format!("{}/readyz", handle.base_url);
    let started = Instant::now();
    loop {
        if let Some(join) = handle.join.take_if(|j| j.is_finished()) {
            panic!("scheduler stopped during start-up: {:?}", join.await);
        }
        if let Ok(r) = http.get(&ready).send().await {
            if r.status().is_success() {
                return handle;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "scheduler at {addr} not ready within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `f` every 25 ms until it returns `Some`, and returns that value; panics with `what`
/// when `deadline` passes first. Use it instead of bare sleeps.
pub async fn wait_until<T, F, Fut>(deadline: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Registers workflow `name` (version 1) in the namespace's catalog, as a live worker would
/// (for an hour), so API tests can start runs without a worker.
pub async fn register_test_workflow(cfg: &Config, name: &str) {
    register_test_workflow_version(cfg, name, 1).await;
}

/// Like [`register_test_workflow`], with a version.
pub async fn register_test_workflow_version(cfg: &Config, name: &str, version: u32) {
    let store = ScriptStore::connect(&cfg.redis_url, cfg.keys(), cfg.store())
        .await
        .expect("connect redis");
    let entry = CatalogEntry {
        name: name.to_owned(),
        version,
        min_version: 1,
        input_version: None,
        input_type: None,
    };
    // A registration that outlives any test, standing in for a live worker that serves it.
    let worker = WorkerInfo {
        id: format!("test-registration-{name}-v{version}"),
        workflows: vec![entry],
        queue: cfg.queue.clone(),
        ttl_ms: 3_600_000,
        capabilities: WorkerInfo::all_capabilities(),
        ..WorkerInfo::default()
    };
    store
        .register_worker(&worker, Duration::from_secs(3600))
        .await
        .expect("register workflow");
}

/// Deletes the namespace's Redis keys (`SCAN MATCH <ns>:*`) and its exchanges and queues.
/// Call it at the end of a test; panics on failure.
pub async fn cleanup(cfg: &Config) {
    let store = savepoint_store::ScriptStore::connect(&cfg.redis_url, cfg.keys(), cfg.store())
        .await
        .expect("connect redis");
    store.purge_namespace().await.expect("delete the namespace's keys");
    let broker = Broker::connect(cfg.broker(), Duration::from_secs(10))
        .await
        .expect("connect broker");
    broker.delete_topology().await.expect("delete topology");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_fresh_and_valid() {
        let a = fresh_namespace("API-Tests with spaces and a very long prefix");
        assert!(a.len() <= 32, "{a}");
        assert!(savepoint_core::ids::Namespace::new(a.clone()).is_ok(), "{a}");
        assert_ne!(fresh_namespace("x"), fresh_namespace("x"));
        assert!(fresh_namespace("api").starts_with("tapi"));
    }
}
