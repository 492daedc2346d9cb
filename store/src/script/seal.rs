//! Where the payload codec meets the store: every user payload is sealed here on its way to a
//! script and opened here on its way back, so no caller can forget it (README "Security").
//! Without a codec, values pass through unchanged; a sealed value met without the key that
//! sealed it is a typed error, never shown as text.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::ScriptStore;
use crate::codec::{self, Binding};
use crate::StoreError;
use savepoint_core::ids::{EffectKey, ThreadId};
use savepoint_core::journal::Entry;

/// Event types whose detail carries user text (a step's error, the workflow's error, a block
/// reason quoting a value, a flow key taken from an input, a reconcile function's error
/// quoting a provider's answer): their details are sealed like payloads.
pub(crate) const SEALED_EVENTS: [&str; 5] = ["retried", "failed", "blocked", "flow_waiting", "effect_reconciled"];

/// The binding of a run hash or signals hash field: signals and answers are bound to the run,
/// not to the field the script picks for them.
fn field_binding(field: &str) -> &str {
    if field.starts_with("s:") || field.starts_with("i:") {
        "signal"
    } else {
        field
    }
}

fn sealed_error(what: &str, e: codec::CodecError) -> StoreError {
    StoreError::Sealed(format!("{what}: {e}"))
}

impl ScriptStore {
    /// Seals a run's field value (identity without a codec).
    /// (Borrowed as it is without a codec: no copy on the write path.)
    pub(crate) fn seal_run<'a>(&self, thread: &ThreadId, field: &str, plain: &'a str) -> Cow<'a, str> {
        match &self.cfg.codec {
            Some(c) if !plain.is_empty() => Cow::Owned(c.seal(
                Binding::Run {
                    thread: thread.as_str(),
                    field: field_binding(field),
                },
                plain.as_bytes(),
            )),
            _ => Cow::Borrowed(plain),
        }
    }

    /// A journal entry's stored bytes: MessagePack, sealed as a whole when a codec is set.
    pub(crate) fn seal_entry(&self, thread: &ThreadId, index: u32, entry: &Entry) -> Vec<u8> {
        let bytes = entry.encode();
        match &self.cfg.codec {
            Some(c) => c
                .seal(
                    Binding::Run {
                        thread: thread.as_str(),
                        field: &format!("j:{index}"),
                    },
                    &bytes,
                )
                .into_bytes(),
            None => bytes,
        }
    }

    /// Opens every sealed value of a run hash (or signals hash) read as a field map.
    pub(crate) fn open_fields(&self, thread: &ThreadId, map: &mut BTreeMap<String, Vec<u8>>) -> Result<(), StoreError> {
        for (field, value) in map.iter_mut() {
            if codec::is_sealed(value) {
                *value = self.open_run(thread, field, value)?;
            }
        }
        Ok(())
    }

    /// Opens one field value (plaintext passes through).
    pub(crate) fn open_run(&self, thread: &ThreadId, field: &str, stored: &[u8]) -> Result<Vec<u8>, StoreError> {
        let binding = Binding::Run {
            thread: thread.as_str(),
            field: field_binding(field),
        };
        codec::open_with(self.cfg.codec.as_ref(), binding, stored)
            .map(|v| v.into_owned())
            .map_err(|e| sealed_error(&format!("run {thread} field {field}"), e))
    }

    /// Seals an effect's recorded result (bound to its key: every run using the key reads it).
    pub(crate) fn seal_effect(&self, key: &EffectKey, plain: String) -> String {
        match &self.cfg.codec {
            Some(c) => c.seal(Binding::Effect { key: key.as_str() }, plain.as_bytes()),
            None => plain,
        }
    }

    /// Opens an effect's recorded result and parses it as JSON (`null` when it is not JSON,
    /// as before sealing existed).
    pub(crate) fn open_effect(&self, key: &EffectKey, stored: &str) -> Result<serde_json::Value, StoreError> {
        let plain = codec::open_with(
            self.cfg.codec.as_ref(),
            Binding::Effect { key: key.as_str() },
            stored.as_bytes(),
        )
        .map_err(|e| sealed_error(&format!("effect {key} result"), e))?;
        Ok(serde_json::from_slice(&plain).unwrap_or(serde_json::Value::Null))
    }

    /// An event's detail as stored: sealed for the types that carry user text.
    pub(crate) fn seal_event<'a>(&self, thread: &ThreadId, typ: &'a str, detail: &'a str) -> (&'a str, Cow<'a, str>) {
        if SEALED_EVENTS.contains(&typ) {
            (typ, self.seal_run(thread, "event", detail))
        } else {
            (typ, Cow::Borrowed(detail))
        }
    }

    /// An event's detail as read: opened when sealed; one that does not open is shown as a
    /// placeholder naming why (the event log is for reading, not for failing a request).
    pub(crate) fn open_event(&self, thread: &ThreadId, detail: String) -> String {
        if !codec::is_sealed(detail.as_bytes()) {
            return detail;
        }
        match self.open_run(thread, "event", detail.as_bytes()) {
            Ok(plain) => String::from_utf8_lossy(&plain).into_owned(),
            Err(e) => format!("<sealed: {e}>"),
        }
    }
}
