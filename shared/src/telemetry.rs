//! Logging set-up shared by the binaries: human-readable text or JSON lines with the stable
//! field names (`thread.id`, `step.index`, `step.name`, `task.attempt`, `worker.id`).

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber (`format` is `text` or `json`; `RUST_LOG` filters,
/// default `info`). Safe to call twice (the second call does nothing).
pub fn init(format: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,lapin=warn,amq_protocol=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(false);
    let _ = if format == "json" {
        builder.json().flatten_event(true).with_current_span(true).try_init()
    } else {
        builder.compact().try_init()
    };
}
