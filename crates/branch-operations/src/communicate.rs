//! `communicate`: one recorded turn, optionally parsed into a structure
//! (operations.md §3).

use std::sync::Arc;

use branch_core::Branch;
use branch_core::model::ChatModel;
use branch_messages::ResponseFormat;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::chat::{ChatOptions, ChatTurn, chat_turn};
use branch_core::message::Message;

use crate::error::{Committed, ParseFailure, Result};
use crate::format::{native_response_format, retitled};
use crate::fuzzy::Unmatched;
use crate::parse::{OnParseFailure, ParseOptions, Parsed, decode, outcome, parse_with_repairs};
use crate::turn::{SendOptions, TurnInput, commit, turn_setters};

/// Options of `communicate` (defaults: branch.md §9.4).
#[derive(Debug, Clone)]
pub struct CommunicateOptions {
    /// The instruction and how it is sent.
    pub turn: TurnInput,
    /// Parse the reply into this format (rendered into the prompt).
    pub response_format: Option<ResponseFormat>,
    /// Without a response format: fuzzily read these fields from the
    /// reply (not rendered into the prompt).
    pub request_fields: Option<Vec<String>>,
    /// The chat model (→ the branch's).
    pub chat_model: Option<Arc<dyn ChatModel>>,
    /// The repair model (→ the branch's parse model).
    pub parse_model: Option<Arc<dyn ChatModel>>,
    /// Return the text without parsing.
    pub skip_validation: bool,
    /// Repair retries (values above 5 are lowered to 5).
    pub num_parse_retries: usize,
    /// Clear the history (except the system message) first.
    pub clear_messages: bool,
    /// What a final parse failure gives (`Raise` by default).
    pub on_parse_failure: OnParseFailure,
    /// Append the estimated token usage to the request.
    pub include_token_usage_to_model: bool,
    /// Waits between repairs (first, factor).
    pub repair_backoff: (std::time::Duration, f64),
    /// Native structured output: the requested structure also goes to the
    /// provider as `response_format` (`json_schema`), which OpenAI, llama.cpp
    /// and the embedded model follow; the reply is still parsed (and
    /// repaired) as usual. Off by default: the reference sends no such field.
    /// A `response_format` set as a payload field wins.
    pub native_format: bool,
}

impl Default for CommunicateOptions {
    fn default() -> Self {
        Self {
            turn: TurnInput::default(),
            response_format: None,
            request_fields: None,
            chat_model: None,
            parse_model: None,
            skip_validation: false,
            num_parse_retries: 3,
            clear_messages: false,
            on_parse_failure: OnParseFailure::Raise,
            include_token_usage_to_model: false,
            repair_backoff: (std::time::Duration::from_secs(1), 1.85),
            native_format: false,
        }
    }
}

turn_setters!(CommunicateOptions);
crate::options::shared_setters!(CommunicateOptions: native_format, chat_model, parse_model, skip_validation, num_parse_retries, on_parse_failure, repair_backoff, include_token_usage_to_model, clear_messages);

impl CommunicateOptions {
    /// Options for this instruction.
    pub fn new(instruction: impl Into<Value>) -> Self {
        Self::default().instruction(instruction)
    }

    /// Parses the reply into this format.
    pub fn response_format(mut self, f: ResponseFormat) -> Self {
        self.response_format = Some(f);
        self
    }

    /// Parses the reply into the schema of `T`.
    pub fn response_type<T: schemars::JsonSchema>(self) -> Self {
        self.response_format(crate::format::format_of::<T>())
    }

    /// Reads these fields from the reply.
    pub fn request_fields<I: IntoIterator<Item = S>, S: Into<String>>(mut self, f: I) -> Self {
        self.request_fields = Some(f.into_iter().map(Into::into).collect());
        self
    }
}

/// What `communicate` returns.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// The reply text.
    Text(String),
    /// The parsed structure (a response format or request fields).
    Structured(Value),
    /// A reply that did not parse (with a non-raising failure policy).
    Unparsed(crate::parse::Unparsed),
    /// Nothing (parse failure with `ReturnNone`).
    Nothing,
}

impl Reply {
    /// The text of a text reply.
    pub fn text(&self) -> Option<&str> {
        match self {
            Reply::Text(t) => Some(t),
            _ => None,
        }
    }

    /// The structure of a parsed reply.
    pub fn structured(&self) -> Option<&Value> {
        match self {
            Reply::Structured(v) => Some(v),
            _ => None,
        }
    }
}

/// The internal middle: one turn built off to the side and its reply
/// parsed; nothing is committed here.
pub(crate) struct Communicated {
    /// Instruction and AssistantResponse, not yet in the branch.
    pub messages: Vec<Message>,
    /// The reply text.
    pub text: String,
    /// The parse, when a format was requested and validation not skipped.
    pub parsed: Option<std::result::Result<Map<String, Value>, ParseFailure>>,
    /// The fields read with `request_fields`.
    pub fields: Option<Value>,
    /// The agent session a CLI model's reply ran in (see `ChatTurn`).
    pub agent_session: Option<String>,
    /// Native tool calls of the reply.
    pub tool_calls: Vec<branch_core::model::ToolCall>,
    /// The ActionResponse messages of calls the middle already ran and
    /// recorded (`run`'s native calls), in the order they were recorded.
    pub acted: Vec<Message>,
    /// Clear the history (but the system message) before committing.
    pub clear_first: bool,
}

/// Commits a middle's turn (clearing first when asked).
pub(crate) fn commit_turn(branch: &mut Branch, clear_first: bool, messages: Vec<Message>) -> usize {
    if clear_first {
        branch.msgs_mut().clear_messages();
    }
    commit(branch, messages)
}

/// How the middle parses.
pub(crate) struct Middle<'a> {
    pub tool_schemas: Vec<Value>,
    pub rendered_format: Option<ResponseFormat>,
    pub unmatched: Unmatched,
    pub token_note: bool,
    pub repair_model: Option<Arc<dyn ChatModel>>,
    pub native_tools: Option<Value>,
    pub react_context: Option<&'a [Value]>,
    pub caller: Option<&'a dyn crate::middle::CallModel>,
}

impl Middle<'_> {
    /// `communicate`'s middle: no tools, the requested format (if any)
    /// parsed leniently.
    fn of_communicate(rendered_format: Option<ResponseFormat>) -> Self {
        Middle {
            tool_schemas: Vec::new(),
            rendered_format,
            unmatched: Unmatched::Ignore,
            token_note: false,
            repair_model: None,
            native_tools: None,
            react_context: None,
            caller: None,
        }
    }
}

/// Sends `opts`' turn input, which it takes out of them: what the caller
/// reads afterwards (the failure policy, the parse settings) stays.
///
/// A block rather than an `async fn`: an `async fn` moves its arguments
/// into locals of its state, so the state would hold them twice; the block
/// uses its captures where they lie. The middle is borrowed from the
/// caller's state for the same reason: every turn boxes this future, and
/// under 1,032 bytes the allocator serves it from its per-thread cache.
#[allow(clippy::manual_async_fn)] // An `async fn` holds its arguments twice (see above).
pub(crate) fn communicate_inner<'a, 'm>(
    branch: &'a mut Branch,
    opts: &'a mut CommunicateOptions,
    middle: &'a mut Middle<'m>,
) -> impl Future<Output = Result<Communicated>> + 'a {
    async move {
        // Clearing is deferred to the commit (a failed turn must leave the
        // history as it was); meanwhile the request is compiled from the
        // system message alone (an id not in the pile is skipped).
        let cleared: Option<Vec<uuid::Uuid>> = opts
            .clear_messages
            .then(|| vec![branch.system().map_or(uuid::Uuid::nil(), Message::id)]);
        let turn = std::mem::take(&mut opts.turn);
        let chat = chat_options(turn, opts, middle, cleared.as_deref());
        let send_opts = SendOptions {
            react_context: middle.react_context,
            native_tools: middle.native_tools.is_some(),
            caller: middle.caller,
            ..SendOptions::default()
        };
        // Taken apart at once: a result kept whole would hold its room
        // across the parse below.
        let ChatTurn {
            instruction,
            response,
            text,
            tool_calls,
            agent_session,
        } = chat_turn(branch, chat, send_opts).await?;
        let mut messages = vec![instruction, response];
        if opts.num_parse_retries > 5 {
            tracing::warn!(
                requested = opts.num_parse_retries,
                "num_parse_retries lowered to 5"
            );
        }
        let retries = opts.num_parse_retries.min(5);
        let mut parsed = None;
        let mut fields = None;
        if opts.skip_validation {
        } else if let Some(format) = middle.rendered_format.take() {
            let mut popts = ParseOptions::new(format)
                .unmatched(middle.unmatched)
                .backoff(opts.repair_backoff.0, opts.repair_backoff.1);
            popts.model = Some(
                match middle
                    .repair_model
                    .take()
                    .or_else(|| opts.parse_model.clone())
                {
                    Some(m) => m,
                    None => branch.parse_model().clone(),
                },
            );
            // Boxed: only a structured turn takes this path, and inline its
            // state would set the size of every turn's future.
            let repaired = Box::pin(parse_with_repairs(
                branch,
                &text,
                &popts,
                retries,
                &messages,
                cleared.as_deref(),
                middle.react_context,
            ))
            .await?;
            if let Some(repair) = &repaired.repair_response {
                let meta = &mut messages[1].element.metadata;
                let first = meta.insert("model_response".into(), repair.clone());
                if let Some(first) = first {
                    meta.insert("original_model_response".into(), first);
                }
            }
            parsed = Some(repaired.result);
        } else if let Some(names) = &opts.request_fields {
            let map: Map<String, Value> = names
                .iter()
                .map(|f| (f.clone(), Value::String(String::new())))
                .collect();
            let popts = ParseOptions::new(ResponseFormat::Fields(map)).unmatched(Unmatched::Force);
            fields = Some(match crate::parse::parse_local(&text, &popts) {
                Ok(obj) => Value::Object(obj.into_iter().filter(|(_, v)| !v.is_null()).collect()),
                Err(_) => Value::Object(Map::new()),
            });
        }
        Ok(Communicated {
            messages,
            text,
            parsed,
            fields,
            tool_calls,
            agent_session,
            acted: Vec::new(),
            clear_first: cleared.is_some(),
        })
    }
}

/// The turn's chat options: the request's own, with the native tools and
/// response format the middle adds. Built outside `communicate_inner`'s
/// state, which would otherwise keep the turn input and the options made
/// from it side by side.
fn chat_options(
    mut turn: TurnInput,
    opts: &CommunicateOptions,
    middle: &mut Middle<'_>,
    cleared: Option<&[uuid::Uuid]>,
) -> ChatOptions {
    if let Some(c) = cleared {
        turn.progression = Some(c.to_vec());
    }
    if let Some(tools) = &middle.native_tools {
        turn.fields.insert("tools".into(), tools.clone());
    }
    if let (true, Some(format)) = (opts.native_format, &middle.rendered_format) {
        turn.fields
            .entry("response_format")
            .or_insert_with(|| native_response_format(format));
    }
    ChatOptions {
        turn,
        response_format: middle.rendered_format.clone(),
        tool_schemas: std::mem::take(&mut middle.tool_schemas),
        model: opts.chat_model.clone(),
        include_token_usage_to_model: opts.include_token_usage_to_model || middle.token_note,
    }
}

pub(crate) async fn communicate(
    branch: &mut Branch,
    mut opts: Box<CommunicateOptions>,
) -> Result<Reply> {
    let span = crate::telemetry::verb_span("communicate", branch);
    let format = opts
        .response_format
        .as_ref()
        .map(|f| retitled(f, "Request"));
    let mut middle = Middle::of_communicate(format.clone());
    let c = span
        .run(communicate_inner(branch, &mut opts, &mut middle))
        .await?;
    let committed = commit_turn(branch, c.clear_first, c.messages);
    crate::turn::keep_agent_session(branch, c.agent_session);
    let reply = match (c.parsed, c.fields, format) {
        (Some(result), _, Some(format)) => {
            match outcome(&c.text, result, opts.on_parse_failure, &format) {
                Ok(Parsed::Value(v)) => Reply::Structured(v),
                Ok(Parsed::Unparsed(u)) => Reply::Unparsed(u),
                Ok(Parsed::Nothing) => Reply::Nothing,
                Ok(Parsed::Unvalidated(t)) => Reply::Text(t),
                Err(e) => {
                    return Err(e.with_committed(Committed {
                        messages: committed,
                        turns: 1,
                    }));
                }
            }
        }
        (_, Some(fields), _) => Reply::Structured(fields),
        _ => Reply::Text(c.text),
    };
    Ok(reply)
}

pub(crate) async fn communicate_as<T: DeserializeOwned + schemars::JsonSchema>(
    branch: &mut Branch,
    mut opts: Box<CommunicateOptions>,
) -> Result<Parsed<T>> {
    let format = opts
        .response_format
        .get_or_insert_with(crate::format::format_of::<T>)
        .clone();
    let on_failure = opts.on_parse_failure;
    let reply = communicate(branch, opts).await?;
    let (parsed, text) = match reply {
        Reply::Structured(v) => (Parsed::Value(v), String::new()),
        Reply::Text(t) => (
            Parsed::Unparsed(crate::parse::Unparsed {
                text: t.clone(),
                failure: ParseFailure::Extraction,
            }),
            t,
        ),
        Reply::Unparsed(u) => {
            let t = u.text.clone();
            (Parsed::Unparsed(u), t)
        }
        Reply::Nothing => (Parsed::Nothing, String::new()),
    };
    decode(parsed, &text, on_failure, &format)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The state of one turn, boxed once per turn by its span (see
    /// `tests/future_sizes.rs` for why the size matters). 4,360 bytes
    /// before the parse path was boxed and the turn's options were built
    /// outside it; 2,136 while it was an `async fn` holding its middle (and
    /// its chat options, and the call's request) more than once.
    #[test]
    fn a_turn_state_stays_small() {
        let mut branch = Branch::builder().system("s").build().expect("branch");
        let mut opts = CommunicateOptions::new("q");
        let mut middle = Middle::of_communicate(None);
        let turn = std::mem::size_of_val(&communicate_inner(&mut branch, &mut opts, &mut middle));
        // Boxed by every turn: see `tests/future_sizes.rs` for the 1,032.
        assert!(turn <= 1032, "communicate_inner: {turn} bytes");
    }
}
