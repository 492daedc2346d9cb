//! What the store benchmarks share: a run put to sleep through the store's real scripts, and
//! Redis's memory figure.

use std::time::Duration;

use savepoint_core::ids::ThreadId;
use savepoint_core::journal::{Entry, EntryKind, Outcome};
use savepoint_store::{ClaimOutcome, RunStatus, ScriptStore, ServedSpec, Suspend};

/// Creates run `thread` (workflow `chain`), claims it, journals one step and suspends it as
/// `sleeping` for `nap`: four scripts, as a worker would run them.
pub async fn sleeping_run(store: &ScriptStore, thread: &ThreadId, nap: Duration) -> anyhow::Result<()> {
    let input = serde_json::json!({"steps": 1}).to_string();
    store
        .create(
            thread,
            "chain",
            1,
            &input,
            "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01",
        )
        .await?;
    let ClaimOutcome::Claimed(c) = store.claim(thread, "bench-worker", Some(0), &ServedSpec::any()).await? else {
        anyhow::bail!("claim of {thread} failed");
    };
    let mut lease = c.lease;
    let step = Entry::new(
        "s0",
        EntryKind::Step,
        Outcome::Ok(serde_json::json!({"i": 1, "acc": 0})),
        1,
    );
    store
        .commit(&mut lease, 0, std::slice::from_ref(&step), ("", ""), None)
        .await?;
    let entry = Entry::new(
        "nap",
        EntryKind::Sleep,
        Outcome::Ok(serde_json::json!({"duration_ms": nap.as_millis() as u64})),
        1,
    );
    store
        .suspend(
            &mut lease,
            Some((1, std::slice::from_ref(&entry))),
            Suspend::until(RunStatus::Sleeping, nap),
            ("slept", "nap"),
        )
        .await?;
    Ok(())
}

/// Redis `used_memory` (bytes), summed over every master of a cluster is not attempted:
/// the benchmarks that read it run on one Redis.
pub async fn used_memory(store: &ScriptStore) -> anyhow::Result<i64> {
    let info: String = store.query(redis::cmd("INFO").arg("memory")).await?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0))
}
