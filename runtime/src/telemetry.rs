//! Logs and traces shared by the binaries.
//!
//! Logs: human-readable text or JSON lines (`SAVEPOINT_LOG_FORMAT=json`) with the stable
//! field names (`thread.id`, `step.index`, `step.name`, `task.attempt`, `worker.id`,
//! `trace.id`). Traces: OpenTelemetry over OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` is
//! set (service name from `OTEL_SERVICE_NAME`, else the process's own). Trace context travels
//! as a W3C `traceparent` in AMQP headers and in the run's header, so one run is one trace
//! across API requests, workers, crashes and resumes.
//!
//! Per-step spans are DEBUG level: with tracing off they are disabled at their call sites and
//! cost next to nothing; the trace layer enables them for this crate's targets.

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Keeps the trace pipeline alive; dropping it flushes pending spans.
#[must_use = "dropping the guard shuts tracing down"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// True when spans are exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Exports what is pending (e.g. before a planned exit).
    pub fn flush(&self) {
        if let Some(p) = &self.provider {
            let _ = p.force_flush();
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(p) = self.provider.take() {
            let _ = p.shutdown();
        }
    }
}

fn otlp_provider(service: &str) -> Option<SdkTracerProvider> {
    std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
        .ok()
        .filter(|v| !v.trim().is_empty())?;
    let exporter = match opentelemetry_otlp::SpanExporter::builder().with_http().build() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("savepoint: OTLP exporter not started: {e}");
            return None;
        }
    };
    let name = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| service.to_owned());
    let resource = Resource::builder()
        .with_service_name(name)
        .with_attribute(KeyValue::new("service.namespace", "savepoint"))
        .with_attribute(KeyValue::new("process.pid", i64::from(std::process::id())))
        .build();
    Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build(),
    )
}

/// Installs the global subscriber: logs (`format` is `text` or `json`; `RUST_LOG` filters,
/// default `info`) and, when configured, the OTLP trace layer. Keep the returned guard alive
/// for the life of the process. A second call installs nothing.
pub fn init(format: &str, service: &str) -> Telemetry {
    let filter =
        || EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,lapin=warn,amq_protocol=warn"));
    let fmt = tracing_subscriber::fmt::layer().with_target(false);
    let fmt: Box<dyn Layer<_> + Send + Sync> = if format == "json" {
        fmt.json()
            .flatten_event(true)
            .with_current_span(true)
            .with_filter(filter())
            .boxed()
    } else {
        fmt.compact().with_filter(filter()).boxed()
    };
    let provider = otlp_provider(service);
    let otel = provider.as_ref().map(|p| {
        let traces = EnvFilter::try_from_env("SAVEPOINT_TRACE_FILTER")
            .unwrap_or_else(|_| EnvFilter::new("savepoint=debug,savepoint_worker=debug,savepoint_scheduler=debug"));
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("savepoint"))
            .with_filter(traces)
    });
    if tracing_subscriber::registry().with(fmt).with(otel).try_init().is_err() {
        return Telemetry { provider: None };
    }
    Telemetry { provider }
}

/// True when no span is enabled here (a filter such as `RUST_LOG=warn` disabled the worker's
/// `task` span): a warning that must name its run (a block) then carries the ids itself, and
/// otherwise leaves them to the span, so each line has each field once.
pub fn outside_spans() -> bool {
    tracing::Span::current().is_disabled()
}

/// W3C `traceparent` of the current span, if tracing is exporting and the span is sampled.
pub fn current_traceparent() -> Option<String> {
    let cx = tracing::Span::current().context();
    let sc = cx.span().span_context().clone();
    sc.is_valid()
        .then(|| format!("00-{}-{}-{:02x}", sc.trace_id(), sc.span_id(), sc.trace_flags().to_u8()))
}

/// Parses a W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`).
pub fn parse_traceparent(tp: &str) -> Option<(TraceId, SpanId, TraceFlags)> {
    let mut parts = tp.trim().split('-');
    let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version != "00" || trace.len() != 32 || span.len() != 16 || flags.len() != 2 || parts.next().is_some() {
        return None;
    }
    let trace = TraceId::from_hex(trace).ok().filter(|t| *t != TraceId::INVALID)?;
    let span = SpanId::from_hex(span).ok().filter(|s| *s != SpanId::INVALID)?;
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()?);
    Some((trace, span, flags))
}

/// The trace id part of a `traceparent` (for log fields).
pub fn trace_id_of(tp: &str) -> String {
    parse_traceparent(tp).map(|(t, _, _)| t.to_string()).unwrap_or_default()
}

/// Makes `span` a child of the remote span named by `traceparent` (no-op when invalid or
/// when tracing is off).
pub fn set_parent(span: &tracing::Span, traceparent: &str) {
    if let Some((trace, span_id, flags)) = parse_traceparent(traceparent) {
        let sc = SpanContext::new(trace, span_id, flags, true, TraceState::default());
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(sc));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_parse_strictly() {
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let (t, s, f) = parse_traceparent(tp).unwrap();
        assert_eq!(
            (t.to_string().as_str(), s.to_string().as_str(), f.is_sampled()),
            ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", true)
        );
        assert_eq!(trace_id_of(tp), "0af7651916cd43dd8448eb211c80319c");
        for bad in [
            "",
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-xyz-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad}");
        }
        assert!(current_traceparent().is_none(), "no exporter: no context");
    }
}
