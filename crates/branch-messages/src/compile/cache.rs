//! The compiled form of past messages, kept between turns so that a turn
//! does not render, copy or free again the conversation before it.
//!
//! A slot sits at the message's position in the compiled order and holds
//! the message id, what the compiled message was made from, and the
//! compiled message itself, shared ([`Arc`]) with every request that sends
//! it. It is used only when the id is the same and what it was made from
//! equals what the compilation has now: for a past instruction, a record of
//! exactly what its rendering reads (its text fields, context and images,
//! keys in their order; not its tool schemas or response format, which
//! history leaves out); for a model reply, the kept message's own text and
//! reasoning. So an edited, replaced or re-ordered message, or one whose
//! content the compilation changes (the system fold, folded action results,
//! ReAct's de-duplication, replies merged into one), is compiled afresh: a
//! slot can be unused, never stale. Keyed by position, a turn finds its
//! history's slots without hashing.
//!
//! The comparison is skipped when the manager's
//! [`MessageManager::edit_stamp`](branch_core::message::MessageManager::edit_stamp)
//! is the one the slot was last made or checked under: no message present
//! then has changed since, so a turn that only added messages finds its
//! whole history kept at the cost of a few word compares per message.
//! Only for content as stored: what the compilation changes an
//! instruction by (the system text and context blocks folded into the
//! first one, action results, ReAct's context) is not in the messages, so
//! a slot made from changed content is reused only when what it was made
//! from equals the content compiled now. That keeps the first instruction,
//! which carries the system text, from being rendered again on the turn
//! after it was sent, and on every turn of a compilation that does not
//! settle its history (ReAct, native tool calls, an explicit order).

use std::borrow::Cow;
use std::sync::Arc;

use branch_core::message::{ImageDetail, InstructionContent};
use branch_core::model::{ChatMessage, ReasoningBlock, SettledJson, WireForm};
use serde_json::Value;
use uuid::Uuid;

use super::entry::Output;
use super::message::{RequestMessage, RequestRole};
use crate::error::{CompileError, ImageOwner};
use crate::render::{RenderedContent, render_instruction_as};

/// Compiled past messages by position (see the module docs). Keep one per
/// conversation (a verb keeps it in the branch's extensions) and pass it to
/// [`super::compile_request_cached`].
#[derive(Debug, Default)]
pub struct RenderCache {
    // Inline: a slot is a few words, and nearly every position holds one
    // (boxed, each would be an allocation of its own to make and free).
    slots: Vec<Option<Slot>>,
    /// The edit stamp of the messages compiled now.
    stamp: u64,
    settled: Option<Settled>,
    /// Whether the compilation under way resumed or settled the history
    /// (then its messages begin with the settled ones).
    settled_now: bool,
    /// The last instruction sent and the position it was to take, when
    /// its rendering as history is the same (no tool schemas, no response
    /// format): the next compilation finds it there as a past instruction.
    sent: Option<(usize, Made)>,
    /// Where the last compilation resumed the settled history (tests).
    #[cfg(test)]
    pub(crate) resumed_at: Option<usize>,
    /// How many past instructions were found as they were sent.
    #[cfg(test)]
    pub(crate) sent_found: usize,
}

/// The compiled history no message added later can change: everything up
/// to the last past instruction of a compilation in the reference's way
/// (the branch's own order, prompt tool mode, no ReAct context). While the
/// edit stamp it was made under holds, the messages before `walked` are
/// the ones it was made from, so a turn that only added messages compiles
/// just those after it: the history is neither walked nor matched again.
#[derive(Debug)]
struct Settled {
    stamp: u64,
    /// The positions covered.
    walked: usize,
    /// The context blocks glued after the system text in the first
    /// instruction.
    blocks: Vec<String>,
    /// The messages and their kept JSON, in one buffer shared with every
    /// request that sends them (`ChatRequest::settled`): a turn takes one
    /// reference to it, and copies the history's JSON in one piece. Grown
    /// in place once the previous turn's request is gone. A message's
    /// JSON is made when it is first sent again (as a kept message's is),
    /// so a message sent once never has any.
    json: Arc<SettledJson>,
}

/// A rendered instruction and the record of what its rendering read;
/// small enough to sit in its slot (moved there from `sent` as it is).
#[derive(Debug)]
struct Made {
    source: Source,
    /// `None`: it rendered empty and is left out.
    message: Option<Compiled>,
}

#[derive(Debug)]
struct Slot {
    id: Uuid,
    /// The edit stamp the slot was last made or checked under from the
    /// content as stored; `None` when made or checked from content the
    /// compilation changed (the stamp does not vouch for that).
    stamp: Option<u64>,
    kept: Kept,
}

#[derive(Debug)]
enum Kept {
    /// A past instruction.
    Instruction(Made),
    /// A model reply sent as stored; the message holds all it was made
    /// from (its text and reasoning).
    Reply(Compiled),
}

impl Kept {
    fn forget_wire_form(&mut self) {
        match self {
            Self::Instruction(Made {
                message: Some((_, wire)),
                ..
            })
            | Self::Reply((_, wire)) => *wire = None,
            Self::Instruction(Made { message: None, .. }) => {}
        }
    }
}

/// A message and its kept JSON (see [`WireForm`]), shared with the
/// requests that send it.
pub(crate) type Compiled = (Arc<ChatMessage>, Option<Arc<WireForm>>);

/// `m` shared; its JSON is made when it is sent again (a message sent
/// once, as the last turn's are, never needs it).
fn shared(m: RequestMessage) -> Compiled {
    (Arc::new(ChatMessage::from(m)), None)
}

/// A kept message sent again, its JSON made now if it has none yet.
/// An instruction's rendering as the message sent; none when it is empty.
fn user_message(rendered: RenderedContent) -> Option<Compiled> {
    (!rendered.is_empty()).then(|| shared(RequestMessage::new(RequestRole::User, rendered)))
}

fn reused(kept: &mut Compiled) -> Compiled {
    if kept.1.is_none() {
        kept.1 = wire_form(&kept.0);
    }
    kept.clone()
}

/// `m`'s kept JSON. A message serde_json cannot write (a non-string map
/// key cannot occur in a `Value`) goes without: the dialect writes it, and
/// reports the failure, as for any other message.
fn wire_form(m: &Arc<ChatMessage>) -> Option<Arc<WireForm>> {
    WireForm::of(m).ok().flatten().map(Arc::new)
}

/// What rendering an instruction as history reads, written down: its
/// text fields, context, images and image detail, each value tagged and
/// each length given (see [`Record`]), in one small allocation instead of
/// a copy of each. Content with the same record renders the same. The
/// record keeps each object's keys in their order and a float's bits, both
/// of which a rendering writes, where `Value`'s `==` compares objects as
/// maps and `-0.0` equal to `0.0`.
struct Source(Box<[u8]>);

impl std::fmt::Debug for Source {
    // The record is the conversation's text: its length only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Source").field(&self.0.len()).finish()
    }
}

impl Source {
    fn of(c: &InstructionContent) -> Self {
        // Measured first, so that it is allocated once, at its size.
        let mut len = Length(0);
        record(c, &mut len);
        let mut bytes = Vec::with_capacity(len.0);
        record(c, &mut bytes);
        Self(bytes.into_boxed_slice())
    }

    /// Whether `c` has this record: compared as it is written, without
    /// keeping what is written.
    fn is(&self, c: &InstructionContent) -> bool {
        let mut left = Left(Some(&self.0));
        record(c, &mut left);
        left.0.is_some_and(<[u8]>::is_empty)
    }
}

/// Where a record is written.
trait Record {
    fn put(&mut self, bytes: &[u8]);

    fn tag(&mut self, tag: u8) {
        self.put(&[tag]);
    }

    /// A length or a count: eight bytes, so that what follows it cannot be
    /// read as part of it.
    fn len(&mut self, n: usize) {
        self.put(&u64::try_from(n).unwrap_or(u64::MAX).to_le_bytes());
    }

    fn str(&mut self, s: &str) {
        self.len(s.len());
        self.put(s.as_bytes());
    }

    fn value(&mut self, v: &Value) {
        match v {
            Value::Null => self.tag(0),
            Value::Bool(false) => self.tag(1),
            Value::Bool(true) => self.tag(2),
            Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => {
                    self.tag(3);
                    self.put(&u.to_le_bytes());
                }
                (None, Some(i), _) => {
                    self.tag(4);
                    self.put(&i.to_le_bytes());
                }
                (None, None, f) => {
                    self.tag(5);
                    self.put(&f.map_or(0, f64::to_bits).to_le_bytes());
                }
            },
            Value::String(s) => {
                self.tag(6);
                self.str(s);
            }
            Value::Array(items) => {
                self.tag(7);
                self.values(items);
            }
            Value::Object(o) => {
                self.tag(8);
                self.len(o.len());
                for (k, v) in o {
                    self.str(k);
                    self.value(v);
                }
            }
        }
    }

    fn values(&mut self, items: &[Value]) {
        self.len(items.len());
        for v in items {
            self.value(v);
        }
    }

    /// An optional field not set (no value's tag is 9).
    fn absent(&mut self) {
        self.tag(9);
    }
}

/// The record of what rendering `c` as history reads, into `out`.
fn record(c: &InstructionContent, out: &mut impl Record) {
    for v in [&c.instruction, &c.guidance] {
        match v {
            Some(v) => out.value(v),
            None => out.absent(),
        }
    }
    out.values(&c.prompt_context);
    // Every optional field starts with a tag, present or not, so that
    // where one ends is never in doubt.
    for s in [
        c.plain_content.as_deref(),
        c.image_detail.map(ImageDetail::as_str),
    ] {
        match s {
            Some(s) => {
                out.tag(6);
                out.str(s);
            }
            None => out.absent(),
        }
    }
    out.len(c.images.len());
    for i in &c.images {
        out.str(i);
    }
}

impl Record for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Counts a record's bytes.
struct Length(usize);

impl Record for Length {
    fn put(&mut self, bytes: &[u8]) {
        self.0 = self.0.saturating_add(bytes.len());
    }
}

/// Checks a record against the rest of an expected one; `None` once they
/// differ.
struct Left<'a>(Option<&'a [u8]>);

impl Record for Left<'_> {
    fn put(&mut self, bytes: &[u8]) {
        self.0 = self.0.and_then(|rest| rest.strip_prefix(bytes));
    }
}

/// The chat message of a model reply sent as stored: the same conversion
/// a cold compilation makes.
pub(crate) fn reply_message(text: String, reasoning: Vec<ReasoningBlock>) -> RequestMessage {
    let mut m = RequestMessage::new(RequestRole::Assistant, RenderedContent::Text(text));
    m.reasoning = reasoning;
    m
}

impl RenderCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many compiled messages are kept.
    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.slots.iter().all(Option::is_none)
    }

    /// The settled messages the last compilation began with, if it began
    /// with them, and their kept JSON (see `Settled::json`).
    pub(crate) fn settled_json(&self) -> Option<Arc<SettledJson>> {
        self.settled
            .as_ref()
            .filter(|_| self.settled_now)
            .map(|s| Arc::clone(&s.json))
    }

    /// How many slots among the settled positions keep JSON of their own.
    #[cfg(test)]
    pub(crate) fn settled_slots_with_json(&self) -> usize {
        let walked = self.settled.as_ref().map_or(0, |s| s.walked);
        self.slots
            .iter()
            .take(walked)
            .flatten()
            .filter(|s| match &s.kept {
                Kept::Instruction(Made { message, .. }) => {
                    message.as_ref().is_some_and(|(_, w)| w.is_some())
                }
                Kept::Reply((_, w)) => w.is_some(),
            })
            .count()
    }

    /// The slot at `at` when it holds message `id`, and whether it was
    /// made or checked under the current edit stamp (then it holds).
    fn slot(&mut self, at: usize, id: Uuid) -> Option<(&mut Slot, bool)> {
        let stamp = self.stamp;
        match self.slots.get_mut(at) {
            Some(Some(s)) if s.id == id => {
                let current = s.stamp == Some(stamp);
                Some((s, current))
            }
            _ => None,
        }
    }

    fn keep(&mut self, at: usize, id: Uuid, kept: Kept, stamp: Option<u64>) {
        if self.slots.len() <= at {
            self.slots.resize_with(at + 1, || None);
        }
        if let Some(slot) = self.slots.get_mut(at) {
            *slot = Some(Slot { id, stamp, kept });
        }
    }

    /// Drops the slots past the `len` positions compiled now.
    fn truncate(&mut self, len: usize) {
        self.slots.truncate(len);
    }
}

impl Output for RenderCache {
    type Message = Compiled;

    /// A message compiled for this turn only (no JSON kept for it).
    fn fresh(&mut self, m: RequestMessage) -> Compiled {
        shared(m)
    }

    fn begin(&mut self, stamp: u64) {
        self.stamp = stamp;
        self.settled_now = false;
        #[cfg(test)]
        {
            self.resumed_at = None;
        }
    }

    /// The kept form of instruction `id` when it was made for this id
    /// from content equal to `c` (or, for content as stored, checked under
    /// the current edit stamp), else rendered now and kept. Errors are not
    /// kept.
    fn history(
        &mut self,
        at: usize,
        id: Uuid,
        c: &InstructionContent,
        as_stored: bool,
    ) -> Result<Option<Compiled>, CompileError> {
        let stamp = as_stored.then_some(self.stamp);
        if let Some((slot, current)) = self.slot(at, id) {
            if let Kept::Instruction(made) = &mut slot.kept {
                if (current && as_stored) || made.source.is(c) {
                    let message = made.message.as_mut().map(reused);
                    slot.stamp = stamp;
                    return Ok(message);
                }
            }
        }
        // Rendering is a function of the content alone: the same content
        // sent last at this position renders as it did then.
        let made = match self.sent.take_if(|(sent_at, _)| *sent_at == at) {
            Some((_, made)) if made.source.is(c) => {
                #[cfg(test)]
                {
                    self.sent_found += 1;
                }
                made
            }
            _ => {
                let rendered = render_instruction_as(c, ImageOwner::Stored(id), true)?;
                Made {
                    source: Source::of(c),
                    message: user_message(rendered),
                }
            }
        };
        let message = made.message.clone();
        self.keep(at, id, Kept::Instruction(made), stamp);
        Ok(message)
    }

    /// The instruction sent now, rendered; kept as sent for the next
    /// compilation to find.
    fn current(
        &mut self,
        at: usize,
        c: &InstructionContent,
    ) -> Result<Option<Compiled>, CompileError> {
        let message = user_message(render_instruction_as(c, ImageOwner::CurrentTurn, false)?);
        // As history an instruction leaves out its tool schemas and
        // response format; without them it renders the same.
        self.sent = (c.tool_schemas.is_empty() && c.response_format.is_none()).then(|| {
            let made = Made {
                source: Source::of(c),
                message: message.clone(),
            };
            (at, made)
        });
        Ok(message)
    }

    /// The kept form of reply `id` when it holds the same text and
    /// reasoning (or was checked under the current edit stamp), else made
    /// now and kept.
    fn reply(
        &mut self,
        at: usize,
        id: Uuid,
        text: Cow<'_, str>,
        reasoning: Vec<ReasoningBlock>,
    ) -> Compiled {
        let stamp = Some(self.stamp);
        if let Some((slot, current)) = self.slot(at, id) {
            if let Kept::Reply(kept) = &mut slot.kept {
                let m = &kept.0;
                if current || (m.content.as_str() == Some(&*text) && m.reasoning == reasoning) {
                    let kept = reused(kept);
                    slot.stamp = stamp;
                    return kept;
                }
            }
        }
        let kept = shared(reply_message(text.into_owned(), reasoning));
        self.keep(at, id, Kept::Reply(kept.clone()), stamp);
        kept
    }

    fn compiled(&mut self, len: usize) {
        self.truncate(len);
    }

    fn resume(&mut self, blocks: &[String], positions: usize) -> Option<(usize, Vec<Compiled>)> {
        let stamp = self.stamp;
        let settled = self.settled.as_mut()?;
        if settled.stamp != stamp || settled.blocks != blocks {
            self.settled = None;
            return None;
        }
        let after = positions.checked_sub(settled.walked)?;
        #[cfg(test)]
        {
            self.resumed_at = Some(settled.walked);
        }
        self.settled_now = true;
        // The messages settled since the last turn are sent again now:
        // their JSON is made (in place, unless a request still holds it).
        if !settled.json.is_formed() {
            Arc::make_mut(&mut settled.json).form();
        }
        // Room for the messages after it and the current turn's.
        let kept = settled.json.messages();
        let mut messages = Vec::with_capacity(kept.len() + after + 1);
        messages.extend(kept.iter().map(|m| (Arc::clone(m), None)));
        Some((settled.walked, messages))
    }

    fn settle(&mut self, walked: usize, messages: &[Compiled], extend: bool, blocks: &[String]) {
        self.settled_now = true;
        let from = match &self.settled {
            Some(settled) if extend => settled.walked,
            _ => 0,
        };
        // The settled JSON copies these messages' kept JSON when it is
        // formed, and is what later turns send: their slots' copies would
        // keep each message's JSON twice. Should the settled history be
        // dropped (an edit), a message's JSON is made again once.
        for slot in self.slots.iter_mut().take(walked).skip(from).flatten() {
            slot.kept.forget_wire_form();
        }
        let push = |json: &mut SettledJson| {
            for (m, wire) in messages {
                json.push(Arc::clone(m), wire.clone());
            }
        };
        match &mut self.settled {
            Some(settled) if extend => {
                settled.walked = walked;
                push(Arc::make_mut(&mut settled.json));
            }
            _ => {
                let mut json = SettledJson::new();
                push(&mut json);
                self.settled = Some(Settled {
                    stamp: self.stamp,
                    walked,
                    blocks: blocks.to_vec(),
                    json: Arc::new(json),
                });
            }
        }
    }
}

#[cfg(test)]
mod record_tests {
    use serde_json::json;

    use super::*;

    fn with(instruction: Value, guidance: Option<Value>) -> InstructionContent {
        InstructionContent {
            instruction: Some(instruction),
            guidance,
            ..Default::default()
        }
    }

    #[test]
    fn records_tell_apart_what_renders_apart() {
        let pairs = [
            (json!({"a": 1, "b": 2}), json!({"b": 2, "a": 1})),
            (json!(0.0), json!(-0.0)),
            (json!(1), json!(1.0)),
            (json!("1"), json!(1)),
            (json!(["ab"]), json!(["a", "b"])),
            (json!({"a": "b"}), json!({"ab": ""})),
            (json!([[]]), json!([])),
            (json!(-1), json!(u64::MAX)),
            (json!(false), json!(0)),
        ];
        for (a, b) in pairs {
            let kept = Source::of(&with(a.clone(), None));
            assert!(kept.is(&with(a.clone(), None)), "{a}");
            assert!(!kept.is(&with(b.clone(), None)), "{a} against {b}");
        }
        // One field's record does not run into the next one's, and a
        // longer content is not taken for one it begins with.
        let kept = Source::of(&with(json!("x"), Some(json!("y"))));
        assert!(!kept.is(&with(json!("xy"), None)));
        assert!(!Source::of(&with(json!([1]), None)).is(&with(json!([1, 2]), None)));
        assert!(!Source::of(&with(json!([1, 2]), None)).is(&with(json!([1]), None)));
        // Images and their detail are part of it.
        let mut pictured = with(json!("x"), None);
        pictured.images = vec!["https://example.com/a.png".into()];
        let kept = Source::of(&pictured);
        assert!(kept.is(&pictured));
        pictured.image_detail = Some(ImageDetail::Low);
        assert!(!kept.is(&pictured));
        // A plain text of nine bytes is not taken for an absent one (whose
        // tag is 9, a length's first byte).
        let mut plain = with(json!("x"), None);
        plain.plain_content = Some("123456789".into());
        let kept = Source::of(&plain);
        assert!(kept.is(&plain));
        plain.plain_content = None;
        assert!(!kept.is(&plain));
    }
}
