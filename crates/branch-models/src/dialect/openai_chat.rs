//! OpenAI chat completions: the protocol of OpenAI and of every
//! compatible server (Ollama, vLLM, llama.cpp, OpenRouter, Groq ...).
//! Our compiled messages are already in its shape.

use std::ops::Range;

use branch_core::model::{
    BodyWriter, ChatChunk, ChatMessage, ChatRequest, ChunkKind, ModelConfig, Punct, ReasoningBlock,
    RequestBody, RequestOptions, SettledJson, TokenCount, json_len_guess,
};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value, json};

use super::ranges::Ranges;
use super::{INTERNAL_KEYS, openai_reasoning_model, write_payload};
use crate::sse::{self, Normalized, NotJson};

pub mod plain_reply;

/// Does the provider require an assistant turn's `reasoning_content` back
/// when that turn called tools? DeepSeek does: "if the model performed a
/// tool call, the intermediate assistant's reasoning_content must ...
/// be passed back", or the next request fails with 400
/// (api-docs.deepseek.com/guides/thinking_mode, "Tool Calls"); without
/// a tool call it is ignored, so it is sent only then. Every other
/// chat-completions server gets no reasoning back: OpenAI's request
/// schema has no such field, and the compatible servers that stream it
/// (vLLM, llama.cpp) do not ask for it.
fn replays_reasoning_with_tool_calls(config: &ModelConfig) -> bool {
    config.provider_spec().is_some_and(|s| s.name == "deepseek")
}

/// The text of a message's unsigned thinking blocks (what a compatible
/// server sent as `reasoning_content`), in order.
fn unsigned_thinking(m: &ChatMessage) -> String {
    m.reasoning
        .iter()
        .filter_map(|b| match b {
            ReasoningBlock::Thinking {
                text,
                signature: None,
            } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// How the messages of a request go out.
#[derive(Debug)]
struct Shape {
    /// System messages go out as `developer` (OpenAI's reasoning models).
    developer: bool,
    /// Assistant turns that called tools carry their `reasoning_content`.
    replay: bool,
}

/// `payload` (kwargs and call fields, merged) with `messages` holding its
/// place (`null`) and `stream`, filtered to the endpoint's request model.
fn shape(config: &ModelConfig, stream: bool, payload: &mut Map<String, Value>) -> Shape {
    let developer = config.model_name().is_some_and(openai_reasoning_model)
        || payload
            .get("model")
            .and_then(Value::as_str)
            .is_some_and(openai_reasoning_model);
    let replay = replays_reasoning_with_tool_calls(config);
    payload.insert("messages".into(), Value::Null);
    if stream {
        payload.insert("stream".into(), true.into());
    }
    if config.provider_spec().is_some_and(|s| s.name == "ollama") {
        payload.shift_remove("reasoning_effort");
    }
    match config.endpoint().request_options.fields() {
        Some(fields) => payload.retain(|k, _| fields.contains_key(k)),
        None => payload.retain(|k, _| !INTERNAL_KEYS.contains(&k.as_str())),
    }
    Shape { developer, replay }
}

impl Shape {
    fn message_value(&self, m: &ChatMessage) -> Value {
        let mut v = m.to_value();
        if self.developer && m.role == "system" {
            v["role"] = "developer".into();
        }
        if self.replays(m) {
            if let Value::Object(obj) = &mut v {
                obj.insert("reasoning_content".into(), unsigned_thinking(m).into());
            }
        }
        v
    }

    fn replays(&self, m: &ChatMessage) -> bool {
        self.replay && m.role == "assistant" && m.extra.contains_key("tool_calls")
    }

    /// Whether `m` goes out exactly as its value form (no role renamed,
    /// no reasoning added).
    fn sends_as_is(&self, m: &ChatMessage) -> bool {
        let renamed = self.developer && m.role == "system";
        !(renamed || self.replays(m))
    }
}

/// The messages as [`Shape`] sends them, written straight from the
/// request (the same text as serializing each [`Shape::message_value`]):
/// the settled history's kept JSON is copied in runs
/// ([`ChatRequest::settled_prefix`]), and a later message the shape sends
/// as it is and whose kept JSON the request carries
/// ([`ChatRequest::wire_form`]) is copied on its own.
struct Messages<'a> {
    request: &'a ChatRequest,
    shape: &'a Shape,
    /// The settled JSON and how many first messages it holds, found once
    /// (a walk over the kept messages) for the guess and the writing.
    settled: Option<(&'a SettledJson, usize)>,
}

/// Room for a body's fields besides its messages (the model's name, a few
/// sampling settings, `stream`), beyond which its buffer grows as it is
/// written. Small on purpose: a short body's buffer stays within the
/// allocator's per-thread cache (glibc's ends at 1,032 bytes).
const PAYLOAD_GUESS: usize = 256;

impl<'a> Messages<'a> {
    fn new(request: &'a ChatRequest, shape: &'a Shape) -> Self {
        Self {
            request,
            shape,
            settled: request.settled_prefix(),
        }
    }

    /// About the length of the messages' JSON: the kept JSON's where there
    /// is one, else the text and a little for the keys. A guess for the
    /// body's buffer, never a limit.
    fn length_guess(&self) -> usize {
        let messages = &self.request.messages;
        let (settled, from) = self
            .settled
            .and_then(|(s, n)| Some((s.json(0..n)?.json().len(), n)))
            .unwrap_or((0, 0));
        // The brackets and the commas not already in the settled JSON.
        let punctuation = 2usize.saturating_add(
            messages
                .len()
                .saturating_sub(1)
                .saturating_sub(from.saturating_sub(1)),
        );
        messages
            .iter()
            .enumerate()
            .skip(from)
            .map(|(i, m)| match self.request.wire_form(i) {
                Some(w) => w.len(),
                None => json_len_guess(m),
            })
            .fold(punctuation.saturating_add(settled), usize::saturating_add)
    }

    fn write(&self, w: &mut BodyWriter<'_>) -> serde_json::Result<()> {
        let messages = &self.request.messages;
        let mut array = Elements::begin(w);
        let mut from = 0;
        if let Some((settled, n)) = self.settled {
            // Copied in runs; a message this shape sends otherwise (a
            // renamed system message, a replayed reasoning) between them
            // is written the long way.
            let mut start = 0;
            for &at in settled.marked().iter().take_while(|&&at| at < n) {
                if messages.get(at).is_some_and(|m| !self.shape.sends_as_is(m)) {
                    self.copy(&mut array, w, settled, start..at)?;
                    self.write_each(&mut array, w, at..at + 1)?;
                    start = at + 1;
                }
            }
            self.copy(&mut array, w, settled, start..n)?;
            from = n;
        }
        self.write_each(&mut array, w, from..messages.len())?;
        w.punct(Punct::EndArray);
        Ok(())
    }

    /// Settled messages `range` (all sent as they are), copied.
    fn copy(
        &self,
        array: &mut Elements,
        w: &mut BodyWriter<'_>,
        settled: &SettledJson,
        range: Range<usize>,
    ) -> serde_json::Result<()> {
        match settled.json(range.clone()) {
            Some(run) if run.is_empty() => Ok(()),
            Some(run) => {
                array.next(w);
                w.settled(run);
                Ok(())
            }
            // Not within the settled prefix (it always is): written.
            None => self.write_each(array, w, range),
        }
    }

    /// Messages `range` one by one: a message's own kept JSON where the
    /// request carries one made for it and the shape sends it as it is,
    /// else written the long way.
    fn write_each(
        &self,
        array: &mut Elements,
        w: &mut BodyWriter<'_>,
        range: Range<usize>,
    ) -> serde_json::Result<()> {
        let start = range.start;
        for (i, m) in (start..).zip(self.request.messages.get(range).unwrap_or_default()) {
            array.next(w);
            let kept = self
                .request
                .wire_form(i)
                .filter(|_| self.shape.sends_as_is(m))
                .and_then(|w| w.json_for(m));
            match kept {
                Some(json) => w.value(json)?,
                None => w.value(&Message {
                    m,
                    shape: self.shape,
                })?,
            }
        }
        Ok(())
    }
}

/// The elements of a JSON array being written: a comma before each but
/// the first.
struct Elements {
    first: bool,
}

impl Elements {
    fn begin(w: &mut BodyWriter<'_>) -> Self {
        w.punct(Punct::BeginArray);
        Self { first: true }
    }

    fn next(&mut self, w: &mut BodyWriter<'_>) {
        if !std::mem::take(&mut self.first) {
            w.punct(Punct::Comma);
        }
    }
}

struct Message<'a> {
    m: &'a ChatMessage,
    shape: &'a Shape,
}

impl Serialize for Message<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (m, shape) = (self.m, self.shape);
        if m.extra.contains_key("role") || m.extra.contains_key("content") {
            // The value form overwrites them in place: it is the reference.
            return shape.message_value(m).serialize(s);
        }
        let role = if shape.developer && m.role == "system" {
            "developer"
        } else {
            &m.role
        };
        let mut out = s.serialize_map(Some(2 + m.extra.len()))?;
        out.serialize_entry("role", role)?;
        out.serialize_entry("content", &m.content)?;
        let replays = shape.replays(m);
        let mut replayed = false;
        for (k, v) in &m.extra {
            if replays && k == "reasoning_content" {
                out.serialize_entry(k, &unsigned_thinking(m))?;
                replayed = true;
            } else {
                out.serialize_entry(k, v)?;
            }
        }
        if replays && !replayed {
            out.serialize_entry("reasoning_content", &unsigned_thinking(m))?;
        }
        out.end()
    }
}

/// The chat-completions body: `payload` (kwargs and call fields, merged)
/// with `messages` and `stream`, filtered to the endpoint's request model.
pub fn build_body(
    config: &ModelConfig,
    request: &ChatRequest,
    stream: bool,
    mut payload: Map<String, Value>,
) -> Value {
    let shape = shape(config, stream, &mut payload);
    if let Some(slot) = payload.get_mut("messages") {
        *slot = Value::Array(
            request
                .messages
                .iter()
                .map(|m| shape.message_value(m))
                .collect(),
        );
    }
    Value::Object(payload)
}

/// The ranges of the reference's chat request model, where the endpoint
/// has it (a restored schema of its own, or none, checks nothing).
pub(crate) fn check_ranges(
    config: &ModelConfig,
    payload: &Map<String, Value>,
) -> Result<(), String> {
    match config.endpoint().request_options {
        RequestOptions::OpenAiChat => Ranges::OpenAiChat.check(payload),
        _ => Ok(()),
    }
}

/// All a chat-completions body takes from the configuration: its fields
/// besides the messages (kwargs and the call's fields merged, `stream`,
/// filtered to the endpoint's request model, `messages` holding its
/// place) and how its messages go out. Nothing in it depends on the
/// messages, so a model makes the one for calls without fields of their
/// own once.
#[derive(Debug)]
pub struct ChatPayload {
    map: Map<String, Value>,
    shape: Shape,
    /// Why the request model refuses these fields, if it does.
    refusal: Option<String>,
}

impl ChatPayload {
    /// The payload of `merged` (kwargs and call fields) under `config`.
    pub fn new(config: &ModelConfig, mut merged: Map<String, Value>, stream: bool) -> Self {
        let shape = shape(config, stream, &mut merged);
        let refusal = check_ranges(config, &merged).err();
        Self {
            map: merged,
            shape,
            refusal,
        }
    }

    /// Why the endpoint's request model refuses this payload's fields (a
    /// sampling field out of its range), if it does: such a payload is
    /// never sent.
    pub fn refusal(&self) -> Option<&str> {
        self.refusal.as_deref()
    }

    /// The body of `request`, whose fields are the ones this payload was
    /// made with.
    pub fn write(&self, request: &ChatRequest) -> serde_json::Result<RequestBody> {
        let count = TokenCount::new();
        let messages = Messages::new(request, &self.shape);
        let capacity = messages.length_guess().saturating_add(PAYLOAD_GUESS);
        RequestBody::write_counting_sized(&count, capacity, |w| {
            write_payload(
                w,
                &self.map,
                Some(|w: &mut BodyWriter<'_>| messages.write(w)),
            )
        })
    }
}

/// The reasoning text of a streamed delta or a whole message: DeepSeek,
/// vLLM and llama.cpp name it `reasoning_content`, OpenRouter and newer
/// vLLM `reasoning`. Empty text is no reasoning.
pub(crate) fn reasoning_text(delta_or_message: &Value) -> Option<&str> {
    ["reasoning_content", "reasoning"]
        .iter()
        .find_map(|k| delta_or_message.get(*k).and_then(Value::as_str))
        .filter(|t| !t.is_empty())
}

/// Normalises one server-sent event of a chat-completions stream.
pub fn normalize_event(event_name: &str, data: &str) -> Result<Normalized, NotJson> {
    sse::normalize_with(event_name, data, chunk_of)
}

/// The chunk of one chat-completions event object: a text delta, a
/// reasoning delta ([`ChunkKind::Thinking`], no block index: the deltas
/// build one unsigned thinking block), a tool-call delta, or the final
/// usage-only event. `None` for anything else (kept as `system`).
pub(crate) fn chunk_of(raw: &Value, obj: &Map<String, Value>) -> Option<ChatChunk> {
    let delta = raw.pointer("/choices/0/delta");
    if let Some(text) = delta
        .and_then(|d| d.get("content"))
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
    {
        let mut c = sse::with_raw(ChunkKind::Text, raw);
        c.content = Some(text.to_owned());
        c.is_delta = true;
        return Some(c);
    }
    if let Some(text) = delta.and_then(reasoning_text) {
        let mut c = sse::with_raw(ChunkKind::Thinking, raw);
        c.content = Some(text.to_owned());
        c.is_delta = true;
        return Some(c);
    }
    if let Some(tc) = delta.and_then(|d| d.pointer("/tool_calls/0")) {
        let mut c = sse::with_raw(ChunkKind::ToolUse, raw);
        c.tool_name = sse::str_at(tc, "/function/name").map(str::to_owned);
        c.tool_id = sse::str_at(tc, "/id").map(str::to_owned);
        c.tool_input =
            Some(json!({"arguments": sse::str_at(tc, "/function/arguments").unwrap_or_default()}));
        c.is_delta = true;
        return Some(c);
    }
    let no_choices = obj
        .get("choices")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty);
    let usage = obj.get("usage").filter(|u| !u.is_null())?;
    if !no_choices {
        return None;
    }
    let mut c = sse::with_raw(ChunkKind::Result, raw);
    c.metadata.insert("usage".into(), usage.clone());
    Some(c)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::dialect::{build_body as any_body, serialize_counting, try_build_body_bytes};
    use branch_core::model::WireForm;
    use serde_json::json;

    fn config(provider: &str, model: &str) -> ModelConfig {
        ModelConfig::builder()
            .provider(provider)
            .model(model)
            .build()
            .unwrap()
    }

    /// The body written straight from the messages is, byte for byte and
    /// in its token estimate, the serialized `Value` body.
    #[test]
    fn written_body_is_the_serialized_value_body() {
        let mut tool_reply = ChatMessage::assistant(Value::Null);
        tool_reply.extra.insert(
            "tool_calls".into(),
            json!([{"id": "c1", "type": "function",
                "function": {"name": "f", "arguments": "{}"}}]),
        );
        tool_reply.reasoning = vec![ReasoningBlock::Thinking {
            text: "why é".into(),
            signature: None,
        }];
        let mut replayed_in_place = tool_reply.clone();
        replayed_in_place
            .extra
            .insert("reasoning_content".into(), "old".into());
        replayed_in_place.extra.shift_remove("tool_calls");
        replayed_in_place
            .extra
            .insert("tool_calls".into(), json!([]));
        let mut odd = ChatMessage::user("x");
        odd.extra.insert("role".into(), "tool".into());
        let mut tool = ChatMessage::new("tool", "{\"ok\": 1}");
        tool.extra.insert("tool_call_id".into(), "c1".into());
        let messages = vec![
            ChatMessage::system("be \"brief\"\n"),
            ChatMessage::user(json!([{"type": "text", "text": "hé"},
                {"type": "image_url", "image_url": {"url": "data:x"}}])),
            tool_reply,
            tool,
            replayed_in_place,
            odd,
            ChatMessage::assistant("done 🎉"),
        ];
        let mut request = ChatRequest::new(messages)
            .with_field("temperature", 0.25)
            .with_field("messages", "replaced in place")
            .with_field("stream", true)
            .with_field("n", 1.0);
        // Every message's kept JSON, but one made for an equal copy of
        // the last message (not that message: never used).
        let mut wired = request.clone();
        wired.wire = wired
            .messages
            .iter()
            .map(|m| WireForm::of(m).unwrap().map(Arc::new))
            .collect();
        let copy = Arc::new(ChatMessage::clone(wired.messages.last().unwrap()));
        *wired.wire.last_mut().unwrap() = WireForm::of(&copy).unwrap().map(Arc::new);
        // The settled history's JSON: made before the second message
        // changed (so only the first is still its), and after (the run
        // ends at the message with a `role` key of its own).
        let mut stale = wired.clone();
        stale.settled = Some(Arc::new(settled(&stale.messages)));
        Arc::make_mut(wired.messages.get_mut(1).unwrap()).content = json!("changed");
        Arc::make_mut(stale.messages.get_mut(1).unwrap()).content = json!("changed");
        Arc::make_mut(request.messages.get_mut(1).unwrap()).content = json!("changed");
        let mut fresh = request.clone();
        fresh.settled = Some(Arc::new(settled(&fresh.messages)));
        assert_eq!(stale.settled_prefix().unwrap().1, 1);
        assert_eq!(fresh.settled_prefix().unwrap().1, 5);
        for c in [
            config("openai", "gpt-4.1-mini"),
            config("openai", "o3-mini"),
            config("deepseek", "deepseek-chat"),
            config("ollama", "llama3"),
        ] {
            for stream in [false, true] {
                let value = any_body(&c, &request, stream);
                let expected = serialize_counting(&value).unwrap();
                let written = try_build_body_bytes(&c, &request, stream).unwrap().unwrap();
                assert_eq!(
                    std::str::from_utf8(written.bytes()).unwrap(),
                    String::from_utf8(serde_json::to_vec(&value).unwrap()).unwrap(),
                    "{:?} stream {stream}",
                    c.model_name()
                );
                assert_eq!(written.counted(), expected.counted());
                for (kept, label) in [(&wired, "kept"), (&stale, "stale"), (&fresh, "settled")] {
                    let copied = try_build_body_bytes(&c, kept, stream).unwrap().unwrap();
                    assert_eq!(copied, written, "{:?} with {label} JSON", c.model_name());
                    assert_eq!(copied.counted(), written.counted(), "{label}");
                }
            }
        }
        request.messages.clear();
        let c = config("openai", "gpt-4.1-mini");
        let written = try_build_body_bytes(&c, &request, false).unwrap().unwrap();
        assert_eq!(
            written,
            serialize_counting(&any_body(&c, &request, false)).unwrap()
        );
    }

    /// A history sent from its kept JSON is guessed at its exact length,
    /// so its body is written without growing its buffer; without kept
    /// JSON the guess is the texts and a little.
    #[test]
    fn the_length_guess_of_kept_messages_is_their_length() {
        let mut request = ChatRequest::new((0..40).map(|i| match i % 2 {
            0 => ChatMessage::user(format!("question \"{i}\" é")),
            _ => ChatMessage::assistant("a reply\n".repeat(i)),
        }));
        let texts: usize = request
            .messages
            .iter()
            .map(|m| m.content.as_str().unwrap().len())
            .sum();
        let n = request.messages.len();
        let plain = request.clone();
        let shape = shape(&config("openai", "gpt-4.1-mini"), false, &mut Map::new());
        let bare = Messages::new(&request, &shape);
        assert_eq!(bare.length_guess(), 1 + texts + 33 * n);
        // The first half's JSON settled, the rest the request's own.
        request.settled = Some(Arc::new(settled(&request.messages[..n / 2])));
        request.wire = vec![None; n / 2];
        request.wire.extend(
            request.messages[n / 2..]
                .iter()
                .map(|m| WireForm::of(m).unwrap().map(Arc::new)),
        );
        let kept = Messages::new(&request, &shape);
        let written = messages_text(&kept);
        assert_eq!(kept.length_guess(), written.len());
        // Copied from either, the text is the one written afresh.
        let afresh = Messages::new(&plain, &shape);
        assert_eq!(written, messages_text(&afresh));
    }

    /// Random histories (every kind of message a shape sends otherwise,
    /// and one whose JSON cannot be kept), settled up to a random point,
    /// some messages changed afterwards: for every shape the body copied
    /// from the settled JSON is the body written afresh, byte for byte and
    /// in its token estimate.
    #[test]
    fn random_settled_histories_are_written_as_the_value_body() {
        let configs = [
            config("openai", "gpt-4.1-mini"),
            config("openai", "o3-mini"),
            config("deepseek", "deepseek-chat"),
        ];
        let message = |rng: &mut fastrand::Rng, i: usize| {
            let mut m = match rng.u8(0..7) {
                0 => ChatMessage::system(format!("sys {i} \"é\"")),
                1 => ChatMessage::user(json!([{"type": "text", "text": format!("part {i}")}])),
                2 => {
                    let mut m = ChatMessage::assistant(Value::Null);
                    m.extra
                        .insert("tool_calls".into(), json!([{"id": format!("c{i}")}]));
                    m.reasoning = vec![ReasoningBlock::Thinking {
                        text: format!("why {i}"),
                        signature: None,
                    }];
                    m
                }
                3 => {
                    let mut m = ChatMessage::new("tool", format!("{{\"ok\": {i}}}"));
                    m.extra
                        .insert("tool_call_id".into(), format!("c{i}").into());
                    m
                }
                4 if rng.u8(0..4) == 0 => {
                    let mut m = ChatMessage::user("odd");
                    m.extra.insert("role".into(), "tool".into());
                    m
                }
                5 => ChatMessage::assistant(format!("reply {i} 🎉\n")),
                _ => ChatMessage::user(format!("question {i}")),
            };
            if rng.u8(0..8) == 0 {
                m.extra.insert("name".into(), "n".into());
            }
            Arc::new(m)
        };
        let (mut copied_runs, mut split_runs) = (0, 0);
        for seed in 0..200u64 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let n = rng.usize(0..12);
            let messages: Vec<_> = (0..n).map(|i| message(&mut rng, i)).collect();
            let mut request = ChatRequest::new(messages.clone());
            let settled_len = rng.usize(0..=n);
            request.settled = Some(Arc::new(settled(&messages[..settled_len])));
            for _ in 0..rng.usize(0..3) {
                if n > 0 {
                    let at = rng.usize(0..n);
                    Arc::make_mut(&mut request.messages[at]).content = json!("changed");
                }
            }
            if let Some((json, prefix)) = request.settled_prefix() {
                copied_runs += 1;
                split_runs += usize::from(json.marked().iter().any(|&at| at < prefix));
            }
            let mut plain = request.clone();
            plain.settled = None;
            for c in &configs {
                let stream = rng.bool();
                let copied = try_build_body_bytes(c, &request, stream).unwrap().unwrap();
                let afresh = try_build_body_bytes(c, &plain, stream).unwrap().unwrap();
                let value = serialize_counting(&any_body(c, &plain, stream)).unwrap();
                assert_eq!(copied, afresh, "seed {seed} {:?}", c.model_name());
                assert_eq!(afresh, value, "seed {seed} {:?}", c.model_name());
                assert_eq!(copied.counted(), value.counted(), "seed {seed}");
            }
        }
        // Most histories are copied, many in runs split by a message a
        // shape sends otherwise.
        assert!(
            copied_runs > 100 && split_runs > 50,
            "{copied_runs} {split_runs}"
        );
    }

    /// The settled history's JSON of `messages`, made.
    fn settled(messages: &[Arc<ChatMessage>]) -> SettledJson {
        let mut json = SettledJson::new();
        for m in messages {
            json.push(Arc::clone(m), None);
        }
        json.form();
        json
    }

    fn messages_text(messages: &Messages<'_>) -> Vec<u8> {
        RequestBody::write_counting_sized(&TokenCount::new(), 0, |w| messages.write(w))
            .unwrap()
            .bytes()
            .to_vec()
    }
}
