//! Plain data of a run as stored: header, status, claims.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::StoreError;
use crate::ids::ThreadId;
use crate::journal::Entry;
use crate::keys::RunKeys;

/// Where a run is in its life (ordered as [`RunStatus::ALL`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Created or made runnable again; a task will (or did) ring a worker.
    Pending,
    /// A worker holds the lease.
    Running,
    /// On a durable timer (or backing off before a retry).
    Sleeping,
    /// Waiting for an interrupt answer or a signal.
    Waiting,
    /// Finished with an output.
    Completed,
    /// Finished with an error.
    Failed,
    /// Cancelled by an operator.
    Cancelled,
    /// Stopped, with a reason, until an operator acts (in-doubt effect, non-determinism…).
    Blocked,
    /// Stopped by a pause (its own, its workflow's, its version's or its task queue's) until
    /// it is resumed; it then goes back to where the pause found it.
    Paused,
}

impl RunStatus {
    /// All statuses, in lifecycle order.
    pub const ALL: [RunStatus; 9] = [
        RunStatus::Pending,
        RunStatus::Running,
        RunStatus::Sleeping,
        RunStatus::Waiting,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
        RunStatus::Blocked,
        RunStatus::Paused,
    ];

    /// The stored / API name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Pending => "pending",
            RunStatus::Running => "running",
            RunStatus::Sleeping => "sleeping",
            RunStatus::Waiting => "waiting",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Blocked => "blocked",
            RunStatus::Paused => "paused",
        }
    }

    /// Parses a stored / API name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// True for completed, failed and cancelled (blocked can still be resolved).
    pub fn is_final(self) -> bool {
        matches!(self, RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled)
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a blocked run is blocked (the run hash's `bk`), written with the block: what settles
/// it depends on it, and code decides on it, never on the words of the reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockKind {
    /// An effect's outcome is unknown (its intent is in doubt): an operator resolves it.
    InDoubt,
    /// The workflow code no longer takes the path the journal recorded.
    NonDeterminism,
    /// Taken over too often at one journal position without progress (the claim blocks it).
    Poison,
    /// The workflow code panicked.
    Panic,
    /// A value did not decode: a delivered answer, a recorded result, the run's journal.
    Undecodable,
    /// A recorded value is at a version of its type the code cannot upgrade from (no
    /// migration declared, a migration that failed, or a newer version than the code knows).
    Migration,
    /// Another block (a misused API: an invalid effect key, an effect raced in a select, one
    /// key used twice at once).
    Other,
}

impl BlockKind {
    /// All kinds.
    pub const ALL: [BlockKind; 7] = [
        BlockKind::InDoubt,
        BlockKind::NonDeterminism,
        BlockKind::Poison,
        BlockKind::Panic,
        BlockKind::Undecodable,
        BlockKind::Migration,
        BlockKind::Other,
    ];

    /// The stored name (`bk`).
    pub fn as_str(self) -> &'static str {
        match self {
            BlockKind::InDoubt => "in_doubt",
            BlockKind::NonDeterminism => "non_determinism",
            BlockKind::Poison => "poison",
            BlockKind::Panic => "panic",
            BlockKind::Undecodable => "undecodable",
            BlockKind::Migration => "migration",
            BlockKind::Other => "other",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl std::fmt::Display for BlockKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a waiting run waits for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Wait {
    /// `interrupt` or `signal`.
    pub kind: String,
    /// The interrupt or signal name.
    pub name: String,
    /// The interrupt's payload (shown to the human who answers it).
    pub payload: Value,
}

/// The run header: everything but the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunHeader {
    /// The run.
    pub thread: ThreadId,
    /// Workflow name.
    pub workflow: String,
    /// Workflow version the run was started with.
    pub workflow_version: u32,
    /// Checkpoint schema version.
    pub schema: u32,
    /// Status.
    pub status: RunStatus,
    /// Journal length.
    pub steps: u32,
    /// Version (bumped by every write).
    pub version: u64,
    /// Lease owner (worker incarnation), if leased.
    pub owner: Option<String>,
    /// Fencing token of the latest claim.
    pub fence: u64,
    /// Lease expiry (ms since epoch, server clock).
    pub lease_until: u64,
    /// Number of claims so far.
    pub attempt: u32,
    /// Due time (ms), if any.
    pub due: Option<u64>,
    /// Created at (ms).
    pub created_at: u64,
    /// Last write (ms).
    pub updated_at: u64,
    /// Finished at (ms), for ended runs.
    pub finished_at: Option<u64>,
    /// Input (JSON).
    pub input: Value,
    /// Output, once completed.
    pub output: Option<Value>,
    /// Error, once failed.
    pub error: Option<String>,
    /// Why the run is blocked or was cancelled.
    pub reason: Option<String>,
    /// The kind of block a blocked run is in (`bk`; `None`: not blocked, or blocked before the
    /// field existed).
    pub block_kind: Option<BlockKind>,
    /// The in-doubt effect key a blocked run waits on.
    pub blocked_effect: Option<String>,
    /// The record the block waits on (`thread\x1findex\x1ffence`), so a resolve settles
    /// exactly that intent and not a newer one.
    pub blocked_effect_owner: Option<String>,
    /// Why a runnable run is not running: no live worker serves its workflow version.
    pub waiting_for: Option<String>,
    /// The effect key a run backs off on (another run holds its intent), and how often it
    /// has backed off so far.
    pub wait_effect: Option<(String, u32)>,
    /// The run's deadline (server ms), if it was started with a timeout.
    pub deadline: Option<u64>,
    /// The run this one was forked from and the entry (`fork.lua`): its first entries are
    /// that run's.
    pub forked_from: Option<(String, u32)>,
    /// Restarts in place so far, and the entry the last one went on from (`restart.lua`).
    pub restarts: Option<(u32, u32)>,
    /// The parent run and the journal index of its call that started this one (a child
    /// workflow, `ctx.child`).
    pub parent: Option<ParentLink>,
    /// The child runs this run started, by the journal index of the call (`children`).
    pub children: Vec<ChildLink>,
    /// The task queue its next task goes to (`q`; `None`: the default queue).
    pub queue: Option<String>,
    /// The task queue it was started on (`hq`): where its calls run unless routed elsewhere.
    pub home_queue: Option<String>,
    /// Its flow control (`fck`, `fcl`, `fcr`): the key whose slots it takes.
    pub flow: Option<Flow>,
    /// Its priority in a flow key's waiting line (`prio`, 0–9, higher first).
    pub priority: u8,
    /// The run features a worker must know to claim it (`needs`, see [`FEATURES`]).
    pub needs: Vec<String>,
    /// The version of the input's type as the code that started the run declared it (`iv`;
    /// `None`: version 1): a worker upgrades an older input through the workflow's declared
    /// migrations before the code sees it.
    pub input_version: Option<u32>,
    /// The version of the output's type as the code that completed the run declared it
    /// (`ov`): a parent awaiting it as a child's output upgrades it through the child's
    /// declared migrations. Every completion from 2026-12-07 on records it, version 1
    /// included; `None` is a completion by an older build, whose version is not known
    /// (builds from 3992e27 to before 0084d6c declared versions without recording them).
    pub output_version: Option<OutputVersion>,
    /// Takeovers at the current journal position (the worker died or stalled each time).
    pub crashes: u32,
    /// The workers that held the run when it crashed there.
    pub crashed_by: Option<String>,
    /// What a waiting run waits for.
    pub wait: Option<Wait>,
    /// W3C trace context of the run (one run is one trace).
    pub trace: Option<String>,
    /// The run's own pause (`pz`: `by\x1fat\x1fhold\x1fnote`), whether or not it has stopped
    /// the run yet.
    pub pause: Option<String>,
    /// What stopped a `paused` run (`pzw`: `run`, `w:<wf>`, `v:<wf>@<v>`, `q:<queue>`) and its
    /// record (`pzr`), and the status it had then (`ps`), where a resume puts it back.
    pub paused_by: Option<(String, String, RunStatus)>,
    /// A failed call's back-off (`rb`): until when (server ms), the call's journal index and
    /// its failed attempts. Written with the `retried` event while the run stays leased; it
    /// means something only while `until` is ahead (the run is backing off now).
    pub retry_backoff: Option<RetryBackoff>,
}

/// A failed call's back-off before its next attempt, as a running run records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryBackoff {
    /// When the next attempt starts (server ms).
    pub until: u64,
    /// The call's journal index.
    pub index: u32,
    /// Its failed attempts so far.
    pub attempt: u32,
}

impl RetryBackoff {
    /// Parses the stored form `until\x1findex\x1fattempt`.
    pub fn parse(s: &str) -> Option<Self> {
        let mut it = s.split('\u{1f}');
        Some(Self {
            until: it.next()?.parse().ok()?,
            index: it.next()?.parse().ok()?,
            attempt: it.next()?.parse().ok()?,
        })
    }
}

fn text(map: &BTreeMap<String, Vec<u8>>, k: &str) -> Option<String> {
    map.get(k)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .filter(|s| !s.is_empty())
}

fn num<T: std::str::FromStr>(map: &BTreeMap<String, Vec<u8>>, k: &str) -> Option<T> {
    text(map, k).and_then(|s| s.parse().ok())
}

fn json(map: &BTreeMap<String, Vec<u8>>, k: &str) -> Result<Option<Value>, StoreError> {
    match map.get(k).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => serde_json::from_slice(v)
            .map(Some)
            .map_err(|e| StoreError::Corrupt(format!("field {k}: {e}"))),
    }
}

impl RunHeader {
    /// Builds a header from the run hash's fields (journal fields are ignored).
    pub fn from_fields(thread: &ThreadId, map: &BTreeMap<String, Vec<u8>>) -> Result<Self, StoreError> {
        let status_s = text(map, "status").ok_or_else(|| StoreError::Missing(thread.to_string()))?;
        let status = RunStatus::parse(&status_s)
            .ok_or_else(|| StoreError::Corrupt(format!("run {thread}: unknown status {status_s:?}")))?;
        let wait = match (text(map, "wait_kind"), text(map, "wait_name")) {
            (Some(kind), Some(name)) => Some(Wait {
                kind,
                name,
                payload: json(map, "wait_payload")?.unwrap_or(Value::Null),
            }),
            _ => None,
        };
        Ok(Self {
            thread: thread.clone(),
            workflow: text(map, "wf").unwrap_or_default(),
            workflow_version: num(map, "wfv").unwrap_or(0),
            schema: num(map, "schema").unwrap_or(0),
            status,
            steps: num(map, "steps").unwrap_or(0),
            version: num(map, "ver").unwrap_or(0),
            owner: text(map, "owner"),
            fence: num(map, "fence").unwrap_or(0),
            lease_until: num(map, "lease").unwrap_or(0),
            attempt: num(map, "attempt").unwrap_or(0),
            due: num(map, "due"),
            created_at: num(map, "created").unwrap_or(0),
            updated_at: num(map, "updated").unwrap_or(0),
            finished_at: num(map, "finished"),
            input: json(map, "input")?.unwrap_or(Value::Null),
            output: json(map, "output")?,
            error: text(map, "error"),
            reason: text(map, "reason"),
            // (A kind a newer build wrote is a block all the same.)
            block_kind: text(map, "bk").map(|k| BlockKind::parse(&k).unwrap_or(BlockKind::Other)),
            blocked_effect: text(map, "blocked_fx"),
            blocked_effect_owner: text(map, "blocked_fx_owner"),
            waiting_for: text(map, "waiting_for"),
            wait_effect: text(map, "wait_fx").map(|k| (k, num(map, "wait_fx_n").unwrap_or(0))),
            deadline: num(map, "deadline"),
            forked_from: text(map, "forked_from").and_then(|f| {
                let (thread, n) = f.rsplit_once('@')?;
                Some((thread.to_owned(), n.parse().ok()?))
            }),
            restarts: num(map, "restarts").map(|n| (n, num(map, "restarted_from").unwrap_or(0))),
            parent: text(map, "parent").and_then(|p| {
                Some(ParentLink {
                    thread: ThreadId::new(p).ok()?,
                    index: num(map, "parent_i")?,
                })
            }),
            children: children_of(map),
            queue: text(map, "q").filter(|q| !q.is_empty()),
            home_queue: text(map, "hq").filter(|q| !q.is_empty()),
            flow: text(map, "fck").map(|key| Flow {
                key,
                limit: num(map, "fcl").unwrap_or(1),
                rate: num(map, "fcr"),
            }),
            priority: num(map, "prio").unwrap_or(0),
            needs: text(map, "needs")
                .map(|n| n.split('\u{1f}').map(str::to_owned).collect())
                .unwrap_or_default(),
            crashes: num(map, "crashes").unwrap_or(0),
            crashed_by: text(map, "crashed_by"),
            wait,
            trace: text(map, "trace"),
            pause: text(map, "pz"),
            paused_by: text(map, "pzr").map(|r| {
                let from = text(map, "ps")
                    .and_then(|s| RunStatus::parse(&s))
                    .unwrap_or(RunStatus::Pending);
                (text(map, "pzw").unwrap_or_default(), r, from)
            }),
            retry_backoff: text(map, "rb").and_then(|s| RetryBackoff::parse(&s)),
            input_version: num(map, "iv").filter(|v: &u32| *v > 1),
            output_version: text(map, "ov").and_then(|f| OutputVersion::parse(&f)),
        })
    }
}

/// Decodes the journal fields `j:0..steps` of a run hash, in order.
pub fn journal_from_fields(header: &RunHeader, map: &BTreeMap<String, Vec<u8>>) -> Result<Vec<Entry>, StoreError> {
    journal_fields_from(header, map, 0)
}

/// Decodes the journal fields `j:from..steps` of a run hash (or of the part of it a claim
/// returned), in order.
pub fn journal_fields_from(
    header: &RunHeader,
    map: &BTreeMap<String, Vec<u8>>,
    from: u32,
) -> Result<Vec<Entry>, StoreError> {
    (from..header.steps)
        .map(|i| {
            let raw = map
                .get(&format!("j:{i}"))
                .ok_or_else(|| StoreError::Corrupt(format!("run {}: journal entry {i} missing", header.thread)))?;
            Entry::decode(raw).map_err(|e| StoreError::Corrupt(format!("run {}: entry {i}: {e}", header.thread)))
        })
        .collect()
}

/// The run features this build knows. A run records the ones it uses (`needs`), and a claim
/// names the ones its worker knows: in a rolling deploy, a run that uses a feature an older
/// worker does not know is given back to wait for one that does (as a workflow version no
/// worker serves is), never run without it. A new feature that changes how a run must be
/// executed gets a name here and in [`CreateOptions::needs`].
pub const FEATURES: &[&str] = &[
    "child",
    "deadline",
    "flow",
    "flow_rate",
    "input_version",
    "priority",
    "queue",
    "value_versions",
];

/// The promises this build's workers keep that a build the upgrade policy allows beside it
/// may not: each worker registers them (`capabilities`), and the API refuses what a live
/// worker would not honour (a pause, while a worker of a build from before pauses is live).
/// A registration without the field is a build from before capabilities were registered: one
/// that registers `slices_per_sec` (from `d84b766`, the policy's floor) honours pauses, and
/// one that does not, none of these (see `WorkerInfo::from_registration`).
pub const CAPABILITIES: &[&str] = &["pause"];

/// The run feature a value of the type named `type_name` recorded at `version` (above 1)
/// needs: `value:<type>@<version>`. A worker knows it when its build declares the type at
/// that version or a later one (the SDK's `Versions::features`), so in a rolling deploy that
/// raises a type's version a run holding a value of the new version is given back by a worker
/// of the old build, untouched, instead of blocking there.
pub fn value_feature(type_name: &str, version: u32) -> String {
    format!("value:{type_name}@{version}")
}

/// The version of a completed run's output type as the code that completed it declared it
/// (`Versioned`; 1 for a type it does not declare, whose name is then empty), kept with the
/// output (`ov`: `<type>@<version>`) and told to a parent with it: the parent reads the
/// output from that version, and a worker whose code knows only an older one and not this
/// feature gives the parent back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputVersion {
    /// The type's name (`Versioned::NAME`), as in its [`value_feature`]; empty at version 1
    /// for a type the code does not declare.
    pub type_name: String,
    /// Its version (1 or above).
    pub version: u32,
}

impl OutputVersion {
    /// The run feature a value of it needs ([`value_feature`]).
    pub fn feature(&self) -> String {
        value_feature(&self.type_name, self.version)
    }

    /// How it is kept: `<type>@<version>`.
    pub fn field(&self) -> String {
        format!("{}@{}", self.type_name, self.version)
    }

    /// Reads [`OutputVersion::field`]; `None` for anything else (a version of 0, or a version
    /// above 1 without a type name).
    pub fn parse(field: &str) -> Option<Self> {
        let (type_name, v) = field.rsplit_once('@')?;
        let version: u32 = v.parse().ok().filter(|v| *v >= 1)?;
        (version == 1 || !type_name.is_empty()).then(|| Self {
            type_name: type_name.to_owned(),
            version,
        })
    }

    /// Whether it says version 1: the output is read as it is.
    pub fn is_first(&self) -> bool {
        self.version <= 1
    }
}

/// Whether `feature` is [`value_feature`]`(type_name, version)`, read without building it (a
/// slice checks its run's `needs` at every versioned value it records).
pub fn is_value_feature(feature: &str, type_name: &str, version: u32) -> bool {
    feature
        .strip_prefix("value:")
        .and_then(|r| r.strip_prefix(type_name))
        .and_then(|r| r.strip_prefix('@'))
        .is_some_and(|v| v.parse() == Ok(version))
}

/// The `needs` field of a run: feature names joined by `\x1f` (empty: none).
pub fn needs_field<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let set: std::collections::BTreeSet<&str> = names.into_iter().collect();
    set.into_iter().collect::<Vec<_>>().join("\u{1f}")
}

/// How a run is started beyond its workflow and input.
#[derive(Debug, Clone, Default)]
pub struct CreateOptions {
    /// The run fails with a timeout reason when this much time has passed since its creation,
    /// whatever it is doing (sleeping, waiting, running a step): the deadline is kept in the
    /// run and bounds its due time, so it fires after any crash.
    pub timeout: Option<std::time::Duration>,
    /// The run that starts this one as its child (kept as `parent`/`parent_i`): the child
    /// tells it when it ends.
    pub parent: Option<ParentLink>,
    /// The task queue it runs on (`None`: the deployment's default queue).
    pub queue: Option<String>,
    /// Its flow control: a limit of runs of a key at once, a start rate.
    pub flow: Option<Flow>,
    /// Its priority in a flow key's waiting line (0–9, higher first).
    pub priority: u8,
    /// The version of the input's type as the starting code declares it (`None` or 1: version
    /// 1, not written); a run with one above 1 needs a worker that upgrades inputs.
    pub input_version: Option<u32>,
    /// The name of the input's type, when the starting code declares its version: a run with
    /// an input version above 1 also needs a worker that knows that version of the type
    /// ([`value_feature`]).
    pub input_type: Option<String>,
}

impl CreateOptions {
    /// The run features (of [`FEATURES`], and the input's [`value_feature`]) a run started
    /// with these options uses.
    pub fn needs(&self) -> Vec<String> {
        let mut n = Vec::new();
        let mut need = |on: bool, name: &str| {
            if on {
                n.push(name.to_owned());
            }
        };
        need(self.parent.is_some(), "child");
        need(self.timeout.is_some(), "deadline");
        need(self.flow.is_some(), "flow");
        need(self.flow.as_ref().is_some_and(|f| f.rate.is_some()), "flow_rate");
        need(self.priority > 0, "priority");
        need(self.input_version.is_some_and(|v| v > 1), "input_version");
        need(self.queue.is_some(), "queue");
        if let (Some(v @ 2..), Some(t)) = (self.input_version, &self.input_type) {
            n.push(value_feature(t, v));
        }
        n
    }
}

/// A child run's link to its parent: the parent's thread and the journal index of the call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentLink {
    /// The parent run.
    pub thread: ThreadId,
    /// The journal index of the parent's `child` call.
    pub index: u32,
}

/// What cancelling a parent does to a child it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParentCancel {
    /// The child is cancelled too (the default).
    #[default]
    Cancel,
    /// The child runs on.
    Abandon,
}

impl ParentCancel {
    /// The stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            ParentCancel::Cancel => "cancel",
            ParentCancel::Abandon => "abandon",
        }
    }
}

/// A child run as its parent records it (field `children`: `\x1e<index>\x1f<thread>\x1f<policy>`
/// per child).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildLink {
    /// The journal index of the parent's call.
    pub index: u32,
    /// The child run.
    pub thread: ThreadId,
    /// What cancelling the parent does to it.
    pub on_parent_cancel: ParentCancel,
}

fn children_of(map: &BTreeMap<String, Vec<u8>>) -> Vec<ChildLink> {
    let Some(links) = text(map, "children") else {
        return Vec::new();
    };
    let mut out: Vec<ChildLink> = links
        .split('\x1e')
        .filter_map(|link| {
            let mut parts = link.split('\x1f');
            let index = parts.next()?.parse().ok()?;
            let (thread, policy) = (parts.next()?, parts.next().unwrap_or("cancel"));
            Some(ChildLink {
                index,
                thread: ThreadId::new(thread).ok()?,
                on_parent_cancel: if policy == "abandon" {
                    ParentCancel::Abandon
                } else {
                    ParentCancel::Cancel
                },
            })
        })
        .collect();
    out.sort_by_key(|c| c.index);
    out
}

/// A lease held by a worker: what every fenced write presents.
#[derive(Debug, Clone)]
pub struct Lease {
    /// The run.
    pub thread: ThreadId,
    /// The run's keys.
    pub keys: RunKeys,
    /// Worker incarnation.
    pub owner: String,
    /// Fencing token.
    pub fence: u64,
    /// Version last read or written.
    pub version: u64,
}

/// A successful claim: the run, its journal and its buffered signals.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// The lease to write with.
    pub lease: Lease,
    /// The header after the claim.
    pub header: RunHeader,
    /// The journal (or the reason it cannot be read): the whole journal, or with
    /// `journal_from` set, the entries from that index on.
    pub journal: Result<Vec<Entry>, StoreError>,
    /// `None`: `journal` is the whole journal. `Some(i)`: the claim was asked for what is new
    /// past a journal the worker holds ([`JournalHeld`]); `journal` holds entries `i..`, the
    /// first of which is the last one the worker holds (to check them against each other).
    pub journal_from: Option<u32>,
    /// Buffered signal fields (`i:<name>`, `s:<name>:<seq>`) → JSON values, and the versions
    /// an operator gave child outputs that came without one (`v:child:<index>`).
    pub signals: BTreeMap<String, Value>,
    /// Failed attempts recorded so far by journal index (`t:<index>`), for calls a previous
    /// slice retried and did not record.
    pub tries: BTreeMap<u32, u32>,
    /// Server time at the claim (ms).
    pub server_now: u64,
    /// True when this claim took over another worker's expired lease.
    pub takeover: bool,
    /// When the claim request was sent (monotonic): the start of the local lease deadline.
    pub sent_at: tokio::time::Instant,
    /// When its reply came (monotonic).
    pub received_at: tokio::time::Instant,
}

/// The part of a run's journal a worker holds from an earlier slice (its first `entries`
/// entries, as the run stood when it was created at `created` and restarted `restarts`
/// times): a claim then reads only what is new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalHeld {
    /// Entries held (at least 1).
    pub entries: u32,
    /// The run's creation time (ms), telling it from a run created again under its id.
    pub created: u64,
    /// The run's restarts (the only writes that drop entries).
    pub restarts: u32,
}

impl JournalHeld {
    /// What a run's header says the worker holds after a slice that left `entries` entries
    /// durable.
    pub fn of(header: &RunHeader, entries: u32) -> Self {
        Self {
            entries,
            created: header.created_at,
            restarts: header.restarts.map(|r| r.0).unwrap_or(0),
        }
    }
}

impl Claimed {
    /// The server's clock as this claim read it, bracketed by its request and its reply.
    pub fn server_clock(&self) -> crate::lease::ServerClock {
        crate::lease::ServerClock::new(self.server_now, self.sent_at, self.received_at)
    }
}

/// What a claim found.
#[derive(Debug, Clone)]
pub enum ClaimOutcome {
    /// The lease is ours.
    Claimed(Box<Claimed>),
    /// No such run (never created or expired).
    Missing,
    /// Ended (or blocked); nothing to do.
    Terminal(RunStatus),
    /// Waiting for a signal; a task is not enough to wake it.
    Waiting,
    /// Sleeping until this time (ms).
    NotDue(u64),
    /// Another live worker holds the lease.
    Leased(String),
    /// The task is behind the journal (a duplicate or old message).
    Stale(u32),
    /// This worker does not serve the run's workflow version (or checkpoint schema): it was
    /// given back untouched and is due again in `retry_in_ms`.
    Unserved {
        /// Shown on the run (`waiting for a worker that serves invoice v2`).
        reason: String,
        /// Back-off until the next try (ms).
        retry_in_ms: u64,
        /// The run's workflow.
        workflow: String,
        /// The run's recorded workflow version.
        version: u32,
        /// The run's ring version (to mark a task published for it).
        rv: u64,
        /// Times in a row the run was given back so far, this one included.
        tries: u32,
    },
    /// Taken over too often at one journal position: blocked as a poison run, with the reason.
    Poison(String),
    /// A pause holds the run: it was stopped (status [`RunStatus::Paused`]) and takes no slice
    /// until it is resumed. The pause's field (`run`, `w:<workflow>`, `v:<workflow>@<version>`,
    /// `q:<queue>`), empty when the run had been stopped already.
    Paused(String),
    /// The run is routed to this task queue, which this worker does not consume: untouched;
    /// the task belongs there.
    Misrouted(String),
}

/// Who holds an effect key's record: a run, the journal index of its call, the fence of the
/// attempt that took it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The run.
    pub thread: String,
    /// The journal index of its call (-1 when set by an operator).
    pub index: i64,
    /// The fence of the attempt.
    pub fence: u64,
}

impl Holder {
    /// The form stored on a blocked run and matched by resolve (`thread\x1findex\x1ffence`).
    pub fn token(&self) -> String {
        format!("{}\u{1f}{}\u{1f}{}", self.thread, self.index, self.fence)
    }

    /// Parses [`Holder::token`].
    pub fn parse(token: &str) -> Option<Self> {
        let mut p = token.split('\u{1f}');
        let thread = p.next()?.to_owned();
        let index = p.next()?.parse().ok()?;
        let fence = p.next()?.parse().ok()?;
        Some(Self { thread, index, fence })
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "run {} at entry {} (fence {})", self.thread, self.index, self.fence)
    }
}

/// How a slice ends a run (or stops it until an operator acts).
#[derive(Debug, Clone, Copy)]
pub enum Finish<'a> {
    /// Completed with this output, at this version of the output's type as the run's code
    /// declares it (`Versioned`; `None`: 1), kept as `ov` so a parent reading it as a child's
    /// output upgrades it from there.
    Completed(&'a Value, Option<&'a OutputVersion>),
    /// Failed with this error.
    Failed(&'a str),
    /// Blocked with a reason, optionally on an in-doubt effect key and the record it waits on.
    Blocked {
        /// Why.
        reason: &'a str,
        /// The kind of block (stored as `bk`).
        kind: BlockKind,
        /// The effect key and its holder, when an effect's outcome is unknown.
        effect: Option<(&'a str, &'a Holder)>,
    },
    /// Blocked because a delivered value (`consumed`, its signal field, dropped) did not
    /// decode; the run keeps its `wait`, so a new answer resumes it.
    Rejected {
        /// Why (the decode error).
        reason: &'a str,
        /// The wait it still waits on.
        wait: &'a Wait,
        /// The signal field of the rejected value.
        consumed: &'a str,
    },
}

impl Finish<'_> {
    /// The status it writes.
    pub fn status(&self) -> RunStatus {
        match self {
            Finish::Completed(..) => RunStatus::Completed,
            Finish::Failed(_) => RunStatus::Failed,
            Finish::Blocked { .. } | Finish::Rejected { .. } => RunStatus::Blocked,
        }
    }

    /// The kind of block it writes (`None`: it ends the run); a rejected value is undecodable.
    pub fn block_kind(&self) -> Option<BlockKind> {
        match self {
            Finish::Completed(..) | Finish::Failed(_) => None,
            Finish::Blocked { kind, .. } => Some(*kind),
            Finish::Rejected { .. } => Some(BlockKind::Undecodable),
        }
    }
}

/// What recording an effect intent found.
#[derive(Debug, Clone, PartialEq)]
pub enum EffectClaim {
    /// We hold the intent: perform the effect.
    Won,
    /// Already applied (by any run): record this result and skip the effect.
    Done(Value),
    /// This run's earlier attempt recorded the intent and did not finish: outcome unknown.
    InDoubt(Holder),
    /// A newer attempt of this run holds the intent: this attempt is fenced out.
    Stale(u64),
    /// This very attempt holds the key at another journal index (one key used twice at once).
    SelfHeld(u32),
    /// The run that held the intent ended (cancelled, expired) without settling it: in doubt
    /// until an operator resolves it. The status it ended with.
    Orphaned(Holder, String),
    /// Another run holds the intent right now: back off.
    Busy(Holder),
}

/// Budgets of one slice and of one run.
#[derive(Debug, Clone)]
pub struct SliceLimits {
    /// Live calls per slice before yielding to a continuation task.
    pub max_steps: u32,
    /// Wall time per slice before yielding.
    pub max_time: Duration,
    /// Journal entries per run; a run that would exceed it fails.
    pub max_entries: u32,
    /// Journal bytes per run (entries' MessagePack, before sealing); a run whose next entry
    /// would exceed it fails with the reason instead of growing its hash without bound.
    pub max_journal_bytes: u64,
    /// When a step's checkpoint must be acknowledged before the workflow goes on.
    pub checkpoints: Checkpoints,
}

/// When a step's checkpoint is acknowledged (`SAVEPOINT_CHECKPOINTS`, ARCHITECTURE §4a).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Checkpoints {
    /// A step's entry is sent at once and the workflow goes on; the next entries are batched
    /// behind it, and every entry is acknowledged before anything the run does outside itself
    /// (an effect, a child, a wait, a sleep, a routed step, a yield, the end). A crash can lose
    /// only steps with no consequence outside the run, which run again.
    #[default]
    Pipelined,
    /// Every entry is acknowledged before the workflow goes on (one round trip per step).
    Sync,
}

impl Checkpoints {
    /// Parses `pipelined` or `sync`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pipelined" => Some(Self::Pipelined),
            "sync" => Some(Self::Sync),
            _ => None,
        }
    }
}

impl Default for SliceLimits {
    fn default() -> Self {
        Self {
            max_steps: 64,
            max_time: Duration::from_secs(10),
            max_entries: 10_000,
            max_journal_bytes: 16 * 1024 * 1024,
            checkpoints: Checkpoints::Pipelined,
        }
    }
}

/// A run's flow control, as started (`fck`, `fcl`, `fcr`, `prio` in its hash).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Flow {
    /// The key (`<workflow>:<key>`): the runs that share a limit.
    pub key: String,
    /// Most runs of the key holding a slot at once.
    pub limit: u32,
    /// Starts per second of the key, if limited.
    pub rate: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_version_says_one_too_and_nothing_else_is_one() {
        let first = OutputVersion::parse("@1").unwrap();
        assert!(first.is_first() && first.type_name.is_empty());
        assert_eq!(OutputVersion::parse("kit.Price@1").unwrap().field(), "kit.Price@1");
        let two = OutputVersion::parse("kit.Price@2").unwrap();
        assert!(!two.is_first());
        assert_eq!(two.feature(), "value:kit.Price@2");
        for bad in ["", "kit.Price", "@2", "kit.Price@0", "kit.Price@x"] {
            assert_eq!(OutputVersion::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_value_feature_is_recognised_without_building_it() {
        let f = value_feature("app::Order<app::Line>", 12);
        assert!(is_value_feature(&f, "app::Order<app::Line>", 12));
        assert!(!is_value_feature(&f, "app::Order<app::Line>", 1));
        assert!(!is_value_feature(&f, "app::Order", 12));
        assert!(!is_value_feature("value_versions", "app::Order", 12));
        assert!(!is_value_feature(
            &value_feature("app::Order", 12),
            "app::Order<app::Line>",
            12
        ));
    }

    #[test]
    fn each_block_kind_round_trips_through_its_stored_name() {
        for kind in BlockKind::ALL {
            assert_eq!(BlockKind::parse(kind.as_str()), Some(kind));
            assert_eq!(serde_json::to_value(kind).unwrap(), Value::String(kind.as_str().into()));
        }
        assert_eq!(BlockKind::parse("nope"), None);
    }

    #[test]
    fn a_header_reads_the_block_kind_and_no_field_as_none() {
        let t = ThreadId::new("t-1").unwrap();
        let mut map = BTreeMap::from([("status".to_owned(), b"blocked".to_vec())]);
        let read = |map: &BTreeMap<String, Vec<u8>>| RunHeader::from_fields(&t, map).map(|h| h.block_kind).ok();
        assert_eq!(read(&map), Some(None), "blocked before the field existed");
        map.insert("bk".into(), b"poison".to_vec());
        assert_eq!(read(&map), Some(Some(BlockKind::Poison)));
        map.insert("bk".into(), b"newer_kind".to_vec());
        assert_eq!(read(&map), Some(Some(BlockKind::Other)));
    }
}
