//! Schedules' records (`{ns}:{sched}:…`): what the scheduler's firing loop and the API read
//! and write. The meaning (cron, time zones, overlap, catch-up) is the scheduler's; the store
//! keeps each change one script.

use std::collections::BTreeMap;

use serde_json::Value;

use super::ScriptStore;
use crate::codec;
use crate::StoreError;
use savepoint_core::ids::ThreadId;

/// A schedule as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleRecord {
    /// Its id.
    pub id: String,
    /// The spec (JSON, without the input), as the scheduler wrote it.
    pub spec: String,
    /// The input of every run it starts.
    pub input: Value,
    /// Created (server ms).
    pub created_at: u64,
    /// Its next firing (ms; none while paused or when it will not fire again).
    pub next: Option<u64>,
    /// The run of its latest firing, and that firing's time.
    pub last: Option<(String, u64)>,
    /// Runs started.
    pub fired: u64,
    /// Firings skipped (overlap or catch-up policy).
    pub skipped: u64,
    /// Paused since (ms), with the operator's note.
    pub paused: Option<(u64, String)>,
    /// A firing held back until the previous run ends (`buffer_one`).
    pub buffered: Option<u64>,
    /// Runs its last move decided (thread id, firing time) and nobody has confirmed created
    /// yet: whoever finds them creates them (idempotently) before deciding anything else.
    pub pending: Vec<(String, u64)>,
}

/// Pending runs as stored: `thread@firing,…` (thread ids hold neither `@` nor `,`).
fn pending_text(pending: &[(String, u64)]) -> String {
    pending
        .iter()
        .map(|(t, at)| format!("{t}@{at}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn parse_pending(text: &str) -> Vec<(String, u64)> {
    text.split(',')
        .filter_map(|p| {
            let (t, at) = p.rsplit_once('@')?;
            Some((t.to_owned(), at.parse().ok()?))
        })
        .collect()
}

/// Outcome of [`ScriptStore::schedule_put`].
#[derive(Debug, Clone, PartialEq)]
pub enum SchedulePut {
    /// Created (server ms).
    Created(u64),
    /// The same schedule existed already.
    Exists,
    /// The id holds another schedule.
    Conflict,
}

/// How [`ScriptStore::schedule_advance`] moves a schedule on.
#[derive(Debug, Clone, Default)]
pub struct Advance<'a> {
    /// The new next firing (`None`: it will not fire again).
    pub next: Option<u64>,
    /// The run started last and its firing time.
    pub last: Option<(&'a str, u64)>,
    /// Runs started.
    pub fired: u64,
    /// Firings skipped.
    pub skipped: u64,
    /// `Some(Some(t))`: hold firing `t` until the previous run ends; `Some(None)`: drop it.
    pub buffered: Option<Option<u64>>,
    /// The last run the decision read (the move is refused if it changed).
    pub read_last: Option<&'a str>,
    /// The runs decided, recorded as pending until they are created.
    pub pending: &'a [(String, u64)],
}

/// Outcome of [`ScriptStore::schedule_reseal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resealed {
    /// Its input was sealed anew with the sealing key.
    Done,
    /// Nothing to do: sealed with the sealing key already, no input, or no payload keys.
    Current,
    /// It changed or was deleted between the read and the write: nothing written.
    Changed,
}

fn bind(id: &str) -> Result<ThreadId, StoreError> {
    ThreadId::new(format!("schedule.{id}")).map_err(|e| StoreError::Corrupt(format!("schedule id {id:?}: {e}")))
}

impl ScriptStore {
    /// Creates schedule `id` (idempotent for the same spec and input).
    pub async fn schedule_put(
        &self,
        id: &str,
        spec: &str,
        input: &Value,
        first: u64,
    ) -> Result<SchedulePut, StoreError> {
        let keys = self.keys();
        let plain = input.to_string();
        let sealed = self.seal_run(&bind(id)?, "input", &plain);
        let mut inv = self.scripts.sched_put.prepare_invoke();
        inv.key(keys.schedule(id))
            .key(keys.schedule_next())
            .key(keys.schedule_all());
        inv.arg(id).arg(spec).arg(first).arg(sealed.as_ref());
        let r = self.invoke(&inv).await?;
        Ok(match r.tag().as_str() {
            "created" => SchedulePut::Created(r.num(1)),
            // The input is compared opened (sealed values differ byte for byte).
            "exists" => match self.schedule_get(id).await? {
                Some(s) if s.input == *input => SchedulePut::Exists,
                _ => SchedulePut::Conflict,
            },
            "conflict" => SchedulePut::Conflict,
            other => return Err(StoreError::Reply(format!("sched_put: {other}"))),
        })
    }

    /// One schedule, if it exists.
    pub async fn schedule_get(&self, id: &str) -> Result<Option<ScheduleRecord>, StoreError> {
        let map: BTreeMap<String, Vec<u8>> = self.query(redis::cmd("HGETALL").arg(self.keys().schedule(id))).await?;
        if map.is_empty() {
            return Ok(None);
        }
        let text = |f: &str| map.get(f).map(|v| String::from_utf8_lossy(v).into_owned());
        let num = |f: &str| text(f).and_then(|v| v.parse::<u64>().ok());
        let input = match map.get("input") {
            Some(raw) => {
                let plain = self.open_run(&bind(id)?, "input", raw)?;
                serde_json::from_slice(&plain).map_err(|e| StoreError::Corrupt(format!("schedule {id}: input: {e}")))?
            }
            None => Value::Null,
        };
        Ok(Some(ScheduleRecord {
            id: id.to_owned(),
            spec: text("spec").unwrap_or_default(),
            input,
            created_at: num("created").unwrap_or(0),
            next: num("next"),
            last: text("last").map(|t| (t, num("last_at").unwrap_or(0))),
            fired: num("fired").unwrap_or(0),
            skipped: num("skipped").unwrap_or(0),
            paused: num("paused").map(|at| (at, text("note").unwrap_or_default())),
            buffered: num("buffered"),
            pending: text("pending").map(|p| parse_pending(&p)).unwrap_or_default(),
        }))
    }

    /// Every schedule id, oldest first.
    pub async fn schedule_ids(&self) -> Result<Vec<String>, StoreError> {
        self.query(redis::cmd("ZRANGE").arg(self.keys().schedule_all()).arg(0).arg(-1))
            .await
    }

    /// Schedules whose next firing is at or before `now` (ms), with it, oldest first; at most
    /// `limit`, after skipping the first `offset`.
    pub async fn schedules_due(&self, now: u64, offset: usize, limit: usize) -> Result<Vec<(String, u64)>, StoreError> {
        self.query(
            redis::cmd("ZRANGEBYSCORE")
                .arg(self.keys().schedule_next())
                .arg("-inf")
                .arg(now)
                .arg("WITHSCORES")
                .arg("LIMIT")
                .arg(offset)
                .arg(limit),
        )
        .await
    }

    /// Schedules holding a buffered firing, with its time.
    pub async fn schedules_buffered(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.query(
            redis::cmd("ZRANGE")
                .arg(self.keys().schedule_buffered())
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES"),
        )
        .await
    }

    /// Moves schedule `id` on from its next firing `expected`; false when another replica
    /// did first (or it was paused or deleted meanwhile).
    pub async fn schedule_advance(&self, id: &str, expected: u64, a: &Advance<'_>) -> Result<bool, StoreError> {
        let keys = self.keys();
        let mut inv = self.scripts.sched_advance.prepare_invoke();
        inv.key(keys.schedule(id))
            .key(keys.schedule_next())
            .key(keys.schedule_buffered())
            .key(keys.schedule_pending());
        inv.arg(id)
            .arg(expected)
            .arg(a.next.map(|n| n.to_string()).unwrap_or_default())
            .arg(a.last.map(|l| l.0).unwrap_or(""))
            .arg(a.last.map(|l| l.1).unwrap_or(0))
            .arg(a.fired)
            .arg(a.skipped)
            .arg(match a.buffered {
                None => String::new(),
                Some(None) => "-".to_owned(),
                Some(Some(t)) => t.to_string(),
            })
            .arg(a.read_last.unwrap_or(""))
            .arg(pending_text(a.pending));
        Ok(self.invoke(&inv).await?.tag() == "ok")
    }

    /// Buffered firing `at` starts as run `thread` (recorded as the last run, and pending
    /// until created); false if the buffer, the last run (`read_last`) or pending runs changed.
    pub async fn schedule_unbuffer(
        &self,
        id: &str,
        at: u64,
        thread: &str,
        read_last: Option<&str>,
    ) -> Result<bool, StoreError> {
        let keys = self.keys();
        let mut inv = self.scripts.sched_unbuffer.prepare_invoke();
        inv.key(keys.schedule(id))
            .key(keys.schedule_buffered())
            .key(keys.schedule_pending());
        inv.arg(id).arg(at).arg(thread).arg(read_last.unwrap_or(""));
        Ok(self.invoke(&inv).await?.tag() == "ok")
    }

    /// The pending runs `pending` of schedule `id` were created: they are forgotten (false if
    /// the schedule's pending runs are others by now, or it has none).
    pub async fn schedule_settle(&self, id: &str, pending: &[(String, u64)]) -> Result<bool, StoreError> {
        let keys = self.keys();
        let mut inv = self.scripts.sched_settle.prepare_invoke();
        inv.key(keys.schedule(id)).key(keys.schedule_pending());
        inv.arg(id).arg(pending_text(pending));
        Ok(self.invoke(&inv).await?.tag() == "ok")
    }

    /// Schedules whose last move left runs to create.
    pub async fn schedules_pending(&self) -> Result<Vec<String>, StoreError> {
        self.query(redis::cmd("ZRANGE").arg(self.keys().schedule_pending()).arg(0).arg(-1))
            .await
    }

    /// Pauses (with a note), resumes (from `next`) or deletes a schedule; false if missing.
    pub async fn schedule_state(&self, id: &str, action: &str, arg: &str) -> Result<bool, StoreError> {
        let keys = self.keys();
        let mut inv = self.scripts.sched_state.prepare_invoke();
        inv.key(keys.schedule(id))
            .key(keys.schedule_next())
            .key(keys.schedule_buffered())
            .key(keys.schedule_all())
            .key(keys.schedule_pending());
        inv.arg(id).arg(action).arg(arg);
        Ok(self.invoke(&inv).await?.tag() == "ok")
    }

    /// Seals schedule `id`'s input anew with the sealing key when it is stored in plaintext or
    /// under another key (a key rotation), so that dropping an old key never strands a
    /// schedule. Without payload keys there is nothing to do.
    pub async fn schedule_reseal(&self, id: &str) -> Result<Resealed, StoreError> {
        let Some(codec) = &self.cfg.codec else {
            return Ok(Resealed::Current);
        };
        let key = self.keys().schedule(id);
        let raw: Option<Vec<u8>> = self.query(redis::cmd("HGET").arg(&key).arg("input")).await?;
        let Some(raw) = raw else {
            return Ok(Resealed::Current);
        };
        match codec::parse_sealed(&raw) {
            Ok(Some(s)) if s.key_id == codec.sealing_key_id() => return Ok(Resealed::Current),
            Ok(_) => {}
            Err(e) => return Err(StoreError::Sealed(format!("schedule {id} input: {e}"))),
        }
        let thread = bind(id)?;
        let plain = self.open_run(&thread, "input", &raw)?;
        let plain =
            String::from_utf8(plain).map_err(|_| StoreError::Corrupt(format!("schedule {id}: input is not UTF-8")))?;
        let sealed = self.seal_run(&thread, "input", &plain);
        self.reseal_field(&key, "input", &raw, sealed.as_bytes()).await
    }

    /// Replaces `field` of hash `key` by `sealed` if it still holds `read` (`reseal.lua`).
    pub(super) async fn reseal_field(
        &self,
        key: &str,
        field: &str,
        read: &[u8],
        sealed: &[u8],
    ) -> Result<Resealed, StoreError> {
        let mut inv = self.scripts.reseal.prepare_invoke();
        inv.key(key);
        inv.arg(field).arg(read).arg(sealed);
        Ok(match self.invoke(&inv).await?.tag().as_str() {
            "ok" => Resealed::Done,
            _ => Resealed::Changed,
        })
    }
}
