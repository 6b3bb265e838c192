//! `Branch.connect`: a model registered as a tool. The tool's parameters
//! are the model's request schema (its endpoint's request model, as the
//! reference's `imodel.request_options`: OpenAI's chat request, Anthropic's
//! Messages request; OpenAI's chat request for a model without one);
//! calling it sends the arguments as one request to the model and returns
//! the provider's raw reply.

use std::sync::Arc;

use branch_actions::DynamicTool;
use branch_core::Branch;
use branch_core::model::{ChatMessage, ChatModel, ChatRequest, openai_chat_request_schema};
use serde_json::Value;

use crate::error::{OperationError, Result};

/// A request from the tool's arguments: `messages` (each `{"role",
/// "content", ...}`) plus every other keyword as a call field. Model
/// output is hostile: a malformed message list is refused, not guessed.
fn request_of(args: Value) -> std::result::Result<ChatRequest, String> {
    let Value::Object(mut m) = args else {
        return Err("the arguments must be an object".into());
    };
    let messages = match m.shift_remove("messages") {
        Some(Value::Array(list)) => list,
        Some(_) => return Err("`messages` must be a list".into()),
        None => return Err("`messages` is required".into()),
    };
    let mut out = Vec::with_capacity(messages.len());
    for (i, msg) in messages.into_iter().enumerate() {
        let Value::Object(mut msg) = msg else {
            return Err(format!("`messages[{i}]` must be an object"));
        };
        let role = match msg.shift_remove("role") {
            Some(Value::String(r)) => r,
            _ => return Err(format!("`messages[{i}].role` must be a string")),
        };
        let content = msg.shift_remove("content").unwrap_or(Value::Null);
        let mut cm = ChatMessage::new(&role, content);
        cm.extra = msg;
        out.push(cm);
    }
    // The model's own name wins over one the arguments carry.
    m.shift_remove("model");
    let mut request = ChatRequest::new(out);
    request.fields = m;
    Ok(request)
}

/// Registers `model` as the tool `name` (the reference's
/// `Branch.connect(imodel=..., name=..., description=..., update=...)`).
/// A name already registered is refused unless `update`.
pub(crate) fn connect(
    branch: &mut Branch,
    model: Arc<dyn ChatModel>,
    name: &str,
    description: Option<&str>,
    update: bool,
) -> Result<()> {
    if !update && branch.acts().contains(name) {
        return Err(OperationError::InvalidArgument {
            what: "connect",
            message: format!("Tool with name '{name}' already exists."),
        });
    }
    let schema = match model.config().endpoint().request_options.schema() {
        Some(s) => s.clone(),
        None => openai_chat_request_schema().clone(),
    };
    let tool = DynamicTool::new(
        name,
        description.map(str::to_owned),
        schema,
        move |args: Value| {
            let model = model.clone();
            async move {
                let request = request_of(args)?;
                // Logged in the branch as the reference's connected model
                // logs its call, before the tool call's own log; a call
                // refused before sending was never made.
                let body = model.request_body(&request).ok();
                let started_at = branch_core::model::now_timestamp();
                let t0 = std::time::Instant::now();
                let mut result = match &body {
                    Some(b) => model.chat_with_body(request, b).await,
                    None => model.chat(request).await,
                };
                if !matches!(&result, Err(e) if e.kind.is_refused_before_sending()) {
                    let duration = t0.elapsed().as_secs_f64();
                    let vouched = model.keeps_reply_bytes();
                    branch_core::tool_logs::record(crate::call_log::api_call_log(
                        body.as_ref(),
                        &mut result,
                        started_at,
                        duration,
                        vouched,
                    ));
                }
                result
                    .map(|r| r.raw.into_value())
                    .map_err(|e| e.to_string())
            }
        },
    )
    .map_err(|e| OperationError::InvalidArgument {
        what: "connect",
        message: e.to_string(),
    })?;
    branch
        .acts_mut()
        .register(tool.into_tool(), true)
        .map_err(|e| OperationError::InvalidArgument {
            what: "connect",
            message: e.to_string(),
        })?;
    Ok(())
}
