//! TLS to Redis and RabbitMQ against real TLS endpoints started here (deploy/tls: a
//! `redis-server` with a TLS port and client certificates required, a second RabbitMQ node
//! with an AMQPS listener), stopped by pid when the test ends. A whole run goes over both;
//! a wrong CA, a wrong host name and a missing client certificate fail with a clear error,
//! and a CA configured for a plaintext URL is refused before anything connects.

use savepoint_broker::Broker;
use savepoint_core::ids::ThreadId;
use savepoint_integration_tests::scenario::World;
use savepoint_runtime::config::Config;
use savepoint_store::ScriptStore;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/tls").join(name)
}

fn run(script_name: &str, args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(script(script_name))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{script_name}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{script_name} {args:?} failed:\n{text}");
    text
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A directory of test certificates and the TLS servers started in it; dropping it stops
/// them (by the pids the scripts recorded).
struct TlsLab {
    dir: PathBuf,
    rabbit: bool,
}

impl TlsLab {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("sp-tls-{tag}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        run("certs.sh", &[dir.to_str().unwrap()]);
        Self { dir, rabbit: false }
    }

    fn file(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }

    /// A TLS-only Redis requiring a client certificate and a password; its port.
    fn redis(&self, extra: &[&str]) -> u16 {
        let port = free_port();
        let port_s = port.to_string();
        let mut args = vec!["start", &port_s, self.dir.to_str().unwrap()];
        args.extend_from_slice(extra);
        run("redis-tls.sh", &args);
        port
    }

    /// A second RabbitMQ node with only an AMQPS listener that requires a client certificate.
    fn rabbit(&mut self) -> u16 {
        let port = free_port();
        let dist = free_port();
        run(
            "rabbitmq-tls.sh",
            &[
                "start",
                self.dir.to_str().unwrap(),
                &port.to_string(),
                "--mtls",
                "--dist-port",
                &dist.to_string(),
            ],
        );
        self.rabbit = true;
        port
    }

    /// `cfg` on the TLS Redis at `port` with the CA and the client certificate.
    fn redis_config(&self, cfg: &mut Config, port: u16) {
        cfg.redis_url = format!("rediss://:pw@localhost:{port}");
        cfg.security.redis_tls.ca = self.file("ca.pem");
        cfg.security.redis_tls.cert = self.file("client.pem");
        cfg.security.redis_tls.key = self.file("client.key");
    }
}

impl Drop for TlsLab {
    fn drop(&mut self) {
        let dir = self.dir.to_string_lossy().into_owned();
        let _ = Command::new("bash")
            .arg(script("redis-tls.sh"))
            .args(["stop", &dir])
            .output();
        if self.rabbit {
            let _ = Command::new("bash")
                .arg(script("rabbitmq-tls.sh"))
                .args(["stop", &dir])
                .output();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn connect_err(cfg: &Config) -> String {
    let started = Instant::now();
    let r = ScriptStore::connect(&cfg.redis_url, cfg.keys(), cfg.store()).await;
    let e = match r {
        Ok(_) => panic!("connected with a bad TLS setup"),
        Err(e) => e.to_string(),
    };
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "failed only after {:?}",
        started.elapsed()
    );
    eprintln!("rediss refused after {:?}: {e}", started.elapsed());
    e
}

#[tokio::test]
async fn redis_over_tls_with_a_client_certificate_and_the_ways_it_is_refused() {
    savepoint_integration_tests::services().await;
    let lab = TlsLab::new("redis");
    let port = lab.redis(&["--mtls", "--password", "pw"]);
    let mut cfg = savepoint_integration_tests::test_config(&savepoint_integration_tests::fresh_namespace("tlsr"));
    lab.redis_config(&mut cfg, port);
    cfg.validate().unwrap();
    let store = ScriptStore::connect(&cfg.redis_url, cfg.keys(), cfg.store())
        .await
        .expect("rediss");
    let t = ThreadId::new("tls-run-1".to_owned()).unwrap();
    store
        .create(&t, "invoice", 1, "{\"invoice_id\":\"INV-TLS\"}", "")
        .await
        .unwrap();
    assert_eq!(store.header(&t).await.unwrap().unwrap().input["invoice_id"], "INV-TLS");

    // The wrong CA.
    let mut wrong_ca = cfg.clone();
    wrong_ca.security.redis_tls.ca = lab.file("other-ca.pem");
    let e = connect_err(&wrong_ca).await;
    assert!(e.contains("certificate") || e.contains("UnknownIssuer"), "{e}");
    // No client certificate: the server refuses the handshake.
    let mut no_cert = cfg.clone();
    no_cert.security.redis_tls.cert.clear();
    no_cert.security.redis_tls.key.clear();
    connect_err(&no_cert).await;
    // A server whose certificate names another host.
    let wrong_host = lab.redis(&["--server-cert", "wronghost"]);
    let mut host = cfg.clone();
    host.redis_url = format!("rediss://localhost:{wrong_host}");
    host.security.redis_tls.cert.clear();
    host.security.redis_tls.key.clear();
    let e = connect_err(&host).await;
    assert!(e.contains("NotValidForName") || e.contains("not valid for"), "{e}");
    // A CA for a plaintext URL: refused by the config, nothing connects in plaintext.
    let mut plain = cfg.clone();
    plain.redis_url = "redis://127.0.0.1:6379".into();
    let e = plain.validate().unwrap_err().to_string();
    assert!(e.contains("refusing to connect in plaintext"), "{e}");
    // A TLS URL against a plaintext port does not fall back either.
    let mut to_plain = cfg.clone();
    to_plain.redis_url = "rediss://localhost:6379".into();
    let e = connect_err(&to_plain).await;
    assert!(e.contains("does not speak TLS"), "{e}");
    // A plain URL at the TLS port (no TLS setting): named at once, with the URL to use.
    let mut plain_at_tls =
        savepoint_integration_tests::test_config(&savepoint_integration_tests::fresh_namespace("tlsp"));
    plain_at_tls.redis_url = format!("redis://:pw@localhost:{port}");
    let e = connect_err(&plain_at_tls).await;
    assert!(
        e.contains("speaks TLS") && e.contains(&format!("rediss://localhost:{port}")),
        "{e}"
    );
}

/// The invoice story with the scheduler and a worker process speaking TLS to both Redis and
/// RabbitMQ, each requiring a client certificate; then the AMQP refusals.
#[tokio::test]
async fn a_run_over_tls_to_redis_and_rabbitmq() {
    savepoint_integration_tests::services().await;
    let mut lab = TlsLab::new("run");
    let redis_port = lab.redis(&["--mtls", "--password", "pw"]);
    let amqps = lab.rabbit();
    let amqps_url = format!("amqps://guest:guest@localhost:{amqps}/%2f");
    let w = World::new("tls", |c| {
        lab.redis_config(c, redis_port);
        c.amqp_url = amqps_url.clone();
        c.security.amqp_tls.ca = lab.file("ca.pem");
        c.security.amqp_tls.cert = lab.file("client.pem");
        c.security.amqp_tls.key = lab.file("client.key");
    })
    .await;
    let _wk = w.worker(WORKER, "wk", "");
    w.wait_registered("invoice").await;
    let t = w.start("invoice", json!({"invoice_id": "INV-TLS-RUN"})).await;
    let run = w.wait_status(&t, &["completed"], Duration::from_secs(60)).await;
    assert_eq!(run["output"]["total_cents"], 125_000, "{run}");
    let counts = w.effect_counts().await;
    assert_eq!(counts.get("ledger:INV-TLS-RUN"), Some(&1), "{counts:?}");
    // Nothing of this namespace reached the plaintext Redis.
    let local = ScriptStore::connect("redis://127.0.0.1:6379", w.cfg.keys(), Default::default())
        .await
        .unwrap();
    assert!(local.header(&t).await.unwrap().is_none());

    // AMQP with the wrong CA, and an amqps URL with a CA but an amqp node: clear errors.
    let mut wrong = w.cfg.clone();
    wrong.security.amqp_tls.ca = lab.file("other-ca.pem");
    let started = Instant::now();
    let e = match Broker::connect(wrong.broker(), Duration::from_secs(5)).await {
        Ok(_) => panic!("amqps with the wrong CA connected"),
        Err(e) => e.to_string(),
    };
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
    eprintln!("amqps with the wrong CA refused after {:?}: {e}", started.elapsed());
    assert!(
        e.to_lowercase().contains("certificate") || e.contains("UnknownIssuer"),
        "{e}"
    );
    // Without the client certificate the node refuses the handshake.
    let mut no_cert = w.cfg.clone();
    no_cert.security.amqp_tls.cert.clear();
    no_cert.security.amqp_tls.key.clear();
    let e = match Broker::connect(no_cert.broker(), Duration::from_secs(5)).await {
        Ok(_) => panic!("amqps without a client certificate connected"),
        Err(e) => e.to_string(),
    };
    eprintln!("amqps without a client certificate refused: {e}");
    let mut mixed = w.cfg.clone();
    mixed.amqp_url = format!("{amqps_url},amqp://guest:guest@127.0.0.1:5672/%2f");
    let e = mixed.validate().unwrap_err().to_string();
    assert!(e.contains("mixes amqps:// and amqp://"), "{e}");
    let mut plain = w.cfg.clone();
    plain.amqp_url = "amqp://guest:guest@127.0.0.1:5672/%2f".into();
    let e = plain.validate().unwrap_err().to_string();
    assert!(e.contains("amqp_tls is set but the URL is not a TLS URL"), "{e}");
}
