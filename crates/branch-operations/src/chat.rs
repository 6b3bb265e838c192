//! `chat` and `chat_and_record`: one model call built from the branch
//! history; `chat` records nothing (the call is logged).

use std::sync::Arc;

use branch_core::Branch;
use branch_core::message::Message;
use branch_core::model::{ChatModel, ChatResponse};
use branch_messages::ResponseFormat;
use serde_json::Value;

use crate::error::Result;
use crate::turn::{
    SendOptions, TurnInput, compile, connect_models, connected, instruction_message,
    response_message, send, turn_setters,
};

/// Options of `chat` (defaults: branch.md §9.1).
#[derive(Debug, Clone, Default)]
pub struct ChatOptions {
    /// The instruction and how it is sent.
    pub turn: TurnInput,
    /// The requested response format, rendered into the prompt.
    pub response_format: Option<ResponseFormat>,
    /// Tool schemas offered in the prompt.
    pub tool_schemas: Vec<Value>,
    /// The model (→ the branch's chat model).
    pub model: Option<Arc<dyn ChatModel>>,
    /// Append the estimated token usage to the last message.
    pub include_token_usage_to_model: bool,
}

turn_setters!(ChatOptions);

impl ChatOptions {
    /// Options for this instruction.
    pub fn new(instruction: impl Into<Value>) -> Self {
        Self::default().instruction(instruction)
    }

    /// Renders this response format into the prompt.
    pub fn response_format(mut self, f: ResponseFormat) -> Self {
        self.response_format = Some(f);
        self
    }

    /// Offers these tool schemas in the prompt.
    pub fn tool_schemas(mut self, s: Vec<Value>) -> Self {
        self.tool_schemas = s;
        self
    }

    /// Calls this model instead of the branch's chat model.
    pub fn model(mut self, m: Arc<dyn ChatModel>) -> Self {
        self.model = Some(m);
        self
    }

    /// Appends the estimated token usage to the request.
    pub fn include_token_usage_to_model(mut self, on: bool) -> Self {
        self.include_token_usage_to_model = on;
        self
    }
}

/// The unrecorded result of one call.
#[derive(Debug, Clone)]
pub(crate) struct ChatTurn {
    pub instruction: Message,
    pub response: Message,
    /// The reply text.
    pub text: String,
    /// Native tool calls of the reply.
    pub tool_calls: Vec<branch_core::model::ToolCall>,
    /// The agent session a CLI model's reply ran in, for the branch's
    /// metadata once the turn is recorded.
    pub agent_session: Option<String>,
}

/// One call: compile, send, log. Records nothing.
///
/// The instruction is made at once, and of the options only what the call
/// still reads is kept (its progression, payload fields and context
/// providers): the rest is dropped before the first wait, not held in the
/// turn's future across every one. The returned future is a block, so it
/// holds each of those once.
pub(crate) fn chat_turn<'a>(
    branch: &'a mut Branch,
    opts: ChatOptions,
    send_opts: SendOptions<'a>,
) -> impl Future<Output = Result<ChatTurn>> + 'a {
    let ChatOptions {
        mut turn,
        response_format,
        tool_schemas,
        model,
        include_token_usage_to_model,
    } = opts;
    let content = turn.take_content(tool_schemas, response_format.as_ref());
    drop(response_format);
    let instruction = instruction_message(branch, &turn, content);
    let TurnInput {
        progression,
        fields,
        context_providers,
        ..
    } = turn;
    async move {
        connect_models(branch)?;
        let model = match &model {
            Some(m) => connected(m)?,
            None => branch.chat_model().clone(),
        };
        let send_opts = SendOptions {
            progression: send_opts.progression.or(progression.as_deref()),
            providers: &context_providers,
            token_note: send_opts.token_note || include_token_usage_to_model,
            ..send_opts
        };
        let request = compile(branch, &model, &instruction, &fields, &send_opts).await?;
        let raw = send(branch, &model, request, send_opts.caller).await?;
        let agent_session = (send_opts.caller.is_none() && model.is_cli())
            .then(|| crate::cli_call::session_of(&raw.raw.peek()))
            .flatten();
        let ChatResponse {
            text,
            tool_calls,
            raw,
            raw_text,
            reasoning,
            ..
        } = raw;
        // The raw reply moves into the message's metadata (no copy), as the
        // bytes it was read from when there are some.
        let response = response_message(branch, &text, raw, raw_text, &reasoning);
        Ok(ChatTurn {
            instruction,
            response,
            text,
            tool_calls,
            agent_session,
        })
    }
}

/// The public verbs render a typed response format as the reference's
/// `chat` does: the model's schema titled `<Title>Request`.
fn as_requested(mut opts: ChatOptions) -> ChatOptions {
    opts.response_format = opts
        .response_format
        .as_ref()
        .map(|f| crate::format::retitled(f, "Request"));
    opts
}

pub(crate) async fn chat(branch: &mut Branch, opts: ChatOptions) -> Result<String> {
    let opts = as_requested(opts);
    let span = crate::telemetry::verb_span("chat", branch);
    let t = span
        .run(chat_turn(branch, opts, SendOptions::default()))
        .await?;
    Ok(t.text)
}

pub(crate) async fn chat_messages(
    branch: &mut Branch,
    opts: ChatOptions,
) -> Result<(Message, Message)> {
    let opts = as_requested(opts);
    let span = crate::telemetry::verb_span("chat", branch);
    let t = span
        .run(chat_turn(branch, opts, SendOptions::default()))
        .await?;
    Ok((t.instruction, t.response))
}

pub(crate) async fn chat_and_record(branch: &mut Branch, opts: ChatOptions) -> Result<String> {
    let opts = as_requested(opts);
    let span = crate::telemetry::verb_span("chat", branch);
    let t = span
        .run(chat_turn(branch, opts, SendOptions::default()))
        .await?;
    crate::turn::commit(branch, vec![t.instruction, t.response]);
    crate::turn::keep_agent_session(branch, t.agent_session);
    Ok(t.text)
}
