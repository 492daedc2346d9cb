//! Reading script replies (`redis::Value`) into Rust data.

use redis::Value;
use std::collections::BTreeMap;

use crate::StoreError;

/// A script reply as a list of parts.
pub(crate) struct Reply(pub Vec<Value>);

impl Reply {
    pub(crate) fn new(v: Value) -> Result<Self, StoreError> {
        match v {
            Value::Array(items) => Ok(Self(items)),
            other => Err(StoreError::Reply(format!("expected an array, got {other:?}"))),
        }
    }

    /// The first element: the reply's tag (`ok`, `fenced`, …).
    pub(crate) fn tag(&self) -> String {
        self.text(0)
    }

    /// Element `i` as text ('' when absent).
    pub(crate) fn text(&self, i: usize) -> String {
        self.0.get(i).map(as_text).unwrap_or_default()
    }

    /// Element `i` as a number (0 when absent or not numeric).
    pub(crate) fn num(&self, i: usize) -> u64 {
        match self.0.get(i) {
            Some(Value::Int(n)) => (*n).max(0) as u64,
            Some(v) => as_text(v).parse().unwrap_or(0),
            None => 0,
        }
    }

    /// Element `i`, a flat field/value array, as a map.
    pub(crate) fn map(&self, i: usize) -> BTreeMap<String, Vec<u8>> {
        match self.0.get(i) {
            Some(v) => flat_map(v),
            None => BTreeMap::new(),
        }
    }
}

/// Any scalar reply as text.
pub(crate) fn as_text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(n) => n.to_string(),
        Value::Okay => "OK".into(),
        Value::Double(d) => d.to_string(),
        Value::Boolean(b) => b.to_string(),
        _ => String::new(),
    }
}

fn as_bytes(v: &Value) -> Vec<u8> {
    match v {
        Value::BulkString(b) => b.clone(),
        other => as_text(other).into_bytes(),
    }
}

/// A flat `[field, value, …]` array (or a RESP3 map) as a map.
pub(crate) fn flat_map(v: &Value) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    match v {
        Value::Array(items) => {
            for pair in items.chunks(2) {
                if let [k, v] = pair {
                    out.insert(as_text(k), as_bytes(v));
                }
            }
        }
        Value::Map(pairs) => {
            for (k, v) in pairs {
                out.insert(as_text(k), as_bytes(v));
            }
        }
        _ => {}
    }
    out
}
