//! `run`: a streamed turn yielding messages as they arrive — from a CLI
//! agent speaking Claude Code's `stream-json` protocol, or from an HTTP
//! provider over SSE (beyond the reference, which streams CLI endpoints
//! only). The turn is atomic: its messages are yielded as they are built
//! and appended to the branch together when the stream completes; a
//! stream dropped or failed midway records nothing.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use branch_actions::{ActionManagerExt, ToolSelection};
use branch_core::log::{ApiCallHead, Log};
use branch_core::message::Message;
use branch_core::model::{ChatModel, ChatStream, ChunkKind, StreamAccumulator, now_timestamp};
use branch_core::{Branch, Participant};
use futures_core::Stream;
use futures_util::StreamExt;
use serde_json::{Map, Value, json};
use tokio::io::BufReader;
use tokio::process::{Child, ChildStdout};
use uuid::Uuid;

use crate::act::{ActOptions, Screened, native_calls, native_tool_list, run_calls};
use crate::approval::policy_of;
use crate::cli_stream::CliTurnReader;
use crate::error::{Committed, OperationError, Result};
use crate::pending::PendingApproval;
use crate::persist::Persist;
use crate::turn::{
    SendOptions, TurnInput, commit, compile, connect_models, instruction_message, turn_setters,
    user_of,
};

/// A callback given each piece of reply text as it arrives (see
/// the `on_text` field of [`RunOptions`]). Cheap to clone: clones share
/// the callback.
#[derive(Clone)]
pub struct TextHook(Arc<dyn Fn(&str) + Send + Sync>);

impl TextHook {
    /// Wraps `f`.
    pub fn new(f: impl Fn(&str) + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    /// Calls the callback with `text` (never with an empty string).
    pub fn call(&self, text: &str) {
        if !text.is_empty() {
            (self.0)(text);
        }
    }
}

impl std::fmt::Debug for TextHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TextHook(..)")
    }
}

/// Options of `run` (defaults: branch.md §9.8).
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// The instruction and how it is sent.
    pub turn: TurnInput,
    /// Replaces the branch's chat model (permanently, as the reference).
    pub chat_model: Option<Arc<dyn ChatModel>>,
    /// The CLI agent executable. Set, the turn runs through it (Claude
    /// Code `stream-json` protocol); unset, CLI models run `claude` and
    /// HTTP models stream over SSE.
    pub cli_command: Option<PathBuf>,
    /// Extra arguments of the CLI agent.
    pub cli_args: Vec<String>,
    /// How native tool calls of an SSE reply run.
    pub act: ActOptions,
    /// Offers the branch's tools (those in `tools`, else all) through the
    /// provider's own function calling: the request carries them as its
    /// `tools`, the history's calls and results go out as `tool_calls` and
    /// `tool` messages, and the reply's calls run as they do without it.
    /// Streaming chat models only: a CLI agent runs its own tools, and a
    /// run asking it to offer ours is refused.
    pub native_tools: bool,
    /// The tools `native_tools` offers, in this order (→ all registered).
    pub tools: Option<Vec<String>>,
    /// Overall deadline of the stream, the native tool calls it runs
    /// included (none by default).
    pub timeout: Option<Duration>,
    /// Longest wait for the next chunk or line. Unset: none for a
    /// streaming chat model (its own call deadline bounds it), 600 s for a
    /// CLI agent ([`crate::limits::CLI_IDLE_TIMEOUT`], the reference's
    /// window).
    pub idle_timeout: Option<Duration>,
    /// Persist the run: a branch snapshot before and after the stream, and
    /// each streamed message appended to a JSONL buffer meanwhile.
    pub stream_persist: bool,
    /// The buffer's (and by default the snapshot's) directory
    /// (→ `$LIONAGI_HOME/logs/runs`, `~/.lionagi/logs/runs`).
    pub persist_dir: Option<PathBuf>,
    /// The snapshot's directory (→ `persist_dir`).
    pub snapshot_dir: Option<PathBuf>,
    /// A structure to ask for, rendered into the instruction (the reply
    /// is not parsed here; `operate`'s run-and-collect middle parses it).
    pub response_format: Option<branch_messages::ResponseFormat>,
    /// Called with each piece of reply text as it arrives: every text
    /// delta of a streaming chat model, every text block of a CLI agent.
    /// It only observes: the turn is still recorded at the stream's end,
    /// or not at all, so text seen here may belong to a turn that is then
    /// cancelled or fails.
    pub on_text: Option<TextHook>,
    /// Called with each piece of the model's reasoning as it arrives:
    /// every thinking delta of a streaming chat model (Anthropic
    /// `thinking_delta`, a compatible server's `reasoning_content`,
    /// Responses reasoning summaries), every thinking block of a CLI
    /// agent. Observes only, as `on_text`.
    pub on_thinking: Option<TextHook>,
}

turn_setters!(RunOptions);
crate::options::shared_setters!(RunOptions: act_options, action_strategy, native_tools);

impl RunOptions {
    /// Options for this instruction.
    pub fn new(instruction: impl Into<Value>) -> Self {
        Self::default().instruction(instruction)
    }

    /// Replaces the branch's chat model.
    pub fn chat_model(mut self, m: Arc<dyn ChatModel>) -> Self {
        self.chat_model = Some(m);
        self
    }

    /// Runs through this CLI agent executable.
    pub fn cli_command(mut self, p: impl Into<PathBuf>) -> Self {
        self.cli_command = Some(p.into());
        self
    }

    /// Sets an overall deadline.
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }

    /// Sets the longest wait between chunks.
    pub fn idle_timeout(mut self, d: Duration) -> Self {
        self.idle_timeout = Some(d);
        self
    }

    /// Persists the run (snapshots and a message buffer).
    pub fn stream_persist(mut self, on: bool) -> Self {
        self.stream_persist = on;
        self
    }

    /// Sets the buffer's (and by default the snapshot's) directory.
    pub fn persist_dir(mut self, d: impl Into<PathBuf>) -> Self {
        self.persist_dir = Some(d.into());
        self
    }

    /// Sets the snapshot's directory.
    pub fn snapshot_dir(mut self, d: impl Into<PathBuf>) -> Self {
        self.snapshot_dir = Some(d.into());
        self
    }

    /// Asks for this structure in the instruction (the reply is not parsed
    /// here).
    pub fn response_format(mut self, f: branch_messages::ResponseFormat) -> Self {
        self.response_format = Some(f);
        self
    }

    /// Calls `f` with each piece of reply text as it arrives (see the
    /// `on_text` field).
    pub fn on_text(mut self, f: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.on_text = Some(TextHook::new(f));
        self
    }

    /// Calls `f` with each piece of reasoning as it arrives (see the
    /// `on_thinking` field).
    pub fn on_thinking(mut self, f: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.on_thinking = Some(TextHook::new(f));
        self
    }

    /// Offers only these tools (with `native_tools`).
    pub fn tools<I: IntoIterator<Item = S>, S: Into<String>>(mut self, t: I) -> Self {
        self.tools = Some(t.into_iter().map(Into::into).collect());
        self
    }

    /// Adds CLI arguments.
    pub fn cli_args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, a: I) -> Self {
        self.cli_args = a.into_iter().map(Into::into).collect();
        self
    }
}

#[allow(clippy::large_enum_variant)] // one per turn; never moved in a hot loop
enum Source {
    Http {
        stream: ChatStream,
        acc: StreamAccumulator,
        payload: Value,
        started: Instant,
        started_at: f64,
        model: Arc<dyn ChatModel>,
    },
    Cli(Box<CliSource>),
    /// The native tool calls of a reply already yielded: run on the next
    /// pump, so the reply is seen before the tools take their time.
    Calls(Vec<branch_actions::ToolCall>),
}

struct CliSource {
    child: Child,
    lines: BufReader<ChildStdout>,
    /// Writes the prompt to the agent's stdin; `None` once it is done.
    prompt_writer: Option<crate::agent::PromptWriter>,
    reader: CliTurnReader,
    payload: Value,
    started: Instant,
    started_at: f64,
    /// Bytes of output read so far this turn (capped by
    /// [`crate::limits::MAX_CLI_TURN_BYTES`]).
    read: usize,
}

struct RunState<'b> {
    branch: &'b mut Branch,
    opts: RunOptions,
    queue: VecDeque<Message>,
    record: Vec<Message>,
    source: Option<Source>,
    done: bool,
    deadline: Option<tokio::time::Instant>,
    obs: Option<crate::signals::RunObs>,
    span: crate::telemetry::VerbSpan,
    persist: Option<Persist>,
    /// Set when the turn paused on calls awaiting approval: yielded after
    /// the turn's messages.
    paused: Option<OperationError>,
}

/// Waits for `fut` within the idle window and the overall deadline.
pub(crate) async fn bounded<F: std::future::Future>(
    fut: F,
    idle: Option<Duration>,
    deadline: Option<tokio::time::Instant>,
) -> std::result::Result<F::Output, &'static str> {
    let now = tokio::time::Instant::now();
    let idle_at = idle.map(|d| now + d);
    let until = match (idle_at, deadline) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    match until {
        None => Ok(fut.await),
        Some(t) => tokio::time::timeout_at(t, fut).await.map_err(|_| {
            if deadline.is_some_and(|d| d <= t) {
                "the run's deadline passed"
            } else {
                "no output within the idle window"
            }
        }),
    }
}

impl RunState<'_> {
    fn emit(&mut self, m: Message) {
        self.record.push(m.clone());
        self.queue.push_back(m);
    }

    fn fail(&mut self, message: String) -> OperationError {
        self.done = true;
        OperationError::Run {
            message,
            committed: Committed::default(),
        }
    }

    async fn start(&mut self) -> Result<()> {
        // `checked_add`: a timeout too large for the clock means no deadline,
        // not a panic.
        self.deadline = self
            .opts
            .timeout
            .and_then(|d| tokio::time::Instant::now().checked_add(d));
        if let Some(m) = self.opts.chat_model.clone() {
            self.branch.set_chat_model(m);
        }
        connect_models(self.branch)?;
        let model = self.branch.chat_model().clone();
        let cli = self
            .opts
            .cli_command
            .clone()
            .or_else(|| model.is_cli().then(crate::agent::program));
        if self.opts.native_tools {
            let tools = self.offered_tools(cli.is_some())?;
            self.opts.turn.fields.insert("tools".into(), tools);
        }
        let content = self
            .opts
            .turn
            .take_content(Vec::new(), self.opts.response_format.as_ref());
        let send_opts = SendOptions {
            progression: self.opts.turn.progression.as_deref(),
            providers: &self.opts.turn.context_providers,
            native_tools: self.opts.native_tools,
            ..SendOptions::default()
        };
        let instruction = instruction_message(self.branch, &self.opts.turn, content);
        let request = compile(
            self.branch,
            &model,
            &instruction,
            &self.opts.turn.fields,
            &send_opts,
        )
        .await?;
        let payload = model.request_payload(&request, true);
        self.emit(instruction);
        let started = Instant::now();
        let started_at = now_timestamp();
        if let Some(cmd) = cli {
            let prompt = crate::agent::prompt_of(&request);
            let session = crate::agent::stored_session(self.branch).map_err(|why| {
                self.fail(format!(
                    "{why}; it was not passed to {}. Remove it from the conversation's \
                     metadata to start a new agent session",
                    cmd.display()
                ))
            })?;
            let mut command = crate::agent::command(
                &cmd,
                &self.opts.cli_args,
                model.config().model_name(),
                session.as_deref(),
            );
            let mut child = command
                .spawn()
                .map_err(|e| self.fail(format!("cannot start {}: {e}", cmd.display())))?;
            // Written beside the reading of the output, not before it: an
            // agent may write before it reads, and neither pipe holds more
            // than the kernel's buffer.
            let prompt_writer = crate::agent::write_prompt(&mut child, prompt);
            let stdout = child
                .stdout
                .take()
                .ok_or_else(|| self.fail("the CLI agent has no stdout".into()))?;
            self.source = Some(Source::Cli(Box::new(CliSource {
                child,
                lines: BufReader::new(stdout),
                prompt_writer,
                reader: CliTurnReader::new(self.branch.id(), user_of(self.branch))
                    .on_text(self.opts.on_text.clone())
                    .on_thinking(self.opts.on_thinking.clone()),
                payload,
                started,
                started_at,
                read: 0,
            })));
        } else {
            let stream = match model.stream(request).await {
                Ok(s) => s,
                Err(e) => {
                    // A call refused before sending was never made.
                    if !e.kind.is_refused_before_sending() {
                        self.log_call(&payload, started_at, started, Err(&e));
                    }
                    self.done = true;
                    return Err(OperationError::api(e));
                }
            };
            self.source = Some(Source::Http {
                stream,
                acc: StreamAccumulator::new(),
                payload,
                started,
                started_at,
                model,
            });
        }
        Ok(())
    }

    /// The request's `tools` for `native_tools`. Refused before anything
    /// is sent when the turn goes to a CLI agent, which has tools of its
    /// own and no way to be offered ours.
    fn offered_tools(&mut self, to_agent: bool) -> Result<Value> {
        if to_agent {
            self.done = true;
            return Err(OperationError::InvalidArgument {
                what: "native_tools",
                message: "a CLI agent runs its own tools; offer the branch's tools to a \
                          streaming chat model, or use operate's prompt-embedded actions"
                    .into(),
            });
        }
        let selection = self
            .opts
            .tools
            .clone()
            .map_or(ToolSelection::All, ToolSelection::Named);
        let schemas = self.branch.acts().tool_schemas(&selection).map_err(|e| {
            self.done = true;
            OperationError::InvalidArgument {
                what: "tools",
                message: e.to_string(),
            }
        })?;
        Ok(native_tool_list(&schemas))
    }

    /// Logs the call as `chat` does (turn.rs), the payload and the reply
    /// held as values.
    fn log_call(
        &mut self,
        payload: &Value,
        started_at: f64,
        started: Instant,
        result: std::result::Result<
            &branch_core::model::ChatResponse,
            &branch_core::model::ModelError,
        >,
    ) {
        let head = ApiCallHead::of(result, started_at, started.elapsed().as_secs_f64());
        let response = result.map_or(Value::Null, |r| r.raw.peek().into_owned());
        self.branch
            .log(Log::new(head.record(payload.clone(), response)));
    }

    fn assistant(&self, text: String, meta: Map<String, Value>) -> Message {
        let mut m = Message::assistant(text)
            .with_sender(Participant::Id(self.branch.id()))
            .with_recipient(user_of(self.branch));
        m.element.metadata.extend(meta);
        m
    }

    /// Advances the source until something is queued or the turn ends.
    async fn pump(&mut self) -> Result<()> {
        let Some(source) = self.source.take() else {
            self.done = true;
            return Ok(());
        };
        match source {
            Source::Http {
                mut stream,
                mut acc,
                payload,
                started,
                started_at,
                model,
            } => {
                loop {
                    let next =
                        match bounded(stream.next(), self.opts.idle_timeout, self.deadline).await {
                            Ok(n) => n,
                            Err(why) => return Err(self.fail(why.to_owned())),
                        };
                    let Some(chunk) = next else { break };
                    match chunk {
                        Ok(c) => {
                            let hook = match c.kind {
                                ChunkKind::Text => self.opts.on_text.as_ref(),
                                ChunkKind::Thinking => self.opts.on_thinking.as_ref(),
                                _ => None,
                            };
                            if let (Some(hook), Some(text)) = (hook, c.content.as_deref()) {
                                hook.call(text);
                            }
                            acc.push(&c);
                        }
                        Err(e) => {
                            self.log_call(&payload, started_at, started, Err(&e));
                            self.done = true;
                            return Err(OperationError::api(e));
                        }
                    }
                }
                let _ = model;
                let response = acc.finish();
                self.log_call(&payload, started_at, started, Ok(&response));
                let mut meta = Map::new();
                meta.insert("model_response".into(), response.raw.peek().into_owned());
                if !response.reasoning.is_empty() {
                    // Kept beside the reply as `chat` keeps it (turn.rs).
                    meta.insert(
                        branch_core::model::REASONING_METADATA_KEY.into(),
                        branch_core::model::ReasoningBlock::list_to_value(&response.reasoning),
                    );
                }
                let reply = self.assistant(response.text.clone(), meta);
                self.emit(reply);
                if response.tool_calls.is_empty() {
                    self.finish();
                } else {
                    self.source = Some(Source::Calls(native_calls(&response.tool_calls)));
                }
                Ok(())
            }
            Source::Calls(calls) => {
                // The run's deadline covers its tools too; past it the
                // calls are dropped (cancelled) and nothing is recorded.
                let screened = match bounded(
                    run_calls(self.branch, calls, self.opts.act),
                    None,
                    self.deadline,
                )
                .await
                {
                    Ok(s) => s,
                    Err(why) => return Err(self.fail(why.to_owned())),
                };
                match screened {
                    Screened::Done(acted) => {
                        for m in acted.messages {
                            self.emit(m);
                        }
                    }
                    Screened::Paused(proposed) => {
                        // The reply is kept; the calls wait in the
                        // metadata, and the stream ends with the pause.
                        let record = std::mem::take(&mut self.record);
                        let n = commit(self.branch, record);
                        let expiry = policy_of(self.branch).and_then(|p| p.expiry());
                        let p = PendingApproval::new("run", proposed, self.opts.act, expiry, None);
                        p.store(self.branch);
                        self.done = true;
                        self.paused = Some(p.paused(Committed {
                            messages: n,
                            turns: 1,
                        }));
                        return Ok(());
                    }
                }
                self.finish();
                Ok(())
            }
            Source::Cli(mut cli) => {
                let idle = self
                    .opts
                    .idle_timeout
                    .unwrap_or(crate::limits::CLI_IDLE_TIMEOUT);
                loop {
                    let next = bounded(
                        crate::agent::line(&mut cli.lines, crate::limits::MAX_CLI_LINE_BYTES),
                        Some(idle),
                        self.deadline,
                    )
                    .await;
                    let line = match next {
                        Ok(Ok(Some(l))) => l,
                        Ok(Ok(None)) => break,
                        Ok(Err(e)) => {
                            return Err(self.fail(format!("reading the CLI stream: {e}")));
                        }
                        Err(why) => {
                            // The agent is killed on drop (kill_on_drop).
                            return Err(self.fail(why.to_owned()));
                        }
                    };
                    // The newline counts too: an agent writing empty lines
                    // forever still reaches the cap.
                    cli.read = cli.read.saturating_add(line.len()).saturating_add(1);
                    if cli.read > crate::limits::MAX_CLI_TURN_BYTES {
                        return Err(self.fail(format!(
                            "the agent wrote more than {} bytes in one turn, the limit",
                            crate::limits::MAX_CLI_TURN_BYTES
                        )));
                    }
                    let before = cli.reader.messages().len();
                    if let Err(e) = cli.reader.read_line(&line) {
                        return Err(self.fail(e.to_string()));
                    }
                    // Yielded as they are read; recorded with the turn.
                    let new = cli.reader.messages().get(before..).unwrap_or_default();
                    if !new.is_empty() {
                        self.queue.extend(new.iter().cloned());
                        self.source = Some(Source::Cli(cli));
                        return Ok(());
                    }
                }
                let CliSource {
                    mut child,
                    prompt_writer,
                    reader,
                    payload,
                    started,
                    started_at,
                    ..
                } = *cli;
                // The agent answered the whole prompt, or the turn fails:
                // an agent that stopped reading it answered something else.
                if let Some(mut w) = prompt_writer {
                    let why = match bounded(&mut w.0, Some(idle), self.deadline).await {
                        Ok(Ok(Ok(()))) => None,
                        Ok(Ok(Err(e))) => Some(format!("cannot write the prompt: {e}")),
                        Ok(Err(e)) => Some(format!("cannot write the prompt: {e}")),
                        Err(why) => Some(format!("the agent did not read its prompt: {why}")),
                    };
                    if let Some(why) = why {
                        return Err(self.fail(why));
                    }
                }
                // An agent that closed its output but does not exit is not
                // waited on forever (it is killed on drop).
                let status = match bounded(child.wait(), Some(idle), self.deadline).await {
                    Ok(s) => s.ok(),
                    Err(why) => return Err(self.fail(why.to_owned())),
                };
                if status.is_some_and(|s| !s.success()) && !reader.has_reply() {
                    return Err(self.fail(format!(
                        "the CLI agent exited with {}",
                        status.map(|s| s.to_string()).unwrap_or_default()
                    )));
                }
                let api_call_meta = json!({"id": Uuid::new_v4().to_string(), "created_at": started_at,
                    "metadata": {"lion_class": "lionagi.service.connections.api_calling.APICalling"},
                    "execution": {"status": "completed", "duration": started.elapsed().as_secs_f64(), "error": null, "retryable": null},
                    "payload": payload});
                let before = reader.messages().len();
                let turn = match reader.finish(api_call_meta) {
                    Ok(t) => t,
                    Err(e) => return Err(self.fail(e.to_string())),
                };
                // Earlier messages were queued as they were read.
                if let Some(last) = turn.messages.get(before..) {
                    self.queue.extend(last.iter().cloned());
                }
                self.record.extend(turn.messages);
                if let Some(id) = turn.session_id {
                    self.branch
                        .metadata_mut()
                        .insert("cli_session_id".into(), id.into());
                }
                self.finish();
                Ok(())
            }
        }
    }

    fn finish(&mut self) {
        let record = std::mem::take(&mut self.record);
        commit(self.branch, record);
        self.done = true;
        if let Some(obs) = self.obs.take() {
            let _ = obs.finish(self.branch, Ok(()), |_| Value::Null);
        }
    }

    /// With `stream_persist`: the snapshot before the stream. Failing here
    /// stops the run before anything is sent.
    async fn open_persist(&mut self) -> Result<()> {
        if !self.opts.stream_persist {
            return Ok(());
        }
        let p = Persist::new(
            self.branch.id(),
            self.opts.persist_dir.as_deref(),
            self.opts.snapshot_dir.as_deref(),
        );
        p.snapshot(self.snapshot_dict()?).await?;
        self.persist = Some(p);
        Ok(())
    }

    fn snapshot_dict(&self) -> Result<Value> {
        self.branch
            .to_dict(&Default::default())
            .map_err(|e| OperationError::Run {
                message: format!("cannot snapshot the branch: {e}"),
                committed: Committed::default(),
            })
    }

    /// Appends a yielded message to the buffer. The turn goes on when this
    /// fails: the stream is the primary record, the buffer a spare.
    fn buffer(&self, m: &Message) -> impl std::future::Future<Output = ()> + Send + 'static {
        let p = self.persist.clone();
        let line = m
            .to_value()
            .or_else(|_| serde_json::to_value(m))
            .unwrap_or(Value::Null);
        async move { buffer_line(p, line).await }
    }
    /// The snapshot after a completed turn; the buffer is then redundant.
    async fn close_persist(&mut self) {
        let Some(p) = self.persist.take() else { return };
        let done = match self.snapshot_dict() {
            Ok(d) => p.snapshot(d).await,
            Err(e) => Err(e),
        };
        let done = match done {
            Ok(()) => p.clear_buffer().await,
            Err(e) => Err(e),
        };
        if let Err(e) = done {
            tracing::warn!(error = %e, "run persistence not completed");
        }
    }

    /// Reports a failure to the observer and passes it on.
    fn failed(&mut self, e: OperationError) -> OperationError {
        if let Some(t) = crate::telemetry::error_type(&e) {
            branch_core::telemetry::record_error(self.span.span(), t);
        }
        match self.obs.take() {
            Some(obs) => match obs.finish::<()>(self.branch, Err(e), |_| Value::Null) {
                Err(e) => e,
                Ok(()) => OperationError::Run {
                    message: "run failed".into(),
                    committed: Committed::default(),
                },
            },
            None => e,
        }
    }
}

async fn buffer_line(p: Option<Persist>, line: Value) {
    let Some(p) = p else { return };
    if let Err(e) = p.append(line).await {
        tracing::warn!(error = %e, "run buffer not written");
    }
}

pub(crate) fn run(
    branch: &mut Branch,
    opts: RunOptions,
) -> impl Stream<Item = Result<Message>> + Send + '_ {
    let obs = Some(crate::signals::RunObs::start(branch, "run"));
    let span = crate::telemetry::verb_span("run", branch);
    let state = RunState {
        span,
        obs,
        branch,
        opts,
        queue: VecDeque::new(),
        record: Vec::new(),
        source: None,
        done: false,
        deadline: None,
        persist: None,
        paused: None,
    };
    futures_util::stream::unfold((state, false), |(mut st, started)| async move {
        if !started {
            if let Err(e) = st.open_persist().await {
                st.done = true;
                let e = st.failed(e);
                return Some((Err(e), (st, true)));
            }
            let (span, conversation) = (st.span.span().clone(), st.span.conversation().to_owned());
            let started = branch_core::telemetry::in_conversation(
                conversation,
                tracing::Instrument::instrument(st.start(), span),
            );
            if let Err(e) = started.await {
                // The buffer (if any) stays for inspection. Nothing of the
                // failed turn (its instruction, already queued) is yielded
                // after the error.
                st.persist = None;
                st.done = true;
                st.queue.clear();
                let e = st.failed(e);
                return Some((Err(e), (st, true)));
            }
        }
        loop {
            if let Some(m) = st.queue.pop_front() {
                st.buffer(&m).await;
                return Some((Ok(m), (st, true)));
            }
            if st.done {
                st.close_persist().await;
                if let Some(e) = st.paused.take() {
                    let e = st.failed(e);
                    return Some((Err(e), (st, true)));
                }
                return None;
            }
            let (span, conversation) = (st.span.span().clone(), st.span.conversation().to_owned());
            let pumped = branch_core::telemetry::in_conversation(
                conversation,
                tracing::Instrument::instrument(st.pump(), span),
            );
            if let Err(e) = pumped.await {
                st.done = true;
                st.persist = None;
                st.queue.clear();
                let e = st.failed(e);
                return Some((Err(e), (st, true)));
            }
        }
    })
}
