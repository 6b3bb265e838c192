//! Request bodies at `serve_http`'s gate: a deadline on their arrival,
//! and, for a request that may open a session, the whole body read first
//! so that the gate knows whether it is an `initialize`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

/// A request body that fails when it has not arrived whole by its
/// deadline: a client sending one byte a minute must not hold a session's
/// request open.
pub(crate) struct Deadlined {
    body: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
    limit: Duration,
}

impl Deadlined {
    pub(crate) fn new(body: Incoming, limit: Duration) -> Self {
        Self {
            body,
            deadline: Box::pin(tokio::time::sleep(limit)),
            limit,
        }
    }
}

/// A body that did not arrive in time, or broke off.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    #[error("the request body did not arrive within {0:?}")]
    Late(Duration),
    #[error("reading the request body: {0}")]
    Read(#[from] hyper::Error),
}

impl Body for Deadlined {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(BodyError::from)));
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(BodyError::Late(self.limit)))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A body read whole by the gate, handed on to rmcp as it arrived: its
/// bytes, or the error that cut it off (so rmcp answers it as it answers
/// any body: 413 beyond its cap, 500 for a read that failed).
pub(crate) enum Gathered {
    Bytes(Option<Bytes>),
    Failed(Option<BodyError>),
}

impl Gathered {
    /// Reads `body` until its end, until it holds more than `cap` bytes
    /// (what was read is kept: rmcp refuses it for its size), or until it
    /// fails.
    pub(crate) async fn read(body: Deadlined, cap: usize) -> Self {
        let mut body = std::pin::pin!(body);
        let mut read = bytes::BytesMut::new();
        loop {
            match std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
                None => break,
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        read.extend_from_slice(&data);
                        if read.len() > cap {
                            break;
                        }
                    }
                }
                Some(Err(e)) => return Self::Failed(Some(e)),
            }
        }
        Self::Bytes(Some(read.freeze()))
    }

    /// Whether the body may open a session: anything but a JSON object
    /// naming another method than `initialize` (the only request that
    /// opens one). Text the gate cannot read that way (malformed, a batch,
    /// a key twice) counts as an open, so no reading of it that differs
    /// from rmcp's lets an `initialize` past the cap.
    pub(crate) fn may_open_session(&self) -> bool {
        #[derive(serde::Deserialize)]
        struct Method<'a> {
            #[serde(borrow)]
            method: Option<std::borrow::Cow<'a, str>>,
        }
        match self {
            Self::Bytes(Some(bytes)) => !matches!(
                serde_json::from_slice::<Method<'_>>(bytes),
                Ok(Method { method: Some(m) }) if m != "initialize"
            ),
            // Nothing for rmcp to open a session with.
            _ => false,
        }
    }
}

impl Body for Gathered {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        Poll::Ready(match &mut *self {
            Self::Bytes(bytes) => bytes.take().map(|b| Ok(Frame::data(b))),
            Self::Failed(e) => e.take().map(Err),
        })
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Self::Bytes(None) | Self::Failed(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Bytes(Some(b)) => {
                SizeHint::with_exact(u64::try_from(b.len()).unwrap_or(u64::MAX))
            }
            _ => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gathered(text: &str) -> Gathered {
        Gathered::Bytes(Some(Bytes::from(text.to_owned())))
    }

    #[test]
    fn only_a_body_naming_another_method_opens_no_session() {
        for opens in [
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
            r#"{"method":"initial\u0069ze","id":1}"#,
            r#"{"m\u0065thod":"initialize","id":1}"#,
            r#"{"method":"tools/call","method":"initialize"}"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"initialize"}]"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize""#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"{"method":7}"#,
            "",
        ] {
            assert!(gathered(opens).may_open_session(), "{opens}");
        }
        for other in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"method":"Initialize","id":1}"#,
        ] {
            assert!(!gathered(other).may_open_session(), "{other}");
        }
        let failed = Gathered::Failed(Some(BodyError::Late(Duration::from_secs(1))));
        assert!(!failed.may_open_session());
    }
}
