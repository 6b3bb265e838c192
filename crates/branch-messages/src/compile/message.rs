//! The compiled request messages and their wire form.

use branch_core::model::{ChatMessage, ReasoningBlock};
use serde_json::{Map, Value, json};

use crate::render::RenderedContent;

/// The role of a compiled message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestRole {
    /// The system prompt (native tool mode only, when the history does not
    /// start with an instruction to carry it).
    System,
    /// An instruction.
    User,
    /// A model reply.
    Assistant,
    /// A tool result (native tool mode only).
    Tool,
}

impl RequestRole {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Tool => "tool",
        }
    }
}

/// One message of the request's `messages` list.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestMessage {
    /// Who speaks.
    pub role: RequestRole,
    /// What is said.
    pub content: RenderedContent,
    /// Native tool calls of an assistant message, in the OpenAI shape
    /// `{"id", "type": "function", "function": {"name", "arguments"}}`
    /// (arguments as JSON text). Empty in prompt mode.
    pub tool_calls: Vec<Value>,
    /// The call a tool message answers.
    pub tool_call_id: Option<String>,
    /// The reasoning recorded with an assistant reply (its
    /// `metadata.reasoning`), for the dialects that send it back; never
    /// part of [`Self::to_value`].
    pub reasoning: Vec<ReasoningBlock>,
}

impl RequestMessage {
    /// A message with only a role and content.
    pub fn new(role: RequestRole, content: RenderedContent) -> Self {
        Self {
            role,
            content,
            tool_calls: Vec::new(),
            tool_call_id: None,
            reasoning: Vec::new(),
        }
    }

    /// The content value; an assistant message that only calls tools has
    /// `null` content.
    fn content_value(&self) -> Value {
        if !self.tool_calls.is_empty() && self.content.is_empty() {
            Value::Null
        } else {
            self.content.to_value()
        }
    }

    fn extra(&self) -> Map<String, Value> {
        let mut m = Map::new();
        if !self.tool_calls.is_empty() {
            m.insert("tool_calls".into(), Value::Array(self.tool_calls.clone()));
        }
        if let Some(id) = &self.tool_call_id {
            m.insert("tool_call_id".into(), Value::String(id.clone()));
        }
        m
    }

    /// `{"role": ..., "content": ...}` plus `tool_calls` / `tool_call_id`
    /// when present.
    pub fn to_value(&self) -> Value {
        let mut v = json!({"role": self.role.as_str(), "content": self.content_value()});
        if let Value::Object(o) = &mut v {
            o.extend(self.extra());
        }
        v
    }

    /// The model seam's message type.
    pub fn to_chat_message(&self) -> ChatMessage {
        let mut m = ChatMessage::new(self.role.as_str(), self.content_value());
        m.extra = self.extra();
        m.reasoning.clone_from(&self.reasoning);
        m
    }
}

impl From<RequestMessage> for ChatMessage {
    /// Moves the content over (no copy of the rendered text).
    fn from(m: RequestMessage) -> Self {
        let content = if !m.tool_calls.is_empty() && m.content.is_empty() {
            Value::Null
        } else {
            m.content.into_value()
        };
        let mut extra = Map::new();
        if !m.tool_calls.is_empty() {
            extra.insert("tool_calls".into(), Value::Array(m.tool_calls));
        }
        if let Some(id) = m.tool_call_id {
            extra.insert("tool_call_id".into(), Value::String(id));
        }
        ChatMessage {
            role: m.role.as_str().into(),
            content,
            extra,
            reasoning: m.reasoning,
        }
    }
}
