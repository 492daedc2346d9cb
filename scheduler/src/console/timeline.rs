//! The run page's waterfall: one bar per journal entry (its duration, effects with their key
//! and state, sleeps and waits as gaps) and markers for what happened to the run (claims,
//! takeovers after a crash, blocks, answers, operator actions), laid out on one time axis.
//! A plain function of the header, the journal and the events.

use std::collections::HashMap;

use savepoint_core::journal::{Entry, EntryKind, Outcome};
use savepoint_store::{RunEvent, RunHeader, RunStatus};

use crate::api::doctor::span;

/// One bar.
#[derive(Debug, Clone)]
pub(crate) struct Bar {
    /// Journal index (the next index for the call in flight or in doubt).
    pub index: u32,
    /// Call name.
    pub name: String,
    /// `step`, `effect`, `sleep`, `interrupt`, `signal`, `value`, `patch`, `child`.
    pub kind: &'static str,
    /// CSS class: the kind, and for effects and failures their state.
    pub class: String,
    /// State shown beside it: `done`, `skipped (deduplicated)`, `in doubt`, `failed`,
    /// `in flight`, `slept`, `answered`.
    pub state: String,
    /// The effect key, for effects.
    pub key: Option<String>,
    /// Start and end (store ms).
    pub start: u64,
    /// End (store ms).
    pub end: u64,
    /// Readable duration.
    pub took: String,
    /// Attempts it took.
    pub attempts: u32,
    /// Left edge and width on the axis, in percent.
    pub left: f64,
    /// Width in percent (at least a sliver, so instant calls stay visible).
    pub width: f64,
    /// Its caption, positioned (`left: …%` or, near the right edge, `right: …%`).
    pub caption_style: String,
}

/// One marker.
#[derive(Debug, Clone)]
pub(crate) struct Mark {
    /// Store ms.
    pub at: u64,
    /// Event type (also the CSS class).
    pub class: String,
    /// Short label (`crash: worker-a died, worker-b took over`).
    pub label: String,
    /// Position on the axis, in percent.
    pub left: f64,
}

/// The laid-out waterfall.
#[derive(Debug, Clone, Default)]
pub(crate) struct Timeline {
    /// Axis start (store ms).
    pub start: u64,
    /// Axis end (store ms).
    pub end: u64,
    /// Readable length of the axis.
    pub length: String,
    /// Bars, in journal order.
    pub bars: Vec<Bar>,
    /// Markers, in time order.
    pub marks: Vec<Mark>,
    /// Takeovers (a worker died or stalled and another took the run over).
    pub takeovers: usize,
    /// Where the takeovers are on the axis (percent): drawn across every lane.
    pub crash_lines: Vec<String>,
}

impl Timeline {
    /// The axis' start, readably (UTC).
    pub(crate) fn axis_start(&self) -> String {
        super::format::clock(self.start)
    }

    /// The axis' end, readably (UTC).
    pub(crate) fn axis_end(&self) -> String {
        super::format::clock(self.end)
    }
}

/// Events drawn as markers, with their label.
fn mark_label(e: &RunEvent) -> Option<String> {
    let d = &e.detail;
    Some(match e.typ.as_str() {
        "created" => format!("created ({d})"),
        "claimed" => format!("claimed by {d}"),
        "takeover" => {
            // `B took the expired lease of A`.
            match d.split_once(" took the expired lease of ") {
                Some((new, old)) => format!("crash: {old} died, {new} took over"),
                None => format!("takeover: {d}"),
            }
        }
        "blocked" => format!("blocked: {d}"),
        "resumed" => format!("answered {d}"),
        "signalled" => format!("signal {d}"),
        "cancelled" => format!("cancelled: {d}"),
        "retried_by_operator" => format!("retried by an operator {d}"),
        "effect_resolved" => format!("effect resolved: {d}"),
        "effect_in_doubt" => format!("effect in doubt: {d}"),
        "unserved" => format!("no worker serves it: {d}"),
        "given_back" => format!("given back to a build that reads it: {d}"),
        "completed" => "completed".into(),
        "failed" => format!("failed: {d}"),
        "retry_later" => "handed back after a transient error".into(),
        _ => return None,
    })
}

/// Builds the waterfall. `now` is the store clock (the end of the axis of a run still going).
pub(crate) fn build(h: &RunHeader, journal: &[Entry], events: &[RunEvent], now: u64) -> Timeline {
    let claims = Claims::of(events);
    let (mut bars, boundary) = journal_bars(h, journal, events, &claims, now);
    let tail_end = tail_end(h, now);
    bars.extend(open_bar(h, &claims, boundary, tail_end));
    lay_out(h, bars, marks(events), tail_end)
}

/// When the run's `claimed` events happened.
///
/// A claim starts a slice: a call recorded in it started no earlier. A takeover does not
/// restart the call the dead worker was in: its bar spans the crash (the marker shows it).
struct Claims(Vec<u64>);

impl Claims {
    /// The claims among the run's events.
    fn of(events: &[RunEvent]) -> Self {
        Claims(events.iter().filter(|e| e.typ == "claimed").map(|e| e.at).collect())
    }

    /// The last claim at or before `upto`.
    fn last(&self, upto: u64) -> Option<u64> {
        self.0.iter().copied().filter(|t| *t <= upto).max()
    }
}

/// The effect events (`effect_done`, `effect_skipped`, `effect_failed`) by their detail
/// (`<index> <name>`), read once for all entries; the first of each, as it happened.
fn effect_events(events: &[RunEvent]) -> HashMap<&str, &str> {
    events
        .iter()
        .rev()
        .filter(|e| e.typ.starts_with("effect_"))
        .map(|e| (e.detail.as_str(), e.typ.as_str()))
        .collect()
}

/// One bar per journal entry (not yet laid out), and where a call after the last one started
/// at the earliest.
fn journal_bars(h: &RunHeader, journal: &[Entry], events: &[RunEvent], claims: &Claims, now: u64) -> (Vec<Bar>, u64) {
    let effect_events = effect_events(events);
    let mut bars = Vec::new();
    let mut boundary = h.created_at;
    for (i, e) in journal.iter().enumerate() {
        let bar = entry_bar(i, e, boundary, claims, &effect_events);
        boundary = if e.kind == EntryKind::Sleep {
            bar.end.min(now)
        } else {
            e.at
        };
        bars.push(bar);
    }
    (bars, boundary)
}

/// The bar of entry `i`, which started no earlier than `boundary`.
fn entry_bar(i: usize, e: &Entry, boundary: u64, claims: &Claims, effect_events: &HashMap<&str, &str>) -> Bar {
    let kind = e.kind.as_str();
    let (start, end) = entry_span(e, boundary, claims);
    let state = entry_state(i, e, effect_events);
    let mut class = kind.to_owned();
    class.push(' ');
    class.push_str(state.split(' ').next().unwrap_or("done"));
    Bar {
        index: i as u32,
        name: e.name.clone(),
        kind,
        class,
        state,
        key: e.key.clone(),
        start,
        end,
        took: span(end.saturating_sub(start)),
        attempts: e.attempts,
        left: 0.0,
        width: 0.0,
        caption_style: String::new(),
    }
}

/// When an entry's call started and ended: a sleep until its wake time, an answer from the
/// previous entry on, any other call from its slice's claim (or the previous entry) on.
fn entry_span(e: &Entry, boundary: u64, claims: &Claims) -> (u64, u64) {
    match e.kind {
        EntryKind::Sleep => {
            // Its result is the wake time.
            let wake = match &e.outcome {
                Outcome::Ok(v) => v.as_u64().or_else(|| v.get("wake_at").and_then(|w| w.as_u64())),
                Outcome::Err(_) => None,
            };
            (e.at, wake.unwrap_or(e.at).max(e.at))
        }
        EntryKind::Interrupt | EntryKind::Signal => (boundary, e.at),
        _ => (claims.last(e.at).unwrap_or(boundary).max(boundary).min(e.at), e.at),
    }
}

/// The state shown beside entry `i`'s bar.
fn entry_state(i: usize, e: &Entry, effect_events: &HashMap<&str, &str>) -> String {
    if matches!(e.outcome, Outcome::Err(_)) {
        return "failed".into();
    }
    match e.kind {
        EntryKind::Sleep => "slept".into(),
        EntryKind::Interrupt | EntryKind::Signal => "answered".into(),
        EntryKind::Effect => match effect_events.get(format!("{i} {}", e.name).as_str()).copied() {
            Some("effect_skipped") => "skipped (already applied)".into(),
            Some("effect_failed") => "failed".into(),
            _ => "done".into(),
        },
        _ => "done".into(),
    }
}

/// Where the axis of the run ends: when it finished, or `now` while it is still going.
fn tail_end(h: &RunHeader, now: u64) -> u64 {
    if h.status.is_final() {
        h.finished_at.unwrap_or(h.updated_at)
    } else {
        now
    }
}

/// The bar of the call in flight, or of the effect in doubt that blocks the run (none when
/// neither), from its slice's claim (or the last entry) to `tail_end`.
fn open_bar(h: &RunHeader, claims: &Claims, boundary: u64, tail_end: u64) -> Option<Bar> {
    let next = h.steps;
    let (kind, class, state, key, name) = match h.status {
        RunStatus::Blocked => h.blocked_effect.as_ref().map(|k| {
            (
                "effect",
                "effect in_doubt".to_owned(),
                "in doubt".to_owned(),
                Some(k.clone()),
                k.split(':').next().unwrap_or("effect").to_owned(),
            )
        }),
        RunStatus::Running => Some((
            "step",
            "step inflight".to_owned(),
            "in flight".to_owned(),
            None,
            format!("entry {next}"),
        )),
        _ => None,
    }?;
    let start = claims.last(tail_end).unwrap_or(boundary).max(boundary);
    Some(Bar {
        index: next,
        name,
        kind,
        class,
        state,
        key,
        start,
        end: tail_end.max(start),
        took: span(tail_end.saturating_sub(start)),
        attempts: 0,
        left: 0.0,
        width: 0.0,
        caption_style: String::new(),
    })
}

/// A marker (not yet laid out) for each event drawn as one.
fn marks(events: &[RunEvent]) -> Vec<Mark> {
    events
        .iter()
        .filter_map(|e| {
            mark_label(e).map(|label| Mark {
                at: e.at,
                class: e.typ.clone(),
                label,
                left: 0.0,
            })
        })
        .collect()
}

/// Lays the bars and markers out on one axis, from the run's creation (or the first bar) to
/// the last thing drawn (at least `tail_end`).
fn lay_out(h: &RunHeader, mut bars: Vec<Bar>, mut marks: Vec<Mark>, tail_end: u64) -> Timeline {
    let start = h.created_at.min(bars.iter().map(|b| b.start).min().unwrap_or(u64::MAX));
    let end = bars
        .iter()
        .map(|b| b.end)
        .chain(marks.iter().map(|m| m.at))
        .chain([tail_end])
        .max()
        .unwrap_or(start)
        .max(start + 1);
    let pos = |t: u64| ((t.saturating_sub(start)) as f64 * 100.0 / (end - start) as f64).clamp(0.0, 100.0);
    for b in &mut bars {
        b.left = pos(b.start);
        b.width = (pos(b.end) - b.left).max(0.6).min(100.0 - b.left.min(99.4));
        b.caption_style = if b.left > 55.0 {
            format!("right: {:.2}%; text-align: right", (100.0 - b.left - b.width).max(0.0))
        } else {
            format!("left: {:.2}%", b.left)
        };
    }
    for m in &mut marks {
        m.left = pos(m.at);
    }
    marks.sort_by_key(|m| m.at);
    Timeline {
        start,
        end,
        length: span(end - start),
        takeovers: marks.iter().filter(|m| m.class == "takeover").count(),
        crash_lines: marks
            .iter()
            .filter(|m| m.class == "takeover")
            .map(|m| format!("{:.2}", m.left))
            .collect(),
        bars,
        marks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use savepoint_core::ids::ThreadId;
    use serde_json::json;

    fn ev(at: u64, typ: &str, detail: &str) -> RunEvent {
        RunEvent {
            id: String::new(),
            typ: typ.into(),
            detail: detail.into(),
            at,
        }
    }

    fn entry(name: &str, kind: EntryKind, at: u64, key: Option<&str>) -> Entry {
        Entry {
            v: 2,
            name: name.into(),
            kind,
            outcome: Outcome::Ok(json!(null)),
            at,
            attempts: 1,
            key: key.map(str::to_owned),
            failure: None,
            tv: None,
        }
    }

    #[test]
    fn the_invoice_story_shows_the_crash_between_the_ledger_and_the_single_email() {
        let fields = std::collections::BTreeMap::from([
            ("status".to_owned(), b"completed".to_vec()),
            ("created".to_owned(), b"1000".to_vec()),
            ("finished".to_owned(), b"5000".to_vec()),
            ("steps".to_owned(), b"4".to_vec()),
        ]);
        let h = RunHeader::from_fields(&ThreadId::new("inv".to_owned()).unwrap(), &fields).unwrap();
        let journal = [
            entry("read_pdf", EntryKind::Step, 1100, None),
            entry("extract_totals", EntryKind::Step, 1200, None),
            entry("ledger.post", EntryKind::Effect, 1300, Some("ledger:INV-1")),
            entry("email.send", EntryKind::Effect, 4900, Some("email:inv")),
        ];
        let events = [
            ev(1000, "created", "invoice@1"),
            ev(1010, "claimed", "worker-a"),
            ev(1300, "effect_done", "2 ledger.post"),
            ev(4000, "takeover", "worker-b took the expired lease of worker-a"),
            ev(4900, "effect_done", "3 email.send"),
            ev(5000, "completed", ""),
        ];
        let t = build(&h, &journal, &events, 9_000);
        assert_eq!(t.takeovers, 1);
        assert_eq!(t.bars.len(), 4);
        let email = &t.bars[3];
        assert_eq!((email.start, email.end, email.state.as_str()), (1300, 4900, "done"));
        assert_eq!(
            t.crash_lines,
            vec!["75.00".to_owned()],
            "the crash is drawn across the lanes"
        );
        assert_eq!(t.bars[0].start, 1010, "the first step starts at the claim");
        assert!(t
            .marks
            .iter()
            .any(|m| m.label == "crash: worker-a died, worker-b took over"));
        assert_eq!((t.start, t.end), (1000, 5000));
    }
}
