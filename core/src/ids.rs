//! Identifiers of the domain: thread ids, namespaces, worker incarnations, partitions.
//!
//! Ids are newtypes validated at the edge (API, CLI, config) so the rest of the code can put
//! them into Redis keys and AMQP names without escaping.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Longest thread id accepted (bytes).
pub const MAX_THREAD_ID_LEN: usize = 128;
/// Longest effect idempotency key accepted (bytes).
pub const MAX_EFFECT_KEY_LEN: usize = 256;

/// Why an id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// Thread ids are 1–128 characters of `A-Z a-z 0-9 _ - . :`.
    #[error("invalid thread id {0:?}: use 1-128 characters from A-Z a-z 0-9 _ - . :")]
    Thread(String),
    /// Namespaces are 1–32 characters of `a-z 0-9 _ -`.
    #[error("invalid namespace {0:?}: use 1-32 characters from a-z 0-9 _ -")]
    Namespace(String),
    /// Effect keys are 1–256 printable characters without whitespace.
    #[error("invalid effect key {0:?}: use 1-256 printable characters without whitespace")]
    EffectKey(String),
}

/// The id of one run: every checkpoint, event, log line and resume uses it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ThreadId(String);

impl ThreadId {
    /// Validates a thread id (see [`IdError::Thread`]).
    pub fn new(s: impl Into<String>) -> Result<Self, IdError> {
        let s = s.into();
        let ok = !s.is_empty()
            && s.len() <= MAX_THREAD_ID_LEN
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.:".contains(&b));
        if ok {
            Ok(Self(s))
        } else {
            Err(IdError::Thread(s))
        }
    }

    /// A fresh random thread id with a readable prefix, e.g. `invoice-3f9c…`.
    pub fn generate(prefix: &str) -> Self {
        let mut p: String = prefix
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
            .take(40)
            .collect();
        if p.is_empty() {
            p.push_str("run");
        }
        Self(format!("{p}-{}", crate::entropy::uuid().simple()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for ThreadId {
    type Error = IdError;
    fn try_from(s: String) -> Result<Self, IdError> {
        Self::new(s)
    }
}

impl From<ThreadId> for String {
    fn from(t: ThreadId) -> String {
        t.0
    }
}

impl fmt::Display for ThreadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Prefix of every Redis key and AMQP name of one deployment (tests use a fresh one each).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Namespace(String);

impl Namespace {
    /// Validates a namespace (see [`IdError::Namespace`]).
    pub fn new(s: impl Into<String>) -> Result<Self, IdError> {
        let s = s.into();
        let ok = !s.is_empty()
            && s.len() <= 32
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if ok {
            Ok(Self(s))
        } else {
            Err(IdError::Namespace(s))
        }
    }

    /// The namespace as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The default namespace, `sp`.
    pub fn default_ns() -> Self {
        Self("sp".to_owned())
    }
}

impl TryFrom<String> for Namespace {
    type Error = IdError;
    fn try_from(s: String) -> Result<Self, IdError> {
        Self::new(s)
    }
}

impl From<Namespace> for String {
    fn from(n: Namespace) -> String {
        n.0
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An idempotency key naming one intended side effect, e.g. `charge:invoice-42`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EffectKey(String);

impl EffectKey {
    /// Validates an effect key (see [`IdError::EffectKey`]).
    pub fn new(s: impl Into<String>) -> Result<Self, IdError> {
        let s = s.into();
        let ok =
            !s.is_empty() && s.len() <= MAX_EFFECT_KEY_LEN && s.chars().all(|c| !c.is_whitespace() && !c.is_control());
        if ok {
            Ok(Self(s))
        } else {
            Err(IdError::EffectKey(s))
        }
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EffectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One process start of a worker: leases are owned by incarnations, so a restarted worker
/// never mistakes its predecessor's lease for its own.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Incarnation(String);

impl Incarnation {
    /// A new unique incarnation id, `<name>-<random>`.
    pub fn new(name: &str) -> Self {
        let short = &crate::entropy::uuid().simple().to_string()[..12];
        Self(format!("{name}-{short}"))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Incarnation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// FNV-1a 64: a stable hash (unlike `DefaultHasher`) so partitions never move between builds.
pub fn stable_hash(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// This machine's host name (`HOSTNAME`, else `/etc/hostname`, else `localhost`), read once:
/// workers register it, and the doctor compares it to tell whether a worker's loopback health
/// address is reachable from here.
pub fn host_name() -> &'static str {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        std::env::var("HOSTNAME")
            .ok()
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_ids_are_validated() {
        assert!(ThreadId::new("invoice-42").is_ok());
        assert!(ThreadId::new("a:b.c_d-1").is_ok());
        assert!(ThreadId::new("").is_err());
        assert!(ThreadId::new("has space").is_err());
        assert!(ThreadId::new("brace{x}").is_err());
        assert!(ThreadId::new("x".repeat(129)).is_err());
        assert!(ThreadId::new("x".repeat(128)).is_ok());
        assert!(ThreadId::new(ThreadId::generate("invoice").to_string()).is_ok());
    }

    #[test]
    fn stable_hash_is_fnv1a() {
        assert_eq!(stable_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(stable_hash("a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn effect_keys_and_namespaces() {
        assert!(EffectKey::new("ledger:INV-1").is_ok());
        assert!(EffectKey::new("a b").is_err());
        assert!(Namespace::new("sp").is_ok());
        assert!(Namespace::new("SP").is_err());
    }
}
