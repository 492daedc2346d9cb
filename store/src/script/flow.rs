//! Flow control: at most `limit` runs of a key hold a slot (run a slice) at once, the rest
//! wait in line (priority, then arrival) without polling the broker, and starts per second per
//! key. A slot is tied to its holder's lease: it expires with it (a dead worker's slots free
//! themselves) and heartbeats extend it. Every flow key shares the hash tag `{fc}`.

use std::time::Duration;

use super::{ms, ScriptStore};
use crate::StoreError;
use savepoint_core::ids::ThreadId;
use savepoint_core::outcome::Flow;

/// A waiting run not seen again for this long (it ended while in line) leaves the line.
const FLOW_STALE: Duration = Duration::from_secs(30);
/// How long a run that waits for a slot sleeps before it looks again, if no release wakes it.
pub const FLOW_PARK: Duration = Duration::from_secs(10);

/// What taking a slot answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Acquired {
    /// The run holds a slot: run the slice, then release it.
    Slot,
    /// Every slot is held (by this many runs), or runs wait ahead: wait in line.
    Full(u64),
    /// A later slice of the run (this higher fence) holds its slot: this slice lost the run.
    Stale(u64),
    /// The key's start rate is used up: in line, a token in this long.
    Rate(Duration),
}

/// Where a run stands in its flow-control key's line, as the store has it now.
#[derive(Debug, Clone, PartialEq)]
pub struct LineFacts {
    /// Runs ahead of it in line (`None`: it is not in line).
    pub rank: Option<u64>,
    /// Runs in line.
    pub in_line: u64,
    /// Slots held now (unexpired).
    pub holders: u64,
    /// The start rate's bucket: tokens, as of store time (ms), when the key has a rate.
    pub tokens: Option<(f64, u64)>,
    /// Store time (ms) of the last slot given back.
    pub last_release_at: Option<u64>,
    /// Moving mean of the gap between two slots given back (ms), once two have been.
    pub turnover_ms: Option<u64>,
    /// Store time (ms) of the reading.
    pub now: u64,
}

impl ScriptStore {
    /// Takes a slot of `flow` for `thread`'s slice under fencing token `fence` (or takes over
    /// the one an earlier slice of the run holds), expiring with a lease taken now.
    /// `priority` (0–9, higher first) orders the line; `start`: the run has no journal yet,
    /// so it spends a token of the start rate.
    pub async fn flow_acquire(
        &self,
        flow: &Flow,
        thread: &ThreadId,
        fence: u64,
        priority: u8,
        start: bool,
    ) -> Result<Acquired, StoreError> {
        let name = self.flow_name(&flow.key).await?;
        let mut inv = self.scripts.flow_acquire.prepare_invoke();
        inv.key(self.keys.flow_slots(&name))
            .key(self.keys.flow_wait(&name))
            .key(self.keys.flow_rate(&name))
            .key(self.keys.flow_seen(&name))
            .key(self.keys.flow_holders(&name));
        inv.arg(thread.as_str())
            .arg(flow.limit)
            .arg(ms(self.cfg.lease + self.cfg.grace))
            .arg(9 - priority.min(9));
        inv.arg(flow.rate.map(|r| r.to_string()).unwrap_or_default())
            .arg(if start { "1" } else { "0" })
            .arg(ms(FLOW_STALE))
            .arg(fence);
        let r = self.invoke(&inv).await?;
        Ok(match r.tag().as_str() {
            "ok" => Acquired::Slot,
            "full" => Acquired::Full(r.num(1)),
            "rate" => Acquired::Rate(Duration::from_millis(r.num(1))),
            "stale" => Acquired::Stale(r.num(1)),
            other => return Err(StoreError::Reply(format!("flow_acquire: {other}"))),
        })
    }

    /// Gives the slot of `flow` that `thread`'s slice took under `fence` back (none if a later
    /// slice took it over; `None`: no slot, as for a cancel) and, `ended`, the run's place in
    /// line; answers the runs at the head of the line that may take the free slots now
    /// (publish their tasks).
    pub async fn flow_release(
        &self,
        flow: &Flow,
        thread: &ThreadId,
        fence: Option<u64>,
        ended: bool,
    ) -> Result<Vec<ThreadId>, StoreError> {
        let name = self.flow_name(&flow.key).await?;
        let mut inv = self.scripts.flow_release.prepare_invoke();
        inv.key(self.keys.flow_slots(&name))
            .key(self.keys.flow_wait(&name))
            .key(self.keys.flow_seen(&name))
            .key(self.keys.flow_holders(&name))
            .key(self.keys.flow_turn(&name));
        inv.arg(thread.as_str())
            .arg(flow.limit)
            .arg(if ended { "1" } else { "0" })
            .arg(fence.map(|f| f.to_string()).unwrap_or_default());
        let r = self.invoke(&inv).await?;
        Ok((0..r.0.len()).filter_map(|i| ThreadId::new(r.text(i)).ok()).collect())
    }

    /// Where `thread` stands in `flow`'s line (read-only: the waiting cause of a run in line).
    pub async fn flow_line(&self, flow: &Flow, thread: &ThreadId) -> Result<LineFacts, StoreError> {
        let name = self.flow_name(&flow.key).await?;
        let mut inv = self.scripts.flow_line.prepare_invoke();
        inv.key(self.keys.flow_slots(&name))
            .key(self.keys.flow_wait(&name))
            .key(self.keys.flow_rate(&name))
            .key(self.keys.flow_turn(&name));
        inv.arg(thread.as_str());
        let r = self.invoke(&inv).await?;
        let opt = |i: usize| r.text(i).parse::<f64>().ok();
        Ok(LineFacts {
            rank: r.text(0).parse().ok(),
            in_line: r.num(1),
            holders: r.num(2),
            tokens: opt(3).zip(opt(4).map(|t| t as u64)),
            last_release_at: opt(5).map(|t| t as u64),
            turnover_ms: opt(6).map(|g| g as u64),
            now: r.num(7),
        })
    }

    /// Moves the expiry of the slot of `flow` that `thread`'s slice holds under `fence` with
    /// its lease (a heartbeat). False: the slice holds no slot any more (it expired, or a
    /// later slice of the run took it over).
    pub async fn flow_extend(&self, flow: &Flow, thread: &ThreadId, fence: u64) -> Result<bool, StoreError> {
        let name = self.flow_name(&flow.key).await?;
        let mut inv = self.scripts.flow_extend.prepare_invoke();
        inv.key(self.keys.flow_slots(&name)).key(self.keys.flow_holders(&name));
        inv.arg(thread.as_str())
            .arg(ms(self.cfg.lease + self.cfg.grace))
            .arg(fence);
        Ok(self.invoke(&inv).await?.tag() == "ok")
    }
}
