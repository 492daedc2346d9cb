//! Nested objects of request bodies taken only as JSON objects.

use serde::de::{DeserializeOwned, Error};
use serde::Deserialize;

/// An optional nested struct that must be a JSON object (or `null`). Serde's derive also
/// builds a struct from an array of its fields in order, so `"filter": []` would read as an
/// empty filter (every run) where the OpenAPI document says an object: refused instead.
pub fn object_opt<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: DeserializeOwned,
{
    match Option::<serde_json::Value>::deserialize(d)? {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v @ serde_json::Value::Object(_)) => serde_json::from_value(v).map(Some).map_err(D::Error::custom),
        Some(other) => Err(D::Error::custom(format!(
            "expected a JSON object, got {}",
            match other {
                serde_json::Value::Array(_) => "an array",
                serde_json::Value::String(_) => "a string",
                serde_json::Value::Number(_) => "a number",
                _ => "a boolean",
            }
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Inner {
        #[serde(default)]
        a: Option<u32>,
    }

    #[derive(Debug, Deserialize)]
    struct Outer {
        #[serde(default, deserialize_with = "object_opt")]
        inner: Option<Inner>,
    }

    #[test]
    fn only_an_object_or_null_is_a_nested_struct() {
        let o: Outer = serde_json::from_str(r#"{"inner": {"a": 1}}"#).unwrap();
        assert_eq!(o.inner, Some(Inner { a: Some(1) }));
        assert!(serde_json::from_str::<Outer>(r#"{"inner": null}"#)
            .unwrap()
            .inner
            .is_none());
        assert!(serde_json::from_str::<Outer>("{}").unwrap().inner.is_none());
        let e = serde_json::from_str::<Outer>(r#"{"inner": []}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected a JSON object, got an array"), "{e}");
        assert!(serde_json::from_str::<Outer>(r#"{"inner": [1]}"#).is_err());
    }
}
