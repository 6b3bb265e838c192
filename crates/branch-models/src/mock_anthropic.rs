//! What the scripted server of [`crate::mock`] answers on an Anthropic
//! Messages path (`…/messages`): the same scripted replies in the
//! protocol's shapes, so that one script drives a conversation on either
//! provider. The differential harness's Python server answers alike
//! (`tests/refdiff/driver.py`).

use serde_json::{Map, Value, json};

use crate::mock::{MockReply, MockToolCall, ReplyBody, content_of, model_of};

/// Input and output tokens every reply reports.
const USAGE: (u64, u64) = (11, 7);

/// A call's input as Anthropic sends it: an object. Scripted arguments
/// given as a JSON text are sent as what it reads as, anything else as
/// given.
fn input_of(call: &MockToolCall) -> Value {
    match &call.arguments {
        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone())),
        other => other.clone(),
    }
}

fn stop_reason(reply: &MockReply) -> &'static str {
    match reply.body {
        ReplyBody::ToolCalls(..) => "tool_use",
        _ => "end_turn",
    }
}

fn calls(reply: &MockReply) -> &[MockToolCall] {
    match &reply.body {
        ReplyBody::ToolCalls(calls, _) => calls,
        _ => &[],
    }
}

/// The whole Messages reply: a text block when the reply has text, then a
/// `tool_use` block a call.
pub fn message(reply: &MockReply, n: u64, request: &Value) -> Value {
    let mut content: Vec<Value> = content_of(reply)
        .map(|t| json!({"type": "text", "text": t}))
        .into_iter()
        .collect();
    content.extend(
        calls(reply)
            .iter()
            .map(|c| json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input_of(c)})),
    );
    json!({
        "id": format!("msg_mock_{n}"),
        "type": "message",
        "role": "assistant",
        "model": model_of(request),
        "content": content,
        "stop_reason": stop_reason(reply),
        "stop_sequence": null,
        "usage": {"input_tokens": USAGE.0, "output_tokens": USAGE.1},
    })
}

/// An error reply's body.
pub fn error(message: &str) -> Value {
    json!({"type": "error", "error": {"type": "mock", "message": message}})
}

/// The streamed reply: `(event name, data)` pairs from `message_start` to
/// `message_stop`, the text in deltas of `chunk_size` characters and each
/// call's input as one `input_json_delta`.
pub fn events(reply: &MockReply, n: u64, request: &Value) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let mut start = Map::new();
    start.insert("id".into(), format!("msg_mock_{n}").into());
    start.insert("type".into(), "message".into());
    start.insert("role".into(), "assistant".into());
    start.insert("model".into(), model_of(request));
    start.insert("content".into(), json!([]));
    start.insert("stop_reason".into(), Value::Null);
    start.insert("stop_sequence".into(), Value::Null);
    start.insert(
        "usage".into(),
        json!({"input_tokens": USAGE.0, "output_tokens": 1}),
    );
    out.push((
        "message_start",
        json!({"type": "message_start", "message": start}),
    ));
    let mut index = 0;
    if let Some(text) = content_of(reply) {
        out.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "text", "text": ""}}),
        ));
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(reply.chunk_size.max(1)) {
            let piece: String = piece.iter().collect();
            out.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "text_delta", "text": piece}}),
            ));
        }
        out.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    for c in calls(reply) {
        out.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "tool_use", "id": c.id, "name": c.name, "input": {}}}),
        ));
        out.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index,
                   "delta": {"type": "input_json_delta", "partial_json": input_of(c).to_string()}}),
        ));
        out.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    out.push((
        "message_delta",
        json!({"type": "message_delta",
               "delta": {"stop_reason": stop_reason(reply), "stop_sequence": null},
               "usage": {"output_tokens": USAGE.1}}),
    ));
    out.push(("message_stop", json!({"type": "message_stop"})));
    out.into_iter().map(|(e, v)| (e, v.to_string())).collect()
}

#[cfg(test)]
mod tests {
    use branch_core::model::{ChatMessage, ChatModel, ChatRequest, ModelConfig, StreamAccumulator};
    use futures_util::StreamExt;
    use serde_json::json;

    use crate::mock::{MockReply, MockServer, MockToolCall};
    use crate::{ApiKey, IModel};

    /// The scripted server's Anthropic shapes read as the script says, by
    /// the Anthropic dialect, whole and streamed.
    #[tokio::test]
    async fn the_script_reads_back_through_the_anthropic_dialect() {
        let server = MockServer::start().await;
        let call = MockToolCall {
            id: "toolu_1".into(),
            name: "multiply".into(),
            arguments: json!({"a": 6, "b": 7}),
        };
        let mut with_text = MockReply::tool_calls(vec![call.clone()]);
        with_text.body = crate::mock::ReplyBody::ToolCalls(vec![call], Some("Calling.".into()));
        server.script([
            MockReply::text("Paris."),
            MockReply::json(json!({"answer": "4"})),
            with_text.clone(),
            MockReply::text("Streamed reply.").chunk_size(3),
            with_text,
            MockReply::error(400, "bad"),
        ]);
        let c = ModelConfig::builder()
            .provider("anthropic")
            .model("claude-sonnet-4-5")
            .base_url(&server.base_url())
            .allow_local_network(true)
            .build()
            .unwrap();
        let m = IModel::with_api_key(c, ApiKey::new("k")).unwrap();
        let user = || ChatRequest::new(vec![ChatMessage::user("q")]);
        let r = m.chat(user()).await.unwrap();
        assert_eq!(
            (r.text.as_str(), r.served_model.as_deref()),
            ("Paris.", Some("claude-sonnet-4-5"))
        );
        let u = r.usage.unwrap();
        assert_eq!((u.prompt_tokens, u.completion_tokens), (11, 7));
        assert_eq!(m.chat(user()).await.unwrap().text, r#"{"answer": "4"}"#);
        let r = m.chat(user()).await.unwrap();
        assert_eq!(r.text, "Calling.");
        assert_eq!(r.tool_calls[0].name, "multiply");
        assert_eq!(r.tool_calls[0].arguments, r#"{"a":6,"b":7}"#);
        for (text, calls) in [("Streamed reply.", 0), ("Calling.", 1)] {
            let mut s = m.stream(user()).await.unwrap();
            let mut acc = StreamAccumulator::new();
            while let Some(chunk) = s.next().await {
                acc.push(&chunk.unwrap());
            }
            let r = acc.finish();
            assert_eq!((r.text.as_str(), r.tool_calls.len()), (text, calls));
            assert_eq!(
                r.finish_reason.as_deref(),
                Some(if calls == 0 { "end_turn" } else { "tool_use" })
            );
        }
        let e = m.chat(user()).await.unwrap_err();
        assert_eq!(e.status, Some(400));
        assert!(e.to_string().contains("bad"), "{e}");
        assert!(server.requests().iter().all(|r| r.path == "/v1/messages"));
    }
}
