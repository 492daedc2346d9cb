//! What a commit does with the entry at the cursor, decided without I/O: fail the run when
//! the entry would take the journal past its byte cap, else write it (with the event detail,
//! failpoints and metric label that go with it). [`Ctx`](super::Ctx) carries the answer out.

use crate::journal::{Entry, EntryKind, Outcome};

/// What a commit does with an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum CommitPlan {
    /// The entry would take the journal past its byte cap: the run fails with this reason.
    Overflow(String),
    /// Write the entry.
    Write(Write),
}

/// How an entry that fits is written and accounted for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Write {
    /// The detail of the commit's event (`<index> <name>`); empty for a plain step commit,
    /// which records no event (the journal entry is the record).
    pub detail: String,
    /// A step: the `step.before_commit` and `step.after_commit` failpoints apply.
    pub step: bool,
    /// The `outcome` label of the steps metric.
    pub outcome: &'static str,
    /// An effect: journaled now, its done record is no longer the only proof it happened and
    /// gets its expiry (the dedup window), whether this run wrote it (it has none until
    /// journaled) or found it (kept from expiring while the run was blocked).
    pub expire_record: bool,
}

/// The sizes a commit checks against the journal's byte cap.
#[derive(Debug, Clone, Copy)]
pub(super) struct JournalSize {
    /// Bytes of the journal so far.
    pub held: u64,
    /// Bytes of the entry to commit.
    pub entry: u64,
    /// The cap (`SAVEPOINT_MAX_JOURNAL_BYTES`).
    pub max: u64,
}

/// The plan for committing `entry` at journal index `idx` with `event`.
pub(super) fn plan_commit(entry: &Entry, idx: u32, event: &str, size: JournalSize) -> CommitPlan {
    if size.held + size.entry > size.max {
        return CommitPlan::Overflow(format!(
            "journal would exceed the maximum of {} bytes (SAVEPOINT_MAX_JOURNAL_BYTES): entry {idx} {} is {} \
             bytes and the journal holds {}",
            size.max, entry.name, size.entry, size.held
        ));
    }
    let detail = if event.is_empty() {
        String::new()
    } else {
        format!("{idx} {}", entry.name)
    };
    CommitPlan::Write(Write {
        detail,
        step: entry.kind == EntryKind::Step,
        outcome: outcome_label(&entry.outcome, event),
        // (A failed effect released its key: the record is gone, or another run's intent,
        // which must never expire.)
        expire_record: entry.key.is_some() && matches!(entry.outcome, Outcome::Ok(_)),
    })
}

/// The `outcome` label of the steps metric for a committed entry.
pub(super) fn outcome_label(outcome: &Outcome, event: &str) -> &'static str {
    match (outcome, event) {
        (_, "effect_skipped") => "skipped",
        (Outcome::Ok(_), _) => "ok",
        (Outcome::Err(_), _) => "error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn size(held: u64, entry: u64) -> JournalSize {
        JournalSize { held, entry, max: 100 }
    }

    fn effect(name: &str, outcome: Outcome) -> Entry {
        let mut e = Entry::new(name, EntryKind::Effect, outcome, 1);
        e.key = Some("k1".into());
        e
    }

    #[test]
    fn an_entry_past_the_byte_cap_fails_the_run() {
        let e = Entry::new("big", EntryKind::Step, Outcome::Ok(json!(1)), 1);
        match plan_commit(&e, 3, "", size(60, 41)) {
            CommitPlan::Overflow(r) => assert_eq!(
                r,
                "journal would exceed the maximum of 100 bytes (SAVEPOINT_MAX_JOURNAL_BYTES): entry 3 big is 41 \
                 bytes and the journal holds 60"
            ),
            other => panic!("{other:?}"),
        }
        // Exactly at the cap still fits.
        assert!(matches!(plan_commit(&e, 3, "", size(60, 40)), CommitPlan::Write(_)));
    }

    #[test]
    fn a_plain_step_commit_records_no_event_and_takes_the_step_failpoints() {
        let e = Entry::new("fetch", EntryKind::Step, Outcome::Ok(json!(1)), 1);
        assert_eq!(
            plan_commit(&e, 0, "", size(0, 10)),
            CommitPlan::Write(Write {
                detail: String::new(),
                step: true,
                outcome: "ok",
                expire_record: false,
            })
        );
        let failed = Entry::new("fetch", EntryKind::Step, Outcome::Err("boom".into()), 3);
        assert!(matches!(
            plan_commit(&failed, 0, "", size(0, 10)),
            CommitPlan::Write(Write { outcome: "error", .. })
        ));
    }

    #[test]
    fn other_commits_name_their_entry_in_the_event() {
        let e = Entry::new("gate", EntryKind::Interrupt, Outcome::Ok(json!("yes")), 1);
        assert_eq!(
            plan_commit(&e, 4, "interrupt_answered", size(0, 10)),
            CommitPlan::Write(Write {
                detail: "4 gate".into(),
                step: false,
                outcome: "ok",
                expire_record: false,
            })
        );
    }

    #[test]
    fn a_journaled_effect_gives_its_record_its_expiry() {
        let e = effect("charge", Outcome::Ok(json!(1)));
        assert_eq!(
            plan_commit(&e, 2, "effect_skipped", size(0, 10)),
            CommitPlan::Write(Write {
                detail: "2 charge".into(),
                step: false,
                outcome: "skipped",
                expire_record: true,
            })
        );
        assert!(matches!(
            plan_commit(&e, 2, "effect_done", size(0, 10)),
            CommitPlan::Write(Write {
                outcome: "ok",
                expire_record: true,
                ..
            })
        ));
        let failed = effect("charge", Outcome::Err("declined".into()));
        assert!(matches!(
            plan_commit(&failed, 2, "", size(0, 10)),
            CommitPlan::Write(Write {
                expire_record: false,
                ..
            })
        ));
    }
}
