//! The verdict on a blocked run: which kind of block, and what settles it.

use savepoint_store::RunHeader;

use super::actions::{cancel_action, deploy_action, resolve_actions, retry_action};
use super::verdict::Verdict;
use super::{Action, Case};

/// True when a block's reason is in the words of a non-determinism block (`non-determinism
/// at entry …`, as the worker's replay writes it). The run header keeps no typed field for
/// the kind of block a worker wrote, so this one kind is still read from the reason.
fn reads_as_non_determinism(h: &RunHeader) -> bool {
    h.reason.as_deref().unwrap_or("").starts_with("non-determinism")
}

/// True for a poison run: the claim script blocks a run taken over `max_crashes` times at
/// one journal position (the header's `crashes`), and no successful claim leaves that many.
/// (`max_crashes` is at least 1; 0, not known, counts any takeover.)
fn is_poison(h: &RunHeader, max_crashes: u32) -> bool {
    h.crashes >= max_crashes.max(1)
}

/// Which kind of block the run is in: on an in-doubt effect key, non-determinism, a poison
/// run, or another block.
pub(super) fn block_case(h: &RunHeader, max_crashes: u32) -> Case {
    if h.blocked_effect.is_some() {
        Case::BlockedInDoubt
    } else if reads_as_non_determinism(h) {
        Case::BlockedNonDeterminism
    } else if is_poison(h, max_crashes) {
        Case::BlockedPoison
    } else {
        Case::Blocked
    }
}

/// What settles a block of kind `case` (before the cancel every block offers).
fn block_actions(h: &RunHeader, case: Case, reason: &str) -> Vec<Action> {
    let thread = h.thread.as_str();
    match (case, h.blocked_effect.as_deref()) {
        (Case::BlockedInDoubt, Some(key)) => resolve_actions(thread, key).into(),
        (Case::BlockedNonDeterminism, _) => vec![
            deploy_action(format!(
                "Deploy code that takes the recorded path (or guard the change with ctx.patched) for {} \
                 v{}, then retry",
                h.workflow, h.workflow_version
            )),
            retry_action(thread, "Check the run again from the top once fixed code serves it"),
        ],
        (Case::BlockedPoison, _) => vec![
            deploy_action(format!(
                "Fix what kills the worker at this step ({reason}), deploy it, then retry"
            )),
            retry_action(thread, "Run it again from where it stopped once the fix is deployed"),
        ],
        _ => vec![retry_action(thread, "Run it again from where it stopped after the fix")],
    }
}

/// What a block of kind `case` means, in a clause.
fn block_meaning(case: Case) -> &'static str {
    match case {
        Case::BlockedInDoubt => {
            "an effect's outcome is unknown (a worker died between recording its intent and its \
             result); only someone who checks the provider can say whether it happened"
        }
        Case::BlockedNonDeterminism => "the workflow code no longer takes the path its journal recorded",
        Case::BlockedPoison => "it is a poison run: every worker that ran this step died there",
        _ => "the worker stopped it",
    }
}

/// A blocked run: why, and what settles it (always including a cancel).
pub(super) fn blocked(h: &RunHeader, max_crashes: u32) -> Verdict {
    let case = block_case(h, max_crashes);
    let reason = h.reason.as_deref().unwrap_or("(no reason recorded)");
    let mut actions = block_actions(h, case, reason);
    actions.push(cancel_action(h.thread.as_str()));
    Verdict {
        evidence: vec![format!("blocked reason: {reason}")],
        actions,
        ..Verdict::new(
            case,
            false,
            format!(
                "Blocked until an operator acts: {}. Reason: {reason}.",
                block_meaning(case)
            ),
        )
    }
}
