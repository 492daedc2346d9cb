//! Whole numbers as JSON Schema counts them: an integer, or a float with no fraction.

use serde::Deserialize;

/// A JSON integer as a `u32`, also written as a float with no fraction (`2.0`: JSON Schema
/// counts it an integer, and so do clients that only have doubles).
pub fn whole_u32<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    whole(d)
}

/// [`whole_u32`] for a `u64`.
pub fn whole_u64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    whole(d)
}

/// [`whole_u64`] for an optional field.
pub fn whole_u64_opt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Option::<serde_json::Number>::deserialize(d)?
        .map(|n| whole_number(&n).ok_or_else(|| serde::de::Error::custom(format!("expected a whole number, got {n}"))))
        .transpose()
}

/// [`whole_u32`] for an optional field.
pub fn whole_u32_opt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    Option::<serde_json::Number>::deserialize(d)?
        .map(|n| whole_number(&n).ok_or_else(|| serde::de::Error::custom(format!("expected a whole number, got {n}"))))
        .transpose()
}

fn whole_number<T: TryFrom<u64>>(n: &serde_json::Number) -> Option<T> {
    n.as_u64()
        .or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 1.8e19)
                .map(|f| f as u64)
        })
        .and_then(|v| T::try_from(v).ok())
}

fn whole<'de, D: serde::Deserializer<'de>, T: TryFrom<u64>>(d: D) -> Result<T, D::Error> {
    let n = serde_json::Number::deserialize(d)?;
    whole_number(&n).ok_or_else(|| serde::de::Error::custom(format!("expected a whole number in range, got {n}")))
}
