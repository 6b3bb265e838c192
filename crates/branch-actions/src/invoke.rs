//! Running tool calls: one with an optional timeout, or many concurrently
//! (optionally bounded) with results in call order. Nothing a tool does
//! escapes as a panic: errors, timeouts, unknown names, invalid arguments
//! and panics all become a [`CallOutcome`] holding an error, which the
//! verbs turn into an error ActionResponse.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use branch_core::message::ActionRequestContent;
use branch_core::telemetry;
use branch_core::{ActionManager, RegisteredTool, ToolError};
use serde_json::{Map, Value, json};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::calling::{CallStatus, FunctionCalling};
use crate::outcome::CallOutcome;
use crate::select::{ToolSelection, tool_schemas};

/// A call the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The tool name.
    pub function: String,
    /// The arguments.
    pub arguments: Map<String, Value>,
    /// Why the arguments the model sent could not be read (then
    /// `arguments` is empty). Such a call is never run: it is answered
    /// with [`CallError::MalformedArguments`] carrying this reason.
    pub malformed: Option<String>,
    /// The provider's id of a native tool call (`gen_ai.tool.call.id` on
    /// the call's span), when the model gave one.
    pub call_id: Option<String>,
}

impl ToolCall {
    /// A call of `function` with `arguments`.
    pub fn new(function: impl Into<String>, arguments: Map<String, Value>) -> Self {
        Self {
            function: function.into(),
            arguments,
            malformed: None,
            call_id: None,
        }
    }

    /// A call whose arguments arrived as JSON text (a provider's native
    /// tool call). Text that is not a JSON object (see
    /// [`parse_arguments`](crate::parse_arguments)) makes a call that
    /// fails with the reason instead of running.
    pub fn from_text(function: impl Into<String>, arguments: &str) -> Self {
        match crate::arguments::parse_arguments(arguments) {
            Ok(a) => Self::new(function, a),
            Err(reason) => Self {
                function: function.into(),
                arguments: Map::new(),
                malformed: Some(reason),
                call_id: None,
            },
        }
    }

    /// Reads a request as models write it in `action_requests`:
    /// `{"function": name, "arguments": {...}}`, where `arguments` may
    /// also be JSON text or null (no arguments). Anything else is refused
    /// with the reason.
    pub fn from_request_value(v: &Value) -> Result<Self, String> {
        let o = v.as_object().ok_or_else(|| {
            "an action request must be an object with `function` and `arguments`".to_owned()
        })?;
        let function = match o.get("function") {
            Some(Value::String(f)) if !f.is_empty() => f.clone(),
            _ => return Err("an action request needs a non-empty `function` name".into()),
        };
        let arguments = match o.get("arguments") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(a)) => a.clone(),
            Some(Value::String(text)) => crate::arguments::parse_arguments(text)
                .map_err(|reason| format!("the arguments of `{function}`: {reason}"))?,
            Some(_) => return Err(format!("the arguments of `{function}` must be an object")),
        };
        Ok(Self::new(function, arguments))
    }
}

impl From<&ActionRequestContent> for ToolCall {
    fn from(r: &ActionRequestContent) -> Self {
        Self::new(r.function.clone(), r.arguments.clone())
    }
}

/// How calls run. The default is the reference's: no timeout, no
/// concurrency limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InvokeOptions {
    /// Per-call deadline; an overrun aborts the call and fails it.
    pub timeout: Option<Duration>,
    /// At most this many calls of a batch run at once (`Some(1)` is
    /// sequential); `None`, `Some(0)` or a limit of at least the batch's
    /// size is none.
    pub max_concurrency: Option<usize>,
}

/// Why a call produced no result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// No tool has this name (the reference's wording).
    #[error("Function {0} is not registered.")]
    UnknownTool(String),
    /// The arguments the model sent could not be read; the tool was not
    /// run.
    #[error("the call of `{function}` was not run: {reason}")]
    MalformedArguments {
        /// The tool name.
        function: String,
        /// What is wrong with the arguments text.
        reason: String,
    },
    /// The tool refused the arguments, failed, timed out or panicked.
    #[error(transparent)]
    Tool(#[from] ToolError),
}

impl CallError {
    /// A short kind name for logs (`execution.error.error`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::UnknownTool(_) => "UnknownTool",
            Self::MalformedArguments { .. } => "MalformedArguments",
            Self::Tool(ToolError::InvalidArguments { .. }) => "InvalidArguments",
            Self::Tool(ToolError::Timeout(_)) => "TimeoutError",
            Self::Tool(ToolError::Panicked(_)) => "ToolPanicked",
            Self::Tool(_) => "ToolError",
        }
    }
}

/// Aborts the spawned call when the caller stops waiting (drop = cancel).
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

fn panic_message(payload: Box<dyn Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(p) => match p.downcast::<&'static str>() {
            Ok(s) => (*s).to_owned(),
            Err(_) => "a non-text panic payload".to_owned(),
        },
    }
}

/// Runs one call on `tool` (`None`: the name is unknown). The tool runs in
/// its own Tokio task, so a panic is contained and reported; dropping the
/// returned future aborts the call. Must run inside a Tokio runtime
/// (outside one the call fails instead).
pub async fn invoke_tool(
    tool: Option<RegisteredTool>,
    call: ToolCall,
    timeout: Option<Duration>,
) -> CallOutcome {
    let mut calling = FunctionCalling::new(call.function.clone(), call.arguments.clone());
    if let Some(reason) = call.malformed.clone() {
        let err = CallError::MalformedArguments {
            function: call.function.clone(),
            reason,
        };
        return finish(call, None, Err(err), calling, None);
    }
    let Some(reg) = tool else {
        let err = CallError::UnknownTool(call.function.clone());
        return finish(call, None, Err(err), calling, None);
    };
    let tool_id = Some(reg.id());
    if tokio::runtime::Handle::try_current().is_err() {
        let err = CallError::Tool(ToolError::Failed(
            "tools must be invoked inside a Tokio runtime".into(),
        ));
        return finish(call, tool_id, Err(err), calling, None);
    }
    calling.status = CallStatus::Processing;
    let t = reg.tool().clone();
    let args = Value::Object(call.arguments.clone());
    let start = Instant::now();
    // The tool's own spans belong under the call's `execute_tool` span, and
    // its work to the conversation of the verb calling it (task-locals do
    // not cross `spawn`): model calls inside carry its id, MCP progress
    // goes to its branch.
    let conversation = branch_core::telemetry::conversation_id();
    // It may leave logs for the branch (`tool_logs`), gathered here.
    let body = tracing::Instrument::in_current_span(async move {
        let call = branch_core::tool_logs::collect(t.call(args));
        match conversation {
            Some(id) => branch_core::telemetry::in_conversation(id, call).await,
            None => call.await,
        }
    });
    let mut task = AbortOnDrop(tokio::spawn(body));
    let joined = match timeout {
        Some(d) => tokio::time::timeout(d, &mut task).await.ok(),
        None => Some((&mut task).await),
    };
    drop(task);
    let elapsed = start.elapsed();
    let cancelled = matches!(&joined, Some(Err(e)) if e.is_cancelled());
    let mut logs = Vec::new();
    let result = match joined {
        None => Err(ToolError::Timeout(timeout.unwrap_or_default())),
        Some(Ok((r, left))) => {
            logs = left;
            r
        }
        Some(Err(e)) if e.is_panic() => Err(ToolError::Panicked(panic_message(e.into_panic()))),
        Some(Err(_)) => Err(ToolError::Failed("the tool task was cancelled".into())),
    };
    let mut outcome = finish(
        call,
        tool_id,
        result.map_err(CallError::from),
        calling,
        Some(elapsed),
    );
    if cancelled {
        outcome.calling.status = CallStatus::Cancelled;
    }
    outcome.logs = logs;
    outcome
}

fn finish(
    call: ToolCall,
    tool_id: Option<Uuid>,
    result: Result<Value, CallError>,
    mut calling: FunctionCalling,
    elapsed: Option<Duration>,
) -> CallOutcome {
    calling.duration = elapsed.map(|d| d.as_secs_f64());
    match &result {
        Ok(v) => {
            calling.status = CallStatus::Completed;
            calling.response = Some(v.clone());
        }
        Err(e) => {
            calling.status = CallStatus::Failed;
            calling.error = Some(json!({"error": e.kind(), "message": e.to_string()}));
        }
    }
    CallOutcome {
        call,
        tool_id,
        result,
        calling,
        logs: Vec::new(),
    }
}

/// Runs many calls concurrently (at most `opts.max_concurrency` at a time)
/// and returns their outcomes in call order. Tools are looked up now, so
/// the returned future does not borrow the registry.
pub fn invoke_calls(
    acts: &ActionManager,
    calls: Vec<ToolCall>,
    opts: InvokeOptions,
) -> impl Future<Output = Vec<CallOutcome>> + Send + 'static {
    // A limit of at least the batch's size limits nothing, and one past
    // what a semaphore holds would panic (a stored paused turn can name any
    // number): such a limit, as 0, is none.
    let limit = opts
        .max_concurrency
        .filter(|n| (1..calls.len()).contains(n))
        .map(|n| Arc::new(Semaphore::new(n)));
    let runs: Vec<_> = calls
        .into_iter()
        .map(|call| {
            let tool = acts.get(&call.function).cloned();
            let limit = limit.clone();
            async move {
                // The permit is held for the whole call; the semaphore is
                // fair, so a sequential batch keeps the call order.
                let _permit = match &limit {
                    Some(s) => s.clone().acquire_owned().await.ok(),
                    None => None,
                };
                let span =
                    telemetry::tool_span(&call.function, call.call_id.as_deref(), &call.arguments);
                let outcome = tracing::Instrument::instrument(
                    invoke_tool(tool, call, opts.timeout),
                    span.clone(),
                )
                .await;
                record_outcome(&span, &outcome);
                outcome
            }
        })
        .collect();
    futures_util::future::join_all(runs)
}

/// The result (opted in) or the failure's `error.type` on a tool's span.
fn record_outcome(span: &tracing::Span, outcome: &CallOutcome) {
    use telemetry::tool_error;
    match &outcome.result {
        Ok(v) => telemetry::record_tool_result(span, v),
        Err(e) => {
            let t = match e {
                CallError::UnknownTool(_) => tool_error::NOT_FOUND,
                CallError::MalformedArguments { .. }
                | CallError::Tool(ToolError::InvalidArguments { .. }) => {
                    tool_error::INVALID_ARGUMENTS
                }
                CallError::Tool(ToolError::Timeout(_)) => tool_error::TIMEOUT,
                CallError::Tool(ToolError::Panicked(_)) => tool_error::PANICKED,
                CallError::Tool(_) => tool_error::FAILED,
            };
            telemetry::record_error(span, t);
        }
    }
}

/// Invocation and schema selection on the branch's tool registry.
pub trait ActionManagerExt {
    /// Runs one call (see [`invoke_tool`]).
    fn invoke(
        &self,
        call: ToolCall,
        timeout: Option<Duration>,
    ) -> impl Future<Output = CallOutcome> + Send + 'static;

    /// Runs many calls, results in call order (see [`invoke_calls`]).
    fn invoke_all(
        &self,
        calls: Vec<ToolCall>,
        opts: InvokeOptions,
    ) -> impl Future<Output = Vec<CallOutcome>> + Send + 'static;

    /// The schemas of the selected tools (see [`tool_schemas`]).
    fn tool_schemas(&self, selection: &ToolSelection) -> Result<Vec<Value>, CallError>;
}

impl ActionManagerExt for ActionManager {
    fn invoke(
        &self,
        call: ToolCall,
        timeout: Option<Duration>,
    ) -> impl Future<Output = CallOutcome> + Send + 'static {
        invoke_tool(self.get(&call.function).cloned(), call, timeout)
    }

    fn invoke_all(
        &self,
        calls: Vec<ToolCall>,
        opts: InvokeOptions,
    ) -> impl Future<Output = Vec<CallOutcome>> + Send + 'static {
        invoke_calls(self, calls, opts)
    }

    fn tool_schemas(&self, selection: &ToolSelection) -> Result<Vec<Value>, CallError> {
        tool_schemas(self, selection)
    }
}
