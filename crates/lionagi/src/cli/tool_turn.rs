//! A turn of `lionagi chat` with tools registered: the model may call
//! tools (natively where the provider has function calling, each round
//! streamed as a plain turn is; prompt-embedded otherwise), their results
//! go back in the next request, until it answers without calling one. The
//! rounds are one turn: a failure or Ctrl-C in any of them, or the turn's
//! future dropped, takes the whole turn back.

use branch_core::{Branch, Message};
use branch_operations::{BranchOperations, OperateOptions, OperationError, RunOptions};

use super::chat_error::{ChatError, ModelInfo};
use super::reasoning::ReasoningPrinter;
use super::shown::printable;
use super::spinner::Spinner;
use super::turn::{Answer, Display, Round, say, stream_round};

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
    display: &Display,
) -> Result<Answer, ChatError> {
    rounds(branch, question, info, display).await
}

/// Goes on after a paused turn was settled (its approved calls ran): the
/// model answers with the results, and may call more tools.
pub(crate) async fn follow_up(
    branch: &mut Branch,
    info: &ModelInfo,
    display: &Display,
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
    display: &Display,
) -> Result<Answer, ChatError> {
    let native = native_calling(branch, info);
    let mut turn = WholeTurn::begin(branch);
    // One listener for every round: a signal between two rounds is not
    // lost to the process's default handling.
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let answered = if native {
        streamed_rounds(turn.branch(), first, info, display, &mut ctrl_c).await
    } else {
        operated_rounds(turn.branch(), first, info, display, &mut ctrl_c).await
    };
    if answered.is_ok() {
        turn.keep();
    }
    answered
}

/// The rounds of one turn, taken back unless kept: each round commits
/// its messages, so a turn that fails, or whose future is dropped (an MCP
/// client cancelling `ask`), would otherwise leave its earlier rounds on
/// the branch.
struct WholeTurn<'b> {
    branch: &'b mut Branch,
    before: usize,
    kept: bool,
}

impl<'b> WholeTurn<'b> {
    fn begin(branch: &'b mut Branch) -> Self {
        let before = branch.msgs().len();
        Self {
            branch,
            before,
            kept: false,
        }
    }

    fn branch(&mut self) -> &mut Branch {
        self.branch
    }

    fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for WholeTurn<'_> {
    fn drop(&mut self) {
        if !self.kept {
            self.branch.msgs_mut().truncate(self.before);
        }
    }
}

/// Rounds through `run` with the tools offered natively: each round's text
/// and reasoning are shown as they arrive.
async fn streamed_rounds(
    branch: &mut Branch,
    first: &str,
    info: &ModelInfo,
    display: &Display,
    ctrl_c: &mut (impl Future<Output = std::io::Result<()>> + Unpin),
) -> Result<Answer, ChatError> {
    let mut instruction = first;
    for _ in 0..MAX_TOOL_ROUNDS {
        let opts = RunOptions::new(instruction).native_tools(true);
        let round = stream_round(branch, opts, info, display, ctrl_c).await?;
        if round.paused || !round.acted {
            return Ok(round.answer());
        }
        instruction = FOLLOW_UP;
    }
    Err(too_many_rounds())
}

fn too_many_rounds() -> ChatError {
    ChatError::Turn(format!(
        "the model was still calling tools after {MAX_TOOL_ROUNDS} rounds"
    ))
}

/// Rounds through `operate` with the tools described in the prompt (a
/// model without native function calling answers in JSON, which is parsed
/// whole): each round's reply is shown once it is in.
async fn operated_rounds(
    branch: &mut Branch,
    first: &str,
    info: &ModelInfo,
    display: &Display,
    ctrl_c: &mut (impl Future<Output = std::io::Result<()>> + Unpin),
) -> Result<Answer, ChatError> {
    let spinner = display.spinner.then(|| Spinner::start("thinking"));
    let outcome = {
        let rounds = async {
            let mut instruction = first.to_owned();
            for _ in 0..MAX_TOOL_ROUNDS {
                display.narrate("waiting for the model");
                let opts = OperateOptions::new(instruction.clone()).actions(true);
                let done = match branch.operate(opts).await {
                    Ok(done) => done,
                    Err(OperationError::ApprovalPending { .. }) => {
                        let text = branch
                            .msgs()
                            .last_response()
                            .and_then(Message::as_assistant_text)
                            .unwrap_or_default()
                            .to_owned();
                        return Ok(Ended::Paused(text));
                    }
                    Err(e) => return Err(ChatError::from_operation(e, info)),
                };
                if done.action_responses.is_empty() {
                    return Ok(Ended::Answered(done.text));
                }
                instruction = FOLLOW_UP.to_owned();
            }
            Err(too_many_rounds())
        };
        tokio::select! {
            biased;
            _ = &mut *ctrl_c => Err(ChatError::Interrupted),
            r = rounds => r,
        }
    };
    drop(spinner);
    let (text, paused) = match outcome? {
        Ended::Answered(t) => (t, false),
        Ended::Paused(t) => (t, true),
    };
    let last = branch
        .msgs()
        .last_response()
        .cloned()
        .ok_or_else(|| ChatError::Turn("the model sent no reply".into()))?;
    let mut answer = Round {
        reply: last,
        acted: false,
        paused,
    }
    .answer();
    if display.stream {
        if let Some(r) = &answer.reasoning {
            ReasoningPrinter::new(display.dim).print_whole(r);
        }
        if !text.is_empty() {
            say(&format!("{}\n", printable(&text)));
        }
    }
    answer.text = text;
    Ok(answer)
}
