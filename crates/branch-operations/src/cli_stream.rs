//! Reading a CLI agent's `stream-json` output (Claude Code's protocol) into
//! the messages of one turn.
//!
//! [`CliTurnReader`] takes the agent's output one line at a time and keeps
//! the turn's messages until [`CliTurnReader::finish`]; it does no I/O, so
//! the `run` verb drives it from the child's stdout and the fuzz target
//! `cli_stream` from arbitrary bytes. Every line is the agent's, so every
//! line is hostile: nothing here panics on one, each line costs time in
//! proportion to its length (a tool result finds its request through a
//! map, not a search of the turn), and the turn's messages are capped by
//! [`crate::limits::MAX_CLI_TURN_MESSAGES`].

use std::collections::{HashMap, HashSet};

use branch_core::Participant;
use branch_core::message::{ActionResponseContent, Message, MessageContent};
use branch_core::model::add_counts;
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::run::TextHook;

/// The keys of a `result` event kept in the reply's `model_response`.
const RESULT_META_KEYS: &[&str] = &[
    "usage",
    "total_cost_usd",
    "num_turns",
    "duration_ms",
    "duration_api_ms",
    "session_id",
];

/// Why the agent's output ends the turn: the agent reported a failure, or
/// it wrote something the protocol does not allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliStreamError(String);

impl std::fmt::Display for CliStreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CliStreamError {}

fn malformed(what: &str) -> CliStreamError {
    CliStreamError(format!("the CLI agent wrote {}", head(what)))
}

/// One turn of a CLI agent, read line by line.
///
/// Messages are built as their events arrive: text is held until a tool
/// use (which records it as a reply first) or the end of the turn; a
/// `tool_use` block becomes an ActionRequest, its `tool_result` the
/// ActionResponse that answers it (and the request is linked to it).
/// Replies and requests are sent by the branch to `user`; responses by
/// `user` to the branch, as the reference sends them.
///
/// ```
/// use branch_core::{Participant, Role};
/// use branch_operations::cli_stream::CliTurnReader;
///
/// let output = r#"{"type":"system","session_id":"6f1c2e1a-3b4d-4e5f-8a9b-0c1d2e3f4a5b"}
/// {"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1","name":"Read","input":{"path":"a.txt"}}]}}
/// {"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"hello"}]}}
/// {"type":"result","result":"The file says hello.","num_turns":1}"#;
/// let mut reader = CliTurnReader::new(uuid::Uuid::new_v4(), Participant::Role(Role::User));
/// for line in output.lines() {
///     reader.read_line(line)?;
/// }
/// let turn = reader.finish(serde_json::Value::Null)?;
/// let kinds: Vec<_> = turn.messages.iter().map(|m| m.kind().class_name()).collect();
/// assert_eq!(kinds, ["ActionRequest", "ActionResponse", "AssistantResponse"]);
/// assert_eq!(turn.messages[2].as_assistant_text(), Some("The file says hello."));
/// assert_eq!(turn.session_id.as_deref(), Some("6f1c2e1a-3b4d-4e5f-8a9b-0c1d2e3f4a5b"));
/// # Ok::<(), branch_operations::cli_stream::CliStreamError>(())
/// ```
#[derive(Debug)]
pub struct CliTurnReader {
    branch: Uuid,
    user: Participant,
    on_text: Option<TextHook>,
    on_thinking: Option<TextHook>,
    messages: Vec<Message>,
    text: String,
    /// The thinking blocks since the last reply, each trimmed, empty ones
    /// left out.
    thinking: Vec<String>,
    result_meta: Map<String, Value>,
    /// The agent's ids of the turn's tool uses not answered yet, each with
    /// its request's place in `messages`.
    open_calls: HashMap<String, usize>,
    /// Every tool-use id of the turn, answered or not: an id is used once.
    used_ids: HashSet<String>,
    session_id: Option<String>,
    /// The text of the last `result` event, trimmed.
    result_text: Option<String>,
    /// Each text block as read, empty ones included, when an agent call
    /// asked for them (`keep_text_blocks`).
    text_blocks: Option<Vec<String>>,
    /// A reply was recorded or a `result` event read.
    replied: bool,
}

/// What a finished turn leaves: its messages and the agent's session id to
/// resume (when the agent reported one).
#[derive(Debug)]
pub struct CliTurn {
    /// The turn's messages in order, the final reply last.
    pub messages: Vec<Message>,
    /// The session id of the turn's last `system` event that carried a
    /// valid one; for the branch's metadata once the turn is recorded.
    pub session_id: Option<String>,
}

impl CliTurnReader {
    /// A reader for a turn of the branch `branch`, whose user is `user`.
    pub fn new(branch: Uuid, user: Participant) -> Self {
        Self {
            branch,
            user,
            on_text: None,
            on_thinking: None,
            messages: Vec::new(),
            text: String::new(),
            thinking: Vec::new(),
            result_meta: Map::new(),
            open_calls: HashMap::new(),
            used_ids: HashSet::new(),
            session_id: None,
            result_text: None,
            text_blocks: None,
            replied: false,
        }
    }

    /// Calls `hook` with each text block as it is read.
    pub fn on_text(mut self, hook: Option<TextHook>) -> Self {
        self.on_text = hook;
        self
    }

    /// Calls `hook` with each thinking block as it is read.
    pub fn on_thinking(mut self, hook: Option<TextHook>) -> Self {
        self.on_thinking = hook;
        self
    }

    /// The messages built so far (the final reply is built by `finish`).
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Keeps each text block as read (see `take_text_blocks`).
    pub(crate) fn keep_text_blocks(mut self) -> Self {
        self.text_blocks = Some(Vec::new());
        self
    }

    /// The text blocks kept since `keep_text_blocks`, in order.
    pub(crate) fn take_text_blocks(&mut self) -> Vec<String> {
        self.text_blocks
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// The text of the last `result` event read, trimmed.
    pub fn result_text(&self) -> Option<&str> {
        self.result_text.as_deref()
    }

    /// Whether the agent has given a reply: text, or a `result` event.
    pub fn has_reply(&self) -> bool {
        self.replied || !self.text.is_empty()
    }

    /// Reads one line of output (without its newline). A line that is not
    /// a JSON object is not an event (agents print warnings too) and is
    /// skipped, as are event and block types this protocol does not name.
    /// An error ends the turn: an `error` event, a `result` marked
    /// `is_error`, a malformed event, or one message past the cap.
    pub fn read_line(&mut self, line: &str) -> Result<(), CliStreamError> {
        let Ok(Value::Object(mut event)) = serde_json::from_str::<Value>(line.trim()) else {
            tracing::debug!("a line of the CLI agent's output is not an event; skipped");
            return Ok(());
        };
        match event.get("type").and_then(Value::as_str) {
            Some("system") => {
                self.system(&event);
                Ok(())
            }
            Some("assistant") => {
                for block in content_blocks(&mut event) {
                    self.assistant_block(block)?;
                }
                Ok(())
            }
            Some("user") => {
                for block in content_blocks(&mut event) {
                    self.user_block(block)?;
                }
                Ok(())
            }
            Some("result") => self.result(event),
            Some("error") => {
                let msg = event
                    .get("message")
                    .or_else(|| event.get("error"))
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                    .unwrap_or_default();
                Err(CliStreamError(format!(
                    "the CLI agent failed: {}",
                    head(&msg)
                )))
            }
            _ => Ok(()),
        }
    }

    /// Ends the turn: the held text becomes the final reply, carrying the
    /// thinking and the usage no earlier reply took and the call record
    /// `api_call_meta` the caller built. The reply is made even without
    /// text, so the turn's usage and thinking are kept.
    pub fn finish(mut self, api_call_meta: Value) -> Result<CliTurn, CliStreamError> {
        let text = std::mem::take(&mut self.text);
        let mut reply = self.reply(text);
        reply
            .element
            .metadata
            .insert("api_call_meta".into(), api_call_meta);
        self.push(reply)?;
        Ok(CliTurn {
            messages: self.messages,
            session_id: self.session_id,
        })
    }

    fn system(&mut self, event: &Map<String, Value>) {
        match event.get("session_id").map(session_id) {
            Some(Some(id)) => self.session_id = Some(id),
            Some(None) => {
                tracing::warn!("the CLI agent reported a session id that is not a UUID; not kept")
            }
            None => {}
        }
    }

    fn assistant_block(&mut self, block: Value) -> Result<(), CliStreamError> {
        let Value::Object(mut block) = block else {
            return Err(malformed("a content block that is not an object"));
        };
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                let piece = block_text(&block, "text")?;
                if let Some(hook) = &self.on_text {
                    hook.call(piece);
                }
                if let Some(blocks) = &mut self.text_blocks {
                    blocks.push(piece.to_owned());
                }
                self.text.push_str(piece);
            }
            Some("thinking") => {
                let piece = block_text(&block, "thinking")?;
                if let Some(hook) = &self.on_thinking {
                    hook.call(piece);
                }
                // A block with no thought in it is not kept, as the
                // reference keeps none (`thinking` is then left out).
                let thought = piece.trim();
                if !thought.is_empty() {
                    self.thinking.push(thought.to_owned());
                }
            }
            Some("tool_use") => {
                let id = match block.get("id").and_then(Value::as_str) {
                    Some(id) if !id.is_empty() => id.to_owned(),
                    _ => return Err(malformed("a tool use without an id")),
                };
                let name = match block.get("name").and_then(Value::as_str) {
                    Some(n) if !n.is_empty() => n.to_owned(),
                    _ => return Err(malformed(&format!("tool use {id:?} without a name"))),
                };
                let Some(Value::Object(arguments)) = block.remove("input") else {
                    return Err(malformed(&format!(
                        "tool use {id:?} without an input object"
                    )));
                };
                if self.used_ids.contains(&id) {
                    return Err(malformed(&format!("tool use id {id:?} twice")));
                }
                if !self.text.is_empty() {
                    let text = std::mem::take(&mut self.text);
                    let reply = self.reply(text);
                    self.push(reply)?;
                }
                let request = Message::action_request(name, arguments)
                    .with_sender(Participant::Id(self.branch))
                    .with_recipient(self.user.clone());
                let at = self.messages.len();
                self.push(request)?;
                self.used_ids.insert(id.clone());
                self.open_calls.insert(id, at);
            }
            // Where an agent puts a result beside its own text.
            Some("tool_result") => self.user_block(Value::Object(block))?,
            _ => {}
        }
        Ok(())
    }

    fn user_block(&mut self, block: Value) -> Result<(), CliStreamError> {
        let Value::Object(mut block) = block else {
            return Err(malformed("a content block that is not an object"));
        };
        if block.get("type").and_then(Value::as_str) != Some("tool_result") {
            return Ok(());
        }
        let Some(use_id) = block
            .get("tool_use_id")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return Err(malformed("a tool result without a tool_use_id"));
        };
        let Some(&at) = self.open_calls.get(&use_id) else {
            // Kept out rather than invented an unanswered request for: the
            // turn's requests are the agent's own tool uses.
            let shown = head(&use_id);
            if self.used_ids.contains(&use_id) {
                tracing::warn!(tool_use_id = %shown, "a second result for one tool use; not kept");
            } else {
                tracing::warn!(tool_use_id = %shown, "a result for no tool use of this turn; not kept");
            }
            return Ok(());
        };
        let (function, arguments, request_id) = match &self.messages[at].content {
            MessageContent::ActionRequest(r) => (
                r.function.clone(),
                r.arguments.clone(),
                self.messages[at].id(),
            ),
            // `open_calls` holds requests' places only.
            _ => return Ok(()),
        };
        let mut response = Message::new(MessageContent::ActionResponse(Box::new(
            ActionResponseContent {
                function,
                arguments,
                output: block.remove("content"),
                action_request_id: Some(request_id),
                error: None,
            },
        )))
        .with_sender(self.user.clone())
        .with_recipient(Participant::Id(self.branch));
        if block.get("is_error").and_then(Value::as_bool) == Some(true) {
            response
                .element
                .metadata
                .insert("is_error".into(), true.into());
        }
        let response_id = response.id();
        self.push(response)?;
        self.open_calls.remove(&use_id);
        if let MessageContent::ActionRequest(r) = &mut self.messages[at].content {
            r.action_response_id = Some(response_id);
        }
        Ok(())
    }

    /// Usage and cost (numbers summed over the turn's `result` events, as
    /// the reference sums them), an error, or the reply's text when the
    /// agent wrote none in text blocks.
    fn result(&mut self, mut event: Map<String, Value>) -> Result<(), CliStreamError> {
        self.replied = true;
        for key in RESULT_META_KEYS {
            let Some(v) = event.remove(*key) else {
                continue;
            };
            match self.result_meta.get_mut(*key) {
                Some(kept) => add_counts(kept, v),
                None => {
                    self.result_meta.insert((*key).to_owned(), v);
                }
            }
        }
        let result = event.get("result").and_then(Value::as_str);
        if event.get("is_error").and_then(Value::as_bool) == Some(true) {
            // An error result names its failures in `errors`; its `result`
            // may be the turn's own text.
            let errors = error_messages(&event);
            let said = match errors.is_empty() {
                false => errors.as_str(),
                true => result.unwrap_or("the CLI agent reported an error"),
            };
            return Err(CliStreamError(head(said).to_owned()));
        }
        if let Some(r) = result {
            self.result_text = Some(r.trim().to_owned());
            if self.text.is_empty() {
                self.text = r.to_owned();
            }
        }
        Ok(())
    }

    /// A reply of `text`, taking the thinking read since the last reply
    /// (`thinking`, its blocks joined by newlines) and the usage of the
    /// `result` events read since (`model_response`), as the reference
    /// stamps each reply it records.
    fn reply(&mut self, text: String) -> Message {
        self.replied = true;
        let mut m = Message::assistant(text)
            .with_sender(Participant::Id(self.branch))
            .with_recipient(self.user.clone());
        if !self.thinking.is_empty() {
            let thinking = std::mem::take(&mut self.thinking).join("\n");
            m.element
                .metadata
                .insert("thinking".into(), thinking.into());
        }
        if !self.result_meta.is_empty() {
            let usage = std::mem::take(&mut self.result_meta);
            m.element
                .metadata
                .insert("model_response".into(), Value::Object(usage));
        }
        m
    }

    fn push(&mut self, m: Message) -> Result<(), CliStreamError> {
        if self.messages.len() >= crate::limits::MAX_CLI_TURN_MESSAGES {
            return Err(CliStreamError(format!(
                "the CLI agent's turn has more than {} messages, the limit",
                crate::limits::MAX_CLI_TURN_MESSAGES
            )));
        }
        self.messages.push(m);
        Ok(())
    }
}

/// The head of text the agent wrote, as an error or a log line quotes it:
/// at most [`crate::limits::MAX_CLI_ERROR_BYTES`], cut on a character
/// boundary, as one line of output may hold megabytes.
fn head(text: &str) -> &str {
    let mut end = text.len().min(crate::limits::MAX_CLI_ERROR_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The messages an error `result` lists in `errors` (strings, or objects
/// with a `message`), trimmed, each once, joined by `; `, as far as the
/// error keeps them ([`head`]); empty when none says anything.
fn error_messages(event: &Map<String, Value>) -> String {
    let mut seen = HashSet::new();
    let mut said = String::new();
    for e in event
        .get("errors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if said.len() > crate::limits::MAX_CLI_ERROR_BYTES {
            break;
        }
        let text = e
            .as_str()
            .or_else(|| e.get("message").and_then(Value::as_str));
        let Some(text) = text.map(str::trim).filter(|t| !t.is_empty()) else {
            continue;
        };
        if seen.insert(text) {
            if !said.is_empty() {
                said.push_str("; ");
            }
            said.push_str(text);
        }
    }
    said
}

/// The blocks of an `assistant` or `user` event's `message.content`, taken
/// out of the event (none when it has no list there).
fn content_blocks(event: &mut Map<String, Value>) -> Vec<Value> {
    match event
        .get_mut("message")
        .and_then(|m| m.get_mut("content"))
        .map(Value::take)
    {
        Some(Value::Array(blocks)) => blocks,
        _ => Vec::new(),
    }
}

/// A text or thinking block's text: a string, or the block is malformed.
fn block_text<'a>(block: &'a Map<String, Value>, key: &str) -> Result<&'a str, CliStreamError> {
    block
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| malformed(&format!("a {key} block without its {key} string")))
}

/// A Claude Code session id in its canonical form: the agent's ids are
/// UUIDs, so anything else (a value starting with `-`, text with spaces,
/// a path) is refused rather than handed to the agent.
pub(crate) fn session_id(v: &Value) -> Option<String> {
    let s = v.as_str()?;
    let id = Uuid::try_parse(s).ok()?;
    // Only the plain hyphenated form the agent writes; braces, URNs and
    // bare hex are other programs' spellings.
    (id.hyphenated().to_string() == s.to_ascii_lowercase()).then(|| s.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thinking block with no thought in it is not kept, and a reply
    /// after only such blocks has no `thinking`, as the reference's.
    #[test]
    fn empty_thinking_is_not_kept() {
        let mut r = CliTurnReader::new(
            Uuid::from_u128(1),
            Participant::Role(branch_core::Role::User),
        );
        for line in [
            r#"{"type":"assistant","message":{"content":[{"type":"thinking","thinking":"  "},{"type":"text","text":"a"}]}}"#,
            r#"{"type":"result","result":"a"}"#,
        ] {
            r.read_line(line).unwrap();
        }
        let turn = r.finish(Value::Null).unwrap();
        let reply = turn.messages.last().unwrap();
        assert_eq!(reply.as_assistant_text(), Some("a"));
        assert!(!reply.element.metadata.contains_key("thinking"));
    }

    /// An agent call keeps every text block, empty ones too, and the
    /// result's text trimmed.
    #[test]
    fn text_blocks_and_the_result_are_kept_for_an_agent_call() {
        let mut r = CliTurnReader::new(
            Uuid::from_u128(1),
            Participant::Role(branch_core::Role::User),
        )
        .keep_text_blocks();
        for line in [
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":""}]}}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"b "}]}}"#,
            r#"{"type":"result","result":" done "}"#,
        ] {
            r.read_line(line).unwrap();
        }
        assert_eq!(r.take_text_blocks(), ["", "b "]);
        assert_eq!(r.result_text(), Some("done"));
    }
}
