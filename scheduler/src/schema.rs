//! Checking a value against the JSON Schema a workflow published for it (the API's 422s).
//! The workflow side only declares schemas ([`savepoint::workflow::Schemas`]); validating
//! them needs `jsonschema`, which belongs here and not in the SDK.

use serde_json::Value;

/// Why a value does not match its schema.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SchemaError {
    /// The value breaks the schema: each violation with the JSON pointer where it is.
    #[error("{}", .0.join("; "))]
    Invalid(Vec<String>),
    /// The schema itself does not compile (a worker published a broken one).
    #[error("the published schema is not valid: {0}")]
    BadSchema(String),
}

/// Checks `value` against `schema`.
pub fn validate(schema: &Value, value: &Value) -> Result<(), SchemaError> {
    let v = jsonschema::validator_for(schema).map_err(|e| SchemaError::BadSchema(e.to_string()))?;
    let errors: Vec<String> = v
        .iter_errors(value)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("at {at}: {e}")
            }
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(SchemaError::Invalid(errors))
    }
}

/// True when the schema is that of `()` (`"type": "null"` and nothing else to match): an
/// effect whose result is `()` may be resolved as applied without a result. (Read from the
/// schema, not by probing values: `Option<Struct>` admits `null` too, yet needs a result.)
pub fn is_unit(schema: &Value) -> bool {
    schema.get("type") == Some(&Value::String("null".into()))
        && ["anyOf", "oneOf", "allOf", "$ref", "enum", "const"]
            .iter()
            .all(|k| schema.get(*k).is_none())
}

#[cfg(test)]
mod tests {
    use super::*;
    use savepoint::workflow::Schemas;
    use schemars::JsonSchema;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(JsonSchema, Deserialize)]
    #[allow(dead_code)]
    struct Approval {
        approved: bool,
        carrier: String,
    }

    #[test]
    fn a_wrong_shape_is_named_with_where_it_is() {
        let s = Schemas::new().interrupt::<Approval>("ship");
        let schema = &s.interrupts["ship"];
        assert!(validate(schema, &json!({"approved": true, "carrier": "DHL"})).is_ok());
        let e = validate(schema, &json!("yes")).unwrap_err().to_string();
        assert!(e.contains("\"yes\"") && e.contains("object"), "{e}");
        let e = validate(schema, &json!({"approved": "yes", "carrier": "DHL"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/approved"), "{e}");
        let e = validate(schema, &json!({"approved": true})).unwrap_err().to_string();
        assert!(e.contains("carrier"), "{e}");
    }

    #[test]
    fn unit_results_are_recognised() {
        let s = Schemas::new()
            .effect::<()>("noop")
            .effect::<Approval>("ship")
            .effect::<Option<u32>>("maybe")
            .effect::<Option<Approval>>("maybe_ship");
        assert!(is_unit(&s.effects["noop"]), "{}", s.effects["noop"]);
        assert!(!is_unit(&s.effects["ship"]));
        assert!(!is_unit(&s.effects["maybe"]), "{}", s.effects["maybe"]);
        assert!(!is_unit(&s.effects["maybe_ship"]), "{}", s.effects["maybe_ship"]);
    }
}
