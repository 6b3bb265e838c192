//! The chat-model seam of a Branch and the plain-data model configuration.
//!
//! [`ModelConfig`] is what the reference's `iModel.to_dict` writes
//! (serialization.md §7) and what `from_dict` restores (§7.1). It holds no
//! API key. [`ChatModel`] is the seam a `Branch` holds its chat and parse
//! models through; `branch-models` implements it for real providers.

mod body;
mod call;
mod config;
mod error;
pub mod limits;
pub mod pyrepr;
mod reasoning;
pub mod registry;
pub mod sanitize;
pub mod settings;
mod usage_sum;
mod wire;

use std::sync::Arc;

pub use crate::lazy_json::LazyJson;
pub use body::{BodyWriter, Punct, RequestBody, TokenCount};
pub use call::{
    ChatChunk, ChatMessage, ChatRequest, ChatResponse, ChatStream, ChunkKind, StreamAccumulator,
    TokenDetails, ToolCall, Usage, UsageReport, api_call_execution, api_call_execution_head,
    extract_text, stream_chunk, thinking_chunk,
};
pub(crate) use call::{execution_error, execution_record, token_count};
pub use config::{
    AuthType, CircuitBreakerConfig, DEFAULT_CHAT_MODEL, DEFAULT_CHAT_PROVIDER, EndpointConfig,
    ModelConfig, ModelConfigBuilder, ProcessorConfig, RequestOptions, RetryConfig, Seconds,
    anthropic_messages_request_schema, now_timestamp, openai_chat_request_schema,
};
pub use error::{ModelConfigError, ModelError, ModelErrorKind};
pub use reasoning::{FinishReason, REASONING_METADATA_KEY, ReasoningBlock};
pub use usage_sum::add_counts;
pub use wire::{SettledJson, SettledRun, WireForm, json_len_guess};

/// A chat model a `Branch` can hold, serialize and call.
#[async_trait::async_trait]
pub trait ChatModel: Send + Sync + std::fmt::Debug + 'static {
    /// The configuration the model was built from.
    fn config(&self) -> &ModelConfig;

    /// The current configuration, including what calls changed since
    /// construction (`provider_metadata.served_model`, the calibrated
    /// `input_token_scale`). Serialize models through this (or
    /// [`ChatModel::to_dict`]), not through [`ChatModel::config`].
    fn snapshot(&self) -> ModelConfig {
        self.config().clone()
    }

    /// `iModel.to_dict` of the current state.
    fn to_dict(
        &self,
        include_request_options: bool,
        include_processor_config: bool,
    ) -> serde_json::Value {
        self.snapshot()
            .to_dict(include_request_options, include_processor_config)
    }

    /// The exact JSON body a call with `request` sends (what the Branch logs
    /// as the API call's `payload`).
    fn request_payload(&self, request: &ChatRequest, stream: bool) -> serde_json::Value {
        request.generic_payload(self.config().kwargs(), stream)
    }

    /// Whether calls reach a provider (`false` for a configuration-only
    /// [`ModelConfig`], which `branch_models::connect` upgrades).
    fn is_connected(&self) -> bool {
        true
    }

    /// Whether this is a CLI model; CLI models are copied by `Branch::clone`.
    fn is_cli(&self) -> bool {
        false
    }

    /// The model's id (what `to_dict` writes as `id`; a clone of a branch
    /// shares it for an API model and gets a new one for a CLI agent).
    ///
    /// ```
    /// use branch_core::model::{ChatModel, ModelConfig};
    ///
    /// let m = ModelConfig::new("openai", "gpt-4.1-mini")?;
    /// assert_eq!(ChatModel::id(&m).to_string(), m.to_dict(false, false)["id"]);
    /// assert_ne!(ChatModel::id(&*ChatModel::fork(&m)), ChatModel::id(&m));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn id(&self) -> uuid::Uuid {
        self.config().id()
    }

    /// A copy of this model, same id and state.
    fn duplicate(&self) -> Arc<dyn ChatModel>;

    /// A copy for another conversation, with its own id: what
    /// `Branch::clone` gives the clone for a model that keeps
    /// per-conversation state (a CLI agent), as the reference does.
    /// Defaults to [`ChatModel::duplicate`].
    fn fork(&self) -> Arc<dyn ChatModel> {
        self.duplicate()
    }

    /// One complete (non-streaming) call, retried per the model's policy.
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError>;

    /// The serialized body a non-streaming call with `request` sends (what
    /// the Branch logs as the API call's `payload`), built once and handed
    /// back to [`ChatModel::chat_with_body`]. Errors when the request has
    /// no form in the model's protocol.
    fn request_body(&self, request: &ChatRequest) -> Result<RequestBody, ModelError> {
        RequestBody::of(&self.request_payload(request, false)).map_err(|e| {
            ModelError::new(
                ModelErrorKind::Config,
                self.config().provider(),
                self.config().model_name(),
                format!("the request body is not serializable: {e}"),
            )
        })
    }

    /// One complete call sending `body`, which
    /// [`ChatModel::request_body`]`(&request)` of this model built: a
    /// model that sends JSON sends those bytes instead of building them a
    /// second time. The default ignores it and calls [`ChatModel::chat`].
    async fn chat_with_body(
        &self,
        request: ChatRequest,
        body: &RequestBody,
    ) -> Result<ChatResponse, ModelError> {
        let _ = body;
        self.chat(request).await
    }

    /// Whether every [`ChatResponse`] this model returns carries in
    /// `raw_text` the very bytes its `raw` was parsed from, unchanged
    /// since: the API call's log then keeps those bytes instead of
    /// serializing `raw` again. A model that wraps another and may change
    /// what it returns (a redacting wrapper) keeps the default, `false`,
    /// so that the log records what the reply message holds.
    fn keeps_reply_bytes(&self) -> bool {
        false
    }

    /// A streaming call (`"stream": true`). Errors before the first byte
    /// (status, guard, limits) are returned here; later ones as stream items.
    /// Dropping the stream cancels the request. Streams are not retried.
    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError>;
}

/// A configuration-only model: a `Branch` can hold and serialize it; the
/// operations layer upgrades it to a connected model on first use. Calling
/// it returns [`ModelErrorKind::NotConnected`].
#[async_trait::async_trait]
impl ChatModel for ModelConfig {
    fn config(&self) -> &ModelConfig {
        self
    }

    fn is_cli(&self) -> bool {
        ModelConfig::is_cli(self)
    }

    fn duplicate(&self) -> Arc<dyn ChatModel> {
        Arc::new(self.clone())
    }

    fn fork(&self) -> Arc<dyn ChatModel> {
        Arc::new(self.forked())
    }

    fn is_connected(&self) -> bool {
        false
    }

    async fn chat(&self, _request: ChatRequest) -> Result<ChatResponse, ModelError> {
        Err(ModelError::not_connected(
            self.provider(),
            self.model_name(),
        ))
    }

    async fn stream(&self, _request: ChatRequest) -> Result<ChatStream, ModelError> {
        Err(ModelError::not_connected(
            self.provider(),
            self.model_name(),
        ))
    }
}

#[cfg(test)]
mod tests;
