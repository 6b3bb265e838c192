//! What ReAct's final answer does differently from its rounds: the
//! reference's `response_kwargs`.

use std::sync::Arc;

use branch_core::Participant;
use branch_core::message::ImageDetail;
use branch_core::model::ChatModel;
use serde_json::{Map, Value};

use crate::operate::OperateOptions;
use crate::parse::OnParseFailure;

/// Options of ReAct's final-answer turn only (the reference's
/// `response_kwargs`). What is not set here is the run's own.
#[derive(Debug, Clone, Default)]
pub struct AnswerOptions {
    /// The answer instruction's guidance instead of the task's.
    pub guidance: Option<Value>,
    /// The answer instruction's context instead of the task's; the
    /// request then shows the earlier rounds' context as they stored it.
    pub context: Option<Vec<Value>>,
    /// The answer's model instead of the run's (its repairs still go to
    /// the run's model).
    pub model: Option<Arc<dyn ChatModel>>,
    /// The provider payload fields (`temperature`, ...) of the answer,
    /// instead of the task's (the reference's `imodel_kw`).
    pub fields: Option<Map<String, Value>>,
    /// Ask for a `reason` beside the answer.
    pub reason: bool,
    /// Extra fields of the answer's structure (name → property schema).
    pub field_models: Option<Map<String, Value>>,
    /// Keep the reply's text without parsing it.
    pub skip_validation: bool,
    /// What a final parse failure of the answer gives (→ the text).
    pub on_parse_failure: Option<OnParseFailure>,
    /// The answer instruction's sender instead of the task's.
    pub sender: Option<Participant>,
    /// The answer instruction's recipient instead of the task's.
    pub recipient: Option<Participant>,
    /// The answer instruction rendered as this text alone.
    pub plain_content: Option<String>,
    /// Images sent with the answer instruction (the task's go with the
    /// first round only).
    pub images: Vec<String>,
    /// The answer instruction's image detail.
    pub image_detail: Option<ImageDetail>,
    /// Tool schemas shown with the answer instruction instead of the
    /// run's (an empty list shows none).
    pub tool_schemas: Option<Vec<Value>>,
}

impl AnswerOptions {
    /// Sets the answer's guidance.
    pub fn guidance(mut self, v: impl Into<Value>) -> Self {
        self.guidance = Some(v.into());
        self
    }

    /// Sets the answer's context (one item, or each item of a list).
    pub fn context(mut self, v: impl Into<Value>) -> Self {
        self.context = Some(match v.into() {
            Value::Array(items) => items,
            one => vec![one],
        });
        self
    }

    /// Sets the answer's model.
    pub fn model(mut self, m: Arc<dyn ChatModel>) -> Self {
        self.model = Some(m);
        self
    }

    /// Adds a provider payload field; the answer sends these instead of
    /// the task's.
    pub fn field(mut self, k: &str, v: impl Into<Value>) -> Self {
        self.fields
            .get_or_insert_with(Map::new)
            .insert(k.to_owned(), v.into());
        self
    }

    /// Asks for a reason beside the answer.
    pub fn reason(mut self, on: bool) -> Self {
        self.reason = on;
        self
    }

    /// Adds a field (a JSON schema) to the answer's structure.
    pub fn field_model(mut self, name: impl Into<String>, schema: Value) -> Self {
        crate::field_models::add_to(&mut self.field_models, name.into(), schema);
        self
    }

    /// Keeps the answer's text without parsing it.
    pub fn skip_validation(mut self, on: bool) -> Self {
        self.skip_validation = on;
        self
    }

    /// Sets what a final parse failure of the answer gives.
    pub fn on_parse_failure(mut self, v: OnParseFailure) -> Self {
        self.on_parse_failure = Some(v);
        self
    }

    /// Sets the answer instruction's sender.
    pub fn sender(mut self, v: impl Into<Participant>) -> Self {
        self.sender = Some(v.into());
        self
    }

    /// Sets the answer instruction's recipient.
    pub fn recipient(mut self, v: impl Into<Participant>) -> Self {
        self.recipient = Some(v.into());
        self
    }

    /// Renders the answer instruction as this text alone.
    pub fn plain_content(mut self, v: impl Into<String>) -> Self {
        self.plain_content = Some(v.into());
        self
    }

    /// Sends these images with the answer instruction.
    pub fn images(mut self, v: Vec<String>) -> Self {
        self.images = v;
        self
    }

    /// Sets the answer instruction's image detail.
    pub fn image_detail(mut self, v: ImageDetail) -> Self {
        self.image_detail = Some(v);
        self
    }

    /// Shows these tool schemas with the answer instruction instead of
    /// the run's.
    pub fn tool_schemas(mut self, v: Vec<Value>) -> Self {
        self.tool_schemas = Some(v);
        self
    }

    /// The answer turn's options: `base` (the run's) with these applied.
    pub(crate) fn apply(&self, mut base: OperateOptions) -> OperateOptions {
        if let Some(g) = &self.guidance {
            base.turn.guidance = Some(g.clone());
        }
        if let Some(c) = &self.context {
            base.turn.context = c.clone();
            // Its own context, not the task's: nothing to show once.
            base.react_context = None;
        }
        if let Some(m) = &self.model {
            base.chat_model = Some(m.clone());
        }
        if let Some(f) = &self.fields {
            base.turn.fields = f.clone();
        }
        if let Some(v) = &self.sender {
            base.turn.sender = Some(v.clone());
        }
        if let Some(v) = &self.recipient {
            base.turn.recipient = Some(v.clone());
        }
        if let Some(v) = &self.plain_content {
            base.turn.plain_content = Some(v.clone());
        }
        if !self.images.is_empty() {
            base.turn.images = self.images.clone();
        }
        if let Some(d) = self.image_detail {
            base.turn.image_detail = Some(d);
        }
        if let Some(v) = &self.tool_schemas {
            base.tool_schemas = v.clone();
        }
        base.reason = self.reason;
        base.field_models = self.field_models.clone();
        base.skip_validation = self.skip_validation;
        if let Some(p) = self.on_parse_failure {
            base.on_parse_failure = p;
        }
        base
    }
}
