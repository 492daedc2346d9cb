//! The verdict on a blocked run: which kind of block, and what settles it.

use savepoint_store::{BlockKind, RunHeader};

use super::actions::{cancel_action, deploy_action, resolve_actions, resolve_all_action, retry_action};
use super::verdict::Verdict;
use super::{Action, Case};

/// The doctor's case for a block of `kind`, as the run records it.
fn case_of(kind: BlockKind) -> Case {
    match kind {
        BlockKind::InDoubt => Case::BlockedInDoubt,
        BlockKind::NonDeterminism => Case::BlockedNonDeterminism,
        BlockKind::Poison => Case::BlockedPoison,
        BlockKind::Migration => Case::BlockedMigration,
        BlockKind::Panic | BlockKind::Undecodable | BlockKind::Other => Case::Blocked,
    }
}

/// The case of a run blocked before runs recorded their kind of block (no `bk` field): read
/// from what the run held then. An in-doubt block names its effect key; a non-determinism
/// block's reason is in the words the worker's replay writes (`non-determinism at entry …`);
/// a poison run was taken over `max_crashes` times at one journal position (the header's
/// `crashes`), which no successful claim leaves (`max_crashes` is at least 1; 0, not known,
/// counts any takeover). Only for those older runs: a newer one is judged by its kind.
fn case_before_block_kinds(h: &RunHeader, max_crashes: u32) -> Case {
    if h.blocked_effect.is_some() {
        Case::BlockedInDoubt
    } else if h.reason.as_deref().unwrap_or("").starts_with("non-determinism") {
        Case::BlockedNonDeterminism
    } else if h.crashes >= max_crashes.max(1) {
        Case::BlockedPoison
    } else {
        Case::Blocked
    }
}

/// Which kind of block the run is in: on an in-doubt effect key, non-determinism, a poison
/// run, or another block.
pub(super) fn block_case(h: &RunHeader, max_crashes: u32) -> Case {
    match h.block_kind {
        Some(kind) => case_of(kind),
        None => case_before_block_kinds(h, max_crashes),
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
        (Case::BlockedMigration, _) => vec![
            deploy_action(format!(
                "Deploy a build of {} whose value type declares the missing step (Versioned::VERSION and \
                 upgrade, the type listed in the workflow's versions()), or, for a value a newer build wrote, \
                 a worker of that build; then retry",
                h.workflow
            )),
            retry_action(
                thread,
                "Replay it through the declared migrations once the fix is deployed",
            ),
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
        Case::BlockedMigration => {
            "a value it recorded is at a version of its type this code cannot upgrade (no migration \
             declared, a migration that failed, or a newer version than the code knows)"
        }
        _ => "the worker stopped it",
    }
}

/// A blocked run: why, and what settles it (always including a cancel). `in_doubt`: every
/// effect key it has in doubt, when it is blocked on one; with more than one, the command that
/// settles them together comes first.
pub(super) fn blocked(h: &RunHeader, max_crashes: u32, in_doubt: &[String]) -> Verdict {
    let case = block_case(h, max_crashes);
    let reason = h.reason.as_deref().unwrap_or("(no reason recorded)");
    let mut actions = block_actions(h, case, reason);
    let mut evidence = vec![format!("blocked reason: {reason}")];
    let mut together = String::new();
    if case == Case::BlockedInDoubt && in_doubt.len() > 1 {
        actions.insert(0, resolve_all_action(h.thread.as_str(), in_doubt));
        evidence.push(format!("effects in doubt: {}", in_doubt.join(", ")));
        together = format!(
            " It has {} effects in doubt, begun side by side by the attempt that died ({}): settle them \
             together with the first action.",
            in_doubt.len(),
            in_doubt.join(", ")
        );
    }
    actions.push(cancel_action(h.thread.as_str()));
    Verdict {
        evidence,
        actions,
        ..Verdict::new(
            case,
            false,
            format!(
                "Blocked until an operator acts: {}. Reason: {reason}.{together}",
                block_meaning(case)
            ),
        )
    }
}
