//! How the console writes values: store times as UTC clock times and as `… ago`, and JSON
//! values pretty-printed (secrets hidden, long ones collapsed behind a summary).

use serde_json::Value;

use crate::api::doctor::span;

/// A JSON value longer than this is collapsed.
const COLLAPSE_AT: usize = 600;

/// `2026-12-01 20:31:05` (UTC) from store ms.
pub(super) fn clock(ms: u64) -> String {
    let t = savepoint_client::fmt::timestamp(ms);
    t.get(..19).map(|s| s.replace('T', " ")).unwrap_or(t)
}

/// How long before or after `now` the time `ms` is: `3.0 s ago`, `in 2.0 min`.
pub(crate) fn ago(ms: u64, now: u64) -> String {
    if ms >= now {
        format!("in {}", span(ms - now))
    } else {
        format!("{} ago", span(now - ms))
    }
}

/// A JSON value for a page: pretty-printed, and collapsed when long.
#[derive(Debug, Clone, Default)]
pub(super) struct Json {
    pub(super) text: String,
    pub(super) collapsed: bool,
    pub(super) summary: String,
}

/// The value as a page shows it (see [`Json`]).
pub(super) fn json(v: &Value) -> Json {
    // Secrets are never shown, whoever asks.
    let v = &savepoint_runtime::security::shown(v);
    let text = serde_json::to_string_pretty(v).unwrap_or_default();
    let collapsed = text.len() > COLLAPSE_AT || text.lines().count() > 24;
    let flat = v.to_string();
    let summary = if flat.chars().count() > 80 {
        format!("{}… ({} bytes)", flat.chars().take(80).collect::<String>(), flat.len())
    } else {
        flat
    };
    Json {
        text,
        collapsed,
        summary,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_are_collapsed_with_a_summary() {
        let big = json(&serde_json::json!({"text": "x".repeat(2000)}));
        assert!(big.collapsed);
        assert!(big.summary.ends_with("bytes)"), "{}", big.summary);
        assert!(!json(&serde_json::json!({"ok": 1})).collapsed);
    }
}
