//! `ModelManager`: the branch's chat and parse models.

use std::sync::Arc;

use crate::model::ChatModel;

/// The chat model and the parse model. When no parse model is chosen the
/// two are the same object (aliased) and serialized once.
#[derive(Clone)]
pub struct ModelManager {
    chat: Arc<dyn ChatModel>,
    parse: Arc<dyn ChatModel>,
}

impl std::fmt::Debug for ModelManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelManager")
            .field("chat", &self.chat)
            .field("parse_is_chat", &self.parse_is_chat())
            .finish()
    }
}

impl ModelManager {
    /// Chat and parse models; `parse = None` aliases the chat model.
    pub fn new(chat: Arc<dyn ChatModel>, parse: Option<Arc<dyn ChatModel>>) -> Self {
        let parse = parse.unwrap_or_else(|| chat.clone());
        Self { chat, parse }
    }

    /// The chat model.
    pub fn chat(&self) -> &Arc<dyn ChatModel> {
        &self.chat
    }

    /// The parse model.
    pub fn parse(&self) -> &Arc<dyn ChatModel> {
        &self.parse
    }

    /// Replaces the chat model. The parse model stays what it was (so a
    /// previously aliased parse model keeps the old object, as in the
    /// reference).
    pub fn set_chat(&mut self, model: Arc<dyn ChatModel>) {
        self.chat = model;
    }

    /// Replaces the parse model.
    pub fn set_parse(&mut self, model: Arc<dyn ChatModel>) {
        self.parse = model;
    }

    /// Whether the parse model is the chat model object.
    pub fn parse_is_chat(&self) -> bool {
        same_model(&self.chat, &self.parse)
    }
}

/// Object identity of two models.
pub fn same_model(a: &Arc<dyn ChatModel>, b: &Arc<dyn ChatModel>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}
