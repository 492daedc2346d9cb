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

/// A value of the schema's shape, for a form to start from (the console inbox's answer): an
/// object with its required properties, each the first of its `enum`/`const`, or its type's
/// plain value (`false`, `0`, `""`, `[]`, `null`), the first branch of an `anyOf`/`oneOf`,
/// `$ref`s into the schema's own `$defs`/`definitions` followed. Checked against the schema:
/// `None` when what it builds does not match (a pattern, a minimum, …) or the schema is
/// absent, so a form never suggests an answer the API would refuse.
pub fn example(schema: &Value) -> Option<Value> {
    let v = shape(schema, schema, 0)?;
    validate(schema, &v).is_ok().then_some(v)
}

/// [`example`]'s value before the check (`depth`: how many `$ref`s and levels deep).
fn shape(root: &Value, s: &Value, depth: u32) -> Option<Value> {
    if depth > 16 {
        return None;
    }
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let name = r.rsplit('/').next()?;
        let def = root.get("$defs").or_else(|| root.get("definitions"))?.get(name)?;
        return shape(root, def, depth + 1);
    }
    if let Some(c) = s.get("const") {
        return Some(c.clone());
    }
    if let Some(first) = s.get("enum").and_then(Value::as_array).and_then(|e| e.first()) {
        return Some(first.clone());
    }
    for k in ["anyOf", "oneOf", "allOf"] {
        if let Some(first) = s.get(k).and_then(Value::as_array).and_then(|b| b.first()) {
            return shape(root, first, depth + 1);
        }
    }
    let ty = match s.get("type") {
        Some(Value::Array(types)) => types.iter().find(|t| *t != "null").or(types.first())?.as_str()?,
        Some(Value::String(t)) => t.as_str(),
        _ => return Some(Value::Object(Default::default())),
    };
    Some(match ty {
        "object" => {
            let props = s.get("properties").and_then(Value::as_object);
            let mut out = serde_json::Map::new();
            for req in s.get("required").and_then(Value::as_array).into_iter().flatten() {
                let Some(name) = req.as_str() else { continue };
                let p = props.and_then(|p| p.get(name)).cloned().unwrap_or(Value::Null);
                out.insert(name.to_owned(), shape(root, &p, depth + 1)?);
            }
            Value::Object(out)
        }
        "boolean" => Value::Bool(false),
        "integer" | "number" => Value::from(0),
        "string" => Value::String(String::new()),
        "array" => Value::Array(Vec::new()),
        _ => Value::Null,
    })
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

    #[derive(JsonSchema, Deserialize)]
    #[allow(dead_code)]
    enum Carrier {
        Dhl,
        Ups,
    }

    #[derive(JsonSchema, Deserialize)]
    #[allow(dead_code)]
    struct Shipping {
        decision: bool,
        carrier: Carrier,
        note: Option<String>,
        boxes: u32,
    }

    #[test]
    fn an_example_has_the_schema_shape_and_matches_it() {
        let schema = serde_json::to_value(schemars::schema_for!(Shipping)).unwrap();
        let v = example(&schema).expect("an example");
        assert_eq!(v, json!({"decision": false, "carrier": "Dhl", "boxes": 0}), "{schema}");
        assert!(validate(&schema, &v).is_ok());
        // A pattern the plain value breaks: no example rather than a wrong one.
        let strict = json!({"type": "object", "required": ["code"], "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}}});
        assert_eq!(example(&strict), None);
        assert_eq!(example(&json!({"type": "null"})), Some(Value::Null));
    }
}
