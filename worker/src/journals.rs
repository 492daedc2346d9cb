//! The journals of runs this worker ran a slice of, kept for the runs' next slices
//! (ARCHITECTURE §7, "Resuming from a held journal" and "Parked bodies").
//!
//! A slice that ends with its whole journal durable (the run suspended or yielded) leaves the
//! journal here, or, when its workflow body parked at the suspension, the body itself (which
//! holds the journal). The run's next claim on this worker names how much of the journal the
//! worker holds, the claim answers with only what is new past it, and the next slice starts
//! from the held entries plus the new ones: a resume reads and decodes what is new, not the
//! whole journal. A parked body goes on from where it stopped, replaying nothing, when the
//! journal is what it expects (no other slice wrote the run meanwhile); otherwise it is
//! dropped and its journal resumed as a held one. Only durable entries are ever held, and the
//! journal is append-only between restarts (which the claim checks), so what is held is
//! always a prefix of the run's journal; the claim's reply repeats the last held entry, and a
//! held journal that does not end with it is dropped and the journal read whole.
//!
//! Bounded by entries held in all (`worker.journal_cache_entries`); the journals held longest
//! are dropped first. Each run's journal is moved in and out, never copied.

use futures::future::BoxFuture;
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use savepoint::workflow::engine::Parked;
use savepoint::workflow::{Ctx, RunError};
use savepoint_core::ids::ThreadId;
use savepoint_core::journal::Entry;
use savepoint_store::model::{JournalHeld, RunHeader};

/// A workflow body as a slice polls it: its result, or its panic.
pub(crate) type Body = BoxFuture<'static, std::thread::Result<Result<Value, RunError>>>;

/// A workflow body parked at a suspension with its context (see [`Parked`]).
pub(crate) struct ParkedRun {
    pub body: Body,
    pub ctx: Arc<Ctx>,
    pub report: Parked,
}

impl ParkedRun {
    /// The journal the parked context holds and its encoded size, the body dropped.
    fn into_journal(self) -> Option<(Vec<Entry>, u64)> {
        drop(self.body);
        Arc::try_unwrap(self.ctx).ok()?.take_journal()
    }
}

/// What a slice left of a run.
enum Left {
    Journal(Vec<Entry>),
    Parked(Box<ParkedRun>),
}

/// A run's journal as a slice left it.
struct Kept {
    held: JournalHeld,
    left: Left,
    /// The encoded size of the entries held.
    bytes: u64,
    /// Its place in the eviction order.
    tick: u64,
}

impl Kept {
    /// The entries held.
    fn len(&self) -> usize {
        self.held.entries as usize
    }

    /// The last entry held.
    fn last(&self) -> Option<&Entry> {
        match &self.left {
            Left::Journal(entries) => entries.last(),
            Left::Parked(p) => p.report.last.as_ref(),
        }
    }
}

#[derive(Default)]
struct Inner {
    runs: HashMap<ThreadId, Kept>,
    /// Journals in the order they were kept (entries whose tick no longer matches are stale).
    order: VecDeque<(ThreadId, u64)>,
    /// Parked bodies in the order they were parked (stale the same way).
    parked_order: VecDeque<(ThreadId, u64)>,
    /// Entries held in all.
    entries: usize,
    /// Bodies parked.
    parked: usize,
    tick: u64,
}

impl Inner {
    /// Takes `thread`'s record out, keeping the counts.
    fn remove(&mut self, thread: &ThreadId) -> Option<Kept> {
        let k = self.runs.remove(thread)?;
        self.entries -= k.len();
        if matches!(k.left, Left::Parked(_)) {
            self.parked -= 1;
        }
        Some(k)
    }
}

/// The journals this worker holds, by run.
pub(crate) struct Journals {
    inner: Mutex<Inner>,
    /// Entries held at most (0: none are kept).
    cap: usize,
    /// Bodies parked at most: past it, the ones parked longest give way to their journals.
    parked_cap: usize,
}

/// What a slice of a claimed run starts from.
pub(crate) enum Resumed {
    /// A journal to replay, with its encoded size when it is known.
    Journal { entries: Vec<Entry>, bytes: Option<u64> },
    /// A parked body to go on with, and the entries the claim brought past what it holds.
    Parked { run: Box<ParkedRun>, new: Vec<Entry> },
}

impl Journals {
    /// Holds at most `cap` entries in all (0 keeps nothing), and `parked_cap` parked bodies.
    pub(crate) fn new(cap: usize, parked_cap: usize) -> Self {
        Self {
            inner: Mutex::default(),
            cap,
            parked_cap,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What this worker holds of `thread`'s journal, for its claim.
    pub(crate) fn held(&self, thread: &ThreadId) -> Option<JournalHeld> {
        self.lock().runs.get(thread).map(|k| k.held)
    }

    /// Keeps `thread`'s journal after a slice that left all of it durable.
    pub(crate) fn keep(&self, header: &RunHeader, entries: Vec<Entry>, bytes: u64) {
        let n = entries.len();
        self.hold(header, n, Left::Journal(entries), bytes);
    }

    /// Keeps a body that parked after a slice that left all of the run's journal durable;
    /// false (the body is dropped) if it cannot be held: no entry yet (a claim goes on from
    /// the last one held), or more than the cap.
    pub(crate) fn park(&self, header: &RunHeader, run: Box<ParkedRun>) -> bool {
        let (n, bytes) = (run.report.held as usize, run.report.bytes);
        if n == 0 || n > self.cap || self.parked_cap == 0 {
            self.forget(&header.thread);
            return false;
        }
        self.hold(header, n, Left::Parked(run), bytes);
        true
    }

    fn hold(&self, header: &RunHeader, n: usize, left: Left, bytes: u64) {
        if n == 0 || n > self.cap {
            self.forget(&header.thread);
            return;
        }
        let parks = matches!(left, Left::Parked(_));
        let mut g = self.lock();
        let inner = &mut *g;
        // (What is dropped here is dropped once the lock is let go: a body's destructors.)
        let old = inner.remove(&header.thread);
        inner.tick += 1;
        let tick = inner.tick;
        let held = JournalHeld::of(header, n as u32);
        inner.entries += n;
        inner.runs.insert(
            header.thread.clone(),
            Kept {
                held,
                left,
                bytes,
                tick,
            },
        );
        inner.order.push_back((header.thread.clone(), tick));
        if parks {
            inner.parked += 1;
            inner.parked_order.push_back((header.thread.clone(), tick));
        }
        let mut dropped: Vec<Kept> = old.into_iter().collect();
        self.unpark_past_cap(inner);
        while inner.entries > self.cap {
            let Some((thread, tick)) = inner.order.pop_front() else {
                break;
            };
            if inner.runs.get(&thread).is_some_and(|k| k.tick == tick) {
                dropped.extend(inner.remove(&thread));
            }
        }
        // Stale order records (runs kept again or taken) are dropped once they dominate.
        let runs = &inner.runs;
        if inner.order.len() > 2 * runs.len() + 1024 {
            inner
                .order
                .retain(|(t, tick)| runs.get(t).is_some_and(|k| k.tick == *tick));
        }
        if inner.parked_order.len() > 2 * inner.parked + 1024 {
            inner.parked_order.retain(|(t, tick)| {
                runs.get(t)
                    .is_some_and(|k| k.tick == *tick && matches!(k.left, Left::Parked(_)))
            });
        }
        drop(g);
        drop(dropped);
    }

    /// Past the cap of parked bodies, the ones parked longest give way to their journals
    /// (kept in their place, same entries).
    fn unpark_past_cap(&self, inner: &mut Inner) {
        while inner.parked > self.parked_cap {
            let Some((thread, tick)) = inner.parked_order.pop_front() else {
                break;
            };
            let Some(k) = inner.runs.get_mut(&thread).filter(|k| k.tick == tick) else {
                continue;
            };
            if !matches!(k.left, Left::Parked(_)) {
                continue;
            }
            inner.parked -= 1;
            let Left::Parked(run) = std::mem::replace(&mut k.left, Left::Journal(Vec::new())) else {
                continue;
            };
            match run.into_journal() {
                Some((entries, _)) if entries.len() == k.len() => k.left = Left::Journal(entries),
                _ => {
                    if let Some(k) = inner.runs.remove(&thread) {
                        inner.entries -= k.len();
                    }
                }
            }
        }
    }

    /// Drops what is held of `thread`'s journal (its slice did not leave it durable, or it
    /// ended).
    pub(crate) fn forget(&self, thread: &ThreadId) {
        let k = self.take(thread);
        drop(k);
    }

    fn take(&self, thread: &ThreadId) -> Option<Kept> {
        self.lock().remove(thread)
    }

    /// What a slice of a claimed run starts from. `from`: `None` when `claimed` is the whole
    /// journal; else the index its first entry has, which must be the last entry held.
    /// `None` when what is held does not fit the claim (the caller reads the whole journal).
    pub(crate) fn resume(&self, thread: &ThreadId, from: Option<u32>, claimed: Vec<Entry>) -> Option<Resumed> {
        let Some(from) = from else {
            // A whole journal: whatever is held is stale.
            self.forget(thread);
            return Some(Resumed::Journal {
                entries: claimed,
                bytes: None,
            });
        };
        let kept = self.take(thread)?;
        let mut new = claimed.into_iter();
        let last = new.next()?;
        if kept.len() != from as usize + 1 || kept.last() != Some(&last) {
            tracing::warn!(
                thread.id = %thread,
                held = kept.len(),
                from,
                "the journal held does not end where the run's goes on; reading it whole"
            );
            return None;
        }
        let new: Vec<Entry> = new.collect();
        let (mut entries, mut bytes) = match kept.left {
            Left::Parked(run) if run.report.expect as usize == kept.len() + new.len() => {
                return Some(Resumed::Parked { run, new });
            }
            // Another slice wrote the run since (on another worker): replay what is held.
            Left::Parked(run) => run.into_journal()?,
            Left::Journal(entries) => (entries, kept.bytes),
        };
        for e in new {
            bytes += e.encode().len() as u64;
            entries.push(e);
        }
        Some(Resumed::Journal {
            entries,
            bytes: Some(bytes),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use savepoint_core::journal::{EntryKind, Outcome};

    /// Entry `i`, the same value whenever it is made (`Entry::new` stamps the wall clock: two
    /// copies made a millisecond apart would differ, and the held journal's check with them).
    fn entry(i: u32) -> Entry {
        let mut e = Entry::new(&format!("s{i}"), EntryKind::Step, Outcome::Ok(serde_json::json!(i)), 1);
        e.at = u64::from(i);
        e
    }

    fn header(thread: &str) -> RunHeader {
        let mut fields = std::collections::BTreeMap::new();
        for (k, v) in [("wf", "w"), ("status", "running"), ("created", "7"), ("steps", "0")] {
            fields.insert(k.to_owned(), v.as_bytes().to_vec());
        }
        RunHeader::from_fields(&ThreadId::new(thread).unwrap(), &fields).unwrap()
    }

    fn journal(n: u32) -> Vec<Entry> {
        (0..n).map(entry).collect()
    }

    #[test]
    fn a_held_journal_goes_on_with_what_is_new() {
        let j = Journals::new(100, 10);
        let h = header("t1");
        j.keep(&h, journal(3), 30);
        let held = j.held(&h.thread).unwrap();
        assert_eq!((held.entries, held.created, held.restarts), (3, 7, 0));
        let r = j
            .resume(&h.thread, Some(2), vec![entry(2), entry(3), entry(4)])
            .unwrap();
        let Resumed::Journal { entries, bytes } = r else {
            panic!("a journal was held")
        };
        assert_eq!(entries, journal(5));
        let more: u64 = [entry(3), entry(4)].iter().map(|e| e.encode().len() as u64).sum();
        assert_eq!(bytes, Some(30 + more));
        // Taken: a second claim holds nothing until the slice keeps it again.
        assert!(j.held(&h.thread).is_none());
    }

    #[test]
    fn a_held_journal_that_does_not_fit_is_read_whole() {
        let j = Journals::new(100, 10);
        let h = header("t1");
        j.keep(&h, journal(3), 30);
        // The claim's last held entry differs: dropped.
        assert!(j.resume(&h.thread, Some(2), vec![entry(9), entry(3)]).is_none());
        j.keep(&h, journal(3), 30);
        // The claim starts elsewhere than the last held entry: dropped.
        assert!(j.resume(&h.thread, Some(1), vec![entry(1), entry(2)]).is_none());
        assert!(j.held(&h.thread).is_none());
        // Nothing held: an incremental claim cannot be resumed.
        assert!(j.resume(&h.thread, Some(0), vec![entry(0)]).is_none());
        // A whole journal needs nothing held.
        let Some(Resumed::Journal { entries, .. }) = j.resume(&h.thread, None, journal(2)) else {
            panic!("a whole journal")
        };
        assert_eq!(entries, journal(2));
    }

    #[test]
    fn the_oldest_journals_go_first_past_the_cap() {
        let j = Journals::new(10, 10);
        let (a, b, c) = (header("a"), header("b"), header("c"));
        j.keep(&a, journal(4), 1);
        j.keep(&b, journal(4), 1);
        j.keep(&a, journal(5), 1); // a kept again: now the newest
        j.keep(&c, journal(4), 1); // 13 > 10: b goes
        assert!(j.held(&b.thread).is_none());
        assert_eq!(j.held(&a.thread).map(|h| h.entries), Some(5));
        assert_eq!(j.held(&c.thread).map(|h| h.entries), Some(4));
        // A journal longer than the cap is not kept; nothing is kept with a cap of 0.
        j.keep(&a, journal(11), 1);
        assert!(j.held(&a.thread).is_none());
        let none = Journals::new(0, 10);
        none.keep(&a, journal(1), 1);
        assert!(none.held(&a.thread).is_none());
    }
}
