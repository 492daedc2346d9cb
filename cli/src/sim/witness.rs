//! The checkpoint barrier's witness: a [`RunStore`] between every simulated worker and the
//! store that watches what each slice (a run's lease, by fence) sends, outside the engine.
//!
//! Invariant 13: no effect's begin record or intent, child link, suspension or end of a slice
//! ever goes out while one of the slice's pipelined commits is unanswered, or after one
//! failed (a lost reply included: the slice cannot know whether it landed), and a slice never
//! has two commits in flight (each is versioned against the one before).

use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use savepoint_core::ids::{EffectKey, ThreadId};
use savepoint_core::journal::Entry;
use savepoint_core::model::{CreateOptions, EffectClaim, Finish, Holder, Lease, ParentCancel, RunHeader};
use savepoint_core::outcome::{
    CreateOutcome, EffectDone, EffectRecord, EffectRelease, EffectUnused, Suspend, Suspended,
};
use savepoint_core::seam::{BoxFut, RunStore, StoreResult, StoreTimings};

use super::faults::Trace;

/// What the witness knows of one slice's commits.
#[derive(Default)]
struct Slice {
    /// Commits sent and not answered.
    in_flight: u32,
    /// A commit failed or its reply was lost: whether its entries landed is unknown.
    failed: bool,
}

/// The witness (see the module doc). Violations go to `found`.
pub(super) struct Witness {
    inner: Arc<dyn RunStore>,
    slices: Mutex<BTreeMap<(String, u64), Slice>>,
    found: Arc<Mutex<Vec<String>>>,
    trace: Arc<Trace>,
}

impl Witness {
    pub(super) fn wrap(
        inner: Arc<dyn RunStore>,
        found: Arc<Mutex<Vec<String>>>,
        trace: Arc<Trace>,
    ) -> Arc<dyn RunStore> {
        Arc::new(Self {
            inner,
            slices: Mutex::default(),
            found,
            trace,
        })
    }

    fn with<R>(&self, thread: &ThreadId, fence: u64, f: impl FnOnce(&mut Slice) -> R) -> R {
        let mut slices = self.slices.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(slices.entry((thread.to_string(), fence)).or_default())
    }

    fn violation(&self, s: String) {
        if let Ok(mut f) = self.found.lock() {
            f.push(s);
        }
    }

    /// A write that must see every earlier entry of the slice acknowledged.
    fn outside(&self, what: &str, thread: &ThreadId, fence: u64) {
        self.check(what, thread, fence, true);
    }

    /// [`Witness::outside`]; `after_failure`: a failed commit before it is a violation too.
    fn check(&self, what: &str, thread: &ThreadId, fence: u64, after_failure: bool) {
        let (in_flight, failed) = self.with(thread, fence, |s| (s.in_flight, s.failed && after_failure));
        if in_flight > 0 || failed {
            self.violation(format!(
                "run {thread} (fence {fence}): {what} went out with {in_flight} commit(s) unanswered{}",
                if failed { " after a commit failed" } else { "" }
            ));
        }
    }
}

/// A commit's answer: settles the witness's count when dropped (answered or abandoned).
struct Answer<'w> {
    w: &'w Witness,
    key: (ThreadId, u64),
    ok: bool,
}

impl Drop for Answer<'_> {
    fn drop(&mut self) {
        let ok = self.ok;
        self.w.with(&self.key.0, self.key.1, |s| {
            s.in_flight -= 1;
            s.failed |= !ok;
        });
    }
}

impl RunStore for Witness {
    fn timings(&self) -> StoreTimings {
        self.inner.timings()
    }

    fn commit<'a>(
        &'a self,
        lease: &'a mut Lease,
        first: u32,
        entries: &'a [Entry],
        event: (&'a str, &'a str),
        consume_signal: Option<&'a str>,
    ) -> BoxFut<'a, StoreResult<()>> {
        Box::pin(async move {
            let (thread, fence) = (lease.thread.clone(), lease.fence);
            let before = self.with(&thread, fence, |s| {
                s.in_flight += 1;
                s.in_flight - 1
            });
            if before > 0 {
                self.violation(format!(
                    "run {thread} (fence {fence}): a commit from entry {first} went out with another unanswered"
                ));
            }
            if entries.len() > 1 {
                self.trace.count("pipeline.batch");
            }
            // Dropped before its answer (its call abandoned), the commit may or may not have
            // landed: it counts as failed.
            let mut answer = Answer {
                w: self,
                key: (thread, fence),
                ok: false,
            };
            let r = self.inner.commit(lease, first, entries, event, consume_signal).await;
            answer.ok = r.is_ok();
            drop(answer);
            r
        })
    }

    fn suspend<'a>(
        &'a self,
        lease: &'a mut Lease,
        entries: Option<(u32, &'a [Entry])>,
        how: Suspend<'a>,
        event: (&'a str, &'a str),
    ) -> BoxFut<'a, StoreResult<Suspended>> {
        // A hand-back carrying nothing may follow a failed commit (that is why it hands back;
        // it is version-checked like any suspension), never a commit still unanswered.
        let hand_back = event.0 == "retry_later" && entries.is_none();
        self.check("a suspension", &lease.thread, lease.fence, !hand_back);
        if entries.is_some_and(|(_, e)| e.len() > 1) {
            self.trace.count("pipeline.carried");
        }
        self.inner.suspend(lease, entries, how, event)
    }

    fn finish<'a>(
        &'a self,
        lease: &'a mut Lease,
        entries: Option<(u32, &'a [Entry])>,
        how: Finish<'a>,
        event: (&'a str, &'a str),
    ) -> BoxFut<'a, StoreResult<()>> {
        self.outside("the slice's end", &lease.thread, lease.fence);
        if entries.is_some() {
            self.trace.count("pipeline.carried");
        }
        self.inner.finish(lease, entries, how, event)
    }

    fn note<'a>(&'a self, lease: &'a Lease, field: &'a str, value: &'a str) -> BoxFut<'a, StoreResult<()>> {
        self.inner.note(lease, field, value)
    }

    fn event<'a>(&'a self, lease: &'a Lease, typ: &'a str, detail: &'a str) -> BoxFut<'a, StoreResult<()>> {
        self.inner.event(lease, typ, detail)
    }

    fn retried<'a>(
        &'a self,
        lease: &'a Lease,
        index: u32,
        attempt: u32,
        detail: &'a str,
        backoff: Option<std::time::Duration>,
    ) -> BoxFut<'a, StoreResult<()>> {
        self.inner.retried(lease, index, attempt, detail, backoff)
    }

    fn effect_begin<'a>(
        &'a self,
        lease: &'a Lease,
        index: u32,
        key: &'a EffectKey,
        name: &'a str,
    ) -> BoxFut<'a, StoreResult<Option<String>>> {
        self.outside(&format!("effect {key}'s begin record"), &lease.thread, lease.fence);
        self.inner.effect_begin(lease, index, key, name)
    }

    fn effect_intent<'a>(
        &'a self,
        key: &'a EffectKey,
        thread: &'a ThreadId,
        index: u32,
        fence: u64,
        takeover: bool,
    ) -> BoxFut<'a, StoreResult<EffectClaim>> {
        self.outside(&format!("effect {key}'s intent"), thread, fence);
        self.inner.effect_intent(key, thread, index, fence, takeover)
    }

    fn effect_done<'a>(
        &'a self,
        key: &'a EffectKey,
        thread: &'a ThreadId,
        index: u32,
        fence: u64,
        result: &'a Value,
    ) -> BoxFut<'a, StoreResult<EffectDone>> {
        self.inner.effect_done(key, thread, index, fence, result)
    }

    fn effect_release<'a>(
        &'a self,
        key: &'a EffectKey,
        thread: &'a ThreadId,
        index: u32,
        fence: u64,
    ) -> BoxFut<'a, StoreResult<EffectRelease>> {
        self.inner.effect_release(key, thread, index, fence)
    }

    fn effect_reopen<'a>(
        &'a self,
        key: &'a EffectKey,
        thread: &'a ThreadId,
        index: u32,
        fence: u64,
    ) -> BoxFut<'a, StoreResult<bool>> {
        self.inner.effect_reopen(key, thread, index, fence)
    }

    fn effect_unused<'a>(
        &'a self,
        thread: &'a ThreadId,
        index: u32,
        fence: u64,
    ) -> BoxFut<'a, StoreResult<EffectUnused>> {
        self.inner.effect_unused(thread, index, fence)
    }

    fn settle_done<'a>(
        &'a self,
        key: &'a EffectKey,
        thread: &'a ThreadId,
        result: &'a Value,
        expect: Option<&'a Holder>,
    ) -> BoxFut<'a, StoreResult<EffectDone>> {
        self.inner.settle_done(key, thread, result, expect)
    }

    fn effect_orphan<'a>(
        &'a self,
        key: &'a EffectKey,
        owner: &'a ThreadId,
        index: u32,
        owner_status: &'a str,
    ) -> BoxFut<'a, StoreResult<bool>> {
        self.inner.effect_orphan(key, owner, index, owner_status)
    }

    fn effect_state<'a>(&'a self, key: &'a EffectKey) -> BoxFut<'a, StoreResult<Option<EffectRecord>>> {
        self.inner.effect_state(key)
    }

    fn effect_keep<'a>(&'a self, key: &'a EffectKey) -> BoxFut<'a, StoreResult<()>> {
        self.inner.effect_keep(key)
    }

    fn effect_expire<'a>(
        &'a self,
        key: &'a EffectKey,
        thread: &'a ThreadId,
        index: u32,
    ) -> BoxFut<'a, StoreResult<bool>> {
        self.inner.effect_expire(key, thread, index)
    }

    fn header<'a>(&'a self, thread: &'a ThreadId) -> BoxFut<'a, StoreResult<Option<RunHeader>>> {
        self.inner.header(thread)
    }

    fn child_link<'a>(
        &'a self,
        lease: &'a Lease,
        index: u32,
        child: &'a ThreadId,
        on_parent_cancel: ParentCancel,
        detail: &'a str,
    ) -> BoxFut<'a, StoreResult<()>> {
        self.outside(&format!("child {child}'s link"), &lease.thread, lease.fence);
        self.inner.child_link(lease, index, child, on_parent_cancel, detail)
    }

    fn create_with<'a>(
        &'a self,
        thread: &'a ThreadId,
        workflow: &'a str,
        workflow_version: u32,
        input: &'a str,
        trace: &'a str,
        opts: &'a CreateOptions,
    ) -> BoxFut<'a, StoreResult<CreateOutcome>> {
        self.inner
            .create_with(thread, workflow, workflow_version, input, trace, opts)
    }
}
