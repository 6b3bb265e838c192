//! `interpret`: rewriting a raw user request into a clearer prompt
//! (operations.md §7). Records nothing.

use std::sync::Arc;

use branch_core::Branch;
use branch_core::model::ChatModel;
use serde_json::{Map, Value, json};

use crate::chat::{ChatOptions, chat};
use crate::error::Result;

const INTERPRET_PROMPT: &str = "You are given a user's raw instruction or question. Your task is to rewrite it into a clearer, more structured prompt for an LLM or system, making any implicit or missing details explicit. Return only the re-written prompt. Do not assume any details not mentioned in the input, nor give additional instruction than what is explicitly stated.";

/// Options of `interpret` (defaults: branch.md §9.6).
#[derive(Debug, Clone)]
pub struct InterpretOptions {
    /// Domain hint (`general`).
    pub domain: String,
    /// Desired style (`concise`).
    pub style: String,
    /// A writing sample, when given.
    pub sample_writing: Option<String>,
    /// The model (→ the branch's chat model).
    pub model: Option<Arc<dyn ChatModel>>,
    /// Provider payload fields; `temperature` defaults to 0.1.
    pub fields: Map<String, Value>,
}

impl Default for InterpretOptions {
    fn default() -> Self {
        Self {
            domain: "general".into(),
            style: "concise".into(),
            sample_writing: None,
            model: None,
            fields: Map::new(),
        }
    }
}

impl InterpretOptions {
    /// Sets the domain hint.
    pub fn domain(mut self, d: impl Into<String>) -> Self {
        self.domain = d.into();
        self
    }

    /// Sets the style.
    pub fn style(mut self, s: impl Into<String>) -> Self {
        self.style = s.into();
        self
    }

    /// Sets a writing sample.
    pub fn sample_writing(mut self, s: impl Into<String>) -> Self {
        self.sample_writing = Some(s.into());
        self
    }

    /// Uses this model.
    pub fn model(mut self, m: Arc<dyn ChatModel>) -> Self {
        self.model = Some(m);
        self
    }

    /// Sets the sampling temperature (the reference's `temperature`
    /// keyword; 0.1 by default).
    ///
    /// ```
    /// use branch_operations::InterpretOptions;
    ///
    /// let o = InterpretOptions::default().domain("math").temperature(0.5);
    /// assert_eq!(o.fields["temperature"], 0.5);
    /// ```
    pub fn temperature(self, t: f64) -> Self {
        self.field("temperature", t)
    }

    /// Adds a provider payload field.
    pub fn field(mut self, k: &str, v: impl Into<Value>) -> Self {
        self.fields.insert(k.to_owned(), v.into());
        self
    }
}

pub(crate) async fn interpret(
    branch: &mut Branch,
    text: &str,
    opts: InterpretOptions,
) -> Result<String> {
    let span = crate::telemetry::verb_span("interpret", branch);
    let mut guidance = format!(
        "Domain hint: {}. Desired style: {}.",
        opts.domain, opts.style
    );
    if let Some(s) = opts.sample_writing.as_deref().filter(|s| !s.is_empty()) {
        guidance.push_str(&format!(" Sample writing: {s}"));
    }
    let mut chat_opts = ChatOptions::new(INTERPRET_PROMPT)
        .guidance(guidance)
        .context(json!([format!("User input: {text}")]));
    let mut fields = Map::new();
    fields.insert("temperature".into(), json!(0.1));
    for (k, v) in opts.fields {
        fields.insert(k, v);
    }
    chat_opts.turn.fields = fields;
    chat_opts.model = opts.model;
    span.run(chat(branch, chat_opts)).await
}
