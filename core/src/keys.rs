//! The Redis key layout (ARCHITECTURE §5). Every key of one run shares the hash tag `{pNN}` so
//! each script touches one Redis Cluster slot; global effect keys are spread by their own
//! hash over `{fxNN}`.

use crate::ids::{stable_hash, EffectKey, Namespace, ThreadId};

/// Default number of partitions of a deployment (fixed when it is created).
pub const DEFAULT_PARTITIONS: u16 = 64;

/// Builds the Redis keys of one namespace.
#[derive(Debug, Clone)]
pub struct Keys {
    ns: Namespace,
    partitions: u16,
}

/// The keys one run's scripts touch, all in the run's slot.
#[derive(Debug, Clone)]
pub struct RunKeys {
    /// Run header + journal hash.
    pub run: String,
    /// The partition's due sorted set.
    pub due: String,
    /// The run's event stream.
    pub events: String,
    /// Signals delivered before the run asked for them.
    pub signals: String,
    /// The partition's index of runs by creation time (for listing).
    pub index: String,
    /// The partition's index of blocked runs (they never expire: listed however old).
    pub blocked: String,
    /// The partition's index of runs waiting for an interrupt or signal.
    pub waiting: String,
    /// The partition's index of runs given back because no worker that had them served them.
    pub unserved: String,
    /// The partition's index of runs whose start task the broker has not confirmed yet.
    pub unconfirmed: String,
}

impl RunKeys {
    /// A key of the run's partition from its name (`<ns>:{pNN}:<name>`), next to its due set.
    fn in_partition(&self, name: &str) -> String {
        let tag = self.due.strip_suffix(":due").unwrap_or(&self.due);
        format!("{tag}:{name}")
    }

    /// The partition's copy of the workflow, version and queue pauses (field → record): what
    /// every claim of a run in the partition checks. (Built when asked for, not with every
    /// key set: only the claim, the heartbeat and a run's pause need it.)
    pub fn pauses(&self) -> String {
        self.in_partition("pauses")
    }

    /// The partition's index of runs a pause stopped (status `paused`), by when.
    pub fn paused(&self) -> String {
        self.in_partition("paused")
    }

    /// The client ids of the signals and answers the run was given (id → name), for
    /// deduplication: beside the signals hash, not in it, so a claim never reads them. (Built
    /// when asked for: only a signal needs it.)
    pub fn dedup(&self) -> String {
        format!("{}:d", self.signals)
    }
}

impl Keys {
    /// Key builder for `ns` with `partitions` partitions (at least 1).
    pub fn new(ns: Namespace, partitions: u16) -> Self {
        Self {
            ns,
            partitions: partitions.max(1),
        }
    }

    /// The namespace.
    pub fn namespace(&self) -> &Namespace {
        &self.ns
    }

    /// Number of partitions.
    pub fn partitions(&self) -> u16 {
        self.partitions
    }

    /// The partition of a thread: `hash(thread_id) % P`.
    pub fn partition(&self, thread: &ThreadId) -> u16 {
        (stable_hash(thread.as_str()) % u64::from(self.partitions)) as u16
    }

    fn tag(&self, p: u16) -> String {
        format!("{}:{{p{:02}}}", self.ns, p)
    }

    /// All keys of one run.
    pub fn run(&self, thread: &ThreadId) -> RunKeys {
        let tag = self.tag(self.partition(thread));
        RunKeys {
            run: format!("{tag}:run:{thread}"),
            due: format!("{tag}:due"),
            events: format!("{tag}:ev:{thread}"),
            signals: format!("{tag}:sig:{thread}"),
            index: format!("{tag}:runs"),
            blocked: format!("{tag}:blocked"),
            waiting: format!("{tag}:waiting"),
            unserved: format!("{tag}:unserved"),
            unconfirmed: format!("{tag}:unconfirmed"),
        }
    }

    /// The due sorted set of partition `p`.
    pub fn due(&self, p: u16) -> String {
        format!("{}:due", self.tag(p))
    }

    /// Partition `p`'s copy of the workflow, version and queue pauses (a hash).
    pub fn pauses(&self, p: u16) -> String {
        format!("{}:pauses", self.tag(p))
    }

    /// The namespace's catalog of workflow, version and queue pauses (a hash: field → record),
    /// from which each partition's copy is written.
    pub fn pause_catalog(&self) -> String {
        format!("{}:pauses", self.ns)
    }

    /// The run index sorted set of partition `p`.
    pub fn index(&self, p: u16) -> String {
        format!("{}:runs", self.tag(p))
    }

    /// Run hash key from a partition and thread (used when listing an index).
    pub fn run_in(&self, p: u16, thread: &str) -> String {
        format!("{}:run:{thread}", self.tag(p))
    }

    /// A run's event list from a partition and thread (used when paging an index).
    pub fn events_in(&self, p: u16, thread: &str) -> String {
        format!("{}:ev:{thread}", self.tag(p))
    }

    /// The dedup record of an effect key, spread over `{fxNN}` by the key's own hash.
    pub fn effect(&self, key: &EffectKey) -> String {
        let p = stable_hash(key.as_str()) % u64::from(self.partitions);
        format!("{}:{{fx{:02}}}:fx:{}", self.ns, p, key)
    }

    /// The index of runs with status `status` (blocked or waiting) of partition `p`.
    pub fn status_index(&self, p: u16, status: &str) -> String {
        format!("{}:{status}", self.tag(p))
    }

    /// A schedule's hash (its spec and firing state). Every schedule key shares the hash tag
    /// `{sched}`, so one script sees a schedule and the index of next firings.
    pub fn schedule(&self, id: &str) -> String {
        format!("{}:{{sched}}:s:{id}", self.ns)
    }

    /// Every schedule id (paused ones too), by creation time.
    pub fn schedule_all(&self) -> String {
        format!("{}:{{sched}}:all", self.ns)
    }

    /// Schedule ids by next firing time (ms); paused schedules are not in it.
    pub fn schedule_next(&self) -> String {
        format!("{}:{{sched}}:next", self.ns)
    }

    /// Schedule ids whose last move recorded runs not yet created (`pending`), by when.
    pub fn schedule_pending(&self) -> String {
        format!("{}:{{sched}}:pending", self.ns)
    }

    /// Schedule ids holding a buffered firing (overlap policy `buffer_one`), by its time.
    pub fn schedule_buffered(&self) -> String {
        format!("{}:{{sched}}:buffered", self.ns)
    }

    /// The runs holding a slot of flow-control key `key` (thread → slot expiry, ms). Every
    /// flow-control key shares the hash tag `{fc}`, so one script sees a key's slots, its
    /// waiting line and its rate bucket.
    pub fn flow_slots(&self, key: &str) -> String {
        format!("{}:{{fc}}:slots:{key}", self.ns)
    }

    /// The fencing token each slot of `key` was taken with (thread → fence): only the slice
    /// that took a slot may extend or give it back, so a slice that lost its run (a yield
    /// another worker picked up, or a pause past the lease) cannot free its successor's slot.
    pub fn flow_holders(&self, key: &str) -> String {
        format!("{}:{{fc}}:holders:{key}", self.ns)
    }

    /// The runs waiting for a slot of `key`, in order (score: priority band, then first wait).
    pub fn flow_wait(&self, key: &str) -> String {
        format!("{}:{{fc}}:wait:{key}", self.ns)
    }

    /// When each run waiting for a slot of `key` was last seen (ms).
    pub fn flow_seen(&self, key: &str) -> String {
        format!("{}:{{fc}}:seen:{key}", self.ns)
    }

    /// The start-rate token bucket of `key` (`tokens`, `at`).
    pub fn flow_rate(&self, key: &str) -> String {
        format!("{}:{{fc}}:rate:{key}", self.ns)
    }

    /// A flow-control key's turnover: when a slot was last given back and the moving mean of
    /// the gap between two (`at`, `gap`), the pace its line moves at.
    pub fn flow_turn(&self, key: &str) -> String {
        format!("{}:{{fc}}:turn:{key}", self.ns)
    }

    /// Live worker registrations (incarnation → expiry and the workflows it serves); the
    /// fleet's workflow catalog is computed from it.
    pub fn workers(&self) -> String {
        format!("{}:workers", self.ns)
    }

    /// JSON Schemas of the values workflows take from outside, by `workflow@version`,
    /// published by the workers that serve them (the API validates against them).
    pub fn schemas(&self) -> String {
        format!("{}:schemas", self.ns)
    }

    /// Live scheduler replicas (id → expiry), from which each replica derives the partitions
    /// its due scanner scans.
    pub fn schedulers(&self) -> String {
        format!("{}:schedulers", self.ns)
    }

    /// Namespace metadata fixed at first use (the partition count).
    pub fn meta(&self) -> String {
        format!("{}:meta", self.ns)
    }

    /// The demo workflows' effect log (a list of JSON records).
    pub fn demo_effects(&self) -> String {
        format!("{}:demo:effects", self.ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_keys_share_one_hash_tag() {
        let k = Keys::new(Namespace::new("sp").unwrap(), 64);
        let t = ThreadId::new("invoice-42").unwrap();
        let rk = k.run(&t);
        let p = k.partition(&t);
        let tag = format!("{{p{p:02}}}");
        for key in [
            &rk.run,
            &rk.due,
            &rk.events,
            &rk.signals,
            &rk.index,
            &rk.blocked,
            &rk.waiting,
        ] {
            assert!(key.starts_with(&format!("sp:{tag}:")), "{key}");
        }
        assert_eq!(rk.run, format!("sp:{tag}:run:invoice-42"));
        assert_eq!(k.due(p), rk.due);
        assert_eq!(k.status_index(p, "blocked"), rk.blocked);
    }

    #[test]
    fn effect_keys_are_spread() {
        let k = Keys::new(Namespace::new("sp").unwrap(), 64);
        let a = k.effect(&EffectKey::new("ledger:INV-1").unwrap());
        assert!(a.starts_with("sp:{fx") && a.ends_with(":fx:ledger:INV-1"));
    }
}
