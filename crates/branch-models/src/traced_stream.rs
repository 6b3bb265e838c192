//! A streamed reply under its GenAI `chat` span: every poll runs inside the
//! span, and the end of the stream records what the whole reply reported
//! (served model, finish reason, usage) or the failure's `error.type`.

use std::pin::Pin;
use std::task::{Context, Poll};

use branch_core::model::{ChatChunk, ChatStream, ModelError, StreamAccumulator};
use branch_core::telemetry;
use futures_core::Stream;

/// `stream` polled inside `span`, which stays open until the stream ends or
/// is dropped. A disabled span (no subscriber wants it) costs nothing: the
/// stream is returned as it is.
pub(crate) fn traced(stream: ChatStream, span: tracing::Span) -> ChatStream {
    if span.is_disabled() {
        return stream;
    }
    Box::pin(Traced {
        inner: stream,
        span,
        acc: Some(StreamAccumulator::new()),
    })
}

struct Traced {
    inner: ChatStream,
    span: tracing::Span,
    /// `None` once the outcome is recorded.
    acc: Option<StreamAccumulator>,
}

impl Stream for Traced {
    type Item = Result<ChatChunk, ModelError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let polled = {
            let _entered = this.span.enter();
            this.inner.as_mut().poll_next(cx)
        };
        match &polled {
            Poll::Ready(Some(Ok(chunk))) => {
                if let Some(acc) = &mut this.acc {
                    acc.push(chunk);
                }
            }
            Poll::Ready(Some(Err(e))) => {
                if this.acc.take().is_some() {
                    telemetry::record_error(&this.span, telemetry::model_error_type(e.kind));
                }
            }
            Poll::Ready(None) => {
                if let Some(acc) = this.acc.take() {
                    telemetry::record_response(&this.span, &acc.finish());
                }
            }
            Poll::Pending => {}
        }
        polled
    }
}
