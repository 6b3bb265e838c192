//! A model call answered by a CLI agent: `chat`, `communicate`,
//! `interpret` and parse repairs on a CLI model start the agent (Claude Code's `stream-json`
//! protocol, as `run`) for the compiled prompt and wait for its whole
//! answer, as the reference's agent endpoint does for its `chat`. The reply
//! is the agent's text blocks joined by newlines, with its `result` added
//! when it is not the last block's text. The agent's own tool uses are its
//! business, not messages of the branch: `run` records them.

use std::path::PathBuf;
use std::sync::Arc;

use branch_core::model::{
    ChatModel, ChatRequest, ChatResponse, LazyJson, ModelError, ModelErrorKind,
};
use branch_core::{Branch, Participant};
use serde_json::Value;
use tokio::io::BufReader;
use uuid::Uuid;

use crate::cli_stream::CliTurnReader;
use crate::limits::{CLI_IDLE_TIMEOUT, MAX_CLI_LINE_BYTES, MAX_CLI_TURN_BYTES};
use crate::middle::{CallModel, ModelCallFuture};
use crate::run::bounded;

/// The key of a reply's `model_response` naming the agent session it ran
/// in, which the turn stores (`cli_session_id`) once it is recorded.
pub(crate) const SESSION_KEY: &str = "session_id";

/// A call of a branch's CLI model: the agent resumes the session the
/// branch stored.
pub(crate) struct AgentCall {
    program: PathBuf,
    session: Option<String>,
    branch: Uuid,
    user: Participant,
}

impl AgentCall {
    /// The call for a turn of `branch`; fails when the stored session id
    /// is not one (it is never passed to the agent then).
    pub(crate) fn of(branch: &Branch) -> Result<Self, String> {
        Ok(Self {
            program: crate::agent::program(),
            session: crate::agent::stored_session(branch)?,
            branch: branch.id(),
            user: crate::turn::user_of(branch),
        })
    }
}

impl CallModel for AgentCall {
    fn call(&self, model: Arc<dyn ChatModel>, request: ChatRequest) -> ModelCallFuture {
        let call = Self {
            program: self.program.clone(),
            session: self.session.clone(),
            branch: self.branch,
            user: self.user.clone(),
        };
        Box::pin(call.answer(model, request))
    }
}

impl AgentCall {
    async fn answer(
        self,
        model: Arc<dyn ChatModel>,
        request: ChatRequest,
    ) -> Result<ChatResponse, ModelError> {
        let config = model.config();
        let fail = |kind, message: String| {
            ModelError::new(kind, config.provider(), config.model_name(), message)
        };
        let mut child = crate::agent::command(
            &self.program,
            &[],
            config.model_name(),
            self.session.as_deref(),
        )
        .spawn()
        .map_err(|e| {
            fail(
                ModelErrorKind::Connect,
                format!("cannot start {}: {e}", self.program.display()),
            )
        })?;
        let writer = crate::agent::write_prompt(&mut child, crate::agent::prompt_of(&request));
        let stdout = child.stdout.take().ok_or_else(|| {
            fail(
                ModelErrorKind::Connect,
                "the CLI agent has no stdout".into(),
            )
        })?;
        let mut lines = BufReader::new(stdout);
        let mut reader = CliTurnReader::new(self.branch, self.user).keep_text_blocks();
        let idle = Some(CLI_IDLE_TIMEOUT);
        // The model's own timeout (an hour by default for an agent, as the
        // reference's) bounds the whole call; the idle window each wait.
        let deadline = config
            .endpoint()
            .timeout
            .as_duration()
            .and_then(|d| tokio::time::Instant::now().checked_add(d));
        let timed_out = |why: &str| {
            fail(
                ModelErrorKind::Timeout,
                why.replace("the run's deadline", "the model's timeout"),
            )
        };
        let mut read = 0usize;
        loop {
            let line = match bounded(
                crate::agent::line(&mut lines, MAX_CLI_LINE_BYTES),
                idle,
                deadline,
            )
            .await
            {
                Ok(Ok(Some(l))) => l,
                Ok(Ok(None)) => break,
                Ok(Err(e)) => {
                    return Err(fail(
                        ModelErrorKind::MalformedResponse,
                        format!("reading the CLI agent's output: {e}"),
                    ));
                }
                Err(why) => return Err(timed_out(why)),
            };
            // The newline counts too: empty lines forever still reach the cap.
            read = read.saturating_add(line.len()).saturating_add(1);
            if read > MAX_CLI_TURN_BYTES {
                return Err(fail(
                    ModelErrorKind::ReplyLimit,
                    format!(
                        "the agent wrote more than {MAX_CLI_TURN_BYTES} bytes in one turn, the limit"
                    ),
                ));
            }
            reader
                .read_line(&line)
                .map_err(|e| fail(ModelErrorKind::StreamFailed, e.to_string()))?;
        }
        // The agent answered the whole prompt, or the call fails.
        if let Some(mut w) = writer {
            if !matches!(bounded(&mut w.0, idle, deadline).await, Ok(Ok(Ok(())))) {
                return Err(fail(
                    ModelErrorKind::StreamFailed,
                    "the CLI agent did not read its prompt".into(),
                ));
            }
        }
        // An agent that closed its output but does not exit is not waited
        // on forever (it is killed on drop).
        let status = bounded(child.wait(), idle, deadline)
            .await
            .map_err(timed_out)?
            .ok();
        if status.is_some_and(|s| !s.success()) && !reader.has_reply() {
            return Err(fail(
                ModelErrorKind::StreamFailed,
                format!(
                    "the CLI agent exited with {}",
                    status.map(|s| s.to_string()).unwrap_or_default()
                ),
            ));
        }
        let result = reader.result_text().map(str::to_owned);
        let mut pieces = reader.take_text_blocks();
        let turn = reader
            .finish(Value::Null)
            .map_err(|e| fail(ModelErrorKind::StreamFailed, e.to_string()))?;
        // The usage of the agent's `result` events rides on its final reply.
        let mut response = turn
            .messages
            .last()
            .and_then(|m| m.element.metadata.get("model_response"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        if let Some(id) = turn.session_id {
            response.insert(SESSION_KEY.into(), id.into());
        }
        // The thinking the reader gave each reply of the turn, in order.
        let thinking: Vec<&str> = turn
            .messages
            .iter()
            .filter_map(|m| m.element.metadata.get("thinking").and_then(Value::as_str))
            .collect();
        if !thinking.is_empty() {
            response.insert("thinking".into(), thinking.join("\n").into());
        }
        if let Some(r) = result.filter(|r| !r.is_empty()) {
            if pieces.last().is_none_or(|t| t.trim() != r) {
                pieces.push(r);
            }
        }
        Ok(ChatResponse {
            text: pieces.join("\n"),
            tool_calls: Vec::new(),
            raw: LazyJson::from(Value::Object(response)),
            usage: None,
            served_model: None,
            finish_reason: None,
            attempts: 1,
            reasoning: Vec::new(),
            raw_text: None,
        })
    }
}

/// The agent session a reply of a CLI call ran in (`model_response`'s
/// `session_id`), to store once its turn is recorded.
pub(crate) fn session_of(model_response: &Value) -> Option<String> {
    model_response
        .get(SESSION_KEY)
        .and_then(crate::cli_stream::session_id)
}
