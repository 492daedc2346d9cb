//! Read-only queries: one run, its events, listing.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::reply::flat_map;
use super::ScriptStore;
use crate::ids::ThreadId;
use crate::journal::Entry;
use crate::store::model::journal_from_fields;
use crate::store::{RunHeader, RunStatus, StoreError};

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

/// Every field of the run hash except the journal (`j:<i>`).
const HEADER_FIELDS: [&str; 29] = [
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
    "blocked_fx",
    "blocked_fx_owner",
    "waiting_for",
    "wait_fx",
    "wait_fx_n",
    "crashes",
    "crashed_by",
    "wait_kind",
    "wait_name",
    "wait_payload",
    "trace",
];

impl ScriptStore {
    /// A run's header and journal, if it exists.
    pub async fn get(&self, thread: &ThreadId) -> Result<Option<(RunHeader, Vec<Entry>)>, StoreError> {
        let v: redis::Value = self
            .engine
            .query(redis::cmd("HGETALL").arg(&self.keys.run(thread).run))
            .await?;
        let fields = flat_map(&v);
        if fields.is_empty() {
            return Ok(None);
        }
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
        let fields: BTreeMap<String, Vec<u8>> = HEADER_FIELDS
            .iter()
            .zip(values)
            .filter_map(|(k, v)| v.map(|v| ((*k).to_owned(), v)))
            .collect();
        if fields.is_empty() {
            return Ok(None);
        }
        RunHeader::from_fields(thread, &fields).map(Some)
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
        raw.map(|r| Entry::decode(&r).map_err(|e| StoreError::Corrupt(format!("run {thread}: entry {index}: {e}"))))
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
                let detail = parts.next().unwrap_or("").to_owned();
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
        let mut candidates: Vec<(u64, u16, String)> = Vec::new();
        let own_index = matches!(status, Some(RunStatus::Blocked | RunStatus::Waiting));
        let index = |p: u16| match status {
            Some(s @ (RunStatus::Blocked | RunStatus::Waiting)) => self.keys.status_index(p, s.as_str()),
            _ => self.keys.index(p),
        };
        let per = if status.is_some() && !own_index {
            limit.saturating_mul(4).max(100)
        } else {
            limit
        };
        for p in 0..self.keys.partitions() {
            let ids: Vec<(String, u64)> = self
                .engine
                .query(
                    redis::cmd("ZREVRANGE")
                        .arg(index(p))
                        .arg(0)
                        .arg(per.saturating_sub(1))
                        .arg("WITHSCORES"),
                )
                .await?;
            candidates.extend(ids.into_iter().map(|(id, at)| (at, p, id)));
        }
        candidates.sort_by_key(|c| std::cmp::Reverse(c.0));
        let mut out = Vec::new();
        for (_, p, id) in candidates {
            if out.len() >= limit {
                break;
            }
            let Ok(thread) = ThreadId::new(id.clone()) else {
                continue;
            };
            let v: redis::Value = self
                .engine
                .query(redis::cmd("HGETALL").arg(self.keys.run_in(p, &id)))
                .await?;
            let fields: BTreeMap<String, Vec<u8>> = flat_map(&v);
            if fields.is_empty() {
                let _: i64 = self.engine.query(redis::cmd("ZREM").arg(index(p)).arg(&id)).await?;
                continue;
            }
            let h = RunHeader::from_fields(&thread, &fields)?;
            if status.is_none_or(|s| s == h.status) {
                out.push(h);
            }
        }
        Ok(out)
    }

    /// Bytes Redis holds for one run: `MEMORY USAGE … SAMPLES 0` of its hash, event log and
    /// signals (benchmarks and the load generator report it).
    pub async fn run_memory_bytes(&self, thread: &ThreadId) -> Result<u64, StoreError> {
        let k = self.keys.run(thread);
        let mut pipe = redis::pipe();
        for key in [&k.run, &k.events, &k.signals] {
            pipe.cmd("MEMORY").arg("USAGE").arg(key).arg("SAMPLES").arg(0);
        }
        let sizes: Vec<Option<u64>> = self.engine.pipeline(&pipe).await?;
        Ok(sizes.into_iter().flatten().sum())
    }

    /// Deletes every key of this namespace (`SCAN MATCH <ns>:*` + `UNLINK`); returns how many.
    /// For tests and benchmarks: it removes runs, effect records and the catalog alike.
    pub async fn purge_namespace(&self) -> Result<u64, StoreError> {
        let pattern = format!("{}:*", self.keys.namespace());
        let (mut cursor, mut deleted) = (0u64, 0u64);
        loop {
            let (next, keys): (u64, Vec<String>) = self
                .engine
                .query(
                    redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(&pattern)
                        .arg("COUNT")
                        .arg(1000),
                )
                .await?;
            if !keys.is_empty() {
                let n: u64 = self.engine.query(redis::cmd("UNLINK").arg(&keys)).await?;
                deleted += n;
            }
            if next == 0 {
                return Ok(deleted);
            }
            cursor = next;
        }
    }

    /// Redis server time (ms).
    pub async fn server_time(&self) -> Result<u64, StoreError> {
        let (s, us): (u64, u64) = self.engine.query(&redis::cmd("TIME")).await?;
        Ok(s * 1000 + us / 1000)
    }
}
