//! Replay-only execution: runs a workflow against its recorded journal without executing
//! or writing anything. Proves determinism and that a replay re-fires nothing.

use serde_json::Value;
use std::collections::BTreeMap;
use tokio_util::sync::CancellationToken;

use savepoint::failpoints::Failpoints;
use savepoint::ids::ThreadId;
use savepoint::store::{Lease, RedisStore, StoreError};
use savepoint::workflow::{Ctx, CtxParts, Registry, SliceExit, SliceLimits};

/// What a replay found.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayReport {
    /// The workflow returned using recorded results only (its output, or error text).
    Finished(Result<Value, String>),
    /// The journal ends before the workflow does: the next call would run live.
    WouldRunLive(String),
    /// The code and the journal disagree.
    Diverged(String),
    /// The run cannot be replayed here (unknown workflow, unreadable journal…).
    Unavailable(String),
}

/// Replays the run `thread` against its journal with the registered code.
pub async fn replay(store: &RedisStore, registry: &Registry, thread: &ThreadId) -> Result<ReplayReport, StoreError> {
    let Some((header, journal)) = store.get(thread).await? else {
        return Err(StoreError::Missing(thread.to_string()));
    };
    let Some(wf) = registry.get(&header.workflow) else {
        return Ok(ReplayReport::Unavailable(format!(
            "unknown workflow {}",
            header.workflow
        )));
    };
    let lease = Lease {
        thread: thread.clone(),
        keys: store.keys().run(thread),
        owner: "replay".into(),
        fence: 0,
        version: header.version,
    };
    let limits = SliceLimits {
        max_steps: u32::MAX,
        max_time: std::time::Duration::MAX,
        ..SliceLimits::default()
    };
    let mut ctx = Ctx::new(CtxParts {
        store: store.clone(),
        lease,
        journal,
        signals: BTreeMap::new(),
        limits,
        failpoints: Failpoints::none(),
        lease_lost: CancellationToken::new(),
        clock: savepoint::lease::LeaseClock::new(
            std::time::Instant::now(),
            std::time::Duration::from_secs(365 * 24 * 3600),
            std::time::Duration::ZERO,
        ),
        crashes: 0,
        busy_tries: 0,
        shutdown: CancellationToken::new(),
        retry: wf.retry_policy(),
        replay_only: true,
        workflow: header.workflow.clone(),
    });
    let stopped = ctx.exit_signal();
    let result = {
        let body = wf.run(&mut ctx, header.input.clone());
        tokio::select! {
            biased;
            _ = stopped.notified() => None,
            r = body => Some(r),
        }
    };
    let (at, recorded) = (ctx.next_index() as usize, ctx.journal().len());
    Ok(match result {
        Some(_) if at < recorded => {
            let e = &ctx.journal()[at];
            ReplayReport::Diverged(format!(
                "non-determinism at entry {at}: the workflow returned but the journal recorded {} {:?} there",
                e.kind.as_str(),
                e.name
            ))
        }
        Some(r) => ReplayReport::Finished(r.map_err(|e| e.to_string())),
        None => match ctx.take_exit() {
            Some(SliceExit::WouldRunLive(name)) => ReplayReport::WouldRunLive(name),
            Some(SliceExit::Blocked(reason)) => ReplayReport::Diverged(reason),
            other => ReplayReport::Unavailable(format!("{other:?}")),
        },
    })
}
