//! The engine's decisions as pure functions over data: what replay returns for a call,
//! whether a live call may start, what an intent reply means under each policy, and what a
//! slice ends with. `Ctx` and the worker's slice runner gather the facts, call
//! these, and carry the answer out (store writes, stops); so each rule is unit-tested here
//! without any I/O, and the simulator exercises the carrying out.

use serde_json::Value;
use std::time::Duration;

use crate::journal::{Entry, EntryKind};
use crate::model::{BlockKind, EffectClaim, Holder};

/// What replay returns for a call at the cursor.
#[derive(Debug, Clone, PartialEq)]
pub enum Replay<'a> {
    /// The journal recorded this call: return its outcome, move the cursor.
    Recorded(&'a Entry),
    /// The journal ends here: the call runs live.
    Live,
    /// The journal recorded another call here: the run is blocked with this reason.
    Diverged(String),
}

/// Replays the call `kind name` at journal position `cursor`.
pub fn replay<'a>(journal: &'a [Entry], cursor: u32, name: &str, kind: EntryKind) -> Replay<'a> {
    match journal.get(cursor as usize) {
        None => Replay::Live,
        Some(e) if e.name == name && e.kind == kind => Replay::Recorded(e),
        Some(e) => Replay::Diverged(format!(
            "non-determinism at entry {cursor}: the workflow called {} {name:?} but the journal recorded {} {:?}",
            kind.as_str(),
            e.kind.as_str(),
            e.name
        )),
    }
}

/// The facts the gate before a live call looks at.
#[derive(Debug, Clone)]
pub struct GateFacts {
    /// Replay-only mode (determinism checks): nothing may run live.
    pub replay_only: bool,
    /// The local lease deadline has passed.
    pub deadline_passed: bool,
    /// The worker is shutting down.
    pub shutting_down: bool,
    /// Live calls made in this slice so far.
    pub live_in_slice: u32,
    /// Live calls allowed per slice.
    pub max_steps: u32,
    /// Time spent in this slice.
    pub elapsed: Duration,
    /// Time allowed per slice.
    pub max_time: Duration,
    /// The journal position of the call.
    pub cursor: u32,
    /// Journal entries allowed per run.
    pub max_entries: u32,
    /// A later call of a parallel group whose first call passed the gate: the budget and
    /// shutdown do not split a group (a group split at the budget would start over, whole,
    /// every slice).
    pub in_group: bool,
    /// The run's deadline (server ms, from its timeout) and the server time now.
    pub run_deadline: Option<(u64, u64)>,
}

/// The reason a run whose deadline passed fails with.
pub fn timeout_reason(deadline_ms: u64) -> String {
    format!("timed out: the run's deadline ({deadline_ms} ms, server time) passed")
}

/// Whether a live call may start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// Start it.
    Go,
    /// Replay-only: stop, reporting the call that would run.
    WouldRunLive,
    /// The lease may be gone: start nothing, hand the run back.
    DeadlinePassed,
    /// Out of slice budget, or shutting down: yield the run (pending) to a continuation.
    Yield,
    /// The run's deadline passed, or its journal is full: the run fails with this reason.
    Fail(String),
}

/// The gate before every live call, in order of precedence: replay-only, the lease
/// deadline (a worker that may have lost its lease starts nothing), the run's deadline, shutdown and the slice
/// budget (never before the first live call, so a slice always progresses), the journal cap.
pub fn gate(f: &GateFacts) -> Gate {
    if f.replay_only {
        return Gate::WouldRunLive;
    }
    if f.deadline_passed {
        return Gate::DeadlinePassed;
    }
    if let Some((deadline, now)) = f.run_deadline {
        if now >= deadline {
            return Gate::Fail(timeout_reason(deadline));
        }
    }
    let over_budget = f.live_in_slice > 0 && (f.live_in_slice >= f.max_steps || f.elapsed >= f.max_time);
    if !f.in_group && (f.shutting_down || over_budget) {
        return Gate::Yield;
    }
    if f.cursor >= f.max_entries {
        return Gate::Fail(format!("journal would exceed the maximum of {} entries", f.max_entries));
    }
    Gate::Go
}

/// An effect's in-doubt policy, without its reconcile function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// Block the run until an operator resolves the key.
    Block,
    /// Call again with the same key (the provider deduplicates).
    RetrySafe,
    /// Ask the provider.
    Reconcile,
}

/// What an intent reply means for the call.
#[derive(Debug, Clone, PartialEq)]
pub enum Intent {
    /// This attempt holds the intent: call the effect function.
    Perform,
    /// Already applied: journal this recorded result, do not call.
    Skip(Value),
    /// Another run holds the key: if its owner ended, orphan the intent and look again;
    /// otherwise back off.
    Busy(Holder),
    /// Blocked with a reason (and, for an orphaned key, the holder to resolve).
    Block(String, Option<Holder>),
    /// A newer attempt of this run holds the intent: this slice is fenced out.
    Fenced(String),
    /// This run's earlier attempt took the intent and died: apply the policy's rule.
    InDoubt(Holder, DoubtRule),
}

/// What the policy says about an intent in doubt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DoubtRule {
    /// Block the run: `effect <key> outcome unknown`.
    Block,
    /// Take the intent over (this fence) and call again.
    TakeOver,
    /// Ask the provider; applied → record its result, not applied → take over.
    Reconcile,
}

/// The meaning of an intent reply for the call at `index` of run `thread`, under `policy`.
pub fn intent(claim: &EffectClaim, key: &str, thread: &str, index: u32, policy: PolicyKind) -> Intent {
    match claim {
        EffectClaim::Won => Intent::Perform,
        EffectClaim::Done(v) => Intent::Skip(v.clone()),
        EffectClaim::Busy(h) => Intent::Busy(h.clone()),
        EffectClaim::Orphaned(h, status) => Intent::Block(
            format!(
                "effect {key} outcome unknown: run {} held its intent at entry {} and was {status} before settling \
                 it; settle it with `savepoint resolve {thread} {key} --applied true|false`",
                h.thread, h.index
            ),
            Some(h.clone()),
        ),
        EffectClaim::SelfHeld(other) => Intent::Block(
            format!(
                "effect key {key} is used at entries {other} and {index} of this run at once; use one key per effect"
            ),
            None,
        ),
        EffectClaim::Stale(newer) => Intent::Fenced(format!(
            "effect {key}: a newer attempt (fence {newer}) holds the intent"
        )),
        EffectClaim::InDoubt(h) => Intent::InDoubt(
            h.clone(),
            match policy {
                PolicyKind::Block => DoubtRule::Block,
                PolicyKind::RetrySafe => DoubtRule::TakeOver,
                PolicyKind::Reconcile => DoubtRule::Reconcile,
            },
        ),
    }
}

/// How the workflow body of a slice ended.
#[derive(Debug)]
pub enum Body<'a> {
    /// It panicked (message).
    Panicked(String),
    /// It returned its output.
    Returned(&'a Value),
    /// It returned an error.
    Errored(String),
    /// It returned the error that a recorded value does not decode into the type the code
    /// asks for.
    Undecodable(String),
    /// The context stopped it (the exit says why).
    Stopped,
}

/// What the runtime does at the end of a slice whose body ended so.
#[derive(Debug, Clone, PartialEq)]
pub enum SliceEnd {
    /// Record completion with this output.
    Complete(Value),
    /// Record failure with this error.
    Fail(String),
    /// Block the run (reason, kind of block).
    Block(String, BlockKind),
    /// The context already wrote what it had to: follow its exit.
    FollowExit,
}

/// The end of a slice: a panic blocks; code that returns while recorded entries remain did
/// not take the recorded path (non-determinism); otherwise its result is the run's.
/// `at` is the journal position the code reached; `next` the first entry it did not replay.
pub fn slice_end(body: Body<'_>, at: u32, recorded: u32, next: Option<&Entry>) -> SliceEnd {
    match body {
        Body::Panicked(msg) => SliceEnd::Block(
            format!("workflow code panicked after entry {at}: {msg}; fix the code and retry the run"),
            BlockKind::Panic,
        ),
        Body::Returned(_) | Body::Errored(_) if at < recorded => SliceEnd::Block(
            format!(
                "non-determinism at entry {at}: the workflow returned but the journal recorded {} {:?} there \
                 ({recorded} entries)",
                next.map(|e| e.kind.as_str()).unwrap_or("an entry"),
                next.map(|e| e.name.as_str()).unwrap_or("")
            ),
            BlockKind::NonDeterminism,
        ),
        Body::Returned(v) => SliceEnd::Complete(v.clone()),
        Body::Errored(e) => SliceEnd::Fail(e),
        // A decode error is a mismatch between code and data, which a fix can mend: the run
        // waits for it instead of failing for good.
        Body::Undecodable(e) => SliceEnd::Block(
            format!("{e}; fix the type in the code (or answer again where the run waits) and retry the run"),
            BlockKind::Undecodable,
        ),
        Body::Stopped => SliceEnd::FollowExit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Outcome;
    use serde_json::json;

    fn step(name: &str) -> Entry {
        Entry::new(name, EntryKind::Step, Outcome::Ok(json!(1)), 1)
    }

    #[test]
    fn replay_returns_recorded_calls_then_goes_live_and_catches_divergence() {
        let j = vec![step("a"), step("b")];
        assert_eq!(replay(&j, 0, "a", EntryKind::Step), Replay::Recorded(&j[0]));
        assert_eq!(replay(&j, 2, "c", EntryKind::Step), Replay::Live);
        match replay(&j, 1, "c", EntryKind::Step) {
            Replay::Diverged(r) => assert!(
                r.contains("entry 1") && r.contains("\"c\"") && r.contains("\"b\""),
                "{r}"
            ),
            other => panic!("{other:?}"),
        }
        assert!(matches!(replay(&j, 0, "a", EntryKind::Effect), Replay::Diverged(_)));
    }

    fn facts() -> GateFacts {
        GateFacts {
            replay_only: false,
            deadline_passed: false,
            shutting_down: false,
            live_in_slice: 0,
            max_steps: 2,
            elapsed: Duration::ZERO,
            max_time: Duration::from_secs(10),
            cursor: 0,
            max_entries: 5,
            in_group: false,
            run_deadline: None,
        }
    }

    #[test]
    fn the_gate_orders_replay_deadline_budget_and_journal_cap() {
        assert_eq!(gate(&facts()), Gate::Go);
        let f = GateFacts {
            replay_only: true,
            deadline_passed: true,
            ..facts()
        };
        assert_eq!(gate(&f), Gate::WouldRunLive);
        let f = GateFacts {
            deadline_passed: true,
            shutting_down: true,
            ..facts()
        };
        assert_eq!(gate(&f), Gate::DeadlinePassed);
        // The budget never stops the first live call of a slice: every slice progresses.
        let f = GateFacts {
            elapsed: Duration::from_secs(60),
            ..facts()
        };
        assert_eq!(gate(&f), Gate::Go);
        let f = GateFacts {
            live_in_slice: 1,
            elapsed: Duration::from_secs(60),
            ..facts()
        };
        assert_eq!(gate(&f), Gate::Yield);
        let f = GateFacts {
            live_in_slice: 2,
            ..facts()
        };
        assert_eq!(gate(&f), Gate::Yield);
        let f = GateFacts {
            shutting_down: true,
            ..facts()
        };
        assert_eq!(gate(&f), Gate::Yield);
        let f = GateFacts { cursor: 5, ..facts() };
        assert!(matches!(gate(&f), Gate::Fail(r) if r.contains('5')));
        // A parallel group is never split by the budget or shutdown, but it is by the deadline
        // and the journal cap.
        let f = GateFacts {
            live_in_slice: 2,
            shutting_down: true,
            in_group: true,
            ..facts()
        };
        assert_eq!(gate(&f), Gate::Go);
        let f = GateFacts {
            in_group: true,
            deadline_passed: true,
            ..facts()
        };
        assert_eq!(gate(&f), Gate::DeadlinePassed);
        let f = GateFacts {
            in_group: true,
            cursor: 5,
            ..facts()
        };
        assert!(matches!(gate(&f), Gate::Fail(_)));
        // The run's deadline fails the run before any budget question, never before the lease.
        let f = GateFacts {
            run_deadline: Some((100, 100)),
            shutting_down: true,
            live_in_slice: 3,
            ..facts()
        };
        assert!(matches!(gate(&f), Gate::Fail(r) if r.starts_with("timed out")));
        let f = GateFacts {
            run_deadline: Some((100, 99)),
            ..facts()
        };
        assert_eq!(gate(&f), Gate::Go);
        let f = GateFacts {
            run_deadline: Some((100, 200)),
            deadline_passed: true,
            ..facts()
        };
        assert_eq!(gate(&f), Gate::DeadlinePassed);
    }

    fn holder() -> Holder {
        Holder {
            thread: "t1".into(),
            index: 3,
            fence: 7,
        }
    }

    #[test]
    fn intent_replies_under_each_policy() {
        let i = |c: &EffectClaim, p| intent(c, "k", "t2", 4, p);
        assert_eq!(i(&EffectClaim::Won, PolicyKind::Block), Intent::Perform);
        assert_eq!(
            i(&EffectClaim::Done(json!(1)), PolicyKind::Block),
            Intent::Skip(json!(1))
        );
        assert_eq!(
            i(&EffectClaim::Busy(holder()), PolicyKind::RetrySafe),
            Intent::Busy(holder())
        );
        let doubt = EffectClaim::InDoubt(holder());
        assert_eq!(
            i(&doubt, PolicyKind::Block),
            Intent::InDoubt(holder(), DoubtRule::Block)
        );
        assert_eq!(
            i(&doubt, PolicyKind::RetrySafe),
            Intent::InDoubt(holder(), DoubtRule::TakeOver)
        );
        assert_eq!(
            i(&doubt, PolicyKind::Reconcile),
            Intent::InDoubt(holder(), DoubtRule::Reconcile)
        );
        // An orphaned key blocks under every policy: no policy may guess for an ended owner.
        for p in [PolicyKind::Block, PolicyKind::RetrySafe, PolicyKind::Reconcile] {
            match i(&EffectClaim::Orphaned(holder(), "cancelled".into()), p) {
                Intent::Block(r, Some(h)) => {
                    assert!(r.contains("savepoint resolve t2 k") && r.contains("cancelled"), "{r}");
                    assert_eq!(h, holder());
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(
            matches!(i(&EffectClaim::SelfHeld(1), PolicyKind::Block), Intent::Block(r, None) if r.contains("1 and 4"))
        );
        assert!(matches!(i(&EffectClaim::Stale(9), PolicyKind::Block), Intent::Fenced(r) if r.contains("fence 9")));
    }

    #[test]
    fn slice_end_blocks_panics_and_early_returns() {
        let out = json!({"ok": true});
        assert_eq!(
            slice_end(Body::Returned(&out), 2, 2, None),
            SliceEnd::Complete(out.clone())
        );
        assert_eq!(
            slice_end(Body::Errored("bad".into()), 2, 2, None),
            SliceEnd::Fail("bad".into())
        );
        assert!(matches!(
            slice_end(Body::Undecodable("value of \"x\" does not decode".into()), 2, 2, None),
            SliceEnd::Block(r, BlockKind::Undecodable) if r.contains("does not decode")
        ));
        assert_eq!(
            slice_end(Body::Errored("bad".into()), 2, 2, None),
            SliceEnd::Fail("bad".into())
        );
        let next = step("c");
        match slice_end(Body::Returned(&out), 1, 2, Some(&next)) {
            SliceEnd::Block(r, BlockKind::NonDeterminism) => {
                assert!(r.contains("entry 1") && r.contains("\"c\""), "{r}")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            slice_end(Body::Errored("x".into()), 0, 1, Some(&next)),
            SliceEnd::Block(_, BlockKind::NonDeterminism)
        ));
        assert!(
            matches!(slice_end(Body::Panicked("boom".into()), 0, 0, None), SliceEnd::Block(r, BlockKind::Panic) if r.contains("boom"))
        );
        assert_eq!(slice_end(Body::Stopped, 0, 3, Some(&next)), SliceEnd::FollowExit);
    }
}
