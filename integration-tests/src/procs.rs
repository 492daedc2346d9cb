//! Real worker and scheduler processes for crash tests: spawned from this package's
//! binaries (`it-worker`, `it-scheduler`, same code as `savepoint-worker` and
//! `savepoint-scheduler`), killed with real signals.

use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::process::{Child, Command};

use savepoint_runtime::config::Config;

/// A running Savepoint process.
pub struct Proc {
    /// Name for messages.
    pub name: String,
    child: Child,
}

pub fn env_of(cfg: &Config) -> Vec<(&'static str, String)> {
    vec![
        ("SAVEPOINT_AMQP_URL", cfg.amqp_url.clone()),
        ("SAVEPOINT_REDIS_URL", cfg.redis_url.clone()),
        ("SAVEPOINT_NAMESPACE", cfg.namespace.clone()),
        ("SAVEPOINT_PARTITIONS", cfg.partitions.to_string()),
        ("SAVEPOINT_QUEUE_EXPIRES_MS", cfg.queue_expires_ms.to_string()),
        ("SAVEPOINT_LEASE_MS", cfg.lease_ms.to_string()),
        ("SAVEPOINT_GRACE_MS", cfg.grace_ms.to_string()),
        ("SAVEPOINT_REDELIVER_MS", cfg.redeliver_ms.to_string()),
        ("SAVEPOINT_LEASE_MARGIN_MS", cfg.lease_margin_ms.to_string()),
        ("SAVEPOINT_REDIS_TIMEOUT_MS", cfg.redis_timeout_ms.to_string()),
        ("SAVEPOINT_REDIS_WAIT_REPLICAS", cfg.redis_wait_replicas.to_string()),
        ("SAVEPOINT_REDIS_WAIT_TIMEOUT_MS", cfg.redis_wait_timeout_ms.to_string()),
        ("SAVEPOINT_REDIS_WAIT_SCOPE", cfg.redis_wait_scope.clone()),
        ("SAVEPOINT_QUEUED_REDELIVER_MS", cfg.queued_redeliver_ms.to_string()),
        ("SAVEPOINT_WORKER_TTL_MS", cfg.worker_ttl_ms.to_string()),
        ("SAVEPOINT_MAX_CRASHES", cfg.max_crashes.to_string()),
        ("SAVEPOINT_SLICE_MAX_STEPS", cfg.worker.slice_max_steps.to_string()),
        ("SAVEPOINT_WORKER_CONCURRENCY", cfg.worker.concurrency.to_string()),
        ("SAVEPOINT_WORKER_PREFETCH", cfg.worker.prefetch.to_string()),
        ("SAVEPOINT_MAX_ENTRIES", cfg.worker.max_entries.to_string()),
        ("SAVEPOINT_SHUTDOWN_GRACE_MS", cfg.worker.shutdown_grace_ms.to_string()),
        ("SAVEPOINT_SCAN_INTERVAL_MS", cfg.scheduler.scan_interval_ms.to_string()),
        ("SAVEPOINT_WORKER_HTTP_ADDR", String::new()),
        ("SAVEPOINT_FAILPOINTS", cfg.failpoints.clone()),
        ("SAVEPOINT_MAX_JOURNAL_BYTES", cfg.worker.max_journal_bytes.to_string()),
        ("SAVEPOINT_MAX_BUFFERED_SIGNALS", cfg.max_buffered_signals.to_string()),
        ("SAVEPOINT_CHILD_POLL_MS", cfg.child_poll_ms.to_string()),
        ("SAVEPOINT_PAYLOAD_KEYS", cfg.security.payload_keys.0.clone()),
        ("SAVEPOINT_REDIS_TLS_CA", cfg.security.redis_tls.ca.clone()),
        ("SAVEPOINT_REDIS_TLS_CERT", cfg.security.redis_tls.cert.clone()),
        ("SAVEPOINT_REDIS_TLS_KEY", cfg.security.redis_tls.key.clone()),
        ("SAVEPOINT_AMQP_TLS_CA", cfg.security.amqp_tls.ca.clone()),
        ("SAVEPOINT_AMQP_TLS_CERT", cfg.security.amqp_tls.cert.clone()),
        ("SAVEPOINT_AMQP_TLS_KEY", cfg.security.amqp_tls.key.clone()),
        (
            "RUST_LOG",
            std::env::var("SAVEPOINT_TEST_CHILD_LOG").unwrap_or_else(|_| "warn,lapin=off".into()),
        ),
    ]
}

impl Proc {
    /// Spawns `bin` with the config passed as `SAVEPOINT_*` variables plus `extra`.
    pub fn spawn(bin: &str, name: &str, cfg: &Config, extra: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(bin);
        cmd.env_clear().env("PATH", std::env::var("PATH").unwrap_or_default());
        for (k, v) in env_of(cfg) {
            cmd.env(k, v);
        }
        for (k, v) in extra {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot spawn {bin}: {e}"));
        Self {
            name: name.to_owned(),
            child,
        }
    }

    /// The OS process id.
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// Waits for the process to exit, up to `timeout`; panics if it does not.
    pub async fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => panic!("{}: wait failed: {e}", self.name),
            Err(_) => panic!("{}: did not exit within {timeout:?}", self.name),
        }
    }

    /// Sends a signal (`KILL`, `TERM`, …) with the system `kill` command.
    pub fn signal(&self, sig: &str) {
        let status = std::process::Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status();
        assert!(
            status.map(|s| s.success()).unwrap_or(false),
            "kill -{sig} {} failed",
            self.pid()
        );
    }

    /// True while the process runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

/// True when the status is a death by signal (abort, kill) rather than an exit.
pub fn killed_by_signal(s: &ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    s.signal().is_some()
}

/// A free TCP port on 127.0.0.1 for a server a test starts (bound once to check, then
/// released), below the kernel's ephemeral range and never the same twice in this process.
/// Not port 0's pick: that is inside the ephemeral range, where any outgoing connection may
/// take the port between this check and the server's bind (and the bind then fails, even
/// with `SO_REUSEADDR`), and two tests could be handed one port in turn. deploy/chaos/lib.sh's
/// `chaos_free_port` picks the same way.
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|w| w.parse::<u16>().ok()))
        .unwrap_or(32768);
    let (lo, hi) = if ephemeral > 21_000 {
        (20_000, ephemeral - 1)
    } else {
        (61_000, 65_000)
    };
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..1000 {
        // (A random draw from std alone: each RandomState has fresh keys.)
        let draw = std::collections::hash_map::RandomState::new().build_hasher().finish();
        let port = lo + (draw % u64::from(hi - lo + 1)) as u16;
        if !given.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.push(port);
            return port;
        }
    }
    panic!("no free port in {lo}..={hi} after 1000 draws");
}

/// The value of one Prometheus series (`name{labels}` exactly as exposed) at `http://addr/metrics`;
/// 0 when the series is absent, `None` when the endpoint does not answer.
pub async fn scrape(addr: &str, series: &str) -> Option<f64> {
    let text = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    Some(
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.trim().parse().ok()))
            .unwrap_or(0.0),
    )
}
