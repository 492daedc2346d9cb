//! The seam between the workflow SDK and the store (ARCHITECTURE §2): what a workflow context
//! needs from the checkpoint store, as one object-safe trait. The store crate implements it
//! for its `ScriptStore`; a context holds it as `Arc<dyn RunStore>`, so the SDK never names
//! Redis, Lua or the embedded engine.
//!
//! Every method is the store's own operation of the same name (same arguments, same
//! answers); the futures are boxed so the trait can be a trait object (one allocation a call,
//! next to a store round trip).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde_json::Value;

use crate::error::StoreError;
use crate::ids::{EffectKey, ThreadId};
use crate::journal::Entry;
use crate::model::{CreateOptions, EffectClaim, Finish, Holder, Lease, ParentCancel, RunHeader};
use crate::outcome::{CreateOutcome, EffectDone, EffectRecord, EffectRelease, EffectUnused, Suspend, Suspended};

/// A boxed, sendable future borrowing for `'a`.
pub type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A store operation's answer.
pub type StoreResult<T> = Result<T, StoreError>;

/// The store settings a context reads: how long one store command may take, how long a run
/// waits before its task is delivered again, and how often a parent polls a child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreTimings {
    /// Bound on one store command (a release at the end of a slice waits at most this long).
    pub command_timeout: Duration,
    /// The safety-net redelivery delay (a suspended run's due time without a wake time).
    pub redeliver: Duration,
    /// How often a parent waiting on a child reads the child's header.
    pub child_poll: Duration,
}

/// The checkpoint store as a workflow context uses it: fenced journal writes of the run the
/// lease holds, effect records, children and header reads.
#[allow(clippy::too_many_arguments)]
pub trait RunStore: Send + Sync + 'static {
    /// The settings a context reads.
    fn timings(&self) -> StoreTimings;

    // ---- fenced writes of the run the lease holds ----

    /// Appends `entries` from journal index `first` in one write (compare-and-swap on the
    /// lease's version and fence); the event and the consumed signal are the last entry's.
    fn commit<'a>(
        &'a self,
        lease: &'a mut Lease,
        first: u32,
        entries: &'a [Entry],
        event: (&'a str, &'a str),
        consume_signal: Option<&'a str>,
    ) -> BoxFut<'a, StoreResult<()>>;

    /// Suspends the run (sleeping, waiting, pending), appending the slice's unwritten entries
    /// (from index `.0`) in the same write.
    fn suspend<'a>(
        &'a self,
        lease: &'a mut Lease,
        entries: Option<(u32, &'a [Entry])>,
        how: Suspend<'a>,
        event: (&'a str, &'a str),
    ) -> BoxFut<'a, StoreResult<Suspended>>;

    /// Ends the slice: completed, failed, blocked or handed back, appending the slice's
    /// unwritten entries first (from index `.0`).
    fn finish<'a>(
        &'a self,
        lease: &'a mut Lease,
        entries: Option<(u32, &'a [Entry])>,
        how: Finish<'a>,
        event: (&'a str, &'a str),
    ) -> BoxFut<'a, StoreResult<()>>;

    /// Sets a note field on the run's header (fenced).
    fn note<'a>(&'a self, lease: &'a Lease, field: &'a str, value: &'a str) -> BoxFut<'a, StoreResult<()>>;

    /// Records an event of type `typ` in the run's events (fenced: only the lease holder's
    /// is written), e.g. a decision the worker took that an operator should see.
    fn event<'a>(&'a self, lease: &'a Lease, typ: &'a str, detail: &'a str) -> BoxFut<'a, StoreResult<()>>;

    /// Records a failed attempt of the call at `index` and, when it is retried, the back-off
    /// before its next attempt (the run's waiting cause meanwhile).
    fn retried<'a>(
        &'a self,
        lease: &'a Lease,
        index: u32,
        attempt: u32,
        detail: &'a str,
        backoff: Option<std::time::Duration>,
    ) -> BoxFut<'a, StoreResult<()>>;

    // ---- effect records ----

    /// Records that the effect at `index` is about to take its key (the begin record).
    fn effect_begin<'a>(
        &'a self,
        lease: &'a Lease,
        index: u32,
        key: &'a EffectKey,
        name: &'a str,
    ) -> BoxFut<'a, StoreResult<Option<String>>>;

    /// Takes (or takes over) the effect key's intent.
    fn effect_intent<'a>(
        &'a self,
        key: &'a EffectKey,
        thread: &'a ThreadId,
        index: u32,
        fence: u64,
        takeover: bool,
    ) -> BoxFut<'a, StoreResult<EffectClaim>>;

    /// Records the effect's result under its key.
    fn effect_done<'a>(
        &'a self,
        key: &'a EffectKey,
        thread: &'a ThreadId,
        index: u32,
        fence: u64,
        result: &'a Value,
    ) -> BoxFut<'a, StoreResult<EffectDone>>;

    /// Gives the effect key's intent back.
    fn effect_release<'a>(
        &'a self,
        key: &'a EffectKey,
        thread: &'a ThreadId,
        index: u32,
        fence: u64,
    ) -> BoxFut<'a, StoreResult<EffectRelease>>;

    /// Reopens a done record this attempt wrote (its entry could not be journaled).
    fn effect_reopen<'a>(
        &'a self,
        key: &'a EffectKey,
        thread: &'a ThreadId,
        index: u32,
        fence: u64,
    ) -> BoxFut<'a, StoreResult<bool>>;

    /// Records that the attempt with `fence` never called the effect at `index`.
    fn effect_unused<'a>(
        &'a self,
        thread: &'a ThreadId,
        index: u32,
        fence: u64,
    ) -> BoxFut<'a, StoreResult<EffectUnused>>;

    /// Settles an effect's result outside a lease (the holder named, if any, must still hold it).
    fn settle_done<'a>(
        &'a self,
        key: &'a EffectKey,
        thread: &'a ThreadId,
        result: &'a Value,
        expect: Option<&'a Holder>,
    ) -> BoxFut<'a, StoreResult<EffectDone>>;

    /// Frees an intent whose owner run has ended (`owner_status`).
    fn effect_orphan<'a>(
        &'a self,
        key: &'a EffectKey,
        owner: &'a ThreadId,
        index: u32,
        owner_status: &'a str,
    ) -> BoxFut<'a, StoreResult<bool>>;

    /// The effect key's record, if any.
    fn effect_state<'a>(&'a self, key: &'a EffectKey) -> BoxFut<'a, StoreResult<Option<EffectRecord>>>;

    /// Removes the effect record's expiry (a run still needs it).
    fn effect_keep<'a>(&'a self, key: &'a EffectKey) -> BoxFut<'a, StoreResult<()>>;

    /// Run `thread` journaled its entry at `index` for the effect: its done record gets its
    /// expiry where that run owns it or its owner journaled it already. True when it did.
    fn effect_expire<'a>(
        &'a self,
        key: &'a EffectKey,
        thread: &'a ThreadId,
        index: u32,
    ) -> BoxFut<'a, StoreResult<bool>>;

    // ---- children and reads ----

    /// A run's header, if the run exists.
    fn header<'a>(&'a self, thread: &'a ThreadId) -> BoxFut<'a, StoreResult<Option<RunHeader>>>;

    /// Links a child run to the parent the lease holds, at the parent's `index`.
    fn child_link<'a>(
        &'a self,
        lease: &'a Lease,
        index: u32,
        child: &'a ThreadId,
        on_parent_cancel: ParentCancel,
        detail: &'a str,
    ) -> BoxFut<'a, StoreResult<()>>;

    /// Creates a run (idempotent on the same workflow and input).
    fn create_with<'a>(
        &'a self,
        thread: &'a ThreadId,
        workflow: &'a str,
        workflow_version: u32,
        input: &'a str,
        trace: &'a str,
        opts: &'a CreateOptions,
    ) -> BoxFut<'a, StoreResult<CreateOutcome>>;
}
