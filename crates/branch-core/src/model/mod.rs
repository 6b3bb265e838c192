//! The chat-model seam of a Branch and the plain-data model configuration.
//!
//! [`ModelConfig`] is what the reference's `iModel.to_dict` writes
//! (serialization.md §7) and what `from_dict` restores (§7.1). It holds no
//! API key. [`ChatModel`] is the seam a `Branch` holds its chat and parse
//! models through; `branch-models` implements it for real providers.

mod config;
mod error;
pub mod registry;
pub mod sanitize;

use std::sync::Arc;

pub use config::{
    AuthType, CircuitBreakerConfig, DEFAULT_CHAT_MODEL, DEFAULT_CHAT_PROVIDER, EndpointConfig,
    ModelConfig, ModelConfigBuilder, ProcessorConfig, RequestOptions, RetryConfig, Seconds,
    now_timestamp, openai_chat_request_schema,
};
pub use error::ModelConfigError;

/// A chat model a `Branch` can hold, serialize (through [`ChatModel::config`])
/// and call.
pub trait ChatModel: Send + Sync + std::fmt::Debug + 'static {
    /// The plain-data configuration (what `to_dict` writes).
    fn config(&self) -> &ModelConfig;

    /// Whether this is a CLI model; CLI models are copied by `Branch::clone`.
    fn is_cli(&self) -> bool {
        false
    }

    /// A copy of this model (used for CLI models on clone).
    fn duplicate(&self) -> Arc<dyn ChatModel>;
}

/// A configuration-only model: a `Branch` can hold and serialize it; the
/// operations layer upgrades it to a connected model on first use.
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
}

#[cfg(test)]
mod tests;
