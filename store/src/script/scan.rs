//! The due scanner's side of the store: handing out overdue runs exactly once per period,
//! and marking runs whose task the broker confirmed so the scanner leaves them to the queue.

use std::time::Duration;

use super::{ms, ScriptStore};
use crate::StoreError;
use savepoint_core::ids::ThreadId;

/// The longest a run with a confirmed task waits before it is rung again.
const QUEUED_REDELIVER_CAP: Duration = Duration::from_secs(3600);

/// A run handed out by [`ScriptStore::scan_due`].
#[derive(Debug, Clone, PartialEq)]
pub struct Rung {
    /// The run.
    pub thread: ThreadId,
    /// Its trace context (W3C traceparent), if any.
    pub trace: Option<String>,
    /// The due time recorded in its hash (ms), for lateness metrics.
    pub due: Option<u64>,
    /// Its ring version, for [`ScriptStore::mark_queued`] once the task is confirmed.
    pub rv: u64,
    /// The task queue its task goes to (`None`: the default queue).
    pub queue: Option<String>,
    /// The worker whose sticky queue (of that task queue) the task goes to first: the one
    /// that suspended the run keeping its body or journal.
    pub holder: Option<String>,
}

impl ScriptStore {
    /// Hands out up to `limit` overdue runs of partition `p`; each is not handed out again for
    /// `period` (so concurrent scanners never publish one run twice). Returns (server time,
    /// runs). Two round trips: the candidates, then one script that re-checks and moves them.
    pub async fn scan_due(&self, p: u16, limit: u32, period: Duration) -> Result<(u64, Vec<Rung>), StoreError> {
        let due_key = self.keys.due(p);
        let unconfirmed = self.keys.status_index(p, "unconfirmed");
        let mut inv = self.scripts.due_candidates.prepare_invoke();
        inv.key(&due_key).key(&unconfirmed).arg(limit);
        let r = self.invoke(&inv).await?;
        let candidates: Vec<ThreadId> = (1..r.0.len()).filter_map(|i| ThreadId::new(r.text(i)).ok()).collect();
        if candidates.is_empty() {
            return Ok((r.num(0), Vec::new()));
        }
        let mut inv = self.scripts.ring.prepare_invoke();
        inv.key(&due_key).key(&unconfirmed);
        for t in &candidates {
            inv.key(self.keys.run(t).run);
        }
        inv.arg(ms(period));
        for t in &candidates {
            inv.arg(t.as_str());
        }
        let r = self.invoke(&inv).await?;
        let now = r.num(0);
        let rung = (1..r.0.len())
            .step_by(6)
            .filter_map(|i| {
                Some(Rung {
                    thread: ThreadId::new(r.text(i)).ok()?,
                    trace: Some(r.text(i + 1)).filter(|t| !t.is_empty()),
                    due: r.text(i + 2).parse().ok(),
                    rv: r.num(i + 3),
                    queue: Some(r.text(i + 4)).filter(|q| !q.is_empty()),
                    holder: Some(r.text(i + 5)).filter(|h| !h.is_empty()),
                })
            })
            .collect();
        Ok((now, rung))
    }

    /// The earliest due time of any run (server ms), if some run has one: when the next
    /// timer, lease expiry or safety net falls due (the test kit advances virtual time to it).
    pub async fn next_due(&self) -> Result<Option<u64>, StoreError> {
        let mut next: Option<u64> = None;
        for p in 0..self.keys.partitions() {
            let first: Vec<(String, f64)> = self
                .engine
                .query(
                    redis::cmd("ZRANGE")
                        .arg(self.keys.due(p))
                        .arg(0)
                        .arg(0)
                        .arg("WITHSCORES"),
                )
                .await?;
            if let Some((_, score)) = first.first() {
                let at = score.max(0.0) as u64;
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
        Ok(next)
    }

    /// The broker confirmed the start task of each of these runs (just created): drop their
    /// unconfirmed-start entries, one pipelined ZREM each. (`create` already gave them the
    /// queued safety net.)
    pub async fn confirm_started(&self, threads: &[ThreadId]) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        for t in threads {
            pipe.cmd("ZREM").arg(self.keys.run(t).unconfirmed).arg(t.as_str());
        }
        let _: Vec<i64> = self.engine.pipeline(&pipe).await?;
        Ok(())
    }

    /// The broker confirmed a task for each of these runs (thread, ring version seen when the
    /// task was published): push their safety-net due times out (`queued_redeliver`,
    /// doubling per unanswered ring, up to an hour), so a backed-up queue or an idle fleet does
    /// not make the scanner publish a second message for the same work. Runs claimed or given
    /// back since are left alone. Returns how many were marked.
    pub async fn mark_queued(&self, runs: &[(ThreadId, u64)]) -> Result<u64, StoreError> {
        let mut by_partition: std::collections::BTreeMap<u16, Vec<&(ThreadId, u64)>> = Default::default();
        for r in runs {
            by_partition.entry(self.keys.partition(&r.0)).or_default().push(r);
        }
        // One script per partition (each touches one slot), all in flight at once: the
        // multiplexed connection pipelines them.
        let calls = by_partition.into_iter().map(|(p, group)| async move {
            let mut inv = self.scripts.mark_queued.prepare_invoke();
            inv.key(self.keys.due(p));
            for (t, _) in &group {
                inv.key(self.keys.run(t).run);
            }
            inv.arg(ms(self.cfg.queued_redeliver)).arg(ms(QUEUED_REDELIVER_CAP));
            for (t, rv) in &group {
                inv.arg(t.as_str()).arg(*rv);
            }
            self.engine.eval_as::<u64>(&inv).await
        });
        let mut marked = 0;
        for r in futures::future::join_all(calls).await {
            marked += r?;
        }
        Ok(marked)
    }
}
