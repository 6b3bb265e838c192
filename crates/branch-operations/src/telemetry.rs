//! The GenAI span of a verb (`invoke_agent`, `branch_core::telemetry`):
//! opened before the verb runs, with the branch as the conversation, so
//! the model calls (`chat`) and tool calls (`execute_tool`) it makes are its
//! children and carry the same `gen_ai.conversation.id`.

use std::future::Future;

use branch_core::Branch;
use branch_core::telemetry;
use futures_core::Stream;
use futures_util::StreamExt;
use tracing::Instrument;

use crate::error::OperationError;

/// A verb's span, ready to run the verb's future.
pub(crate) struct VerbSpan {
    span: tracing::Span,
    conversation: String,
}

/// The span of `verb` on `branch`: its id, its name (when it has one) and
/// its chat model.
pub(crate) fn verb_span(verb: &'static str, branch: &Branch) -> VerbSpan {
    let conversation = branch.id().to_string();
    let config = branch.chat_model().config();
    let span = telemetry::agent_span(
        verb,
        &conversation,
        branch.name(),
        config.provider(),
        config.model_name(),
    );
    VerbSpan { span, conversation }
}

impl VerbSpan {
    /// Runs the verb inside the span and records its failure, if any.
    /// The verb's future is boxed first: wrapped in the span and the
    /// conversation scope it would otherwise grow every caller's future
    /// (and debug builds' stacks) by its whole size once more.
    pub(crate) fn run<'a, T: 'a>(
        self,
        fut: impl Future<Output = Result<T, OperationError>> + 'a,
    ) -> impl Future<Output = Result<T, OperationError>> + 'a {
        let fut = Box::pin(fut);
        async move {
            let result =
                telemetry::in_conversation(self.conversation, fut.instrument(self.span.clone()))
                    .await;
            if let Some(t) = result.as_ref().err().and_then(error_type) {
                telemetry::record_error(&self.span, t);
            }
            result
        }
    }

    /// Runs a streaming verb inside the span: every item is produced in
    /// the span and the conversation scope, the span stays open until the
    /// stream ends or is dropped, and the first failure is recorded.
    pub(crate) fn stream<'a, T: 'a>(
        self,
        inner: impl Stream<Item = Result<T, OperationError>> + Send + 'a,
    ) -> impl Stream<Item = Result<T, OperationError>> + Send + 'a {
        let inner = Box::pin(inner);
        futures_util::stream::unfold(Some((inner, self)), |state| async move {
            let (mut inner, verb) = state?;
            let item = telemetry::in_conversation(
                verb.conversation.clone(),
                inner.next().instrument(verb.span.clone()),
            )
            .await?;
            if let Some(t) = item.as_ref().err().and_then(error_type) {
                telemetry::record_error(&verb.span, t);
            }
            Some((item, Some((inner, verb))))
        })
    }

    /// The span itself (for verbs whose work is driven piecewise).
    pub(crate) fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// The conversation id the span carries.
    pub(crate) fn conversation(&self) -> &str {
        &self.conversation
    }
}

/// The `error.type` of a verb's failure: the model call's kind for a
/// failed call, else the failure's class. A turn paused for approval has
/// not failed: `None`.
pub(crate) fn error_type(e: &OperationError) -> Option<&'static str> {
    Some(match e {
        OperationError::ApiCall { source, .. } => telemetry::model_error_type(source.kind),
        OperationError::Compile { .. } => "compile",
        OperationError::Parse { .. } => "parse",
        OperationError::Action { .. } => "action",
        OperationError::InvalidArgument { .. } => "invalid_argument",
        OperationError::ApprovalPending { .. } => return None,
        OperationError::Run { .. } => "run",
    })
}
