//! Child runs (`ctx.child`): the parent's link to each child it starts, the child's word to
//! its parent when it ends, and a cancel that reaches down the tree.
//!
//! Parent and child live in different partitions (different Redis Cluster slots), so no one
//! script sees both. The child's outcome is the child's own record; the word it sends its
//! parent (a signal of kind `child`, deduplicated by the child's thread id) only wakes the
//! parent early. A parent that waits re-reads the child whenever its poll interval passes
//! (`StoreConfig::child_poll`), so a word lost to a crash delays it and loses nothing.

use super::{Rerun, ScriptStore, SignalOutcome};
use crate::{Lease, ParentCancel, ParentLink, StoreError};
use savepoint_core::ids::ThreadId;
use savepoint_core::outcome::{child_signal, ChildResult};

/// A cancel's reach beyond the run itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cascade {
    /// The parent, woken by the word that its child was cancelled: publish its task.
    pub parent_woke: Option<(ThreadId, Rerun)>,
    /// Descendants cancelled with it (children whose policy is `cancel`, and theirs).
    pub cancelled: Vec<ThreadId>,
    /// Parents woken by the cancel of a descendant (each needs its task published).
    pub woke: Vec<(ThreadId, Rerun)>,
    /// Runs at the head of a flow key's line that a cancelled run's slot (or place) freed:
    /// publish their tasks.
    pub flow_woke: Vec<ThreadId>,
}

impl ScriptStore {
    /// Records (idempotently) that the parent's call at `index` starts `child`, with an event.
    pub async fn child_link(
        &self,
        lease: &Lease,
        index: u32,
        child: &ThreadId,
        on_parent_cancel: ParentCancel,
        detail: &str,
    ) -> Result<(), StoreError> {
        let mut inv = self.scripts.child_link.prepare_invoke();
        inv.key(&lease.keys.run).key(&lease.keys.events);
        inv.arg(&lease.owner).arg(lease.fence).arg(index).arg(child.as_str());
        inv.arg(on_parent_cancel.as_str()).arg(self.cfg.event_cap);
        let event = self.seal_event(&lease.thread, "child_started", detail);
        inv.arg(event.1);
        let r = self.invoke(&inv).await?;
        if r.tag() == "ok" {
            Ok(())
        } else {
            Err(self.rejected(lease, &r))
        }
    }

    /// Tells `parent` that its child `child` ended. Deduplicated by the child's thread id, so a
    /// repeated word (after a crash) is accepted once. `Woke`: the parent was waiting for it
    /// and needs a task.
    pub async fn notify_parent(
        &self,
        child: &ThreadId,
        parent: &ParentLink,
        result: &ChildResult,
    ) -> Result<SignalOutcome, StoreError> {
        let id = format!("child:{child}");
        let name = child_signal(parent.index);
        self.signal(&parent.thread, "child", &name, &result.to_value(), Some(&id))
            .await
    }

    /// After `thread` was cancelled: tells its parent, and cancels the children it started
    /// with policy `cancel` (and theirs, depth first). Best effort beyond the run itself:
    /// a failure is logged, and a parent still learns of its child by its poll.
    pub async fn cascade_cancel(&self, thread: &ThreadId, reason: &str) -> Cascade {
        let mut out = Cascade::default();
        let mut stack = vec![(thread.clone(), true)];
        while let Some((t, top)) = stack.pop() {
            let h = match self.header(&t).await {
                Ok(Some(h)) => h,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(thread.id = %t, error = %e, "cancel: could not read the run to reach its parent and children");
                    continue;
                }
            };
            if let Some(f) = &h.flow {
                match self.flow_release(f, &t, None, true).await {
                    Ok(next) => out.flow_woke.extend(next.into_iter().filter(|n| *n != t)),
                    Err(e) => {
                        tracing::warn!(thread.id = %t, error = %e, "cancel: could not free its flow slot; it expires")
                    }
                }
            }
            if let Some(p) = &h.parent {
                let r = ChildResult::Cancelled(h.reason.clone().unwrap_or_else(|| reason.to_owned()));
                match self.notify_parent(&t, p, &r).await {
                    Ok(SignalOutcome::Woke(rerun)) if top => out.parent_woke = Some((p.thread.clone(), rerun)),
                    Ok(SignalOutcome::Woke(rerun)) => out.woke.push((p.thread.clone(), rerun)),
                    Ok(_) => {}
                    Err(e) => tracing::warn!(thread.id = %t, error = %e, "cancel: could not tell the parent; it polls"),
                }
            }
            for c in h.children.iter().filter(|c| c.on_parent_cancel == ParentCancel::Cancel) {
                let why = format!("parent {t} was cancelled: {reason}");
                match Box::pin(self.cancel_one(&c.thread, &why)).await {
                    Ok(Ok(_)) => {
                        out.cancelled.push(c.thread.clone());
                        stack.push((c.thread.clone(), false));
                    }
                    Ok(Err(_)) => {}
                    // Not created yet (the parent died between link and create): nothing runs.
                    Err(StoreError::Missing(_)) => {}
                    Err(e) => tracing::warn!(thread.id = %c.thread, error = %e, "cancel: could not cancel a child"),
                }
            }
        }
        out
    }
}
