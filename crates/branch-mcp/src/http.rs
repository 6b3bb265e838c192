//! Streamable HTTP over our own guarded reqwest client.
//!
//! rmcp's built-in HTTP client is reqwest 0.13 with its own DNS resolution
//! and redirect handling, which would bypass `branch-models`' local-network
//! guard; so the transport's [`StreamableHttpClient`] is implemented here
//! over a client built like every model client (guarded resolver, the
//! same-origin redirect policy, no proxy), with every body size-capped.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};

use branch_models::guard::{GuardedResolver, check_host, find_blocked, redirect_policy};
use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::{Stream, StreamExt};
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::{Sse, SseStream};

use crate::limits;
use crate::redact::{Secret, scrub};

const SESSION_HEADER: &str = "Mcp-Session-Id";
const LAST_EVENT_HEADER: &str = "Last-Event-Id";
const EVENT_STREAM: &str = "text/event-stream";
const JSON: &str = "application/json";

/// Why an HTTP exchange failed, secrets scrubbed.
#[derive(Debug, thiserror::Error)]
pub enum HttpFailure {
    /// The guard refused the address.
    #[error("{0}")]
    Blocked(String),
    /// The request did not go through.
    #[error("request failed: {0}")]
    Request(String),
    /// The server answered with an error status.
    #[error("HTTP {status}: {body}")]
    Status {
        /// The status code.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// A body or event was larger than its cap.
    #[error("a reply larger than the cap of {0} bytes")]
    TooLarge(usize),
}

/// The client the streamable-HTTP (and the older SSE) transport uses.
#[derive(Clone)]
pub struct GuardedHttp {
    client: reqwest::Client,
    allow_local: bool,
    headers: Arc<Vec<(HeaderName, HeaderValue)>>,
    secrets: Arc<Vec<Secret>>,
    /// The status of the last POST that failed, read by the fallback to
    /// the older transport.
    last_status: Arc<AtomicU16>,
}

impl std::fmt::Debug for GuardedHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedHttp")
            .field("allow_local", &self.allow_local)
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl GuardedHttp {
    /// A client sending `headers` with every request.
    pub fn new(allow_local: bool, headers: &[(String, Secret)]) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(redirect_policy(allow_local))
            .dns_resolver(Arc::new(GuardedResolver { allow_local }))
            .connect_timeout(limits::INIT_TIMEOUT)
            .build()
            .map_err(|_| "the HTTP client could not be built".to_owned())?;
        let mut hv = Vec::new();
        for (k, v) in headers {
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| format!("header `{k}` is not a valid name"))?;
            let mut value = HeaderValue::from_str(v.expose())
                .map_err(|_| format!("header `{k}` has an invalid value"))?;
            value.set_sensitive(true);
            hv.push((name, value));
        }
        Ok(Self {
            client,
            allow_local,
            headers: Arc::new(hv),
            secrets: Arc::new(headers.iter().map(|(_, v)| v.clone()).collect()),
            last_status: Arc::new(AtomicU16::new(0)),
        })
    }

    /// The status of the last failed POST (0 when none failed).
    pub fn last_failed_status(&self) -> u16 {
        self.last_status.load(Ordering::Relaxed)
    }

    /// Checks the URL's host against the guard (IP literals never reach
    /// the resolver).
    pub fn check_url(&self, url: &str) -> Result<reqwest::Url, HttpFailure> {
        let parsed =
            reqwest::Url::parse(url).map_err(|e| HttpFailure::Request(format!("bad URL: {e}")))?;
        let host = parsed.host_str().unwrap_or_default();
        check_host(host, self.allow_local).map_err(|b| HttpFailure::Blocked(b.to_string()))?;
        Ok(parsed)
    }

    pub(crate) fn request(
        &self,
        method: reqwest::Method,
        url: reqwest::Url,
        extra: HashMap<HeaderName, HeaderValue>,
    ) -> reqwest::RequestBuilder {
        let mut rb = self.client.request(method, url);
        for (k, v) in self.headers.iter() {
            rb = rb.header(k, v);
        }
        for (k, v) in extra {
            rb = rb.header(k, v);
        }
        rb
    }

    pub(crate) async fn send(
        &self,
        rb: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, HttpFailure> {
        rb.send().await.map_err(|e| self.request_error(&e))
    }

    fn request_error(&self, e: &reqwest::Error) -> HttpFailure {
        if let Some(b) = find_blocked(e) {
            return HttpFailure::Blocked(b.to_string());
        }
        // reqwest's text names the URL, which may carry a token.
        let mut text = e.to_string();
        if let Some(url) = e.url() {
            text = text.replace(url.as_str(), "the server");
        }
        HttpFailure::Request(scrub(&text, self.secrets.iter()))
    }

    /// Reads at most `cap` bytes of a body; more is an error.
    pub(crate) async fn bounded_body(
        &self,
        resp: reqwest::Response,
        cap: usize,
    ) -> Result<Vec<u8>, HttpFailure> {
        if resp
            .content_length()
            .is_some_and(|n| usize::try_from(n).map_or(true, |n| n > cap))
        {
            return Err(HttpFailure::TooLarge(cap));
        }
        let mut out = Vec::new();
        let mut stream = resp.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| self.request_error(&e))?;
            if out.len().saturating_add(chunk.len()) > cap {
                return Err(HttpFailure::TooLarge(cap));
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }

    /// An error status with the start of its body, secrets scrubbed.
    pub(crate) async fn status_failure(&self, resp: reqwest::Response) -> HttpFailure {
        let status = resp.status().as_u16();
        let mut body = Vec::new();
        let mut stream = resp.bytes_stream();
        while let Some(Ok(chunk)) = stream.next().await {
            let room = limits::MAX_ERROR_BODY_BYTES.saturating_sub(body.len());
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if room <= chunk.len() {
                break;
            }
        }
        let text = scrub(String::from_utf8_lossy(&body).trim(), self.secrets.iter());
        HttpFailure::Status { status, body: text }
    }
}

fn content_type(resp: &reqwest::Response) -> String {
    resp.headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase()
}

/// Server-sent events from a body, each event at most `cap` bytes.
pub(crate) fn sse_events(
    body: impl Stream<Item = Result<Bytes, reqwest::Error>> + Send + 'static,
    cap: usize,
) -> BoxStream<'static, Result<Sse, SseError>> {
    let bounded = EventCap::new(body.boxed(), cap);
    SseStream::from_bytes_stream(bounded).boxed()
}

/// Counts bytes since the last blank line and fails past `cap`.
struct EventCap {
    inner: BoxStream<'static, Result<Bytes, reqwest::Error>>,
    cap: usize,
    since_blank: usize,
    last: [u8; 2],
}

impl EventCap {
    fn new(inner: BoxStream<'static, Result<Bytes, reqwest::Error>>, cap: usize) -> Self {
        Self {
            inner,
            cap,
            since_blank: 0,
            last: [0, 0],
        }
    }
}

/// Why an event stream's body ended.
#[derive(Debug, thiserror::Error)]
pub enum EventBodyError {
    /// An event over its cap.
    #[error("an event larger than the cap of {0} bytes")]
    TooLarge(usize),
    /// The body failed.
    #[error("the event stream failed: {0}")]
    Body(#[from] reqwest::Error),
}

impl Stream for EventCap {
    type Item = Result<Bytes, EventBodyError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let this = &mut *self;
        match this.inner.poll_next_unpin(cx) {
            std::task::Poll::Ready(Some(Ok(chunk))) => {
                for &b in chunk.iter() {
                    let blank = b == b'\n' && (this.last[1] == b'\n' || this.last == *b"\n\r");
                    this.since_blank = if blank { 0 } else { this.since_blank + 1 };
                    this.last = [this.last[1], b];
                    if this.since_blank > this.cap {
                        return std::task::Poll::Ready(Some(Err(EventBodyError::TooLarge(
                            this.cap,
                        ))));
                    }
                }
                std::task::Poll::Ready(Some(Ok(chunk)))
            }
            std::task::Poll::Ready(Some(Err(e))) => {
                std::task::Poll::Ready(Some(Err(EventBodyError::Body(e))))
            }
            std::task::Poll::Ready(None) => std::task::Poll::Ready(None),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }
}

type HttpResult<T> = Result<T, StreamableHttpError<HttpFailure>>;

fn cap_of(limit: usize) -> usize {
    limit.min(limits::MAX_MESSAGE_BYTES)
}

impl StreamableHttpClient for GuardedHttp {
    type Error = HttpFailure;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<StreamableHttpPostResponse> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let url = self.check_url(&uri).map_err(StreamableHttpError::Client)?;
        let mut rb = self
            .request(reqwest::Method::POST, url, custom_headers)
            .header(reqwest::header::ACCEPT, format!("{JSON}, {EVENT_STREAM}"))
            .json(&message);
        if let Some(auth) = auth_header {
            rb = rb.bearer_auth(auth);
        }
        let had_session = session_id.is_some();
        if let Some(s) = session_id {
            rb = rb.header(SESSION_HEADER, s.as_ref());
        }
        let resp = self.send(rb).await.map_err(StreamableHttpError::Client)?;
        let status = resp.status();
        if status == reqwest::StatusCode::ACCEPTED || status == reqwest::StatusCode::NO_CONTENT {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == reqwest::StatusCode::NOT_FOUND && had_session {
            return Err(StreamableHttpError::SessionExpired);
        }
        if !status.is_success() {
            self.last_status.store(status.as_u16(), Ordering::Relaxed);
            let json = content_type(&resp).starts_with(JSON);
            if json {
                // A JSON-RPC error in an error status is still an answer.
                let body = self
                    .bounded_body(resp, limits::MAX_ERROR_BODY_BYTES.max(4096))
                    .await
                    .map_err(StreamableHttpError::Client)?;
                if let Ok(m @ ServerJsonRpcMessage::Error(_)) =
                    serde_json::from_slice::<ServerJsonRpcMessage>(&body)
                {
                    return Ok(StreamableHttpPostResponse::Json(m, None));
                }
                let text = scrub(&String::from_utf8_lossy(&body), self.secrets.iter());
                return Err(StreamableHttpError::Client(HttpFailure::Status {
                    status: status.as_u16(),
                    body: text,
                }));
            }
            return Err(StreamableHttpError::Client(self.status_failure(resp).await));
        }
        let session = resp
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let ct = content_type(&resp);
        if ct.starts_with(EVENT_STREAM) {
            let cap = cap_of(limits.max_sse_event_size);
            return Ok(StreamableHttpPostResponse::Sse(
                sse_events(resp.bytes_stream(), cap),
                session,
            ));
        }
        if ct.starts_with(JSON) {
            let body = self
                .bounded_body(resp, cap_of(limits.max_json_response_size))
                .await
                .map_err(StreamableHttpError::Client)?;
            if body.iter().all(u8::is_ascii_whitespace)
                && !matches!(message, ClientJsonRpcMessage::Request(_))
            {
                return Ok(StreamableHttpPostResponse::Accepted);
            }
            let m: ServerJsonRpcMessage = serde_json::from_slice(&body)?;
            return Ok(StreamableHttpPostResponse::Json(m, session));
        }
        if !matches!(message, ClientJsonRpcMessage::Request(_)) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        Err(StreamableHttpError::UnexpectedContentType(Some(ct)))
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<()> {
        let url = self.check_url(&uri).map_err(StreamableHttpError::Client)?;
        let mut rb = self
            .request(reqwest::Method::DELETE, url, custom_headers)
            .header(SESSION_HEADER, session_id.as_ref());
        if let Some(auth) = auth_header {
            rb = rb.bearer_auth(auth);
        }
        let resp = self.send(rb).await.map_err(StreamableHttpError::Client)?;
        if resp.status().is_success() || resp.status() == reqwest::StatusCode::METHOD_NOT_ALLOWED {
            Ok(())
        } else {
            Err(StreamableHttpError::Client(self.status_failure(resp).await))
        }
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<BoxStream<'static, Result<Sse, SseError>>> {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            limits::MAX_MESSAGE_BYTES,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> HttpResult<BoxStream<'static, Result<Sse, SseError>>> {
        let url = self.check_url(&uri).map_err(StreamableHttpError::Client)?;
        let mut rb = self
            .request(reqwest::Method::GET, url, custom_headers)
            .header(reqwest::header::ACCEPT, EVENT_STREAM);
        if let Some(s) = session_id {
            rb = rb.header(SESSION_HEADER, s.as_ref());
        }
        if let Some(id) = last_event_id {
            rb = rb.header(LAST_EVENT_HEADER, id);
        }
        if let Some(auth) = auth_header {
            rb = rb.bearer_auth(auth);
        }
        let resp = self.send(rb).await.map_err(StreamableHttpError::Client)?;
        let status = resp.status();
        if status == reqwest::StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        if !status.is_success() {
            return Err(StreamableHttpError::Client(self.status_failure(resp).await));
        }
        let ct = content_type(&resp);
        if !ct.starts_with(EVENT_STREAM) {
            return Err(StreamableHttpError::UnexpectedContentType(Some(ct)));
        }
        Ok(sse_events(resp.bytes_stream(), cap_of(max_sse_event_size)))
    }
}

/// What a transport error says, without rmcp's type names: our own HTTP
/// failure when it is one, "malformed JSON-RPC" for a body that does not
/// parse.
pub(crate) fn transport_reason(e: &rmcp::transport::DynamicTransportError) -> String {
    let inner = e.error.as_ref();
    if let Some(h) = inner.downcast_ref::<StreamableHttpError<HttpFailure>>() {
        return match h {
            StreamableHttpError::Client(f) => f.to_string(),
            StreamableHttpError::Deserialize(d) => format!("malformed JSON-RPC: {d}"),
            other => other.to_string(),
        };
    }
    inner.to_string()
}

/// A short description of a failed start.
pub(crate) fn init_reason(e: &rmcp::service::ClientInitializeError) -> String {
    match e {
        rmcp::service::ClientInitializeError::TransportError { error, context } => {
            format!("{} ({context})", transport_reason(error))
        }
        other => other.to_string(),
    }
}

/// A short description of a failed request.
pub(crate) fn service_reason(e: &rmcp::service::ServiceError) -> String {
    match e {
        rmcp::service::ServiceError::TransportSend(t) => transport_reason(t),
        other => other.to_string(),
    }
}
