//! A message's chat-completions JSON, serialized once and kept beside it,
//! so that a conversation's body copies its history instead of writing it
//! again on every turn; and a settled history's JSON kept in one buffer,
//! so that a long conversation's body copies it in one piece.

use std::sync::Arc;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;

use super::ChatMessage;

/// The `{"role", "content", ...}` JSON of one shared message (what
/// serializing [`ChatMessage::to_value`] writes), held with the message it
/// was made from. While it exists the message is shared, so no one can
/// change it in place ([`Arc::make_mut`] copies a shared message): the JSON
/// stays the message's for as long as [`WireForm::json_for`] hands it out.
pub struct WireForm {
    message: Arc<ChatMessage>,
    json: Box<RawValue>,
}

impl WireForm {
    /// The form of `message`, serialized now; `None` for a message whose
    /// extra keys repeat `role` or `content` (its value form overwrites
    /// them in place; such a message is written the long way).
    pub fn of(message: &Arc<ChatMessage>) -> serde_json::Result<Option<Self>> {
        if message.extra.contains_key("role") || message.extra.contains_key("content") {
            return Ok(None);
        }
        Ok(Some(Self {
            message: Arc::clone(message),
            json: serde_json::value::to_raw_value(&Plain(message))?,
        }))
    }

    /// The JSON's length in bytes.
    pub fn len(&self) -> usize {
        self.json.get().len()
    }

    /// Whether the JSON is empty (never: it is one JSON object).
    pub fn is_empty(&self) -> bool {
        self.json.get().is_empty()
    }

    /// The JSON, when `message` is the very message (the same allocation)
    /// this form was made from.
    pub fn json_for(&self, message: &Arc<ChatMessage>) -> Option<&RawValue> {
        Arc::ptr_eq(&self.message, message).then_some(&*self.json)
    }
}

impl std::fmt::Debug for WireForm {
    // The message is printed where the request lists it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireForm")
            .field("json", &self.json.get().len())
            .finish()
    }
}

/// The chat-completions JSON of a conversation's settled messages (the
/// history no later message changes), kept between turns in one buffer,
/// comma-separated, with the messages it was made from.
///
/// A body whose request begins with these very messages (the same
/// allocations, [`SettledJson::prefix_of`]) copies their JSON as one piece:
/// at thousands of messages, copying each message's kept JSON from its own
/// allocation was most of a turn's time, as reads of scattered memory. The
/// JSON is made when a message is first sent again ([`SettledJson::form`]):
/// a message sent once never needs it. While a request holds the buffer,
/// no one changes it: the next turn's [`std::sync::Arc::make_mut`] copies it.
#[derive(Clone, Default)]
pub struct SettledJson {
    messages: Vec<Arc<ChatMessage>>,
    /// Kept JSON made before a message settled, used for the message it
    /// was made from when its JSON joins `text` (the ones past `ends`).
    pending: Vec<Option<Arc<WireForm>>>,
    /// The JSON of `messages[..ends.len()]`, comma-separated (UTF-8, as
    /// serde_json writes it).
    text: Vec<u8>,
    /// For each message in `text`: where its JSON ends, in bytes and in
    /// characters (for the token estimate of any run of them).
    ends: Vec<End>,
    /// The positions (in `messages`, among those with JSON in `text`) of
    /// the messages a chat-completions dialect may send otherwise than as
    /// stored: a `system` message (renamed for reasoning models) and an
    /// assistant message calling tools (its reasoning replayed).
    /// Everything between is copied as it is.
    marked: Vec<usize>,
    /// A message whose JSON cannot be kept (its extra keys repeat `role` or
    /// `content`) ended the run: the messages after it are written the
    /// long way.
    ended: bool,
}

/// The JSON of a run of settled messages ([`SettledJson::json`]),
/// comma-separated as serde_json wrote it, with its characters: what a
/// body copies ([`super::BodyWriter::settled`]). Only a [`SettledJson`]
/// makes one, so a body never copies text that is not JSON.
#[derive(Clone, Copy)]
pub struct SettledRun<'a> {
    pub(super) json: &'a [u8],
    pub(super) chars: usize,
}

impl<'a> SettledRun<'a> {
    /// The JSON (UTF-8).
    pub fn json(&self) -> &'a [u8] {
        self.json
    }

    /// Its characters.
    pub fn chars(&self) -> usize {
        self.chars
    }

    /// Whether the run holds no message.
    pub fn is_empty(&self) -> bool {
        self.json.is_empty()
    }
}

impl std::fmt::Debug for SettledRun<'_> {
    // The JSON carries the conversation: its length only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SettledRun")
            .field("json", &self.json.len())
            .field("chars", &self.chars)
            .finish()
    }
}

#[derive(Debug, Clone, Copy)]
struct End {
    byte: usize,
    chars: usize,
}

impl SettledJson {
    /// No messages.
    pub fn new() -> Self {
        Self::default()
    }

    /// The settled messages.
    pub fn messages(&self) -> &[Arc<ChatMessage>] {
        &self.messages
    }

    /// Adds a settled message, with the kept JSON made for it if any
    /// (copied when its JSON is formed). Its own JSON is not made yet.
    pub fn push(&mut self, message: Arc<ChatMessage>, form: Option<Arc<WireForm>>) {
        if !self.ended {
            self.pending.push(form);
        }
        self.messages.push(message);
    }

    /// Whether every message added has had its JSON made (or could not).
    pub fn is_formed(&self) -> bool {
        self.pending.is_empty()
    }

    /// Makes the JSON of the messages added since the last call: copied
    /// from their kept JSON where it was made for that very message, else
    /// serialized now.
    pub fn form(&mut self) {
        let from = self.ends.len();
        let pending = std::mem::take(&mut self.pending);
        // Room for all of them at once: written into a buffer that grew
        // as it went, a short conversation's JSON was reallocated three or
        // four times.
        let guess = self
            .messages
            .iter()
            .skip(from)
            .zip(&pending)
            .map(
                |(m, form)| match form.as_deref().and_then(|f| f.json_for(m)) {
                    Some(json) => json.get().len(),
                    None => json_len_guess(m),
                },
            )
            .fold(pending.len(), usize::saturating_add);
        self.text.reserve(guess);
        for (m, form) in self.messages.iter().skip(from).zip(pending) {
            if self.ended {
                break;
            }
            let start = self.text.len();
            if start > 0 {
                self.text.push(b',');
            }
            let begin = self.text.len();
            let written = match form.as_deref().and_then(|f| f.json_for(m)) {
                Some(json) => {
                    self.text.extend_from_slice(json.get().as_bytes());
                    true
                }
                None => write_plain(m, &mut self.text),
            };
            if !written {
                self.text.truncate(start);
                self.ended = true;
                break;
            }
            let chars = self
                .ends
                .last()
                .map_or(0, |e| e.chars.saturating_add(1))
                .saturating_add(super::body::utf8_chars(
                    self.text.get(begin..).unwrap_or_default(),
                ));
            if m.role == "system" || (m.role == "assistant" && m.extra.contains_key("tool_calls")) {
                self.marked.push(self.ends.len());
            }
            self.ends.push(End {
                byte: self.text.len(),
                chars,
            });
        }
    }

    /// How many of `messages`' first messages are these very ones (the
    /// same allocations) with their JSON here: that many can be copied
    /// from [`SettledJson::json`]. Compares pointers only.
    pub fn prefix_of(&self, messages: &[Arc<ChatMessage>]) -> usize {
        self.messages
            .iter()
            .take(self.ends.len())
            .zip(messages)
            .take_while(|(a, b)| Arc::ptr_eq(a, b))
            .count()
    }

    /// The JSON of messages `range` (comma-separated) and its characters;
    /// `None` past the messages with JSON here.
    pub fn json(&self, range: std::ops::Range<usize>) -> Option<SettledRun<'_>> {
        if range.is_empty() {
            return Some(SettledRun {
                json: &[],
                chars: 0,
            });
        }
        let last = *self.ends.get(range.end.checked_sub(1)?)?;
        let (byte, chars) = match range.start.checked_sub(1) {
            None => (0, 0),
            Some(before) => {
                let e = self.ends.get(before)?;
                // Past the comma after the message before.
                (e.byte.checked_add(1)?, e.chars.checked_add(1)?)
            }
        };
        Some(SettledRun {
            json: self.text.get(byte..last.byte)?,
            chars: last.chars.checked_sub(chars)?,
        })
    }

    /// The positions, in order, of the messages with JSON here that a
    /// dialect may send otherwise than as stored: `system` messages and
    /// assistant messages calling tools.
    pub fn marked(&self) -> &[usize] {
        &self.marked
    }
}

impl std::fmt::Debug for SettledJson {
    // The messages are printed where a request lists them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SettledJson")
            .field("messages", &self.messages.len())
            .field("with_json", &self.ends.len())
            .field("json", &self.text.len())
            .finish()
    }
}

/// About the length of `m`'s JSON: its text and a little for the keys
/// (other content a little more). Room to reserve, never a limit.
pub fn json_len_guess(m: &ChatMessage) -> usize {
    let content = match &m.content {
        serde_json::Value::String(t) => t.len(),
        _ => 256,
    };
    let extra = if m.extra.is_empty() { 0 } else { 256 };
    32usize.saturating_add(content).saturating_add(extra)
}

/// Appends `m`'s JSON to `text`; false when it cannot be kept (`text`
/// may then hold part of it: the caller cuts it off).
fn write_plain(m: &ChatMessage, text: &mut Vec<u8>) -> bool {
    if m.extra.contains_key("role") || m.extra.contains_key("content") {
        return false;
    }
    serde_json::to_writer(text, &Plain(m)).is_ok()
}

/// A message as its value form serializes, without building the value.
struct Plain<'a>(&'a ChatMessage);

impl Serialize for Plain<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let m = self.0;
        let mut out = s.serialize_map(Some(2 + m.extra.len()))?;
        out.serialize_entry("role", &m.role)?;
        out.serialize_entry("content", &m.content)?;
        for (k, v) in &m.extra {
            out.serialize_entry(k, v)?;
        }
        out.end()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_form_is_the_value_form_of_that_message_only() {
        let mut m = ChatMessage::assistant("hé \"there\"\n");
        m.extra.insert("tool_calls".into(), json!([{"id": "c1"}]));
        let shared = Arc::new(m);
        let form = WireForm::of(&shared).unwrap().unwrap();
        let json = form.json_for(&shared).unwrap();
        assert_eq!(
            json.get(),
            serde_json::to_string(&shared.to_value()).unwrap()
        );

        // An equal message elsewhere, or the message changed (copied on
        // write, as the form holds it), has no form here.
        let equal = Arc::new(ChatMessage::clone(&shared));
        assert!(form.json_for(&equal).is_none());
        let mut changed = Arc::clone(&shared);
        Arc::make_mut(&mut changed).content = "changed".into();
        assert!(form.json_for(&changed).is_none());
        assert!(form.json_for(&shared).is_some());

        let mut odd = ChatMessage::user("x");
        odd.extra.insert("content".into(), "y".into());
        assert!(WireForm::of(&Arc::new(odd)).unwrap().is_none());
    }

    #[test]
    fn settled_json_holds_its_messages_json_in_runs_until_one_cannot_be_kept() {
        let mut calls = ChatMessage::assistant(serde_json::Value::Null);
        calls
            .extra
            .insert("tool_calls".into(), json!([{"id": "c1"}]));
        let mut odd = ChatMessage::user("x");
        odd.extra.insert("content".into(), "y".into());
        let messages: Vec<Arc<ChatMessage>> = [
            ChatMessage::system("sé \"q\""),
            ChatMessage::user("hé 🎉"),
            calls,
            ChatMessage::assistant("plain"),
            odd,
            ChatMessage::user("after"),
        ]
        .into_iter()
        .map(Arc::new)
        .collect();
        // A form made for the second message is copied; one made for an
        // equal copy of the fourth is not used.
        let copy = Arc::new(ChatMessage::clone(&messages[3]));
        let mut settled = SettledJson::new();
        for (i, m) in messages.iter().enumerate() {
            let form = match i {
                1 => WireForm::of(m).unwrap().map(Arc::new),
                3 => WireForm::of(&copy).unwrap().map(Arc::new),
                _ => None,
            };
            settled.push(Arc::clone(m), form);
        }
        assert!(!settled.is_formed());
        assert_eq!(settled.prefix_of(&messages), 0);
        settled.form();
        assert!(settled.is_formed());
        // The run ends before the message that repeats `content`.
        assert_eq!(settled.prefix_of(&messages), 4);
        assert_eq!(settled.marked(), [0, 2]);
        let texts: Vec<String> = messages[..4]
            .iter()
            .map(|m| m.to_value().to_string())
            .collect();
        for a in 0..=4 {
            for b in a..=4 {
                let expected = texts[a..b].join(",");
                let run = settled.json(a..b).unwrap();
                assert_eq!(
                    std::str::from_utf8(run.json()).unwrap(),
                    expected,
                    "{a}..{b}"
                );
                assert_eq!(run.chars(), expected.chars().count(), "{a}..{b}");
            }
        }
        assert!(settled.json(0..5).is_none());
        // Later messages join no run; the prefix stops at a message that
        // is not the very one.
        settled.push(Arc::new(ChatMessage::user("later")), None);
        settled.form();
        assert_eq!(settled.prefix_of(&messages), 4);
        let mut changed = messages.clone();
        Arc::make_mut(&mut changed[2]).content = "changed".into();
        assert_eq!(settled.prefix_of(&changed), 2);
        assert_eq!(settled.prefix_of(&messages[..1]), 1);
    }

    /// The messages a turn settles are written into room reserved for
    /// them all: the buffer does not grow message by message.
    #[test]
    fn a_turns_settled_messages_fit_the_room_reserved_for_them() {
        let mut settled = SettledJson::new();
        let turn = [
            ChatMessage::system("You are terse."),
            ChatMessage::user("instruction: Question 0"),
            ChatMessage::assistant("An answer, with \"quotes\" and é."),
        ];
        let room: usize = turn.iter().map(json_len_guess).sum::<usize>() + turn.len();
        for m in turn {
            settled.push(Arc::new(m), None);
        }
        settled.form();
        assert!(settled.text.len() <= room);
        assert!(
            settled.text.capacity() <= room,
            "grew past the room reserved: {} > {room}",
            settled.text.capacity()
        );
    }
}
