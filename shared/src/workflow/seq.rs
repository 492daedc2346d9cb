//! The context workflow code holds, and the order its calls are journaled in.
//!
//! Calls take `&self`, so several can be in flight at once and compose with ordinary Rust:
//! `futures::join!`, `futures::future::join_all`, `futures::try_join!` over `ctx.step(..)` and
//! `ctx.effect(..)`. What keeps that durable:
//!
//! - **A call's journal index is the order it was first polled in.** Every call takes a ticket
//!   the first time it is polled; steps and effects reserve their index, and other calls take
//!   their turn, strictly in ticket order. `join!` and `join_all` poll their futures in the
//!   order they are written, so the indices are the call order, again on every replay.
//! - **Every call yields once before it ends**, replayed or live, so a replay, where recorded
//!   calls finish at once, polls the other branches of a join when the first run did (a live
//!   call always waits for its commit): a branch that makes its next call after its first one
//!   gets the same ticket on replay.
//! - **Entries are journaled in index order.** Calls run concurrently; each one's entry waits
//!   until every call before it is journaled, so the journal after a crash always holds a prefix,
//!   and a resumed run replays it and runs the rest again, concurrently.
//! - **Effects keep every exactly-once rule of a lone effect**: the intent is taken before the
//!   function starts, the key is marked done the moment the function returns (not when its turn
//!   to be journaled comes), and a function cut off is in doubt under its policy.
//! - **Every other call waits its turn**: a sleep, a wait, a recorded value, a child or a race
//!   runs once every call before it is journaled, and no call after it starts before it ends
//!   (it may take more than one entry).
//! - **A dropped call** (a `select!`, a timeout or a failing `try_join!` drops the others) never
//!   leaves a hole: a dropped step is as if never made when every call after it is dropped too;
//!   otherwise the run blocks saying so. A dropped effect blocks the run (in doubt on its key if
//!   its function may have run): effects are never raced, and an effect's index is never given
//!   to another call. Race calls with [`Ctx::select`], which journals the winner.
//! - **No ctx call inside a step's or an effect's function**: the function runs outside the
//!   journal; such a call panics with a message, which fails the attempt.

use std::collections::BTreeSet;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex as SyncMutex, MutexGuard as SyncGuard};
use std::task::Poll;
use tokio::sync::{Mutex, MutexGuard, Notify};

use super::ctx::{Core, CtxParts, Parked, SliceExit};
use crate::ids::{EffectKey, ThreadId};
use crate::journal::Entry;
use savepoint_core::lease::ServerClock;
use savepoint_core::model::{BlockKind, Holder, Lease};

/// The handle workflow code journals its calls through. Every call takes `&self`, so calls can
/// run side by side (see the module's documentation for the order they are journaled in).
pub struct Ctx {
    core: Mutex<Core>,
    seq: SyncMutex<Seq>,
    /// Woken when a call is journaled, a call is dropped, or a turn-taking call ends.
    changed: Notify,
    /// The journal cursor as of the last call that let go of the state.
    cursor: AtomicU32,
    thread: ThreadId,
    /// What changes from slice to slice (a parked body goes on in the run's next slice).
    slice: SyncMutex<SliceFacts>,
    exit: Arc<Notify>,
    /// Step or effect functions being polled right now (a ctx call inside one is refused).
    in_function: Arc<AtomicU32>,
    /// Where a parking slice leaves its report ([`Ctx::take_parked`]).
    parked: Arc<SyncMutex<Option<Parked>>>,
}

/// The facts of the slice a context runs, read without its state.
#[derive(Clone, Copy)]
struct SliceFacts {
    /// Entries recorded before this slice.
    recorded: u32,
    fence: u64,
    clock: ServerClock,
}

/// Tickets and index reservations (a plain lock: a dropped call reports itself from `Drop`).
#[derive(Debug, Default)]
struct Seq {
    /// The ticket the next call takes.
    next_ticket: u64,
    /// The ticket whose turn it is (every ticket before it reserved, took its turn or was
    /// dropped).
    granted: u64,
    /// Tickets dropped before their turn: skipped when it comes.
    skipped: BTreeSet<u64>,
    /// The index the next call reserves.
    reserved: u32,
    /// Calls dropped before their entry was journaled.
    dropped: Vec<Dropped>,
}

impl Seq {
    /// Whether it is `ticket`'s turn (moving past dropped tickets first).
    fn turn_of(&mut self, ticket: u64) -> bool {
        while self.skipped.remove(&self.granted) {
            self.granted += 1;
        }
        self.granted == ticket
    }
}

/// A call dropped before its entry was journaled.
#[derive(Debug)]
struct Dropped {
    index: u32,
    name: String,
    /// An effect's key, and whether its function may have started.
    effect: Option<(EffectKey, bool)>,
}

impl Ctx {
    #[doc(hidden)] // the worker runtime's, not workflow code's
    /// A context over a claimed run.
    pub fn new(parts: CtxParts) -> Self {
        let core = Core::new(parts);
        Self {
            slice: SyncMutex::new(SliceFacts {
                recorded: core.journal().len() as u32,
                fence: core.fence(),
                clock: core.p.server_clock,
            }),
            thread: core.thread_id().clone(),
            exit: core.exit_signal(),
            in_function: core.in_function.clone(),
            parked: core.parked.clone(),
            cursor: AtomicU32::new(0),
            seq: SyncMutex::new(Seq::default()),
            changed: Notify::new(),
            core: Mutex::new(core),
        }
    }

    fn facts(&self) -> SliceFacts {
        *self.slice.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Server time now (ms), never behind the server's clock: the claim's server time plus
    /// the local monotonic time since its request was sent (virtual under a paused tokio
    /// clock, as in the test kit and the simulator).
    pub fn server_now_ms(&self) -> u64 {
        self.facts().clock.latest()
    }

    /// The run's thread id.
    pub fn thread_id(&self) -> &ThreadId {
        &self.thread
    }

    /// The fencing token of this attempt (monotonic per run: every claim raises it).
    pub fn fence(&self) -> u64 {
        self.facts().fence
    }

    #[doc(hidden)] // the worker runtime's, not workflow code's
    /// Takes the report of a slice whose body parked (see [`Parked`]), once the body stopped.
    pub fn take_parked(&self) -> Option<Parked> {
        self.parked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    #[doc(hidden)] // the worker runtime's, not workflow code's
    /// Whether a body that parked at journal position `at` may be kept: the call that parked
    /// is the only one in flight (no call reserved an index past it, none took a ticket after
    /// it, none was dropped unsettled), so the body holds nothing that runs on while it waits
    /// (a step's or an effect's function in another branch).
    pub fn parkable(&self, at: u32) -> bool {
        let seq = self.seq();
        seq.dropped.is_empty() && seq.reserved <= at + 1 && seq.next_ticket <= seq.granted + 1
    }

    #[doc(hidden)] // the worker runtime's, not workflow code's
    /// Goes on with a parked body in the run's next slice: `parts` are that slice's (its
    /// claim's lease, signals, clocks and tokens), with `parts.journal` the entries past the
    /// entries `parked` says the context holds. False if the body is gone (nothing to resume).
    pub fn resume(&self, parts: CtxParts, parked: &Parked) -> bool {
        {
            let mut f = self.slice.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            f.recorded = parked.held + parts.journal.len() as u32;
            f.fence = parts.lease.fence;
            f.clock = parts.server_clock;
        }
        parked.resume.send(Box::new(parts)).is_ok()
    }

    /// The index the next call will have (with no call in flight).
    pub fn next_index(&self) -> u32 {
        self.cursor.load(Ordering::Acquire)
    }

    /// True while re-executing recorded calls (for logging: a replayed call does nothing).
    pub fn is_replaying(&self) -> bool {
        self.next_index() < self.facts().recorded
    }

    /// The journal as it stands (recorded plus committed in this slice).
    pub fn journal(&mut self) -> &[Entry] {
        self.core.get_mut().journal()
    }

    #[doc(hidden)] // the worker runtime's, not workflow code's
    /// Takes the journal out of a context whose slice is over, with its encoded size in bytes
    /// (the runtime keeps it for the run's next slice), if all of it is acknowledged by the
    /// store; `None` (and the journal stays) otherwise.
    pub fn take_journal(&mut self) -> Option<(Vec<Entry>, u64)> {
        self.core.get_mut().take_journal()
    }

    #[doc(hidden)] // the worker runtime's, not workflow code's
    /// Live calls executed in this slice.
    pub fn live_calls(&mut self) -> u32 {
        self.core.get_mut().live_calls()
    }

    #[doc(hidden)] // the worker runtime's, not workflow code's
    /// The lease (after the slice: its latest version).
    pub fn lease(&mut self) -> &Lease {
        self.core.get_mut().lease()
    }

    #[doc(hidden)] // the worker runtime's, not workflow code's
    /// Once the body returned: waits for the pipelined commit in flight and copies the entries
    /// not sent yet, which the write ending the slice carries (index of the first, entries).
    /// An error: the commit in flight failed or was refused; the slice must not end the run.
    pub async fn unsent(&mut self) -> Result<(u32, Vec<Entry>), savepoint_core::StoreError> {
        let core = self.core.get_mut();
        core.landed().await?;
        Ok(core.unsent_entries())
    }

    #[doc(hidden)] // the worker runtime's, not workflow code's
    /// Why the slice stopped, once it has (taken by the runtime).
    pub fn take_exit(&mut self) -> Option<SliceExit> {
        self.core.get_mut().take_exit()
    }

    #[doc(hidden)] // the registry's, not workflow code's
    /// The run's input as this code's version of `T` reads it: upgraded through the declared
    /// migrations from the version the starting code stamped (a run blocks on one it cannot
    /// upgrade).
    pub async fn upgraded_input<T: 'static>(&self, input: serde_json::Value) -> serde_json::Value {
        let mut core = self.core.lock().await;
        let tv = core.p.input_version;
        core.upgraded_as(super::ctx::Reader::of::<T>(), super::ctx::Subject::Input, tv, input)
            .await
    }

    #[doc(hidden)] // the worker runtime's, not workflow code's
    /// How many migrations this slice applied to recorded values (`replay-check` reports the
    /// runs that need one).
    pub fn migrations_applied(&mut self) -> u32 {
        self.core.get_mut().migrated
    }

    #[doc(hidden)] // the worker runtime's, not workflow code's
    /// Signalled when the slice stops without the workflow returning.
    pub fn exit_signal(&self) -> Arc<Notify> {
        self.exit.clone()
    }

    /// Whether the call at `index` is alone in flight: no call was reserved after it and every
    /// call before it is journaled (so stopping the slice now cuts no other call off). A
    /// state held by another call counts as not alone.
    pub(super) fn alone(&self, index: u32) -> bool {
        if self.seq().reserved != index + 1 {
            return false;
        }
        self.core.try_lock().is_ok_and(|core| core.cursor == index)
    }

    fn seq(&self) -> SyncGuard<'_, Seq> {
        // (Nothing panics while holding it; a poisoned lock still holds consistent data.)
        self.seq.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The state, once the calls dropped since the last holder are dealt with.
    pub(super) async fn lock(&self) -> Locked<'_> {
        let core = self.core.lock().await;
        let mut held = Locked {
            ctx: self,
            taken_at: core.cursor,
            core,
            turn_taking: false,
        };
        held.settle_dropped().await;
        held
    }

    /// A ticket for a call's first poll: calls reserve and take turns in ticket order.
    /// Refused (a panic, which fails the attempt with its message) inside a step's or an
    /// effect's function.
    fn ticket(&self, what: &str) -> Ticket<'_> {
        assert!(
            self.in_function.load(Ordering::Relaxed) == 0,
            "{what} was called inside the function of a step or an effect: a function runs outside the journal \
             (it may run again, or in another process); make the call in the workflow, around the step"
        );
        let mut seq = self.seq();
        let t = seq.next_ticket;
        seq.next_ticket += 1;
        Ticket {
            ctx: self,
            t,
            used: false,
        }
    }

    /// Reserves the next journal index for the step or effect `name` in its ticket's turn;
    /// returns the state, still held, and the index.
    pub(super) async fn reserve(&self, name: &str) -> (Locked<'_>, u32) {
        let mut ticket = self.ticket(name);
        self.yield_once().await;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let held = self.lock().await;
            {
                let mut seq = self.seq();
                if seq.turn_of(ticket.t) {
                    let index = seq.reserved;
                    seq.reserved += 1;
                    seq.granted += 1;
                    ticket.used = true;
                    return (held, index);
                }
            }
            drop(held);
            changed.await;
        }
    }

    /// The state once the call at `index` is next to be journaled.
    pub(super) async fn turn(&self, index: u32) -> Locked<'_> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let held = self.lock().await;
            debug_assert!(held.cursor <= index, "entry {index} journaled out of turn");
            if held.cursor >= index {
                return held;
            }
            drop(held);
            changed.await;
        }
    }

    /// The state for the call `what` that takes its turn: in its ticket's turn, once every
    /// call before it is journaled, and kept until it ends, so no call starts meanwhile.
    pub(super) async fn exclusive(&self, what: &str) -> Locked<'_> {
        let mut ticket = self.ticket(what);
        self.yield_once().await;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let mut held = self.lock().await;
            let ready = {
                let mut seq = self.seq();
                seq.turn_of(ticket.t) && held.cursor == seq.reserved
            };
            if ready {
                ticket.used = true;
                held.turn_taking = true;
                return held;
            }
            drop(held);
            changed.await;
        }
    }

    /// Returns `Pending` once (waking itself at once): every call yields once after taking
    /// its ticket, so a replayed call lets the other branches of a join run as a live call,
    /// which always waits for its commit, would.
    async fn yield_once(&self) {
        let mut yielded = false;
        std::future::poll_fn(|cx| {
            if yielded {
                Poll::Ready(())
            } else {
                yielded = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        })
        .await
    }

    #[doc(hidden)] // the worker runtime's, not workflow code's
    /// Deals with the calls the workflow dropped unfinished, once its body returned (an effect
    /// dropped while its function ran blocks the run, whatever the body returned).
    pub async fn settle_dropped(&self) {
        drop(self.lock().await);
    }

    /// Notes a call dropped before its entry was journaled (from the call's `Drop`).
    fn dropped(&self, d: Dropped) {
        self.seq().dropped.push(d);
        self.changed.notify_waiters();
    }
}

/// Runs `fut` with the function counter `depth` raised while it is polled.
pub(super) async fn in_function<T>(depth: &AtomicU32, fut: impl std::future::Future<Output = T>) -> T {
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(|cx| {
        depth.fetch_add(1, Ordering::Relaxed);
        let _lower = Lower(depth);
        fut.as_mut().poll(cx)
    })
    .await
}

/// Lowers the function counter again, even if the poll panicked.
struct Lower<'a>(&'a AtomicU32);

impl Drop for Lower<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A call's ticket; dropped before its turn, the turn skips it.
struct Ticket<'a> {
    ctx: &'a Ctx,
    t: u64,
    used: bool,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if self.used {
            return;
        }
        self.ctx.seq().skipped.insert(self.t);
        self.ctx.changed.notify_waiters();
    }
}

/// The context's state, held by one call at a time.
pub(super) struct Locked<'a> {
    ctx: &'a Ctx,
    core: MutexGuard<'a, Core>,
    /// A turn-taking call holds it: the next reservation starts where its entries end.
    turn_taking: bool,
    /// The cursor when it was taken: waiters are woken only if it moved (a holder that
    /// changed nothing wakes no one, or two waiters would wake each other forever).
    taken_at: u32,
}

impl Deref for Locked<'_> {
    type Target = Core;
    fn deref(&self) -> &Core {
        &self.core
    }
}

impl DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Core {
        &mut self.core
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        if self.turn_taking {
            let mut seq = self.ctx.seq();
            seq.reserved = self.core.cursor;
            seq.granted += 1;
        }
        self.ctx.cursor.store(self.core.cursor, Ordering::Release);
        if self.turn_taking || self.core.cursor != self.taken_at {
            self.ctx.changed.notify_waiters();
        }
    }
}

impl Locked<'_> {
    /// Deals with the calls dropped before their entry was journaled (one dropped after its
    /// entry was written counts as journaled): a dropped effect blocks the run, in doubt on its
    /// key if its function may have run (its index is never given to another call: the run
    /// recorded its key there); the indices of dropped steps after which no call goes on are
    /// given back; a dropped step with a call after it still going blocks the run (its entry
    /// would never be journaled).
    async fn settle_dropped(&mut self) {
        let cursor = self.core.cursor;
        let (effect, hole) = {
            let mut seq = self.ctx.seq();
            seq.dropped.retain(|d| d.index >= cursor);
            if seq.dropped.is_empty() {
                return;
            }
            let effect = seq
                .dropped
                .iter()
                .find(|d| d.effect.is_some())
                .map(|d| (d.index, d.name.clone(), d.effect.clone()));
            let mut gone: BTreeSet<u32> = seq.dropped.iter().map(|d| d.index).collect();
            if effect.is_none() {
                while seq.reserved > cursor && gone.remove(&(seq.reserved - 1)) {
                    seq.reserved -= 1;
                }
                let hole = gone.first().copied();
                let names: Vec<(u32, String)> = seq.dropped.iter().map(|d| (d.index, d.name.clone())).collect();
                if hole.is_none() {
                    seq.dropped.clear();
                }
                (
                    None,
                    hole.map(|i| {
                        (
                            i,
                            names
                                .into_iter()
                                .find(|(x, _)| *x == i)
                                .map(|(_, n)| n)
                                .unwrap_or_default(),
                        )
                    }),
                )
            } else {
                (effect, None)
            }
        };
        // A turn-taking call may be waiting for the indices given back.
        self.ctx.changed.notify_waiters();
        if let Some((index, name, Some((key, called)))) = effect {
            return self.block_dropped_effect(index, &name, &key, called).await;
        }
        if let Some((index, name)) = hole {
            let reason = format!(
                "the call {name:?} (entry {index}) was dropped before it finished while a call after it went on: its \
                 entry would never be journaled. Drop an unfinished ctx call only together with every call made after \
                 it (as a failing try_join! does), and race calls with ctx.select"
            );
            self.core.block(BlockKind::Other, &reason, None).await
        }
    }

    /// Blocks the run on the effect `name` at `index`, dropped before its entry was journaled.
    async fn block_dropped_effect<T>(&mut self, index: u32, name: &str, key: &EffectKey, called: bool) -> T {
        if called {
            let holder = Holder {
                thread: self.ctx.thread.to_string(),
                index: i64::from(index),
                fence: self.ctx.fence(),
            };
            let reason = format!(
                "effect {key} outcome unknown: the call {name:?} was dropped while its function ran (a select!, a \
                 timeout or a failing try_join! over ctx calls drops the others); effects are never raced"
            );
            return self.core.block_on_key(&reason, key, &holder).await;
        }
        let reason = format!(
            "the effect {name:?} (key {key}, entry {index}) was dropped before its entry was journaled (a select!, a \
             timeout or a failing try_join! over ctx calls drops the others): the run recorded its key at that entry, \
             so no other call may take it. Write effects before the calls that may fail in a try_join!, or use join!; \
             retry the run after the fix"
        );
        self.core.block(BlockKind::Other, &reason, None).await
    }
}

/// A step's or an effect's claim on its index until its entry is journaled: dropped before
/// then, it tells the context (see [`Locked::settle_dropped`]).
pub(super) struct Reserved<'a> {
    ctx: &'a Ctx,
    index: u32,
    name: &'a str,
    effect: Option<EffectKey>,
    /// The effect's function may have started and its key is not settled.
    called: bool,
    journaled: bool,
}

impl<'a> Reserved<'a> {
    pub(super) fn new(ctx: &'a Ctx, index: u32, name: &'a str) -> Self {
        Self {
            ctx,
            index,
            name,
            effect: None,
            called: false,
            journaled: false,
        }
    }

    /// The call is an effect on `key` whose intent it is taking.
    pub(super) fn effect(&mut self, key: EffectKey) {
        self.effect = Some(key);
    }

    /// Whether the effect's function may have started with its key unsettled.
    pub(super) fn called(&mut self, called: bool) {
        self.called = called;
    }

    /// The entry is journaled (or was replayed).
    pub(super) fn journaled(mut self) {
        self.journaled = true;
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        if self.journaled {
            return;
        }
        self.ctx.dropped(Dropped {
            index: self.index,
            name: self.name.to_owned(),
            effect: self.effect.take().map(|k| (k, self.called)),
        });
    }
}
