//! Journal entries: the recorded result of every workflow call, addressed by
//! `(index, name, kind)` (ARCHITECTURE §4). Stored as MessagePack in field `j:<i>` of the run
//! hash.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Current journal entry wire version. Version 2 is a positional MessagePack array
/// `[2, name, kind code, ok value | nil, error | nil, at, attempts, key | nil]` (about half
/// the bytes of version 1's named map, which keeps small runs in Redis's compact hash
/// encoding); version 1 entries are still read.
pub const ENTRY_VERSION: u8 = 2;

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
    /// `ctx.child`: a child run's output (or failure), or, started and not awaited, its thread
    /// id. The entry's key is the child's thread id.
    Child,
}

impl EntryKind {
    const CODES: [EntryKind; 8] = [
        EntryKind::Step,
        EntryKind::Effect,
        EntryKind::Sleep,
        EntryKind::Interrupt,
        EntryKind::Signal,
        EntryKind::Value,
        EntryKind::Patch,
        EntryKind::Child,
    ];

    fn code(self) -> u8 {
        Self::CODES.iter().position(|k| *k == self).unwrap_or(0) as u8
    }

    fn from_code(c: u8) -> Option<Self> {
        Self::CODES.get(usize::from(c)).copied()
    }

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
            EntryKind::Child => "child",
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
    #[error("unsupported journal entry version {0} (this build reads 1 and 2)")]
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

    /// Version 2 wire bytes (positional MessagePack array).
    pub fn encode(&self) -> Vec<u8> {
        let (ok, err) = match &self.outcome {
            Outcome::Ok(v) => (Some(v), None),
            Outcome::Err(e) => (None, Some(e.as_str())),
        };
        let wire = (
            2u8,
            &self.name,
            self.kind.code(),
            ok,
            err,
            self.at,
            self.attempts,
            self.key.as_deref(),
        );
        rmp_serde::to_vec(&wire).unwrap_or_default()
    }

    /// Version 1 wire bytes (named map), kept for the golden test of the old format.
    pub fn encode_v1(&self) -> Vec<u8> {
        let mut e = self.clone();
        e.v = 1;
        rmp_serde::to_vec_named(&e).unwrap_or_default()
    }

    /// Decodes version 2 (array) or version 1 (named map) bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, EntryDecodeError> {
        let malformed = |e: rmp_serde::decode::Error| EntryDecodeError::Malformed(e.to_string());
        if matches!(bytes.first(), Some(0x90..=0x9f | 0xdc | 0xdd)) {
            type Wire = (u8, String, u8, Option<Value>, Option<String>, u64, u32, Option<String>);
            let (v, name, kind, ok, err, at, attempts, key): Wire = rmp_serde::from_slice(bytes).map_err(malformed)?;
            if v != 2 {
                return Err(EntryDecodeError::Version(v));
            }
            let kind = EntryKind::from_code(kind)
                .ok_or_else(|| EntryDecodeError::Malformed(format!("unknown kind code {kind}")))?;
            let outcome = match (ok, err) {
                (_, Some(e)) => Outcome::Err(e),
                (v, None) => Outcome::Ok(v.unwrap_or(Value::Null)),
            };
            return Ok(Self {
                v: 2,
                name,
                kind,
                outcome,
                at,
                attempts,
                key,
            });
        }
        #[derive(Deserialize)]
        struct Probe {
            v: u8,
        }
        let probe: Probe = rmp_serde::from_slice(bytes).map_err(malformed)?;
        if probe.v != 1 {
            return Err(EntryDecodeError::Version(probe.v));
        }
        let mut e: Entry = rmp_serde::from_slice(bytes).map_err(malformed)?;
        e.v = 2;
        Ok(e)
    }
}

/// Wall-clock milliseconds since the Unix epoch.
// The one wall-clock read outside the store: callers that stamp informational records (the
// demo effects log, replay-only contexts); a run's own time is the store server's.
#[allow(clippy::disallowed_methods)]
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
            v: 2,
            name: "extract_totals".into(),
            kind: EntryKind::Step,
            outcome: Outcome::Ok(json!({"total": 42})),
            at: 1_700_000_000_000,
            attempts: 1,
            key: None,
        }
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Golden bytes of entry version 1: journals written by earlier builds stay readable.
    #[test]
    fn golden_bytes_v1() {
        let v1 = "86a17601a46e616d65ae657874726163745f746f74616c73a46b696e64a473746570\
                  a76f7574636f6d6581a26f6b81a5746f74616c2aa26174cf0000018bcfe56800\
                  a8617474656d70747301";
        assert_eq!(hex(&sample().encode_v1()), v1);
        let bytes: Vec<u8> = (0..v1.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&v1[i..i + 2], 16).unwrap())
            .collect();
        assert_eq!(Entry::decode(&bytes).unwrap(), sample());
    }

    /// Golden bytes of entry version 2 (what this build writes).
    #[test]
    fn golden_bytes_v2() {
        let bytes = sample().encode();
        assert_eq!(
            hex(&bytes),
            "9802ae657874726163745f746f74616c730081a5746f74616c2ac0cf0000018bcfe5680001c0"
        );
        assert_eq!(Entry::decode(&bytes).unwrap(), sample());
        assert!(bytes.len() < sample().encode_v1().len() / 2 + 8);
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
        e.v = 3;
        let named = rmp_serde::to_vec_named(&e).unwrap();
        assert!(matches!(Entry::decode(&named), Err(EntryDecodeError::Version(3))));
        let wire = (
            3u8,
            "x",
            0u8,
            Some(json!(1)),
            None::<String>,
            0u64,
            1u32,
            None::<String>,
        );
        assert!(matches!(
            Entry::decode(&rmp_serde::to_vec(&wire).unwrap()),
            Err(EntryDecodeError::Version(3))
        ));
        assert!(Entry::decode(b"\x00\x01").is_err());
    }
}
