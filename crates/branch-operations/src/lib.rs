//! The verbs of a lionagi branch.
//!
//! Charter: the algorithms behind `chat`, `communicate`, `parse`, `operate`,
//! `act`, `interpret`, `ReAct`, `ReActStream` and `run`, attached to
//! `branch_core::Branch` through the [`BranchOperations`] extension trait so
//! the aggregate never knows them. It owns turn atomicity (a turn is
//! recorded whole or not at all), the parse-repair loop and the ReAct loop.
//! It must not know HTTP details (that is `branch-models`) nor storage.
//!
//! Every verb takes an option struct whose `Default` is the reference's
//! facade default (branch.md §9) and whose setters read like keywords:
//!
//! ```no_run
//! # async fn demo(branch: &mut branch_core::Branch) -> Result<(), branch_operations::OperationError> {
//! use branch_operations::{BranchOperations, CommunicateOptions};
//! let reply = branch
//!     .communicate(CommunicateOptions::new("What is the capital of France?").guidance("One sentence."))
//!     .await?;
//! println!("{reply:?}");
//! # Ok(()) }
//! ```
//!
//! Turns are atomic: every message of a turn is built off to the side and
//! appended (through `msgs_mut().add_message`, so `on_message_added` sees
//! it) only once the turn has succeeded. Dropping a verb's future, a
//! provider error or a failed repair leaves the history as it was; an
//! error reports what earlier turns of the same call had recorded
//! ([`Committed`]). API calls and tool calls are logged on the branch as
//! they happen, in the reference's record shapes.

// This crate reads model output, tool arguments and CLI agent output: nothing here may panic on them.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod act;
mod agent;
mod approval;
mod call_log;
mod chat;
mod cli_call;
pub mod cli_stream;
mod communicate;
mod connect;
mod display;
mod error;
mod field_models;
mod format;
pub mod fuzzy;
mod instruction;
mod interpret;
mod lax;
pub mod limits;
mod middle;
mod model_dump;
mod operate;
mod options;
mod parse;
mod pending;
mod persist;
mod react;
mod react_answer;
mod reply;
mod run;
mod signals;
pub mod similarity;
mod telemetry;
mod turn;

use std::future::Future;

use branch_actions::ToolCall;
use branch_core::Branch;
use branch_core::message::Message;
use futures_core::Stream;
use serde::de::DeserializeOwned;

pub use act::{
    APPROVAL_DENIAL, APPROVAL_EXPIRED, ActOptions, ActionResponseModel, GATE_DENIAL, Strategy,
    tool_call_from_value,
};
pub use approval::{
    ApprovalPolicy, Approver, ApproverFuture, BranchApproval, Decision, ToolPolicy,
};
pub use branch_messages::ResponseFormat;
pub use chat::ChatOptions;
pub use communicate::{CommunicateOptions, Reply};
pub use display::DisplayAs;
pub use error::{Committed, OperationError, ParseFailure, Result};
pub use field_models::INTERMEDIATE_FIELD;
pub use format::{
    analysis_schema, format_of, native_response_format, operative_schema, react_analysis_schema,
    schema_of,
};
pub use instruction::InstructionBuilder;
pub use interpret::InterpretOptions;
pub use middle::{CallModel, ModelCallFuture, OperateMiddle};
pub use operate::{OperateOptions, Operated};
pub use parse::{OnParseFailure, ParseOptions, Parsed, Unparsed};
pub use pending::{
    APPROVAL_KEY, CallStatus, PENDING_KEY, PendingApproval, ProposedCall, Resumed,
    pending_approval, resume,
};
pub use persist::default_persist_dir;
pub use react::{
    BetweenRounds, BetweenRoundsFn, BetweenRoundsFuture, MAX_EXTENSIONS_CAP, ReActOptions,
    ReActOutcome, ReActRound,
};
pub use react_answer::AnswerOptions;
pub use reply::VerbReply;
pub use run::{RunOptions, TextHook};
pub use turn::{TurnInput, request_token_estimate};

/// The verbs, on `Branch`.
pub trait BranchOperations {
    /// One model call; records nothing, logs the call; returns the text.
    fn chat(&mut self, opts: ChatOptions) -> impl Future<Output = Result<String>> + Send;

    /// One model call; returns the unrecorded Instruction and
    /// AssistantResponse (the reference's `return_ins_res_message=True`).
    fn chat_messages(
        &mut self,
        opts: ChatOptions,
    ) -> impl Future<Output = Result<(Message, Message)>> + Send;

    /// One model call, recorded; returns the text.
    fn chat_and_record(&mut self, opts: ChatOptions)
    -> impl Future<Output = Result<String>> + Send;

    /// One recorded turn, parsed when a format or fields are requested.
    fn communicate(
        &mut self,
        opts: CommunicateOptions,
    ) -> impl Future<Output = Result<Reply>> + Send;

    /// One recorded turn parsed into `T`.
    fn communicate_as<T: DeserializeOwned + schemars::JsonSchema + Send>(
        &mut self,
        opts: CommunicateOptions,
    ) -> impl Future<Output = Result<Parsed<T>>> + Send;

    /// Parses `text` into a structure, asking the parse model to repair it
    /// when needed; records nothing.
    fn parse(
        &mut self,
        text: &str,
        opts: ParseOptions,
    ) -> impl Future<Output = Result<Parsed>> + Send;

    /// Parses `text` into `T`.
    fn parse_as<T: DeserializeOwned + schemars::JsonSchema + Send>(
        &mut self,
        text: &str,
        opts: ParseOptions,
    ) -> impl Future<Output = Result<Parsed<T>>> + Send;

    /// A structured turn with optional reason and tool calls.
    fn operate(&mut self, opts: OperateOptions) -> impl Future<Output = Result<Operated>> + Send;

    /// [`BranchOperations::operate`] into `T`.
    fn operate_as<T: DeserializeOwned + schemars::JsonSchema + Send>(
        &mut self,
        opts: OperateOptions,
    ) -> impl Future<Output = Result<Operated<T>>> + Send;

    /// Runs tool calls and records them.
    fn act(
        &mut self,
        calls: Vec<ToolCall>,
        opts: ActOptions,
    ) -> impl Future<Output = Result<Vec<ActionResponseModel>>> + Send;

    /// Rewrites a raw request into a clearer prompt; records nothing.
    fn interpret(
        &mut self,
        text: &str,
        opts: InterpretOptions,
    ) -> impl Future<Output = Result<String>> + Send;

    /// Reason-act rounds, then a final answer.
    #[allow(non_snake_case)]
    fn ReAct(&mut self, opts: ReActOptions) -> impl Future<Output = Result<ReActOutcome>> + Send;

    /// The rounds of [`BranchOperations::ReAct`] as a stream.
    #[allow(non_snake_case)]
    fn ReActStream(
        &mut self,
        opts: ReActOptions,
    ) -> impl Stream<Item = Result<ReActRound>> + Send + Unpin + '_;

    /// A streamed turn: the Instruction, then the reply's messages as they
    /// arrive (CLI agent endpoints, or HTTP providers through SSE).
    fn run(&mut self, opts: RunOptions) -> impl Stream<Item = Result<Message>> + Send + Unpin + '_;

    /// Registers `model` as the tool `name` (the reference's
    /// `Branch.connect(imodel, name, description, update)`): its parameters
    /// are the provider's chat request schema, and a call sends the
    /// arguments as one request and returns the provider's raw reply. A
    /// name already registered is refused unless `update`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use branch_core::Branch;
    /// use branch_core::model::{ChatModel, ModelConfig};
    /// use branch_operations::BranchOperations;
    ///
    /// let mut branch = Branch::builder().build()?;
    /// let helper: Arc<dyn ChatModel> = Arc::new(ModelConfig::new("openai", "gpt-4o-mini")?);
    /// branch.connect(helper.clone(), "helper", Some("Ask another model"), false)?;
    /// assert!(branch.acts().contains("helper"));
    /// assert!(branch.connect(helper, "helper", None, false).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn connect(
        &mut self,
        model: std::sync::Arc<dyn branch_core::model::ChatModel>,
        name: &str,
        description: Option<&str>,
        update: bool,
    ) -> Result<()>;
}

impl BranchOperations for Branch {
    fn chat(&mut self, opts: ChatOptions) -> impl Future<Output = Result<String>> + Send {
        chat::chat(self, opts)
    }

    fn chat_messages(
        &mut self,
        opts: ChatOptions,
    ) -> impl Future<Output = Result<(Message, Message)>> + Send {
        chat::chat_messages(self, opts)
    }

    fn chat_and_record(
        &mut self,
        opts: ChatOptions,
    ) -> impl Future<Output = Result<String>> + Send {
        chat::chat_and_record(self, opts)
    }

    fn communicate(
        &mut self,
        opts: CommunicateOptions,
    ) -> impl Future<Output = Result<Reply>> + Send {
        // Boxed once: every `async fn` layer would otherwise keep its own
        // copy of the options (several hundred bytes) in its state.
        let opts = Box::new(opts);
        async move {
            let obs = signals::RunObs::start(self, "communicate");
            let r = communicate::communicate(self, opts).await;
            obs.finish(self, r, reply_json)
        }
    }

    fn communicate_as<T: DeserializeOwned + schemars::JsonSchema + Send>(
        &mut self,
        opts: CommunicateOptions,
    ) -> impl Future<Output = Result<Parsed<T>>> + Send {
        let opts = Box::new(opts);
        async move {
            let obs = signals::RunObs::start(self, "communicate");
            let r = communicate::communicate_as(self, opts).await;
            obs.finish(self, r, |_| serde_json::Value::Null)
        }
    }

    fn parse(
        &mut self,
        text: &str,
        opts: ParseOptions,
    ) -> impl Future<Output = Result<Parsed>> + Send {
        parse::parse(self, text, opts)
    }

    async fn parse_as<T: DeserializeOwned + schemars::JsonSchema + Send>(
        &mut self,
        text: &str,
        opts: ParseOptions,
    ) -> Result<Parsed<T>> {
        let format = opts.format.clone();
        let on_failure = opts.on_failure;
        let p = parse::parse(self, text, opts).await?;
        parse::decode(p, text, on_failure, &format)
    }

    fn operate(&mut self, opts: OperateOptions) -> impl Future<Output = Result<Operated>> + Send {
        operate::operate(self, opts)
    }

    async fn operate_as<T: DeserializeOwned + schemars::JsonSchema + Send>(
        &mut self,
        opts: OperateOptions,
    ) -> Result<Operated<T>> {
        let obs = signals::RunObs::start(self, "operate");
        let r = operate::operate_as(self, opts).await;
        obs.finish(self, r, |o| {
            o.structured
                .clone()
                .unwrap_or_else(|| serde_json::Value::String(o.text.clone()))
        })
    }

    fn act(
        &mut self,
        calls: Vec<ToolCall>,
        opts: ActOptions,
    ) -> impl Future<Output = Result<Vec<ActionResponseModel>>> + Send {
        act::act(self, calls, opts)
    }

    fn interpret(
        &mut self,
        text: &str,
        opts: InterpretOptions,
    ) -> impl Future<Output = Result<String>> + Send {
        interpret::interpret(self, text, opts)
    }

    async fn ReAct(&mut self, opts: ReActOptions) -> Result<ReActOutcome> {
        let obs = signals::RunObs::start(self, "ReAct");
        let r = react::react(self, opts).await;
        obs.finish(self, r, |o| o.answer.clone())
    }

    fn ReActStream(
        &mut self,
        opts: ReActOptions,
    ) -> impl Stream<Item = Result<ReActRound>> + Send + Unpin + '_ {
        Box::pin(react::react_stream(self, opts))
    }

    fn run(
        &mut self,
        mut opts: RunOptions,
    ) -> impl Stream<Item = Result<Message>> + Send + Unpin + '_ {
        // The verb renders a typed format as chat does (`<Title>Request`);
        // operate's run-and-collect middle passes its own structure as is.
        opts.response_format = opts
            .response_format
            .as_ref()
            .map(|f| format::retitled(f, "Request"));
        Box::pin(run::run(self, opts))
    }

    fn connect(
        &mut self,
        model: std::sync::Arc<dyn branch_core::model::ChatModel>,
        name: &str,
        description: Option<&str>,
        update: bool,
    ) -> Result<()> {
        connect::connect(self, model, name, description, update)
    }
}

fn reply_json(r: &Reply) -> serde_json::Value {
    match r {
        Reply::Text(t) => serde_json::Value::String(t.clone()),
        Reply::Structured(v) => v.clone(),
        Reply::Unparsed(u) => serde_json::Value::String(u.text.clone()),
        Reply::Nothing => serde_json::Value::Null,
    }
}
