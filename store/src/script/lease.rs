//! What a lease holder writes: journal entries, the end of a slice or of the run, heartbeats,
//! events and bookkeeping fields.

use super::{ms, ScriptStore, Suspend, Suspended};
use crate::model::{BlockKind, Finish, Lease};
use crate::StoreError;
use savepoint_core::journal::Entry;
use std::time::Duration;

impl ScriptStore {
    /// Appends `entries` from journal index `first` and extends the lease (one round trip per
    /// batch of a slice's pipelined steps). The event, the consumed signal and the settled
    /// effect are the last entry's: an effect entry clears the run's record of its key.
    pub async fn commit(
        &self,
        lease: &mut Lease,
        first: u32,
        entries: &[Entry],
        event: (&str, &str),
        consume_signal: Option<&str>,
    ) -> Result<(), StoreError> {
        let Some(last) = entries.last() else {
            return Ok(());
        };
        let last_index = first + entries.len() as u32 - 1;
        let settles = if last.kind == savepoint_core::journal::EntryKind::Effect {
            last_index.to_string()
        } else {
            String::new()
        };
        let mut inv = Self::fenced(&self.scripts.commit, lease);
        self.entry_args(&mut inv, &lease.thread, Some((first, entries)));
        inv.arg(ms(self.cfg.lease)).arg(ms(self.cfg.grace));
        inv.arg(self.cfg.event_cap)
            .arg(event.0)
            .arg(event.1)
            .arg(consume_signal.unwrap_or(""))
            .arg(settles)
            .arg(if last.attempts > 1 { "1" } else { "" });
        self.more_entries(&mut inv, &lease.thread, Some((first, entries)));
        self.versioned_write(&inv, lease).await
    }

    /// Ends a slice without ending the run: sleeping, waiting or pending (yield / retry later),
    /// appending the slice's unwritten `entries` (from index `entries.0`).
    #[tracing::instrument(level = "debug", name = "suspend", skip_all, fields(run.status = how.status.as_str()))]
    pub async fn suspend(
        &self,
        lease: &mut Lease,
        entries: Option<(u32, &[Entry])>,
        how: Suspend<'_>,
        event: (&str, &str),
    ) -> Result<Suspended, StoreError> {
        let mut inv = Self::fenced(&self.scripts.suspend, lease);
        self.entry_args(&mut inv, &lease.thread, entries);
        inv.arg(how.status.as_str())
            .arg(how.due_in.map(|d| ms(d).to_string()).unwrap_or_default());
        match how.wait {
            Some(w) => inv.arg(&w.kind).arg(&w.name).arg(
                self.seal_run(&lease.thread, "wait_payload", &w.payload.to_string())
                    .as_ref(),
            ),
            None => inv.arg("").arg("").arg(""),
        };
        let event = self.seal_event(&lease.thread, event.0, event.1);
        inv.arg(self.cfg.event_cap)
            .arg(event.0)
            .arg(event.1)
            .arg(ms(self.cfg.redeliver));
        match how.backoff_on {
            Some((key, n)) => inv.arg(key).arg(n),
            None => inv.arg("").arg(""),
        };
        inv.arg(how.drop_begin.map(|i| i.to_string()).unwrap_or_default())
            .arg(how.queue.unwrap_or(""))
            .arg(if self.cfg.sticky { lease.owner.as_str() } else { "" });
        self.more_entries(&mut inv, &lease.thread, entries);
        let r = self.invoke(&inv).await?;
        match r.tag().as_str() {
            tag @ ("ok" | "woke") => {
                lease.version = r.num(1);
                let due = Some(r.num(2)).filter(|d| *d > 0);
                Ok(Suspended {
                    woke: tag == "woke",
                    due,
                    rv: r.num(3),
                })
            }
            _ => Err(self.rejected(lease, &r)),
        }
    }

    /// Ends the run (completed, failed) or stops it (blocked), appending the slice's unwritten
    /// `entries` first (from index `entries.0`).
    #[tracing::instrument(level = "debug", name = "finish", skip_all, fields(run.status = how.status().as_str()))]
    pub async fn finish(
        &self,
        lease: &mut Lease,
        entries: Option<(u32, &[Entry])>,
        how: Finish<'_>,
        event: (&str, &str),
    ) -> Result<(), StoreError> {
        let mut inv = Self::fenced(&self.scripts.finish, lease);
        self.entry_args(&mut inv, &lease.thread, entries);
        let (output, error, reason, effect) = match how {
            Finish::Completed(o, _) => (o.to_string(), "", "", None),
            Finish::Failed(e) => (String::new(), e, "", None),
            Finish::Blocked { reason, effect, .. } => (String::new(), "", reason, effect),
            Finish::Rejected { reason, .. } => (String::new(), "", reason, None),
        };
        let t = &lease.thread;
        inv.arg(how.status().as_str())
            .arg(self.seal_run(t, "output", &output).as_ref());
        inv.arg(self.seal_run(t, "error", error).as_ref())
            .arg(self.seal_run(t, "reason", reason).as_ref())
            .arg(effect.map(|e| e.0).unwrap_or(""));
        let event = self.seal_event(t, event.0, event.1);
        inv.arg(ms(self.cfg.retention))
            .arg(self.cfg.event_cap)
            .arg(event.0)
            .arg(event.1);
        inv.arg(effect.map(|e| e.1.token()).unwrap_or_default());
        match how {
            Finish::Rejected { wait, consumed, .. } => inv.arg(consumed).arg(&wait.kind).arg(&wait.name).arg(
                self.seal_run(&lease.thread, "wait_payload", &wait.payload.to_string())
                    .as_ref(),
            ),
            _ => inv.arg("").arg("").arg("").arg(""),
        };
        inv.arg(how.block_kind().map(BlockKind::as_str).unwrap_or(""));
        let ov = match how {
            Finish::Completed(_, Some(ov)) => ov.field(),
            _ => String::new(),
        };
        inv.arg(ov);
        self.more_entries(&mut inv, &lease.thread, entries);
        self.versioned_write(&inv, lease).await
    }

    /// Extends the lease; returns the new expiry (server ms) and the pause now holding the run
    /// (its words), if any: the slice should yield at its next call.
    pub async fn heartbeat(&self, lease: &Lease) -> Result<(u64, Option<String>), StoreError> {
        let k = &lease.keys;
        let mut inv = self.scripts.heartbeat.prepare_invoke();
        inv.key(&k.run).key(&k.due).key(k.pauses());
        inv.arg(lease.thread.as_str()).arg(&lease.owner).arg(lease.fence);
        inv.arg(ms(self.cfg.lease)).arg(ms(self.cfg.grace));
        let r = self.invoke(&inv).await?;
        if r.tag() == "ok" {
            Ok((r.num(1), Some(r.text(2)).filter(|p| !p.is_empty())))
        } else {
            Err(self.rejected(lease, &r))
        }
    }

    /// Records an event for a run the caller holds.
    pub async fn event(&self, lease: &Lease, typ: &str, detail: &str) -> Result<(), StoreError> {
        self.event_with(lease, typ, detail, None).await
    }

    /// Records that attempt `attempt` of the call at journal `index` failed and is retried
    /// (a `retried` event), and keeps the count in the run (`t:<index>`), so a later slice
    /// goes on from the next attempt instead of starting the retry budget over.
    pub async fn retried(
        &self,
        lease: &Lease,
        index: u32,
        attempt: u32,
        detail: &str,
        backoff: Option<Duration>,
    ) -> Result<(), StoreError> {
        self.event_with(lease, "retried", detail, Some((index, attempt, backoff)))
            .await
    }

    async fn event_with(
        &self,
        lease: &Lease,
        typ: &str,
        detail: &str,
        tries: Option<(u32, u32, Option<Duration>)>,
    ) -> Result<(), StoreError> {
        let k = &lease.keys;
        let mut inv = self.scripts.event.prepare_invoke();
        inv.key(&k.run).key(&k.events);
        let (typ, detail) = self.seal_event(&lease.thread, typ, detail);
        inv.arg(&lease.owner)
            .arg(lease.fence)
            .arg(self.cfg.event_cap)
            .arg(typ)
            .arg(detail);
        match tries {
            Some((index, attempt, backoff)) => inv
                .arg(index)
                .arg(attempt)
                .arg(backoff.map(|d| ms(d).to_string()).unwrap_or_default()),
            None => inv.arg("").arg("").arg(""),
        };
        let r = self.invoke(&inv).await?;
        if r.tag() == "ok" {
            Ok(())
        } else {
            Err(self.rejected(lease, &r))
        }
    }

    /// Sets a bookkeeping field of a run the caller holds (e.g. `cur`, the live call after a
    /// crash, so a poison run's reason can name it).
    pub async fn note(&self, lease: &Lease, field: &str, value: &str) -> Result<(), StoreError> {
        let mut inv = self.scripts.note.prepare_invoke();
        inv.key(&lease.keys.run);
        inv.arg(&lease.owner).arg(lease.fence).arg(field).arg(value);
        let r = self.invoke(&inv).await?;
        if r.tag() == "ok" {
            Ok(())
        } else {
            Err(self.rejected(lease, &r))
        }
    }
}
