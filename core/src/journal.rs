//! Journal entries: the recorded result of every workflow call, addressed by
//! `(index, name, kind)` (ARCHITECTURE §4). Stored as MessagePack in field `j:<i>` of the run
//! hash.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Current journal entry wire version. Version 3 is a positional MessagePack array
/// `[3, name, kind code, ok value | nil, error | nil, at, attempts, key | nil]`, followed, only
/// when the call failed and its [`Failure`] is known, by two more elements
/// `class | nil, retryable`. Version 2 is the same array without the trailing elements (about
/// half the bytes of version 1's named map, which keeps small runs in Redis's compact hash
/// encoding); versions 2 and 1 are still read, their failures with no [`Failure`].
///
/// Version 4 is version 3's array with all ten elements (`class` and `retryable` nil for a
/// success) and an eleventh: the version of the recorded value's type as the code that wrote
/// it declared it ([`Entry::tv`]). It is written only for an entry that carries one (the code
/// declared its type at a version above 1); every other entry is written as version 3, so a
/// build that reads 1 to 3 reads what it can and refuses, by its version, a value whose shape
/// it cannot know.
pub const ENTRY_VERSION: u8 = 4;

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

/// What a failed call's final error was, besides its message (`Outcome::Err`): the data
/// workflow code matches on to compensate (`WorkflowError::class`,
/// `WorkflowError::is_retryable` in the SDK). Journaled from entry version 3 on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// The error's class (the SDK's `StepError::with_class`), if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Whether the error was one retrying could fix: the call stopped because its retry
    /// policy ran out of attempts, not because the error was fatal or of a non-retryable class.
    #[serde(default)]
    pub retryable: bool,
}

impl Failure {
    /// A failure of this class (or none) and retryability.
    pub fn new(class: Option<String>, retryable: bool) -> Self {
        Self { class, retryable }
    }
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
    /// For a failed outcome (`Outcome::Err`): the final error's class and retryability.
    /// `None` for a success, for a failure journaled by a version before 3, and for a failure
    /// that was not an error of the call's own function. Encoded only with `Outcome::Err`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// The version of the recorded value's type as the code that wrote it declared it
    /// (`savepoint::workflow::Versioned`); `None`: version 1 (a type with no declaration, or
    /// an entry written before version 4). A replay upgrades an older value through the
    /// declared migrations before the code sees it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tv: Option<u32>,
}

/// An entry that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum EntryDecodeError {
    /// Not MessagePack of the expected shape.
    #[error("malformed journal entry: {0}")]
    Malformed(String),
    /// A version this build does not read.
    #[error("unsupported journal entry version {0} (this build reads 1 to 4)")]
    Version(u8),
}

/// A version 2, 3 or 4 entry as the positional array holds it; the two failure elements are
/// absent unless the call failed (and always absent in version 2), the value version present
/// only in version 4.
#[derive(Deserialize)]
struct Positional {
    v: u8,
    name: String,
    kind: u8,
    ok: Option<Value>,
    err: Option<String>,
    at: u64,
    attempts: u32,
    key: Option<String>,
    #[serde(default)]
    class: Option<String>,
    #[serde(default)]
    retryable: Option<bool>,
    #[serde(default)]
    tv: Option<u32>,
}

impl Entry {
    /// A new current-version entry stamped with the current time.
    pub fn new(name: &str, kind: EntryKind, outcome: Outcome, attempts: u32) -> Self {
        Self {
            v: ENTRY_VERSION,
            name: name.to_owned(),
            kind,
            outcome,
            at: now_ms(),
            attempts,
            key: None,
            failure: None,
            tv: None,
        }
    }

    /// This entry with the version of its value's type (`None` or `Some(1)`: version 1, not
    /// written; a failure has no value, so no version).
    pub fn with_value_version(mut self, tv: Option<u32>) -> Self {
        self.tv = tv.filter(|v| *v > 1 && matches!(self.outcome, Outcome::Ok(_)));
        self
    }

    /// A new entry for a call that failed for good with `message`, keeping the error's class
    /// and retryability (`Failure::new(step_error.class, retryable)`).
    pub fn failed(name: &str, kind: EntryKind, message: impl Into<String>, failure: Failure, attempts: u32) -> Self {
        Self::new(name, kind, Outcome::Err(message.into()), attempts).with_failure(failure)
    }

    /// This entry with `failure` (a `Failure` or an `Option<Failure>`) attached; it is kept
    /// only if the outcome is `Outcome::Err`.
    pub fn with_failure(mut self, failure: impl Into<Option<Failure>>) -> Self {
        self.failure = failure.into();
        self
    }

    /// The failure details to write: only a failed outcome has them.
    fn failure_to_write(&self) -> Option<&Failure> {
        match self.outcome {
            Outcome::Err(_) => self.failure.as_ref(),
            Outcome::Ok(_) => None,
        }
    }

    /// Wire bytes: version 3 (positional MessagePack array; 8 elements, or 10 for a failure
    /// with a [`Failure`]), or version 4 (11 elements) for an entry with a value version.
    pub fn encode(&self) -> Vec<u8> {
        let (ok, err) = match &self.outcome {
            Outcome::Ok(v) => (Some(v), None),
            Outcome::Err(e) => (None, Some(e.as_str())),
        };
        let (name, kind, key) = (&self.name, self.kind.code(), self.key.as_deref());
        let (at, attempts) = (self.at, self.attempts);
        let f = self.failure_to_write();
        let (class, retryable) = (f.and_then(|f| f.class.as_deref()), f.map(|f| f.retryable));
        let tv = self.tv.filter(|v| *v > 1 && matches!(self.outcome, Outcome::Ok(_)));
        let encoded = match (tv, retryable) {
            (Some(tv), _) => rmp_serde::to_vec(&(4u8, name, kind, ok, err, at, attempts, key, class, retryable, tv)),
            (None, None) => rmp_serde::to_vec(&(3u8, name, kind, ok, err, at, attempts, key)),
            (None, Some(r)) => rmp_serde::to_vec(&(3u8, name, kind, ok, err, at, attempts, key, class, r)),
        };
        encoded.unwrap_or_default()
    }

    /// Version 1 wire bytes (named map), kept for the golden test of the old format (a
    /// failure's [`Failure`], which version 1 never had, is written as a `failure` field).
    pub fn encode_v1(&self) -> Vec<u8> {
        let mut e = self.clone();
        e.v = 1;
        e.failure = self.failure_to_write().cloned();
        rmp_serde::to_vec_named(&e).unwrap_or_default()
    }

    /// Decodes version 3 or 2 (array) or version 1 (named map) bytes into a current-version
    /// entry.
    pub fn decode(bytes: &[u8]) -> Result<Self, EntryDecodeError> {
        let malformed = |e: rmp_serde::decode::Error| EntryDecodeError::Malformed(e.to_string());
        if matches!(bytes.first(), Some(0x90..=0x9f | 0xdc | 0xdd)) {
            let p: Positional = rmp_serde::from_slice(bytes).map_err(malformed)?;
            return Self::from_positional(p);
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
        if e.failure.is_some() && matches!(e.outcome, Outcome::Ok(_)) {
            return Err(EntryDecodeError::Malformed(
                "failure details on a successful entry".into(),
            ));
        }
        // (A value version is carried only by a value, and only above 1, as `encode` writes it.)
        e.tv = e.tv.filter(|v| *v > 1 && matches!(e.outcome, Outcome::Ok(_)));
        e.v = ENTRY_VERSION;
        Ok(e)
    }

    /// Checks and converts a positional (version 2, 3 or 4) entry.
    fn from_positional(p: Positional) -> Result<Self, EntryDecodeError> {
        let has_failure = p.class.is_some() || p.retryable.is_some();
        match p.v {
            4 if p.tv.is_some() => {}
            4 => {
                return Err(EntryDecodeError::Malformed(
                    "a version 4 entry without its value version".into(),
                ))
            }
            3 if p.tv.is_none() => {}
            3 => {
                return Err(EntryDecodeError::Malformed(
                    "a value version in a version 3 entry".into(),
                ))
            }
            2 if !has_failure => {}
            2 => {
                return Err(EntryDecodeError::Malformed(
                    "failure details in a version 2 entry".into(),
                ))
            }
            v => return Err(EntryDecodeError::Version(v)),
        }
        let kind = EntryKind::from_code(p.kind)
            .ok_or_else(|| EntryDecodeError::Malformed(format!("unknown kind code {}", p.kind)))?;
        let outcome = match (p.ok, p.err) {
            (_, Some(e)) => Outcome::Err(e),
            (_, None) if has_failure => {
                return Err(EntryDecodeError::Malformed(
                    "failure details on a successful entry".into(),
                ))
            }
            (v, None) => Outcome::Ok(v.unwrap_or(Value::Null)),
        };
        if p.tv.is_some() && matches!(outcome, Outcome::Err(_)) {
            return Err(EntryDecodeError::Malformed("a value version on a failure".into()));
        }
        let failure = has_failure.then(|| Failure::new(p.class, p.retryable.unwrap_or(false)));
        Ok(Self {
            v: ENTRY_VERSION,
            name: p.name,
            kind,
            outcome,
            at: p.at,
            attempts: p.attempts,
            key: p.key,
            failure,
            tv: p.tv.filter(|v| *v > 1),
        })
    }
}

/// Wall-clock milliseconds since the Unix epoch.
// The one wall-clock read outside the store: callers that stamp informational records (the
// demo effects log, replay-only contexts) and a sticky task's publish time (its age is
// compared with the queue's TTL); a run's own time is the store server's.
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
            v: ENTRY_VERSION,
            name: "extract_totals".into(),
            kind: EntryKind::Step,
            outcome: Outcome::Ok(json!({"total": 42})),
            at: 1_700_000_000_000,
            attempts: 1,
            key: None,
            failure: None,
            tv: None,
        }
    }

    /// A failed effect, as the golden failure bytes hold it.
    fn failed_sample(failure: Option<Failure>) -> Entry {
        Entry {
            kind: EntryKind::Effect,
            outcome: Outcome::Err("card declined".into()),
            attempts: 3,
            key: Some("pay:1".into()),
            failure,
            ..sample()
        }
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Golden bytes of entry version 1: journals written by earlier builds stay readable.
    #[test]
    fn golden_bytes_v1() {
        let v1 = "86a17601a46e616d65ae657874726163745f746f74616c73a46b696e64a473746570\
                  a76f7574636f6d6581a26f6b81a5746f74616c2aa26174cf0000018bcfe56800\
                  a8617474656d70747301";
        assert_eq!(hex(&sample().encode_v1()), v1);
        assert_eq!(Entry::decode(&unhex(v1)).unwrap(), sample());
    }

    /// Golden bytes of entry version 2, as the version 2 encoder wrote them (a success, and a
    /// failed effect with a key): still read, the failure with no `Failure`.
    #[test]
    fn golden_bytes_v2_still_decode() {
        let ok = "9802ae657874726163745f746f74616c730081a5746f74616c2ac0cf0000018bcfe5680001c0";
        assert_eq!(Entry::decode(&unhex(ok)).unwrap(), sample());
        let err = "9802ae657874726163745f746f74616c7301c0ad63617264206465636c696e6564\
                   cf0000018bcfe5680003a57061793a31";
        let decoded = Entry::decode(&unhex(err)).unwrap();
        assert_eq!(decoded, failed_sample(None));
        assert_eq!(decoded.v, ENTRY_VERSION);
    }

    /// Golden bytes of entry version 3 (what this build writes): a success and a failure
    /// without a `Failure` are the version 2 array; a failure with one has two more elements.
    #[test]
    fn golden_bytes_v3() {
        let bytes = sample().encode();
        assert_eq!(
            hex(&bytes),
            "9803ae657874726163745f746f74616c730081a5746f74616c2ac0cf0000018bcfe5680001c0"
        );
        assert_eq!(Entry::decode(&bytes).unwrap(), sample());
        assert!(bytes.len() < sample().encode_v1().len() / 2 + 8);

        let plain = failed_sample(None).encode();
        assert_eq!(
            hex(&plain),
            "9803ae657874726163745f746f74616c7301c0ad63617264206465636c696e6564\
             cf0000018bcfe5680003a57061793a31"
        );
        let classed = failed_sample(Some(Failure::new(Some("card_declined".into()), false)));
        let bytes = classed.encode();
        assert_eq!(
            hex(&bytes),
            "9a03ae657874726163745f746f74616c7301c0ad63617264206465636c696e6564\
             cf0000018bcfe5680003a57061793a31ad636172645f6465636c696e6564c2"
        );
        assert_eq!(Entry::decode(&bytes).unwrap(), classed);
        // The failure costs its class plus two bytes (one more for the array header's count).
        assert_eq!(bytes.len(), plain.len() + "card_declined".len() + 2);
    }

    /// Version 4: an entry whose value's type is at a version above 1 carries it as an
    /// eleventh element; every other entry stays version 3, byte for byte, so a build that
    /// reads 1 to 3 reads it, and refuses (by version, never by guessing) a versioned value.
    #[test]
    fn value_versions_are_written_as_version_4_only_when_above_1() {
        assert_eq!(sample().with_value_version(Some(1)).encode(), sample().encode());
        assert_eq!(sample().with_value_version(None).encode(), sample().encode());
        let v2 = sample().with_value_version(Some(2));
        let bytes = v2.encode();
        assert_eq!(
            hex(&bytes),
            "9b04ae657874726163745f746f74616c730081a5746f74616c2ac0cf0000018bcfe5680001c0c0c002"
        );
        let back = Entry::decode(&bytes).unwrap();
        assert_eq!((back.tv, back.v), (Some(2), ENTRY_VERSION));
        assert_eq!(back, v2);
        // A failure keeps its class and retryability beside the version; a failure has no
        // value, so it is never versioned.
        let f = Failure::new(Some("card_declined".into()), false);
        assert_eq!(failed_sample(Some(f)).with_value_version(Some(3)).tv, None);
        // What an older build (1 to 3) says of it: its version, not a misread.
        let mut older = bytes.clone();
        older[1] = 5;
        assert!(matches!(Entry::decode(&older), Err(EntryDecodeError::Version(5))));
        // A version 4 entry without its value version, or a version 3 one with it, is malformed.
        let mut no_tv = bytes.clone();
        *no_tv.last_mut().unwrap() = 0xc0;
        assert!(matches!(Entry::decode(&no_tv), Err(EntryDecodeError::Malformed(_))));
        let mut v3_with_tv = bytes;
        v3_with_tv[1] = 3;
        assert!(matches!(
            Entry::decode(&v3_with_tv),
            Err(EntryDecodeError::Malformed(_))
        ));
        // A failure never carries one: refused in version 4, dropped from a named map (as
        // a version of 1 is), so every entry decode accepts encodes back to itself.
        let wire = (
            4u8,
            "x",
            0u8,
            None::<Value>,
            Some("boom"),
            0u64,
            1u32,
            None::<String>,
            None::<String>,
            None::<bool>,
            2u32,
        );
        assert!(matches!(
            Entry::decode(&rmp_serde::to_vec(&wire).unwrap()),
            Err(EntryDecodeError::Malformed(_))
        ));
        for (outcome, tv) in [(Outcome::Ok(json!(1)), 1), (Outcome::Err("boom".into()), 2)] {
            let e = Entry {
                outcome,
                tv: Some(tv),
                ..sample()
            };
            let back = Entry::decode(&e.encode_v1()).unwrap();
            assert_eq!(back.tv, None);
            assert_eq!(Entry::decode(&back.encode()).unwrap(), back);
        }
    }

    #[test]
    fn failed_builds_a_failure_entry_and_success_drops_failure_details() {
        let f = Failure::new(Some("timeout".into()), true);
        let e = Entry::failed("fetch", EntryKind::Step, "timed out", f.clone(), 4);
        assert_eq!(e.outcome, Outcome::Err("timed out".into()));
        assert_eq!((e.failure.as_ref(), e.attempts, e.v), (Some(&f), 4, ENTRY_VERSION));
        let back = Entry::decode(&e.encode()).unwrap();
        assert_eq!(back.failure, Some(f.clone()));
        // Failure details on a success are not written in either format.
        let ok = sample().with_failure(f);
        assert_eq!(Entry::decode(&ok.encode()).unwrap(), sample());
        assert_eq!(Entry::decode(&ok.encode_v1()).unwrap(), sample());
    }

    #[test]
    fn round_trips_every_kind_and_outcome_in_v3_and_v1() {
        let outcomes = [
            (Outcome::Ok(json!(null)), None),
            (Outcome::Ok(json!([1, "two", {"three": 3.5}])), None),
            (Outcome::Ok(json!("x".repeat(10_000))), None),
            (Outcome::Err("boom".into()), None),
            (Outcome::Err("boom".into()), Some(Failure::default())),
            (Outcome::Err("boom".into()), Some(Failure::new(None, true))),
            (
                Outcome::Err("boom".into()),
                Some(Failure::new(Some("timeout".into()), true)),
            ),
            (
                Outcome::Err("no".into()),
                Some(Failure::new(Some("auth".into()), false)),
            ),
        ];
        for kind in EntryKind::CODES {
            for (outcome, failure) in &outcomes {
                for key in [None, Some("k:1".to_owned())] {
                    let mut e = sample();
                    e.kind = kind;
                    e.outcome = outcome.clone();
                    e.failure = failure.clone();
                    e.key = key;
                    assert_eq!(Entry::decode(&e.encode()).unwrap(), e);
                    assert_eq!(Entry::decode(&e.encode_v1()).unwrap(), e);
                }
            }
        }
    }

    #[test]
    fn rejects_unknown_versions() {
        let mut e = sample();
        e.v = 5;
        let named = rmp_serde::to_vec_named(&e).unwrap();
        assert!(matches!(Entry::decode(&named), Err(EntryDecodeError::Version(5))));
        let wire = (
            5u8,
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
            Err(EntryDecodeError::Version(5))
        ));
        assert!(Entry::decode(b"\x00\x01").is_err());
    }

    #[test]
    fn rejects_misplaced_failure_details() {
        let failure = |v: u8, ok: Option<Value>, err: Option<&str>| {
            let wire = (v, "x", 0u8, ok, err, 0u64, 1u32, None::<String>, Some("c"), true);
            Entry::decode(&rmp_serde::to_vec(&wire).unwrap())
        };
        assert!(failure(3, None, Some("boom")).is_ok());
        // Version 2 never had them; a success never has them.
        assert!(matches!(
            failure(2, None, Some("boom")),
            Err(EntryDecodeError::Malformed(_))
        ));
        assert!(matches!(
            failure(3, Some(json!(1)), None),
            Err(EntryDecodeError::Malformed(_))
        ));
        // Nor does an array hold more than the failure's two elements.
        let long = (
            3u8,
            "x",
            0u8,
            None::<Value>,
            Some("e"),
            0u64,
            1u32,
            None::<String>,
            None::<String>,
            false,
            1u8,
        );
        assert!(Entry::decode(&rmp_serde::to_vec(&long).unwrap()).is_err());
        // A named (version 1) entry with failure details on a success.
        let mut named = sample();
        named.v = 1;
        named.failure = Some(Failure::default());
        let bytes = rmp_serde::to_vec_named(&named).unwrap();
        assert!(matches!(Entry::decode(&bytes), Err(EntryDecodeError::Malformed(_))));
    }
}
