//! `ReAct` and `ReActStream`: rounds of analysis and tool calls, then a
//! final answer (operations.md §8). Each round is its own atomic turn.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use branch_core::Branch;
use branch_core::message::ImageDetail;
use branch_core::model::ChatModel;
use branch_messages::ResponseFormat;
use futures_core::Stream;
use serde_json::{Map, Value};

use crate::act::ActOptions;
use crate::display::{DisplayAs, render};
use crate::error::{Committed, OperationError, Result};
use crate::field_models::{INTERMEDIATE_FIELD, intermediate_field};
use crate::format::{analysis_schema, react_analysis_schema};
use crate::interpret::{InterpretOptions, interpret};
use crate::operate::{OperateOptions, operate};
use crate::parse::Parsed;
use crate::react_answer::AnswerOptions;
use crate::turn::{TurnInput, turn_setters};

/// The upper bound of `max_extensions`.
pub const MAX_EXTENSIONS_CAP: usize = 100;

fn first_ext_prompt(n: usize) -> String {
    format!(
        "This is a multi-step task. You have room for up to {n} reason-act rounds — that is headroom to do the job well, not a target to fill or a clock to race. Plan across rounds, and within each round batch every independent tool call together (concurrent actions) so you move fast without wasting rounds. Set extension_needed=True while the task is unfinished — the normal state as you work. Set it to False ONLY once you have done the work and verified it succeeded; never for a plan or an interim summary. Stopping before the task is complete and verified is the only failure."
    )
}

fn continue_ext_prompt(n: usize) -> String {
    format!(
        "Keep going — about {n} rounds of headroom remain, finish properly. Batch independent tool calls in this round to stay efficient, take the next actions the task needs, and observe the results. Set extension_needed=False only once the work is genuinely done and verified."
    )
}

fn answer_prompt(instruction: &str) -> String {
    format!(
        "Given your reasoning and actions, please now provide the final answer to the user's request:\n\n{instruction}"
    )
}

/// A callback run before each extension round: given the branch and the
/// number of rounds done, text it returns is sent as that round's
/// instruction instead of the extension prompt. No text, or an empty one,
/// leaves the extension prompt in place.
#[derive(Clone)]
pub struct BetweenRounds(pub Arc<BetweenRoundsFn>);

/// What a [`BetweenRounds`] callback returns: a future that may read the
/// branch while it runs.
pub type BetweenRoundsFuture<'a> = Pin<Box<dyn Future<Output = Option<String>> + Send + 'a>>;

/// The function behind [`BetweenRounds`].
pub type BetweenRoundsFn =
    dyn for<'a> Fn(&'a Branch, usize) -> BetweenRoundsFuture<'a> + Send + Sync;

impl std::fmt::Debug for BetweenRounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BetweenRounds(..)")
    }
}

/// Options of `ReAct` / `ReActStream` (defaults: branch.md §9.7).
#[derive(Debug, Clone)]
pub struct ReActOptions {
    /// The task (instruction, guidance, context, images; the images go
    /// with the first round's instruction only).
    pub turn: TurnInput,
    /// Rewrite the instruction with `interpret` first.
    pub interpret: bool,
    /// Options of that rewrite (its model → the analysis model, then the
    /// branch's chat model).
    pub interpret_options: InterpretOptions,
    /// Offer only these tools (→ all registered). The first round offers
    /// actions when there is a tool to offer; the extension rounds always
    /// do, as the reference's.
    pub tools: Option<Vec<String>>,
    /// Tool schemas shown with the final answer's instruction (the
    /// analysis rounds show the offered tools' own). Given, even empty,
    /// the first round offers actions on a branch without tools too, as
    /// the reference's does.
    pub tool_schemas: Option<Vec<Value>>,
    /// The final answer's structure (→ `{answer: string | null}`).
    pub response_format: Option<ResponseFormat>,
    /// Allow extension rounds.
    pub extension_allowed: bool,
    /// Extension rounds at most (capped at 100).
    pub max_extensions: usize,
    /// The model of every round (→ the branch's chat model).
    pub analysis_model: Option<Arc<dyn ChatModel>>,
    /// `low` / `medium` / `high`: prefixes the guidance and is sent.
    pub reasoning_effort: Option<String>,
    /// Append the estimated token usage (on by default).
    pub include_token_usage_to_model: bool,
    /// Keep going after a round whose analysis came back all null.
    pub continue_after_failed_response: bool,
    /// How tool calls run.
    pub act: ActOptions,
    /// Native function calling.
    pub native_tools: bool,
    /// Native structured output: the requested structure also goes to the
    /// provider as `response_format` (`json_schema`), which OpenAI, llama.cpp
    /// and the embedded model follow; the reply is still parsed (and
    /// repaired) as usual. Off by default: the reference sends no such field.
    /// A `response_format` set as a payload field wins.
    pub native_format: bool,
    /// Waits between parse repairs (first, factor).
    pub repair_backoff: (std::time::Duration, f64),
    /// Run before each extension round; its text replaces the prompt.
    pub between_rounds: Option<BetweenRounds>,
    /// Also return every round's result ([`ReActOutcome::analyses`]).
    pub return_analysis: bool,
    /// Deliverables the model may hand over in any analysis round: each
    /// becomes a nullable field of the round's required
    /// `intermediate_response_options`.
    pub intermediate_response_options: Vec<ResponseFormat>,
    /// Ask for a list of each intermediate deliverable.
    pub intermediate_listable: bool,
    /// Extra fields of every round's analysis (name → property schema).
    pub field_models: Option<Map<String, Value>>,
    /// Log each round's result through `tracing` at info level.
    pub verbose: bool,
    /// Cut each logged result to this many characters.
    pub verbose_length: Option<usize>,
    /// How a logged result is rendered.
    pub display_as: DisplayAs,
    /// What the final answer does differently (`response_kwargs`).
    pub answer: AnswerOptions,
}

impl Default for ReActOptions {
    fn default() -> Self {
        Self {
            turn: TurnInput::default(),
            interpret: false,
            interpret_options: InterpretOptions::default(),
            tools: None,
            tool_schemas: None,
            response_format: None,
            extension_allowed: true,
            max_extensions: 3,
            analysis_model: None,
            reasoning_effort: None,
            include_token_usage_to_model: true,
            continue_after_failed_response: false,
            act: ActOptions::default(),
            native_tools: false,
            native_format: false,
            repair_backoff: (std::time::Duration::from_secs(1), 1.85),
            between_rounds: None,
            return_analysis: false,
            intermediate_response_options: Vec::new(),
            intermediate_listable: false,
            field_models: None,
            verbose: false,
            verbose_length: None,
            display_as: DisplayAs::Yaml,
            answer: AnswerOptions::default(),
        }
    }
}

turn_setters!(ReActOptions);
crate::options::shared_setters!(ReActOptions: include_token_usage_to_model, act_options, action_strategy, native_tools, native_format, repair_backoff);

impl ReActOptions {
    /// Options for this task.
    pub fn new(instruction: impl Into<Value>) -> Self {
        Self::default().instruction(instruction)
    }

    /// Sets the extension rounds (capped at 100).
    pub fn max_extensions(mut self, n: usize) -> Self {
        if n > MAX_EXTENSIONS_CAP {
            tracing::warn!(
                requested = n,
                "max_extensions capped at {MAX_EXTENSIONS_CAP}"
            );
        }
        self.max_extensions = n.min(MAX_EXTENSIONS_CAP);
        self
    }

    /// Allows or forbids extension rounds.
    pub fn extension_allowed(mut self, on: bool) -> Self {
        self.extension_allowed = on;
        self
    }

    /// Rewrites the instruction first.
    pub fn interpret(mut self, on: bool) -> Self {
        self.interpret = on;
        self
    }

    /// Rewrites the instruction first, with these options (domain, style,
    /// sample, model, payload fields). Without a model of its own the
    /// rewrite uses the analysis model, then the branch's chat model.
    pub fn interpret_with(mut self, options: InterpretOptions) -> Self {
        self.interpret = true;
        self.interpret_options = options;
        self
    }

    /// Offers only these tools.
    pub fn tools<I: IntoIterator<Item = S>, S: Into<String>>(mut self, t: I) -> Self {
        self.tools = Some(t.into_iter().map(Into::into).collect());
        self
    }

    /// Shows these tool schemas with the final answer's instruction.
    pub fn tool_schemas(mut self, schemas: Vec<Value>) -> Self {
        self.tool_schemas = Some(schemas);
        self
    }

    /// Sets the final answer's structure.
    pub fn response_format(mut self, f: ResponseFormat) -> Self {
        self.response_format = Some(f);
        self
    }

    /// Sets the round model.
    pub fn analysis_model(mut self, m: Arc<dyn ChatModel>) -> Self {
        self.analysis_model = Some(m);
        self
    }

    /// Sets the reasoning effort.
    pub fn reasoning_effort(mut self, e: impl Into<String>) -> Self {
        self.reasoning_effort = Some(e.into());
        self
    }

    /// Runs `f(branch, rounds_done)` before each extension round; text it
    /// returns is sent as that round's instruction (an injected round:
    /// the caller's guidance as given, without the reasoning effort).
    pub fn between_rounds<F>(mut self, f: F) -> Self
    where
        F: Fn(&Branch, usize) -> Option<String> + Send + Sync + 'static,
    {
        self.between_rounds = Some(BetweenRounds(Arc::new(move |branch, done| {
            let text = f(branch, done);
            Box::pin(std::future::ready(text))
        })));
        self
    }

    /// [`between_rounds`](Self::between_rounds) with a callback that
    /// awaits (asks a person, reads a queue), as the reference's does.
    /// Dropping the ReAct future while it waits leaves the branch as the
    /// last round left it.
    ///
    /// ```
    /// # use branch_operations::ReActOptions;
    /// let (notes_tx, notes) = tokio::sync::mpsc::channel::<String>(8);
    /// let notes = std::sync::Arc::new(tokio::sync::Mutex::new(notes));
    /// let options = ReActOptions::new("Plan the release.")
    ///     .max_extensions(5)
    ///     .between_rounds_async(move |branch, done| {
    ///         let notes = notes.clone();
    ///         Box::pin(async move {
    ///             let note = notes.lock().await.try_recv().ok()?;
    ///             Some(format!("{note} ({done} rounds, {} messages)", branch.messages().len()))
    ///         })
    ///     });
    /// # drop((notes_tx, options));
    /// ```
    pub fn between_rounds_async<F>(mut self, f: F) -> Self
    where
        F: for<'a> Fn(&'a Branch, usize) -> BetweenRoundsFuture<'a> + Send + Sync + 'static,
    {
        self.between_rounds = Some(BetweenRounds(Arc::new(f)));
        self
    }

    /// Sets what the final answer does differently from the rounds: its
    /// instruction's guidance, context, sender, recipient, plain content,
    /// images and tool schemas, its model and payload fields, a reason,
    /// field models and parsing (the reference's `response_kwargs`; see
    /// [`AnswerOptions`]).
    pub fn answer_with(mut self, a: AnswerOptions) -> Self {
        self.answer = a;
        self
    }

    /// Also returns every round's result.
    pub fn return_analysis(mut self, on: bool) -> Self {
        self.return_analysis = on;
        self
    }

    /// Offers this intermediate deliverable in every analysis round.
    pub fn intermediate_response_option(mut self, f: ResponseFormat) -> Self {
        self.intermediate_response_options.push(f);
        self
    }

    /// Asks for lists of intermediate deliverables.
    pub fn intermediate_listable(mut self, on: bool) -> Self {
        self.intermediate_listable = on;
        self
    }

    /// Adds a field (a JSON schema) to every round's analysis.
    pub fn field_model(mut self, name: impl Into<String>, schema: Value) -> Self {
        crate::field_models::add_to(&mut self.field_models, name.into(), schema);
        self
    }

    /// Logs each round's result, cut to `length` characters when given.
    pub fn verbose(mut self, on: bool, length: Option<usize>) -> Self {
        self.verbose = on;
        self.verbose_length = length;
        self
    }

    /// Sets how logged results are rendered.
    pub fn display_as(mut self, how: DisplayAs) -> Self {
        self.display_as = how;
        self
    }
}

/// One result yielded by `ReActStream`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReActRound {
    /// 1-based round number (the final answer is the last).
    pub round: usize,
    /// Whether this is the final answer.
    pub is_final: bool,
    /// The round's parsed analysis (or final result), or its text.
    pub result: Parsed,
    /// The reply text.
    pub text: String,
}

impl ReActRound {
    /// The result as JSON: the parsed structure, else the reply text.
    pub fn result_value(&self) -> Value {
        match &self.result {
            Parsed::Value(v) => v.clone(),
            _ => Value::String(self.text.clone()),
        }
    }
}

/// What `ReAct` returns.
#[derive(Debug, Clone, PartialEq)]
pub struct ReActOutcome {
    /// The final answer: the final structure's `answer` field when it has
    /// one (the default format always does) and is not a dict format
    /// (`ResponseFormat::Fields`, whose reading is the answer whole), else
    /// the whole structure, else the last reply text.
    pub answer: Value,
    /// Every yielded result, the final one last.
    pub rounds: Vec<ReActRound>,
    /// With `return_analysis`: every round's result as JSON (the parsed
    /// structure, or the reply text when parsing failed), the final last.
    pub analyses: Option<Vec<Value>>,
}

/// Which analysis round a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Round {
    First,
    /// Text from `between_rounds` in place of an extension prompt.
    Injected,
    Extension,
}

struct State<'b> {
    branch: &'b mut Branch,
    opts: ReActOptions,
    /// The first round's instruction (with the interpretation, if any).
    instruction: String,
    /// The caller's instruction, which the final answer restates.
    original: String,
    actions: bool,
    round: usize,
    extensions: usize,
    last_needs_extension: bool,
    finished: bool,
    committed: Committed,
}

fn effort_prefix(e: Option<&str>) -> Option<&'static str> {
    match e? {
        "low" => Some("Quick concise reasoning.\n"),
        "medium" => Some("Reasonably balanced reasoning.\n"),
        "high" => Some("Thorough, try as hard as you can in reasoning.\n"),
        _ => None,
    }
}

impl State<'_> {
    fn round_fields(&self) -> Option<Map<String, Value>> {
        let o = &self.opts;
        let mut m = o.field_models.clone().unwrap_or_default();
        if !o.intermediate_response_options.is_empty() {
            m.insert(
                INTERMEDIATE_FIELD.into(),
                intermediate_field(&o.intermediate_response_options, o.intermediate_listable),
            );
        }
        (!m.is_empty()).then_some(m)
    }

    fn show(&self, r: &ReActRound) {
        if self.opts.verbose {
            let shown = render(
                &r.result_value(),
                self.opts.display_as,
                self.opts.verbose_length,
            );
            tracing::info!(
                round = r.round,
                is_final = r.is_final,
                "ReAct round:\n{shown}"
            );
        }
    }

    fn round_options(&self, instruction: String, round: Round) -> OperateOptions {
        let first = round == Round::First;
        let o = &self.opts;
        let mut turn = o.turn.clone();
        turn.instruction = Some(Value::String(instruction));
        turn.image_detail.get_or_insert(ImageDetail::Auto);
        // Every round keeps the caller's guidance, as the reference's
        // round instructions do; the reasoning effort applies to the
        // extension rounds only (not to the first or an injected one).
        if round == Round::Extension {
            // A guidance that is not text (a map, a list) is kept as it
            // is, without the prefix: the reference fails the round on
            // it, and dropping it would lose what the caller asked.
            if let Some(p) = effort_prefix(o.reasoning_effort.as_deref()) {
                match &turn.guidance {
                    None => turn.guidance = Some(Value::String(p.to_owned())),
                    Some(Value::String(g)) => {
                        turn.guidance = Some(Value::String(format!("{p}{g}")))
                    }
                    Some(_) => {}
                }
            }
            if let Some(e) = &o.reasoning_effort {
                turn.fields
                    .insert("reasoning_effort".into(), e.clone().into());
            }
        }
        OperateOptions {
            turn,
            response_format: Some(ResponseFormat::Schema(react_analysis_schema())),
            reason: true,
            // The extension rounds offer actions even on a branch
            // without tools, as the reference's do (its default action
            // parameters name every tool, of which there may be none).
            actions: self.actions || round == Round::Extension,
            tools: o.tools.clone(),
            chat_model: o.analysis_model.clone(),
            parse_model: o.analysis_model.clone(),
            act: o.act,
            include_token_usage_to_model: o.include_token_usage_to_model,
            native_tools: o.native_tools,
            native_format: o.native_format,
            repair_backoff: o.repair_backoff,
            react_context: (!first && !o.turn.context.is_empty()).then(|| o.turn.context.clone()),
            field_models: self.round_fields(),
            ..OperateOptions::default()
        }
    }

    async fn step(&mut self) -> Result<Option<ReActRound>> {
        if self.finished {
            return Ok(None);
        }
        let before = self.branch.messages().len();
        let result = self.step_inner().await;
        let added = self.branch.messages().len().saturating_sub(before);
        match result {
            Ok(r) => {
                self.show(&r);
                self.committed.messages += added;
                self.committed.turns += 1;
                Ok(Some(r))
            }
            Err(e) => {
                self.finished = true;
                let c = Committed {
                    messages: self.committed.messages + added,
                    turns: self.committed.turns,
                };
                Err(e.with_committed(c))
            }
        }
    }

    async fn step_inner(&mut self) -> Result<ReActRound> {
        let max = self.opts.max_extensions.min(MAX_EXTENSIONS_CAP);
        let extending = self.opts.extension_allowed && max > 0;
        if self.round == 0 {
            let mut instruction = self.instruction.clone();
            if extending {
                instruction = format!("{instruction}\n\n{}", first_ext_prompt(max));
            }
            let opts = self.round_options(instruction, Round::First);
            // The images go with the task, once: later rounds and the
            // answer see them in the history, and they are not copied
            // again.
            self.opts.turn.images = Vec::new();
            return self.analysis_round(opts).await;
        }
        if extending && self.extensions > 0 && self.last_needs_extension {
            let injected = match self.opts.between_rounds.clone() {
                Some(cb) => (cb.0)(self.branch, self.round).await,
                None => None,
            };
            // An empty text is no text, as in the reference.
            if let Some(text) = injected.filter(|t| !t.is_empty()) {
                let opts = self.round_options(text, Round::Injected);
                self.extensions -= 1;
                return self.analysis_round(opts).await;
            }
            let instruction = if self.extensions == max {
                first_ext_prompt(self.extensions)
            } else {
                continue_ext_prompt(self.extensions)
            };
            let opts = self.round_options(instruction, Round::Extension);
            self.extensions -= 1;
            let r = self.analysis_round(opts).await?;
            if let Parsed::Value(Value::Object(o)) = &r.result {
                if o.values().all(Value::is_null) && !self.opts.continue_after_failed_response {
                    return Err(OperationError::InvalidArgument {
                        what: "analysis",
                        message: "the round's analysis came back empty (all fields null)".into(),
                    });
                }
            }
            return Ok(r);
        }
        self.final_round().await
    }

    async fn analysis_round(&mut self, opts: OperateOptions) -> Result<ReActRound> {
        let mut o = operate(self.branch, opts).await?;
        // The reference's analysis defaults its text to empty and its
        // action fields to "no action": `false`, no requests, no
        // responses (defaults its request schema does not show).
        if let Parsed::Value(Value::Object(m)) = &mut o.parsed {
            if let Some(v) = m.get_mut("analysis").filter(|v| v.is_null()) {
                *v = Value::String(String::new());
            }
            crate::operate::no_action_defaults(m);
        }
        self.round += 1;
        self.last_needs_extension = o
            .structured
            .as_ref()
            .and_then(|v| v.get("extension_needed"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        Ok(ReActRound {
            round: self.round,
            is_final: false,
            result: o.parsed,
            text: o.text,
        })
    }

    async fn final_round(&mut self) -> Result<ReActRound> {
        let format = self
            .opts
            .response_format
            .clone()
            .unwrap_or_else(|| ResponseFormat::Schema(analysis_schema()));
        let o = &self.opts;
        let mut turn = o.turn.clone();
        turn.instruction = Some(Value::String(answer_prompt(&self.original)));
        turn.image_detail.get_or_insert(ImageDetail::Auto);
        // The answer's instruction keeps the guidance and stores the
        // caller's context, which the request de-duplicates as in the
        // extension rounds.
        let react_context = (!o.turn.context.is_empty()).then(|| o.turn.context.clone());
        let opts = o.answer.apply(OperateOptions {
            turn,
            react_context,
            response_format: Some(format),
            tool_schemas: o.tool_schemas.clone().unwrap_or_default(),
            chat_model: o.analysis_model.clone(),
            parse_model: o.analysis_model.clone(),
            include_token_usage_to_model: o.include_token_usage_to_model,
            repair_backoff: o.repair_backoff,
            native_format: o.native_format,
            ..OperateOptions::default()
        });
        let out = operate(self.branch, opts).await?;
        self.round += 1;
        self.finished = true;
        let mut result = out.parsed;
        if self.opts.response_format.is_none() {
            if let Parsed::Value(Value::Object(m)) = &mut result {
                if m.get("answer")
                    .and_then(Value::as_str)
                    .is_some_and(|s| s.trim().is_empty())
                {
                    m.insert("answer".into(), Value::Null);
                }
            }
        }
        Ok(ReActRound {
            round: self.round,
            is_final: true,
            result,
            text: out.text,
        })
    }
}

async fn setup(branch: &mut Branch, opts: ReActOptions) -> Result<State<'_>> {
    crate::field_models::check_deliverables(&opts.intermediate_response_options).map_err(
        |message| OperationError::InvalidArgument {
            what: "intermediate_response_options",
            message,
        },
    )?;
    let mut instruction = match &opts.turn.instruction {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    let original = instruction.clone();
    if opts.interpret {
        let mut options = opts.interpret_options.clone();
        // The rewrite is the run's first call to a model: the run's model,
        // as in the reference, unless it was given one of its own.
        if options.model.is_none() {
            options.model = opts.analysis_model.clone();
        }
        let rewritten = interpret(branch, &instruction, options).await?;
        instruction = format!("{instruction}\n\nInterpreted instruction: {rewritten}");
    }
    let actions = opts.tools.is_some()
        || opts.tool_schemas.is_some()
        || branch.acts().iter().next().is_some();
    let max = opts.max_extensions.min(MAX_EXTENSIONS_CAP);
    Ok(State {
        branch,
        opts,
        instruction,
        original,
        actions,
        round: 0,
        extensions: max,
        last_needs_extension: false,
        finished: false,
        committed: Committed::default(),
    })
}

/// The rounds of a ReAct run as a stream, under the verb's own span
/// (`ReActStream`); the final answer is the last item. After an error the
/// stream ends.
pub(crate) fn react_stream(
    branch: &mut Branch,
    opts: ReActOptions,
) -> impl Stream<Item = Result<ReActRound>> + Send + '_ {
    let span = crate::telemetry::verb_span("ReActStream", branch);
    span.stream(react_rounds(branch, opts))
}

/// The rounds of a ReAct run, outside any span (the verbs open theirs).
fn react_rounds(
    branch: &mut Branch,
    opts: ReActOptions,
) -> impl Stream<Item = Result<ReActRound>> + Send + '_ {
    enum S<'b> {
        Start(&'b mut Branch, Box<ReActOptions>),
        Running(Box<State<'b>>),
        Done,
    }
    futures_util::stream::unfold(S::Start(branch, Box::new(opts)), |s| async move {
        let mut state = match s {
            S::Start(b, o) => match setup(b, *o).await {
                Ok(st) => Box::new(st),
                Err(e) => return Some((Err(e), S::Done)),
            },
            S::Running(st) => st,
            S::Done => return None,
        };
        match state.step().await {
            Ok(Some(r)) => Some((Ok(r), S::Running(state))),
            Ok(None) => None,
            Err(e) => Some((Err(e), S::Done)),
        }
    })
}

pub(crate) async fn react(branch: &mut Branch, opts: ReActOptions) -> Result<ReActOutcome> {
    use futures_util::StreamExt;
    let span = crate::telemetry::verb_span("ReAct", branch);
    let default_format = opts.response_format.is_none();
    let dict_format = matches!(opts.response_format, Some(ResponseFormat::Fields(_)));
    let return_analysis = opts.return_analysis;
    let fut = async {
        let mut rounds = Vec::new();
        let stream = react_rounds(branch, opts);
        futures_util::pin_mut!(stream);
        while let Some(r) = stream.next().await {
            rounds.push(r?);
        }
        Ok::<_, OperationError>(rounds)
    };
    let rounds = span.run(fut).await?;
    let last = rounds.last();
    let answer = match last.map(|r| &r.result) {
        // The reference answers with the final structure's `answer` field
        // whenever it has one (its own Analysis or the caller's format).
        // A dict format's reading is the answer whole, whatever its keys:
        // the reference's answer is a dict then, which has no attribute.
        Some(Parsed::Value(v)) if dict_format => v.clone(),
        Some(Parsed::Value(v)) => match v.get("answer") {
            Some(a) => a.clone(),
            None if default_format => Value::Null,
            None => v.clone(),
        },
        // The answer's `return_none` policy (`AnswerOptions::on_parse_failure`).
        Some(Parsed::Nothing) => Value::Null,
        _ => Value::String(last.map(|r| r.text.clone()).unwrap_or_default()),
    };
    let analyses = return_analysis.then(|| rounds.iter().map(ReActRound::result_value).collect());
    Ok(ReActOutcome {
        answer,
        rounds,
        analyses,
    })
}
