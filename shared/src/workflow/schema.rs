//! JSON Schemas of what a workflow takes from outside: its input, each interrupt's answer,
//! each signal's value and each effect's result (what an operator's `resolve` records).
//!
//! A workflow declares them in [`super::Workflow::schemas`] from its Rust types (derive
//! `schemars::JsonSchema`); the worker publishes them with its registration, and the API
//! validates every start, resume, signal and resolve against them, answering 422 with the
//! schema error and changing nothing. Where no schema is declared, a value that does not
//! decode in the worker blocks the run (still answerable) instead of failing it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// The schemas of one workflow. Built with [`Schemas::new`] and its chained setters:
///
/// ```ignore
/// fn schemas(&self) -> Schemas {
///     Schemas::new()
///         .input::<Order>()
///         .interrupt::<ShippingApproval>("shipping_approval")
///         .effect::<Charge>("card.charge")
/// }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Schemas {
    /// The run's input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// Interrupt name → the answer's schema.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub interrupts: BTreeMap<String, Value>,
    /// Signal name → the value's schema.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub signals: BTreeMap<String, Value>,
    /// Effect name → the result's schema.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub effects: BTreeMap<String, Value>,
}

fn schema_of<T: JsonSchema>() -> Value {
    schemars::schema_for!(T).to_value()
}

impl Schemas {
    /// No schemas.
    pub fn new() -> Self {
        Self::default()
    }

    /// The input's type.
    pub fn input<T: JsonSchema>(mut self) -> Self {
        self.input = Some(schema_of::<T>());
        self
    }

    /// The answer type of the interrupt `name` (`ctx.interrupt::<T>(name, …)`).
    pub fn interrupt<T: JsonSchema>(mut self, name: &str) -> Self {
        self.interrupts.insert(name.to_owned(), schema_of::<T>());
        self
    }

    /// The value type of the signal `name` (`ctx.wait_signal::<T>(name)`).
    pub fn signal<T: JsonSchema>(mut self, name: &str) -> Self {
        self.signals.insert(name.to_owned(), schema_of::<T>());
        self
    }

    /// The result type of the effect `name` (`ctx.effect::<T>(name, …)`).
    pub fn effect<T: JsonSchema>(mut self, name: &str) -> Self {
        self.effects.insert(name.to_owned(), schema_of::<T>());
        self
    }

    /// True when nothing is declared.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

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

    #[test]
    fn schemas_round_trip_as_json() {
        let s = Schemas::new().input::<Approval>().signal::<u32>("n");
        let back: Schemas = serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        assert!(Schemas::new().is_empty());
    }
}
