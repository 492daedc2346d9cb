//! Claiming a run's lease.

use std::collections::BTreeMap;
use std::time::Duration;

use super::reply::Reply;
use super::{ms, ScriptStore, ServedSpec, SCHEMA_VERSION};
use crate::engine::Invocation;
use crate::model::{journal_fields_from, ClaimOutcome, Claimed, JournalHeld, Lease, RunHeader, RunStatus};
use crate::StoreError;
use savepoint_core::ids::ThreadId;
use savepoint_core::keys::RunKeys;

/// First back-off of a run given back because the worker does not serve it (doubles).
const UNSERVED_BACKOFF: Duration = Duration::from_millis(250);
/// Longest back-off of a run no live worker serves.
const UNSERVED_BACKOFF_CAP: Duration = Duration::from_secs(10);

impl ScriptStore {
    /// Claims the run's lease for `owner` (ARCHITECTURE §7, step 3). A worker passes what it
    /// serves, so a run it cannot execute is given back untouched (`Unserved`) in the same
    /// atomic step instead of being claimed and blocked.
    pub async fn claim(
        &self,
        thread: &ThreadId,
        owner: &str,
        task_step: Option<u32>,
        served: &ServedSpec,
    ) -> Result<ClaimOutcome, StoreError> {
        self.claim_holding(thread, owner, task_step, served, None).await
    }

    /// [`ScriptStore::claim`] by a worker that holds the start of the run's journal: when the
    /// run still starts with it, the reply carries only the entries past it (and the last one
    /// it holds, to check), so a resume reads what is new, not the whole journal.
    pub async fn claim_holding(
        &self,
        thread: &ThreadId,
        owner: &str,
        task_step: Option<u32>,
        served: &ServedSpec,
        held: Option<JournalHeld>,
    ) -> Result<ClaimOutcome, StoreError> {
        let k = self.keys.run(thread);
        let mut inv = self.claim_invocation(&k, thread, owner, task_step, served);
        inv.arg(held.map(held_arg).unwrap_or_default());
        let sent_at = tokio::time::Instant::now();
        let r = self.invoke(&inv).await?;
        let received_at = tokio::time::Instant::now();
        if r.tag() == "ok" {
            return self.claimed(thread, k, owner, &r, (sent_at, received_at));
        }
        not_claimed(&r)
    }

    /// The claim script's invocation: the run's keys, then who claims, the timing settings
    /// and what the worker serves.
    fn claim_invocation<'a>(
        &'a self,
        k: &RunKeys,
        thread: &ThreadId,
        owner: &str,
        task_step: Option<u32>,
        served: &ServedSpec,
    ) -> Invocation<'a> {
        let mut inv = self.scripts.claim.prepare_invoke();
        inv.key(&k.run)
            .key(&k.due)
            .key(&k.events)
            .key(&k.signals)
            .key(&k.blocked)
            .key(&k.unserved)
            .key(&k.unconfirmed)
            .key(&k.waiting)
            .key(k.pauses())
            .key(k.paused());
        inv.arg(thread.as_str())
            .arg(owner)
            .arg(ms(self.cfg.lease))
            .arg(ms(self.cfg.grace));
        inv.arg(task_step.map(|s| s.to_string()).unwrap_or_default())
            .arg(self.cfg.event_cap);
        inv.arg(served.as_arg()).arg(SCHEMA_VERSION).arg(self.cfg.max_crashes);
        inv.arg(ms(UNSERVED_BACKOFF)).arg(ms(UNSERVED_BACKOFF_CAP));
        inv.arg(served.queues_arg()).arg(served.features_arg());
        inv
    }

    /// The run as an `ok` claim reply hands it over: header, journal, buffered signals and
    /// recorded tries, with `owner`'s lease at the header's fence and version.
    fn claimed(
        &self,
        thread: &ThreadId,
        keys: RunKeys,
        owner: &str,
        r: &Reply,
        (sent_at, received_at): (tokio::time::Instant, tokio::time::Instant),
    ) -> Result<ClaimOutcome, StoreError> {
        let mut fields = r.map(2);
        self.open_fields(thread, &mut fields)?;
        let header = RunHeader::from_fields(thread, &fields)?;
        let from = Some(r.text(6))
            .filter(|t| !t.is_empty())
            .and_then(|t| t.parse::<u32>().ok());
        let journal = journal_fields_from(&header, &fields, from.unwrap_or(0));
        let mut signals = r.map(3);
        // (`v:`: a version an operator gave a child's output that came without one.)
        signals.retain(|f, _| f.starts_with("i:") || f.starts_with("s:") || f.starts_with("v:"));
        self.open_fields(thread, &mut signals)?;
        let signals = signals
            .into_iter()
            .map(|(f, v)| (f, serde_json::from_slice(&v).unwrap_or(serde_json::Value::Null)))
            .collect();
        let tries = recorded_tries(&fields);
        let takeover = r.num(4) == 1;
        let lease = Lease {
            thread: thread.clone(),
            keys,
            owner: owner.to_owned(),
            fence: header.fence,
            version: header.version,
        };
        Ok(ClaimOutcome::Claimed(Box::new(Claimed {
            lease,
            header,
            journal,
            journal_from: from,
            signals,
            tries,
            server_now: r.num(1),
            takeover,
            sent_at,
            received_at,
        })))
    }
}

/// The claim's argument naming the journal a worker holds.
fn held_arg(h: JournalHeld) -> String {
    format!("{}\u{1e}{}\u{1e}{}", h.entries, h.created, h.restarts)
}

/// Failed attempts recorded in a run's fields by journal index (`t:<index>`).
fn recorded_tries(fields: &BTreeMap<String, Vec<u8>>) -> BTreeMap<u32, u32> {
    fields
        .iter()
        .filter_map(|(f, v)| {
            let index = f.strip_prefix("t:")?.parse().ok()?;
            Some((index, std::str::from_utf8(v).ok()?.parse().ok()?))
        })
        .collect()
}

/// What a claim reply other than `ok` says: why the run was not claimed.
fn not_claimed(r: &Reply) -> Result<ClaimOutcome, StoreError> {
    Ok(match r.tag().as_str() {
        "missing" => ClaimOutcome::Missing,
        "terminal" => ClaimOutcome::Terminal(RunStatus::parse(&r.text(1)).unwrap_or(RunStatus::Completed)),
        "waiting" => ClaimOutcome::Waiting,
        "not_due" => ClaimOutcome::NotDue(r.num(1)),
        "leased" => ClaimOutcome::Leased(r.text(1)),
        "stale" => ClaimOutcome::Stale(r.num(1) as u32),
        "unserved" => ClaimOutcome::Unserved {
            reason: r.text(1),
            retry_in_ms: r.num(2),
            workflow: r.text(3),
            version: r.num(4) as u32,
            rv: r.num(5),
            tries: r.num(6) as u32,
        },
        "poison" => ClaimOutcome::Poison(r.text(1)),
        "misrouted" => ClaimOutcome::Misrouted(r.text(1)),
        "paused" => ClaimOutcome::Paused(r.text(1)),
        other => return Err(StoreError::Reply(format!("claim: {other}"))),
    })
}
