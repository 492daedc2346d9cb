//! Pipelined checkpoints (ARCHITECTURE §4a). A step's entry joins the local journal at once
//! and is sent without waiting: the workflow goes on to its next call while the commit is in
//! flight, and the entries that pile up meanwhile travel together in the next commit (one
//! script, in journal order, fenced and versioned as one write). One commit is in flight at a
//! time, so every other write of the slice sees the version it left.
//!
//! **The barrier.** Before anything the run does outside itself (an effect's intent, a child's
//! start) [`Core::barrier`] waits until every entry so far is acknowledged; a write that ends
//! the slice (a sleep, a wait, a yield, a route, a block, the end) carries the unsent entries
//! itself ([`Core::suspend_run`], [`Core::finish_run`]), in the same atomic script. So a crash
//! loses only steps whose results nothing outside the run has seen: they run again, as the
//! at-least-once step contract allows, and an effect key is never derived from a result a
//! crash could change. A refused or failed commit stops the slice like a failed synchronous
//! one: nothing after it counts as done.

use std::sync::Arc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::commit::outcome_label;
use super::ctx::Core;
use crate::journal::{Entry, EntryKind};
use savepoint_core::metrics::{inc, metrics};
use savepoint_core::model::{Checkpoints, Finish};
use savepoint_core::outcome::{Suspend, Suspended};
use savepoint_core::StoreError;

/// Most entries one pipelined commit carries (a script's arguments stay bounded).
const MAX_BATCH: usize = 256;

/// A commit in flight: the task sending it.
pub(super) struct Flight {
    task: JoinHandle<Landed>,
}

/// What a commit in flight came back with.
struct Landed {
    /// The run's new version, or why the write was refused or failed.
    result: Result<u64, StoreError>,
    /// When it was sent (a confirmed write extends the local lease deadline from there).
    sent: Instant,
    /// The entries' metric labels: kind and outcome.
    labels: Vec<(&'static str, &'static str)>,
}

/// The pipeline's state in a [`Core`]: the commit in flight and how many of the journal's
/// last entries are not acknowledged otherwise (not sent yet, or carried by a write that has
/// not answered).
///
/// **Dropped calls.** A call waiting on the pipeline may be dropped mid-wait (a `select!`, a
/// timeout, a failed `try_join!`). Nothing is taken out of the pipeline before the write that
/// settles it answers, so the next call's barrier still waits for (or re-sends) it: a commit in
/// flight is awaited in place, and unsent entries are counted until their write succeeds. A
/// re-sent batch whose first sending did land is refused (index, version), which stops the
/// slice, as any failed commit does.
#[derive(Default)]
pub(super) struct Pipeline {
    pub(super) flight: Option<Flight>,
    pub(super) unsent: usize,
    /// A commit of the slice failed or was refused: nothing after it is written (the slice
    /// stops; the runtime ends no run on it).
    pub(super) failed: Option<StoreError>,
    /// A write appending entries was sent and has not answered; still set at the next
    /// [`Core::landed`], its call was dropped mid-wait: whether it landed is unknown, so the
    /// slice stops there (a call of another kind must not go out over it: a child's link, say,
    /// checks no version).
    pub(super) unanswered: bool,
}

/// Whether an entry may be pipelined: a plain step's first-attempt result, recorded with no
/// event, consuming nothing and settling no key (anything else is written with the entries
/// before it, synchronously).
pub(super) fn may_pipeline(entry: &Entry, event: &str, consume_signal: Option<&str>) -> bool {
    entry.kind == EntryKind::Step
        && event.is_empty()
        && consume_signal.is_none()
        && entry.attempts <= 1
        && entry.key.is_none()
}

impl Core {
    /// True when this slice pipelines step checkpoints.
    pub(super) fn pipelines(&self) -> bool {
        self.p.limits.checkpoints == Checkpoints::Pipelined && !self.p.replay_only
    }

    /// Appends a pipelined entry (already counted against the journal's byte cap) and sends
    /// it, unless a commit is in flight: then it waits for the next one.
    pub(super) async fn queue_entry(&mut self, entry: Entry) {
        self.p.journal.push(entry);
        self.cursor += 1;
        self.pipeline.unsent += 1;
        if self.pipeline.flight.as_ref().is_some_and(|f| f.task.is_finished()) {
            self.land().await;
        }
        self.launch();
    }

    /// Sends the unsent entries (up to [`MAX_BATCH`]) as one commit, if none is in flight.
    fn launch(&mut self) {
        let p = &self.pipeline;
        if p.flight.is_some() || p.unsent == 0 || p.failed.is_some() || p.unanswered {
            return;
        }
        let n = self.pipeline.unsent.min(MAX_BATCH);
        let from = self.p.journal.len() - self.pipeline.unsent;
        let entries: Vec<Entry> = self.p.journal[from..from + n].to_vec();
        self.pipeline.unsent -= n;
        let labels = entries
            .iter()
            .map(|e| (e.kind.as_str(), outcome_label(&e.outcome, "")))
            .collect();
        let (store, mut lease) = (Arc::clone(&self.p.store), self.p.lease.clone());
        let first = from as u32;
        let task = tokio::spawn(async move {
            let sent = Instant::now();
            let result = store
                .commit(&mut lease, first, &entries, ("", ""), None)
                .await
                .map(|()| lease.version);
            Landed { result, sent, labels }
        });
        self.pipeline.flight = Some(Flight { task });
    }

    /// Waits for the commit in flight, if any, and takes its answer: the run's new version,
    /// or the slice stops as a failed commit would stop it.
    pub(super) async fn land(&mut self) {
        if let Err(e) = self.landed().await {
            self.store_failed(e).await
        }
    }

    /// [`Core::land`] that hands back the failure instead of stopping the slice (for the
    /// runtime, once the workflow body returned).
    pub(super) async fn landed(&mut self) -> Result<(), StoreError> {
        if self.pipeline.unanswered {
            self.pipeline.failed = Some(StoreError::Backend {
                message: "a write of this slice was abandoned before the store answered: whether it landed is unknown"
                    .into(),
                transient: true,
            });
            self.pipeline.unanswered = false;
        }
        if let Some(e) = &self.pipeline.failed {
            return Err(e.clone());
        }
        let Some(flight) = self.pipeline.flight.as_mut() else {
            return Ok(());
        };
        // Awaited in place: dropped mid-wait, the commit stays tracked (see [`Pipeline`]).
        let joined = (&mut flight.task).await;
        self.pipeline.flight = None;
        let answer = joined
            .map_err(|e| StoreError::Backend {
                message: format!("a pipelined commit did not finish: {e}"),
                transient: true,
            })
            .and_then(|landed| match landed.result {
                Ok(version) => Ok((version, landed.sent, landed.labels)),
                Err(e) => Err(e),
            });
        let (version, sent, labels) = match answer {
            Ok(v) => v,
            Err(e) => {
                self.pipeline.failed = Some(e.clone());
                return Err(e);
            }
        };
        self.p.lease.version = version;
        self.p.clock.confirmed(sent);
        let m = metrics();
        m.commit_seconds.observe(sent.elapsed().as_secs_f64());
        for (kind, outcome) in labels {
            inc(
                &m.steps,
                &[("workflow", &self.p.workflow), ("kind", kind), ("outcome", outcome)],
            );
        }
        Ok(())
    }

    /// The durability barrier: returns once every entry journaled so far is acknowledged by
    /// the store (and its replicas, where `SAVEPOINT_REDIS_WAIT_*` covers commits).
    pub(super) async fn barrier(&mut self) {
        loop {
            self.land().await;
            if self.pipeline.unsent == 0 {
                return;
            }
            self.launch();
        }
    }

    /// Waits for the commit in flight and copies the entries not sent yet, for a write that
    /// carries them itself: (index of the first, the entries). They stay counted as unsent
    /// until [`Core::carried`] says that write answered.
    pub(super) async fn unsent_tail(&mut self) -> (u32, Vec<Entry>) {
        self.land().await;
        self.unsent_entries()
    }

    /// Copies the entries not sent yet (none in flight): (index of the first, the entries).
    pub(super) fn unsent_entries(&self) -> (u32, Vec<Entry>) {
        let from = self.p.journal.len() - self.pipeline.unsent;
        (from as u32, self.p.journal[from..].to_vec())
    }

    /// Marks a write appending entries as sent: [`Core::carried`] clears the mark when it
    /// answers (see [`Pipeline::unanswered`]).
    pub(super) fn sending(&mut self) {
        self.pipeline.unanswered = true;
    }

    /// Records how the write carrying the unsent entries answered: on success they are
    /// written; on failure nothing after them may be (a refusal that wrote nothing and that
    /// the caller recovers from, such as [`StoreError::UnusedIntent`], leaves them unsent).
    pub(super) fn carried<T>(&mut self, r: &Result<T, StoreError>) {
        self.pipeline.unanswered = false;
        match r {
            Ok(_) => {
                let from = self.p.journal.len() - std::mem::take(&mut self.pipeline.unsent);
                count_written(&self.p.workflow, &self.p.journal[from..]);
            }
            Err(StoreError::UnusedIntent { .. }) => {}
            Err(e) => self.pipeline.failed = Some(e.clone()),
        }
    }

    /// Ends the slice without ending the run, writing the unsent entries (and `last`, the
    /// entry the suspension itself records, if any) in the same script.
    pub(super) async fn suspend_run(
        &mut self,
        last: Option<Entry>,
        how: Suspend<'_>,
        event: (&str, &str),
    ) -> Result<Suspended, StoreError> {
        let (first, mut entries) = self.unsent_tail().await;
        entries.extend(last);
        let tail = (!entries.is_empty()).then_some((first, &entries[..]));
        self.sending();
        let r = self.p.store.suspend(&mut self.p.lease, tail, how, event).await;
        self.carried(&r);
        r
    }

    /// Ends the run or blocks it, writing the unsent entries first in the same script.
    pub(super) async fn finish_run(&mut self, how: Finish<'_>, event: (&str, &str)) -> Result<(), StoreError> {
        let (first, entries) = self.unsent_tail().await;
        let tail = (!entries.is_empty()).then_some((first, &entries[..]));
        self.sending();
        let r = self.p.store.finish(&mut self.p.lease, tail, how, event).await;
        self.carried(&r);
        r
    }
}

/// Counts pipelined entries once written (the `steps` metric), by kind and outcome.
pub fn count_written(workflow: &str, entries: &[Entry]) {
    let m = metrics();
    for e in entries {
        let outcome = outcome_label(&e.outcome, "");
        inc(
            &m.steps,
            &[("workflow", workflow), ("kind", e.kind.as_str()), ("outcome", outcome)],
        );
    }
}
