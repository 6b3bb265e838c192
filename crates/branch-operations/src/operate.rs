//! `operate`: a recorded turn asking for a structure (optionally with a
//! reason and tool calls), then the requested tool calls (operations.md §5).
//! The whole operation is one turn: its messages are appended together
//! once it has succeeded.

use std::sync::Arc;

use branch_actions::{ActionManagerExt, ToolCall, ToolSelection};
use branch_core::model::ChatModel;
use branch_core::{Branch, Message, MessageContent};
use branch_messages::ResponseFormat;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::act::{
    ActOptions, ActionResponseModel, Screened, Strategy, native_calls, native_tool_list, run_calls,
    tool_call_from_value,
};
use crate::approval::policy_of;
use crate::communicate::{
    CommunicateOptions, Communicated, Middle, commit_turn, communicate_inner,
};
use crate::error::{Committed, OperationError, Result};
use crate::field_models::add_field_models;
use crate::format::operative_schema;
use crate::fuzzy::Unmatched;
use crate::middle::OperateMiddle;
use crate::parse::{OnParseFailure, Parsed, decode, outcome};
use crate::parse::{ParseOptions, parse_with_repairs};
use crate::pending::PendingApproval;
use crate::run::RunOptions;
use crate::turn::{TurnInput, turn_setters};

/// Options of `operate` (defaults: branch.md §9.3).
#[derive(Debug, Clone)]
pub struct OperateOptions {
    /// The instruction and how it is sent.
    pub turn: TurnInput,
    /// The structure asked for.
    pub response_format: Option<ResponseFormat>,
    /// Ask for a `reason` field.
    pub reason: bool,
    /// Offer tools and ask for `action_requests`.
    pub actions: bool,
    /// Run the requested tool calls.
    pub invoke_actions: bool,
    /// Offer only these tools (→ all registered).
    pub tools: Option<Vec<String>>,
    /// The chat model (→ the branch's).
    pub chat_model: Option<Arc<dyn ChatModel>>,
    /// The repair model (→ the branch's parse model; see docs/compat.md).
    pub parse_model: Option<Arc<dyn ChatModel>>,
    /// Return the text without parsing.
    pub skip_validation: bool,
    /// What a final parse failure of `response_format` gives, when it is a
    /// typed format (a schema). A structure of operate's own or a field map
    /// that does not parse gives the text, as the reference's operate.
    pub on_parse_failure: OnParseFailure,
    /// How tool calls run.
    pub act: ActOptions,
    /// Append the estimated token usage to the request.
    pub include_token_usage_to_model: bool,
    /// Clear the history (except the system message) first.
    pub clear_messages: bool,
    /// Repair retries.
    pub num_parse_retries: usize,
    /// Waits between repairs (first, factor).
    pub repair_backoff: (std::time::Duration, f64),
    /// Native function calling: tools go to the provider's `tools` field
    /// and the reply's `tool_calls` are run, instead of the prompt-embedded
    /// `Tools` section and `action_requests` JSON.
    pub native_tools: bool,
    /// Native structured output: the requested structure also goes to the
    /// provider as `response_format` (`json_schema`), which OpenAI, llama.cpp
    /// and the embedded model follow; the reply is still parsed (and
    /// repaired) as usual. Off by default: the reference sends no such field.
    /// A `response_format` set as a payload field wins.
    pub native_format: bool,
    /// Extra fields of the requested structure (name → property schema);
    /// any makes `operate` ask for and parse a structure.
    pub field_models: Option<Map<String, Value>>,
    /// Tool schemas shown with the instruction when no actions run (when
    /// they do, the offered tools' own schemas are shown instead, as in the
    /// reference).
    pub tool_schemas: Vec<Value>,
    /// What advances the branch by one assistant turn.
    pub middle: OperateMiddle,
    /// Options of the run-and-collect middle; its persistence options
    /// (`stream_persist`, `persist_dir`, `snapshot_dir`) select it.
    pub run: RunOptions,
    /// ReAct's caller context, shown once in later rounds.
    pub(crate) react_context: Option<Vec<Value>>,
}

impl Default for OperateOptions {
    fn default() -> Self {
        Self {
            turn: TurnInput::default(),
            response_format: None,
            reason: false,
            actions: false,
            invoke_actions: true,
            tools: None,
            chat_model: None,
            parse_model: None,
            skip_validation: false,
            on_parse_failure: OnParseFailure::ReturnValue,
            act: ActOptions::default(),
            include_token_usage_to_model: false,
            clear_messages: false,
            num_parse_retries: 3,
            repair_backoff: (std::time::Duration::from_secs(1), 1.85),
            native_tools: false,
            native_format: false,
            field_models: None,
            tool_schemas: Vec::new(),
            middle: OperateMiddle::default(),
            run: RunOptions::default(),
            react_context: None,
        }
    }
}

turn_setters!(OperateOptions, blank_is_none);
crate::options::shared_setters!(OperateOptions: chat_model, parse_model, skip_validation, on_parse_failure, act_options, action_strategy, native_tools, native_format, num_parse_retries, repair_backoff, include_token_usage_to_model, clear_messages);

impl OperateOptions {
    /// Options for this instruction.
    pub fn new(instruction: impl Into<Value>) -> Self {
        Self::default().instruction(instruction)
    }

    /// Asks for this structure.
    pub fn response_format(mut self, f: ResponseFormat) -> Self {
        self.response_format = Some(f);
        self
    }

    /// Asks for the schema of `T`.
    pub fn response_type<T: schemars::JsonSchema>(self) -> Self {
        self.response_format(crate::format::format_of::<T>())
    }

    /// Asks for a reason.
    pub fn reason(mut self, on: bool) -> Self {
        self.reason = on;
        self
    }

    /// Offers tools.
    pub fn actions(mut self, on: bool) -> Self {
        self.actions = on;
        self
    }

    /// Runs the requested calls (default) or not.
    pub fn invoke_actions(mut self, on: bool) -> Self {
        self.invoke_actions = on;
        self
    }

    /// Offers only these tools.
    pub fn tools<I: IntoIterator<Item = S>, S: Into<String>>(mut self, t: I) -> Self {
        self.tools = Some(t.into_iter().map(Into::into).collect());
        self
    }

    /// Uses this middle.
    pub fn middle(mut self, m: OperateMiddle) -> Self {
        self.middle = m;
        self
    }

    /// Options of the run-and-collect middle (CLI command, timeouts,
    /// persistence); any persistence option makes `operate` use it.
    pub fn run_options(mut self, run: RunOptions) -> Self {
        self.run = run;
        self
    }

    /// Shows these tool schemas with the instruction, as `chat`'s do, when
    /// no actions run.
    pub fn tool_schemas(mut self, schemas: Vec<Value>) -> Self {
        self.tool_schemas = schemas;
        self
    }

    /// Adds a field (a JSON schema) to the requested structure.
    pub fn field_model(mut self, name: impl Into<String>, schema: Value) -> Self {
        crate::field_models::add_to(&mut self.field_models, name.into(), schema);
        self
    }
}

/// What `operate` returns.
#[derive(Debug, Clone, PartialEq)]
pub struct Operated<T = Value> {
    /// The parsed structure, the unparsed text, or nothing. Without any
    /// structure requested (no format, reason or prompt actions) this is
    /// the reply text as [`Parsed::Unparsed`]; with `skip_validation` it is
    /// [`Parsed::Unvalidated`]; see also [`Operated::text`].
    pub parsed: Parsed<T>,
    /// The reply text.
    pub text: String,
    /// The whole parsed object (with `action_responses` filled when calls
    /// ran), when a structure was requested and parsed.
    pub structured: Option<Value>,
    /// The calls run, in request order.
    pub action_responses: Vec<ActionResponseModel>,
}

pub(crate) fn operate(
    branch: &mut Branch,
    opts: OperateOptions,
) -> impl Future<Output = Result<Operated>> + Send + '_ {
    // Boxed once: the options are over a kilobyte, and every `async fn`
    // layer would otherwise keep its own copy of them in its state.
    let opts = Box::new(opts);
    async move {
        let span = crate::telemetry::verb_span("operate", branch);
        span.run(operate_inner(branch, opts)).await
    }
}

async fn operate_inner(branch: &mut Branch, opts: Box<OperateOptions>) -> Result<Operated> {
    let with_actions = opts.actions && opts.invoke_actions;
    let tool_schemas = if with_actions {
        let sel = opts
            .tools
            .clone()
            .map_or(ToolSelection::All, ToolSelection::Named);
        branch
            .acts()
            .tool_schemas(&sel)
            .map_err(|e| OperationError::InvalidArgument {
                what: "tools",
                message: e.to_string(),
            })?
    } else {
        opts.tool_schemas.clone()
    };
    let native = opts.native_tools && with_actions;
    let prompt_actions = with_actions && !native;
    let extra = opts.field_models.as_ref().filter(|m| !m.is_empty());
    let wants_structure =
        opts.response_format.is_some() || prompt_actions || opts.reason || extra.is_some();
    let rendered = match &opts.response_format {
        // A field map alone is asked for and read as chat and communicate
        // do (its banner, undeclared keys kept), as the reference's does;
        // anything added to it makes a schema of its fields.
        Some(f @ ResponseFormat::Fields(_))
            if !prompt_actions && !opts.reason && extra.is_none() =>
        {
            Some(f.clone())
        }
        _ => wants_structure.then(|| {
            let schema =
                operative_schema(opts.response_format.as_ref(), opts.reason, prompt_actions);
            ResponseFormat::Schema(match extra {
                Some(m) => add_field_models(schema, m),
                None => schema,
            })
        }),
    };
    let unmatched = if opts.response_format.is_some() {
        Unmatched::Ignore
    } else {
        Unmatched::Force
    };
    let mut turn = opts.turn.clone();
    turn.no_default_detail = true;
    let mut copts = CommunicateOptions {
        turn,
        response_format: None,
        request_fields: None,
        chat_model: opts.chat_model.clone(),
        parse_model: opts.parse_model.clone(),
        skip_validation: opts.skip_validation,
        num_parse_retries: opts.num_parse_retries,
        clear_messages: opts.clear_messages,
        on_parse_failure: opts.on_parse_failure,
        include_token_usage_to_model: opts.include_token_usage_to_model,
        repair_backoff: opts.repair_backoff,
        native_format: opts.native_format,
    };
    let model_is_cli = opts
        .chat_model
        .as_ref()
        .unwrap_or_else(|| branch.chat_model())
        .is_cli();
    let persisting = opts.run.stream_persist
        || opts.run.persist_dir.is_some()
        || opts.run.snapshot_dir.is_some();
    if persisting || opts.middle.collects_run(model_is_cli) {
        // Boxed: only a run-and-collect turn takes this path.
        let c = Box::pin(run_and_collect(
            branch,
            &opts,
            rendered.clone(),
            unmatched,
            native,
        ))
        .await?;
        return finish(branch, opts, c, rendered, with_actions, native).await;
    }
    let mut middle = Middle {
        tool_schemas: if native {
            Vec::new()
        } else {
            tool_schemas.clone()
        },
        rendered_format: rendered.clone(),
        unmatched,
        token_note: false,
        repair_model: opts.parse_model.clone(),
        native_tools: native.then(|| native_tool_list(&tool_schemas)),
        react_context: opts.react_context.as_deref(),
        caller: opts.middle.caller(),
    };
    let c = communicate_inner(branch, &mut copts, &mut middle).await?;
    finish(branch, opts, c, rendered, with_actions, native).await
}

/// The run-and-collect middle: `run` records the turn itself; its
/// AssistantResponse texts, joined by blank lines, are the reply. With
/// `native`, `run` offers the tools and runs the calls the reply makes.
async fn run_and_collect(
    branch: &mut Branch,
    opts: &OperateOptions,
    rendered: Option<ResponseFormat>,
    unmatched: Unmatched,
    native: bool,
) -> Result<Communicated> {
    use futures_util::StreamExt;
    let mut run_opts = opts.run.clone();
    run_opts.turn = opts.turn.clone();
    run_opts.turn.no_default_detail = true;
    run_opts.response_format = rendered.clone();
    if let Some(m) = &opts.chat_model {
        run_opts.chat_model = Some(m.clone());
    }
    if native {
        run_opts.native_tools = true;
        run_opts.tools.clone_from(&opts.tools);
        run_opts.act = opts.act;
    }
    let mut texts = Vec::new();
    let mut acted = Vec::new();
    {
        let stream = crate::run::run(branch, run_opts);
        futures_util::pin_mut!(stream);
        while let Some(m) = stream.next().await {
            let m = m?;
            if let Some(t) = m.as_assistant_text() {
                texts.push(t.to_owned());
            } else if native && matches!(m.content, MessageContent::ActionResponse(_)) {
                // Ours to report; a CLI agent's are its own tools' (the
                // turn records them, `operate` reports only what it ran).
                acted.push(m);
            }
        }
    }
    let text = texts.join("\n\n");
    let parsed = match rendered {
        Some(format) if !opts.skip_validation && !texts.is_empty() => {
            let mut popts = ParseOptions::new(format)
                .unmatched(unmatched)
                .backoff(opts.repair_backoff.0, opts.repair_backoff.1);
            popts.model = Some(match &opts.parse_model {
                Some(m) => m.clone(),
                None => branch.parse_model().clone(),
            });
            let retries = opts.num_parse_retries.min(5);
            let repaired =
                parse_with_repairs(branch, &text, &popts, retries, &[], None, None).await?;
            Some(repaired.result)
        }
        _ => None,
    };
    Ok(Communicated {
        messages: Vec::new(),
        text,
        parsed,
        fields: None,
        agent_session: None,
        tool_calls: Vec::new(),
        acted,
        clear_first: false,
    })
}

/// A recorded call's response as `operate` returns it.
fn response_model_of(m: &Message) -> Option<ActionResponseModel> {
    match &m.content {
        MessageContent::ActionResponse(r) => Some(ActionResponseModel {
            function: r.function.clone(),
            arguments: r.arguments.clone(),
            output: r.output.clone(),
        }),
        _ => None,
    }
}

/// The action fields a structure left out (read as `null`) set to "no
/// action": `false`, no requests, no responses. The reference does this
/// for its own structures (operate's without a response format, ReAct's
/// analyses), not for one built on the caller's format.
pub(crate) fn no_action_defaults(m: &mut Map<String, Value>) {
    for (k, default) in [
        ("action_required", Value::Bool(false)),
        ("action_requests", Value::Array(Vec::new())),
        ("action_responses", Value::Array(Vec::new())),
    ] {
        if let Some(v) = m.get_mut(k).filter(|v| v.is_null()) {
            *v = default;
        }
    }
}

/// Everything after the middle: the parse outcome, tool calls, writeback.
async fn finish(
    branch: &mut Branch,
    opts: Box<OperateOptions>,
    c: Communicated,
    rendered: Option<ResponseFormat>,
    with_actions: bool,
    native: bool,
) -> Result<Operated> {
    let mut messages = c.messages;
    let text = c.text;

    // The failure policy is the caller's typed format's: a structure of
    // operate's own (reason, actions, field models) or a field map that
    // does not parse gives the text, as the reference's operate, which
    // applies `handle_validation` only when a model was asked for.
    let on_failure = match &opts.response_format {
        Some(ResponseFormat::Schema(_)) => opts.on_parse_failure,
        Some(ResponseFormat::Fields(_)) | None => OnParseFailure::ReturnValue,
    };
    let (parsed, mut structured) = match (c.parsed, rendered.as_ref()) {
        (Some(result), Some(format)) => match outcome(&text, result, on_failure, format) {
            Ok(Parsed::Value(mut v)) => {
                if opts.response_format.is_none() {
                    if let Value::Object(m) = &mut v {
                        no_action_defaults(m);
                    }
                }
                (Parsed::Value(v.clone()), Some(v))
            }
            Ok(other) => (other, None),
            Err(e) => {
                let n = commit_turn(branch, c.clear_first, messages);
                return Err(e.with_committed(Committed {
                    messages: n,
                    turns: 1,
                }));
            }
        },
        // A structure was requested but not parsed on purpose.
        (None, Some(_)) if opts.skip_validation => (Parsed::Unvalidated(text.clone()), None),
        _ => (
            Parsed::Unparsed(crate::parse::Unparsed {
                text: text.clone(),
                failure: crate::error::ParseFailure::Extraction,
            }),
            None,
        ),
    };

    // Calls the middle ran and recorded itself.
    let mut action_responses: Vec<ActionResponseModel> =
        c.acted.iter().filter_map(response_model_of).collect();
    if with_actions && !opts.skip_validation {
        let mut calls: Vec<ToolCall> = Vec::new();
        let mut act = opts.act;
        if native {
            calls = native_calls(&c.tool_calls);
        } else if let Some(obj) = structured.as_ref() {
            if let Some(reqs) = obj.get("action_requests").and_then(Value::as_array) {
                for r in reqs {
                    if r.get("function").and_then(Value::as_str).is_some() {
                        calls.push(tool_call_from_value(r)?);
                    }
                }
            }
            if obj.get("action_strategy").and_then(Value::as_str) == Some("sequential") {
                act.strategy = Strategy::Sequential;
            }
        }
        if !calls.is_empty() {
            let acted = match run_calls(branch, calls, act).await {
                Screened::Done(acted) => acted,
                Screened::Paused(proposed) => {
                    // The reply is kept; the calls wait in the metadata.
                    let n = commit_turn(branch, c.clear_first, messages);
                    let expiry = policy_of(branch).and_then(|p| p.expiry());
                    let pending =
                        PendingApproval::new("operate", proposed, act, expiry, structured.clone());
                    pending.store(branch);
                    return Err(pending.paused(Committed {
                        messages: n,
                        turns: 1,
                    }));
                }
            };
            messages.extend(acted.messages);
            action_responses.extend(acted.responses);
        }
    }
    if !action_responses.is_empty() {
        if let Some(Value::Object(o)) = structured.as_mut() {
            o.insert(
                "action_responses".into(),
                serde_json::to_value(&action_responses).unwrap_or(Value::Null),
            );
        }
    }
    let mut responses = c.acted;
    responses.extend(
        messages
            .iter()
            .filter(|m| matches!(m.content, MessageContent::ActionResponse(_)))
            .cloned(),
    );
    commit_turn(branch, c.clear_first, messages);
    if !responses.is_empty() {
        // Context providers learn from the calls once the turn is in.
        branch_providers::gather_writeback(branch, &responses).await;
    }
    let parsed = match (parsed, &structured) {
        (Parsed::Value(_), Some(v)) => Parsed::Value(v.clone()),
        (p, _) => p,
    };
    Ok(Operated {
        parsed,
        text,
        structured,
        action_responses,
    })
}

pub(crate) async fn operate_as<T: DeserializeOwned + schemars::JsonSchema>(
    branch: &mut Branch,
    mut opts: OperateOptions,
) -> Result<Operated<T>> {
    let format = opts
        .response_format
        .get_or_insert_with(crate::format::format_of::<T>)
        .clone();
    let on_failure = opts.on_parse_failure;
    let o = operate(branch, opts).await?;
    let parsed = decode(o.parsed, &o.text, on_failure, &format)?;
    Ok(Operated {
        parsed,
        text: o.text,
        structured: o.structured,
        action_responses: o.action_responses,
    })
}
