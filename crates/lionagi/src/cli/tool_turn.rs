//! A turn of `lionagi chat` with tools registered: the model may call
//! tools (natively where the provider has function calling, prompt-embedded
//! otherwise), their results go back in the next request, until it answers
//! without calling one. The rounds are one turn: a failure or Ctrl-C in any
//! of them rolls the whole turn back.

use branch_core::{Branch, MessageContent};
use branch_operations::{BranchOperations, OperateOptions, OperationError};
use serde_json::Value;

use super::chat_error::{ChatError, ModelInfo};
use super::reasoning::{ReasoningPrinter, finish_of, reasoning_of};
use super::spinner::Spinner;
use super::turn::{Answer, Display, say};

/// Most model calls one turn makes: a model that keeps calling tools is
/// stopped here with an error instead of looping.
pub(crate) const MAX_TOOL_ROUNDS: usize = 8;

/// The instruction of the rounds after the first.
const FOLLOW_UP: &str = "Continue with my request using the tool results above.";

/// Models without native function calling (the embedded model, CLI
/// agents): tools are described in the prompt and requested as JSON.
fn native_calling(branch: &Branch, info: &ModelInfo) -> bool {
    info.provider != "local" && !branch.chat_model().is_cli()
}

/// Asks `question` with the branch's tools offered.
pub(crate) async fn ask(
    branch: &mut Branch,
    question: &str,
    info: &ModelInfo,
    display: Display,
) -> Result<Answer, ChatError> {
    rounds(branch, question, info, display).await
}

/// Goes on after a paused turn was settled (its approved calls ran): the
/// model answers with the results, and may call more tools.
pub(crate) async fn follow_up(
    branch: &mut Branch,
    info: &ModelInfo,
    display: Display,
) -> Result<Answer, ChatError> {
    rounds(branch, FOLLOW_UP, info, display).await
}

/// How the rounds ended.
enum Ended {
    /// The model answered without calling a tool.
    Answered(String),
    /// It called a tool that awaits approval: the turn is paused, its
    /// instruction and reply kept on the branch with the proposed calls.
    Paused(String),
}

async fn rounds(
    branch: &mut Branch,
    first: &str,
    info: &ModelInfo,
    display: Display,
) -> Result<Answer, ChatError> {
    let before = branch.msgs().len();
    let native = native_calling(branch, info);
    let spinner = display.spinner.then(|| Spinner::start("thinking"));
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let outcome = {
        let rounds = async {
            let mut instruction = first.to_owned();
            for _ in 0..MAX_TOOL_ROUNDS {
                let opts = OperateOptions::new(instruction.clone())
                    .actions(true)
                    .native_tools(native);
                let done = match branch.operate(opts).await {
                    Ok(done) => done,
                    Err(OperationError::ApprovalPending { .. }) => {
                        let text = branch
                            .msgs()
                            .last_response()
                            .and_then(|m| match &m.content {
                                MessageContent::AssistantResponse(c) => {
                                    Some(c.assistant_response.clone())
                                }
                                _ => None,
                            })
                            .unwrap_or_default();
                        return Ok(Ended::Paused(text));
                    }
                    Err(e) => return Err(ChatError::from_operation(e, info)),
                };
                if done.action_responses.is_empty() {
                    return Ok(Ended::Answered(done.text));
                }
                instruction = FOLLOW_UP.to_owned();
            }
            Err(ChatError::Turn(format!(
                "the model was still calling tools after {MAX_TOOL_ROUNDS} rounds"
            )))
        };
        tokio::select! {
            biased;
            _ = &mut ctrl_c => Err(ChatError::Interrupted),
            r = rounds => r,
        }
    };
    drop(spinner);
    let (text, paused) = match outcome {
        Ok(Ended::Answered(t)) => (t, false),
        Ok(Ended::Paused(t)) => (t, true),
        Err(e) => {
            // Earlier rounds committed; the turn as a whole did not.
            branch.msgs_mut().truncate(before);
            return Err(e);
        }
    };
    let last = branch.msgs().last_response();
    let reasoning = last.and_then(reasoning_of);
    if display.stream {
        if let Some(r) = &reasoning {
            ReasoningPrinter::new(display.dim).print_whole(r);
        }
    }
    if display.stream && !text.is_empty() {
        say(&format!("{text}\n"));
    }
    let response = last
        .and_then(|m| match &m.content {
            MessageContent::AssistantResponse(_) => m.element.metadata.peek("model_response"),
            _ => None,
        })
        .map(std::borrow::Cow::into_owned);
    Ok(Answer {
        text,
        served_model: response
            .as_ref()
            .and_then(|r| r.get("model"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        usage: response
            .as_ref()
            .and_then(|r| r.get("usage"))
            .filter(|u| !u.is_null())
            .cloned(),
        paused,
        reasoning,
        finish_reason: response.as_ref().and_then(finish_of),
    })
}
