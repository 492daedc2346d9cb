//! An in-process worker ([`savepoint_worker::run_with`]) for tests that register their own
//! workflows, optionally with failpoints.

use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use savepoint::config::Config;
use savepoint::failpoints::Failpoints;
use savepoint::workflow::Registry;
use savepoint_worker::WorkerOptions;

/// A worker running in this process; [`InProc::stop`] stops it gracefully.
pub struct InProc {
    stop: CancellationToken,
    join: JoinHandle<()>,
}

impl InProc {
    /// Starts a worker serving `registry` on `cfg`.
    pub fn start(cfg: &Config, registry: Registry) -> Self {
        Self::with_failpoints(cfg, registry, "")
    }

    /// [`InProc::start`] with failpoints (`name=action;…`, empty for none).
    pub fn with_failpoints(cfg: &Config, registry: Registry, spec: &str) -> Self {
        let stop = CancellationToken::new();
        let failpoints = (!spec.is_empty()).then(|| Failpoints::parse(spec).expect("failpoint spec"));
        let opts = WorkerOptions {
            registry,
            failpoints,
            crash: CancellationToken::new(),
            serve_http: false,
            stubs: None,
        };
        let (cfg, s) = (cfg.clone(), stop.clone());
        let join = tokio::spawn(async move {
            savepoint_worker::run_with(cfg, opts, s).await.expect("worker");
        });
        Self { stop, join }
    }

    /// Stops it (in-flight runs yield) and waits up to 30 s.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(30), self.join).await;
    }
}
