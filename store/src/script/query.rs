//! Read-only queries: one run, its events, listing.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::reply::flat_map;
use super::ScriptStore;
use crate::model::journal_from_fields;
use crate::{RunHeader, RunStatus, StoreError};
use savepoint_core::ids::ThreadId;
use savepoint_core::journal::Entry;

/// One event of a run's event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEvent {
    /// Position in the run's event log.
    pub id: String,
    /// Event type (`claimed`, `takeover`, `effect_done`, `slept`, …).
    #[serde(rename = "type")]
    pub typ: String,
    /// Free text detail.
    pub detail: String,
    /// Server time (ms).
    pub at: u64,
}

/// Runs by workflow and status ([`ScriptStore::status_counts_by_workflow`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkflowCounts {
    /// Workflow name → status → runs.
    pub by_workflow: BTreeMap<String, BTreeMap<RunStatus, u64>>,
    /// Runs counted.
    pub counted: u64,
    /// True when an index held more runs than were read.
    pub capped: bool,
}

/// What [`ScriptStore::list_page`] keeps.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListFilter {
    /// Only this status.
    pub status: Option<RunStatus>,
    /// Only this workflow.
    pub workflow: Option<String>,
    /// Only thread ids starting with this.
    pub prefix: Option<String>,
    /// Created at or after (ms).
    pub from: Option<u64>,
    /// Created at or before (ms).
    pub until: Option<u64>,
}

/// Where a page of [`ScriptStore::list_page`] ended: the index score (creation time) and the
/// thread id of its last run. Written `<ms>.<thread>` in URLs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageCursor {
    /// Index score of the last run shown.
    pub at: u64,
    /// Its thread id.
    pub thread: String,
}

impl PageCursor {
    /// True when a run at (`at`, `thread`) comes after this cursor in newest-first order.
    fn is_after(&self, at: u64, thread: &str) -> bool {
        at < self.at || (at == self.at && thread < self.thread.as_str())
    }

    /// Parses `<ms>.<thread>`.
    pub fn parse(s: &str) -> Option<Self> {
        let (at, thread) = s.split_once('.')?;
        Some(Self {
            at: at.parse().ok()?,
            thread: thread.to_owned(),
        })
    }
}

impl std::fmt::Display for PageCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.at, self.thread)
    }
}

/// Every field of the run hash except the journal (`j:<i>`).
const HEADER_FIELDS: [&str; 51] = [
    "wf",
    "wfv",
    "schema",
    "status",
    "steps",
    "ver",
    "owner",
    "fence",
    "lease",
    "attempt",
    "due",
    "created",
    "updated",
    "finished",
    "input",
    "output",
    "error",
    "reason",
    "bk",
    "blocked_fx",
    "blocked_fx_owner",
    "waiting_for",
    "wait_fx",
    "wait_fx_n",
    "deadline",
    "forked_from",
    "restarts",
    "restarted_from",
    "parent",
    "parent_i",
    "children",
    "q",
    "hq",
    "fck",
    "fcl",
    "fcr",
    "prio",
    "needs",
    "crashes",
    "crashed_by",
    "wait_kind",
    "wait_name",
    "wait_payload",
    "trace",
    "pz",
    "pzw",
    "pzr",
    "ps",
    "rb",
    "iv",
    "ov",
];

/// A header from the values of `HMGET <run> HEADER_FIELDS…` (`None`: no such run).
fn header_from_values(
    store: &ScriptStore,
    thread: &ThreadId,
    values: Vec<Option<Vec<u8>>>,
) -> Result<Option<RunHeader>, StoreError> {
    let mut fields: BTreeMap<String, Vec<u8>> = HEADER_FIELDS
        .iter()
        .zip(values)
        .filter_map(|(k, v)| v.map(|v| ((*k).to_owned(), v)))
        .collect();
    if fields.is_empty() {
        return Ok(None);
    }
    store.open_fields(thread, &mut fields)?;
    RunHeader::from_fields(thread, &fields).map(Some)
}

/// A run found in a listing index: its score, partition and thread id.
type Candidate = (u64, u16, String);

/// Where a [`ScriptStore::list_page`] scan is: its bounds, the last run it looked at and the
/// runs it kept.
struct PageScan<'f> {
    /// What the page keeps.
    filter: &'f ListFilter,
    /// Lowest index score read (`from`, or `-inf`).
    min: String,
    /// Highest index score read (`until`, on the creation index only).
    until: Option<u64>,
    /// Runs read from every partition per round.
    chunk: usize,
    /// Runs the page holds at most.
    limit: usize,
    /// Run headers read at most.
    scan_cap: usize,
    /// The last run looked at.
    cursor: Option<PageCursor>,
    /// Run headers read so far.
    read: usize,
    /// The runs kept.
    out: Vec<RunHeader>,
    /// The cursor of the next page, once the page is full.
    next: Option<PageCursor>,
}

impl<'f> PageScan<'f> {
    /// A scan of the runs before `before` matching `filter`, nothing read yet.
    fn new(filter: &'f ListFilter, before: Option<&PageCursor>, limit: usize, scan_cap: usize) -> Self {
        // Blocked and waiting runs are read from their own indexes, scored by when they stopped
        // (never before they were created, so `from` still bounds the scan there); elsewhere
        // the score is the creation time, which `until` bounds too.
        let own_index = matches!(
            filter.status,
            Some(RunStatus::Blocked | RunStatus::Waiting | RunStatus::Paused)
        );
        Self {
            filter,
            min: filter.from.map(|t| t.to_string()).unwrap_or_else(|| "-inf".into()),
            until: filter.until.filter(|_| !own_index),
            // Each round takes, from every partition, all runs tied with the cursor's score that
            // come after it and the next `chunk` runs below that score; the newest `chunk` of
            // those are the next `chunk` runs overall (a run among them is among its partition's
            // own next `chunk`).
            chunk: limit.clamp(10, 200),
            limit,
            scan_cap,
            cursor: before.cloned(),
            read: 0,
            out: Vec::new(),
            next: None,
        }
    }

    /// The cursor, when runs tied with its score may still follow it (it is within `until`).
    fn tie(&self) -> Option<&PageCursor> {
        self.cursor.as_ref().filter(|c| self.until.is_none_or(|u| c.at <= u))
    }

    /// The highest score of the runs below the tie (exclusive of a tied cursor's score).
    fn upper(&self) -> String {
        match (self.tie(), &self.cursor, self.until) {
            (Some(c), _, _) => format!("({}", c.at),
            (None, Some(c), Some(u)) => c.at.min(u).to_string(),
            (None, None, Some(u)) => u.to_string(),
            (None, _, None) => "+inf".into(),
        }
    }

    /// The newest `chunk` runs after the cursor among the partitions' replies to
    /// [`ScriptStore::page_candidates`] (one or, with a tie, two replies a partition).
    fn candidates(&self, replies: Vec<Vec<(String, u64)>>) -> Vec<Candidate> {
        let per = if self.tie().is_some() { 2 } else { 1 };
        let mut candidates: Vec<Candidate> = Vec::new();
        for (i, ids) in replies.into_iter().enumerate() {
            let p = (i / per) as u16;
            candidates.extend(
                ids.into_iter()
                    .map(|(id, at)| (at, p, id))
                    .filter(|(at, _, id)| self.cursor.as_ref().is_none_or(|c| c.is_after(*at, id))),
            );
        }
        candidates.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| b.2.cmp(&a.2)));
        candidates.truncate(self.chunk);
        candidates
    }

    /// True when a run's header does not match the filter's status, workflow or creation
    /// time bounds.
    fn rejects(&self, h: &RunHeader) -> bool {
        self.filter.status.is_some_and(|s| s != h.status)
            || self.filter.workflow.as_deref().is_some_and(|w| w != h.workflow)
            || self.filter.from.is_some_and(|f| h.created_at < f)
            || self.filter.until.is_some_and(|u| h.created_at > u)
    }
}

impl ScriptStore {
    /// A run's header and journal, if it exists.
    pub async fn get(&self, thread: &ThreadId) -> Result<Option<(RunHeader, Vec<Entry>)>, StoreError> {
        let v: redis::Value = self
            .engine
            .query(redis::cmd("HGETALL").arg(&self.keys.run(thread).run))
            .await?;
        let mut fields = flat_map(&v);
        if fields.is_empty() {
            return Ok(None);
        }
        self.open_fields(thread, &mut fields)?;
        let header = RunHeader::from_fields(thread, &fields)?;
        let journal = journal_from_fields(&header, &fields)?;
        Ok(Some((header, journal)))
    }

    /// A run's header only: HMGET of the header fields, so polling a long run does not move
    /// its journal.
    pub async fn header(&self, thread: &ThreadId) -> Result<Option<RunHeader>, StoreError> {
        let values: Vec<Option<Vec<u8>>> = self
            .engine
            .query(
                redis::cmd("HMGET")
                    .arg(&self.keys.run(thread).run)
                    .arg(&HEADER_FIELDS[..]),
            )
            .await?;
        header_from_values(self, thread, values)
    }

    /// The task queue a run's next task goes to (`None`: the default queue, or no such run).
    pub async fn run_queue(&self, thread: &ThreadId) -> Result<Option<String>, StoreError> {
        let q: Option<String> = self
            .engine
            .query(redis::cmd("HGET").arg(&self.keys.run(thread).run).arg("q"))
            .await?;
        Ok(q.filter(|q| !q.is_empty()))
    }

    /// The task queue a run's next task goes to (`None`: the default queue) and the worker
    /// whose sticky queue of it the task goes to first (`None`: none; see
    /// [`crate::StoreConfig::sticky`]): the one that suspended the run keeping its body or
    /// journal, named while the run is not running.
    pub async fn run_route(&self, thread: &ThreadId) -> Result<(Option<String>, Option<String>), StoreError> {
        let (q, held, status): (Option<String>, Option<String>, Option<String>) = self
            .engine
            .query(
                redis::cmd("HMGET")
                    .arg(&self.keys.run(thread).run)
                    .arg("q")
                    .arg("held")
                    .arg("status"),
            )
            .await?;
        let held = held.filter(|h| !h.is_empty() && status.as_deref() != Some("running"));
        Ok((q.filter(|q| !q.is_empty()), held))
    }

    /// One journal entry of a run (`None` if the run or the entry does not exist).
    pub async fn entry(&self, thread: &ThreadId, index: u32) -> Result<Option<Entry>, StoreError> {
        let raw: Option<Vec<u8>> = self
            .engine
            .query(
                redis::cmd("HGET")
                    .arg(&self.keys.run(thread).run)
                    .arg(format!("j:{index}")),
            )
            .await?;
        raw.map(|r| {
            let r = self.open_run(thread, &format!("j:{index}"), &r)?;
            Entry::decode(&r).map_err(|e| StoreError::Corrupt(format!("run {thread}: entry {index}: {e}")))
        })
        .transpose()
    }

    /// The last `count` events of a run, oldest first.
    pub async fn events(&self, thread: &ThreadId, count: usize) -> Result<Vec<RunEvent>, StoreError> {
        let raw: Vec<String> = self
            .engine
            .query(
                redis::cmd("LRANGE")
                    .arg(&self.keys.run(thread).events)
                    .arg(-(count.max(1) as i64))
                    .arg(-1),
            )
            .await?;
        let len: i64 = self
            .engine
            .query(redis::cmd("LLEN").arg(&self.keys.run(thread).events))
            .await?;
        let first = len - raw.len() as i64;
        let out = raw
            .iter()
            .enumerate()
            .map(|(i, line)| {
                let mut parts = line.splitn(3, '\u{1f}');
                let at = parts.next().unwrap_or("0").parse().unwrap_or(0);
                let typ = parts.next().unwrap_or("").to_owned();
                let detail = self.open_event(thread, parts.next().unwrap_or("").to_owned());
                RunEvent {
                    id: (first + i as i64).to_string(),
                    typ,
                    detail,
                    at,
                }
            })
            .collect();
        Ok(out)
    }

    /// Recent runs, newest first, optionally of one status. Blocked and waiting runs come from
    /// their own indexes, so every one of them is listed however old it is; other statuses are
    /// filtered from the creation-time index (trimmed after the retention). Index entries whose
    /// run has expired are dropped.
    pub async fn list(&self, status: Option<RunStatus>, limit: usize) -> Result<Vec<RunHeader>, StoreError> {
        // A status other than blocked and waiting is filtered from the creation index: read up
        // to 4x the limit (at least 100) per partition for it.
        let per = match status {
            Some(RunStatus::Blocked | RunStatus::Waiting | RunStatus::Paused) | None => limit,
            Some(_) => limit.saturating_mul(4).max(100),
        };
        let filter = ListFilter {
            status,
            ..ListFilter::default()
        };
        let scan_cap = per.saturating_mul(usize::from(self.keys.partitions()));
        Ok(self.list_page(&filter, None, limit, scan_cap).await?.0)
    }

    /// One page of runs, newest first (by creation time, then thread id), for the console:
    /// runs created before `before` (exclusive; `None` starts at the newest) and not before
    /// `filter.from`, matching `filter`. Reads at most `scan_cap` run headers; the second value
    /// is the cursor of the next page (`None`: nothing older). Blocked and waiting runs come
    /// from their own indexes (every one of them however old, ordered by when they stopped).
    pub async fn list_page(
        &self,
        filter: &ListFilter,
        before: Option<&PageCursor>,
        limit: usize,
        scan_cap: usize,
    ) -> Result<(Vec<RunHeader>, Option<PageCursor>), StoreError> {
        let mut scan = PageScan::new(filter, before, limit, scan_cap);
        loop {
            let candidates = self.page_candidates(&scan).await?;
            if candidates.is_empty() {
                break;
            }
            let headers = self.page_headers(&candidates).await?;
            let expired = self.page_keep(&mut scan, candidates, headers)?;
            self.drop_expired(filter.status, expired).await?;
            if scan.next.is_some() {
                break;
            }
        }
        Ok((scan.out, scan.next))
    }

    /// The index a listing of `status` reads in partition `p`: blocked and waiting runs have
    /// their own, every other status the creation index.
    fn page_index(&self, status: Option<RunStatus>, p: u16) -> String {
        match status {
            Some(s @ (RunStatus::Blocked | RunStatus::Waiting | RunStatus::Paused)) => {
                self.keys.status_index(p, s.as_str())
            }
            _ => self.keys.index(p),
        }
    }

    /// One round's candidates: from every partition, the runs tied with the cursor's score
    /// that come after it and the next `chunk` runs below that score; the newest `chunk`.
    async fn page_candidates(&self, scan: &PageScan<'_>) -> Result<Vec<Candidate>, StoreError> {
        let tie = scan.tie();
        let upper = scan.upper();
        let mut pipe = redis::pipe();
        for p in 0..self.keys.partitions() {
            let index = self.page_index(scan.filter.status, p);
            if let Some(c) = tie {
                pipe.cmd("ZREVRANGEBYSCORE")
                    .arg(&index)
                    .arg(c.at)
                    .arg(c.at)
                    .arg("WITHSCORES");
            }
            pipe.cmd("ZREVRANGEBYSCORE")
                .arg(&index)
                .arg(&upper)
                .arg(&scan.min)
                .arg("WITHSCORES")
                .arg("LIMIT")
                .arg(0)
                .arg(scan.chunk);
        }
        let replies: Vec<Vec<(String, u64)>> = self.engine.pipeline(&pipe).await?;
        Ok(scan.candidates(replies))
    }

    /// The header values of a round's candidates (`HMGET`), in one round trip.
    async fn page_headers(&self, candidates: &[Candidate]) -> Result<Vec<Vec<Option<Vec<u8>>>>, StoreError> {
        let mut pipe = redis::pipe();
        for (_, p, id) in candidates {
            pipe.cmd("HMGET").arg(self.keys.run_in(*p, id)).arg(&HEADER_FIELDS[..]);
        }
        self.engine.pipeline(&pipe).await
    }

    /// Goes through a round's runs in order until the page is full, keeping those that match
    /// the filter; returns the index entries (partition, thread id) whose run has expired.
    fn page_keep(
        &self,
        scan: &mut PageScan<'_>,
        candidates: Vec<Candidate>,
        headers: Vec<Vec<Option<Vec<u8>>>>,
    ) -> Result<Vec<(u16, String)>, StoreError> {
        let mut expired = Vec::new();
        for ((at, p, id), values) in candidates.into_iter().zip(headers) {
            if scan.out.len() >= scan.limit || scan.read >= scan.scan_cap {
                scan.next = scan.cursor.clone();
                break;
            }
            scan.cursor = Some(PageCursor { at, thread: id.clone() });
            scan.read += 1;
            let Ok(thread) = ThreadId::new(id.clone()) else {
                continue;
            };
            if scan.filter.prefix.as_deref().is_some_and(|pre| !id.starts_with(pre)) {
                continue;
            }
            let Some(h) = header_from_values(self, &thread, values)? else {
                expired.push((p, id));
                continue;
            };
            if scan.rejects(&h) {
                continue;
            }
            scan.out.push(h);
        }
        Ok(expired)
    }

    /// Removes index entries whose run has expired from the index a listing of `status` reads.
    async fn drop_expired(&self, status: Option<RunStatus>, expired: Vec<(u16, String)>) -> Result<(), StoreError> {
        for (p, id) in expired {
            let _: i64 = self
                .engine
                .query(redis::cmd("ZREM").arg(self.page_index(status, p)).arg(&id))
                .await?;
        }
        Ok(())
    }

    /// Runs by status among the newest `cap` runs of the creation index (blocked and waiting
    /// counted exactly from their own indexes), and whether the count stopped at `cap`.
    pub async fn status_counts(&self, cap: usize) -> Result<(BTreeMap<RunStatus, u64>, bool), StoreError> {
        let parts = self.keys.partitions();
        let per = (cap / usize::from(parts.max(1))).max(1);
        // The newest ids of every partition and the two status indexes' sizes, in one round
        // trip; then every id's status in a second.
        let mut pipe = redis::pipe();
        for p in 0..parts {
            pipe.cmd("ZREVRANGE").arg(self.keys.index(p)).arg(0).arg(per);
        }
        let ids: Vec<Vec<String>> = self.engine.pipeline(&pipe).await?;
        let mut counts: BTreeMap<RunStatus, u64> = BTreeMap::new();
        let capped = ids.iter().any(|ids| ids.len() > per);
        let mut pipe = redis::pipe();
        for (p, ids) in ids.iter().enumerate() {
            for id in ids.iter().take(per) {
                pipe.cmd("HGET").arg(self.keys.run_in(p as u16, id)).arg("status");
            }
        }
        let statuses: Vec<Option<String>> = match ids.iter().any(|ids| !ids.is_empty()) {
            true => self.engine.pipeline(&pipe).await?,
            false => Vec::new(),
        };
        for s in statuses.into_iter().flatten().filter_map(|s| RunStatus::parse(&s)) {
            if !matches!(s, RunStatus::Blocked | RunStatus::Waiting | RunStatus::Paused) {
                *counts.entry(s).or_default() += 1;
            }
        }
        for s in [RunStatus::Blocked, RunStatus::Waiting, RunStatus::Paused] {
            counts.insert(s, self.status_index_size(s).await?);
        }
        Ok((counts, capped))
    }

    /// Runs by workflow and status: among the newest `cap` runs of the creation index, plus
    /// up to `cap` of each of the blocked and waiting indexes (their runs however old), with
    /// how many runs were counted and whether any index held more than was read.
    pub async fn status_counts_by_workflow(&self, cap: usize) -> Result<WorkflowCounts, StoreError> {
        let parts = self.keys.partitions();
        let per = (cap / usize::from(parts.max(1))).max(1);
        let mut out = WorkflowCounts::default();
        // The creation index (statuses other than blocked and waiting), then each of those two.
        let indexes = [
            None,
            Some(RunStatus::Blocked),
            Some(RunStatus::Waiting),
            Some(RunStatus::Paused),
        ];
        for status in indexes {
            let mut pipe = redis::pipe();
            for p in 0..parts {
                let index = match status {
                    None => self.keys.index(p),
                    Some(s) => self.keys.status_index(p, s.as_str()),
                };
                pipe.cmd("ZREVRANGE").arg(index).arg(0).arg(per);
            }
            let ids: Vec<Vec<String>> = self.engine.pipeline(&pipe).await?;
            out.capped |= ids.iter().any(|ids| ids.len() > per);
            let mut pipe = redis::pipe();
            let mut any = false;
            for (p, ids) in ids.iter().enumerate() {
                for id in ids.iter().take(per) {
                    pipe.cmd("HMGET")
                        .arg(self.keys.run_in(p as u16, id))
                        .arg("status")
                        .arg("wf");
                    any = true;
                }
            }
            let rows: Vec<(Option<String>, Option<String>)> = match any {
                true => self.engine.pipeline(&pipe).await?,
                false => Vec::new(),
            };
            for (st, wf) in rows {
                let (Some(st), Some(wf)) = (st.as_deref().and_then(RunStatus::parse), wf) else {
                    continue; // expired since it was indexed
                };
                // Blocked and waiting runs are counted from their own indexes only.
                let own_index = matches!(st, RunStatus::Blocked | RunStatus::Waiting | RunStatus::Paused);
                if own_index == status.is_some() {
                    *out.by_workflow.entry(wf).or_default().entry(st).or_default() += 1;
                    out.counted += 1;
                }
            }
        }
        Ok(out)
    }

    /// How many runs the `blocked` or `waiting` index holds (every such run, however old);
    /// 0 for other statuses, which have no index of their own.
    pub async fn status_index_size(&self, status: RunStatus) -> Result<u64, StoreError> {
        if !matches!(status, RunStatus::Blocked | RunStatus::Waiting | RunStatus::Paused) {
            return Ok(0);
        }
        let mut pipe = redis::pipe();
        for p in 0..self.keys.partitions() {
            pipe.cmd("ZCARD").arg(self.keys.status_index(p, status.as_str()));
        }
        let sizes: Vec<u64> = self.engine.pipeline(&pipe).await?;
        Ok(sizes.into_iter().sum())
    }

    /// Bytes Redis holds for one run: `MEMORY USAGE … SAMPLES 0` of its hash, event log,
    /// signals and client ids (benchmarks and the load generator report it).
    pub async fn run_memory_bytes(&self, thread: &ThreadId) -> Result<u64, StoreError> {
        let k = self.keys.run(thread);
        let mut pipe = redis::pipe();
        for key in [&k.run, &k.events, &k.signals, &k.dedup()] {
            pipe.cmd("MEMORY").arg("USAGE").arg(key).arg("SAMPLES").arg(0);
        }
        let sizes: Vec<Option<u64>> = self.engine.pipeline(&pipe).await?;
        Ok(sizes.into_iter().flatten().sum())
    }

    /// Deletes every key of this namespace (`SCAN MATCH <ns>:*` + `UNLINK`, on every master
    /// of a cluster); returns how many. For tests and benchmarks: it removes runs, effect
    /// records and the catalog alike.
    pub async fn purge_namespace(&self) -> Result<u64, StoreError> {
        let pattern = format!("{}:*", self.keys.namespace());
        let nodes: Vec<Option<(String, u16)>> = if self.is_cluster() {
            let text: String = self.engine.query(redis::cmd("CLUSTER").arg("NODES")).await?;
            crate::cluster::masters(&text).into_iter().map(Some).collect()
        } else {
            vec![None]
        };
        let mut deleted = 0u64;
        for node in nodes {
            let mut cursor = 0u64;
            loop {
                let mut scan = redis::cmd("SCAN");
                scan.arg(cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(1000);
                let (next, keys): (u64, Vec<String>) = match &node {
                    Some((host, port)) => self.engine.query_node(&scan, host, *port).await?,
                    None => self.engine.query(&scan).await?,
                };
                if !keys.is_empty() {
                    // One key a command: keys of several slots may not share one.
                    let mut pipe = redis::pipe();
                    for k in &keys {
                        pipe.cmd("UNLINK").arg(k);
                    }
                    let n: Vec<u64> = self.engine.pipeline(&pipe).await?;
                    deleted += n.iter().sum::<u64>();
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(deleted)
    }

    /// Redis server time (ms).
    pub async fn server_time(&self) -> Result<u64, StoreError> {
        let (s, us): (u64, u64) = self.engine.query(&redis::cmd("TIME")).await?;
        Ok(s * 1000 + us / 1000)
    }
}
