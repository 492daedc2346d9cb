//! The payload codec: every user payload is sealed before it reaches Redis (run input, journal
//! entries, output, the workflow's error, interrupt payloads, signal and resume values, effect
//! results), so a copy of Redis, its AOF or a `MONITOR` shows ciphertext only (README
//! "Security"). Temporal's Payload Codec is the model; the difference is that the codec sits in
//! the store, below every caller, so no code path can forget it.
//!
//! A sealed value is ASCII text, `$sp1:<key id>:<base64url(nonce ‖ ciphertext ‖ tag)>`,
//! XChaCha20-Poly1305 with a random 192-bit nonce. The associated data binds the value to where
//! it lives — the run's thread id and the field (`input`, `j:3`, `output`…), or the effect key
//! for an effect record — so a sealed value copied to another run or another field does not
//! open. Several keys may be configured at once: the first seals, all open (rotation without
//! downtime). A value without the `$sp1:` prefix is plaintext and is read as it is, so turning
//! the codec on needs no migration of runs already stored.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

/// The prefix of every sealed value.
pub const SEALED_PREFIX: &[u8] = b"$sp1:";
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
/// Longest key id.
pub const MAX_KEY_ID: usize = 32;

/// Why a payload could not be sealed, opened or configured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The key list does not parse.
    #[error("invalid payload key list: {0}")]
    Config(String),
    /// The value starts like a sealed value but is not one.
    #[error("malformed sealed value: {0}")]
    Malformed(&'static str),
    /// Sealed under a key this process does not have.
    #[error("sealed with payload key {0:?}, which is not configured here (SAVEPOINT_PAYLOAD_KEYS)")]
    UnknownKey(String),
    /// The ciphertext, its tag or its binding (thread, field) does not check out: tampered with,
    /// moved from another run or field, or a wrong key under the same id.
    #[error(
        "sealed value does not open with key {0:?}: tampered with, moved from another run or field, or a wrong key"
    )]
    Forged(String),
}

/// A sealed value's parts, borrowed from the stored bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed<'a> {
    /// The id of the key that sealed it.
    pub key_id: &'a str,
    /// Nonce, ciphertext and tag (decoded from base64).
    pub body: Vec<u8>,
}

/// True when `stored` is a sealed value (it may still be malformed).
pub fn is_sealed(stored: &[u8]) -> bool {
    stored.starts_with(SEALED_PREFIX)
}

/// Parses a sealed value. `Ok(None)`: not sealed (plaintext).
pub fn parse_sealed(stored: &[u8]) -> Result<Option<Sealed<'_>>, CodecError> {
    let Some(rest) = stored.strip_prefix(SEALED_PREFIX) else {
        return Ok(None);
    };
    let rest = std::str::from_utf8(rest).map_err(|_| CodecError::Malformed("not ASCII"))?;
    let (key_id, b64) = rest.split_once(':').ok_or(CodecError::Malformed("no key id"))?;
    if !valid_key_id(key_id) {
        return Err(CodecError::Malformed("bad key id"));
    }
    let body = URL_SAFE_NO_PAD
        .decode(b64)
        .map_err(|_| CodecError::Malformed("bad base64"))?;
    if body.len() < NONCE_LEN + TAG_LEN {
        return Err(CodecError::Malformed("too short"));
    }
    Ok(Some(Sealed { key_id, body }))
}

fn valid_key_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_KEY_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

/// Where a sealed value lives: its associated data.
#[derive(Debug, Clone, Copy)]
pub enum Binding<'a> {
    /// A field of a run (`input`, `output`, `error`, `wait_payload`, `j:<i>`, `signal`).
    Run {
        /// The run's thread id.
        thread: &'a str,
        /// The field.
        field: &'a str,
    },
    /// The result kept in an effect's dedup record (shared by every run that uses the key).
    Effect {
        /// The effect's idempotency key.
        key: &'a str,
    },
}

impl Binding<'_> {
    fn aad(&self) -> Vec<u8> {
        match self {
            Binding::Run { thread, field } => format!("savepoint/run/{thread}/{field}").into_bytes(),
            Binding::Effect { key } => format!("savepoint/effect/{key}").into_bytes(),
        }
    }
}

struct Key {
    id: String,
    cipher: XChaCha20Poly1305,
}

/// The configured payload keys: the first seals, every one opens. Cheap to clone.
#[derive(Clone)]
pub struct PayloadCodec {
    keys: Arc<HashMap<String, Key>>,
    sealing: String,
}

impl std::fmt::Debug for PayloadCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key material.
        let mut ids: Vec<&str> = self.keys.keys().map(String::as_str).collect();
        ids.sort_unstable();
        f.debug_struct("PayloadCodec")
            .field("sealing", &self.sealing)
            .field("keys", &ids)
            .finish()
    }
}

impl PayloadCodec {
    /// Parses `id:base64key[,id:base64key…]` (also newlines or semicolons between entries; the
    /// first entry seals). Each key is 32 bytes in standard or URL-safe base64; ids are 1-32
    /// characters of `A-Z a-z 0-9 _ - .`. Make a key with `savepoint key new`.
    pub fn parse(spec: &str) -> Result<Self, CodecError> {
        let mut keys = HashMap::new();
        let mut sealing = None;
        for item in spec
            .lines()
            .map(|line| line.split('#').next().unwrap_or_default())
            .flat_map(|line| line.split([',', ';']))
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            let (id, b64) = item
                .split_once(':')
                .ok_or_else(|| CodecError::Config("each entry is id:base64key".into()))?;
            let (id, b64) = (id.trim(), b64.trim());
            if !valid_key_id(id) {
                return Err(CodecError::Config(format!(
                    "key id {id:?} must be 1-{MAX_KEY_ID} characters of A-Z a-z 0-9 _ - ."
                )));
            }
            let raw = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .or_else(|_| URL_SAFE_NO_PAD.decode(b64.trim_end_matches('=')))
                .map_err(|_| CodecError::Config(format!("key {id:?} is not base64")))?;
            if raw.len() != 32 {
                return Err(CodecError::Config(format!(
                    "key {id:?} has {} bytes; a payload key has 32",
                    raw.len()
                )));
            }
            let cipher = XChaCha20Poly1305::new_from_slice(&raw)
                .map_err(|_| CodecError::Config(format!("key {id:?} is not a valid key")))?;
            if keys
                .insert(
                    id.to_owned(),
                    Key {
                        id: id.to_owned(),
                        cipher,
                    },
                )
                .is_some()
            {
                return Err(CodecError::Config(format!("key id {id:?} appears twice")));
            }
            sealing.get_or_insert_with(|| id.to_owned());
        }
        let sealing = sealing.ok_or_else(|| CodecError::Config("no keys".into()))?;
        Ok(Self {
            keys: Arc::new(keys),
            sealing,
        })
    }

    /// A new random key in the form `parse` takes (`id:base64`).
    pub fn new_key_entry(id: &str) -> Result<String, CodecError> {
        if !valid_key_id(id) {
            return Err(CodecError::Config(format!("key id {id:?} is not valid")));
        }
        let key: [u8; 32] = savepoint_core::entropy::secure_bytes();
        Ok(format!(
            "{id}:{}",
            base64::engine::general_purpose::STANDARD.encode(key)
        ))
    }

    /// The id of the key new values are sealed with.
    pub fn sealing_key_id(&self) -> &str {
        &self.sealing
    }

    /// Seals `plain` for `binding` with the sealing key.
    pub fn seal(&self, binding: Binding<'_>, plain: &[u8]) -> String {
        let Some(key) = self.keys.get(&self.sealing) else {
            unreachable!("the sealing key is one of the keys")
        };
        let nonce_bytes: [u8; NONCE_LEN] = savepoint_core::entropy::secure_bytes();
        let nonce = XNonce::from_slice(&nonce_bytes);
        let aad = binding.aad();
        // Encryption with a valid key and nonce cannot fail for inputs below 256 GiB.
        let ct = key
            .cipher
            .encrypt(nonce, Payload { msg: plain, aad: &aad })
            .unwrap_or_default();
        let mut body = Vec::with_capacity(NONCE_LEN + ct.len());
        body.extend_from_slice(&nonce_bytes);
        body.extend_from_slice(&ct);
        let mut out = String::with_capacity(SEALED_PREFIX.len() + key.id.len() + 1 + body.len() * 4 / 3 + 4);
        out.push_str("$sp1:");
        out.push_str(&key.id);
        out.push(':');
        URL_SAFE_NO_PAD.encode_string(&body, &mut out);
        out
    }

    /// Opens `stored` for `binding`; plaintext (no `$sp1:` prefix) is returned as it is.
    pub fn open<'a>(&self, binding: Binding<'_>, stored: &'a [u8]) -> Result<Cow<'a, [u8]>, CodecError> {
        let Some(sealed) = parse_sealed(stored)? else {
            return Ok(Cow::Borrowed(stored));
        };
        let key = self
            .keys
            .get(sealed.key_id)
            .ok_or_else(|| CodecError::UnknownKey(sealed.key_id.to_owned()))?;
        let (nonce, ct) = sealed.body.split_at(NONCE_LEN);
        let aad = binding.aad();
        key.cipher
            .decrypt(XNonce::from_slice(nonce), Payload { msg: ct, aad: &aad })
            .map(Cow::Owned)
            .map_err(|_| CodecError::Forged(sealed.key_id.to_owned()))
    }
}

/// Opens `stored` with `codec` if there is one; a sealed value without a codec is an error
/// (the process was started without the keys the data needs).
pub fn open_with<'a>(
    codec: Option<&PayloadCodec>,
    binding: Binding<'_>,
    stored: &'a [u8],
) -> Result<Cow<'a, [u8]>, CodecError> {
    match codec {
        Some(c) => c.open(binding, stored),
        None => match parse_sealed(stored)? {
            None => Ok(Cow::Borrowed(stored)),
            Some(s) => Err(CodecError::UnknownKey(s.key_id.to_owned())),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const K2: &str = "k2:HxweHRwbGhkYFxYVFBMSERAPDg0MCwoJCAcGBQQDAgE=";

    fn run(field: &str) -> Binding<'_> {
        Binding::Run { thread: "t-1", field }
    }

    #[test]
    fn seals_and_opens_bound_to_thread_and_field() {
        let c = PayloadCodec::parse(K1).unwrap();
        let s = c.seal(run("input"), br#"{"amount":42}"#);
        assert!(s.starts_with("$sp1:k1:"), "{s}");
        assert!(!s.contains("amount"));
        assert_eq!(&*c.open(run("input"), s.as_bytes()).unwrap(), br#"{"amount":42}"#);
        // Another field, another run, or an effect binding: refused.
        assert_eq!(
            c.open(run("output"), s.as_bytes()),
            Err(CodecError::Forged("k1".into()))
        );
        let other = Binding::Run {
            thread: "t-2",
            field: "input",
        };
        assert!(matches!(c.open(other, s.as_bytes()), Err(CodecError::Forged(_))));
        // Two seals of one value differ (random nonces).
        assert_ne!(s, c.seal(run("input"), br#"{"amount":42}"#));
        // Plaintext passes through.
        assert_eq!(&*c.open(run("input"), b"{}").unwrap(), b"{}");
    }

    #[test]
    fn rotation_new_key_seals_old_key_still_opens() {
        let old = PayloadCodec::parse(K1).unwrap();
        let sealed_old = old.seal(run("j:0"), b"x");
        let rotated = PayloadCodec::parse(&format!("{K2},{K1}")).unwrap();
        assert_eq!(rotated.sealing_key_id(), "k2");
        assert_eq!(&*rotated.open(run("j:0"), sealed_old.as_bytes()).unwrap(), b"x");
        let sealed_new = rotated.seal(run("j:0"), b"y");
        assert!(sealed_new.starts_with("$sp1:k2:"));
        assert_eq!(
            old.open(run("j:0"), sealed_new.as_bytes()),
            Err(CodecError::UnknownKey("k2".into()))
        );
        assert!(matches!(
            open_with(None, run("j:0"), sealed_new.as_bytes()),
            Err(CodecError::UnknownKey(_))
        ));
    }

    #[test]
    fn tampering_and_malformed_values_are_typed_errors() {
        let c = PayloadCodec::parse(K1).unwrap();
        let mut s = c.seal(run("input"), b"hello").into_bytes();
        let last = s.len() - 3;
        s[last] = if s[last] == b'A' { b'B' } else { b'A' };
        assert!(matches!(c.open(run("input"), &s), Err(CodecError::Forged(_))));
        for bad in [
            &b"$sp1:"[..],
            b"$sp1:k1",
            b"$sp1::AAAA",
            b"$sp1:k1:!!!",
            b"$sp1:k1:AAAA",
            b"$sp1:k\xff:AA",
        ] {
            assert!(
                matches!(c.open(run("input"), bad), Err(CodecError::Malformed(_))),
                "{bad:?}"
            );
        }
    }

    /// The wire format of version 1 (`$sp1:`), pinned: a value sealed by an earlier build
    /// must open in every later one (also the fuzz target's seed).
    #[test]
    fn golden_sealed_value_opens() {
        let c = PayloadCodec::parse("fuzz:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=").unwrap();
        let golden = "$sp1:fuzz:z4fQwZ-3bnJhryz7IR7wVcXYuYJaHVWE8XE_BAqoi8b4hCg1aJ3xAQf-B9OxikzDMKrKRVU";
        let at = Binding::Run {
            thread: "fuzz-run",
            field: "j:0",
        };
        assert_eq!(&*c.open(at, golden.as_bytes()).unwrap(), br#"{"amount":42}"#);
        let parts = parse_sealed(golden.as_bytes()).unwrap().unwrap();
        assert_eq!((parts.key_id, parts.body.len()), ("fuzz", NONCE_LEN + 13 + TAG_LEN));
    }

    #[test]
    fn key_lists_are_checked() {
        for bad in [
            "",
            "k1",
            "k1:short",
            "bad id:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
            &format!("{K1},{K1}"),
        ] {
            assert!(matches!(PayloadCodec::parse(bad), Err(CodecError::Config(_))), "{bad}");
        }
        let fresh = PayloadCodec::new_key_entry("2026-12").unwrap();
        let c = PayloadCodec::parse(&format!(
            "# rotated 2026-12, see the runbook; keep k1\n{fresh}\n{K1} # old\n"
        ))
        .unwrap();
        assert_eq!(c.sealing_key_id(), "2026-12");
        assert!(!format!("{c:?}").contains(&fresh[8..]), "Debug shows no key material");
    }
}
