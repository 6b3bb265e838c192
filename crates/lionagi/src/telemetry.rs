//! OpenTelemetry export of the library's GenAI spans (feature `otel`).
//!
//! The library crates emit `tracing` spans named and attributed after the
//! OpenTelemetry GenAI semantic conventions ([`branch_core::telemetry`]).
//! [`init_otlp`] sends them to an OTLP collector over HTTP/protobuf when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
//! is set: a `tracing-opentelemetry` layer, a batch span processor, and the
//! workspace's own HTTP client (reqwest with rustls) on a small runtime of
//! its own, so export works whether or not the program runs Tokio.
//!
//! Only spans are exported, not `tracing` events (their messages may quote
//! model or tool output). Message contents stay out of the spans unless
//! `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` or
//! [`branch_core::telemetry::set_capture_content`]; keys and headers never
//! enter them.
//!
//! The standard variables apply: `OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_SERVICE_NAME` (default `lionagi`), `OTEL_RESOURCE_ATTRIBUTES`,
//! `OTEL_BSP_*`; one export request takes at most
//! [`OTLP_EXPORT_DEADLINE`].

use std::sync::OnceLock;

use bytes::Bytes;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::limits::{MAX_COLLECTOR_REPLY_BYTES, OTLP_EXPORT_DEADLINE, OTLP_SHUTDOWN_DEADLINE};

/// The variables that turn export on.
pub const ENDPOINT_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// The `service.name` when `OTEL_SERVICE_NAME` is not set.
pub const SERVICE_NAME: &str = "lionagi";

/// Why telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The exporter could not be built (a malformed endpoint, ...).
    #[error("OTLP exporter: {0}")]
    Exporter(String),
    /// Another global `tracing` subscriber is already installed.
    #[error("a tracing subscriber is already installed: {0}")]
    Subscriber(String),
}

/// Keeps export running; dropping it flushes the spans still buffered and
/// shuts the exporter down (waiting at most [`OTLP_SHUTDOWN_DEADLINE`]).
#[must_use = "export stops when the guard is dropped"]
#[derive(Debug)]
pub struct OtelGuard {
    provider: SdkTracerProvider,
}

impl OtelGuard {
    /// Sends the spans buffered so far.
    pub fn flush(&self) {
        let _ = self.provider.force_flush();
    }
}

impl Drop for OtelGuard {
    fn drop(&mut self) {
        let _ = self.provider.shutdown_with_timeout(OTLP_SHUTDOWN_DEADLINE);
    }
}

/// Whether an endpoint variable is set (non-empty).
pub fn endpoint_configured() -> bool {
    ENDPOINT_VARIABLES
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|s| !s.trim().is_empty()))
}

/// Installs the OTLP layer as the global `tracing` subscriber when an
/// endpoint variable is set; `Ok(None)` when none is. Keep the guard until
/// the program ends.
pub fn init_otlp() -> Result<Option<OtelGuard>, TelemetryError> {
    let Some((layer, guard)) = otlp_layer()? else {
        return Ok(None);
    };
    tracing_subscriber::registry()
        .with(layer)
        .try_init()
        .map_err(|e| TelemetryError::Subscriber(e.to_string()))?;
    Ok(Some(guard))
}

/// The OTLP layer alone, to add to a subscriber of one's own; `Ok(None)`
/// when no endpoint variable is set.
pub fn otlp_layer<S>() -> Result<Option<(impl Layer<S>, OtelGuard)>, TelemetryError>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    if !endpoint_configured() {
        return Ok(None);
    }
    build_layer(None).map(Some)
}

/// The OTLP layer sending to `traces_url` (the full URL, e.g.
/// `http://127.0.0.1:4318/v1/traces`) whatever the environment says.
pub fn otlp_layer_for<S>(traces_url: &str) -> Result<(impl Layer<S>, OtelGuard), TelemetryError>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    build_layer(Some(traces_url))
}

fn build_layer<S>(traces_url: Option<&str>) -> Result<(impl Layer<S>, OtelGuard), TelemetryError>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let client = Collector::new()?;
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_http_client(client)
        .with_timeout(OTLP_EXPORT_DEADLINE);
    if let Some(url) = traces_url {
        builder = builder.with_endpoint(url);
    }
    let exporter = builder
        .build()
        .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
    let resource = if std::env::var_os("OTEL_SERVICE_NAME").is_some() {
        Resource::builder().build()
    } else {
        Resource::builder().with_service_name(SERVICE_NAME).build()
    };
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("lionagi");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_threads(false)
        // Spans only: events' messages may quote model or tool output.
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
            meta.is_span() && *meta.level() <= tracing::Level::INFO
        }));
    Ok((layer, OtelGuard { provider }))
}

/// The runtime the exporter's requests run on: the batch processor calls
/// the client from a thread of its own, outside any Tokio runtime.
fn export_runtime() -> Result<&'static tokio::runtime::Runtime, TelemetryError> {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("lionagi-otlp")
        .enable_all()
        .build()
        .map_err(|e| TelemetryError::Exporter(format!("export runtime: {e}")))?;
    Ok(RUNTIME.get_or_init(|| rt))
}

/// The OTLP HTTP client: the workspace's reqwest (rustls), no redirects, a
/// deadline per request and a bounded reply. Its `Debug` shows no headers
/// (`OTEL_EXPORTER_OTLP_HEADERS` may hold the collector's credentials).
#[derive(Debug)]
struct Collector {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl Collector {
    fn new() -> Result<Self, TelemetryError> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(OTLP_EXPORT_DEADLINE)
            .build()
            .map_err(|e| TelemetryError::Exporter(format!("HTTP client: {e}")))?;
        Ok(Self {
            client,
            runtime: export_runtime()?.handle().clone(),
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for Collector {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let sent = self.runtime.spawn(async move {
            let (parts, body) = request.into_parts();
            let mut resp = client
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body)
                .send()
                .await?;
            let status = resp.status();
            let mut bytes = Vec::new();
            while let Some(chunk) = resp.chunk().await? {
                // The collector's answer is a small status message; a long
                // one is cut, not buffered.
                let room = MAX_COLLECTOR_REPLY_BYTES.saturating_sub(bytes.len());
                bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if room <= chunk.len() {
                    break;
                }
            }
            Ok::<_, reqwest::Error>((status, bytes))
        });
        // The client's timeout bounds the request and its reply; the
        // join needs no runtime of the caller's.
        let (status, bytes) = sent.await?.map_err(reqwest::Error::without_url)?;
        let mut response = Response::new(Bytes::from(bytes));
        *response.status_mut() = status;
        Ok(response)
    }
}
