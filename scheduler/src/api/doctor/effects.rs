//! The effect keys a run holds or waits on, as facts and the evidence they add.

use savepoint_store::{EffectRecord, Holder, RunHeader, RunStatus};

use super::{EffectFact, Facts};

/// Who holds an effect record, readably (an operator's resolve names its run).
fn holder_text(h: &Holder) -> String {
    if h.index < 0 {
        format!("an operator (on run {})", h.thread)
    } else {
        h.to_string()
    }
}

/// The fact about effect `key` in `role`, from its record.
fn record_fact(key: &str, role: &str, rec: Option<&EffectRecord>) -> EffectFact {
    let (state, holder) = match rec {
        None => ("none", None),
        Some(EffectRecord::Intent(h)) => ("intent", Some(holder_text(h))),
        Some(EffectRecord::Orphaned(h, _)) => ("in_doubt", Some(holder_text(h))),
        Some(EffectRecord::Done(h, _)) => ("done", Some(holder_text(h))),
    };
    EffectFact {
        key: key.to_owned(),
        role: role.to_owned(),
        state: state.to_owned(),
        holder,
    }
}

/// `, held by …` for a fact whose record has a holder, else nothing.
fn held_by(fact: &EffectFact) -> String {
    fact.holder
        .as_deref()
        .map(|h| format!(", held by {h}"))
        .unwrap_or_default()
}

/// The in-doubt effect a blocked run is blocked on.
fn blocked_on(h: &RunHeader, f: &Facts) -> Option<EffectFact> {
    let key = h.blocked_effect.as_deref().filter(|_| h.status == RunStatus::Blocked)?;
    Some(record_fact(key, "blocked_on", f.blocked_record.as_ref()))
}

/// The effect the run began and has not journaled, with its sentence of evidence.
fn begun(h: &RunHeader, f: &Facts) -> Option<(EffectFact, String)> {
    let (key, rec) = f.begun.as_ref()?;
    let fact = record_fact(key, "holds", rec.as_ref());
    let line = format!(
        "began the effect {key} at entry {} (not journaled yet): its record is {}{}",
        h.steps,
        fact.state,
        held_by(&fact)
    );
    Some((fact, line))
}

/// The effect key an unfinished run backs off on, with its sentence of evidence.
fn waited_for(h: &RunHeader, f: &Facts) -> Option<(EffectFact, String)> {
    let (key, tries) = h.wait_effect.as_ref().filter(|_| !h.status.is_final())?;
    let fact = record_fact(key, "waiting_for", f.waited_record.as_ref());
    let line = format!(
        "backs off on effect key {key} (try {tries}): its record is {}{}",
        fact.state,
        held_by(&fact)
    );
    Some((fact, line))
}

/// The effects the run holds or waits on (blocked on, holds, waiting for, in that order),
/// and the evidence they add.
pub(super) fn effect_facts(h: &RunHeader, f: &Facts) -> (Vec<EffectFact>, Vec<String>) {
    let mut effects: Vec<EffectFact> = blocked_on(h, f).into_iter().collect();
    let mut evidence = Vec::new();
    for (fact, line) in begun(h, f).into_iter().chain(waited_for(h, f)) {
        effects.push(fact);
        evidence.push(line);
    }
    (effects, evidence)
}
