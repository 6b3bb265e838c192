//! The middle of `operate` (operations.md §10): what advances the branch by
//! one assistant turn. By default the compiled request goes to the chat
//! model (communicate-style); a custom middle gets that request instead;
//! run-and-collect drives `run` and joins its replies (CLI agents).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use branch_core::model::{ChatModel, ChatRequest, ChatResponse, ModelError};

/// The reply future of a [`CallModel`].
pub type ModelCallFuture =
    Pin<Box<dyn Future<Output = std::result::Result<ChatResponse, ModelError>> + Send>>;

/// A custom middle: given the turn's chat model and its compiled request,
/// returns the reply. The call is logged on the branch like a model call,
/// and the reply is recorded and parsed as usual.
pub trait CallModel: Send + Sync {
    /// Answers `request` (meant for `model`).
    fn call(&self, model: Arc<dyn ChatModel>, request: ChatRequest) -> ModelCallFuture;
}

impl<F, Fut> CallModel for F
where
    F: Fn(Arc<dyn ChatModel>, ChatRequest) -> Fut + Send + Sync,
    Fut: Future<Output = std::result::Result<ChatResponse, ModelError>> + Send + 'static,
{
    fn call(&self, model: Arc<dyn ChatModel>, request: ChatRequest) -> ModelCallFuture {
        Box::pin(self(model, request))
    }
}

impl std::fmt::Debug for dyn CallModel + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallModel(..)")
    }
}

/// Which middle `operate` uses.
#[derive(Debug, Clone, Default)]
pub enum OperateMiddle {
    /// Communicate-style: one model call (run-and-collect instead when the
    /// chat model is a CLI agent, as the reference chooses).
    #[default]
    Auto,
    /// Always one call to the chat model.
    Communicate,
    /// Drive `run` and join its AssistantResponse texts with blank lines.
    RunAndCollect,
    /// The compiled request goes to this function instead of the model.
    Custom(Arc<dyn CallModel>),
}

impl OperateMiddle {
    /// A custom middle from a function or closure.
    pub fn custom(f: impl CallModel + 'static) -> Self {
        Self::Custom(Arc::new(f))
    }

    /// Whether `operate` runs the turn through `run`.
    pub(crate) fn collects_run(&self, chat_model_is_cli: bool) -> bool {
        match self {
            Self::RunAndCollect => true,
            Self::Auto => chat_model_is_cli,
            Self::Communicate | Self::Custom(_) => false,
        }
    }

    /// The custom caller, if any.
    pub(crate) fn caller(&self) -> Option<&dyn CallModel> {
        match self {
            Self::Custom(c) => Some(c.as_ref()),
            _ => None,
        }
    }
}
