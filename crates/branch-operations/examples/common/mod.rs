//! The examples' model: `OPENAI_API_KEY`, and optionally
//! `OPENAI_BASE_URL` (any OpenAI-compatible server) and `LIONAGI_MODEL`.

use std::sync::Arc;

use branch_core::Branch;
use branch_core::model::{ChatModel, ModelConfig};
use branch_models::IModel;

/// The model the examples talk to.
pub fn model() -> Result<Arc<dyn ChatModel>, Box<dyn std::error::Error>> {
    let name = std::env::var("LIONAGI_MODEL").unwrap_or_else(|_| "gpt-4.1-mini".into());
    let mut builder = ModelConfig::builder().provider("openai").model(&name);
    if let Ok(url) = std::env::var("OPENAI_BASE_URL") {
        builder = builder.base_url(&url).allow_local_network(true);
    }
    let config = builder.build()?;
    let model = match std::env::var("OPENAI_API_KEY") {
        Ok(key) => IModel::with_api_key(config, key)?,
        Err(_) => IModel::new(config)?,
    };
    Ok(Arc::new(model))
}

/// A branch with a system prompt and the examples' model.
pub fn branch(system: &str) -> Result<Branch, Box<dyn std::error::Error>> {
    Ok(Branch::builder()
        .system(system)
        .chat_model(model()?)
        .build()?)
}
