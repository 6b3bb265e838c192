//! `act`: running tool calls and recording each as an ActionRequest /
//! ActionResponse pair (operations.md §6).

use std::time::Duration;

use branch_actions::{ActionManagerExt, ActionParticipants, CallOutcome, InvokeOptions, ToolCall};
use branch_core::log::Log;
use branch_core::message::{ActionResponseContent, Message, MessageContent};
use branch_core::telemetry;
use branch_core::{Branch, Participant};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::approval::{ToolPolicy, policy_of};
use crate::error::{Committed, OperationError, Result};
use crate::pending::{APPROVAL_KEY, CallStatus, PendingApproval, ProposedCall};
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
    /// Each call in call order: its request/response pair and, when it was
    /// dispatched (not refused by the gate), its outcome.
    pub entries: Vec<Entry>,
    pub strategy: Strategy,
}

/// One call's record.
pub(crate) struct Entry {
    pub pair: (Message, Message),
    pub outcome: Option<CallOutcome>,
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

/// The error text the reference gives a call its governance gate refused.
pub const GATE_DENIAL: &str = "denied by governance gate";

/// A request/response pair linked both ways, from the branch to itself
/// unless `participants` says otherwise.
fn linked_pair(
    call: &ToolCall,
    output: Option<Value>,
    p: ActionParticipants,
) -> (Message, Message) {
    let mut req = Message::action_request(call.function.clone(), call.arguments.clone())
        .with_sender(p.request_sender)
        .with_recipient(p.request_recipient);
    let resp = Message::new(MessageContent::ActionResponse(Box::new(
        ActionResponseContent {
            function: call.function.clone(),
            arguments: call.arguments.clone(),
            output,
            action_request_id: Some(req.id()),
            error: None,
        },
    )))
    .with_sender(p.response_sender)
    .with_recipient(p.response_recipient);
    if let MessageContent::ActionRequest(rc) = &mut req.content {
        rc.action_response_id = Some(resp.id());
    }
    (req, resp)
}

fn to_self(branch_id: uuid::Uuid) -> ActionParticipants {
    let b = Some(Participant::Id(branch_id));
    ActionParticipants {
        request_sender: b.clone(),
        request_recipient: b.clone(),
        response_sender: b.clone(),
        response_recipient: b,
    }
}

/// The record of a call the gate refused: stored, never dispatched, its
/// output the reference's `{"error": "denied by governance gate",
/// "function": f}`, which is also what the model is shown.
fn gate_denied(branch_id: uuid::Uuid, call: &ToolCall) -> (Entry, ActionResponseModel) {
    let output = json!({"error": GATE_DENIAL, "function": call.function});
    let pair = linked_pair(call, Some(output.clone()), to_self(branch_id));
    (
        Entry {
            pair,
            outcome: None,
        },
        ActionResponseModel {
            function: call.function.clone(),
            arguments: call.arguments.clone(),
            output: Some(output),
        },
    )
}

/// The record of a call denied by approval (by policy, by whoever was
/// asked, or because the window closed): stored, never dispatched, its
/// output shaped like the gate's refusal so a model reads both alike.
fn approval_denied(branch_id: uuid::Uuid, call: &ProposedCall) -> (Entry, ActionResponseModel) {
    let mut output = json!({
        "error": if call.status == CallStatus::Expired { APPROVAL_EXPIRED } else { APPROVAL_DENIAL },
        "function": call.function,
    });
    if let Some(r) = &call.reason {
        output["reason"] = r.clone().into();
    }
    let tc = ToolCall::new(call.function.clone(), call.arguments.clone());
    let pair = linked_pair(&tc, Some(output.clone()), to_self(branch_id));
    (
        Entry {
            pair,
            outcome: None,
        },
        ActionResponseModel {
            function: call.function.clone(),
            arguments: call.arguments.clone(),
            output: Some(output),
        },
    )
}

/// The error text of a call denied by approval.
pub const APPROVAL_DENIAL: &str = "denied by approval";

/// The error text of a call whose approval window closed undecided.
pub const APPROVAL_EXPIRED: &str = "approval expired";

/// Marks both messages of a call with what was decided about it.
fn mark(pair: &mut (Message, Message), call: &ProposedCall) {
    let Some(decision) = call.status.recorded() else {
        return;
    };
    let mut v = Map::new();
    v.insert("decision".into(), decision.into());
    if let Some(r) = &call.reason {
        v.insert("reason".into(), r.clone().into());
    }
    if call.approved_arguments.is_some() {
        v.insert(
            "proposed_arguments".into(),
            Value::Object(call.arguments.clone()),
        );
    }
    for m in [&mut pair.0, &mut pair.1] {
        m.element
            .metadata
            .insert(APPROVAL_KEY.into(), Value::Object(v.clone()));
    }
}

/// The tools as the request's `tools` field, in the OpenAI shape every
/// dialect translates from.
pub(crate) fn native_tool_list(schemas: &[Value]) -> Value {
    Value::Array(
        schemas
            .iter()
            .map(|s| {
                let f = s.get("function").cloned().unwrap_or_else(|| s.clone());
                json!({"type": "function", "function": f})
            })
            .collect(),
    )
}

/// A reply's native tool calls as calls to run, each with the provider's
/// id: its span names it, and its request records it (`execute`). Arguments
/// that are not a JSON object make a call answered as failed with the
/// reason, never run with `{}`.
pub(crate) fn native_calls(calls: &[branch_core::model::ToolCall]) -> Vec<ToolCall> {
    calls
        .iter()
        .map(|tc| ToolCall {
            call_id: (!tc.id.is_empty()).then(|| tc.id.clone()),
            ..ToolCall::from_text(tc.name.clone(), &tc.arguments)
        })
        .collect()
}

/// The approval policy's verdict on each call: allowed, refused, asked
/// and answered by the approver, or left pending.
async fn screen(branch: &Branch, calls: Vec<ToolCall>) -> Vec<ProposedCall> {
    let policy = policy_of(branch);
    let mut out = Vec::with_capacity(calls.len());
    for c in calls {
        let mut p = ProposedCall::new(c.function, c.arguments);
        p.malformed = c.malformed;
        p.tool_call_id = c.call_id;
        // A call whose arguments could not be read never runs: there is
        // nothing to approve.
        if let Some(policy) = policy.as_ref().filter(|_| p.malformed.is_none()) {
            match policy.evaluate(&p.function, &p.arguments) {
                ToolPolicy::Always => {}
                ToolPolicy::Never => {
                    p.status = CallStatus::Denied;
                    p.reason = Some("the approval policy never runs this call".into());
                }
                ToolPolicy::Ask => match policy.approver_ref() {
                    Some(a) => {
                        let d = a.decide(&p).await;
                        p.decide(d);
                    }
                    None => p.status = CallStatus::Pending,
                },
            }
        }
        out.push(p);
    }
    out
}

/// What screening a batch led to.
pub(crate) enum Screened {
    /// Every call decided: the batch ran (or was refused) and is recorded
    /// off to the side.
    Done(Acted),
    /// Some call awaits a decision: nothing ran.
    Paused(Vec<ProposedCall>),
}

/// Screens the calls through the approval policy; when all are decided,
/// runs the batch (see [`execute`]).
pub(crate) async fn run_calls(
    branch: &mut Branch,
    calls: Vec<ToolCall>,
    opts: ActOptions,
) -> Screened {
    let proposed = screen(branch, calls).await;
    if proposed.iter().any(|c| c.status == CallStatus::Pending) {
        return Screened::Paused(proposed);
    }
    Screened::Done(execute(branch, proposed, opts).await)
}

/// Runs decided calls: denied ones are recorded as such; the others go
/// past the branch's gate (operations.md §6 step 1) with the arguments
/// approved, and the allowed ones run. Each run is logged; the record is
/// built off to the side, in call order.
pub(crate) async fn execute(
    branch: &mut Branch,
    calls: Vec<ProposedCall>,
    opts: ActOptions,
) -> Acted {
    let mut allowed = Vec::with_capacity(calls.len());
    for c in &calls {
        let runs = !matches!(
            c.status,
            CallStatus::Denied | CallStatus::Expired | CallStatus::Pending
        ) && (c.malformed.is_some()
            || branch.authorize(&c.function, c.effective_arguments()).await);
        if !runs {
            // A refused call never runs; its span says so.
            let span = telemetry::tool_span(
                &c.function,
                c.tool_call_id.as_deref(),
                c.effective_arguments(),
            );
            telemetry::record_error(&span, telemetry::tool_error::DENIED);
        }
        allowed.push(runs);
    }
    let dispatched: Vec<ToolCall> = calls
        .iter()
        .zip(&allowed)
        .filter(|(_, ok)| **ok)
        .map(|(c, _)| ToolCall {
            malformed: c.malformed.clone(),
            call_id: c.tool_call_id.clone(),
            ..ToolCall::new(c.function.clone(), c.effective_arguments().clone())
        })
        .collect();
    let invoke = InvokeOptions {
        timeout: opts.timeout,
        max_concurrency: match opts.strategy {
            Strategy::Sequential => Some(1),
            Strategy::Concurrent => opts.max_concurrency,
        },
    };
    // Each call runs under its own `execute_tool` span, a child of the
    // verb's span.
    let outcomes = if dispatched.is_empty() {
        Vec::new()
    } else {
        branch.acts().invoke_all(dispatched, invoke).await
    };
    let branch_id = branch.id();
    let mut outcomes = outcomes.into_iter();
    let mut entries = Vec::with_capacity(calls.len());
    let mut models = Vec::with_capacity(calls.len());
    for (call, ok) in calls.iter().zip(allowed) {
        let refused_by_approval = matches!(call.status, CallStatus::Denied | CallStatus::Expired);
        let outcome = if ok { outcomes.next() } else { None };
        let (mut entry, model) = match outcome {
            None if refused_by_approval => approval_denied(branch_id, call),
            None => gate_denied(
                branch_id,
                &ToolCall::new(call.function.clone(), call.effective_arguments().clone()),
            ),
            Some(mut o) => {
                // What the tool left for the branch (a connected model's
                // API call) goes first, as the reference logs it inside
                // the call.
                for log in std::mem::take(&mut o.logs) {
                    branch.log(log);
                }
                branch.log(Log::from_json(o.log_content(branch_id)));
                if let Err(e) = &o.result {
                    tracing::warn!(function = %o.call.function, error = %e, "tool call failed");
                }
                let pair = linked_pair(&o.call, o.response_output(), o.participants(branch_id));
                let model = ActionResponseModel {
                    function: o.call.function.clone(),
                    arguments: o.call.arguments.clone(),
                    output: o.returned_output(),
                };
                (
                    Entry {
                        pair,
                        outcome: Some(o),
                    },
                    model,
                )
            }
        };
        mark(&mut entry.pair, call);
        // The provider's id of a native call, so later requests answer the
        // call under the id the provider gave it.
        if let Some(id) = &call.tool_call_id {
            entry
                .pair
                .0
                .element
                .metadata
                .insert("tool_call_id".into(), id.clone().into());
        }
        entries.push(entry);
        models.push(model);
    }
    let pairs: Vec<(Message, Message)> = entries.iter().map(|e| e.pair.clone()).collect();
    Acted {
        responses: models,
        messages: ordered(pairs, opts.strategy),
        entries,
        strategy: opts.strategy,
    }
}

/// Commits a batch run by `act` and surfaces its first failure when errors
/// are not suppressed.
pub(crate) fn settle(
    branch: &mut Branch,
    acted: Acted,
    suppress_errors: bool,
) -> Result<Vec<ActionResponseModel>> {
    if !suppress_errors {
        let failed = acted
            .entries
            .iter()
            .filter_map(|e| e.outcome.as_ref())
            .find(|o| o.result.is_err())
            .cloned();
        if let Some(failed) = failed {
            // As the reference: failures of a tool that ran are recorded
            // before the error surfaces, and so are refusals; calls
            // refused before running are not.
            let kept: Vec<(Message, Message)> = acted
                .entries
                .into_iter()
                .filter(|e| e.outcome.as_ref().is_none_or(CallOutcome::reached_tool))
                .map(|e| e.pair)
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

pub(crate) async fn act(
    branch: &mut Branch,
    calls: Vec<ToolCall>,
    opts: ActOptions,
) -> Result<Vec<ActionResponseModel>> {
    crate::turn::refuse_while_paused(branch)?;
    let span = crate::telemetry::verb_span("act", branch);
    span.run(async {
        match run_calls(branch, calls, opts).await {
            Screened::Done(acted) => settle(branch, acted, opts.suppress_errors),
            Screened::Paused(calls) => {
                let expiry = policy_of(branch).and_then(|p| p.expiry());
                let p = PendingApproval::new("act", calls, opts, expiry, None);
                p.store(branch);
                Err(p.paused(Committed::default()))
            }
        }
    })
    .await
}
