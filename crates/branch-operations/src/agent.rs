//! Starting a CLI agent that speaks Claude Code's `stream-json` protocol,
//! shared by `run` (which streams the agent's turn) and by the model calls
//! of the other verbs (`cli_call.rs`, which wait for its whole answer).

use std::path::{Path, PathBuf};
use std::process::Stdio;

use branch_core::Branch;
use branch_core::model::ChatRequest;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};

/// The agent program when the caller names none: `LIONAGI_CLAUDE_BIN`,
/// else `claude` from `PATH`.
pub(crate) fn program() -> PathBuf {
    PathBuf::from(std::env::var("LIONAGI_CLAUDE_BIN").unwrap_or_else(|_| "claude".into()))
}

/// The prompt the agent is given: the compiled request's last message (the
/// agent keeps the conversation itself, in its session).
pub(crate) fn prompt_of(request: &ChatRequest) -> String {
    request
        .messages
        .last()
        .map(|m| match &m.content {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .unwrap_or_default()
}

/// The agent session the branch stored (`cli_session_id`), to resume. A
/// stored value that is not a Claude Code session id (a UUID) is refused:
/// it comes from the conversation's data.
pub(crate) fn stored_session(branch: &Branch) -> Result<Option<String>, String> {
    match branch.metadata().get("cli_session_id") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => crate::cli_stream::session_id(v).map(Some).ok_or_else(|| {
            "the stored cli_session_id is not a Claude Code session id (a UUID)".to_owned()
        }),
    }
}

/// The agent's command: print mode with `stream-json` output, the caller's
/// `extra` arguments, then the model and the session to resume. Both come
/// from the conversation's data, so each is passed only inside its own
/// `--flag=VALUE` word and no value can become a flag of the agent. The
/// prompt goes to stdin ([`write_prompt`]); the agent is killed when the
/// child is dropped.
pub(crate) fn command(
    program: &Path,
    extra: &[String],
    model: Option<&str>,
    session: Option<&str>,
) -> Command {
    let mut command = Command::new(program);
    command
        .args(["-p", "--output-format", "stream-json", "--verbose"])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    if let Some(name) = model.filter(|n| !n.is_empty()) {
        command.arg(format!("--model={name}"));
    }
    if let Some(session) = session {
        command.arg(format!("--resume={session}"));
    }
    command
}

/// The task writing the prompt to a CLI agent. Aborted when dropped, so
/// it never outlives the turn (the agent itself is killed on drop).
pub(crate) struct PromptWriter(pub(crate) tokio::task::JoinHandle<std::io::Result<()>>);

impl Drop for PromptWriter {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Writes `prompt` to the agent's stdin and closes it, beside the reading
/// of the output rather than before it: an agent may write before it reads,
/// and neither pipe holds more than the kernel's buffer.
pub(crate) fn write_prompt(child: &mut Child, prompt: String) -> Option<PromptWriter> {
    child.stdin.take().map(|mut stdin| {
        PromptWriter(tokio::spawn(async move {
            stdin.write_all(prompt.as_bytes()).await
            // Dropping `stdin` closes it: the prompt's end.
        }))
    })
}

/// The next line of the agent's output (without its newline), at most
/// `max` bytes; `None` at the end. A longer line is an error once `max`
/// bytes have been read, so an agent that never writes a newline cannot
/// grow memory.
pub(crate) async fn line(
    r: &mut BufReader<ChildStdout>,
    max: usize,
) -> std::io::Result<Option<String>> {
    let mut line = Vec::new();
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    if (&mut *r).take(limit).read_until(b'\n', &mut line).await? == 0 {
        return Ok(None);
    }
    if line.last() == Some(&b'\n') {
        line.pop();
    } else if line.len() > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a line of the agent's output is longer than {max} bytes, the limit"),
        ));
    }
    String::from_utf8(line).map(Some).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the agent's output is not UTF-8",
        )
    })
}
