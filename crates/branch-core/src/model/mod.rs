//! TEMPORARY interface stub, replaced by the model-config work.
use std::sync::Arc;
use serde_json::Value;
use uuid::Uuid;

/// Stub.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig { id: Uuid, provider: String, model: Option<String>, raw: Value }
/// Stub.
#[derive(Debug, thiserror::Error)]
#[error("model config: {0}")]
pub struct ModelConfigError(pub String);
impl ModelConfig {
    /// Stub.
    pub fn new(provider: &str, model: &str) -> Result<Self, ModelConfigError> { Ok(Self { id: Uuid::new_v4(), provider: provider.into(), model: Some(model.into()), raw: Value::Null }) }
    /// Stub.
    pub fn from_model_string(spec: &str) -> Result<Self, ModelConfigError> { match spec.split_once('/') { Some((p, m)) => Self::new(p, m), None => Self::new("openai", spec) } }
    /// Stub.
    pub fn default_chat() -> Result<Self, ModelConfigError> { Self::new("openai", "gpt-4.1-mini") }
    /// Stub.
    pub fn from_dict(value: &Value) -> Result<Self, ModelConfigError> { Ok(Self { id: value.get("id").and_then(|v| v.as_str()).and_then(|s| s.parse().ok()).unwrap_or_else(Uuid::new_v4), provider: "openai".into(), model: None, raw: value.clone() }) }
    /// Stub.
    pub fn to_dict(&self, _include_request_options: bool, _include_processor_config: bool) -> Value { if self.raw.is_null() { serde_json::json!({"id": self.id.to_string(), "provider": self.provider, "model": self.model}) } else { self.raw.clone() } }
    /// Stub.
    pub fn provider(&self) -> &str { &self.provider }
    /// Stub.
    pub fn model_name(&self) -> Option<&str> { self.model.as_deref() }
    /// Stub.
    pub fn id(&self) -> Uuid { self.id }
}
/// Stub.
pub trait ChatModel: Send + Sync + std::fmt::Debug + 'static {
    /// Stub.
    fn config(&self) -> &ModelConfig;
    /// Stub.
    fn is_cli(&self) -> bool { false }
    /// Stub.
    fn duplicate(&self) -> Arc<dyn ChatModel>;
}
impl ChatModel for ModelConfig {
    fn config(&self) -> &ModelConfig { self }
    fn duplicate(&self) -> Arc<dyn ChatModel> { Arc::new(self.clone()) }
}
