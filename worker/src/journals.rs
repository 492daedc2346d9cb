//! The journals of runs this worker ran a slice of, kept for the runs' next slices
//! (ARCHITECTURE §7, "Resuming from a held journal").
//!
//! A slice that ends with its whole journal durable (the run suspended or yielded) leaves the
//! journal here. The run's next claim on this worker names how much of it the worker holds,
//! the claim answers with only what is new past it, and the next slice starts from the held
//! entries plus the new ones: a resume reads and decodes what is new, not the whole journal.
//! Only durable entries are ever held, and the journal is append-only between restarts (which
//! the claim checks), so what is held is always a prefix of the run's journal; the claim's
//! reply repeats the last held entry, and a held journal that does not end with it is dropped
//! and the journal read whole.
//!
//! Bounded by entries held in all (`worker.journal_cache_entries`); the journals held longest
//! are dropped first. Each run's journal is moved in and out, never copied.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use savepoint_core::ids::ThreadId;
use savepoint_core::journal::Entry;
use savepoint_store::model::{JournalHeld, RunHeader};

/// A run's journal as a slice left it.
struct Kept {
    held: JournalHeld,
    entries: Vec<Entry>,
    bytes: u64,
    /// Its place in the eviction order.
    tick: u64,
}

#[derive(Default)]
struct Inner {
    runs: HashMap<ThreadId, Kept>,
    /// Journals in the order they were kept (entries whose tick no longer matches are stale).
    order: VecDeque<(ThreadId, u64)>,
    /// Entries held in all.
    entries: usize,
    tick: u64,
}

/// The journals this worker holds, by run.
pub(crate) struct Journals {
    inner: Mutex<Inner>,
    /// Entries held at most (0: none are kept).
    cap: usize,
}

/// A journal to start a slice from: its entries and their encoded size.
pub(crate) struct Resumed {
    pub entries: Vec<Entry>,
    pub bytes: Option<u64>,
}

impl Journals {
    /// Holds at most `cap` entries in all (0 keeps nothing).
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            inner: Mutex::default(),
            cap,
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
        if entries.is_empty() || entries.len() > self.cap {
            self.forget(&header.thread);
            return;
        }
        let mut g = self.lock();
        let inner = &mut *g;
        inner.tick += 1;
        let tick = inner.tick;
        let held = JournalHeld::of(header, entries.len() as u32);
        inner.entries += entries.len();
        let old = inner.runs.insert(
            header.thread.clone(),
            Kept {
                held,
                entries,
                bytes,
                tick,
            },
        );
        if let Some(old) = old {
            inner.entries -= old.entries.len();
        }
        inner.order.push_back((header.thread.clone(), tick));
        while inner.entries > self.cap {
            let Some((thread, tick)) = inner.order.pop_front() else {
                break;
            };
            if inner.runs.get(&thread).is_some_and(|k| k.tick == tick) {
                if let Some(k) = inner.runs.remove(&thread) {
                    inner.entries -= k.entries.len();
                }
            }
        }
        // Stale order records (runs kept again or taken) are dropped once they dominate.
        if inner.order.len() > 2 * inner.runs.len() + 1024 {
            let runs = &inner.runs;
            inner
                .order
                .retain(|(t, tick)| runs.get(t).is_some_and(|k| k.tick == *tick));
        }
    }

    /// Drops what is held of `thread`'s journal (its slice did not leave it durable, or it
    /// ended).
    pub(crate) fn forget(&self, thread: &ThreadId) {
        let mut g = self.lock();
        if let Some(k) = g.runs.remove(thread) {
            g.entries -= k.entries.len();
        }
    }

    /// The journal a slice of a claimed run starts from. `from`: `None` when `claimed` is the
    /// whole journal; else the index its first entry has, which must be the last entry held.
    /// `None` when what is held does not fit the claim (the caller reads the whole journal).
    pub(crate) fn resume(&self, thread: &ThreadId, from: Option<u32>, claimed: Vec<Entry>) -> Option<Resumed> {
        let Some(from) = from else {
            // A whole journal: whatever is held is replaced at the slice's end.
            return Some(Resumed {
                entries: claimed,
                bytes: None,
            });
        };
        let kept = {
            let mut g = self.lock();
            let k = g.runs.remove(thread)?;
            g.entries -= k.entries.len();
            k
        };
        let mut new = claimed.into_iter();
        let last = new.next()?;
        if kept.entries.len() != from as usize + 1 || kept.entries.last() != Some(&last) {
            tracing::warn!(
                thread.id = %thread,
                held = kept.entries.len(),
                from,
                "the journal held does not end where the run's goes on; reading it whole"
            );
            return None;
        }
        let mut entries = kept.entries;
        let mut bytes = kept.bytes;
        for e in new {
            bytes += e.encode().len() as u64;
            entries.push(e);
        }
        Some(Resumed {
            entries,
            bytes: Some(bytes),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use savepoint_core::journal::{EntryKind, Outcome};

    fn entry(i: u32) -> Entry {
        Entry::new(&format!("s{i}"), EntryKind::Step, Outcome::Ok(serde_json::json!(i)), 1)
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
        let j = Journals::new(100);
        let h = header("t1");
        j.keep(&h, journal(3), 30);
        let held = j.held(&h.thread).unwrap();
        assert_eq!((held.entries, held.created, held.restarts), (3, 7, 0));
        let r = j
            .resume(&h.thread, Some(2), vec![entry(2), entry(3), entry(4)])
            .unwrap();
        assert_eq!(r.entries, journal(5));
        let more: u64 = [entry(3), entry(4)].iter().map(|e| e.encode().len() as u64).sum();
        assert_eq!(r.bytes, Some(30 + more));
        // Taken: a second claim holds nothing until the slice keeps it again.
        assert!(j.held(&h.thread).is_none());
    }

    #[test]
    fn a_held_journal_that_does_not_fit_is_read_whole() {
        let j = Journals::new(100);
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
        assert_eq!(j.resume(&h.thread, None, journal(2)).unwrap().entries, journal(2));
    }

    #[test]
    fn the_oldest_journals_go_first_past_the_cap() {
        let j = Journals::new(10);
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
        let none = Journals::new(0);
        none.keep(&a, journal(1), 1);
        assert!(none.held(&a.thread).is_none());
    }
}
