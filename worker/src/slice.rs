//! One slice of a run: compatibility checks, replay + live calls, then complete, fail,
//! suspend or yield (publishing a continuation task).

use futures::FutureExt;
use serde_json::Value;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use futures::future::BoxFuture;

use savepoint::journal::Entry;
use savepoint::workflow::decide::{self, Body as BodyEnd, SliceEnd};
use savepoint::workflow::engine::{busy_backoff, key_still_held, CtxParts, DynWorkflow, Routing, TaskSink};
use savepoint::workflow::{Ctx, RunError, WorkflowError};
use savepoint_broker::Queues;
use savepoint_core::ids::{EffectKey, ThreadId};
use savepoint_core::lease::LeaseClock;
use savepoint_core::metrics::{inc, metrics};
use savepoint_core::protocol::{Task, TaskReason};
use savepoint_store::Suspend;
use savepoint_store::{
    Acquired, BlockKind, ChildResult, Claimed, Finish, Flow, Lease, ParentCancel, RunStatus, ScriptStore,
    SignalOutcome, StoreError, FLOW_PARK,
};

use crate::heartbeat::Heartbeat;
use crate::journals::{Body, ParkedRun, Resumed};
use crate::shared::Shared;

mod plan;

use plan::{ClaimFacts, Early, EndAction};

/// Why this worker cannot run a claimed run, if it cannot. (Workflow, version and schema are
/// checked by the claim itself, which gives such runs back untouched.)
fn unreadable(c: &Claimed) -> Option<String> {
    c.journal.as_ref().err().map(|e| format!("journal cannot be read: {e}"))
}

/// Publishes a task for the run (continuation or wake-up), then tells the store that the
/// broker carries it (so the safety net does not publish another). Failure is logged: the
/// run's due time makes the scanner ring again.
pub(crate) async fn publish(
    shared: &Shared,
    thread: &ThreadId,
    queue: Option<&str>,
    step: Option<u32>,
    reason: TaskReason,
    trace: Option<&str>,
    rv: u64,
) {
    if shared.failpoints.check("publish.before").await.is_err() {
        return;
    }
    let task = Task::new(thread.clone(), shared.store.keys().partition(thread), step, reason);
    let span = tracing::info_span!("publish", task.reason = reason.as_str());
    // The next task's span continues from this publish (else from the run's own trace).
    let parent = span.in_scope(savepoint_runtime::telemetry::current_traceparent);
    let headers: Vec<(String, String)> = parent
        .as_deref()
        .or(trace)
        .map(|t| vec![("traceparent".to_owned(), t.to_owned())])
        .unwrap_or_default();
    match send(shared, thread, queue, &task.encode(), &headers, reason)
        .instrument(span)
        .await
    {
        Ok(sticky) => {
            inc(&metrics().published, &[("reason", reason.as_str())]);
            // A task in a sticky queue (a classic queue on one broker node) is not marked: the
            // run keeps its nearer net, so a task lost with that node is rung again soon.
            if !sticky {
                if let Err(e) = shared.store.mark_queued(&[(thread.clone(), rv)]).await {
                    tracing::debug!(error = %e, "marking the task queued failed; the safety net may ring once more");
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "publish failed; the due time will redeliver"),
    }
    let _ = shared.failpoints.check("publish.after").await;
}

/// Sends a run's task to this worker's sticky queue where [`Shared::sticks`] says so (a sticky
/// queue gone, or any other failure there, falls back to the task queue), else to the run's
/// task queue; true when it went to the sticky queue.
async fn send(
    shared: &Shared,
    thread: &ThreadId,
    queue: Option<&str>,
    payload: &[u8],
    headers: &[(String, String)],
    reason: TaskReason,
) -> Result<bool, savepoint_broker::BrokerError> {
    if let Some(q) = shared.sticks(thread, queue) {
        let sent = match shared.queues.get(q).await {
            Ok(b) => b.publish_sticky(shared.incarnation.as_str(), payload, headers).await,
            Err(e) => Err(e),
        };
        match sent {
            Ok(()) => {
                inc(&metrics().sticky, &[("reason", reason.as_str())]);
                return Ok(true);
            }
            Err(e) => tracing::debug!(error = %e, "publishing to the sticky queue failed; to the task queue"),
        }
    }
    shared.queues.publish(queue, payload, headers).await.map(|()| false)
}

/// Publishes the start tasks of the child runs a workflow starts, as the API does for runs it
/// starts: publish, then confirm to the store (a publish that fails leaves the run to the
/// unconfirmed-start safety net).
pub(crate) struct ChildStarter {
    pub store: ScriptStore,
    pub queues: Queues,
}

impl TaskSink for ChildStarter {
    fn start(&self, thread: ThreadId, queue: Option<String>) -> BoxFuture<'static, ()> {
        let (store, queues) = (self.store.clone(), self.queues.clone());
        Box::pin(async move {
            let task = Task::new(thread.clone(), store.keys().partition(&thread), None, TaskReason::Start);
            let headers: Vec<(String, String)> = savepoint_runtime::telemetry::current_traceparent()
                .map(|t| vec![("traceparent".to_owned(), t)])
                .unwrap_or_default();
            match queues.publish(queue.as_deref(), &task.encode(), &headers).await {
                Ok(()) => {
                    inc(&metrics().published, &[("reason", TaskReason::Start.as_str())]);
                    if let Err(e) = store.confirm_started(&[thread]).await {
                        tracing::debug!(error = %e, "confirming a child's start failed; the safety net may ring once more");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "publishing a child's start task failed; the due scanner will"),
            }
        })
    }
}

/// A child run that ended tells its parent (which wakes it if it waits), then publishes the
/// parent's task. If this worker dies first, the parent finds out at its next poll.
async fn tell_parent(shared: &Shared, c: &Claimed, result: ChildResult) {
    let Some(parent) = &c.header.parent else {
        return;
    };
    if shared.failpoints.check("child.before_notify").await.is_err() {
        return;
    }
    match shared.store.notify_parent(&c.lease.thread, parent, &result).await {
        Ok(SignalOutcome::Woke(r)) => {
            // (Its queue: one read; a wrong guess would be forwarded by the worker it reached.)
            let queue = shared.store.run_queue(&parent.thread).await.ok().flatten();
            let (q, trace) = (queue.as_deref(), r.trace.as_deref());
            publish(shared, &parent.thread, q, None, TaskReason::Signal, trace, r.rv).await;
        }
        Ok(o) => tracing::debug!(parent = %parent.thread, outcome = ?o, "told the parent"),
        Err(e) => {
            tracing::warn!(parent = %parent.thread, error = %e, "could not tell the parent; it finds out at its poll")
        }
    }
}

/// Runs one slice of a claimed run.
pub(crate) async fn execute(shared: &Shared, c: Claimed) {
    let trace_id = c
        .header
        .trace
        .as_deref()
        .map(savepoint_runtime::telemetry::trace_id_of)
        .unwrap_or_default();
    // (The enclosing task span carries the worker and thread ids.)
    let span = tracing::info_span!(
        "slice",
        workflow = %c.header.workflow,
        task.attempt = c.header.attempt,
        trace.id = %trace_id,
    );
    run_slice(shared, c).instrument(span).await
}

/// A run that backed off on an effect key another run holds: if the key is still held, back
/// off again without replaying the journal. True when it did.
async fn still_backing_off(shared: &Shared, c: &Claimed, lease: &mut Lease) -> bool {
    let Some((key, n)) = &c.header.wait_effect else {
        return false;
    };
    let Ok(key) = EffectKey::new(key.clone()) else {
        return false;
    };
    let holder = match key_still_held(&shared.store, &key, &lease.thread).await {
        Ok(Some(h)) => h,
        Ok(None) => return false,
        Err(e) => {
            tracing::debug!(error = %e, "checking a held effect key failed; replaying");
            return false;
        }
    };
    let delay = busy_backoff(*n);
    let detail = format!("key {key} still held by {holder}; next try in {delay:?}");
    let how = Suspend {
        backoff_on: Some((key.as_str(), n + 1)),
        ..Suspend::until(RunStatus::Sleeping, delay)
    };
    inc(&metrics().effects, &[("outcome", "busy")]);
    match shared.store.suspend(lease, None, how, ("effect_busy", &detail)).await {
        Ok(_) => true,
        Err(e) => {
            tracing::debug!(error = %e, "re-suspending a backing-off run failed; replaying");
            false
        }
    }
}

/// Runs one slice of a claimed run: the checks before its body (any of which may end the
/// slice), the body, and what its end calls for; then gives the flow slot back and counts it.
async fn run_slice(shared: &Shared, mut c: Claimed) {
    let started = Instant::now();
    let _done = count_in_flight(shared);
    let mut lease = c.lease.clone();
    let Admitted { wf, slot_sent } = match admit_slice(shared, &c, &mut lease).await {
        Ok(admitted) => admitted,
        Err(early) => return end_early(shared, &c, &mut lease, early).await,
    };
    let resumed = match journal_of(shared, &mut c).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "reading the journal failed; releasing the run for a retry");
            return release_for_retry(shared, &mut lease).await;
        }
    };
    let lost = CancellationToken::new();
    // Shutdown, or a pause the heartbeat finds: the slice yields at its next call.
    let stop = shared.slices_stop.child_token();
    let clock = lease_clock(shared, &c, slot_sent);
    let _hb = Heartbeat::start(
        shared.store.clone(),
        lease.clone(),
        clock.clone(),
        (lost.clone(), stop.clone()),
        c.header.flow.clone(),
    );
    let session = Session {
        lease,
        journal: Vec::new(),
        journal_bytes: None,
        lost,
        clock,
        stop,
    };
    let Some((ctx, mut body, replayed)) = start_body(shared, &c, wf, resumed, session) else {
        return;
    };
    let result = run_body(&mut body, &ctx).await;
    if result.is_none() {
        if let Some(report) = ctx.take_parked() {
            if ctx.parkable(report.at) {
                let run = Box::new(ParkedRun { body, ctx, report });
                return end_parked(shared, &c, run, (replayed, started)).await;
            }
        }
    }
    // The body is over (or not kept): the context is the slice's alone again.
    drop(body);
    let Ok(mut ctx) = Arc::try_unwrap(ctx) else {
        tracing::error!("a slice's context outlived its body; the lease expires");
        return;
    };
    let at = ctx.next_index();
    let recorded = ctx.journal().len() as u32;
    shared
        .steps
        .fetch_add(u64::from(recorded).saturating_sub(replayed as u64), Ordering::Relaxed);
    let end = decide::slice_end(body_end(&result), at, recorded, ctx.journal().get(at as usize));
    let action = plan::end_action(end, ctx.take_exit(), at, c.header.queue.as_deref());
    let (action, tail) = with_unsent(&mut ctx, action).await;
    let mut lease = ctx.lease().clone();
    // Kept before the continuation or wake-up is published: its claim may come at once.
    keep_journal(shared, &c, &mut ctx, &action);
    let end = carry_out(shared, &c, &mut lease, action, &tail).await;
    let live = ctx.live_calls();
    slice_over(shared, &c, (end, replayed, live), started).await;
}

/// The slice's workflow body over its context, and the entries it starts with: a body from the
/// top over the journal resumed, or the run's parked body going on with this slice's parts;
/// `None` if a parked body was gone (never: the runtime holds it).
fn start_body(
    shared: &Shared,
    c: &Claimed,
    wf: Arc<dyn DynWorkflow>,
    resumed: Resumed,
    mut session: Session,
) -> Option<(Arc<Ctx>, Body, usize)> {
    match resumed {
        Resumed::Journal { entries, bytes } => {
            let replayed = entries.len();
            (session.journal, session.journal_bytes) = (entries, bytes);
            let ctx = Arc::new(Ctx::new(parts(shared, c, &*wf, session)));
            let body = body_of_run(wf, ctx.clone(), c.header.input.clone());
            Some((ctx, body, replayed))
        }
        Resumed::Parked { run, new } => {
            let replayed = run.report.held as usize + new.len();
            inc(&metrics().resumes, &[("read", "parked")]);
            session.journal = new;
            if !run.ctx.resume(parts(shared, c, &*wf, session), &run.report) {
                tracing::error!("a parked body was gone; the lease expires");
                return None;
            }
            let ParkedRun { body, ctx, .. } = *run;
            Some((ctx, body, replayed))
        }
    }
}

/// The end of a slice whose body parked at a suspension or a yield with every entry durable:
/// the body is kept for the run's next slice (before the continuation or wake-up is
/// published: its claim may come at once), then the end is carried out.
async fn end_parked(shared: &Shared, c: &Claimed, run: Box<ParkedRun>, (replayed, started): (usize, Instant)) {
    let r = &run.report;
    let (at, live, mut lease) = (r.at, r.live, r.lease.clone());
    shared
        .steps
        .fetch_add(u64::from(r.held).saturating_sub(replayed as u64), Ordering::Relaxed);
    let action = plan::end_action(
        SliceEnd::FollowExit,
        Some(r.exit.clone()),
        at,
        c.header.queue.as_deref(),
    );
    if !shared.journals.park(&c.header, run) {
        tracing::debug!("the parked body cannot be kept; the next slice replays");
    }
    let end = carry_out(shared, c, &mut lease, action, &(0, Vec::new())).await;
    slice_over(shared, c, (end, replayed, live), started).await;
}

/// After a slice's end is carried out: gives its flow slot back and counts it.
async fn slice_over(shared: &Shared, c: &Claimed, (end, replayed, live): (&'static str, usize, u32), started: Instant) {
    if let Some(f) = &c.header.flow {
        // Only this slice's own slot (its fence): if the run was claimed again meanwhile (a
        // yield already published, a pause past the lease), the next slice holds it now.
        leave_slot(shared, f, &c.lease.thread, Some(c.lease.fence), false).await;
    }
    tracing::debug!(
        end,
        replayed,
        live,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "slice ended"
    );
    inc(&metrics().slices, &[("end", end)]);
}

/// What the slice starts from: the run's parked body, or the claim's journal after what this
/// worker kept of the run from its last slice here (read whole when what was kept does not
/// fit the claim).
async fn journal_of(shared: &Shared, c: &mut Claimed) -> Result<Resumed, StoreError> {
    let claimed = std::mem::replace(&mut c.journal, Ok(Vec::new())).unwrap_or_default();
    let thread = &c.lease.thread;
    let resumed = shared.journals.resume(thread, c.journal_from, claimed);
    match &resumed {
        Some(Resumed::Journal { bytes: Some(_), .. }) => inc(&metrics().resumes, &[("read", "held")]),
        Some(Resumed::Parked { .. }) => {}
        _ => inc(&metrics().resumes, &[("read", "whole")]),
    }
    if let Some(r) = resumed {
        return Ok(r);
    }
    let (_, entries) = shared
        .store
        .get(thread)
        .await?
        .ok_or_else(|| StoreError::Missing(thread.to_string()))?;
    Ok(Resumed::Journal { entries, bytes: None })
}

/// Keeps the run's journal for its next slice on this worker when this one suspended or
/// yielded it (written: the action only publishes) with every entry acknowledged; forgets it
/// otherwise.
fn keep_journal(shared: &Shared, c: &Claimed, ctx: &mut Ctx, action: &EndAction) {
    let suspended = matches!(
        action,
        EndAction::Continue { .. } | EndAction::Wake(_) | EndAction::Ended("suspended")
    );
    let journal = suspended.then(|| ctx.take_journal()).flatten();
    match journal {
        Some((entries, bytes)) => shared.journals.keep(&c.header, entries, bytes),
        None => shared.journals.forget(&c.lease.thread),
    }
}

/// Counts the slice as in flight (gauge and registration) until the guard drops.
fn count_in_flight(shared: &Shared) -> Guard<impl FnMut() + '_> {
    metrics().inflight.inc();
    shared.in_flight.fetch_add(1, Ordering::Relaxed);
    shared.slices.fetch_add(1, Ordering::Relaxed);
    scopeguard(|| {
        metrics().inflight.dec();
        shared.in_flight.fetch_sub(1, Ordering::Relaxed);
    })
}

/// A slice cleared to run its body: the workflow, and when its flow slot was asked for.
struct Admitted {
    wf: Arc<dyn DynWorkflow>,
    slot_sent: Instant,
}

/// The checks before a slice runs its body, in order: the claim's facts (with a child's
/// parent read), the workflow, an effect key the run still backs off on, its flow slot.
async fn admit_slice(shared: &Shared, c: &Claimed, lease: &mut Lease) -> Result<Admitted, Early> {
    let unreadable = unreadable(c);
    let orphaned = match unreadable {
        Some(_) => Ok(None),
        None => orphaned(shared, c).await,
    };
    let facts = ClaimFacts {
        unreadable,
        orphaned,
        past_deadline: c.header.deadline.filter(|d| c.server_clock().earliest() >= *d),
    };
    let wf = plan::admit(facts, shared.registry.get(&c.header.workflow))?;
    if still_backing_off(shared, c, lease).await {
        return Err(Early::BackedOff);
    }
    let slot_sent = Instant::now();
    if let Some(f) = &c.header.flow {
        let start = c.header.steps == 0;
        let reply = shared
            .store
            .flow_acquire(f, &lease.thread, lease.fence, c.header.priority, start)
            .await;
        plan::flow_slot(reply)?;
    }
    Ok(Admitted { wf, slot_sent })
}

/// Carries out how a slice ends before its body runs, and counts the end.
async fn end_early(shared: &Shared, c: &Claimed, lease: &mut Lease, early: Early) {
    let end = match early {
        Early::Unreadable(reason) => block_unreadable(shared, lease, &reason).await,
        Early::Orphaned(reason) => {
            // Its parent was cancelled and the cancel's cascade did not reach it (it
            // was linked but not yet created then, or the cascade's write failed): the
            // child cancels itself at its next claim, before any further call.
            match shared.store.cancel(&lease.thread, &reason).await {
                Ok(_) => tracing::info!(%reason, "child run cancelled with its parent"),
                Err(e) => {
                    tracing::warn!(error = %e, "could not cancel a child of a cancelled parent; it is retried")
                }
            }
            "cancelled"
        }
        Early::ParentUnread(e) => {
            tracing::warn!(error = %e, "reading a child's parent failed; releasing the run for a retry");
            release_for_retry(shared, lease).await;
            "transient"
        }
        Early::PastDeadline(reason) => match fail_past_deadline(shared, c, lease, reason).await {
            Some(end) => end,
            None => return,
        },
        Early::Unregistered => {
            // The claim checked the served set; a registry without it serves nothing here.
            release_for_retry(shared, lease).await;
            return;
        }
        Early::BackedOff => "suspended",
        Early::SlotTaken(holder) => {
            // A later slice of this run holds its slot: this one lost the run.
            tracing::warn!(
                holder,
                fence = lease.fence,
                "a later slice holds the run's flow slot; giving the run up"
            );
            "lease_lost"
        }
        Early::InLine(wait) => {
            if let Some(f) = &c.header.flow {
                wait_in_line(shared, lease, f, wait).await;
            }
            "flow_waiting"
        }
        Early::FlowUnavailable(e) => {
            tracing::warn!(error = %e, "taking a flow-control slot failed; releasing the run for a retry");
            release_for_retry(shared, lease).await;
            "transient"
        }
    };
    inc(&metrics().slices, &[("end", end)]);
}

/// Blocks a run whose journal cannot be read.
async fn block_unreadable(shared: &Shared, lease: &mut Lease, reason: &str) -> &'static str {
    tracing::warn!(%reason, "cannot read the run: blocking it");
    inc(&metrics().blocks, &[("reason", "unreadable")]);
    let how = Finish::Blocked {
        reason,
        kind: BlockKind::Undecodable,
        effect: None,
    };
    if let Err(e) = shared.store.finish(lease, None, how, ("blocked", reason)).await {
        tracing::warn!(error = %e, "could not record the block");
    }
    "blocked"
}

/// Fails a run whose deadline passed while it slept, waited, queued or lay with a dead
/// worker, without replaying; `None` when an injected error stopped it first.
async fn fail_past_deadline(shared: &Shared, c: &Claimed, lease: &mut Lease, reason: String) -> Option<&'static str> {
    if shared.failpoints.check("run.deadline.before_fail").await.is_err() {
        return None;
    }
    match shared
        .store
        .finish(lease, None, Finish::Failed(&reason), ("failed", &reason))
        .await
    {
        Ok(()) => {
            tracing::info!(%reason, "run failed");
            tell_parent(shared, c, ChildResult::Failed(reason)).await;
            if let Some(f) = &c.header.flow {
                // It may have been waiting in line for a slot.
                leave_slot(shared, f, &c.lease.thread, None, true).await;
            }
        }
        Err(e) => tracing::warn!(error = %e, "could not fail a run past its deadline; it is retried"),
    }
    Some("failed")
}

/// The local lease deadline of the slice, from its claim (and its flow slot's, if any).
fn lease_clock(shared: &Shared, c: &Claimed, slot_sent: Instant) -> LeaseClock {
    let cfg = shared.store.config();
    let clock = LeaseClock::new(c.sent_at, cfg.lease, cfg.lease_margin);
    if c.header.flow.is_some() {
        clock.bind_slot(slot_sent);
    }
    clock
}

/// What a slice's context takes over from the slice runner.
struct Session {
    lease: Lease,
    journal: Vec<Entry>,
    journal_bytes: Option<u64>,
    lost: CancellationToken,
    clock: LeaseClock,
    stop: CancellationToken,
}

/// The parts of the workflow context of a slice of claimed run `c`.
fn parts(shared: &Shared, c: &Claimed, wf: &dyn DynWorkflow, s: Session) -> CtxParts {
    CtxParts {
        store: shared.run_store.clone(),
        lease: s.lease,
        journal: s.journal,
        journal_bytes: s.journal_bytes,
        signals: c.signals.clone(),
        limits: shared.limits.clone(),
        failpoints: shared.failpoints.clone(),
        lease_lost: s.lost,
        clock: s.clock,
        crashes: c.header.crashes,
        busy_tries: c.header.wait_effect.as_ref().map(|w| w.1).unwrap_or(0),
        tries: c.tries.clone(),
        deadline: c.header.deadline,
        shutdown: s.stop,
        retry: wf.retry_policy(),
        replay_only: false,
        workflow: c.header.workflow.clone(),
        stubs: shared.stubs.clone(),
        tasks: Some(shared.child_starter.clone()),
        routing: Some(Routing {
            served: shared.served_queues.clone(),
            home: c
                .header
                .home_queue
                .clone()
                .unwrap_or_else(|| shared.queues.home_name().to_owned()),
        }),
        server_clock: c.server_clock(),
        traceparent: savepoint_runtime::telemetry::current_traceparent,
        versions: wf.versions(),
        input_version: c.header.input_version,
        needs: c.header.needs.clone(),
        value_features: shared.value_features.clone(),
        park: shared.park,
    }
}

/// How a slice's workflow body ended: its result, or its panic; `None` when the context
/// stopped it.
type BodyResult = Option<std::thread::Result<Result<Value, RunError>>>;

/// The body of a run over its context, from the top, owning both (so a body that parks can be
/// kept past its slice).
fn body_of_run(wf: Arc<dyn DynWorkflow>, ctx: Arc<Ctx>, input: Value) -> Body {
    Box::pin(AssertUnwindSafe(async move { wf.run(&ctx, input).await }).catch_unwind())
}

/// Polls the workflow body until it returns or the context stops it (the body is left as it
/// is then: the caller drops it or keeps it parked).
async fn run_body(body: &mut Body, ctx: &Ctx) -> BodyResult {
    let stopped = ctx.exit_signal();
    tokio::select! {
        biased;
        _ = stopped.notified() => None,
        r = body => Some(r),
    }
}

/// The body's end as the slice-end decision reads it.
fn body_end(result: &BodyResult) -> BodyEnd<'_> {
    match result {
        Some(Err(panic)) => BodyEnd::Panicked(savepoint::workflow::engine::panic_message(&**panic)),
        Some(Ok(Ok(output))) => BodyEnd::Returned(output),
        Some(Ok(Err(err @ RunError::Workflow(WorkflowError::Decode { .. })))) => BodyEnd::Undecodable(err.to_string()),
        Some(Ok(Err(err))) => BodyEnd::Errored(err.to_string()),
        None => BodyEnd::Stopped,
    }
}

/// The entries a slice journaled and has not written yet (pipelined checkpoints): the index
/// of the first, the entries. The write that ends the run or blocks it carries them.
type Unsent = (u32, Vec<Entry>);

/// Unsent entries as a store write takes them (`None`: there are none).
type Tail<'a> = Option<(u32, &'a [Entry])>;

/// `unsent` as a store write takes it.
fn tail(unsent: &Unsent) -> Tail<'_> {
    (!unsent.1.is_empty()).then_some((unsent.0, &unsent.1[..]))
}

/// For an action that writes the run (ends it, blocks it, or hands it back): waits for the
/// slice's commit in flight, so the write carries the run's current version, and takes the
/// unsent entries, which the write carries. A commit of the slice that failed turns ending or
/// blocking the run into the end a failed commit forces (the run is not ended on a journal
/// the store refused); a hand-back goes on without entries.
async fn with_unsent(ctx: &mut Ctx, action: EndAction) -> (EndAction, Unsent) {
    let none = || (0, Vec::new());
    let hands_back = matches!(action, EndAction::Retry(_) | EndAction::HandBack(_));
    if !hands_back
        && !matches!(
            action,
            EndAction::Block(..) | EndAction::Complete(_) | EndAction::Fail(_)
        )
    {
        return (action, none());
    }
    match ctx.unsent().await {
        Ok(unsent) => (action, unsent),
        Err(_) if hands_back => (action, none()),
        Err(e) if e.is_lease_lost() || matches!(e, StoreError::Missing(_)) => {
            (EndAction::LeaseLost(e.to_string()), none())
        }
        Err(e) => (EndAction::Retry(e.to_string()), none()),
    }
}

/// Carries out what the end of a slice's body calls for; returns how the slice ended (the
/// `end` of the slices metric).
async fn carry_out(
    shared: &Shared,
    c: &Claimed,
    lease: &mut Lease,
    action: EndAction,
    unsent: &Unsent,
) -> &'static str {
    let trace = c.header.trace.as_deref();
    let tail = tail(unsent);
    match action {
        EndAction::Block(reason, kind) => block(shared, c, lease, &reason, kind, tail).await,
        EndAction::Complete(output) => complete(shared, c, lease, output, tail).await,
        EndAction::Fail(msg) => fail(shared, c, lease, msg, tail).await,
        EndAction::Continue { queue, step, rv } => {
            let q = queue.as_deref();
            publish(shared, &lease.thread, q, Some(step), TaskReason::Continue, trace, rv).await;
            "yielded"
        }
        EndAction::Wake(rv) => {
            let q = c.header.queue.as_deref();
            publish(shared, &lease.thread, q, None, TaskReason::Signal, trace, rv).await;
            "suspended"
        }
        EndAction::TellFailed(reason) => {
            tell_parent(shared, c, ChildResult::Failed(reason)).await;
            "failed"
        }
        EndAction::LeaseLost(reason) => {
            tracing::warn!(%reason, "lease lost; another worker or an operator owns the run now");
            "lease_lost"
        }
        EndAction::Retry(reason) => {
            tracing::warn!(%reason, "slice stopped on a transient error; releasing the run for a retry");
            release_carrying(shared, c, lease, tail).await;
            "transient"
        }
        EndAction::HandBack(reason) => {
            tracing::warn!(%reason, "local lease deadline passed: stopped; handing the run back if Redis lets us");
            release_carrying(shared, c, lease, tail).await;
            "deadline"
        }
        EndAction::Ended(end) => end,
    }
}

/// Records the run's completion with `output` and tells its parent.
async fn complete(shared: &Shared, c: &Claimed, lease: &mut Lease, output: Value, tail: Tail<'_>) -> &'static str {
    // (The version of the output's type as this build declares it, kept with the output.)
    let ov = shared.registry.get(&c.header.workflow).and_then(|w| w.output_version());
    let r = shared
        .run_store
        .finish(lease, tail, Finish::Completed(&output, ov.as_ref()), ("completed", ""))
        .await;
    match r {
        Ok(()) => {
            written(c, tail);
            tell_parent(shared, c, ChildResult::Completed(output, ov)).await;
            "completed"
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not record completion");
            "lease_lost"
        }
    }
}

/// Records the run's failure with `msg` and tells its parent.
async fn fail(shared: &Shared, c: &Claimed, lease: &mut Lease, msg: String, tail: Tail<'_>) -> &'static str {
    let r = shared
        .run_store
        .finish(lease, tail, Finish::Failed(&msg), ("failed", &msg))
        .await;
    match r {
        Ok(()) => {
            written(c, tail);
            tell_parent(shared, c, ChildResult::Failed(msg)).await;
            "failed"
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not record failure");
            "lease_lost"
        }
    }
}

/// Why a child run about to start a slice must not run: its parent was cancelled and its link
/// says a cancel reaches it, but the cancel's cascade did not (it ran before the child
/// existed, or a write of it failed: the cascade is best effort, this check is the backstop).
async fn orphaned(shared: &Shared, c: &Claimed) -> Result<Option<String>, savepoint_store::StoreError> {
    let Some(parent) = &c.header.parent else {
        return Ok(None);
    };
    let Some(p) = shared.store.header(&parent.thread).await? else {
        return Ok(None);
    };
    if p.status != RunStatus::Cancelled {
        return Ok(None);
    }
    let cancels = p
        .children
        .iter()
        .find(|l| l.thread == c.lease.thread)
        .is_none_or(|l| l.on_parent_cancel == ParentCancel::Cancel);
    let why = p.reason.unwrap_or_default();
    Ok(cancels.then(|| format!("parent {} was cancelled: {why}", parent.thread)))
}

/// A run of a flow-controlled key found no slot (or no start token): it goes back to
/// `pending`, in line, until a slot's release wakes it, or its token is due, or at the latest
/// after [`FLOW_PARK`] (a wake lost to a crash).
async fn wait_in_line(shared: &Shared, lease: &mut Lease, f: &Flow, wait: Acquired) {
    let (due, detail) = match wait {
        Acquired::Rate(d) => (
            d.min(FLOW_PARK),
            format!("start rate of key {} ({}/s)", f.key, f.rate.unwrap_or(0.0)),
        ),
        Acquired::Full(held) => (FLOW_PARK, format!("key {}: {held} of {} slots held", f.key, f.limit)),
        Acquired::Slot | Acquired::Stale(_) => return,
    };
    let how = Suspend::until(RunStatus::Pending, due);
    if let Err(e) = shared.store.suspend(lease, None, how, ("flow_waiting", &detail)).await {
        tracing::debug!(error = %e, "parking a run in line failed; its lease expires");
    }
}

/// Gives the slot of `f` this slice took under `fence` back (`ended`: and the run's place in
/// line), and publishes the tasks of the runs at the head of the line that may take the free
/// slots now.
async fn leave_slot(shared: &Shared, f: &Flow, thread: &ThreadId, fence: Option<u64>, ended: bool) {
    match shared.store.flow_release(f, thread, fence, ended).await {
        Ok(next) => {
            for t in next.iter().filter(|t| *t != thread) {
                let queue = shared.store.run_queue(t).await.ok().flatten();
                publish(shared, t, queue.as_deref(), None, TaskReason::Due, None, 0).await;
            }
        }
        // The slot expires with the lease; the line's safety net rings the waiters.
        Err(e) => tracing::warn!(error = %e, "releasing a flow-control slot failed; it expires with the lease"),
    }
}

/// Blocks the run with `reason`, a block of `kind` (counted under its metric class).
async fn block(
    shared: &Shared,
    c: &Claimed,
    lease: &mut Lease,
    reason: &str,
    kind: BlockKind,
    tail: Tail<'_>,
) -> &'static str {
    if savepoint_runtime::telemetry::outside_spans() {
        tracing::warn!(thread.id = %lease.thread, worker.id = %lease.owner, %reason, "run blocked");
    } else {
        tracing::warn!(%reason, "run blocked");
    }
    inc(&metrics().blocks, &[("reason", plan::block_class(kind))]);
    let how = Finish::Blocked {
        reason,
        kind,
        effect: None,
    };
    match shared.run_store.finish(lease, tail, how, ("blocked", reason)).await {
        Ok(()) => {
            written(c, tail);
            "blocked"
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not record the block");
            "lease_lost"
        }
    }
}

/// After a transient failure, hand the run back quickly (due in a second) instead of
/// waiting for the lease to expire. If Redis is down (or another worker took the run) this
/// fails too, and the lease expiry does the same job later. The write is fenced, so it is
/// safe even past the local deadline.
async fn release_for_retry(shared: &Shared, lease: &mut Lease) {
    let how = Suspend::until(RunStatus::Pending, Duration::from_secs(1));
    let r = shared
        .store
        .suspend(lease, None, how, ("retry_later", "transient error"))
        .await;
    if let Err(e) = r {
        tracing::debug!(error = %e, "release after a transient error failed; the lease will expire");
    }
}

/// [`release_for_retry`] after a slice's body ran: the write carries the entries the slice
/// journaled and had not written (pipelined steps), so they are not run again.
async fn release_carrying(shared: &Shared, c: &Claimed, lease: &mut Lease, tail: Tail<'_>) {
    let how = Suspend::until(RunStatus::Pending, Duration::from_secs(1));
    let r = shared
        .run_store
        .suspend(lease, tail, how, ("retry_later", "transient error"))
        .await;
    match r {
        Ok(_) => written(c, tail),
        Err(e) => tracing::debug!(error = %e, "release after a transient error failed; the lease will expire"),
    }
}

/// Counts the pipelined entries a write of the runtime carried (the `steps` metric).
fn written(c: &Claimed, tail: Tail<'_>) {
    if let Some((_, entries)) = tail {
        savepoint::workflow::engine::count_written(&c.header.workflow, entries);
    }
}

/// Runs its closure when dropped.
struct Guard<F: FnMut()>(F);

impl<F: FnMut()> Drop for Guard<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}

/// A guard that runs `f` when dropped.
fn scopeguard<F: FnMut()>(f: F) -> Guard<F> {
    Guard(f)
}
