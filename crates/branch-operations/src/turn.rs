//! What every model-calling verb shares: connecting configuration-only
//! models, building the turn's instruction, compiling and sending the
//! request, logging the API call, and building the messages that record
//! the turn (added to the branch only once the turn has succeeded).

use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use branch_core::branch::same_model;
use branch_core::message::{ImageDetail, InstructionContent, Message, MessageManager};
use branch_core::model::{
    ChatModel, ChatRequest, ChatResponse, LazyJson, REASONING_METADATA_KEY, ReasoningBlock,
};
use branch_core::{Branch, Metadata, ParsedJson, Participant, Role};
use branch_messages::{
    CompileOptions, RenderCache, ResponseFormat, ToolMode, compile_request_cached, token_usage_note,
};
use branch_providers::ProviderEntry;
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::error::{OperationError, Result};

/// Upgrades configuration-only models to connected ones, keeping a parse
/// model that aliases the chat model aliased.
pub(crate) fn connect_models(branch: &mut Branch) -> Result<()> {
    refuse_while_paused(branch)?;
    let chat = branch.chat_model().clone();
    let parse = branch.parse_model().clone();
    let aliased = same_model(&chat, &parse);
    if !chat.is_connected() {
        let c = branch_models::connect(&chat).map_err(OperationError::api)?;
        branch.set_chat_model(c.clone());
        if aliased {
            branch.set_parse_model(c);
        }
    }
    if !aliased && !parse.is_connected() {
        let p = branch_models::connect(&parse).map_err(OperationError::api)?;
        branch.set_parse_model(p);
    }
    Ok(())
}

/// A model given to a single call: connected if needed, never stored.
pub(crate) fn connected(model: &Arc<dyn ChatModel>) -> Result<Arc<dyn ChatModel>> {
    branch_models::connect(model).map_err(OperationError::api)
}

/// The instruction of one turn and how it is sent.
#[derive(Debug, Clone, Default)]
pub struct TurnInput {
    /// The instruction (normally a string).
    pub instruction: Option<Value>,
    /// Guidance.
    pub guidance: Option<Value>,
    /// Context items (a non-list value is one item).
    pub context: Vec<Value>,
    /// Replaces the whole rendering when non-empty.
    pub plain_content: Option<String>,
    /// Image URLs, data URIs or raw base64.
    pub images: Vec<String>,
    /// Image detail (`auto` by default, except in `operate` without
    /// images, which, as the reference, leaves it unset unless given).
    pub image_detail: Option<ImageDetail>,
    /// Leave the image detail unset when not given (`operate`).
    pub(crate) no_default_detail: bool,
    /// The instruction's sender (→ the branch user, else `"user"`).
    pub sender: Option<Participant>,
    /// The instruction's recipient (→ the branch id).
    pub recipient: Option<Participant>,
    /// Compile from these message ids instead of the branch's progression.
    pub progression: Option<Vec<Uuid>>,
    /// Provider payload fields (`temperature`, ...).
    pub fields: Map<String, Value>,
    /// Context providers for this call only, run after the branch's own
    /// (they share the turn's budget).
    pub context_providers: Vec<ProviderEntry>,
}

/// Builder-style setters shared by the option structs that embed a
/// [`TurnInput`] as `turn`.
macro_rules! turn_setters {
    ($t:ty) => {
        $crate::turn::turn_setters!($t, keep_blank);
    };
    (@given keep_blank, $v:expr) => {
        Some($v)
    };
    (@given blank_is_none, $v:expr) => {
        $crate::turn::unless_blank($v)
    };
    // `blank_is_none`: a guidance or context that is a text of white space
    // only is none (`operate`, see `unless_blank`).
    ($t:ty, $blank:ident) => {
        impl $t {
            /// Sets the instruction.
            pub fn instruction(mut self, v: impl Into<serde_json::Value>) -> Self {
                self.turn.instruction = Some(v.into());
                self
            }
            /// Sets the guidance (for `operate`, a text of white space
            /// only is none).
            pub fn guidance(mut self, v: impl Into<serde_json::Value>) -> Self {
                self.turn.guidance = $crate::turn::turn_setters!(@given $blank, v.into());
                self
            }
            /// Sets the context: a list is the item list, anything else
            /// one item (for `operate`, a text of white space only is no
            /// item).
            pub fn context(mut self, v: impl Into<serde_json::Value>) -> Self {
                self.turn.context = match $crate::turn::turn_setters!(@given $blank, v.into()) {
                    Some(serde_json::Value::Array(a)) => a,
                    None | Some(serde_json::Value::Null) => Vec::new(),
                    Some(other) => vec![other],
                };
                self
            }
            /// Sends this text instead of the rendered instruction.
            pub fn plain_content(mut self, v: impl Into<String>) -> Self {
                self.turn.plain_content = Some(v.into());
                self
            }
            /// Attaches images.
            pub fn images(mut self, v: Vec<String>) -> Self {
                self.turn.images = v;
                self
            }
            /// Sets the image detail.
            pub fn image_detail(mut self, v: branch_core::message::ImageDetail) -> Self {
                self.turn.image_detail = Some(v);
                self
            }
            /// Sets the instruction's sender.
            pub fn sender(mut self, v: impl Into<branch_core::Participant>) -> Self {
                self.turn.sender = Some(v.into());
                self
            }
            /// Sets the instruction's recipient.
            pub fn recipient(mut self, v: impl Into<branch_core::Participant>) -> Self {
                self.turn.recipient = Some(v.into());
                self
            }
            /// Compiles the request from these message ids.
            pub fn progression(mut self, v: Vec<uuid::Uuid>) -> Self {
                self.turn.progression = Some(v);
                self
            }
            /// Adds a provider payload field (`temperature`, ...).
            pub fn field(mut self, k: &str, v: impl Into<serde_json::Value>) -> Self {
                self.turn.fields.insert(k.to_owned(), v.into());
                self
            }
            /// Adds a context provider for this call only: it runs after
            /// the branch's registered providers, within the same budget,
            /// and is not kept by the branch.
            pub fn context_provider<P: branch_core::ContextProvider>(
                mut self,
                provider: P,
                options: branch_providers::ProviderOptions,
            ) -> Self {
                self.turn
                    .context_providers
                    .push(branch_providers::ProviderEntry::new(
                        std::sync::Arc::new(provider),
                        options,
                    ));
                self
            }
        }
    };
}
pub(crate) use turn_setters;

/// `v`, unless it is a text of white space only (Python's `str.isspace`,
/// which also counts the separators U+001C–U+001F). `operate` reads such a
/// guidance or context as none, as the reference's `operate` does (its
/// `Instruct` model nulls blank text); the other verbs keep it, as theirs
/// do. A list is kept whatever its items.
pub(crate) fn unless_blank(v: Value) -> Option<Value> {
    let blank = |s: &str| {
        s.chars()
            .all(|c| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
    };
    match &v {
        Value::String(s) if blank(s) => None,
        _ => Some(v),
    }
}

impl TurnInput {
    /// The instruction content of this turn, moved out of it: a turn
    /// sends its input once, so the input is not copied. The turn keeps
    /// what the send still reads (sender, recipient, progression, fields,
    /// context providers).
    pub(crate) fn take_content(
        &mut self,
        tool_schemas: Vec<Value>,
        format: Option<&ResponseFormat>,
    ) -> InstructionContent {
        let images = std::mem::take(&mut self.images);
        // Images always carry a detail, `operate`'s too.
        let default_detail = !self.no_default_detail || !images.is_empty();
        InstructionContent {
            instruction: self.instruction.take(),
            guidance: self.guidance.take(),
            prompt_context: std::mem::take(&mut self.context),
            plain_content: self.plain_content.take(),
            tool_schemas,
            images,
            image_detail: self
                .image_detail
                .or(default_detail.then_some(ImageDetail::Auto)),
            response_format: format.map(ResponseFormat::to_value),
        }
    }
}

/// The default sender of a branch's instructions and recipient of its
/// replies: the branch user, else `"user"`.
pub(crate) fn user_of(branch: &Branch) -> Participant {
    branch
        .user()
        .cloned()
        .unwrap_or(Participant::Role(Role::User))
}

/// The Instruction message of a turn.
pub(crate) fn instruction_message(
    branch: &Branch,
    turn: &TurnInput,
    content: InstructionContent,
) -> Message {
    Message::instruction(content)
        .with_sender(turn.sender.clone().unwrap_or_else(|| user_of(branch)))
        .with_recipient(
            turn.recipient
                .clone()
                .unwrap_or(Participant::Id(branch.id())),
        )
}

/// The AssistantResponse message of a reply; its reasoning, if any, is
/// kept under `metadata.reasoning` (where the reference never looks).
/// `raw_text`, when `send` left it (the bytes `raw` reads as), is kept as
/// `model_response` in place of `raw`'s tree (which is then never built
/// when the model read the reply from those bytes).
pub(crate) fn response_message(
    branch: &Branch,
    text: &str,
    raw: LazyJson,
    raw_text: Option<ParsedJson>,
    reasoning: &[ReasoningBlock],
) -> Message {
    let mut m = Message::assistant(text)
        .with_sender(Participant::Id(branch.id()))
        .with_recipient(user_of(branch));
    // Sized for what goes in: a map's first insert makes room for three
    // (about 200 bytes more for every reply a conversation keeps).
    if m.element.metadata.is_empty() {
        m.element.metadata = Metadata::with_capacity(1 + usize::from(!reasoning.is_empty()));
    }
    // A text too long to keep is dropped here: `raw` is its value already.
    match raw_text.filter(ParsedJson::is_keepable) {
        Some(text) => m
            .element
            .metadata
            .insert_parsed("model_response".into(), text),
        None => m
            .element
            .metadata
            .insert("model_response".into(), raw.into_value()),
    };
    if !reasoning.is_empty() {
        m.element.metadata.insert(
            REASONING_METADATA_KEY.into(),
            ReasoningBlock::list_to_value(reasoning),
        );
    }
    m
}

/// How a request is compiled besides the instruction.
#[derive(Debug, Clone, Default)]
pub(crate) struct SendOptions<'a> {
    pub progression: Option<&'a [Uuid]>,
    /// Context providers of this call, after the branch's own.
    pub providers: &'a [ProviderEntry],
    pub react_context: Option<&'a [Value]>,
    pub token_note: bool,
    /// Messages of the current call not yet in the branch, compiled as
    /// history (a parse repair sees its own turn).
    pub pending: &'a [Message],
    /// Native function calling: recorded calls go out as `tool_calls` and
    /// `tool` messages (every call answered, see `ToolMode::Native`).
    pub native_tools: bool,
    /// A custom middle answering the request instead of the model.
    pub caller: Option<&'a dyn crate::middle::CallModel>,
}

/// Compiles the request for the turn's `instruction` (not yet in the
/// branch) against the branch history: runs the context providers first
/// (their blocks fold into the system guidance), and appends the token
/// usage note when asked.
pub(crate) async fn compile(
    branch: &mut Branch,
    model: &Arc<dyn ChatModel>,
    instruction: &Message,
    fields: &Map<String, Value>,
    opts: &SendOptions<'_>,
) -> Result<ChatRequest> {
    let pass = branch_providers::gather_with(branch, instruction, opts.providers).await;
    let mut req = compile_now(branch, instruction, pass, opts)?;
    let messages = &mut req.messages;
    // As the reference: only an endpoint that counts tokens (OpenAI's
    // chat, the compatible ones) gets the note; Anthropic Messages, say,
    // does not.
    if opts.token_note && model.config().endpoint().requires_tokens {
        let contents: Vec<&Value> = messages.iter().map(|m| &m.content).collect();
        // Boxed, as only a turn with the token note takes this path.
        let total = Box::pin(request_token_estimate(&contents)).await;
        let window = model.config().model_name().map(context_window);
        if let Some(last) = messages.last_mut() {
            // The current turn's message, made for this turn (a kept one,
            // when the turn rendered empty, is copied first: shared).
            append_text(
                &mut Arc::make_mut(last).content,
                &token_usage_note(total, window),
            );
        }
    }
    req.fields = fields.clone();
    Ok(req)
}

/// The synchronous part of [`compile`]: the request from the history, the
/// instruction and the providers' blocks. Kept out of `compile`'s state,
/// which would otherwise hold these locals across its awaits.
fn compile_now(
    branch: &mut Branch,
    instruction: &Message,
    pass: Option<branch_providers::ContextPass>,
    opts: &SendOptions<'_>,
) -> Result<ChatRequest> {
    let blocks: Vec<String> = pass
        .map(|p| p.blocks_text)
        .filter(|t| !t.is_empty())
        .into_iter()
        .collect();
    let empty = InstructionContent::default();
    let content = instruction.as_instruction().unwrap_or(&empty);
    let copts = CompileOptions {
        progression: opts.progression,
        context_blocks: &blocks,
        react_context: opts.react_context,
        tool_mode: if opts.native_tools {
            ToolMode::Native
        } else {
            ToolMode::Prompt
        },
    };
    // The renderings of past instructions, kept between turns (taken out
    // and put back around this synchronous step: no await between, so a
    // dropped turn cannot lose it; an entry is checked against the
    // message each time, so it cannot go stale). Its slot in the
    // extensions stays, so a turn neither frees nor allocates one.
    let mut cache = std::mem::take(
        branch
            .extensions_mut()
            .get_or_insert_with(RenderCache::default),
    );
    let compiled = if opts.pending.is_empty() {
        compile_request_cached(branch.msgs(), content, &copts, &mut cache)
    } else {
        let mut scratch = MessageManager::from_pile(branch.messages().clone());
        scratch.set_view(branch.msgs().view().cloned());
        for m in opts.pending {
            scratch.add_message(m.clone());
        }
        compile_request_cached(&scratch, content, &copts, &mut cache)
    };
    *branch
        .extensions_mut()
        .get_or_insert_with(RenderCache::default) = cache;
    compiled.map_err(OperationError::compile)
}

/// The reference's estimate of a request's tokens (operations.md §1.5):
/// per message 4, plus the `o200k_base` count of each text part, plus 500
/// per image part. `contents` are the messages' `content` values.
pub async fn request_token_estimate(contents: &[&Value]) -> u64 {
    let mut total = 0;
    for c in contents {
        total += 4 + request_tokens(c).await;
    }
    total
}

async fn request_tokens(content: &Value) -> u64 {
    match content {
        Value::String(s) => branch_providers::count_tokens_async(s).await,
        Value::Array(parts) => {
            let mut n = 0;
            for p in parts {
                match p.get("type").and_then(Value::as_str) {
                    Some("image_url") => n += 500,
                    _ => {
                        if let Some(t) = p.get("text").and_then(Value::as_str) {
                            n += branch_providers::count_tokens_async(t).await;
                        }
                    }
                }
            }
            n
        }
        _ => 0,
    }
}

fn append_text(content: &mut Value, note: &str) {
    match content {
        Value::String(s) => s.push_str(note),
        Value::Array(parts) => {
            let last_text = parts
                .iter_mut()
                .rev()
                .find_map(|p| p.get_mut("text").filter(|t| t.is_string()));
            if let Some(Value::String(s)) = last_text {
                s.push_str(note);
            }
        }
        _ => {}
    }
}

/// The context window of a model, by longest known prefix (128,000 when
/// unknown).
pub(crate) fn context_window(model: &str) -> u64 {
    const TABLE: &[(&str, u64)] = &[
        ("gpt-4.1", 1_000_000),
        ("gpt-4o", 128_000),
        ("gpt-5", 400_000),
        ("o1", 200_000),
        ("o3", 200_000),
        ("o4", 200_000),
        ("claude", 200_000),
        ("gemini", 1_000_000),
    ];
    TABLE
        .iter()
        .filter(|(p, _)| model.starts_with(p))
        .max_by_key(|(p, _)| p.len())
        .map_or(128_000, |(_, w)| *w)
}

/// Sends `request` to `model` and logs the API call on the branch (also
/// when it failed).
///
/// A block rather than an `async fn` (whose arguments become locals of its
/// state beside themselves), and the call's future is made before it is
/// awaited (an `async` block around it would keep the moved request too):
/// the request is held once, not three times, in every turn's future.
#[allow(clippy::manual_async_fn)] // An `async fn` holds its arguments twice.
pub(crate) fn send<'a>(
    branch: &'a mut Branch,
    model: &'a Arc<dyn ChatModel>,
    request: ChatRequest,
    caller: Option<&'a dyn crate::middle::CallModel>,
) -> impl Future<Output = Result<ChatResponse>> + 'a {
    async move {
        // A CLI model's call is its agent's answer, in the branch's agent
        // session (a custom middle still answers in its place).
        let agent = match caller {
            None if model.is_cli() => {
                Some(crate::cli_call::AgentCall::of(branch).map_err(|message| {
                    OperationError::InvalidArgument {
                        what: "cli_session_id",
                        message: format!(
                            "{message}. Remove it from the conversation's metadata to start a \
                         new agent session"
                        ),
                    }
                })?)
            }
            _ => None,
        };
        let caller = caller.or(agent.as_ref().map(|a| a as &dyn crate::middle::CallModel));
        // Built once: the bytes sent are the bytes the log keeps. A request
        // with no form in the model's protocol fails in the call below, as
        // any other call does, and is logged with a `null` payload.
        let body = model.request_body(&request).ok();
        let started_at = branch_core::model::now_timestamp();
        let t0 = Instant::now();
        let span = tracing::debug_span!("api_call", model = ?model.config().model_name());
        // Made inside the span, as the call's first poll would be.
        let call: Pin<Box<dyn Future<Output = _> + Send + '_>> =
            span.in_scope(|| match (caller, &body) {
                (Some(c), _) => c.call(model.clone(), request),
                (None, Some(b)) => model.chat_with_body(request, b),
                (None, None) => model.chat(request),
            });
        let mut result = tracing::Instrument::instrument(call, span).await;
        if matches!(&result, Err(e) if e.kind.is_refused_before_sending()) {
            // Never made, so not logged (the refusal's reason is the error).
            return result.map_err(OperationError::api);
        }
        let duration = t0.elapsed().as_secs_f64();
        // The reply's own bytes stand for `raw` only when the model vouches
        // for them and no middleware stood between it and us.
        let vouched = caller.is_none() && model.keeps_reply_bytes();
        let log = crate::call_log::api_call_log(
            body.as_ref(),
            &mut result,
            started_at,
            duration,
            vouched,
        );
        branch.log(log);
        result.map_err(OperationError::api)
    }
}

/// Appends a finished turn's messages, in order, through the message
/// manager (so `on_message_added` sees each).
/// A branch whose turn awaits approval takes no new turn: its history
/// lacks the answers to the calls it proposed, and a later resume would
/// append them after the newer turn.
pub(crate) fn refuse_while_paused(branch: &Branch) -> Result<()> {
    if branch.metadata().contains_key(crate::pending::PENDING_KEY) {
        return Err(OperationError::InvalidArgument {
            what: "branch",
            message: "a turn of this branch awaits approval; resume it first".into(),
        });
    }
    Ok(())
}

/// Stores the agent session a recorded turn ran in, for the next call of
/// the branch's CLI model to resume (compat.md §18 O5).
pub(crate) fn keep_agent_session(branch: &mut Branch, session: Option<String>) {
    if let Some(id) = session {
        branch
            .metadata_mut()
            .insert("cli_session_id".into(), id.into());
    }
}

pub(crate) fn commit(branch: &mut Branch, messages: Vec<Message>) -> usize {
    let n = messages.len();
    for m in messages {
        branch.msgs_mut().add_message(m);
    }
    n
}
