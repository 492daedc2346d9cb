//! An in-process worker ([`savepoint_worker::run_with`]) for tests that register their own
//! workflows, optionally with failpoints.

use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use savepoint::workflow::Registry;
use savepoint_core::failpoints::Failpoints;
use savepoint_runtime::config::Config;
use savepoint_worker::WorkerOptions;

/// A worker running in this process; [`InProc::stop`] stops it gracefully.
pub struct InProc {
    stop: CancellationToken,
    crash: CancellationToken,
    join: JoinHandle<()>,
}

impl InProc {
    /// Starts a worker serving `registry` on `cfg`.
    pub fn start(cfg: &Config, registry: Registry) -> Self {
        Self::with_failpoints(cfg, registry, "")
    }

    /// [`InProc::start`] with failpoints (`name=action;…`, empty for none). An `abort` or
    /// `kill` failpoint crashes this worker as `kill -9` would (it drops everything at once,
    /// settling nothing), not the test process; [`InProc::crashed`] waits for it.
    pub fn with_failpoints(cfg: &Config, registry: Registry, spec: &str) -> Self {
        let (stop, crash) = (CancellationToken::new(), CancellationToken::new());
        let hook = crash.clone();
        let failpoints = (!spec.is_empty()).then(|| {
            Failpoints::parse(spec)
                .expect("failpoint spec")
                .with_crash_hook(move |_| hook.cancel())
        });
        let opts = WorkerOptions {
            registry,
            failpoints,
            crash: crash.clone(),
            serve_http: false,
            stubs: None,
            wrap_store: None,
        };
        let (cfg, s) = (cfg.clone(), stop.clone());
        let join = tokio::spawn(async move {
            savepoint_worker::run_with(cfg, opts, s).await.expect("worker");
        });
        Self { stop, crash, join }
    }

    /// Waits until a failpoint crashed the worker (up to 30 s; panics otherwise).
    pub async fn crashed(&self) {
        tokio::time::timeout(Duration::from_secs(30), self.crash.cancelled())
            .await
            .expect("the worker should have crashed at its failpoint");
    }

    /// Crashes it now, as `kill -9` would (every slice dropped, nothing settled), and waits
    /// until it is gone.
    pub async fn kill(self) {
        self.crash.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(30), self.join).await;
    }

    /// Stops it (in-flight runs yield) and waits up to 30 s.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(30), self.join).await;
    }
}
