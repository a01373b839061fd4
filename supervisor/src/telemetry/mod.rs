//! OpenTelemetry traces of turns, exported over OTLP (HTTP/protobuf), following the GenAI semantic conventions.
//!
//! - Off unless configured: `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), or
//!   `serve --otlp-endpoint`. `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_SERVICE_NAME` (default `service-rs`) and
//!   `OTEL_TRACES_SAMPLER` are read as the SDK reads them.
//! - Spans are batched on the SDK's own thread and flushed by [`shutdown`], so a one-shot `run` loses none.
//! - [`spans`] makes every span from what the supervisor already holds: the events it journals (after the frame
//!   guard has checked a worker's) and the model calls it makes itself. The worker sends nothing.
//! - Prompts, answers, tool arguments and tool output are left out unless
//!   `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`. No header, key or token is ever an attribute.
//! - A W3C `traceparent` on the HTTP request that starts a turn makes the turn's span its child ([`with_parent`]);
//!   a request forwarded to another node of a cluster carries the same header on.
//!
//! gRPC export is not built in: it would add the tonic transport stack for a protocol every collector also takes
//! over HTTP.

pub mod spans;

use std::sync::OnceLock;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::Context;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::SdkTracerProvider;

/// Why traces could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("cannot export traces to {endpoint}: {message}")]
pub struct TelemetryError {
    /// Where they were to go.
    pub endpoint: String,
    /// What failed.
    pub message: String,
}

/// The process's tracer, once [`init`] has set one up.
static TRACES: OnceLock<spans::Traces> = OnceLock::new();
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

tokio::task_local! {
    /// The trace context of the HTTP request being served, for the turn it starts.
    static PARENT: Context;
}

/// Whether `OTEL_*` variables ask for traces (the endpoint is set).
/// Longest string from a bundle, a model or a worker (a tool name, a call id, a model name, an error) that a span,
/// a log line or a metric label carries; past it the string is cut and marked.
pub const MAX_LABEL_BYTES: usize = 256;

/// `s` cut to at most `max` bytes at a character boundary, marked `…[+N bytes]` when it was longer.
pub fn capped(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…[+{} bytes]", &s[..end], s.len() - end)
}

/// `s` as a span attribute, a log field or a metric label carries it: control characters removed, then
/// [`capped`] at [`MAX_LABEL_BYTES`].
pub fn label(s: &str) -> String {
    let clean: String = s.chars().filter(|c| !c.is_control()).collect();
    capped(&clean, MAX_LABEL_BYTES)
}

/// Whether telemetry is configured by the standard OpenTelemetry environment variables.
pub fn configured_by_env() -> bool {
    [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ]
    .iter()
    .any(|v| std::env::var(v).is_ok_and(|s| !s.trim().is_empty()))
}

/// Sets up export when `endpoint` (a collector's base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` takes it) is given or
/// the environment names one; true when traces are on. Call once, early.
pub fn init(endpoint: Option<&str>) -> Result<bool, TelemetryError> {
    if endpoint.is_none() && !configured_by_env() {
        return Ok(false);
    }
    let mut builder = opentelemetry_otlp::SpanExporter::builder().with_http();
    let shown = match endpoint {
        Some(base) => {
            let url = format!("{}/v1/traces", base.trim_end_matches('/'));
            builder = builder.with_endpoint(url.clone());
            url
        }
        None => std::env::var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT"))
            .unwrap_or_default(),
    };
    let exporter = builder.build().map_err(|e| TelemetryError {
        endpoint: shown.clone(),
        message: e.to_string(),
    })?;
    let service = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "service-rs".into());
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(service)
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let traces = spans::Traces::new(&provider, capture_content());
    if PROVIDER.set(provider).is_err() || TRACES.set(traces).is_err() {
        return Err(TelemetryError {
            endpoint: shown,
            message: "traces were already set up in this process".into(),
        });
    }
    tracing::info!(endpoint = %shown, "exporting traces over OTLP");
    Ok(true)
}

/// Whether the operator opted in to prompts, answers and tool input and output in spans.
fn capture_content() -> bool {
    std::env::var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
        .is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// The tracer, when traces are on.
pub fn traces() -> Option<&'static spans::Traces> {
    TRACES.get()
}

/// Exports what is batched and stops the exporter; spans after this are dropped.
pub fn shutdown() {
    if let Some(provider) = PROVIDER.get() {
        if let Err(e) = provider.shutdown() {
            tracing::warn!("traces not all exported: {e}");
        }
    }
}

/// The trace context a request's `traceparent` (and `tracestate`) carry, whether or not traces are exported (the
/// request's log line names its trace); None without a valid one.
pub fn context_of(headers: &axum::http::HeaderMap) -> Option<Context> {
    use opentelemetry::trace::TraceContextExt;
    let propagator = opentelemetry_sdk::propagation::TraceContextPropagator::new();
    let cx = propagator.extract(&opentelemetry_http::HeaderExtractor(headers));
    cx.span().span_context().is_valid().then_some(cx)
}

/// The id of the trace `cx` belongs to.
pub fn trace_id(cx: &Context) -> String {
    use opentelemetry::trace::TraceContextExt;
    cx.span().span_context().trace_id().to_string()
}

/// Runs `work` with `parent` as the trace context any turn it starts continues; with traces off, just `work`.
pub async fn with_parent<F: std::future::Future>(parent: Context, work: F) -> F::Output {
    if traces().is_none() {
        return work.await;
    }
    PARENT.scope(parent, work).await
}

/// The context [`with_parent`] set for the current task, if any.
fn parent() -> Option<Context> {
    PARENT.try_with(Context::clone).ok()
}
