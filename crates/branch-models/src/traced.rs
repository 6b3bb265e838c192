//! A model call under its GenAI `chat` span: a complete call runs inside
//! the span and records the reply's attributes or the failure's
//! `error.type`; a streamed reply is polled inside the span, which stays
//! open until the stream ends or is dropped and then records what the
//! whole reply reported (served model, finish reason, usage). Every
//! provider, over HTTP or in process, opens its spans through here.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use branch_core::model::{ChatChunk, ChatResponse, ChatStream, ModelError, StreamAccumulator};
use branch_core::telemetry;
use futures_core::Stream;
use futures_util::FutureExt;
use tracing::Instrument;

/// Runs one complete call inside `span` and records its outcome there.
///
/// A combinator rather than an `async fn`: an `async fn` keeps its `call`
/// argument beside the instrumented future made from it, so every call's
/// state would carry the provider's whole call future twice (see
/// `docs/benchmarks.md`, "A turn's futures").
pub(crate) fn call<F>(span: tracing::Span, call: F) -> impl Future<Output = F::Output>
where
    F: Future<Output = Result<ChatResponse, ModelError>>,
{
    let recorder = span.clone();
    call.instrument(span).inspect(move |result| match result {
        Ok(r) => telemetry::record_response(&recorder, r),
        Err(e) => telemetry::record_error(&recorder, telemetry::model_error_type(e.kind)),
    })
}

/// Opens a streaming call inside `span`: the stream it opens is polled
/// inside the span ([`stream`]); a failure to open it is recorded there.
/// A combinator, as [`call`] is, and for the same reason.
pub(crate) fn open_stream<F>(span: tracing::Span, open: F) -> impl Future<Output = F::Output>
where
    F: Future<Output = Result<ChatStream, ModelError>>,
{
    open.instrument(span.clone())
        .map(move |opened| match opened {
            Ok(s) => Ok(stream(s, span)),
            Err(e) => {
                telemetry::record_error(&span, telemetry::model_error_type(e.kind));
                Err(e)
            }
        })
}

/// `stream` polled inside `span`, which stays open until the stream ends or
/// is dropped. A disabled span (no subscriber wants it) costs nothing: the
/// stream is returned as it is.
pub(crate) fn stream(stream: ChatStream, span: tracing::Span) -> ChatStream {
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
