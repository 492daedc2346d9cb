//! What every delivery handler and slice of one worker shares: the connections, the
//! registry, the limits and the fleet as last read.

use std::time::Duration;

use savepoint::workflow::{Registry, SliceLimits};
use savepoint_broker::{Broker, Queues};
use savepoint_core::failpoints::Failpoints;
use savepoint_core::ids::Incarnation;
use savepoint_store::{ScriptStore, ServedSpec, WorkerInfo};
use tokio_util::sync::CancellationToken;

/// What every delivery handler shares.
pub(crate) struct Shared {
    pub store: ScriptStore,
    /// The same store as a workflow context holds it (built once, shared by every slice).
    pub run_store: std::sync::Arc<dyn savepoint_core::seam::RunStore>,
    pub broker: Broker,
    /// Every task queue by name (publishing to the queue a run is routed to).
    pub queues: Queues,
    /// The task queues this worker consumes.
    pub served_queues: std::sync::Arc<[String]>,
    /// Publishes the start tasks of child runs (one for every slice).
    pub child_starter: std::sync::Arc<dyn savepoint::workflow::engine::TaskSink>,
    pub registry: Registry,
    pub failpoints: Failpoints,
    pub incarnation: Incarnation,
    pub limits: SliceLimits,
    pub slices_stop: CancellationToken,
    /// The value features (`value:<type>@<v>`) this worker's registry declares and its claims
    /// name (a slice gates a child's output by its type's feature only where they include it).
    pub value_features: std::sync::Arc<[String]>,
    /// What this worker serves, checked by the claim itself.
    pub served: ServedSpec,
    /// The live fleet as last read (refreshed with this worker's registration, and on demand).
    pub fleet: std::sync::RwLock<Vec<WorkerInfo>>,
    /// When `fleet` was last read on demand.
    pub fleet_read: std::sync::Mutex<tokio::time::Instant>,
    /// Test doubles (the test kit).
    pub stubs: Option<savepoint::workflow::Stubs>,
    /// Runs executing now (reported in the registration).
    pub in_flight: std::sync::atomic::AtomicU32,
    /// Journal entries committed by this worker's slices (reported in the registration).
    pub steps: std::sync::atomic::AtomicU64,
    /// Slices this worker started (reported in the registration, with their recent rate:
    /// how fast it takes tasks off its queue).
    pub slices: std::sync::atomic::AtomicU64,
    /// The journals of runs this worker ran, kept for their next slice here.
    pub journals: crate::journals::Journals,
    /// Slices may park their workflow body between slices (`worker.parked_bodies`, and a
    /// journal cache to hold it in).
    pub park: bool,
    /// How long a task waits in this worker's sticky queue (`worker.sticky_ms`; 0: no sticky
    /// queues).
    pub sticky_ms: u32,
    /// How long every slot may be busy before the consumers give back what they hold
    /// (`worker.hand_back_ms`; `None`: never).
    pub hand_back: Option<std::time::Duration>,
    /// The task queues this worker consumes a sticky queue of (set once its consumers are
    /// ready).
    pub sticky: std::sync::OnceLock<Vec<String>>,
}

/// Shortest time between two on-demand reads of the fleet.
const FLEET_REREAD: Duration = Duration::from_millis(250);

impl Shared {
    /// Whether the next task of `thread`, routed to `queue` (`None`: the deployment's), goes
    /// to this worker's sticky queue of it: this worker keeps the run's journal or parked body
    /// and is not stopping, and consumes that sticky queue.
    pub(crate) fn sticks(&self, thread: &savepoint_core::ids::ThreadId, queue: Option<&str>) -> Option<&str> {
        let name = queue.filter(|q| !q.is_empty()).unwrap_or(self.queues.home_name());
        let sticky = self.sticky.get()?;
        let q = sticky.iter().find(|q| q.as_str() == name)?;
        (!self.slices_stop.is_cancelled() && self.journals.held(thread).is_some()).then_some(q.as_str())
    }

    fn known_elsewhere(&self, workflow: &str, version: u32) -> bool {
        let fleet = self.fleet.read().unwrap_or_else(|p| p.into_inner());
        fleet
            .iter()
            .any(|w| w.id != self.incarnation.as_str() && w.serves(workflow, version))
    }

    /// True when another live worker consuming one of this worker's task queues had a free
    /// slot at its last heartbeat: a task handed back may start there. The fleet is read
    /// again when the last read is older than a second (a worker that just joined counts).
    pub(crate) async fn room_elsewhere(&self) -> bool {
        let stale = {
            let mut at = self.fleet_read.lock().unwrap_or_else(|p| p.into_inner());
            let stale = at.elapsed() >= Duration::from_secs(1);
            if stale {
                *at = tokio::time::Instant::now();
            }
            stale
        };
        if stale {
            if let Ok(live) = self.store.live_workers().await {
                *self.fleet.write().unwrap_or_else(|p| p.into_inner()) = live;
            }
        }
        let fleet = self.fleet.read().unwrap_or_else(|p| p.into_inner());
        fleet.iter().any(|w| {
            w.id != self.incarnation.as_str()
                && w.in_flight < w.concurrency
                && w.queue.split(',').any(|q| self.served_queues.iter().any(|s| s == q))
        })
    }

    /// True when another live worker serves `workflow` at `version`. A worker that joined
    /// since the last read is found by reading the fleet again (at most every 250 ms).
    pub(crate) async fn served_elsewhere(&self, workflow: &str, version: u32) -> bool {
        if self.known_elsewhere(workflow, version) {
            return true;
        }
        {
            let mut at = self.fleet_read.lock().unwrap_or_else(|p| p.into_inner());
            if at.elapsed() < FLEET_REREAD {
                return false;
            }
            *at = tokio::time::Instant::now();
        }
        if let Ok(live) = self.store.live_workers().await {
            *self.fleet.write().unwrap_or_else(|p| p.into_inner()) = live;
        }
        self.known_elsewhere(workflow, version)
    }
}
