//! The context workflow code holds, and the order its calls are journaled in.
//!
//! Calls take `&self`, so several can be in flight at once and compose with ordinary Rust:
//! `futures::join!`, `futures::future::join_all`, `futures::try_join!` over `ctx.step(..)` and
//! `ctx.effect(..)`. What keeps that durable:
//!
//! - **A call's journal index is the order it was first polled in.** A step or an effect
//!   reserves the next index the first time it is polled (under the context's lock, whose
//!   waiters are served first come, first served). `join!` and `join_all` poll their futures in
//!   the order they are written, so the indices are the call order, again on every replay.
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
//!   otherwise the run blocks saying so. An effect dropped while its function ran is in doubt,
//!   and the run blocks on its key: effects are never raced. Race calls with
//!   [`Ctx::select`], which journals the winner.

use std::collections::BTreeSet;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex as SyncMutex, MutexGuard as SyncGuard};
use tokio::sync::{Mutex, MutexGuard, Notify};

use super::ctx::{Core, CtxParts, SliceExit};
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
    /// Entries recorded before this slice.
    recorded: u32,
    thread: ThreadId,
    fence: u64,
    clock: ServerClock,
    exit: Arc<Notify>,
}

/// Index reservations (a plain lock: a dropped call reports itself from `Drop`).
#[derive(Debug, Default)]
struct Seq {
    /// The index the next call reserves.
    reserved: u32,
    /// Turn-taking calls waiting for the calls before them: no call reserves meanwhile.
    gate: u32,
    /// Calls dropped before their entry was journaled.
    dropped: Vec<Dropped>,
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
            recorded: core.journal().len() as u32,
            thread: core.thread_id().clone(),
            fence: core.fence(),
            clock: core.p.server_clock,
            exit: core.exit_signal(),
            cursor: AtomicU32::new(0),
            seq: SyncMutex::new(Seq::default()),
            changed: Notify::new(),
            core: Mutex::new(core),
        }
    }

    /// Server time now (ms), never behind the server's clock: the claim's server time plus
    /// the local monotonic time since its request was sent (virtual under a paused tokio
    /// clock, as in the test kit and the simulator).
    pub fn server_now_ms(&self) -> u64 {
        self.clock.latest()
    }

    /// The run's thread id.
    pub fn thread_id(&self) -> &ThreadId {
        &self.thread
    }

    /// The fencing token of this attempt (monotonic per run: every claim raises it).
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// The index the next call will have (with no call in flight).
    pub fn next_index(&self) -> u32 {
        self.cursor.load(Ordering::Acquire)
    }

    /// True while re-executing recorded calls (for logging: a replayed call does nothing).
    pub fn is_replaying(&self) -> bool {
        self.next_index() < self.recorded
    }

    /// The journal as it stands (recorded plus committed in this slice).
    pub fn journal(&mut self) -> &[Entry] {
        self.core.get_mut().journal()
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
    /// Why the slice stopped, once it has (taken by the runtime).
    pub fn take_exit(&mut self) -> Option<SliceExit> {
        self.core.get_mut().take_exit()
    }

    #[doc(hidden)] // the worker runtime's, not workflow code's
    /// Signalled when the slice stops without the workflow returning.
    pub fn exit_signal(&self) -> Arc<Notify> {
        self.exit.clone()
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

    /// Reserves the next journal index for a step or an effect (waiting while a turn-taking
    /// call waits for its turn); returns the state, still held, and the index.
    pub(super) async fn reserve(&self) -> (Locked<'_>, u32) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let held = self.lock().await;
            {
                let mut seq = self.seq();
                if seq.gate == 0 {
                    let index = seq.reserved;
                    seq.reserved += 1;
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
            if held.cursor >= index {
                return held;
            }
            drop(held);
            changed.await;
        }
    }

    /// The state for a call that takes its turn: once every call before it is journaled, and
    /// kept until it ends, so no call starts meanwhile.
    pub(super) async fn exclusive(&self) -> Locked<'_> {
        let mut gate: Option<GateClosed<'_>> = None;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let mut held = self.lock().await;
            if held.cursor == self.seq().reserved {
                drop(gate);
                held.turn_taking = true;
                return held;
            }
            if gate.is_none() {
                self.seq().gate += 1;
                gate = Some(GateClosed(self));
            }
            drop(held);
            changed.await;
        }
    }

    /// Notes a call dropped before its entry was journaled (from the call's `Drop`).
    fn dropped(&self, d: Dropped) {
        self.seq().dropped.push(d);
        self.changed.notify_waiters();
    }
}

/// A turn-taking call's hold on the gate; reopened when it gets its turn or is dropped.
struct GateClosed<'a>(&'a Ctx);

impl Drop for GateClosed<'_> {
    fn drop(&mut self) {
        let mut seq = self.0.seq();
        seq.gate = seq.gate.saturating_sub(1);
        drop(seq);
        self.0.changed.notify_waiters();
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
            self.ctx.seq().reserved = self.core.cursor;
        }
        self.ctx.cursor.store(self.core.cursor, Ordering::Release);
        if self.turn_taking || self.core.cursor != self.taken_at {
            self.ctx.changed.notify_waiters();
        }
    }
}

impl Locked<'_> {
    /// Deals with the calls dropped before their entry was journaled: an effect whose function
    /// may have started blocks the run in doubt; an effect's intent not acted on is released;
    /// the indices of dropped calls after which no call goes on are given back; a dropped call
    /// with a call after it still going blocks the run (its entry would never be journaled).
    async fn settle_dropped(&mut self) {
        let dropped = std::mem::take(&mut self.ctx.seq().dropped);
        if dropped.is_empty() {
            return;
        }
        for d in &dropped {
            match &d.effect {
                Some((key, true)) => {
                    let holder = Holder {
                        thread: self.ctx.thread.to_string(),
                        index: i64::from(d.index),
                        fence: self.ctx.fence,
                    };
                    let reason = format!(
                        "effect {key} outcome unknown: the call {:?} was dropped while its function ran (a select!, \
                         a timeout or a failing try_join! over ctx calls drops the others); effects are never raced",
                        d.name
                    );
                    return self.core.block_on_key(&reason, key, &holder).await;
                }
                Some((key, false)) => self.core.release_unused(key, d.index).await,
                None => {}
            }
        }
        let mut gone: BTreeSet<u32> = dropped.iter().map(|d| d.index).collect();
        let hole = {
            let mut seq = self.ctx.seq();
            while seq.reserved > self.core.cursor && gone.remove(&(seq.reserved - 1)) {
                seq.reserved -= 1;
            }
            gone.first().copied()
        };
        // A turn-taking call may be waiting for the indices given back.
        self.ctx.changed.notify_waiters();
        if let Some(index) = hole {
            let name = dropped
                .iter()
                .find(|d| d.index == index)
                .map_or("?", |d| d.name.as_str());
            let reason = format!(
                "the call {name:?} (entry {index}) was dropped before it finished while a call after it went on: its \
                 entry would never be journaled. Drop an unfinished ctx call only together with every call made after \
                 it (as a failing try_join! does), and race calls with ctx.select"
            );
            self.core.block(BlockKind::Other, &reason, None).await
        }
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
