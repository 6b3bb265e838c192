//! One turn of `lionagi chat`: the question goes out through `run`, the
//! reply's text is printed as it arrives, Ctrl-C drops the stream (the
//! branch keeps nothing of the turn).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use branch_core::{Branch, Message, MessageContent};
use branch_operations::{BranchOperations, OperationError, RunOptions};
use futures_util::StreamExt;
use serde_json::Value;

use super::chat_error::{ChatError, ModelInfo};
use super::reasoning::{ReasoningPrinter, finish_of, reasoning_of};
use super::shown::printable;
use super::spinner::Spinner;

/// Told what a turn is doing as it happens ("answering: 120 characters",
/// "calling tool `echo`"): `lionagi mcp serve` sends it to its client as
/// progress.
pub(crate) type Narrator = Arc<dyn Fn(&str) + Send + Sync>;

/// How the reply is shown.
#[derive(Clone, Default)]
pub(crate) struct Display {
    /// Print text as it arrives (off for `--json`).
    pub stream: bool,
    /// Show a spinner until the first token (stdout is a terminal).
    pub spinner: bool,
    /// Show reasoning dimmed (stdout is a terminal and `NO_COLOR` unset).
    pub dim: bool,
    /// Told each step of the turn, when someone listens.
    pub narrator: Option<Narrator>,
}

impl Display {
    /// Tells the narrator, if any, what the turn does now.
    pub(crate) fn narrate(&self, step: &str) {
        if let Some(n) = &self.narrator {
            n(step);
        }
    }
}

impl std::fmt::Debug for Display {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Display")
            .field("stream", &self.stream)
            .field("spinner", &self.spinner)
            .field("dim", &self.dim)
            .field("narrated", &self.narrator.is_some())
            .finish()
    }
}

/// A turn that went through.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    /// The reply text.
    pub text: String,
    /// The model that answered as the server names it, when it does.
    pub served_model: Option<String>,
    /// The reply asked for tool calls that await approval: the turn is
    /// paused (its reply recorded, the calls kept on the branch).
    pub paused: bool,
    /// The reasoning the reply came with, readable text, when any.
    pub reasoning: Option<String>,
    /// Why the model stopped, normalised (see [`finish_of`]).
    pub finish_reason: Option<&'static str>,
}

/// Asks `question` on `branch`. `Err(ChatError::Interrupted)` when Ctrl-C
/// cancelled it; the branch is then as it was before.
pub(crate) async fn ask(
    branch: &mut Branch,
    question: &str,
    info: &ModelInfo,
    display: &Display,
) -> Result<Answer, ChatError> {
    // Listening for Ctrl-C before the request goes out: a signal between
    // the two would otherwise end the process the default way.
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    // Rendered as the library renders every instruction (the system prompt
    // folds into the first one as guidance, as the reference does).
    let round = stream_round(
        branch,
        RunOptions::new(question),
        info,
        display,
        &mut ctrl_c,
    )
    .await?;
    Ok(round.answer())
}

/// What one streamed request gave.
pub(crate) struct Round {
    /// The model's reply, recorded on the branch.
    pub reply: Message,
    /// Tool calls of the reply ran (their results are on the branch).
    pub acted: bool,
    /// Tool calls of the reply await approval (the turn is paused).
    pub paused: bool,
}

impl Round {
    /// The turn's answer, when this round ends it.
    pub(crate) fn answer(&self) -> Answer {
        let reply = &self.reply;
        let text = match &reply.content {
            MessageContent::AssistantResponse(c) => c.assistant_response.clone(),
            _ => String::new(),
        };
        let response = reply.element.metadata.peek("model_response");
        let response = response.as_deref();
        Answer {
            text,
            served_model: response
                .and_then(|r| r.get("model"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            paused: self.paused,
            reasoning: reasoning_of(reply),
            finish_reason: response.and_then(finish_of),
        }
    }
}

/// Sends one request through `run` with `opts`, printing its text and
/// reasoning as they arrive (and the reply whole when the model streamed
/// none), until its reply and the tool calls it asked for are recorded.
/// Ctrl-C (`ctrl_c` ready) drops the stream: the branch keeps nothing of
/// the round.
pub(crate) async fn stream_round(
    branch: &mut Branch,
    mut opts: RunOptions,
    info: &ModelInfo,
    display: &Display,
    ctrl_c: &mut (impl Future<Output = std::io::Result<()>> + Unpin),
) -> Result<Round, ChatError> {
    let spinner = display.spinner.then(|| Spinner::start("thinking"));
    let stopper = spinner.as_ref().map(Spinner::stopper);
    let printed = Arc::new(AtomicBool::new(false));
    let thoughts = ReasoningPrinter::new(display.dim);
    display.narrate("waiting for the model");
    // Each piece of text and of reasoning goes to every listener: the
    // terminal, the narrator.
    let mut on_text: Vec<PieceHook> = Vec::new();
    let mut on_thinking: Vec<PieceHook> = Vec::new();
    if display.stream {
        let printed = Arc::clone(&printed);
        let text_stopper = stopper.clone();
        let before_text = thoughts.clone();
        on_text.push(Box::new(move |text| {
            if let Some(s) = &text_stopper {
                s.stop();
            }
            printed.store(true, Ordering::Relaxed);
            say(&format!("{}{}", before_text.close(), printable(text)));
        }));
        let thinking = thoughts.clone();
        on_thinking.push(Box::new(move |piece| {
            if let Some(s) = &stopper {
                s.stop();
            }
            say(&thinking.thinking(piece));
        }));
    }
    if let Some(narrator) = &display.narrator {
        on_text.push(counted(narrator, "answering"));
        on_thinking.push(counted(narrator, "reasoning"));
    }
    if !on_text.is_empty() {
        opts = opts.on_text(move |piece| on_text.iter().for_each(|h| h(piece)));
    }
    if !on_thinking.is_empty() {
        opts = opts.on_thinking(move |piece| on_thinking.iter().for_each(|h| h(piece)));
    }
    let mut reply: Option<Message> = None;
    let mut acted = false;
    let mut failure = None;
    let mut cancelled = false;
    {
        let mut stream = branch.run(opts);
        loop {
            tokio::select! {
                biased;
                _ = &mut *ctrl_c => {
                    cancelled = true;
                    break;
                }
                next = stream.next() => match next {
                    None => break,
                    Some(Ok(m)) => match m.content {
                        MessageContent::AssistantResponse(_) => reply = Some(m),
                        MessageContent::ActionResponse(_) => acted = true,
                        _ => {}
                    },
                    Some(Err(e)) => {
                        failure = Some(e);
                        break;
                    }
                },
            }
        }
        // Dropping the stream here, mid-turn when cancelled, discards the
        // round: `run` records only at its end.
    }
    drop(spinner);
    let printed = printed.load(Ordering::Relaxed);
    // A run of reasoning still open (no answer text after it) is closed,
    // so the terminal is never left dimmed; it ends the line too.
    let closing = thoughts.close();
    if !closing.is_empty() {
        say(&closing);
    } else if printed {
        say("\n");
    }
    if cancelled {
        return Err(ChatError::Interrupted);
    }
    let paused = matches!(failure, Some(OperationError::ApprovalPending { .. }));
    if let Some(e) = failure.filter(|_| !paused) {
        return Err(ChatError::from_operation(e, info));
    }
    let reply = reply.ok_or_else(|| ChatError::Turn("the model sent no reply".into()))?;
    if display.stream && !thoughts.shown() {
        // A model that does not stream its reasoning: shown whole, first.
        if let Some(r) = reasoning_of(&reply) {
            thoughts.print_whole(&r);
        }
    }
    if display.stream && !printed {
        // A model that does not stream text deltas: show the reply whole.
        if let Some(text) = reply.as_assistant_text().filter(|t| !t.is_empty()) {
            say(&format!("{}\n", printable(text)));
        }
    }
    Ok(Round {
        reply,
        acted,
        paused,
    })
}

/// Hears each piece of a streamed reply.
type PieceHook = Box<dyn Fn(&str) + Send + Sync>;

/// A hook that tells `narrator` how many characters of `what` have
/// arrived so far.
fn counted(narrator: &Narrator, what: &'static str) -> PieceHook {
    let narrator = Arc::clone(narrator);
    let chars = AtomicUsize::new(0);
    Box::new(move |piece: &str| {
        let piece = piece.chars().count();
        let so_far = chars
            .fetch_add(piece, Ordering::Relaxed)
            .saturating_add(piece);
        narrator(&format!("{what}: {so_far} characters"));
    })
}

/// Writes `text` to stdout now. A closed stdout (`| head`) is not an error
/// worth a panic: the turn goes on and is recorded.
pub(crate) fn say(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}
