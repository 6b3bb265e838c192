//! `act`: running tool calls and recording each as an ActionRequest /
//! ActionResponse pair (operations.md §6).

use std::time::Duration;

use branch_actions::{ActionManagerExt, CallOutcome, InvokeOptions, ToolCall};
use branch_core::Branch;
use branch_core::log::Log;
use branch_core::message::{ActionResponseContent, Message, MessageContent};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Committed, OperationError, Result};
use crate::turn::commit;

/// How a batch of calls runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// All at once (bounded by `max_concurrency`).
    #[default]
    Concurrent,
    /// One after another.
    Sequential,
}

/// Options of `act` (defaults: branch.md §9.5).
#[derive(Debug, Clone, Copy)]
pub struct ActOptions {
    /// Concurrent or sequential.
    pub strategy: Strategy,
    /// Turn failures into error outputs instead of failing.
    pub suppress_errors: bool,
    /// Per-call deadline (none by default).
    pub timeout: Option<Duration>,
    /// At most this many concurrent calls (unbounded by default).
    pub max_concurrency: Option<usize>,
}

impl Default for ActOptions {
    fn default() -> Self {
        Self {
            strategy: Strategy::Concurrent,
            suppress_errors: true,
            timeout: None,
            max_concurrency: None,
        }
    }
}

impl ActOptions {
    /// Sets the strategy.
    pub fn strategy(mut self, s: Strategy) -> Self {
        self.strategy = s;
        self
    }

    /// Sets error suppression.
    pub fn suppress_errors(mut self, on: bool) -> Self {
        self.suppress_errors = on;
        self
    }

    /// Sets the per-call deadline.
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }

    /// Bounds concurrency.
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.max_concurrency = Some(n);
        self
    }
}

/// One executed call as `act` returns it (`ActionResponseModel`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionResponseModel {
    /// The tool name.
    pub function: String,
    /// The arguments.
    pub arguments: Map<String, Value>,
    /// The output (`None` for a failed call with errors suppressed).
    pub output: Option<Value>,
}

/// Reads a call from `{"function", "arguments"}` (arguments may be a JSON
/// text) or from an ActionRequest message's JSON.
pub fn tool_call_from_value(v: &Value) -> Result<ToolCall> {
    let o = v
        .get("content")
        .filter(|c| c.get("function").is_some())
        .unwrap_or(v);
    let function = o.get("function").and_then(Value::as_str).ok_or_else(|| {
        OperationError::InvalidArgument {
            what: "action_request",
            message: "a request needs a string `function` and `arguments`".into(),
        }
    })?;
    let arguments = match o.get("arguments") {
        Some(Value::Object(m)) => m.clone(),
        // JSON text: read strictly; text that is not an object makes a call
        // answered as failed with the reason, never one run with `{}`.
        Some(Value::String(s)) => return Ok(ToolCall::from_text(function, s)),
        Some(Value::Null) | None => Map::new(),
        Some(_) => {
            return Err(OperationError::InvalidArgument {
                what: "action_request",
                message: "`arguments` must be an object".into(),
            });
        }
    };
    Ok(ToolCall::new(function, arguments))
}

/// The calls run and the messages recording them, not yet committed.
pub(crate) struct Acted {
    pub responses: Vec<ActionResponseModel>,
    pub messages: Vec<Message>,
    pub outcomes: Vec<CallOutcome>,
    /// The request/response pair recording each outcome, in call order.
    pub pairs: Vec<(Message, Message)>,
    pub strategy: Strategy,
}

/// The recorded order of some pairs: requests then responses for a
/// concurrent batch, request/response pairs for a sequential one.
fn ordered(pairs: Vec<(Message, Message)>, strategy: Strategy) -> Vec<Message> {
    match strategy {
        Strategy::Concurrent => {
            let (requests, responses): (Vec<_>, Vec<_>) = pairs.into_iter().unzip();
            requests.into_iter().chain(responses).collect()
        }
        Strategy::Sequential => pairs.into_iter().flat_map(|(a, b)| [a, b]).collect(),
    }
}

/// Runs the calls, logs each, builds the record off to the side.
pub(crate) async fn run_calls(
    branch: &mut Branch,
    calls: Vec<ToolCall>,
    opts: ActOptions,
) -> Acted {
    let invoke = InvokeOptions {
        timeout: opts.timeout,
        max_concurrency: match opts.strategy {
            Strategy::Sequential => Some(1),
            Strategy::Concurrent => opts.max_concurrency,
        },
    };
    let span = tracing::info_span!("act", calls = calls.len());
    let outcomes =
        tracing::Instrument::instrument(branch.acts().invoke_all(calls, invoke), span).await;
    let branch_id = branch.id();
    let mut requests = Vec::new();
    let mut responses = Vec::new();
    let mut models = Vec::new();
    for o in &outcomes {
        branch.log(Log::from_json(o.log_content(branch_id)));
        if let Err(e) = &o.result {
            tracing::warn!(function = %o.call.function, error = %e, "tool call failed");
        }
        let p = o.participants(branch_id);
        let mut req = Message::action_request(o.call.function.clone(), o.call.arguments.clone())
            .with_sender(p.request_sender)
            .with_recipient(p.request_recipient);
        let resp = Message::new(MessageContent::ActionResponse(Box::new(
            ActionResponseContent {
                function: o.call.function.clone(),
                arguments: o.call.arguments.clone(),
                output: o.response_output(),
                action_request_id: Some(req.id()),
                error: None,
            },
        )))
        .with_sender(p.response_sender)
        .with_recipient(p.response_recipient);
        if let MessageContent::ActionRequest(rc) = &mut req.content {
            rc.action_response_id = Some(resp.id());
        }
        requests.push(req);
        responses.push(resp);
        models.push(ActionResponseModel {
            function: o.call.function.clone(),
            arguments: o.call.arguments.clone(),
            output: o.returned_output(),
        });
    }
    let pairs: Vec<(Message, Message)> = requests.into_iter().zip(responses).collect();
    Acted {
        responses: models,
        messages: ordered(pairs.clone(), opts.strategy),
        outcomes,
        pairs,
        strategy: opts.strategy,
    }
}

pub(crate) async fn act(
    branch: &mut Branch,
    calls: Vec<ToolCall>,
    opts: ActOptions,
) -> Result<Vec<ActionResponseModel>> {
    let acted = run_calls(branch, calls, opts).await;
    if !opts.suppress_errors {
        if let Some(failed) = acted.outcomes.iter().find(|o| o.result.is_err()) {
            // As the reference: failures of a tool that ran are recorded
            // before the error surfaces; calls refused before running are
            // not.
            let kept: Vec<(Message, Message)> = acted
                .pairs
                .into_iter()
                .zip(&acted.outcomes)
                .filter(|(_, o)| o.reached_tool())
                .map(|(pair, _)| pair)
                .collect();
            let kept = ordered(kept, acted.strategy);
            let n = commit(branch, kept);
            return Err(OperationError::Action {
                function: failed.call.function.clone(),
                message: failed
                    .result
                    .as_ref()
                    .err()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
                committed: Committed {
                    messages: n,
                    turns: 0,
                },
            });
        }
    }
    commit(branch, acted.messages);
    Ok(acted.responses)
}
