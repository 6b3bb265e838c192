//! Compiled entries before rendering, the merge pass, and rendering.

use std::borrow::Cow;
use std::ops::Deref;

use branch_core::message::InstructionContent;
use branch_core::model::ReasoningBlock;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::cache::reply_message;
use super::message::{RequestMessage, RequestRole};
use crate::error::{CompileError, ImageOwner};
use crate::render::{RenderedContent, render_instruction_as};

/// The result text sent for a native call whose result was never recorded
/// (a turn cut short between the call and its result).
pub(crate) const MISSING_RESULT: &str = r#"{"error":"no result was recorded for this call"}"#;

/// An instruction's content as compiled: the stored one, or a copy the
/// compilation changed (boxed, so an entry stays small).
pub(crate) enum Content<'a> {
    Borrowed(&'a InstructionContent),
    Owned(Box<InstructionContent>),
}

impl Content<'_> {
    /// The content to change, copied first if it is borrowed.
    pub(crate) fn to_mut(&mut self) -> &mut InstructionContent {
        match self {
            Content::Owned(c) => c,
            Content::Borrowed(c) => {
                let copy = Box::new((*c).clone());
                *self = Content::Owned(copy);
                self.to_mut()
            }
        }
    }
}

impl Deref for Content<'_> {
    type Target = InstructionContent;

    fn deref(&self) -> &InstructionContent {
        match self {
            Content::Borrowed(c) => c,
            Content::Owned(c) => c,
        }
    }
}

/// A native tool call attached to a model reply.
pub(crate) struct NativeCall {
    pub(crate) id: String,
    pub(crate) function: String,
    pub(crate) arguments: Map<String, Value>,
    /// The recorded output (`Some(None)`: answered without output).
    pub(crate) result: Option<Option<Value>>,
}

/// One future request message (or, for a reply with native calls, the
/// reply plus its tool results). An instruction is borrowed from the
/// history unless the compilation changes it; `history` marks a past
/// instruction (rendered without its tool schemas and response format).
pub(crate) enum Entry<'a> {
    Instruction {
        content: Content<'a>,
        owner: ImageOwner,
        history: bool,
        /// The position in the compiled order (the render cache's slot).
        at: usize,
    },
    Assistant {
        /// Borrowed from the stored reply until a merge appends to it.
        text: Cow<'a, str>,
        calls: Vec<NativeCall>,
        /// The reply's stored reasoning, sent back by the dialects whose
        /// protocol asks for it.
        reasoning: Vec<ReasoningBlock>,
        /// The position and id of the one stored reply this entry is, as
        /// stored (no merge, no calls): the render cache's slot.
        stored: Option<(usize, Uuid)>,
    },
}

/// What a compilation produces: plain [`RequestMessage`]s, or the model
/// seam's shared messages with past ones kept between turns
/// ([`super::RenderCache`]).
pub(crate) trait Output {
    type Message;

    /// A message compiled now.
    fn fresh(&mut self, m: RequestMessage) -> Self::Message;

    /// Past instruction `id` at position `at`, its content as compiled:
    /// as stored when `as_stored`, else as the compilation changed it (the
    /// system fold, folded action results, ReAct's de-duplication);
    /// `None` when it renders empty.
    fn history(
        &mut self,
        _at: usize,
        id: Uuid,
        c: &InstructionContent,
        _as_stored: bool,
    ) -> Result<Option<Self::Message>, CompileError> {
        let content = render_instruction_as(c, ImageOwner::Stored(id), true)?;
        Ok((!content.is_empty())
            .then(|| self.fresh(RequestMessage::new(RequestRole::User, content))))
    }

    /// The instruction sent now, to be stored at position `at`, its
    /// content as compiled; `None` when it renders empty.
    fn current(
        &mut self,
        _at: usize,
        c: &InstructionContent,
    ) -> Result<Option<Self::Message>, CompileError> {
        let content = render_instruction_as(c, ImageOwner::CurrentTurn, false)?;
        Ok((!content.is_empty())
            .then(|| self.fresh(RequestMessage::new(RequestRole::User, content))))
    }

    /// Model reply `id` at position `at` as stored, `text` not empty.
    fn reply(
        &mut self,
        _at: usize,
        _id: Uuid,
        text: Cow<'_, str>,
        reasoning: Vec<ReasoningBlock>,
    ) -> Self::Message {
        self.fresh(reply_message(text.into_owned(), reasoning))
    }

    /// A compilation of messages with this edit stamp starts.
    fn begin(&mut self, _stamp: u64) {}

    /// The settled history an earlier compilation kept (see
    /// [`Self::settle`]), if it still holds under the current edit stamp
    /// with these context blocks and covers no more than the `positions`
    /// compiled now: the positions it covers and its messages, each as
    /// sent again.
    fn resume(
        &mut self,
        _blocks: &[String],
        _positions: usize,
    ) -> Option<(usize, Vec<Self::Message>)> {
        None
    }

    /// Keeps `messages` as the compiled history of the first `walked`
    /// positions (after those [`Self::resume`] gave when `extend`), which
    /// no message added later changes.
    fn settle(
        &mut self,
        _walked: usize,
        _messages: &[Self::Message],
        _extend: bool,
        _blocks: &[String],
    ) {
    }

    /// The compilation covered `len` positions.
    fn compiled(&mut self, _len: usize) {}
}

/// Every message compiled afresh ([`super::compile_request`]).
pub(crate) struct Uncached;

impl Output for Uncached {
    type Message = RequestMessage;

    fn fresh(&mut self, m: RequestMessage) -> RequestMessage {
        m
    }
}

/// The merge pass: consecutive model replies join with a blank line
/// unless the earlier one called tools (its results must follow it).
/// Every instruction is kept.
pub(crate) fn merge(entries: Vec<Entry<'_>>) -> Vec<Entry<'_>> {
    let mut out: Vec<Entry<'_>> = Vec::with_capacity(entries.len());
    for e in entries {
        match (out.last_mut(), e) {
            (
                Some(Entry::Assistant {
                    text: prev,
                    calls: prev_calls,
                    reasoning: prev_reasoning,
                    stored: prev_stored,
                }),
                Entry::Assistant {
                    text,
                    calls,
                    reasoning,
                    ..
                },
            ) if prev_calls.is_empty() => {
                let prev = prev.to_mut();
                prev.push_str("\n\n");
                prev.push_str(&text);
                *prev_calls = calls;
                prev_reasoning.extend(reasoning);
                *prev_stored = None;
            }
            (_, e) => out.push(e),
        }
    }
    out
}

/// Renders the entries; empty renderings are skipped. Returns the
/// messages and whether the last entry rendered empty.
pub(crate) fn render<O: Output>(
    entries: Vec<Entry<'_>>,
    out_to: &mut O,
) -> Result<(Vec<O::Message>, bool), CompileError> {
    let last = entries.len().saturating_sub(1);
    let mut out = Vec::with_capacity(entries.len());
    let mut last_empty = false;
    for (i, e) in entries.into_iter().enumerate() {
        match e {
            Entry::Instruction {
                content: c,
                owner,
                history,
                at,
            } => {
                let message = match owner {
                    ImageOwner::Stored(id) if history => {
                        let as_stored = matches!(c, Content::Borrowed(_));
                        out_to.history(at, id, &c, as_stored)?
                    }
                    ImageOwner::CurrentTurn if !history => out_to.current(at, &c)?,
                    _ => {
                        let content = render_instruction_as(&c, owner, history)?;
                        (!content.is_empty())
                            .then(|| out_to.fresh(RequestMessage::new(RequestRole::User, content)))
                    }
                };
                match message {
                    Some(m) => out.push(m),
                    None => last_empty = i == last,
                }
            }
            Entry::Assistant {
                text,
                calls,
                reasoning,
                stored,
            } if calls.is_empty() => {
                // An empty reply is left out as the reference does, its
                // reasoning with it (no protocol needs it without the text).
                if !text.is_empty() {
                    out.push(match stored {
                        Some((at, id)) => out_to.reply(at, id, text, reasoning),
                        None => out_to.fresh(reply_message(text.into_owned(), reasoning)),
                    });
                }
            }
            Entry::Assistant {
                text,
                calls,
                reasoning,
                ..
            } => {
                let mut reply = reply_message(text.into_owned(), reasoning);
                reply.tool_calls = calls
                    .iter()
                    .map(|c| {
                        json!({"id": c.id, "type": "function", "function": {
                            "name": c.function,
                            "arguments": Value::Object(c.arguments.clone()).to_string(),
                        }})
                    })
                    .collect();
                out.push(out_to.fresh(reply));
                for c in calls {
                    let text = match c.result {
                        None => MISSING_RESULT.to_owned(),
                        Some(Some(Value::String(s))) => s,
                        Some(Some(v)) => v.to_string(),
                        Some(None) => Value::Null.to_string(),
                    };
                    let mut result =
                        RequestMessage::new(RequestRole::Tool, RenderedContent::Text(text));
                    result.tool_call_id = Some(c.id);
                    out.push(out_to.fresh(result));
                }
            }
        }
    }
    Ok((out, last_empty))
}
