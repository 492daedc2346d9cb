//! The scheduler's parts, put together by a caller other than [`crate::serve`]: the
//! deterministic simulator (`savepoint sim`, in the `savepoint-cli` crate) runs the real API and
//! schedule firers over the embedded backend, on its own clock and with its own replicas. Not a
//! stable interface: it changes with the simulator.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use savepoint_runtime::config::Config;
use savepoint_runtime::ops::Readiness;
use savepoint_runtime::security::SecurityError;
use savepoint_store::ScriptStore;
use tokio_util::sync::CancellationToken;

use crate::api::{ApiState, Services};
use crate::publish::Publisher;

/// The HTTP API (and the console and ops routes) over already-connected services, with
/// `schedule_firers` schedule loops racing each other as that many scheduler replicas would.
/// Every task stops with `stop`. Fails only if `cfg`'s API tokens do not parse.
pub fn control_plane(
    cfg: &Config,
    store: ScriptStore,
    publisher: Publisher,
    readiness: Readiness,
    schedule_firers: usize,
    stop: &CancellationToken,
) -> Result<Router, SecurityError> {
    let slot = Arc::new(OnceLock::new());
    let _ = slot.set(Services {
        store: store.clone(),
        publisher,
        marker: crate::marker::Marker::spawn(store, stop.clone()),
        catalog: Default::default(),
        schemas: Default::default(),
    });
    for _ in 0..schedule_firers {
        tokio::spawn(crate::api::schedules::run(
            slot.clone(),
            Duration::from_millis(cfg.scheduler.scan_interval_ms),
            stop.clone(),
        ));
    }
    Ok(crate::http::router(ApiState::new(slot, cfg)?, readiness))
}
