//! [`Secret<T>`]: a value the workflow marks secret. It is journaled (sealed, when payload keys
//! are configured) so replay returns it, but it is never printed by `Debug`/`Display`, and the
//! API, the CLI and the console show `{"$secret": "redacted"}` in its place, even to callers
//! who may read payloads.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// The JSON key that marks a secret value: `{"$secret": <value>}`.
pub const SECRET_MARKER: &str = "$secret";

/// A value that must never be shown: wrap a step's or effect's result, an input field or a
/// resume value in it (`ctx.step("fetch_token", || async { Ok(Secret::new(tok)) })`).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret<T>(T);

impl<T> Secret<T> {
    /// Wraps a value.
    pub fn new(value: T) -> Self {
        Self(value)
    }

    /// The value, for the code that needs it (never for logging).
    pub fn expose(&self) -> &T {
        &self.0
    }

    /// Unwraps the value.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> std::fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl<T> std::fmt::Display for Secret<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl<T: Serialize> Serialize for Secret<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(1))?;
        m.serialize_entry(SECRET_MARKER, &self.0)?;
        m.end()
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Secret<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire<T> {
            #[serde(rename = "$secret")]
            secret: T,
        }
        Wire::deserialize(d).map(|w| Secret(w.secret))
    }
}

/// `v` as it may be shown: a copy with every [`Secret`] redacted.
pub fn shown(v: &Value) -> Value {
    let mut v = v.clone();
    redact_secrets(&mut v);
    v
}

/// Replaces every `{"$secret": …}` inside `v` with `{"$secret": "redacted"}`; true if any was.
pub fn redact_secrets(v: &mut Value) -> bool {
    match v {
        Value::Object(m) if m.len() == 1 && m.contains_key(SECRET_MARKER) => {
            m.insert(SECRET_MARKER.to_owned(), Value::from("redacted"));
            true
        }
        Value::Object(m) => m.values_mut().fold(false, |acc, x| redact_secrets(x) | acc),
        Value::Array(a) => a.iter_mut().fold(false, |acc, x| redact_secrets(x) | acc),
        _ => false,
    }
}

/// A string that `Debug` never prints.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Redacted(pub String);

impl std::fmt::Debug for Redacted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            f.write_str("\"\"")
        } else {
            f.write_str("\"<redacted>\"")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_round_trip_and_are_never_shown() {
        let s = Secret::new("tok-123".to_owned());
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v, json!({"$secret": "tok-123"}));
        let back: Secret<String> = serde_json::from_value(v).unwrap();
        assert_eq!(back.expose(), "tok-123");
        assert_eq!(format!("{s:?} {s}"), "Secret(<redacted>) <redacted>");
        let mut doc = json!({"a": 1, "nested": [{"$secret": {"card": "4242"}}, {"$secret": 1, "other": 2}]});
        assert!(redact_secrets(&mut doc));
        assert_eq!(
            doc,
            json!({"a": 1, "nested": [{"$secret": "redacted"}, {"$secret": 1, "other": 2}]})
        );
        assert!(!redact_secrets(&mut json!({"a": "4242"})));
    }
}
