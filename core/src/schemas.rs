//! JSON Schemas of what a workflow takes from outside: its input, each interrupt's answer,
//! each signal's value and each effect's result (what an operator's `resolve` records).
//!
//! A workflow declares them in `Workflow::schemas` from its Rust types (derive
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(JsonSchema, Deserialize)]
    #[allow(dead_code)]
    struct Approval {
        approved: bool,
        carrier: String,
    }

    #[test]
    fn schemas_round_trip_as_json() {
        let s = Schemas::new().input::<Approval>().signal::<u32>("n");
        let back: Schemas = serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        assert!(Schemas::new().is_empty());
    }
}
