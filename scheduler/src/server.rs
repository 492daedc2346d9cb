//! Process wiring: connect Redis and RabbitMQ, serve the HTTP API, run the due scanner,
//! stop on shutdown.

use savepoint_broker::Broker;
use savepoint_core::failpoints::Failpoints;
use savepoint_runtime::config::{Config, ConfigError};
use savepoint_runtime::ops::Readiness;
use savepoint_store::{until_ok, ScriptStore};
use std::future::IntoFuture;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::api::{self, ApiState, Services};
use crate::publish::Publisher;
use crate::scanner::{self, ScanSettings};
use crate::SchedulerError;

/// How long start-up waits for Redis and RabbitMQ before giving up.
pub const CONNECT_DEADLINE: Duration = Duration::from_secs(30);

/// Runs the scheduler on `cfg.scheduler.http_addr` until `shutdown` is cancelled.
pub async fn run(cfg: Config, shutdown: CancellationToken) -> Result<(), SchedulerError> {
    let listener = TcpListener::bind(&cfg.scheduler.http_addr).await?;
    serve(cfg, listener, shutdown).await
}

/// An open API (no tokens) serves only loopback unless `allow_open_bind` says otherwise, and
/// says so loudly either way.
fn check_bind(cfg: &Config, addr: std::net::SocketAddr, auth: bool) -> Result<(), ConfigError> {
    if auth {
        info!(%addr, "API authentication on: every request but the probes needs a token");
        return Ok(());
    }
    if !addr.ip().is_loopback() && !cfg.security.allow_open_bind {
        return Err(ConfigError::Invalid(format!(
            "refusing to serve an open API on {addr}: no API tokens are configured (SAVEPOINT_API_TOKENS or \
             SAVEPOINT_API_TOKENS_FILE), so anyone who reaches this address could start, cancel and resume \
             runs and settle effects. Configure tokens, bind 127.0.0.1, or set SAVEPOINT_ALLOW_OPEN_BIND=true \
             if a proxy in front authenticates"
        )));
    }
    tracing::warn!(
        %addr,
        "THE API IS OPEN: no API tokens are configured, anyone who reaches {addr} may start, cancel and resume \
         runs and settle effects (README \"Security\")"
    );
    Ok(())
}

/// Runs the scheduler on a pre-bound listener (tests bind `127.0.0.1:0`) until `shutdown`
/// is cancelled. The HTTP server answers at once (`/healthz`; API routes answer 503 and
/// `/readyz` "not ready" until Redis and RabbitMQ are connected).
pub async fn serve(cfg: Config, listener: TcpListener, shutdown: CancellationToken) -> Result<(), SchedulerError> {
    cfg.validate()?;
    let failpoints = Failpoints::parse(&cfg.failpoints).map_err(|e| ConfigError::Invalid(e.to_string()))?;
    let addr = listener.local_addr()?;
    let readiness = Readiness::default();
    let slot: Arc<OnceLock<Services>> = Arc::new(OnceLock::new());
    let state = ApiState::new(slot.clone(), &cfg).map_err(ConfigError::Security)?;
    check_bind(&cfg, addr, state.auth.enabled())?;
    let app = crate::http::router(state, readiness.clone());

    let stop = shutdown.child_token();
    let server = tokio::spawn(
        axum::serve(listener, app)
            .with_graceful_shutdown(stop.clone().cancelled_owned())
            .into_future(),
    );
    info!(%addr, namespace = %cfg.namespace, "scheduler listening");

    let connected = tokio::select! {
        biased;
        r = connect(&cfg) => r,
        _ = shutdown.cancelled() => {
            let _ = server.await;
            return Ok(());
        }
    };
    let (store, broker) = match connected {
        Ok(pair) => pair,
        Err(e) => {
            stop.cancel();
            let _ = server.await;
            return Err(e);
        }
    };
    let queues = savepoint_broker::Queues::new(cfg.broker(), broker.clone());
    let publisher = Publisher::new(broker, cfg.keys(), failpoints).with_queues(queues);
    let _ = slot.set(Services {
        store: store.clone(),
        publisher: publisher.clone(),
        marker: crate::marker::Marker::spawn(store.clone(), stop.clone()),
        catalog: Default::default(),
        schemas: Default::default(),
    });
    readiness.set(true);
    info!(namespace = %cfg.namespace, partitions = cfg.partitions, "scheduler ready");

    let settings = ScanSettings {
        interval: Duration::from_millis(cfg.scheduler.scan_interval_ms),
        batch: cfg.scheduler.scan_batch.max(1),
        period: cfg.store().redeliver,
        split: true,
    };
    let scanner = tokio::spawn(scanner::run(store, publisher, settings, stop.clone()));
    let schedules = tokio::spawn(api::schedules::run(slot.clone(), settings_tick(&cfg), stop.clone()));

    let served = server.await;
    readiness.set(false);
    stop.cancel();
    let _ = scanner.await;
    let _ = schedules.await;
    info!("scheduler stopped");
    match served {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.into()),
        Err(join) => Err(std::io::Error::other(format!("HTTP server task failed: {join}")).into()),
    }
}

/// Connects the store (retrying transient failures until the deadline) and the broker
/// (which retries on its own until the deadline).
async fn connect(cfg: &Config) -> Result<(ScriptStore, Broker), SchedulerError> {
    let start = Instant::now();
    let never = CancellationToken::new();
    let store = until_ok("connecting to the store", Some(CONNECT_DEADLINE), &never, || {
        ScriptStore::connect(&cfg.redis_url, cfg.keys(), cfg.store())
    })
    .await?;
    let left = CONNECT_DEADLINE.saturating_sub(start.elapsed());
    until_ok("checking the namespace layout", Some(left), &never, || {
        store.check_layout()
    })
    .await?;
    let left = CONNECT_DEADLINE
        .saturating_sub(start.elapsed())
        .max(Duration::from_secs(1));
    let broker = Broker::connect(cfg.broker(), left).await?;
    Ok((store, broker))
}

/// How often the schedule loop looks for due firings: the scan interval, at most 250 ms (a
/// firing starts within a tick of its time).
fn settings_tick(cfg: &Config) -> Duration {
    Duration::from_millis(cfg.scheduler.scan_interval_ms.clamp(20, 250))
}
