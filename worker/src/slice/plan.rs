//! What a slice does, decided without I/O: whether a claimed run may run its workflow body
//! (or how the slice ends before it), and what the runtime does once the body ended. The slice
//! runner gathers the facts, calls these, and carries the answer out in one place each, in the
//! style of `savepoint_core::decide`.

use serde_json::Value;

use savepoint::workflow::decide::{timeout_reason, SliceEnd};
use savepoint::workflow::engine::SliceExit;
use savepoint_store::{Acquired, BlockKind, StoreError};

/// How a slice ends before its workflow body runs.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Early {
    /// The journal cannot be read: block the run with this reason.
    Unreadable(String),
    /// Its parent was cancelled and the cancel did not reach it: cancel it with this reason.
    Orphaned(String),
    /// Reading its parent failed (this error): release the run for a retry.
    ParentUnread(StoreError),
    /// Its deadline passed before the slice: fail it with this reason.
    PastDeadline(String),
    /// This worker does not have its workflow: release the run for a retry.
    Unregistered,
    /// It is still backing off on an effect key another run holds (suspended again already).
    BackedOff,
    /// A later slice of the run (this fence) holds its flow slot: this slice lost the run.
    SlotTaken(u64),
    /// No flow slot or start token is free: the run waits in line.
    InLine(Acquired),
    /// Taking a flow slot failed (this error): release the run for a retry.
    FlowUnavailable(StoreError),
}

/// What the claim (and the read of a child's parent) say about a slice, in the order they
/// are checked.
#[derive(Debug, Clone)]
pub(super) struct ClaimFacts {
    /// Why the run cannot be read, if it cannot.
    pub unreadable: Option<String>,
    /// Why a child run must not run (its parent was cancelled), or the error reading the
    /// parent gave.
    pub orphaned: Result<Option<String>, StoreError>,
    /// The run's deadline (server ms), if it has passed.
    pub past_deadline: Option<u64>,
}

/// Whether a claimed run may run `workflow` (the registry's answer for its name), in order
/// of precedence: an unreadable journal blocks, a cancelled parent cancels, a passed
/// deadline fails, and a workflow this worker does not have gives the run back.
pub(super) fn admit<W>(facts: ClaimFacts, workflow: Option<W>) -> Result<W, Early> {
    if let Some(reason) = facts.unreadable {
        return Err(Early::Unreadable(reason));
    }
    match facts.orphaned {
        Ok(None) => {}
        Ok(Some(reason)) => return Err(Early::Orphaned(reason)),
        Err(e) => return Err(Early::ParentUnread(e)),
    }
    if let Some(deadline) = facts.past_deadline {
        return Err(Early::PastDeadline(timeout_reason(deadline)));
    }
    workflow.ok_or(Early::Unregistered)
}

/// What taking the run's flow slot answered means: run on, or end the slice.
pub(super) fn flow_slot(reply: Result<Acquired, StoreError>) -> Result<(), Early> {
    match reply {
        Ok(Acquired::Slot) => Ok(()),
        Ok(Acquired::Stale(holder)) => Err(Early::SlotTaken(holder)),
        Ok(wait) => Err(Early::InLine(wait)),
        Err(e) => Err(Early::FlowUnavailable(e)),
    }
}

/// What the runtime does at the end of a slice whose body ran.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum EndAction {
    /// Block the run (reason, kind of block).
    Block(String, BlockKind),
    /// Record completion with this output, then tell the parent.
    Complete(Value),
    /// Record failure with this error, then tell the parent.
    Fail(String),
    /// The run yielded: publish a continuation task for the call at `step`, on `queue`
    /// (`None`: the home queue), then mark it queued with ring version `rv`.
    Continue {
        /// The task queue.
        queue: Option<String>,
        /// The journal index the continuation starts at.
        step: u32,
        /// The run's ring version.
        rv: u64,
    },
    /// The run suspended but is runnable again: publish a wake-up task (ring version `rv`).
    Wake(u64),
    /// The context failed the run: tell the parent.
    TellFailed(String),
    /// Another worker or an operator owns the run now: log it.
    LeaseLost(String),
    /// A transient error stopped the slice: release the run for a retry.
    Retry(String),
    /// The local lease deadline passed: hand the run back if Redis lets us.
    HandBack(String),
    /// Nothing left to do: the slice ended so (the metric's `end`).
    Ended(&'static str),
}

/// What to do after a body that ended as `end` (see [`savepoint::workflow::decide::slice_end`]);
/// `exit` is why the context stopped it, if it did, `at` the journal position it reached, and
/// `run_queue` the task queue the run is routed to.
pub(super) fn end_action(end: SliceEnd, exit: Option<SliceExit>, at: u32, run_queue: Option<&str>) -> EndAction {
    match end {
        SliceEnd::Block(reason, kind) => EndAction::Block(reason, kind),
        SliceEnd::Complete(output) => EndAction::Complete(output),
        SliceEnd::Fail(msg) => EndAction::Fail(msg),
        SliceEnd::FollowExit => follow_exit(exit, at, run_queue),
    }
}

/// The metric class (`reason` of the blocks counter) a block of `kind` the slice writes
/// counts under.
pub(super) fn block_class(kind: BlockKind) -> &'static str {
    match kind {
        BlockKind::Panic => "panic",
        BlockKind::NonDeterminism => "non_determinism",
        BlockKind::Undecodable => "bad_value",
        BlockKind::Migration => "migration",
        BlockKind::InDoubt => "effect_in_doubt",
        BlockKind::Poison => "poison",
        BlockKind::Other => "other",
    }
}

/// What to do after the context stopped the slice with `exit`.
fn follow_exit(exit: Option<SliceExit>, at: u32, run_queue: Option<&str>) -> EndAction {
    match exit {
        Some(SliceExit::Yielded { rv, queue }) => EndAction::Continue {
            queue: queue.or_else(|| run_queue.map(str::to_owned)),
            step: at,
            rv,
        },
        Some(SliceExit::Suspended { woke: true, rv }) => EndAction::Wake(rv),
        Some(SliceExit::Suspended { woke: false, .. }) => EndAction::Ended("suspended"),
        Some(SliceExit::Blocked(_)) => EndAction::Ended("blocked"),
        Some(SliceExit::Failed(reason)) => EndAction::TellFailed(reason),
        Some(SliceExit::LeaseLost(reason)) => EndAction::LeaseLost(reason),
        Some(SliceExit::Transient(reason)) => EndAction::Retry(reason),
        Some(SliceExit::DeadlinePassed(reason)) => EndAction::HandBack(reason),
        Some(SliceExit::WouldRunLive(_)) | None => EndAction::Ended("transient"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn clear() -> ClaimFacts {
        ClaimFacts {
            unreadable: None,
            orphaned: Ok(None),
            past_deadline: None,
        }
    }

    #[test]
    fn admit_runs_a_readable_registered_run_and_orders_the_early_ends() {
        assert_eq!(admit(clear(), Some("wf")), Ok("wf"));
        assert_eq!(admit::<()>(clear(), None), Err(Early::Unregistered));
        let all = ClaimFacts {
            unreadable: Some("journal cannot be read: x".into()),
            orphaned: Ok(Some("parent t0 was cancelled: stop".into())),
            past_deadline: Some(100),
        };
        assert_eq!(
            admit::<()>(all.clone(), None),
            Err(Early::Unreadable("journal cannot be read: x".into()))
        );
        let f = ClaimFacts {
            unreadable: None,
            ..all.clone()
        };
        assert_eq!(
            admit(f, Some(())),
            Err(Early::Orphaned("parent t0 was cancelled: stop".into()))
        );
        let f = ClaimFacts {
            unreadable: None,
            orphaned: Err(StoreError::Unavailable("redis down".into())),
            ..all.clone()
        };
        assert_eq!(
            admit(f, Some(())),
            Err(Early::ParentUnread(StoreError::Unavailable("redis down".into())))
        );
        let f = ClaimFacts {
            past_deadline: Some(100),
            ..clear()
        };
        assert_eq!(admit(f, Some(())), Err(Early::PastDeadline(timeout_reason(100))));
    }

    #[test]
    fn flow_slot_runs_on_a_slot_and_ends_the_slice_otherwise() {
        assert_eq!(flow_slot(Ok(Acquired::Slot)), Ok(()));
        assert_eq!(flow_slot(Ok(Acquired::Stale(9))), Err(Early::SlotTaken(9)));
        assert_eq!(flow_slot(Ok(Acquired::Full(3))), Err(Early::InLine(Acquired::Full(3))));
        let rate = Acquired::Rate(Duration::from_millis(50));
        assert_eq!(flow_slot(Ok(rate.clone())), Err(Early::InLine(rate)));
        assert_eq!(
            flow_slot(Err(StoreError::Unavailable("timeout".into()))),
            Err(Early::FlowUnavailable(StoreError::Unavailable("timeout".into())))
        );
    }

    #[test]
    fn end_action_carries_the_slice_end_over() {
        let out = json!({"ok": true});
        assert_eq!(
            end_action(SliceEnd::Complete(out.clone()), None, 2, None),
            EndAction::Complete(out)
        );
        assert_eq!(
            end_action(SliceEnd::Fail("bad".into()), None, 2, None),
            EndAction::Fail("bad".into())
        );
        assert_eq!(
            end_action(SliceEnd::Block("panicked".into(), BlockKind::Panic), None, 2, None),
            EndAction::Block("panicked".into(), BlockKind::Panic)
        );
    }

    #[test]
    fn end_action_follows_each_exit() {
        let follow = |exit| end_action(SliceEnd::FollowExit, exit, 4, Some("home"));
        let yielded = |queue: Option<&str>| SliceExit::Yielded {
            rv: 7,
            queue: queue.map(str::to_owned),
        };
        // A continuation goes to the queue the next call is routed to, else the run's.
        assert_eq!(
            follow(Some(yielded(Some("gpu")))),
            EndAction::Continue {
                queue: Some("gpu".into()),
                step: 4,
                rv: 7
            }
        );
        assert_eq!(
            follow(Some(yielded(None))),
            EndAction::Continue {
                queue: Some("home".into()),
                step: 4,
                rv: 7
            }
        );
        assert_eq!(
            end_action(SliceEnd::FollowExit, Some(yielded(None)), 4, None),
            EndAction::Continue {
                queue: None,
                step: 4,
                rv: 7
            }
        );
        assert_eq!(
            follow(Some(SliceExit::Suspended { woke: true, rv: 3 })),
            EndAction::Wake(3)
        );
        assert_eq!(
            follow(Some(SliceExit::Suspended { woke: false, rv: 3 })),
            EndAction::Ended("suspended")
        );
        assert_eq!(
            follow(Some(SliceExit::Blocked("x".into()))),
            EndAction::Ended("blocked")
        );
        assert_eq!(
            follow(Some(SliceExit::Failed("full".into()))),
            EndAction::TellFailed("full".into())
        );
        assert_eq!(
            follow(Some(SliceExit::LeaseLost("gone".into()))),
            EndAction::LeaseLost("gone".into())
        );
        assert_eq!(
            follow(Some(SliceExit::Transient("redis".into()))),
            EndAction::Retry("redis".into())
        );
        assert_eq!(
            follow(Some(SliceExit::DeadlinePassed("late".into()))),
            EndAction::HandBack("late".into())
        );
        assert_eq!(
            follow(Some(SliceExit::WouldRunLive("s".into()))),
            EndAction::Ended("transient")
        );
        assert_eq!(follow(None), EndAction::Ended("transient"));
    }
}
