//! The demo workflows hosted by the `savepoint-worker` binary: `invoice` (the seed's story),
//! `approval` (human in the loop), `webhook` (an HTTP effect with an idempotency key) and
//! `chain` (trivial steps, for benchmarks) and `fanout` (parallel steps and effects, a race
//! with a timeout), and `family` with `kid` (child workflows), `routed` (a step on another task queue), `metered` (witnessed steps, for flow control).
//!
//! Every demo effect call, real or repeated, appends one JSON record
//! `{"thread_id","effect","key","at"}` to the Redis list `<namespace>:demo:effects`, so a
//! duplicate is visible.

mod approval;
mod chain;
mod family;
mod fanout;
mod invoice;
mod metered;
mod routed;
mod webhook;

pub use approval::{Approval, ApprovalOut, GATE};
pub use chain::{Chain, ChainIn, ChainState};
pub use family::{Family, FamilyIn, FamilyOut, Kid, KidIn, KidOut, DONE, GO};
pub use fanout::{Fanout, FanoutIn};
pub use invoice::{Invoice, InvoiceIn, Posted, Sent, Totals};
pub use metered::{Metered, MeteredIn, MeteredOut};
pub use routed::{Routed, RoutedIn, RoutedOut};
pub use webhook::{Delivered, Webhook, WebhookIn, WebhookOut};

use serde_json::{json, Value};
use std::time::Duration;

use savepoint::workflow::{Registry, StepError};
use savepoint_core::journal::now_ms;
use savepoint_store::ScriptStore;

/// The demo effects log.
#[derive(Clone)]
pub struct EffectLog {
    store: ScriptStore,
    key: String,
}

impl EffectLog {
    /// The log of the store's namespace.
    pub fn new(store: &ScriptStore) -> Self {
        Self {
            store: store.clone(),
            key: store.keys().demo_effects(),
        }
    }

    /// Appends one record (an effect was applied). It is called after the effect happened,
    /// so a store that is away for a moment (a failover) is waited out, up to 30 s, rather
    /// than reported: an `Err` from an effect promises it did not happen.
    pub async fn record(&self, thread: &str, effect: &str, key: &str) -> Result<(), StepError> {
        let rec = json!({"thread_id": thread, "effect": effect, "key": key, "at": now_ms()}).to_string();
        let mut cmd = redis::cmd("RPUSH");
        cmd.arg(&self.key).arg(rec);
        let never = tokio_util::sync::CancellationToken::new();
        let _: i64 =
            savepoint_store::until_ok("recording a demo effect", Some(Duration::from_secs(30)), &never, || {
                self.store.query(&cmd)
            })
            .await?;
        Ok(())
    }

    /// Every record, oldest first.
    pub async fn all(&self) -> Result<Vec<Value>, StepError> {
        let raw: Vec<String> = self
            .store
            .query(redis::cmd("LRANGE").arg(&self.key).arg(0).arg(-1))
            .await?;
        Ok(raw.iter().filter_map(|s| serde_json::from_str(s).ok()).collect())
    }

    /// The first record with this key, if any (used by `ledger.post`'s reconcile policy).
    pub async fn find(&self, key: &str) -> Result<Option<Value>, StepError> {
        Ok(self.all().await?.into_iter().find(|r| r["key"] == key))
    }
}

/// Why a demo registry spec (`name[@version[:min]],…`) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// A version that is not a number.
    #[error("bad version in {item:?}: use name[@version[:min]]")]
    Version {
        /// The item.
        item: String,
    },
    /// A name that is not a demo workflow.
    #[error("unknown demo workflow {name:?}: invoice, approval, webhook, chain, fanout, family, kid, routed, metered")]
    Unknown {
        /// The name.
        name: String,
    },
}

/// A registry of the demo workflows named in `spec`: comma-separated `name[@version[:min]]`
/// (e.g. `invoice,chain@2:1`), each serving the recorded versions `min..=version` (default:
/// its own constants). Used to stand up workers of different builds side by side.
pub fn registry_from_spec(store: &ScriptStore, spec: &str) -> Result<Registry, SpecError> {
    let log = EffectLog::new(store);
    let mut r = Registry::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, versions) = item.split_once('@').unwrap_or((item, ""));
        let (v, min) = match versions.split_once(':') {
            Some((v, m)) => (v.parse().ok(), m.parse().ok()),
            None => (versions.parse().ok(), None),
        };
        if !versions.is_empty() && v.is_none() {
            return Err(SpecError::Version { item: item.to_owned() });
        }
        let v = v.unwrap_or(1);
        let min = min.unwrap_or(1);
        match name {
            "invoice" => r.register_versions(Invoice::new(log.clone()), v, min),
            "approval" => r.register_versions(Approval, v, min),
            "webhook" => r.register_versions(Webhook::new(log.clone()), v, min),
            "chain" => r.register_versions(Chain, v, min),
            "fanout" => r.register_versions(Fanout::new(log.clone()), v, min),
            "family" => r.register_versions(Family, v, min),
            "kid" => r.register_versions(Kid::new(log.clone()), v, min),
            "routed" => r.register_versions(Routed, v, min),
            "metered" => r.register_versions(Metered::new(store), v, min),
            other => return Err(SpecError::Unknown { name: other.to_owned() }),
        };
    }
    Ok(r)
}

/// A registry with every demo workflow.
pub fn registry(store: &ScriptStore) -> Registry {
    let log = EffectLog::new(store);
    let mut r = Registry::new();
    r.register(Invoice::new(log.clone()))
        .register(Approval)
        .register(Webhook::new(log.clone()))
        .register(Chain)
        .register(Fanout::new(log.clone()))
        .register(Family)
        .register(Kid::new(log))
        .register(Routed)
        .register(Metered::new(store));
    r
}
