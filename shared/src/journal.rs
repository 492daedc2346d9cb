//! Journal entries: the recorded result of every workflow call, addressed by
//! `(index, name, kind)` (DESIGN §3). Stored as MessagePack in field `j:<i>` of the run hash.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Current journal entry wire version.
pub const ENTRY_VERSION: u8 = 1;

/// What kind of call produced an entry. Replay checks kind and name at each index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// `ctx.step`: at-least-once work.
    Step,
    /// `ctx.effect`: exactly-once effect by idempotency key.
    Effect,
    /// `ctx.sleep`: a durable timer; the result holds the wake time.
    Sleep,
    /// `ctx.interrupt`: the resume value.
    Interrupt,
    /// `ctx.wait_signal`: the signal value.
    Signal,
    /// `ctx.now`, `ctx.uuid`, `ctx.random`: a recorded nondeterministic value.
    Value,
    /// `ctx.patched`: a code-version marker.
    Patch,
}

impl EntryKind {
    /// The lower-case name used in the API and in error messages.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Step => "step",
            EntryKind::Effect => "effect",
            EntryKind::Sleep => "sleep",
            EntryKind::Interrupt => "interrupt",
            EntryKind::Signal => "signal",
            EntryKind::Value => "value",
            EntryKind::Patch => "patch",
        }
    }
}

/// The recorded outcome of a call: a JSON value, or the final error after retries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The call returned this value.
    Ok(Value),
    /// The call failed for good (after its retry policy); returned to workflow code as an error.
    Err(String),
}

/// One journal entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Wire version ([`ENTRY_VERSION`]).
    pub v: u8,
    /// The call's name (`read_pdf`, `ledger.post`, …).
    pub name: String,
    /// The call's kind.
    pub kind: EntryKind,
    /// What happened.
    pub outcome: Outcome,
    /// Milliseconds since the epoch when it was recorded (worker clock; informational).
    pub at: u64,
    /// Attempts it took (1 when it succeeded at once).
    pub attempts: u32,
    /// The idempotency key, for effects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// An entry that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum EntryDecodeError {
    /// Not MessagePack of the expected shape.
    #[error("malformed journal entry: {0}")]
    Malformed(String),
    /// A version this build does not read.
    #[error("unsupported journal entry version {0} (this build reads 1)")]
    Version(u8),
}

impl Entry {
    /// A new v1 entry stamped with the current time.
    pub fn new(name: &str, kind: EntryKind, outcome: Outcome, attempts: u32) -> Self {
        Self {
            v: ENTRY_VERSION,
            name: name.to_owned(),
            kind,
            outcome,
            at: now_ms(),
            attempts,
            key: None,
        }
    }

    /// MessagePack with field names.
    pub fn encode(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).unwrap_or_default()
    }

    /// Decodes and checks the version.
    pub fn decode(bytes: &[u8]) -> Result<Self, EntryDecodeError> {
        #[derive(Deserialize)]
        struct Probe {
            v: u8,
        }
        let probe: Probe = rmp_serde::from_slice(bytes).map_err(|e| EntryDecodeError::Malformed(e.to_string()))?;
        if probe.v != ENTRY_VERSION {
            return Err(EntryDecodeError::Version(probe.v));
        }
        rmp_serde::from_slice(bytes).map_err(|e| EntryDecodeError::Malformed(e.to_string()))
    }
}

/// Wall-clock milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Entry {
        Entry {
            v: 1,
            name: "extract_totals".into(),
            kind: EntryKind::Step,
            outcome: Outcome::Ok(json!({"total": 42})),
            at: 1_700_000_000_000,
            attempts: 1,
            key: None,
        }
    }

    /// Golden bytes of entry version 1: stored journals must stay readable.
    #[test]
    fn golden_bytes_v1() {
        let hex: String = sample().encode().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "86a17601a46e616d65ae657874726163745f746f74616c73a46b696e64a473746570\
             a76f7574636f6d6581a26f6b81a5746f74616c2aa26174cf0000018bcfe56800\
             a8617474656d70747301"
        );
        assert_eq!(Entry::decode(&sample().encode()).unwrap(), sample());
    }

    #[test]
    fn round_trips_every_kind_and_outcome() {
        let kinds = [
            EntryKind::Step,
            EntryKind::Effect,
            EntryKind::Sleep,
            EntryKind::Interrupt,
            EntryKind::Signal,
            EntryKind::Value,
            EntryKind::Patch,
        ];
        let outcomes = [
            Outcome::Ok(json!(null)),
            Outcome::Ok(json!([1, "two", {"three": 3.5}])),
            Outcome::Ok(json!("x".repeat(10_000))),
            Outcome::Err("boom".into()),
        ];
        for kind in kinds {
            for outcome in &outcomes {
                let mut e = sample();
                e.kind = kind;
                e.outcome = outcome.clone();
                e.key = Some("k:1".into());
                assert_eq!(Entry::decode(&e.encode()).unwrap(), e);
            }
        }
    }

    #[test]
    fn rejects_unknown_versions() {
        let mut e = sample();
        e.v = 2;
        assert!(matches!(Entry::decode(&e.encode()), Err(EntryDecodeError::Version(2))));
        assert!(Entry::decode(b"\x00\x01").is_err());
    }
}
