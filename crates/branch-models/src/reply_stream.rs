//! The body of a streaming call, from bytes to chunks: framed by
//! [`SseFramer`], normalised by the dialect ([`crate::dialect::Dialect::normalize_event`]), and held to the call's
//! limits (overall deadline, reply bytes, tool calls). Every way a stream can
//! go wrong ends it with one error item: a transport failure, a deadline, a
//! cap, an event that is not JSON, a provider-reported failure, a missing end
//! marker, or a reply with nothing in it.

use std::collections::{HashSet, VecDeque};

use branch_core::model::{
    ChatChunk, ChatStream, ChunkKind, ModelError, ModelErrorKind, stream_chunk,
};
use serde_json::Value;
use tokio::time::Instant;

use crate::imodel::{IModel, empty_reply_message};
use crate::limiter::Permit;

use crate::sse_frame::{SseError, SseEvent, SseFramer};

/// A streaming reply being read.
pub(crate) struct ReplyStream {
    model: IModel,
    resp: reqwest::Response,
    framer: SseFramer,
    pending: VecDeque<SseEvent>,
    scratch: Vec<SseEvent>,
    deadline: Instant,
    received: usize,
    /// Tool calls seen, by (index, id or name): bounded by the cap.
    tool_calls: HashSet<(u64, String)>,
    events: u64,
    saw_content: bool,
    finish_reason: Option<String>,
    /// The model the events name; the model's state learns it only when
    /// the stream completes (a stream cut short reports nothing).
    served_model: Option<String>,
    failed: Option<String>,
    terminal: bool,
    finished: bool,
    _permit: Permit,
}

impl ReplyStream {
    pub(crate) fn new(
        model: IModel,
        resp: reqwest::Response,
        permit: Permit,
        deadline: Instant,
    ) -> Self {
        Self {
            model,
            resp,
            framer: SseFramer::new(),
            pending: VecDeque::new(),
            scratch: Vec::new(),
            deadline,
            received: 0,
            tool_calls: HashSet::new(),
            events: 0,
            saw_content: false,
            finish_reason: None,
            served_model: None,
            failed: None,
            terminal: false,
            finished: false,
            _permit: permit,
        }
    }

    pub(crate) fn into_chat_stream(self) -> ChatStream {
        Box::pin(futures_util::stream::unfold(self, |mut st| async move {
            let item = st.next_item().await?;
            if item.is_err() {
                st.finished = true;
            }
            Some((item, st))
        }))
    }

    fn fail(&self, kind: ModelErrorKind, message: impl Into<String>) -> ModelError {
        self.model
            .err(kind, message)
            .with_status(200)
            .with_attempts(1)
    }

    async fn next_item(&mut self) -> Option<Result<ChatChunk, ModelError>> {
        loop {
            if self.finished {
                return None;
            }
            if let Some(ev) = self.pending.pop_front() {
                return Some(self.on_event(&ev));
            }
            let read = tokio::time::timeout_at(self.deadline, self.resp.chunk()).await;
            match read {
                Err(_) => {
                    return Some(Err(self.model.deadline_error().with_attempts(1)));
                }
                Ok(Err(e)) => {
                    return Some(Err(self.model.map_transport(&e).with_attempts(1)));
                }
                Ok(Ok(Some(bytes))) => {
                    if let Err(e) = self.on_bytes(&bytes) {
                        return Some(Err(e));
                    }
                }
                Ok(Ok(None)) => {
                    self.finished = true;
                    return self.on_end().map(Err);
                }
            }
        }
    }

    fn on_bytes(&mut self, bytes: &[u8]) -> Result<(), ModelError> {
        let cap = self.model.call_limits().max_reply_bytes;
        self.received = self.received.saturating_add(bytes.len());
        if self.received > cap {
            return Err(self.fail(
                ModelErrorKind::ReplyLimit,
                format!("the streamed reply is larger than {cap} bytes (max_reply_bytes)"),
            ));
        }
        if let Err(e) = self.framer.push(bytes, &mut self.scratch) {
            let kind = match e {
                SseError::NotUtf8 => ModelErrorKind::MalformedResponse,
                SseError::LineTooLong { .. } | SseError::EventTooLarge { .. } => {
                    ModelErrorKind::ReplyLimit
                }
            };
            return Err(self.fail(kind, e.to_string()));
        }
        self.pending.extend(self.scratch.drain(..));
        Ok(())
    }

    fn on_event(&mut self, ev: &SseEvent) -> Result<ChatChunk, ModelError> {
        self.events = self.events.saturating_add(1);
        let name = if ev.event.is_empty() {
            "message"
        } else {
            ev.event.as_str()
        };
        let n = self
            .model
            .dialect()
            .normalize_event(name, &ev.data)
            .map_err(|e| {
                self.fail(
                    ModelErrorKind::MalformedResponse,
                    format!("{e} (event {})", self.events),
                )
            })?;
        if n.call_failed && self.failed.is_none() {
            self.failed = Some(
                n.chunk
                    .content
                    .clone()
                    .unwrap_or_else(|| "the provider reported a failure".into()),
            );
        }
        self.terminal |= n.terminal;
        let raw = n.chunk.raw();
        let model = n.chunk.metadata.get(stream_chunk::MODEL);
        if let Some(m) = model
            .or_else(|| raw.and_then(|r| r.get("model")))
            .and_then(Value::as_str)
        {
            if self.served_model.as_deref() != Some(m) {
                self.served_model = Some(m.to_owned());
            }
        }
        let reason = raw.and_then(|r| {
            r.pointer("/choices/0/finish_reason")
                .or_else(|| r.pointer("/delta/stop_reason"))
        });
        if let Some(reason) = reason.and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
        match n.chunk.kind {
            ChunkKind::Text => {
                self.saw_content |= n.chunk.content.as_deref().is_some_and(|c| !c.is_empty());
            }
            ChunkKind::ToolUse => {
                self.saw_content = true;
                self.count_tool_call(&n.chunk)?;
            }
            _ => {}
        }
        Ok(n.chunk)
    }

    /// A chunk naming a call (its id or name) starts one; deltas of the
    /// same call repeat its index and id.
    fn count_tool_call(&mut self, chunk: &ChatChunk) -> Result<(), ModelError> {
        let Some(key) = chunk.tool_id.as_ref().or(chunk.tool_name.as_ref()) else {
            return Ok(());
        };
        let index = chunk
            .raw()
            .and_then(|r| {
                r.pointer("/choices/0/delta/tool_calls/0/index")
                    .or_else(|| r.get("index"))
            })
            .and_then(Value::as_u64)
            .unwrap_or(0);
        if self.tool_calls.contains(&(index, key.clone())) {
            return Ok(());
        }
        let cap = self.model.call_limits().max_tool_calls;
        if self.tool_calls.len() >= cap {
            return Err(self.fail(
                ModelErrorKind::ReplyLimit,
                format!("the streamed reply asks for more than {cap} tool calls (max_tool_calls)"),
            ));
        }
        self.tool_calls.insert((index, key.clone()));
        Ok(())
    }

    /// The end of the body: the error it implies, if any.
    fn on_end(&mut self) -> Option<ModelError> {
        if let Err(e) = self.framer.finish() {
            return Some(self.fail(ModelErrorKind::MalformedResponse, e.to_string()));
        }
        if let Some(msg) = self.failed.take() {
            return Some(self.fail(ModelErrorKind::StreamFailed, msg));
        }
        if !self.terminal {
            return Some(self.fail(
                ModelErrorKind::MalformedResponse,
                "the stream ended before its end marker",
            ));
        }
        if !self.saw_content {
            return Some(self.fail(
                ModelErrorKind::MalformedResponse,
                empty_reply_message(self.finish_reason.as_deref()),
            ));
        }
        if let Some(m) = self.served_model.take() {
            self.model.lock_state().served_model = Some(m);
        }
        None
    }
}
