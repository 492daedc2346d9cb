//! Tracking runs to their end with pipelined Redis reads (light enough to run beside a
//! benchmark), then measuring them.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use savepoint_core::ids::ThreadId;
use savepoint_store::{RunStatus, ScriptStore};

use super::stats::{Percentiles, Report};

#[derive(Default)]
struct Inner {
    pending: HashMap<ThreadId, OwnedSemaphorePermit>,
    all: Vec<ThreadId>,
}

/// Runs submitted and not yet ended; ended runs release their in-flight permit.
#[derive(Clone)]
pub(crate) struct Tracker {
    inner: Arc<Mutex<Inner>>,
    changed: Arc<Notify>,
}

fn ended(status: &str) -> bool {
    RunStatus::parse(status).is_some_and(|s| s.is_final() || s == RunStatus::Blocked)
}

impl Tracker {
    pub(crate) fn start(store: ScriptStore, stop: CancellationToken) -> Self {
        let t = Self {
            inner: Arc::default(),
            changed: Arc::new(Notify::new()),
        };
        let me = t.clone();
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                let batch: Vec<ThreadId> = me.lock().pending.keys().take(2000).cloned().collect();
                if !batch.is_empty() {
                    let mut pipe = redis::pipe();
                    for th in &batch {
                        pipe.cmd("HGET").arg(&store.keys().run(th).run).arg("status");
                    }
                    if let Ok(statuses) = store.pipeline::<Vec<Option<String>>>(&pipe).await {
                        let mut g = me.lock();
                        for (th, st) in batch.iter().zip(statuses) {
                            if st.as_deref().is_none_or(ended) {
                                g.pending.remove(th);
                            }
                        }
                        drop(g);
                        me.changed.notify_waiters();
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        t
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn add(&self, thread: ThreadId, permit: OwnedSemaphorePermit) {
        let mut g = self.lock();
        g.all.push(thread.clone());
        g.pending.insert(thread, permit);
    }

    /// Waits until every added run ended; false on timeout.
    pub(crate) async fn wait_all(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.lock().pending.is_empty() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            let _ = tokio::time::timeout(Duration::from_millis(100), self.changed.notified()).await;
        }
    }

    pub(crate) fn threads(&self) -> Vec<ThreadId> {
        self.lock().all.clone()
    }
}

/// Reads every run's header (and a sample's journal, events and memory) and builds the report.
pub(crate) async fn measure(store: &ScriptStore, threads: &[ThreadId], sample: usize) -> anyhow::Result<Report> {
    let mut r = Report {
        runs: threads.len(),
        ..Report::default()
    };
    let (mut first, mut last) = (u64::MAX, 0u64);
    let mut latencies = Vec::new();
    for th in threads {
        let Some(h) = store.header(th).await? else {
            *r.by_status.entry("missing".into()).or_default() += 1;
            r.lost += 1;
            continue;
        };
        *r.by_status.entry(h.status.as_str().into()).or_default() += 1;
        if !(h.status.is_final() || h.status == RunStatus::Blocked) {
            r.lost += 1;
            continue;
        }
        r.steps += u64::from(h.steps);
        first = first.min(h.created_at);
        let end = h.finished_at.unwrap_or(h.updated_at);
        last = last.max(end);
        latencies.push(end.saturating_sub(h.created_at) as f64);
    }
    r.wall_s = if last > first {
        (last - first) as f64 / 1000.0
    } else {
        0.0
    };
    if r.wall_s > 0.0 {
        r.steps_per_s = r.steps as f64 / r.wall_s;
        r.runs_per_s = (r.runs - r.lost) as f64 / r.wall_s;
    }
    r.run_latency_ms = Percentiles::of(latencies);
    let (mut step_gaps, mut stalls, mut bytes) = (Vec::new(), Vec::new(), Vec::new());
    for th in threads.iter().take(sample) {
        if let Some((_, journal)) = store.get(th).await? {
            step_gaps.extend(journal.windows(2).map(|w| w[1].at.saturating_sub(w[0].at) as f64));
        }
        bytes.push(store.run_memory_bytes(th).await? as f64);
    }
    // A takeover ends a stall that began at the run's last progress before it: the latest
    // event or journal entry (plain step commits record no event).
    for th in threads {
        let events = store.events(th, 1000).await?;
        if !events.iter().any(|e| e.typ == "takeover") {
            continue;
        }
        let journal = store.get(th).await?.map(|(_, j)| j).unwrap_or_default();
        for (i, e) in events.iter().enumerate().filter(|(_, e)| e.typ == "takeover") {
            let last_event = events[..i].iter().map(|p| p.at).max().unwrap_or(0);
            let last_entry = journal.iter().map(|j| j.at).filter(|at| *at <= e.at).max().unwrap_or(0);
            stalls.push(e.at.saturating_sub(last_event.max(last_entry)) as f64);
        }
    }
    r.step_latency_ms = Percentiles::of(step_gaps);
    r.recovery_ms = Percentiles::of(stalls);
    r.redis_bytes_per_run = if bytes.is_empty() {
        0.0
    } else {
        bytes.iter().sum::<f64>() / bytes.len() as f64
    };
    let mut calls: BTreeMap<String, u32> = BTreeMap::new();
    let raw: Vec<String> = store
        .query(redis::cmd("LRANGE").arg(store.keys().demo_effects()).arg(0).arg(-1))
        .await?;
    let ours: std::collections::HashSet<&str> = threads.iter().map(|t| t.as_str()).collect();
    for rec in raw
        .iter()
        .filter_map(|s| serde_json::from_str::<serde_json::Value>(s).ok())
    {
        if ours.contains(rec["thread_id"].as_str().unwrap_or("")) {
            *calls.entry(rec["key"].as_str().unwrap_or("").to_owned()).or_default() += 1;
        }
    }
    r.effect_keys = calls.len();
    r.repeated_effect_calls = calls.into_iter().filter(|(_, n)| *n > 1).collect();
    Ok(r)
}
