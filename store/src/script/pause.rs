//! Pauses (ARCHITECTURE §16b): a run's own (its field `pz`), and a workflow's, a version's or
//! a task queue's, kept in a catalog and copied into every partition's pause hash, which each
//! claim of a run in that partition reads. A claim a pause holds stops the run (status
//! `paused`, out of the due zset, in the partition's paused index); lifting the pause puts the
//! runs it stopped back where it found them, due now, so the scanner rings them at its pace.

use futures::future::try_join_all;

use super::ScriptStore;
use crate::{RunStatus, StoreError};
use savepoint_core::ids::ThreadId;

/// Runs of the paused index one `unpark` script looks at.
const UNPARK_PAGE: usize = 256;

/// What a workflow, version or queue pause stops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PauseScope {
    /// Every run of a workflow.
    Workflow(String),
    /// Every run of one version of a workflow.
    Version(String, u32),
    /// Every run whose next task goes to a task queue; `default`: the fleet's default queue,
    /// which a run created without a queue is on.
    Queue {
        /// The queue's name.
        name: String,
        /// It is the default queue.
        default: bool,
    },
}

impl PauseScope {
    /// The field naming it in the catalog: `w:<wf>`, `v:<wf>@<version>`, `q:<queue>`.
    pub fn field(&self) -> String {
        match self {
            PauseScope::Workflow(w) => format!("w:{w}"),
            PauseScope::Version(w, v) => format!("v:{w}@{v}"),
            PauseScope::Queue { name, .. } => format!("q:{name}"),
        }
    }

    /// The fields the claim reads (a run on the default queue records no queue: `q:`).
    fn claim_fields(&self) -> Vec<String> {
        let mut f = vec![self.field()];
        if let PauseScope::Queue { default: true, .. } = self {
            f.push("q:".to_owned());
        }
        f
    }

    /// Reads a pause field back (`w:…`, `v:…@N`, `q:…`; `q:` is the default queue's, named
    /// `(default)`; a named queue reads as not the default one: the caller knows which is).
    /// `None` for a run's own pause (`run`) and anything else.
    pub fn parse_field(f: &str) -> Option<Self> {
        let (kind, name) = f.split_once(':')?;
        match kind {
            "w" => Some(PauseScope::Workflow(name.to_owned())),
            "v" => {
                let (w, v) = name.rsplit_once('@')?;
                Some(PauseScope::Version(w.to_owned(), v.parse().ok()?))
            }
            "q" if name.is_empty() => Some(PauseScope::Queue {
                name: "(default)".into(),
                default: true,
            }),
            "q" => Some(PauseScope::Queue {
                name: name.to_owned(),
                default: false,
            }),
            _ => None,
        }
    }
}

impl std::fmt::Display for PauseScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PauseScope::Workflow(w) => write!(f, "workflow {w}"),
            PauseScope::Version(w, v) => write!(f, "workflow {w} v{v}"),
            PauseScope::Queue { name, .. } => write!(f, "queue {name}"),
        }
    }
}

/// One pause: who asked, when (server ms), whether the runs it stops have their timers and
/// deadline held (moved later by the pause's length when resumed) or kept, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PauseRecord {
    /// Who paused (an API token's name, `cli`, `workflow code`).
    pub by: String,
    /// When (server ms; 0 when not written yet: the store takes the server's time).
    pub at: u64,
    /// Timers and the run deadline are held while paused (default: kept).
    pub hold_timers: bool,
    /// Why.
    pub note: String,
}

impl PauseRecord {
    /// A new pause (its time is the server's when it is written).
    pub fn new(by: &str, note: &str, hold_timers: bool) -> Self {
        Self {
            by: by.to_owned(),
            at: 0,
            hold_timers,
            note: note.to_owned(),
        }
    }

    /// `by\x1fat\x1fhold\x1fnote` (the unit separator cannot appear in the parts).
    pub fn encode(&self) -> String {
        let at = if self.at == 0 {
            String::new()
        } else {
            self.at.to_string()
        };
        let clean = |s: &str| s.replace('\u{1f}', " ");
        format!(
            "{}\u{1f}{at}\u{1f}{}\u{1f}{}",
            clean(&self.by),
            u8::from(self.hold_timers),
            clean(&self.note)
        )
    }

    /// Reads a stored record.
    pub fn decode(s: &str) -> Option<Self> {
        let mut it = s.splitn(4, '\u{1f}');
        let by = it.next()?.to_owned();
        let at = it.next()?.parse().unwrap_or(0);
        let hold_timers = it.next()? == "1";
        let note = it.next().unwrap_or("").to_owned();
        Some(Self {
            by,
            at,
            hold_timers,
            note,
        })
    }
}

/// A workflow, version or queue pause in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pause {
    /// What it stops.
    pub scope: PauseScope,
    /// Who, when, why.
    pub record: PauseRecord,
}

/// What pausing one run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunPaused {
    /// Paused; the status it had (a slice in flight yields at its next call).
    Paused(RunStatus),
    /// It was paused already, by this.
    Already(PauseRecord),
    /// No such run.
    Missing,
    /// It has ended or is blocked: nothing to pause.
    Terminal(RunStatus),
}

/// What resuming one run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunResumed {
    /// Its own pause is lifted; it was put back where the pause found it if the pause had
    /// stopped it (status before: `paused`), or it had not been stopped yet (its status).
    Resumed(RunStatus),
    /// Its own pause (if any) is lifted, but this workflow, version or queue pause still
    /// holds it.
    Held(String, PauseRecord),
    /// No pause of its own; this workflow, version or queue pause holds it (nothing changed).
    NotOwn(String, PauseRecord),
    /// No pause of its own, and none holds it.
    NotPaused(RunStatus),
    /// No such run.
    Missing,
    /// It has ended or is blocked.
    Terminal(RunStatus),
}

/// Runs a lifted pause put back, and runs another pause still holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unparked {
    /// Put back where their pause found them (due now).
    pub resumed: u64,
    /// Still stopped by another pause (their own, or another workflow's, version's or queue's).
    pub still_held: u64,
}

impl ScriptStore {
    /// Pauses one run: it takes no new slice until [`ScriptStore::resume_run`]. A slice in
    /// flight yields at its next call (its heartbeat, every third of the lease, finds the
    /// pause); the next claim stops the run.
    pub async fn pause_run(&self, thread: &ThreadId, record: &PauseRecord) -> Result<RunPaused, StoreError> {
        let r = self.pause_run_script(thread, "pause", &record.encode(), None).await?;
        Ok(match r.tag().as_str() {
            "ok" => RunPaused::Paused(status(&r.text(1))),
            "already" => {
                RunPaused::Already(PauseRecord::decode(&r.text(1)).unwrap_or(PauseRecord::new("?", "", false)))
            }
            "missing" => RunPaused::Missing,
            "terminal" => RunPaused::Terminal(status(&r.text(1))),
            other => return Err(StoreError::Reply(format!("pause_run: {other}"))),
        })
    }

    /// Lifts a run's own pause and, unless another pause holds it, puts it back where the
    /// pause found it (due now), on workflow version `version` if given. `detail` (who and
    /// why) goes into its `unpaused` event.
    pub async fn resume_run(
        &self,
        thread: &ThreadId,
        detail: &str,
        version: Option<u32>,
    ) -> Result<RunResumed, StoreError> {
        let r = self.pause_run_script(thread, "resume", detail, version).await?;
        Ok(match r.tag().as_str() {
            "ok" => RunResumed::Resumed(status(&r.text(1))),
            "held" => RunResumed::Held(
                r.text(1),
                PauseRecord::decode(&r.text(2)).unwrap_or(PauseRecord::new("?", "", false)),
            ),
            "not_own" => RunResumed::NotOwn(
                r.text(1),
                PauseRecord::decode(&r.text(2)).unwrap_or(PauseRecord::new("?", "", false)),
            ),
            "not_paused" => RunResumed::NotPaused(status(&r.text(1))),
            "missing" => RunResumed::Missing,
            "terminal" => RunResumed::Terminal(status(&r.text(1))),
            other => return Err(StoreError::Reply(format!("pause_run: {other}"))),
        })
    }

    async fn pause_run_script(
        &self,
        thread: &ThreadId,
        action: &str,
        text: &str,
        version: Option<u32>,
    ) -> Result<super::reply::Reply, StoreError> {
        let k = self.keys.run(thread);
        let mut inv = self.scripts.pause_run.prepare_invoke();
        inv.key(&k.run)
            .key(&k.events)
            .key(k.pauses())
            .key(&k.due)
            .key(&k.waiting)
            .key(k.paused());
        inv.arg(thread.as_str()).arg(action).arg(text).arg(self.cfg.event_cap);
        inv.arg(version.map(|v| v.to_string()).unwrap_or_default());
        self.invoke(&inv).await
    }

    /// Pauses a workflow, a version or a queue: one record in the catalog, then its copy in
    /// every partition, which each claim reads (no scan over runs). When this returns, no
    /// claim starts a slice of a run it holds; slices in flight yield at their next call.
    /// Returns the record it replaced, if the scope was paused already.
    pub async fn pause(&self, scope: &PauseScope, record: &PauseRecord) -> Result<Option<PauseRecord>, StoreError> {
        let stamped = match self
            .put_pause(&self.keys.pause_catalog(), &scope.field(), &record.encode())
            .await?
        {
            old if old.is_empty() => None,
            old => PauseRecord::decode(&old),
        };
        // Every copy carries the catalog's time (the record's `at`: what held timers count from).
        let written = self
            .pauses()
            .await?
            .into_iter()
            .find(|p| p.scope.field() == scope.field());
        let text = written.map(|p| p.record.encode()).unwrap_or_else(|| record.encode());
        self.put_partitions(scope, &text).await?;
        Ok(stamped)
    }

    /// Lifts a workflow, version or queue pause (every partition's copy, then the catalog),
    /// then puts back the runs no pause holds any more, moving those of `version`'s workflow to
    /// that version. `None` when the scope was not paused.
    pub async fn resume(
        &self,
        scope: &PauseScope,
        detail: &str,
        version: Option<(&str, u32)>,
    ) -> Result<Option<(PauseRecord, Unparked)>, StoreError> {
        // The catalog first, then the copies: the sweep never writes back a copy whose catalog
        // record is gone. A retry after a try that failed half-way finds no record, lifts
        // what is left and puts the runs back all the same (and answers `None`).
        let old = self.put_pause(&self.keys.pause_catalog(), &scope.field(), "").await?;
        self.put_partitions(scope, "").await?;
        let back = self.unpark_all(detail, version).await?;
        Ok(PauseRecord::decode(&old).map(|r| (r, back)))
    }

    /// The workflow, version and queue pauses in force (the catalog).
    pub async fn pauses(&self) -> Result<Vec<Pause>, StoreError> {
        let all: Vec<(String, String)> = self
            .engine
            .query(redis::cmd("HGETALL").arg(self.keys.pause_catalog()))
            .await?;
        Ok(all
            .into_iter()
            .filter_map(|(f, v)| {
                Some(Pause {
                    scope: PauseScope::parse_field(&f)?,
                    record: PauseRecord::decode(&v)?,
                })
            })
            .collect())
    }

    /// Puts back the runs of partition `p` that no pause holds any more (a page of its paused
    /// index at a time). The API calls it for every partition after lifting a pause; the
    /// scanner calls it for its partitions as the net for a lift whose caller died before it.
    pub async fn unpark_partition(
        &self,
        p: u16,
        detail: &str,
        version: Option<(&str, u32)>,
    ) -> Result<Unparked, StoreError> {
        let index = self.keys.status_index(p, "paused");
        let mut out = Unparked::default();
        let mut start = 0usize;
        loop {
            let page: Vec<String> = self
                .engine
                .query(redis::cmd("ZRANGE").arg(&index).arg(start).arg(start + UNPARK_PAGE - 1))
                .await?;
            if page.is_empty() {
                return Ok(out);
            }
            let mut inv = self.scripts.unpark.prepare_invoke();
            inv.key(self.keys.pauses(p))
                .key(self.keys.due(p))
                .key(self.keys.status_index(p, "waiting"))
                .key(&index);
            for t in &page {
                inv.key(self.keys.run_in(p, t)).key(self.keys.events_in(p, t));
            }
            inv.arg(self.cfg.event_cap).arg(detail);
            let (wf, v) = version.map(|(w, v)| (w, v.to_string())).unwrap_or_default();
            inv.arg(wf).arg(v);
            for t in &page {
                inv.arg(t.as_str());
            }
            let r = self.invoke(&inv).await?;
            let (back, kept) = (r.num(0), r.num(1));
            out.resumed += back;
            out.still_held += kept;
            // Put-back and stale members left the index; held ones stay ahead of the next page.
            start += kept as usize;
            if page.len() < UNPARK_PAGE {
                return Ok(out);
            }
        }
    }

    /// [`ScriptStore::unpark_partition`] for every partition.
    pub async fn unpark_all(&self, detail: &str, version: Option<(&str, u32)>) -> Result<Unparked, StoreError> {
        let parts =
            try_join_all((0..self.keys.partitions()).map(|p| self.unpark_partition(p, detail, version))).await?;
        Ok(parts.into_iter().fold(Unparked::default(), |a, b| Unparked {
            resumed: a.resumed + b.resumed,
            still_held: a.still_held + b.still_held,
        }))
    }

    /// How many runs a pause has stopped (the paused indexes; members cancelled since are
    /// counted until the next put-back pass drops them).
    pub async fn paused_count(&self) -> Result<u64, StoreError> {
        let mut pipe = redis::pipe();
        for p in 0..self.keys.partitions() {
            pipe.cmd("ZCARD").arg(self.keys.status_index(p, "paused"));
        }
        let n: Vec<u64> = self.engine.pipeline(&pipe).await?;
        Ok(n.into_iter().sum())
    }

    /// The net under pause and resume, for partition `p` (the scanner runs it now and then
    /// for the partitions it owns): makes the partition's copy of the pauses match the
    /// `catalog` (a pause or resume whose caller died half-way, or two racing), then puts back
    /// the runs no pause holds any more, if a pause was lifted in the partition since the walk
    /// at generation `walked`. `home`: the default task queue's name. Returns what it put back
    /// and the generation it walked at (`None`: walk again next time).
    pub async fn pause_sweep(
        &self,
        p: u16,
        catalog: &[Pause],
        home: Option<&str>,
        walked: Option<&str>,
    ) -> Result<(Unparked, Option<String>), StoreError> {
        let key = self.keys.pauses(p);
        // The partition's copy first, then the catalog: a pause writes its catalog record
        // before its copies and a lift removes it before them, so a copy read here that the
        // catalog read after lacks was lifted (its removal is conditional on the record read,
        // so a newer pause is never undone).
        let mut have: std::collections::BTreeMap<String, String> =
            self.engine.query(redis::cmd("HGETALL").arg(&key)).await?;
        let gen = have.remove("#gen").unwrap_or_default();
        let catalog = if have.is_empty() {
            catalog.to_vec()
        } else {
            self.pauses().await?
        };
        let want: std::collections::BTreeMap<String, String> = catalog
            .iter()
            .flat_map(|c| {
                let mut scope = c.scope.clone();
                if let PauseScope::Queue { name, default } = &mut scope {
                    *default = home == Some(name.as_str());
                }
                let record = c.record.encode();
                scope.claim_fields().into_iter().map(move |f| (f, record.clone()))
            })
            .collect();
        let mut added = Vec::new();
        for (f, r) in want.iter().filter(|(f, r)| have.get(*f) != Some(*r)) {
            self.put_pause_if(&key, f, r, "").await?;
            added.push((f, r));
        }
        // A copy added for a pause lifted meanwhile is taken back at once.
        if !added.is_empty() {
            let now = self.pauses().await?;
            for (f, r) in added {
                if !now.iter().any(|c| c.record.encode() == *r) {
                    self.put_pause_if(&key, f, "", r).await?;
                }
            }
        }
        let mut lifted = false;
        for (f, r) in have.iter().filter(|(f, _)| !want.contains_key(*f)) {
            lifted |= self.put_pause_if(&key, f, "", r).await? == *r;
        }
        // The stopped runs are walked when a lift happened since the last walk (a caller that
        // died before its put-back), or on this replica's first sweep: not every time, or a
        // pause in force over many runs would cost a walk over all of them per sweep.
        // (After a lift of its own the sweep walks now and again next time, which reads the
        // generation its lift moved.)
        if !lifted && walked == Some(gen.as_str()) {
            return Ok((Unparked::default(), Some(gen)));
        }
        let back = self
            .unpark_partition(p, "resumed: no pause holds the run any more", None)
            .await?;
        Ok((back, (!lifted).then_some(gen)))
    }

    async fn put_partitions(&self, scope: &PauseScope, record: &str) -> Result<(), StoreError> {
        let fields = scope.claim_fields();
        try_join_all((0..self.keys.partitions()).flat_map(|p| {
            let key = self.keys.pauses(p);
            fields.iter().map(move |f| {
                let key = key.clone();
                async move { self.put_pause(&key, f, record).await }
            })
        }))
        .await?;
        Ok(())
    }

    /// One `pause_put`: the previous record ('' = none).
    async fn put_pause(&self, key: &str, field: &str, record: &str) -> Result<String, StoreError> {
        self.put_pause_if(key, field, record, "").await
    }

    /// `pause_put` only if the field holds `expected` ('' = whatever it holds).
    async fn put_pause_if(&self, key: &str, field: &str, record: &str, expected: &str) -> Result<String, StoreError> {
        let mut inv = self.scripts.pause_put.prepare_invoke();
        inv.key(key).arg(field).arg(record).arg(expected);
        Ok(self.invoke(&inv).await?.text(1))
    }
}

fn status(s: &str) -> RunStatus {
    RunStatus::parse(s).unwrap_or(RunStatus::Pending)
}
