//! The older HTTP+SSE transport (protocol 2024-11-05): a GET opens an event
//! stream whose first `endpoint` event names where to POST messages;
//! replies arrive as `message` events. Used when a server answers the
//! streamable-HTTP `initialize` POST with 400, 404 or 405, or when the
//! configuration says `"type": "sse"`.

use std::collections::HashMap;
use std::future::Future;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_client::SseError;
use sse_stream::Sse;

use crate::http::{GuardedHttp, HttpFailure, sse_events};
use crate::limits;
use crate::stdio::Failure;

/// A connection over the older transport.
pub(crate) struct LegacySse {
    http: GuardedHttp,
    post_url: reqwest::Url,
    events: BoxStream<'static, Result<Sse, SseError>>,
    failure: Failure,
}

impl LegacySse {
    /// Opens the event stream and waits for the `endpoint` event (the
    /// caller bounds the wait).
    pub(crate) async fn connect(
        http: GuardedHttp,
        url: &str,
        failure: Failure,
    ) -> Result<Self, HttpFailure> {
        let base = http.check_url(url)?;
        let rb = http
            .request(reqwest::Method::GET, base.clone(), HashMap::new())
            .header(reqwest::header::ACCEPT, "text/event-stream");
        let resp = http.send(rb).await?;
        if !resp.status().is_success() {
            return Err(http.status_failure(resp).await);
        }
        let mut events = sse_events(resp.bytes_stream(), limits::MAX_MESSAGE_BYTES);
        let post_url = loop {
            let Some(ev) = events.next().await else {
                return Err(HttpFailure::Request(
                    "the event stream ended before the `endpoint` event".into(),
                ));
            };
            let ev = ev.map_err(|e| HttpFailure::Request(format!("event stream: {e}")))?;
            if ev.event.as_deref() != Some("endpoint") {
                continue;
            }
            let target = ev.data.unwrap_or_default();
            let joined = base
                .join(target.trim())
                .map_err(|e| HttpFailure::Request(format!("bad endpoint {target:?}: {e}")))?;
            // Messages carry the same headers: never send them elsewhere.
            if joined.origin() != base.origin() {
                return Err(HttpFailure::Blocked(format!(
                    "the server named an endpoint on another origin ({})",
                    joined.origin().ascii_serialization()
                )));
            }
            break joined;
        };
        Ok(Self {
            http,
            post_url,
            events,
            failure,
        })
    }
}

impl Transport<RoleClient> for LegacySse {
    type Error = HttpFailure;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let http = self.http.clone();
        let url = self.post_url.clone();
        async move {
            let rb = http
                .request(reqwest::Method::POST, url, HashMap::new())
                .json(&item);
            let resp = http.send(rb).await?;
            if resp.status().is_success() {
                Ok(())
            } else {
                Err(http.status_failure(resp).await)
            }
        }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        loop {
            let ev = match self.events.next().await? {
                Ok(ev) => ev,
                Err(e) => {
                    self.failure.set(format!("event stream: {e}"));
                    return None;
                }
            };
            if ev.event.as_deref().is_some_and(|e| e != "message") {
                continue;
            }
            let Some(data) = ev.data else { continue };
            match serde_json::from_str::<ServerJsonRpcMessage>(&data) {
                Ok(m) => return Some(m),
                Err(e) => {
                    self.failure
                        .set(format!("malformed JSON-RPC in an SSE event: {e}"));
                    return None;
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.events = futures_util::stream::empty().boxed();
        Ok(())
    }
}
