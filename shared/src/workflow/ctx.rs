//! The workflow context: replay of recorded entries, live execution with a fenced commit
//! per call, and suspension without user-visible errors.

use futures::FutureExt;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::commit::{plan_commit, CommitPlan, JournalSize, Write};
use super::pipeline::{may_pipeline, Pipeline};
use super::{RetryPolicy, StepError, WorkflowError};
use crate::ids::{EffectKey, ThreadId};
use crate::journal::{Entry, EntryKind, Outcome};
use savepoint_core::failpoints::{Action, Failpoints};
use savepoint_core::lease::LeaseClock;
use savepoint_core::metrics::{inc, metrics};
use savepoint_core::model::{
    is_value_feature, value_feature, BlockKind, Finish, Holder, Lease, OutputVersion, RunStatus,
};
use savepoint_core::outcome::Suspend;
use savepoint_core::seam::RunStore;
use savepoint_core::StoreError;

/// Why a slice of a run ended without the workflow returning. The runtime acts on it.
#[derive(Debug, Clone, PartialEq)]
pub enum SliceExit {
    /// Sleeping, waiting or backing off; committed. `woke`: it is already runnable again
    /// and needs a task.
    Suspended {
        /// Needs a task now.
        woke: bool,
        /// The run's ring version, for marking the task queued once published.
        rv: u64,
    },
    /// Yielded after the slice budget or on shutdown; committed as pending: publish a
    /// continuation task (then mark it queued with this ring version).
    Yielded {
        /// The run's ring version.
        rv: u64,
        /// The task queue the continuation goes to, when the next call is routed to another
        /// queue than this worker serves (`None`: the run's current queue).
        queue: Option<String>,
    },
    /// Blocked with a reason; committed.
    Blocked(String),
    /// Failed by the runtime (journal limit); committed.
    Failed(String),
    /// Another worker or an operator took the run; nothing was written.
    LeaseLost(String),
    /// Redis unreachable or an injected error; the lease will expire and the run resumes.
    Transient(String),
    /// The local lease deadline passed (Redis not confirming the lease, or the process
    /// stalled): nothing more is started; the run is handed back if Redis lets us.
    DeadlinePassed(String),
    /// Replay-only mode reached a call that is not in the journal.
    WouldRunLive(String),
}

pub use savepoint_core::model::SliceLimits;

/// What the runtime hands a context.
pub struct CtxParts {
    /// The store to commit to (the seam: the SDK never names the store's engine).
    pub store: Arc<dyn RunStore>,
    /// The lease from the claim.
    pub lease: Lease,
    /// Recorded entries.
    pub journal: Vec<Entry>,
    /// The bytes of `journal` encoded, when the runtime knows them (a journal it kept from an
    /// earlier slice of the run); `None`: counted here, by encoding every entry.
    pub journal_bytes: Option<u64>,
    /// Buffered signal values.
    pub signals: BTreeMap<String, Value>,
    /// Budgets.
    pub limits: SliceLimits,
    /// Failpoints of this worker.
    pub failpoints: Failpoints,
    /// Cancelled when the lease is lost (a running step is dropped).
    pub lease_lost: CancellationToken,
    /// The local lease deadline (extended by every confirmed lease-extending write).
    pub clock: LeaseClock,
    /// Takeovers at the current journal position so far (from the claim): after a crash the
    /// first live call is recorded, so a poison run's reason can name it.
    pub crashes: u32,
    /// How often the run has backed off on an effect key held by another run (from the
    /// claim), so the back-off keeps growing.
    pub busy_tries: u32,
    /// Failed attempts a previous slice recorded by journal index (from the claim): a call
    /// that was being retried goes on from the next attempt, under the same budget.
    pub tries: BTreeMap<u32, u32>,
    /// The run's deadline (server ms), if it was started with a timeout: no live call starts
    /// after it, and a call in flight when it passes is dropped; the run fails.
    pub deadline: Option<u64>,
    /// Cancelled when the worker shuts down (the run yields at the next call).
    pub shutdown: CancellationToken,
    /// Default retry policy of the workflow.
    pub retry: RetryPolicy,
    /// Replay-only: never execute or write anything (determinism checks).
    pub replay_only: bool,
    /// Workflow name (metric label).
    pub workflow: String,
    /// Test doubles and live-call counts (the test kit; `None` in production).
    pub stubs: Option<super::Stubs>,
    /// Publishes the start tasks of child runs (the worker's broker); `None`: the due
    /// scanner's safety net publishes them.
    pub tasks: Option<Arc<dyn super::child::TaskSink>>,
    /// Task queues (`None`: no routing, every call runs here, as in the test kit).
    pub routing: Option<Routing>,
    /// The server's clock as the claim read it: the run's clock (`now()`, wake times, entry
    /// timestamps, the run's deadline) is server time, carried on by the local monotonic
    /// clock. Its latest reading decides whether a call may start before the run's deadline,
    /// its earliest when a run may be failed for it.
    pub server_clock: savepoint_core::lease::ServerClock,
    /// The W3C `traceparent` of the current span, if tracing exports (a child run's start
    /// carries it); the process runtime hands its telemetry's, the test kit `|| None`.
    pub traceparent: fn() -> Option<String>,
    /// The workflow's versioned value types ([`Workflow::versions`](super::Workflow::versions)):
    /// what a recorded value is stamped with and upgraded by.
    pub versions: Arc<super::Versions>,
    /// The version of the run's input's type as the starting code stamped it (`None`: 1).
    pub input_version: Option<u32>,
    /// The run's `needs` (its header's): a slice that records a versioned value adds the run
    /// feature `value_versions` first, unless it is there.
    pub needs: Vec<String>,
    /// The value features (`value:<type>@<v>`) the serving worker's claims name: a value
    /// recorded at a version other code declared (a child's output) adds its type's feature
    /// to the run's `needs` only where this worker knows it, so the run is never left waiting
    /// for a feature no worker of its fleet names.
    pub value_features: Arc<[String]>,
    /// The runtime may park the workflow between slices ([`Parked`]): a sleep, a wait or a
    /// yield then waits for the run's next slice instead of ending the body, so the next
    /// slice on this worker goes on from there instead of replaying the journal. `false`
    /// (replay-only checks): every suspension ends the body.
    pub park: bool,
}

/// A slice whose workflow body parked at a sleep, a wait or a yield, with every entry
/// durable: what the runtime reads of it while the body holds the context's state (see
/// `Ctx::take_parked`). The runtime keeps the body and, at the run's next claim on this
/// worker, either resumes it (`Ctx::resume`) or drops it and replays.
#[derive(Debug, Clone)]
pub struct Parked {
    /// Why the slice stopped (a suspension or a yield).
    pub exit: SliceExit,
    /// The journal position the body reached.
    pub at: u32,
    /// The entries the context holds (a prefix of the run's journal).
    pub held: u32,
    /// The run's journal length if no other slice writes it before the next claim: `held`,
    /// plus the entry the suspension wrote (a sleep's). Only then may the body go on.
    pub expect: u32,
    /// The last entry held (the claim repeats it, to prove the run's journal goes on from it).
    pub last: Option<Entry>,
    /// The encoded size of the entries held.
    pub bytes: u64,
    /// The lease after the slice's last write.
    pub lease: Lease,
    /// Live calls in the slice.
    pub live: u32,
    /// Hands the parked body the parts of the run's next slice ([`Ctx::resume`]).
    // Boxed: a channel allocates its first block of 32 slots at once, and the parts are large
    // (32 of them inline cost a parked body about 50 KB).
    pub(super) resume: tokio::sync::mpsc::UnboundedSender<Box<CtxParts>>,
}

/// How a call reads and stamps the recorded values of its type `T`, without being generic
/// over it ([`Versions::upgrade`](super::Versions::upgrade) and `version_of` for `T`).
#[derive(Clone, Copy)]
pub(super) struct Reader {
    upgrade: fn(&super::Versions, Option<u32>, Value) -> super::versions::Upgrade,
    version_of: fn(&super::Versions) -> Option<u32>,
    name_of: fn(&super::Versions) -> Option<&'static str>,
    /// Declarations beside the run's own workflow's: a child workflow's, where its output's
    /// type is declared.
    also: Option<fn() -> super::Versions>,
    /// Every value is read as it was recorded, whatever its version.
    as_is: bool,
}

impl Reader {
    /// The reader of `T`'s values.
    pub(super) fn of<T: 'static>() -> Self {
        Self {
            upgrade: super::Versions::upgrade::<T>,
            version_of: super::Versions::version_of::<T>,
            name_of: super::Versions::name_of::<T>,
            also: None,
            as_is: false,
        }
    }

    /// The reader of the outputs of `W`'s runs awaited as children: its output's type as `W`
    /// declares it ([`Workflow::versions`](super::Workflow::versions)), or this run's workflow.
    pub(super) fn output_of<W: super::Workflow>() -> Self {
        Self {
            also: Some(W::versions),
            ..Self::of::<W::Output>()
        }
    }

    /// The reader of values taken as they were recorded, whatever version of their type the
    /// code that wrote them declared: never upgraded, never refused (a child run's output
    /// awaited by workflow name, whose type's versions are the child's code's; a call's value
    /// with no type, such as a started child's thread id).
    pub(super) fn as_is() -> Self {
        Self {
            as_is: true,
            ..Self::of::<Unversioned>()
        }
    }
}

/// How a value recorded by other code is taken ([`Core::take_recorded`]).
pub(super) enum Recorded {
    /// Journaled at this version (`None`: as it is, no version).
    At(Option<u32>),
    /// Given back to a worker that reads it ([`Core::give_back`]).
    GiveBack,
}

/// What a value being upgraded is, for the reason of a refusal.
#[derive(Clone, Copy)]
pub(super) enum Subject<'a> {
    /// The value a call recorded (its kind and name).
    Entry(EntryKind, &'a str),
    /// The run's input.
    Input,
}

/// The type no workflow declares ([`Reader::as_is`]).
struct Unversioned;

/// What a worker serves and where a run belongs, for routing calls to task queues.
#[derive(Debug, Clone)]
pub struct Routing {
    /// The task queues this worker consumes (shared by every slice of the worker).
    pub served: Arc<[String]>,
    /// The run's home queue: where its calls run unless a call is routed elsewhere.
    pub home: String,
}

/// An effect intent this slice took and has not settled.
#[derive(Debug, Clone)]
pub(super) struct HeldIntent {
    pub key: EffectKey,
    pub index: u32,
    /// The effect function may have started: the outcome is unknown if the slice stops now.
    pub called: bool,
}

/// The context's state: what a call reads and writes, one call at a time (the [`Ctx`] it sits
/// in hands it out under its lock; see `seq.rs`).
pub(super) struct Core {
    pub(super) p: CtxParts,
    pub(super) cursor: u32,
    live_in_slice: u32,
    started: Instant,
    exit: Option<SliceExit>,
    notify: Arc<Notify>,
    /// Open while recorded entries are being replayed; closed at the first live call.
    replay_span: Option<tracing::Span>,
    /// The intents this slice holds (several inside a parallel group), each released if the
    /// slice stops before calling its effect.
    pub(super) held: Vec<HeldIntent>,
    /// `patched` answers given so far (sticky: one run never mixes old and new paths).
    pub(super) patches: HashMap<String, bool>,
    /// The live call in flight was recorded in the run (after a crash).
    noted: bool,
    /// Bytes of the journal so far (MessagePack of every entry).
    journal_bytes: u64,
    /// The task queue the next live call is routed to (`step_on`); `None`: the run's home.
    pub(super) route: Option<String>,
    /// Effects whose done record this slice found or wrote and whose entry is not journaled
    /// yet (a parallel group journals in call order): if the run blocks, their records are
    /// the only proof the effects happened, so they are kept from expiring.
    pub(super) unjournaled: Vec<EffectKey>,
    /// Step or effect functions being polled right now (shared with the [`Ctx`]).
    pub(super) in_function: Arc<std::sync::atomic::AtomicU32>,
    /// Step checkpoints sent without waiting (see `pipeline.rs`).
    pub(super) pipeline: Pipeline,
    /// Migrations applied to recorded values in this slice (see `versions.rs`).
    pub(super) migrated: u32,
    /// Where a parking slice leaves its [`Parked`] for the runtime (shared with the [`Ctx`]).
    pub(super) parked: Arc<std::sync::Mutex<Option<Parked>>>,
}

pub use super::seq::Ctx;

impl Core {
    /// The state of a context over a claimed run.
    pub(super) fn new(parts: CtxParts) -> Self {
        let replay_span = Some(tracing::debug_span!("replay", journal.entries = parts.journal.len()));
        let journal_bytes = parts
            .journal_bytes
            .unwrap_or_else(|| parts.journal.iter().map(|e| e.encode().len() as u64).sum());
        Self {
            journal_bytes,
            replay_span,
            p: parts,
            cursor: 0,
            live_in_slice: 0,
            started: Instant::now(),
            exit: None,
            notify: Arc::new(Notify::new()),
            held: Vec::new(),
            patches: HashMap::new(),
            noted: false,
            route: None,
            unjournaled: Vec::new(),
            in_function: Arc::default(),
            pipeline: Pipeline::default(),
            migrated: 0,
            parked: Arc::default(),
        }
    }

    /// The version this code records values of `reader`'s type at (`None`: 1, not written).
    pub(super) fn value_version(&self, reader: Reader) -> Option<u32> {
        if reader.as_is {
            return None;
        }
        (reader.version_of)(&self.versions_for(reader))
    }

    /// The declarations `reader`'s type is looked up in: the run's workflow's, and those the
    /// reader brings (a child workflow's).
    fn versions_for(&self, reader: Reader) -> std::borrow::Cow<'_, super::Versions> {
        match reader.also {
            None => std::borrow::Cow::Borrowed(&*self.p.versions),
            Some(also) => std::borrow::Cow::Owned(also().and(&self.p.versions)),
        }
    }

    /// [`Core::value_version`] for a value this slice is about to record. The first versioned
    /// value of a run makes it need the run feature `value_versions`, and the first of each
    /// type and version the feature `value:<type>@<version>`, first (a fenced note of its
    /// `needs`): a worker of a build that does not read versioned entries, or that knows an
    /// older version of the type, gives the run back instead of claiming it (§7a). A failed
    /// note stops the slice as any write does.
    pub(super) async fn stamp(&mut self, reader: Reader) -> Option<u32> {
        let tv = self.value_version(reader)?;
        let typed = (reader.name_of)(&self.versions_for(reader));
        self.need_value(typed.map(|name| (name, tv))).await;
        Some(tv)
    }

    /// How a value of `reader`'s type recorded by other code at `ov` is taken (a child's
    /// output, at the version the child's code declared):
    /// - read as it is (`Reader::as_is`): journaled with no version;
    /// - this code knows only an older version of the type and this worker's claims do not
    ///   name the value's feature: given back ([`Core::give_back`]) to a worker that reads it;
    /// - otherwise journaled at `ov`, after the run needs what reading it takes:
    ///   `value_versions`, and the value's feature where this worker names it (one no worker
    ///   of the fleet names would strand the run). A refusal then blocks the run, as for any
    ///   recorded value.
    pub(super) async fn take_recorded(&mut self, reader: Reader, ov: &OutputVersion) -> Recorded {
        if reader.as_is {
            return Recorded::At(None);
        }
        let (name, v) = (ov.type_name.as_str(), ov.version);
        let known = self.p.value_features.iter().any(|f| is_value_feature(f, name, v));
        if !known && self.value_version(reader).unwrap_or(1) < v {
            return Recorded::GiveBack;
        }
        self.need_value(known.then_some((name, v))).await;
        Recorded::At(Some(v))
    }

    /// The version of a completed child's output that came without one (a build from before
    /// 2026-12-07 completed the child: builds from 3992e27 to before 0084d6c declared versions
    /// above 1 without recording them, so "no version" is not "version 1"):
    /// - read as it is, or this code knows no version of the type above 1: `None` (version 1
    ///   is the only reading, and what it means to this code);
    /// - the version an operator gave the output of the call at `index` since
    ///   (`savepoint output-version`, `v:child:<index>` beside the child's word), if it names
    ///   the type this code reads (its name, or one it was recorded under before);
    /// - otherwise the run blocks (`Err`) naming the child, the type, and the command that
    ///   says which version the child's code wrote: it is never read as a guess.
    pub(super) async fn unrecorded_output(
        &mut self,
        reader: Reader,
        (index, child): (u32, &ThreadId),
    ) -> Result<Option<OutputVersion>, Outcome> {
        let Some(reads) = self.value_version(reader).filter(|v| *v > 1) else {
            return Ok(None);
        };
        let name = (reader.name_of)(&self.versions_for(reader)).unwrap_or("<type>");
        let given = self
            .p
            .signals
            .get(&format!("v:{}", savepoint_core::outcome::child_signal(index)))
            .and_then(Value::as_str)
            .and_then(OutputVersion::parse);
        let known = |ov: &OutputVersion| {
            ov.type_name == name
                || self
                    .p
                    .value_features
                    .iter()
                    .any(|f| f.starts_with(&format!("value:{}@", ov.type_name)))
        };
        let why = match given {
            Some(ov) if ov.is_first() || known(&ov) => return Ok(Some(ov)),
            Some(ov) => format!(
                "the version an operator gave it, {}, names a type this code does not read (it reads {name})",
                ov.field()
            ),
            None => "a build from before 2026-12-07 completed it".to_owned(),
        };
        let parent = self.p.lease.thread.clone();
        let reason = format!(
            "the output of child run {child} carries no version: {why}, and this code reads version {reads} of \
             {name}; builds from 3992e27 to before 0084d6c wrote versions above 1 without recording them, so it is \
             not read as a guess: say which version the child's code wrote it at with `savepoint output-version \
             {parent} {index} {name}@<version>` (1 if that build declared no version of the type), then \
             `savepoint retry {parent}`"
        );
        Err(self.block(BlockKind::Migration, &reason, None).await)
    }

    /// Gives the run back, untouched but for its `needs`, to a worker that reads a value this
    /// code does not ([`Core::take_recorded`]): notes the value's feature, then suspends the
    /// run as pending, so the claim's feature gate (§7a) hands it to a worker that names the
    /// feature (the value stays where it was, a child's word or run). Such a worker registers
    /// the child's workflow, or serves a parent that lists it (`Versions::child`); until one
    /// runs, the run waits with the feature in `waiting_for`.
    pub(super) async fn give_back(&mut self, ov: &OutputVersion, what: &str) -> Outcome {
        self.need_value(Some((&ov.type_name, ov.version))).await;
        let how = Suspend::until(RunStatus::Pending, Duration::ZERO);
        let detail = format!("{what} is at {}, which this build does not read", ov.feature());
        match self.suspend_run(None, how, ("given_back", &detail)).await {
            Ok(s) => self.stop(SliceExit::Suspended { woke: true, rv: s.rv }).await,
            Err(e) => self.store_failed(e).await,
        }
    }

    /// Makes the run need what reading a versioned value takes, before the value is written:
    /// the run feature `value_versions`, and `value:<type>@<version>` for `typed` if given.
    /// (Checked without building the feature's name: every versioned value a slice records
    /// after the first of its type and version finds both in `needs` and writes nothing.)
    pub(super) async fn need_value(&mut self, typed: Option<(&str, u32)>) {
        if self.p.replay_only {
            return;
        }
        const BASE: &str = "value_versions";
        let needs = &self.p.needs;
        let base = (!needs.iter().any(|n| n == BASE)).then(|| BASE.to_owned());
        let typed = typed
            .filter(|(name, v)| !needs.iter().any(|n| is_value_feature(n, name, *v)))
            .map(|(name, v)| value_feature(name, v));
        let missing: Vec<String> = base.into_iter().chain(typed).collect();
        if !missing.is_empty() {
            let field = savepoint_core::model::needs_field(self.p.needs.iter().chain(&missing).map(String::as_str));
            if let Err(e) = self.p.store.note(&self.p.lease, "needs", &field).await {
                return self.store_failed(e).await;
            }
            self.p.needs.extend(missing);
        }
    }

    /// A value of `reader`'s type recorded at `tv` by the call `name`, as this code's version
    /// of the type reads it: upgraded through the declared migrations. A value that cannot be
    /// (newer than the code, or no migration) blocks the run with the reason.
    pub(super) async fn upgraded(
        &mut self,
        reader: Reader,
        (kind, name): (EntryKind, &str),
        tv: Option<u32>,
        value: Value,
    ) -> Value {
        self.upgraded_as(reader, Subject::Entry(kind, name), tv, value).await
    }

    /// [`Core::upgraded`] for a recorded value or the run's input. A value with no version in a
    /// workflow that declares none is returned at once (what every replayed call of code that
    /// does not use versions takes); the reason is written only for a refusal.
    pub(super) async fn upgraded_as(
        &mut self,
        reader: Reader,
        what: Subject<'_>,
        tv: Option<u32>,
        value: Value,
    ) -> Value {
        let undeclared = reader.also.is_none() && self.p.versions.is_empty();
        if reader.as_is || (tv.is_none() && undeclared) {
            return value;
        }
        match (reader.upgrade)(&self.versions_for(reader), tv, value) {
            super::versions::Upgrade::Done(v, n) => {
                self.migrated += n;
                v
            }
            super::versions::Upgrade::Refused(why) => {
                let what = match what {
                    Subject::Entry(kind, name) => format!(
                        "the value recorded by {} {name:?} (entry {})",
                        kind.as_str(),
                        self.cursor.saturating_sub(1)
                    ),
                    Subject::Input => "the run's input".to_owned(),
                };
                let reason = format!(
                    "{what} cannot be read: {why}; after deploying the fix, `savepoint retry {}` runs it again",
                    self.p.lease.thread
                );
                self.block(BlockKind::Migration, &reason, None).await
            }
        }
    }

    /// A replayed entry with its value (if it has one) upgraded to this code's version of
    /// `reader`'s type ([`Core::upgraded`]).
    pub(super) async fn upgraded_entry(&mut self, reader: Reader, mut e: Entry) -> Entry {
        if e.tv.is_none() && self.p.versions.is_empty() {
            return e;
        }
        if let Outcome::Ok(v) = &mut e.outcome {
            let v = std::mem::take(v);
            let up = self.upgraded(reader, (e.kind, &e.name), e.tv, v).await;
            e.outcome = Outcome::Ok(up);
            e.tv = self.value_version(reader);
        }
        e
    }

    /// Server time now (ms), never behind the server's clock: the claim's server time plus
    /// the local monotonic time since its request was sent (virtual under a paused tokio
    /// clock, as in the test kit and the simulator).
    pub(super) fn server_now_ms(&self) -> u64 {
        self.p.server_clock.latest()
    }

    /// The run's thread id.
    pub(super) fn thread_id(&self) -> &ThreadId {
        &self.p.lease.thread
    }

    /// Live calls executed in this slice.
    pub(super) fn live_calls(&self) -> u32 {
        self.live_in_slice
    }

    /// The journal and its encoded size, taken out of a context whose slice is over, if every
    /// entry of it is acknowledged (none unsent, none in flight, no write failed or left
    /// unanswered); `None` otherwise.
    pub(super) fn take_journal(&mut self) -> Option<(Vec<Entry>, u64)> {
        self.all_acknowledged()
            .then(|| (std::mem::take(&mut self.p.journal), self.journal_bytes))
    }

    /// Whether every entry is acknowledged (none unsent, none in flight, no write failed or
    /// left unanswered).
    fn all_acknowledged(&self) -> bool {
        let p = &self.pipeline;
        p.flight.is_none() && p.unsent == 0 && p.failed.is_none() && !p.unanswered
    }

    /// Stops the slice at a suspension or a yield the run was just written with (`wrote`: the
    /// write journaled one entry, a sleep's), and, if the runtime keeps the body, waits there
    /// for the run's next slice on this worker: returns with the context over that slice, and
    /// the call that parked goes on from its replay check (the entry it wrote, if any, is
    /// there now). Without parking, or with anything not durable, it stops for good as
    /// [`Core::stop`] does.
    pub(super) async fn park(&mut self, exit: SliceExit, wrote: bool) {
        if !self.p.park || self.p.replay_only || !self.held.is_empty() || !self.all_acknowledged() {
            return self.stop(exit).await;
        }
        tracing::debug!(?exit, "slice parks");
        let held = self.p.journal.len() as u32;
        let (resume, mut parts_in) = tokio::sync::mpsc::unbounded_channel();
        let report = Parked {
            resume,
            exit: exit.clone(),
            at: self.cursor,
            held,
            expect: held + u32::from(wrote),
            last: self.p.journal.last().cloned(),
            bytes: self.journal_bytes,
            lease: self.p.lease.clone(),
            live: self.live_in_slice,
        };
        *self.parked.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(report);
        // (Kept here too: a runtime that does not keep the body drops it and takes the exit.)
        self.exit = Some(exit);
        self.notify.notify_one();
        match parts_in.recv().await {
            Some(parts) => self.resumed(*parts),
            None => std::future::pending().await,
        }
    }

    /// Goes on with the run's next slice: its parts replace this slice's, the entries the
    /// claim brought (`parts.journal`: those past the ones held) are appended, and the
    /// per-slice counters start again.
    fn resumed(&mut self, mut parts: CtxParts) {
        let mut journal = std::mem::take(&mut self.p.journal);
        for e in std::mem::take(&mut parts.journal) {
            self.journal_bytes += e.encode().len() as u64;
            journal.push(e);
        }
        parts.journal = journal;
        self.p = parts;
        self.live_in_slice = 0;
        self.started = Instant::now();
        self.exit = None;
        self.noted = false;
        self.migrated = 0;
        self.pipeline = Pipeline::default();
        tracing::debug!(journal.entries = self.p.journal.len(), "parked slice goes on");
    }

    /// The journal as it stands (recorded plus committed in this slice).
    pub(super) fn journal(&self) -> &[Entry] {
        &self.p.journal
    }

    /// The lease (after the slice: its latest version).
    pub(super) fn lease(&self) -> &Lease {
        &self.p.lease
    }

    /// Why the slice stopped, once it has (taken by the runtime).
    pub(super) fn take_exit(&mut self) -> Option<SliceExit> {
        self.exit.take()
    }

    /// Signalled when the slice stops without the workflow returning.
    pub(super) fn exit_signal(&self) -> Arc<Notify> {
        self.notify.clone()
    }

    /// The fencing token of this attempt (monotonic per run: every claim raises it).
    pub(super) fn fence(&self) -> u64 {
        self.p.lease.fence
    }

    /// The first buffered signal whose field starts with `prefix`, if any: (field, value).
    /// (Fields sort, so it is the first field at or after the prefix, if that one matches.)
    pub(super) fn buffered(&self, prefix: &str) -> Option<(String, Value)> {
        self.p
            .signals
            .range(prefix.to_owned()..)
            .next()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
    }

    /// Stops the slice: records why, wakes the runtime, and never returns (the runtime drops
    /// the workflow future). An intent taken but not yet acted on is released first: this
    /// slice knows the effect did not happen.
    pub(super) async fn stop<T>(&mut self, exit: SliceExit) -> T {
        tracing::debug!(?exit, "slice stops");
        for h in std::mem::take(&mut self.held).into_iter().filter(|h| !h.called) {
            if !self.p.replay_only {
                let (thread, fence) = (&self.p.lease.thread, self.p.lease.fence);
                let r = tokio::time::timeout(
                    self.p.store.timings().command_timeout,
                    self.p.store.effect_release(&h.key, thread, h.index, fence),
                )
                .await;
                tracing::debug!(effect.key = %h.key, ?r, "released the intent of an effect that was not called");
                // Left behind, the intent reads as a call that may have started; freed after
                // the lease ran out, another attempt may have blocked on it meanwhile. This
                // slice knows better: it says so in the run until it is heard.
                let released = matches!(r, Ok(Ok(_)));
                let late =
                    matches!(r, Ok(Ok(savepoint_core::outcome::EffectRelease::Released))) && self.p.clock.expired();
                if !released || late {
                    let store = self.p.store.clone();
                    super::unused::settle_unused_later(store, h.key, thread.clone(), (h.index, fence), released);
                }
            }
        }
        self.exit = Some(exit);
        self.notify.notify_one();
        std::future::pending::<T>().await
    }

    /// Fails the run with `reason` (its deadline passed, or its journal is full) and stops.
    pub(super) async fn fail_run<T>(&mut self, reason: String) -> T {
        if let Some(d) = self.p.deadline.filter(|d| self.server_now_ms() >= *d) {
            // The deadline may have passed (no call starts), but the server's clock may still
            // be short of it by the claim's round trip: the run is failed once it surely
            // passed, never before.
            let short = d.saturating_sub(self.p.server_clock.earliest());
            if short > 0 {
                tokio::time::sleep(Duration::from_millis(short)).await;
            }
            self.failpoint("run.deadline.before_fail").await;
        }
        let r = self.finish_run(Finish::Failed(&reason), ("failed", &reason)).await;
        match r {
            Ok(()) => self.stop(SliceExit::Failed(reason)).await,
            Err(e) => self.store_failed(e).await,
        }
    }

    /// Maps a store error to the slice exit it forces.
    pub(super) async fn store_failed<T>(&mut self, e: StoreError) -> T {
        if e.is_lease_lost() || matches!(e, StoreError::Missing(_)) {
            self.stop(SliceExit::LeaseLost(e.to_string())).await
        } else {
            self.stop(SliceExit::Transient(e.to_string())).await
        }
    }

    /// Checks a failpoint; an injected error stops the slice as transient.
    pub(super) async fn failpoint(&mut self, name: &'static str) {
        if self.failpoint_err(name).await {
            let e = savepoint_core::failpoints::Injected(name);
            self.stop::<()>(SliceExit::Transient(e.to_string())).await;
        }
    }

    /// Checks a failpoint and performs it; true when it injected an error. A pause stalls the
    /// slice's heartbeat too, as a stalled process would.
    pub(super) async fn failpoint_err(&mut self, name: &'static str) -> bool {
        let Some(action) = self.p.failpoints.hit(name) else {
            return false;
        };
        if let Action::Pause(d) = action {
            self.p.clock.stall(d);
        }
        self.p.failpoints.perform(name, action).await.is_err()
    }

    /// The recorded entry at the cursor if it matches; blocks the run on non-determinism.
    pub(super) async fn replayed(&mut self, name: &str, kind: EntryKind) -> Option<Entry> {
        match super::decide::replay(&self.p.journal, self.cursor, name, kind) {
            super::decide::Replay::Recorded(e) => {
                let e = e.clone();
                self.cursor += 1;
                Some(e)
            }
            super::decide::Replay::Live => None,
            super::decide::Replay::Diverged(reason) => self.block(BlockKind::NonDeterminism, &reason, None).await,
        }
    }

    /// Stops the run as blocked with a reason (and the in-doubt effect key with the record it
    /// waits on, if any), a block of `kind`.
    pub(super) async fn block<T>(&mut self, kind: BlockKind, reason: &str, effect: Option<(&str, &Holder)>) -> T {
        self.block_as(reason, Finish::Blocked { reason, kind, effect }).await
    }

    /// Blocks the run as `how` says ([`Finish::Blocked`] or [`Finish::Rejected`]).
    pub(super) async fn block_as<T>(&mut self, reason: &str, how: Finish<'_>) -> T {
        if self.p.replay_only {
            return self.stop(SliceExit::Blocked(reason.to_owned())).await;
        }
        match self.write_block(reason, how).await {
            Ok(()) => self.stop(SliceExit::Blocked(reason.to_owned())).await,
            Err(e) => self.store_failed(e).await,
        }
    }

    /// Writes the block of [`Ctx::block_as`] (logged and counted once written). Refused with
    /// [`StoreError::UnusedIntent`] when it would block on an intent of this run's own that
    /// its holder recorded as never acted on.
    pub(super) async fn write_block(&mut self, reason: &str, how: Finish<'_>) -> Result<(), StoreError> {
        self.keep_unjournaled().await;
        let class = block_class(&how);
        self.finish_run(how, ("blocked", reason)).await?;
        // (The task span carries the thread and worker ids, unless a filter disabled it.)
        if tracing::Span::current().is_disabled() {
            let (thread, worker) = (&self.p.lease.thread, &self.p.lease.owner);
            tracing::warn!(thread.id = %thread, worker.id = %worker, %reason, "run blocked");
        } else {
            tracing::warn!(%reason, "run blocked");
        }
        inc(&metrics().blocks, &[("reason", class)]);
        Ok(())
    }

    /// Gate before every live call: replay-only refusal, shutdown and budget yields, the
    /// journal limit.
    pub(super) async fn before_live(&mut self, name: &str) {
        self.before_live_at(name, self.cursor, false).await
    }

    /// [`Ctx::before_live`] for the call that will have journal index `index` (inside a
    /// parallel group the index runs ahead of the commit cursor; `in_group`: a later call of a
    /// group, which the budget does not split).
    pub(super) async fn before_live_at(&mut self, name: &str, index: u32, in_group: bool) {
        self.replay_span = None;
        // (A yield that parks goes on here in the run's next slice: the gate is asked again.)
        loop {
            let facts = super::decide::GateFacts {
                replay_only: self.p.replay_only,
                deadline_passed: self.p.clock.expired(),
                shutting_down: self.p.shutdown.is_cancelled(),
                live_in_slice: self.live_in_slice,
                max_steps: self.p.limits.max_steps,
                elapsed: self.started.elapsed(),
                max_time: self.p.limits.max_time,
                cursor: index,
                max_entries: self.p.limits.max_entries,
                in_group,
                run_deadline: self.p.deadline.map(|d| (d, self.server_now_ms())),
            };
            match super::decide::gate(&facts) {
                super::decide::Gate::Go => break,
                super::decide::Gate::WouldRunLive => {
                    self.stop::<()>(SliceExit::WouldRunLive(name.to_owned())).await;
                }
                super::decide::Gate::DeadlinePassed => {
                    self.stop::<()>(SliceExit::DeadlinePassed(format!("before live call {name:?}")))
                        .await;
                }
                super::decide::Gate::Yield => self.yield_parking(name).await,
                super::decide::Gate::Fail(reason) => self.fail_run::<()>(reason).await,
            }
        }
        // Routed to a queue this worker does not consume: hand the run to a worker of that
        // queue (it replays to here). No allocation unless the run moves.
        let route = self.route.take();
        let elsewhere = match &self.p.routing {
            Some(r) if !in_group => {
                let target = route.as_deref().unwrap_or(&r.home);
                (!r.served.iter().any(|q| q == target)).then(|| target.to_owned())
            }
            _ => None,
        };
        if let Some(target) = elsewhere {
            self.yield_to_queue(index, name, target).await;
        }
        if self.p.crashes > 0 && !self.noted {
            // The previous attempts died at this position: name the call, for the reason a
            // poison run is blocked with.
            self.noted = true;
            let cur = format!("{index} {name}");
            if let Err(e) = self.p.store.note(&self.p.lease, "cur", &cur).await {
                return self.store_failed(e).await;
            }
        }
        self.live_in_slice += 1;
    }

    /// Ends the slice with the run pending at the call `name` (event `yielded`); the runner
    /// publishes its continuation (the budget, a shutdown, a pause).
    pub(super) async fn yield_here<T>(&mut self, name: &str) -> T {
        let redeliver = self.p.store.timings().redeliver;
        let how = Suspend::until(RunStatus::Pending, redeliver);
        match self.suspend_run(None, how, ("yielded", name)).await {
            Ok(s) => self.stop(SliceExit::Yielded { rv: s.rv, queue: None }).await,
            Err(e) => self.store_failed(e).await,
        }
    }

    /// [`Core::yield_here`] for a yield of the budget or a shutdown, which may park
    /// ([`Core::park`]): returns in the run's next slice on this worker.
    async fn yield_parking(&mut self, name: &str) {
        let redeliver = self.p.store.timings().redeliver;
        let how = Suspend::until(RunStatus::Pending, redeliver);
        match self.suspend_run(None, how, ("yielded", name)).await {
            Ok(s) => self.park(SliceExit::Yielded { rv: s.rv, queue: None }, false).await,
            Err(e) => self.store_failed(e).await,
        }
    }

    /// Pauses the run from its own code (a step's failure its retry policy says pauses, see
    /// [`RetryPolicy::pause_on`](super::RetryPolicy)): the call at `index` gets a fresh budget
    /// (`t:<index>` = 0), the run its own pause (by `workflow code`, the error as the note),
    /// and the slice yields; the next claim stops the run until an operator unpauses it. The
    /// failure is not journaled, so the step runs again then.
    pub(super) async fn pause_from_code<T>(&mut self, index: u32, name: &str, e: &StepError, attempts: u32) -> T {
        // The note names the step and the error's class, never its words (they may quote the
        // input): those go into the `retried` event, sealed like every payload.
        let why = match &e.class {
            Some(c) => format!("class {c}"),
            None => format!("{attempts} attempts used up"),
        };
        let note = format!("step {name:?} failed ({why})").replace('\u{1f}', " ");
        let record = format!("workflow code\u{1f}{}\u{1f}0\u{1f}{note}", self.server_now_ms());
        let lease = self.p.lease.clone();
        let written = async {
            let detail = format!("{name} attempt {attempts}: {e} (pausing the run)");
            self.p.store.retried(&lease, index, attempts, &detail, None).await?;
            self.p.store.note(&lease, &format!("t:{index}"), "0").await?;
            self.p.store.note(&lease, "pz", &record).await?;
            let detail = format!("the run paused by workflow code: {note}");
            self.p.store.event(&lease, "paused", &detail).await
        }
        .await;
        if let Err(err) = written {
            return self.store_failed(err).await;
        }
        tracing::warn!(step.name = name, error = %e, "run paused by its retry policy");
        self.yield_here(name).await
    }

    /// Ends the slice with the run pending on task queue `target`, where the call `index
    /// name` runs (event `routed`).
    async fn yield_to_queue(&mut self, index: u32, name: &str, target: String) {
        self.failpoint("route.before_yield").await;
        let redeliver = self.p.store.timings().redeliver;
        let how = Suspend {
            queue: Some(&target),
            ..Suspend::until(RunStatus::Pending, redeliver)
        };
        let detail = format!("{index} {name} to queue {target}");
        let r = self.suspend_run(None, how, ("routed", &detail)).await;
        match r {
            Ok(s) => {
                let exit = SliceExit::Yielded {
                    rv: s.rv,
                    queue: Some(target),
                };
                self.stop::<()>(exit).await
            }
            Err(e) => self.store_failed::<()>(e).await,
        }
    }

    /// Commits the entry at the cursor (fenced, compare-and-swap) and advances.
    pub(super) async fn commit(&mut self, entry: Entry, event: &str, consume_signal: Option<&str>) {
        self.commit_as(entry, event, consume_signal, false).await
    }

    /// Commits a step's entry at the cursor: pipelined (see `pipeline.rs`) unless `durable`,
    /// the slice checkpoints synchronously, or the entry carries more than a first attempt.
    pub(super) async fn commit_step(&mut self, entry: Entry, durable: bool) {
        self.commit_as(entry, "", None, durable).await
    }

    async fn commit_as(&mut self, mut entry: Entry, event: &str, consume_signal: Option<&str>, durable: bool) {
        entry.at = self.server_now_ms();
        let idx = self.cursor;
        let size = JournalSize {
            held: self.journal_bytes,
            entry: entry.encode().len() as u64,
            max: self.p.limits.max_journal_bytes,
        };
        let w = match plan_commit(&entry, idx, event, size) {
            CommitPlan::Overflow(reason) => return self.fail_journal_full(reason).await,
            CommitPlan::Write(w) => w,
        };
        self.journal_bytes += size.entry;
        if w.step {
            self.failpoint("step.before_commit").await;
        }
        if !durable && self.pipelines() && may_pipeline(&entry, event, consume_signal) {
            self.queue_entry(entry).await;
            if self.p.failpoints.has("step.after_commit") {
                // The point means "after the commit landed": a test that crashes there
                // expects the step never to run again.
                self.barrier().await;
            }
        } else {
            self.write_entry(entry, idx, event, &w, consume_signal).await;
        }
        if w.step {
            self.failpoint("step.after_commit").await;
        }
    }

    /// Fails the run whose next entry would take its journal past the byte cap, and stops.
    async fn fail_journal_full(&mut self, reason: String) {
        match self.finish_run(Finish::Failed(&reason), ("failed", &reason)).await {
            Ok(()) => self.stop::<()>(SliceExit::Failed(reason)).await,
            Err(e) => self.store_failed::<()>(e).await,
        }
    }

    /// Writes `entry` at `idx` as planned, with the pipeline's unsent entries before it in the
    /// same script, and waits for the answer; counts it and appends it to the journal.
    async fn write_entry(&mut self, entry: Entry, idx: u32, event: &str, w: &Write, consume_signal: Option<&str>) {
        let (first, mut entries) = self.unsent_tail().await;
        entries.push(entry);
        let started = Instant::now();
        self.sending();
        let r = self
            .p
            .store
            .commit(&mut self.p.lease, first, &entries, (event, &w.detail), consume_signal)
            .instrument(tracing::debug_span!("commit", step.index = idx))
            .await;
        self.carried(&r);
        if let Err(e) = r {
            return self.store_failed(e).await;
        }
        self.p.clock.confirmed(started);
        let m = metrics();
        m.commit_seconds.observe(started.elapsed().as_secs_f64());
        // (The unsent entries it carried were counted by `carried`.)
        let Some(entry) = entries.pop() else { return };
        let kind = entry.kind.as_str();
        inc(
            &m.steps,
            &[("workflow", &self.p.workflow), ("kind", kind), ("outcome", w.outcome)],
        );
        if let Some(key) = entry.key.as_deref() {
            self.unjournaled.retain(|k| k.as_str() != key);
            if w.expire_record {
                self.expire_record(key, idx).await;
            }
        }
        self.p.journal.push(entry);
        self.cursor += 1;
    }

    /// Gives a journaled effect's done record its expiry: until the entry, the record had none
    /// (`effect_done.lua`) or was kept from expiring (a block), being the only proof the
    /// effect happened. (If this fails, or the worker dies first, the record outlives its
    /// dedup window: memory, never a repeat.)
    async fn expire_record(&mut self, key: &str, index: u32) {
        if let Ok(key) = EffectKey::new(key.to_owned()) {
            let thread = self.p.lease.thread.clone();
            if let Err(e) = self.p.store.effect_expire(&key, &thread, index).await {
                tracing::debug!(error = %e, "could not give a journaled effect's record its expiry");
            }
        }
    }

    /// Keeps the done records of the effects this slice has not journaled from expiring
    /// (the run is about to block: an operator may resolve it after their expiry).
    async fn keep_unjournaled(&mut self) {
        for key in std::mem::take(&mut self.unjournaled) {
            let store = self.p.store.clone();
            self.durable(|| store.effect_keep(&key)).await;
        }
    }

    /// Runs `fut` while the lease holds: if the lease is lost, or the local lease deadline
    /// passes, the slice stops and `fut` is dropped. Past the deadline `fut` is never polled
    /// again, even if it is ready: a worker that may have lost its lease does not go on.
    pub(super) async fn guarded<T>(&mut self, fut: impl Future<Output = T>) -> T {
        let watch = self.watch();
        match watched(&watch, fut).await {
            Ok(v) => v,
            Err(broke) => self.broke(broke).await,
        }
    }

    /// Stops the slice as a [`watched`] call's break says.
    pub(super) async fn broke<T>(&mut self, broke: Broke) -> T {
        match broke {
            Broke::Exit(exit) => self.stop(exit).await,
            Broke::RunDeadline => {
                // The call is never polled again (the slice ends with the failed run).
                let reason = super::decide::timeout_reason(self.p.deadline.unwrap_or_default());
                self.fail_run(reason).await
            }
        }
    }

    /// What [`watched`] watches a call with.
    pub(super) fn watch(&self) -> Watch {
        Watch {
            lost: self.p.lease_lost.clone(),
            clock: self.p.clock.clone(),
            run_deadline: self.run_deadline_instant(),
        }
    }

    /// When the run's deadline passes, on the local monotonic clock.
    fn run_deadline_instant(&self) -> Option<Instant> {
        let d = self.p.deadline?;
        let left = d.saturating_sub(self.server_now_ms());
        Some(Instant::now() + Duration::from_millis(left))
    }

    /// What a call needs to run its attempts without borrowing the context.
    pub(super) fn call_tools(&self) -> CallTools {
        CallTools {
            store: self.p.store.clone(),
            lease: self.p.lease.clone(),
            tries: self.p.tries.clone(),
            stop: self.p.shutdown.clone(),
        }
    }

    /// The workflow's retry policy (a call's own, if it gives one, wins).
    pub(super) fn default_retry(&self) -> RetryPolicy {
        self.p.retry.clone()
    }
}

/// The metric class (`reason` of the blocks counter) a block written as `how` counts under.
fn block_class(how: &Finish<'_>) -> &'static str {
    match how {
        Finish::Blocked { effect: Some(_), .. } => "effect_in_doubt",
        Finish::Rejected { .. } => "bad_value",
        Finish::Blocked {
            kind: BlockKind::NonDeterminism,
            ..
        } => "non_determinism",
        Finish::Blocked {
            kind: BlockKind::Migration,
            ..
        } => "migration",
        _ => "other",
    }
}

/// The store and lease a call's attempts record their retries with (a retry event is fenced
/// by owner and fence, which no commit of the slice changes).
pub(super) struct CallTools {
    pub store: Arc<dyn RunStore>,
    pub lease: Lease,
    /// Failed attempts recorded by earlier slices, by journal index.
    pub tries: BTreeMap<u32, u32>,
    /// Cancelled on shutdown or when a pause holds the run: a step waiting to retry yields.
    pub stop: CancellationToken,
}

/// What a call's panic or timed-out attempt means, by the kind of call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cut {
    /// A step: a panic or a timed-out attempt is a failed attempt (a step may run again).
    Step,
    /// An effect whose provider honours its key (`retry_safe`): a panic leaves it in doubt;
    /// a timed-out attempt may be followed by another with the same key.
    RetrySafeEffect,
    /// Any other effect (`block`, `reconcile`): a panic or a timed-out attempt leaves it in
    /// doubt at once, since a call cut off may have reached the provider.
    Effect,
}

impl Cut {
    /// The cut for an effect under `policy`.
    pub(super) fn effect(policy: &super::EffectPolicy) -> Self {
        match policy {
            super::EffectPolicy::RetrySafe => Cut::RetrySafeEffect,
            _ => Cut::Effect,
        }
    }
}

/// Runs `f(attempt)` under the retry policy, each retry recorded as a `retried` event with
/// the count kept in the run, so attempts go on where an earlier slice left them (a slice that
/// ends mid-retry does not hand its call a fresh budget). An attempt cut short by a crash before
/// its failure was recorded is not counted. Borrows nothing of the context, so the calls of a
/// parallel group run their attempts at once; the caller guards it with the lease
/// ([`Ctx::guarded`]).
pub(super) async fn attempts<T, F, Fut, E>(
    tools: &CallTools,
    index: u32,
    name: &str,
    policy: &RetryPolicy,
    cut: Cut,
    alone: Option<&(dyn Fn() -> bool + Sync)>,
    mut f: F,
) -> Result<Attempted<T>, StoreError>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: Into<StepError>,
{
    let mut attempt = tools.tries.get(&index).map_or(1, |failed| failed + 1);
    loop {
        let call = AssertUnwindSafe(f(attempt)).catch_unwind();
        let caught = match policy.attempt_timeout {
            None => Some(call.await),
            Some(limit) => tokio::time::timeout(limit, call).await.ok(),
        };
        let r = match caught {
            Some(Ok(r)) => r.map_err(Into::into),
            Some(Err(panic)) if cut == Cut::Step => {
                Err(StepError::retryable(format!("panicked: {}", panic_message(&*panic))))
            }
            Some(Err(panic)) => {
                return Ok(Attempted::Unknown(format!(
                    "the effect function panicked: {}",
                    panic_message(&*panic)
                )))
            }
            None => {
                let limit = policy.attempt_timeout.unwrap_or_default();
                let e = StepError::retryable(format!("attempt timed out after {limit:?}")).with_class("timeout");
                // An effect cut off may have happened: only a `retry_safe` effect's provider
                // makes a second call with the same key safe, and only while retries are left.
                let in_doubt = match cut {
                    Cut::Step => false,
                    Cut::RetrySafeEffect => !policy.should_retry(attempt, &e),
                    Cut::Effect => true,
                };
                if in_doubt {
                    return Ok(Attempted::Unknown(format!(
                        "its attempt {attempt} timed out after {limit:?}"
                    )));
                }
                Err(e)
            }
        };
        let pauses_now = |e: &StepError| cut == Cut::Step && policy.pauses_at_once(e);
        match r {
            Err(e) if policy.should_retry(attempt, &e) && !pauses_now(&e) => {
                let delay = policy.backoff(attempt);
                tracing::warn!(step.name = name, task.attempt = attempt, error = %e, ?delay, "call failed, retrying");
                let detail = format!("{name} attempt {attempt}: {e}");
                tools
                    .store
                    .retried(&tools.lease, index, attempt, &detail, Some(delay))
                    .await?;
                // A step alone in flight (no call of a group beside it) yields instead of
                // retrying once the slice must stop (a pause, a shutdown): its recorded tries
                // carry its budget to the next slice.
                match alone {
                    Some(alone) if alone() => {
                        tokio::select! {
                            _ = tokio::time::sleep(delay) => {}
                            _ = tools.stop.cancelled() => return Ok(Attempted::Stopped),
                        }
                    }
                    _ => tokio::time::sleep(delay).await,
                }
                attempt += 1;
            }
            other => return Ok(Attempted::Done(other, attempt)),
        }
    }
}

/// How a call under a retry policy ended.
pub(super) enum Attempted<T> {
    /// The final outcome and the attempts it took.
    Done(Result<T, StepError>, u32),
    /// Whether it happened is unknown (only when panics are not failures, i.e. effects): it
    /// panicked, or its last attempt timed out. The cause.
    Unknown(String),
    /// A step alone in flight stopped waiting to retry because the slice must stop (a pause,
    /// a shutdown); its failed attempts are recorded.
    Stopped,
}

/// The message of a caught panic. Also accepts the caught `Box` itself (`&panic` of a
/// `Box<dyn Any + Send>` coerces to a `&dyn Any` whose value is the box, not the payload).
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else if let Some(inner) = panic.downcast_ref::<Box<dyn std::any::Any + Send>>() {
        panic_message(&**inner)
    } else {
        "(no message)".to_owned()
    }
}

/// Decodes a recorded outcome into the type the code asks for.
pub(super) fn decode_outcome<T: DeserializeOwned>(
    kind: &'static str,
    name: &str,
    o: Outcome,
) -> Result<T, WorkflowError> {
    decode_failed(kind, name, o, None)
}

/// Decodes a journaled entry: its value, or its failure with the error's class and
/// retryability as data ([`WorkflowError::class`]).
pub(super) fn decode_entry<T: DeserializeOwned>(kind: &'static str, e: Entry) -> Result<T, WorkflowError> {
    decode_failed(kind, &e.name, e.outcome, e.failure)
}

fn decode_failed<T: DeserializeOwned>(
    kind: &'static str,
    name: &str,
    o: Outcome,
    failure: Option<savepoint_core::journal::Failure>,
) -> Result<T, WorkflowError> {
    match o {
        Outcome::Ok(v) => serde_json::from_value(v).map_err(|e| WorkflowError::Decode {
            name: name.to_owned(),
            // (The type's path, for a reader: not an identity, see `Versioned::NAME`.)
            message: format!("{e}; the code reads it as `{}`", std::any::type_name::<T>()),
        }),
        Outcome::Err(message) => Err(WorkflowError::call_failed(kind, name, message, failure)),
    }
}

/// What a call in flight is watched for: the lease lost, the local lease deadline, the run's
/// deadline.
pub(super) struct Watch {
    lost: CancellationToken,
    clock: LeaseClock,
    run_deadline: Option<Instant>,
}

/// Why a [`watched`] call was cut off.
pub(super) enum Broke {
    /// The slice stops so.
    Exit(SliceExit),
    /// The run's deadline passed: the run fails.
    RunDeadline,
}

/// Runs `fut` until it ends or the [`Watch`] breaks in; past the local lease deadline `fut`
/// is never polled again, even if it is ready. Borrows nothing of the context, so calls in
/// flight side by side are watched at once.
pub(super) async fn watched<T>(w: &Watch, fut: impl Future<Output = T>) -> Result<T, Broke> {
    let mut fut = std::pin::pin!(fut);
    loop {
        let deadline = w.clock.deadline();
        let gate = std::future::poll_fn(|cx| {
            if w.clock.expired() || w.run_deadline.is_some_and(|d| Instant::now() >= d) {
                return std::task::Poll::Pending;
            }
            fut.as_mut().poll(cx)
        });
        // The gate refuses to poll the call past either deadline, so it may come first: a
        // call that is ready at once never arms a timer, and a call reached after the run's
        // deadline (its intent write was slow) is never entered.
        tokio::select! {
            biased;
            _ = w.lost.cancelled() => return Err(Broke::Exit(SliceExit::LeaseLost("lease lost during a call".into()))),
            v = gate => return Ok(v),
            _ = sleep_until_some(w.run_deadline) => return Err(Broke::RunDeadline),
            _ = tokio::time::sleep_until(deadline) => {
                if w.clock.expired() {
                    return Err(Broke::Exit(SliceExit::DeadlinePassed(
                        "the local lease deadline passed during a call".into(),
                    )));
                }
            }
        }
    }
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
