//! A plain chat completion read straight from its text.
//!
//! Most replies are one assistant message with text and a usage object.
//! Such a reply is read here into typed fields, borrowing from the text,
//! and its `Value` tree is never built: `ChatResponse::raw` keeps the text
//! and parses it only if someone reads it. Building and freeing that tree
//! cost more than the rest of reading the reply.
//!
//! Anything this reader does not take exactly as [`ChatResponse::from_raw`]
//! would (another shape, a key that changes where the text comes from, a
//! repeated key, a value of an unexpected type, tool calls) makes it
//! decline, and the reply is read the general way. So it never decides
//! differently; `a_plain_reply_reads_as_the_general_way_reads_it` checks
//! that over every shape the general reader knows.

use std::borrow::Cow;

use branch_core::ParsedJson;
use branch_core::model::{ChatResponse, LazyJson, ReasoningBlock, Usage, UsageReport};
use branch_core::object_only::{Object, optional_object};
use serde::Deserialize;
use serde::de::Deserializer;

/// The fields of a plain reply that its reading uses.
#[derive(Deserialize)]
struct PlainReply<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow)]
    choices: Vec<Object<Choice<'a>>>,
    #[serde(default, deserialize_with = "optional_object")]
    usage: Option<UsageReport>,
    // Keys that change where the general reading takes the text, the
    // reasoning, the tool calls or the finish reason from, or that make
    // the reply an error: present, even as `null`, they decline.
    #[serde(default, deserialize_with = "decline", rename = "content")]
    _content: (),
    #[serde(default, deserialize_with = "decline", rename = "output")]
    _output: (),
    #[serde(default, deserialize_with = "decline", rename = "result")]
    _result: (),
    #[serde(default, deserialize_with = "decline", rename = "error")]
    _error: (),
    #[serde(default, deserialize_with = "decline", rename = "stop_reason")]
    _stop_reason: (),
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow, default, deserialize_with = "optional_object")]
    message: Option<Message<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "decline", rename = "delta")]
    _delta: (),
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning: Option<Cow<'a, str>>,
    /// `null` is no tool calls; any other value declines.
    #[serde(default, rename = "tool_calls")]
    _tool_calls: Option<Never>,
}

/// A value that is never accepted.
enum Never {}

impl<'de> Deserialize<'de> for Never {
    fn deserialize<D: Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(serde::de::Error::custom("not a plain reply"))
    }
}

/// Declines a key whatever its value.
fn decline<'de, D: Deserializer<'de>>(_: D) -> Result<(), D::Error> {
    Err(serde::de::Error::custom("not a plain reply"))
}

/// The reply `text` as the general reading reads it, when it is a plain
/// reply; the text is kept as `raw` (and as `raw_text`). An error
/// declines, giving the text back: a reply of another shape, or text a
/// `Value` would not read (the general reading then says why).
pub fn read(text: String) -> Result<ChatResponse, String> {
    // One pass reads the fields and checks the rest of the text as the
    // general reading's parse would (`ParsedJson::read_with`).
    let (read, kept) = ParsedJson::read_with(text, |d| {
        // Every struct here reads only from an object: a derived struct
        // also reads from an array, by position.
        let Object(plain) = Object::<PlainReply<'_>>::deserialize(d)?;
        Ok(Read::of(&plain))
    })?;
    Ok(ChatResponse {
        text: read.text,
        tool_calls: Vec::new(),
        raw: LazyJson::from_text(kept.clone()),
        usage: read.usage,
        served_model: read.served_model,
        finish_reason: read.finish_reason,
        attempts: 1,
        reasoning: read.reasoning.into_iter().collect(),
        raw_text: Some(kept),
    })
}

/// What a plain reply gives, owned (the text it borrows from is kept
/// afterwards).
struct Read {
    text: String,
    reasoning: Option<ReasoningBlock>,
    finish_reason: Option<String>,
    served_model: Option<String>,
    usage: Option<Usage>,
}

impl Read {
    fn of(plain: &PlainReply<'_>) -> Self {
        let text: String = plain
            .choices
            .iter()
            .filter_map(|Object(c)| c.message.as_ref()?.content.as_deref())
            .collect();
        let first = plain.choices.first().map(|Object(c)| c);
        let message = first.and_then(|c| c.message.as_ref());
        let reasoning = message
            .and_then(|m| {
                [&m.reasoning_content, &m.reasoning]
                    .into_iter()
                    .find_map(|t| t.as_deref().filter(|t| !t.is_empty()))
            })
            .map(|text| ReasoningBlock::Thinking {
                text: text.to_owned(),
                signature: None,
            });
        Self {
            text,
            reasoning,
            finish_reason: first.and_then(|c| c.finish_reason.as_deref().map(str::to_owned)),
            served_model: plain.model.as_deref().map(str::to_owned),
            usage: plain.usage.as_ref().and_then(Usage::from_report),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// What the general reading gives for `text`.
    fn general(text: &str) -> Option<ChatResponse> {
        let (value, kept) = ParsedJson::parse(text.to_owned()).ok()?;
        let mut r = ChatResponse::from_raw(value);
        r.raw_text = Some(kept);
        Some(r)
    }

    /// Reads `text` both ways: equal when the plain reader takes it;
    /// whether it took it.
    fn same(text: &str) -> bool {
        match read(text.to_owned()) {
            Ok(plain) => {
                let general = general(text).unwrap_or_else(|| panic!("{text}: read but not JSON"));
                assert_eq!(plain, general, "{text}");
                assert_eq!(*plain.raw, *general.raw, "{text}");
                assert_eq!(plain.raw_text, general.raw_text, "{text}");
                assert!(plain.raw.text().is_some());
                true
            }
            Err(back) => {
                assert_eq!(back, text);
                false
            }
        }
    }

    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                out.push(v.to_string());
                m.values().for_each(|c| walk(c, out));
            }
            Value::Array(a) => a.iter().for_each(|c| walk(c, out)),
            _ => {}
        }
    }

    #[test]
    fn a_plain_reply_reads_as_the_general_way_reads_it() {
        let plain = [
            r#"{"id":"c1","object":"chat.completion","created":1,"model":"gpt-4.1-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hi \u00e9"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":1}}}"#,
            r#"{"choices":[{"message":{"content":"a"}},{"message":{"content":"b"}},{"message":null},{}]}"#,
            r#"{"choices":[{"message":{"content":null,"reasoning_content":"","reasoning":"why"}}],"model":null,"usage":null}"#,
            r#"{"choices":[{"message":{"content":"x","reasoning_content":"think","tool_calls":null}}],"usage":{"input_tokens":3,"output_tokens":4}}"#,
            r#"{"choices":[],"usage":{"total_tokens":5}}"#,
            r#"{"choices":[{"message":{"content":"x"},"finish_reason":null}],"usage":{}}"#,
            r#"{"choices":[{"message":{"content":"x"}}],"extra":{"error":[1e300, {"deep": [null]}]}}"#,
        ];
        for text in plain {
            assert!(same(text), "{text} was declined");
        }
        // Taken the general way: other shapes, keys that move the text,
        // repeated keys, unexpected types, tool calls, values a `Value`
        // does not read.
        let declined = [
            r#"{"choices":[{"message":{"content":"x","tool_calls":[{"id":"t","function":{"name":"f","arguments":"{}"}}]}}]}"#,
            r#"{"content":"top","choices":[{"message":{"content":"x"}}]}"#,
            r#"{"content":null,"choices":[{"message":{"content":"x"}}]}"#,
            r#"{"choices":[{"message":{"content":"x"}}],"stop_reason":"end_turn"}"#,
            r#"{"choices":[{"delta":{"content":"x"}}]}"#,
            r#"{"choices":{"0":{"message":{"content":"x"}}}}"#,
            r#"{"choices":[{"message":{"content":"a"}}],"choices":[]}"#,
            r#"{"choices":[{"message":{"content":["a"]}}]}"#,
            r#"{"choices":[{"message":{"content":"x"}}],"model":7}"#,
            r#"{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":1.5}}"#,
            r#"{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":12.0}}"#,
            r#"{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":-1}}"#,
            r#"{"choices":[{"message":{"content":"x"}}],"error":null}"#,
            r#"{"choices":[{"message":{"content":"x"}}],"output":[]}"#,
            r#"{"choices":[{"message":{"content":"x"}}],"result":"r"}"#,
            r#"{"choices":[{"message":{"content":"x"}}],"n":1e400}"#,
            r#"{"choices":[{"message":{"content":"x"}}],"$serde_json::private::RawValue":"1"}"#,
            r#"{"choices":[{"message":{"content":"x"}}]} trailing"#,
            r#"["not", "an", "object"]"#,
            r#"["b", []]"#,
            r#"{"choices":[["x"]]}"#,
            r#"{"choices":[{"message":["hi"]}]}"#,
            r#"{"choices":[{"message":{"content":"x"}}],"usage":[1,2,3]}"#,
            r#"{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":2,"prompt_tokens_details":[1]}}"#,
            r#"{"choices":null}"#,
            r#"{}"#,
            // Text `Value` does not read, in keys no field reads, at every
            // level (read in the same pass as the fields).
            r#"{"choices":[{"message":{"content":"x"}}],"id":"\ud800"}"#,
            r#"{"choices":[{"message":{"content":"x"},"logprobs":{"t":1e400}}]}"#,
            r#"{"choices":[{"message":{"content":"x","refusal":"\udc00"}}]}"#,
            r#"{"choices":[{"message":{"content":"x","$serde_json::private::RawValue":"1"}}]}"#,
            r#"{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens_details":{"audio_tokens":-1e400}}}"#,
        ];
        for text in declined {
            assert!(!same(text), "{text} was taken");
        }
        // Declined, a whole float is still a count the general way.
        let float = r#"{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":12.0}}"#;
        let usage = general(float).and_then(|r| r.usage);
        assert_eq!(usage.map(|u| u.prompt_tokens), Some(12));
        let deep = format!(
            r#"{{"choices":[{{"message":{{"content":"x"}}}}],"n":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert!(!same(&deep));
        // Every object of the reference's fixtures, replies among them.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/lionagi-0.36.0");
        let mut objects = Vec::new();
        let mut stack = vec![dir];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "json") {
                    let v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
                    walk(&v, &mut objects);
                }
            }
        }
        let taken = objects.iter().filter(|t| same(t)).count();
        assert!(
            taken >= 10,
            "only {taken} of {} fixture objects read plainly",
            objects.len()
        );
        let _ = json!(null);
    }
}
