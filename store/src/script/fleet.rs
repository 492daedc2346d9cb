//! The live fleet: which worker serves which workflows and versions (registrations that
//! expire without a heartbeat), the catalog computed from them, and the namespace layout.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

use super::{ms, ScriptStore};
use crate::{StoreError, CAPABILITIES, FEATURES};
use savepoint_core::outcome::CatalogEntry;

/// One live worker's registration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerInfo {
    /// The worker incarnation.
    #[serde(default)]
    pub id: String,
    /// What it serves.
    pub workflows: Vec<CatalogEntry>,
    /// The task queue it consumes.
    #[serde(default)]
    pub queue: String,
    /// Registration expiry (server ms), unless refreshed.
    #[serde(default)]
    pub until: u64,
    /// How long one registration lasts (ms): the last heartbeat was at `until - ttl_ms`.
    #[serde(default)]
    pub ttl_ms: u64,
    /// The worker's health and metrics address (`http://host:port`), when it serves one: the
    /// doctor asks its `/healthz` whether the process is still there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops: Option<String>,
    /// Host name and process id.
    #[serde(default)]
    pub host: String,
    /// Process id.
    #[serde(default)]
    pub pid: u32,
    /// When the worker started (ms since the epoch, its own clock).
    #[serde(default)]
    pub started_at: u64,
    /// Runs it may execute at once.
    #[serde(default)]
    pub concurrency: u32,
    /// Runs executing in it at its last heartbeat.
    #[serde(default)]
    pub in_flight: u32,
    /// Journal entries it has committed since it started, at its last heartbeat (the console
    /// derives the fleet's steps per second from it).
    #[serde(default)]
    pub steps: u64,
    /// Slices it has started since it started, at its last heartbeat.
    #[serde(default)]
    pub slices: u64,
    /// Slices per second it started recently (a moving mean over its heartbeats): how fast
    /// it takes tasks off its queue (the estimate of a queued run's turn).
    #[serde(default)]
    pub slices_per_sec: f64,
    /// The promises of [`CAPABILITIES`] its build keeps (this build's: all of them). Read
    /// through [`WorkerInfo::from_registration`], which fills it in for the registration of a
    /// build from before the field.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// The build it runs (empty for a build from before the field).
    #[serde(default)]
    pub build: Build,
}

/// A worker's build, as its registration says it: what tells two builds apart in a rollout.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Build {
    /// The engine's version (`savepoint-worker`'s crate version).
    #[serde(default)]
    pub version: String,
    /// The build's id: `SAVEPOINT_BUILD_ID` when set (an image tag, a commit), else the
    /// contract's digest (12 hex digits of the SHA-256 of the engine version, the workflows and
    /// versions served, the value types and versions it reads and the run features it knows):
    /// two builds with one id are interchangeable to the engine.
    #[serde(default)]
    pub id: String,
    /// The digest of its contract, whatever the id (see `id`).
    #[serde(default)]
    pub contract: String,
    /// The versioned value types it reads, `NAME@VERSION`.
    #[serde(default)]
    pub values: Vec<String>,
}

impl Build {
    /// The build of a worker of engine `version` serving `workflows`, reading the value types
    /// of `values` (`NAME@VERSION`), knowing the run `features`, labelled `label` (may be empty).
    pub fn of(version: &str, workflows: &[CatalogEntry], values: &[String], features: &[String], label: &str) -> Self {
        use sha2::{Digest, Sha256};
        let mut served: Vec<String> = workflows
            .iter()
            .map(|e| format!("{}@{}..{}", e.name, e.min_version, e.version))
            .collect();
        served.sort();
        let (mut values, mut features) = (values.to_vec(), features.to_vec());
        values.sort();
        features.sort();
        let mut h = Sha256::new();
        for part in [vec![version.to_owned()], served, values.clone(), features] {
            h.update(part.join("\u{1f}"));
            h.update("\u{1e}");
        }
        let contract = hex::encode(&h.finalize()[..6]);
        Build {
            version: version.to_owned(),
            id: if label.is_empty() {
                contract.clone()
            } else {
                label.to_owned()
            },
            contract,
            values,
        }
    }
}

/// What a worker serves, in the form the claim script matches against a run
/// (`\x1fname\x1emin\x1emax\x1f…`); empty serves anything (tools that replay any run).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServedSpec(String, String, String);

impl ServedSpec {
    /// The spec of these catalog entries.
    pub fn new(entries: &[CatalogEntry]) -> Self {
        let mut s = String::from("\u{1f}");
        for e in entries {
            s.push_str(&format!("{}\u{1e}{}\u{1e}{}\u{1f}", e.name, e.min_version, e.version));
        }
        Self(s, String::new(), String::new()).knowing(FEATURES)
    }

    /// The same, knowing these run features (by default: all of this build's [`FEATURES`]).
    /// A run that needs another is given back untouched, as one of a version not served is.
    pub fn knowing(mut self, features: &[&str]) -> Self {
        self.2 = format!("\u{1f}{}\u{1f}", features.join("\u{1f}"));
        self
    }

    /// Serves any workflow at any version (no check in the claim).
    pub fn any() -> Self {
        Self(String::new(), String::new(), String::new())
    }

    /// The same, serving only runs routed to these task queues (`q`): a task for a run routed
    /// elsewhere is answered `Misrouted` untouched, and the worker forwards it there.
    pub fn on_queues(mut self, queues: &[String]) -> Self {
        self.1 = if queues.is_empty() {
            String::new()
        } else {
            format!("\u{1f}{}\u{1f}", queues.join("\u{1f}"))
        };
        self
    }

    pub(crate) fn as_arg(&self) -> &str {
        &self.0
    }

    pub(crate) fn queues_arg(&self) -> &str {
        &self.1
    }

    pub(crate) fn features_arg(&self) -> &str {
        &self.2
    }
}

impl WorkerInfo {
    /// A registration as a worker wrote it, or `None` when it is not one. A build from before
    /// `capabilities` writes none: one that writes `slices_per_sec` (from `d84b766`, the upgrade
    /// policy's floor, which has pauses) keeps `pause`; an older one keeps none of them.
    pub fn from_registration(raw: &str) -> Option<Self> {
        let value: serde_json::Value = serde_json::from_str(raw).ok()?;
        let before_capabilities = value.get("capabilities").is_none();
        let paced = value.get("slices_per_sec").is_some();
        let mut w: WorkerInfo = serde_json::from_value(value).ok()?;
        if before_capabilities && paced {
            w.capabilities = vec!["pause".to_owned()];
        }
        Some(w)
    }

    /// True when its build keeps `capability` (one of [`CAPABILITIES`]).
    pub fn keeps(&self, capability: &str) -> bool {
        self.capabilities.iter().any(|c| c == capability)
    }

    /// This build's capabilities, for its own registration.
    pub fn all_capabilities() -> Vec<String> {
        CAPABILITIES.iter().map(|c| (*c).to_owned()).collect()
    }

    /// Server time (ms) of the worker's last heartbeat (registration refresh).
    pub fn last_heartbeat(&self) -> u64 {
        self.until.saturating_sub(self.ttl_ms)
    }

    /// Milliseconds since the last heartbeat, when it is overdue: registrations are refreshed
    /// every third of their TTL, so one silent for two of those plus two seconds (two missed
    /// refreshes: one failed call is not enough) is a worker that stopped (killed, paused, cut
    /// off) whose registration has not expired yet.
    pub fn silent_for(&self, now: u64) -> Option<u64> {
        let silent = now.saturating_sub(self.last_heartbeat());
        (self.ttl_ms > 0 && silent > self.ttl_ms * 2 / 3 + 2_000).then_some(silent)
    }

    /// True when this worker serves `workflow` at recorded version `version`.
    pub fn serves(&self, workflow: &str, version: u32) -> bool {
        self.workflows
            .iter()
            .any(|e| e.name == workflow && (e.min_version..=e.version).contains(&version))
    }
}

/// Namespace layout written at first use.
const META_PARTITIONS: &str = "partitions";

impl ScriptStore {
    /// Registers (or refreshes) a live worker for `ttl`; returns the number of live workers.
    pub async fn register_worker(&self, worker: &WorkerInfo, ttl: Duration) -> Result<u64, StoreError> {
        let json = serde_json::to_string(worker).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        self.register_raw(&worker.id, &json, ttl).await
    }

    /// Registers worker `id` with a registration written as is (JSON): how a worker of
    /// another build registers, whose fields may differ from [`WorkerInfo`]'s (tests of a
    /// mixed fleet write an older build's this way).
    pub async fn register_raw(&self, id: &str, registration: &str, ttl: Duration) -> Result<u64, StoreError> {
        let mut inv = self.scripts.register_worker.prepare_invoke();
        inv.key(self.keys.workers())
            .arg(id)
            .arg(registration)
            .arg(ms(ttl).max(1));
        self.engine.eval_as(&inv).await
    }

    /// Removes a worker's registration (clean shutdown).
    pub async fn deregister_worker(&self, id: &str) -> Result<(), StoreError> {
        let mut inv = self.scripts.register_worker.prepare_invoke();
        inv.key(self.keys.workers()).arg(id).arg("").arg(0);
        let _: u64 = self.engine.eval_as(&inv).await?;
        Ok(())
    }

    /// Registers (or refreshes, for `ttl`) scheduler replica `id`, or removes it when `ttl` is
    /// zero; returns the ids of the live replicas, sorted (see [`owns_partition`]).
    pub async fn register_scheduler(&self, id: &str, ttl: Duration) -> Result<Vec<String>, StoreError> {
        let mut inv = self.scripts.schedulers.prepare_invoke();
        inv.key(self.keys.schedulers()).arg(id).arg(ms(ttl));
        let r = self.invoke(&inv).await?;
        let mut ids: Vec<String> = (1..r.0.len()).map(|i| r.text(i)).collect();
        ids.sort();
        Ok(ids)
    }

    /// Makes every run that a worker gave back as unserved due now (a worker that may serve
    /// them joined). Returns how many.
    pub async fn wake_unserved(&self) -> Result<u64, StoreError> {
        let mut n = 0;
        for p in 0..self.keys.partitions() {
            let mut inv = self.scripts.wake_unserved.prepare_invoke();
            inv.key(self.keys.due(p)).key(self.keys.status_index(p, "unserved"));
            let woke: u64 = self.engine.eval_as(&inv).await?;
            n += woke;
        }
        Ok(n)
    }

    /// The workers whose registration has not expired.
    pub async fn live_workers(&self) -> Result<Vec<WorkerInfo>, StoreError> {
        let inv = {
            let mut inv = self.scripts.live_workers.prepare_invoke();
            inv.key(self.keys.workers());
            inv
        };
        let r = self.invoke(&inv).await?;
        let mut out = Vec::new();
        for i in (1..r.0.len()).step_by(3) {
            // A registration this build cannot read stands for a worker all the same, one that
            // serves and keeps nothing this build knows of (it refuses a pause, never serves).
            let mut w = WorkerInfo::from_registration(&r.text(i + 2)).unwrap_or_else(|| WorkerInfo {
                host: "(unreadable registration)".to_owned(),
                ..WorkerInfo::default()
            });
            w.id = r.text(i);
            w.until = r.num(i + 1);
            out.push(w);
        }
        Ok(out)
    }

    /// The fleet's catalog: for each workflow some live worker serves, the newest version
    /// served (where new runs start) and the oldest.
    pub async fn catalog(&self) -> Result<BTreeMap<String, CatalogEntry>, StoreError> {
        let mut out: BTreeMap<String, CatalogEntry> = BTreeMap::new();
        for w in self.live_workers().await? {
            for e in w.workflows {
                out.entry(e.name.clone())
                    .and_modify(|c| {
                        // The input version is the newest code's (the newest version's
                        // schema is the one a start's input is checked against).
                        if (e.version, e.input_version) > (c.version, c.input_version) {
                            c.input_version = e.input_version;
                            c.input_type = e.input_type.clone();
                        }
                        c.version = c.version.max(e.version);
                        c.min_version = c.min_version.min(e.min_version);
                    })
                    .or_insert(e);
            }
        }
        Ok(out)
    }

    /// Publishes the schemas of the workflows a worker serves (`name@version` → schemas): the
    /// newest registration of a version wins.
    pub async fn publish_schemas(&self, schemas: &[(String, savepoint_core::Schemas)]) -> Result<(), StoreError> {
        if schemas.is_empty() {
            return Ok(());
        }
        let mut cmd = redis::cmd("HSET");
        cmd.arg(self.keys.schemas());
        for (at, s) in schemas {
            let json = serde_json::to_string(s).map_err(|e| StoreError::Reply(e.to_string()))?;
            cmd.arg(at).arg(json);
        }
        let _: i64 = self.engine.query(&cmd).await?;
        Ok(())
    }

    /// The published schemas of `workflow` at `version`, if a worker published any.
    pub async fn schemas(&self, workflow: &str, version: u32) -> Result<Option<savepoint_core::Schemas>, StoreError> {
        let raw: Option<String> = self
            .engine
            .query(
                redis::cmd("HGET")
                    .arg(self.keys.schemas())
                    .arg(format!("{workflow}@{version}")),
            )
            .await?;
        Ok(raw.and_then(|s| serde_json::from_str(&s).ok()))
    }

    /// The catalog entry of a workflow, if a live worker serves it.
    pub async fn catalog_entry(&self, name: &str) -> Result<Option<CatalogEntry>, StoreError> {
        Ok(self.catalog().await?.remove(name))
    }

    /// Fixes the namespace's partition count at first use and refuses a process configured
    /// with another one: runs would be looked up in the wrong partition.
    pub async fn check_layout(&self) -> Result<(), StoreError> {
        let want = self.keys.partitions();
        let _: i64 = self
            .engine
            .query(
                redis::cmd("HSETNX")
                    .arg(self.keys.meta())
                    .arg(META_PARTITIONS)
                    .arg(want),
            )
            .await?;
        let stored: Option<String> = self
            .engine
            .query(redis::cmd("HGET").arg(self.keys.meta()).arg(META_PARTITIONS))
            .await?;
        match stored.as_deref().and_then(|s| s.parse::<u16>().ok()) {
            Some(p) if p == want => Ok(()),
            Some(p) => Err(StoreError::Layout(format!(
                "namespace {} was created with {p} partitions but this process is configured with {want} \
                 (SAVEPOINT_PARTITIONS / partitions): the partition count is fixed per namespace; \
                 set it to {p}, or use a new namespace",
                self.keys.namespace()
            ))),
            None => Err(StoreError::Corrupt(format!(
                "{} field {META_PARTITIONS} is not a number: {stored:?}",
                self.keys.meta()
            ))),
        }
    }
}

/// True when scheduler replica `me` scans partition `p` among the live replicas `live`
/// (rendezvous hashing: the replica with the highest hash of (replica, partition) owns it).
/// Each partition has one owner in any one view; when a replica joins or leaves, only the
/// partitions it gains or loses change hands. A replica not in `live` (its registration
/// failed) scans every partition: two replicas scanning one partition is safe (handing a run
/// out is atomic), no replica scanning it is not.
pub fn owns_partition(me: &str, live: &[String], p: u16) -> bool {
    if !live.iter().any(|id| id == me) {
        return true;
    }
    // A finalizer (splitmix64's) over the string hash: the ids differ in their tails, and
    // the order of the hashes' high bits must not follow the ids' shared prefix.
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let score = |id: &str| mix(savepoint_core::ids::stable_hash(&format!("{p}/{id}")));
    live.iter()
        .max_by_key(|id| (score(id), (*id).clone()))
        .is_some_and(|id| id == me)
}

#[cfg(test)]
mod owner_tests {
    use super::owns_partition;

    #[test]
    fn every_partition_has_one_owner_and_a_leaver_moves_only_its_own() {
        let live: Vec<String> = ["vm-0a1b2c3d4e5f", "vm-0a1b2c3d4e60", "vm-9f8e7d6c5b4a"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let owner = |live: &[String], p| {
            live.iter()
                .filter(|id| owns_partition(id, live, p))
                .cloned()
                .collect::<Vec<_>>()
        };
        let before: Vec<Vec<String>> = (0..1024).map(|p| owner(&live, p)).collect();
        assert!(before.iter().all(|o| o.len() == 1));
        for id in &live {
            let n = before.iter().filter(|o| &o[0] == id).count();
            assert!((250..430).contains(&n), "{id} owns {n} of 1024");
        }
        let two: Vec<String> = vec![live[0].clone(), live[2].clone()];
        for (p, o) in before.iter().enumerate() {
            let after = owner(&two, p as u16);
            if o[0] != live[1] {
                assert_eq!(after, *o, "partition {p} kept its owner");
            }
        }
        assert!(
            owns_partition("x", &live, 7),
            "a replica missing from the view scans everything"
        );
    }
}
