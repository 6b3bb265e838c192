//! `iModel`: provider clients over HTTP.
//!
//! Charter: the implementation of `branch-core`'s chat-model seam for real
//! providers (OpenAI chat completions and the OpenAI-compatible family,
//! Anthropic Messages, Gemini, Ollama, any OpenAI-compatible `base_url`):
//! request bodies, reply mapping, SSE streaming, retries with backoff, rate
//! limiting, the network guard and API-key handling. Usable alone as a
//! provider client. It must not know branches' histories or the verbs.
//!
//! ```no_run
//! # async fn demo() -> Result<(), branch_core::model::ModelError> {
//! use branch_core::model::{ChatMessage, ChatRequest};
//! use branch_models::IModel;
//! let model = IModel::from_model_string("openai/gpt-4.1-mini")?; // key from OPENAI_API_KEY
//! let reply = model.invoke(ChatRequest::new(vec![ChatMessage::user("Say hi")])).await?;
//! println!("{}", reply.text);
//! # Ok(()) }
//! ```

// Replies, headers and stored configurations are hostile: nothing outside
// tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod address_rules;
#[cfg(feature = "test-support")]
pub mod bench_server;
pub mod breaker;
#[cfg(test)]
mod chatcompat_tests;
pub mod dialect;
#[cfg(test)]
mod e2e_tests;
pub mod gguf;
pub mod guard;
#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod http_tests;
mod imodel;
pub mod json_grammar;
pub mod limiter;
pub mod limits;
#[cfg(feature = "embedded")]
pub mod local;
#[cfg(any(test, feature = "test-support"))]
pub mod mock;
#[cfg(any(test, feature = "test-support"))]
pub mod mock_anthropic;
#[cfg(any(test, feature = "test-support"))]
pub mod mock_messages;
#[cfg(test)]
mod refused_payload_tests;
mod reply_stream;
pub mod retry_after;
mod secret;
pub mod sse;
pub mod sse_frame;
mod target;
mod traced;

pub use branch_core::model::{
    ChatChunk, ChatMessage, ChatModel, ChatRequest, ChatResponse, ChatStream, ModelConfig,
    ModelError, ModelErrorKind, StreamAccumulator, Usage,
};
pub use imodel::{IModel, IModelBuilder};
pub use secret::ApiKey;

/// A model that can be called: `model` itself if it is connected, otherwise
/// an [`IModel`] built from its current configuration (same id; the
/// environment key only for the registered base URL).
pub fn connect(
    model: &std::sync::Arc<dyn ChatModel>,
) -> Result<std::sync::Arc<dyn ChatModel>, ModelError> {
    if model.is_connected() {
        return Ok(std::sync::Arc::clone(model));
    }
    let config = model.snapshot();
    if config.provider_spec().is_some_and(|s| s.name == "local") {
        return connect_local(config);
    }
    Ok(std::sync::Arc::new(IModel::new(config)?))
}

#[cfg(feature = "embedded")]
fn connect_local(config: ModelConfig) -> Result<std::sync::Arc<dyn ChatModel>, ModelError> {
    let name = config
        .model_name()
        .unwrap_or(local::DEFAULT_MODEL)
        .to_owned();
    local::LocalModel::new(config)
        .map(|m| std::sync::Arc::new(m) as std::sync::Arc<dyn ChatModel>)
        .map_err(|e| e.into_model_error(&name))
}

#[cfg(not(feature = "embedded"))]
fn connect_local(config: ModelConfig) -> Result<std::sync::Arc<dyn ChatModel>, ModelError> {
    Err(without_embedded(&config))
}

/// The refusal of a local model by a build without it. Compiled either way,
/// so that the lint pass and the tests, which build with every feature, see
/// it too.
#[cfg_attr(feature = "embedded", allow(dead_code))]
fn without_embedded(config: &ModelConfig) -> ModelError {
    ModelError::new(
        ModelErrorKind::Config,
        "local",
        config.model_name(),
        "the embedded local model needs branch-models built with the `embedded` feature",
    )
}

#[cfg(test)]
mod local_without_feature_tests {
    use super::*;

    #[test]
    fn connecting_a_local_config_says_which_feature_is_needed() {
        let config = ModelConfig::new("local", "SmolLM2-135M-Instruct").unwrap();
        let err = without_embedded(&config);
        assert_eq!(err.kind, ModelErrorKind::Config);
        assert!(err.message.contains("`embedded` feature"), "{err}");
        // Without the feature, connecting a local configuration is refused so.
        if cfg!(not(feature = "embedded")) {
            let config: std::sync::Arc<dyn ChatModel> = std::sync::Arc::new(config);
            assert_eq!(connect(&config).unwrap_err().message, err.message);
        }
    }
}
