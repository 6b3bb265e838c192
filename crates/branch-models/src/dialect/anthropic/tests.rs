//! Anthropic Messages: exact request bodies on a loopback server, and
//! replies and streams replayed from recorded event sequences.
//!
//! Bodies follow the API reference pages: Messages
//! <https://docs.claude.com/en/api/messages>; tool use (`tool_use` /
//! `tool_result` ids, results first in the user turn)
//! <https://platform.claude.com/docs/en/agents-and-tools/tool-use/handle-tool-calls>;
//! vision (`image` sources `base64` / `url`)
//! <https://docs.claude.com/en/docs/build-with-claude/vision>; prompt
//! caching (`cache_control`, at most 4 breakpoints, tools → system →
//! messages) <https://docs.claude.com/en/docs/build-with-claude/prompt-caching>;
//! extended thinking (signed `thinking` and `redacted_thinking` blocks
//! first in the assistant turn with tool use)
//! <https://docs.claude.com/en/docs/build-with-claude/extended-thinking>;
//! streaming (`content_block_*`, `input_json_delta`, `signature_delta`)
//! <https://docs.claude.com/en/docs/build-with-claude/streaming>;
//! structured outputs (`output_config.format`)
//! <https://platform.claude.com/docs/en/build-with-claude/structured-outputs>.

use branch_core::model::{
    ChatMessage, ChatModel, ChatRequest, ChunkKind, ModelConfig, ModelErrorKind, ReasoningBlock,
    StreamAccumulator,
};
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::dialect::{Dialect, build_body, try_build_body};
use crate::mock::{MockReply, MockServer};
use crate::{ApiKey, IModel};

const REPLY: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}"#;

fn config(server: Option<&MockServer>) -> ModelConfig {
    let mut b = ModelConfig::builder()
        .provider("anthropic")
        .model("claude-sonnet-4-5");
    if let Some(s) = server {
        b = b.base_url(&s.base_url()).allow_local_network(true);
    }
    b.build().unwrap()
}

fn model(server: &MockServer) -> IModel {
    IModel::with_api_key(config(Some(server)), ApiKey::new("dummy-key-anth")).unwrap()
}

/// Sends `req` to a loopback server and returns the body it received.
async fn sent_body(req: ChatRequest) -> String {
    let server = MockServer::start().await;
    server.push(MockReply::raw(200, REPLY));
    let r = model(&server).chat(req).await.unwrap();
    assert_eq!(r.text, "ok");
    let sent = server.requests();
    assert_eq!(sent[0].path, "/v1/messages");
    serde_json::to_string(&sent[0].body).unwrap()
}

fn tool_call(id: &str, name: &str, args: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
}

fn assistant_calling(text: &str, calls: Vec<Value>) -> ChatMessage {
    let mut m = ChatMessage::assistant(if text.is_empty() {
        Value::Null
    } else {
        text.into()
    });
    m.extra.insert("tool_calls".into(), Value::Array(calls));
    m
}

fn tool_result(id: &str, content: &str) -> ChatMessage {
    let mut m = ChatMessage::new("tool", content);
    m.extra.insert("tool_call_id".into(), id.into());
    m
}

fn multiply_tool() -> Value {
    json!({"type": "function", "function": {"name": "multiply", "description": "Multiply two numbers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}}})
}

#[tokio::test]
async fn a_text_conversation_is_the_reference_body() {
    let req = ChatRequest::new(vec![
        ChatMessage::system("S"),
        ChatMessage::user("hi"),
        ChatMessage::assistant("hello"),
        ChatMessage::user("again"),
    ])
    .with_field("temperature", 0.5);
    assert_eq!(
        sent_body(req).await,
        r#"{"model":"claude-sonnet-4-5","temperature":0.5,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"again"}],"system":"S","max_tokens":8192}"#
    );
}

/// Two rounds of native tool use: the calls become `tool_use` blocks with
/// their ids and parsed input, the results one user turn of `tool_result`
/// blocks followed by the next instruction's text; the tools carry
/// `input_schema`, `tool_choice` is Anthropic's, `parallel_tool_calls:
/// false` is `disable_parallel_tool_use`; the signed thinking of the
/// calling turn goes first in it, unsigned thinking and Responses items
/// stay out.
#[tokio::test]
async fn a_multi_turn_native_tool_conversation() {
    let mut calling = assistant_calling(
        "Let me compute.",
        vec![
            tool_call("toolu_1", "multiply", r#"{"a": 6, "b": 7}"#),
            tool_call("toolu_2", "multiply", r#"{"a":2,"b":3}"#),
        ],
    );
    calling.reasoning = vec![
        ReasoningBlock::Thinking {
            text: "Two products.".into(),
            signature: Some("sig-1".into()),
        },
        ReasoningBlock::RedactedThinking {
            data: "opaque".into(),
        },
        ReasoningBlock::Thinking {
            text: "unsigned".into(),
            signature: None,
        },
        ReasoningBlock::ResponsesItem {
            id: "rs_1".into(),
            summary: vec![],
            encrypted_content: None,
        },
    ];
    let second = assistant_calling("", vec![tool_call("call-9", "multiply", "{}")]);
    let req = ChatRequest::new(vec![
        ChatMessage::system("Use tools."),
        ChatMessage::user("6*7 and 2*3?"),
        calling,
        tool_result("toolu_1", "42"),
        tool_result("toolu_2", "6"),
        ChatMessage::user("And nothing?"),
        second,
        tool_result("call-9", ""),
        ChatMessage::user("Done?"),
    ])
    .with_field("tools", json!([multiply_tool()]))
    .with_field("tool_choice", "required")
    .with_field("parallel_tool_calls", false);
    assert_eq!(
        sent_body(req).await,
        concat!(
            r#"{"model":"claude-sonnet-4-5","#,
            r#""tools":[{"name":"multiply","description":"Multiply two numbers.","input_schema":{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}}],"#,
            r#""tool_choice":{"type":"any","disable_parallel_tool_use":true},"#,
            r#""messages":[{"role":"user","content":"6*7 and 2*3?"},"#,
            r#"{"role":"assistant","content":[{"type":"thinking","thinking":"Two products.","signature":"sig-1"},{"type":"redacted_thinking","data":"opaque"},{"type":"text","text":"Let me compute."},{"type":"tool_use","id":"toolu_1","name":"multiply","input":{"a":6,"b":7}},{"type":"tool_use","id":"toolu_2","name":"multiply","input":{"a":2,"b":3}}]},"#,
            r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"42"},{"type":"tool_result","tool_use_id":"toolu_2","content":"6"},{"type":"text","text":"And nothing?"}]},"#,
            r#"{"role":"assistant","content":[{"type":"tool_use","id":"call-9","name":"multiply","input":{}}]},"#,
            r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"call-9"},{"type":"text","text":"Done?"}]}],"#,
            r#""system":"Use tools.","max_tokens":8192}"#
        )
    );
}

#[tokio::test]
async fn images_become_image_blocks() {
    let req = ChatRequest::new(vec![ChatMessage::user(json!([
        {"type": "text", "text": "What is in these?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
    ]))]);
    assert_eq!(
        sent_body(req).await,
        concat!(
            r#"{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":["#,
            r#"{"type":"text","text":"What is in these?"},"#,
            r#"{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},"#,
            r#"{"type":"image","source":{"type":"url","url":"https://example.com/cat.jpg"}}]}],"max_tokens":8192}"#
        )
    );
}

/// What has no faithful Messages form is refused before anything is sent,
/// with the reason; nothing is dropped or defaulted.
#[tokio::test]
async fn untranslatable_requests_are_refused_unsent() {
    let image = |url: &str| {
        ChatRequest::new(vec![ChatMessage::user(json!([
            {"type": "image_url", "image_url": {"url": url}}
        ]))])
    };
    let calls = |args: &str| {
        ChatRequest::new(vec![
            ChatMessage::user("go"),
            assistant_calling("", vec![tool_call("t1", "f", args)]),
            tool_result("t1", "x"),
        ])
    };
    let cases = [
        (
            image("ftp://example.com/a.png"),
            "neither a base64 data URL",
        ),
        (image("file:///etc/passwd"), "neither a base64 data URL"),
        (image("data:image/svg+xml;base64,PHN2Zz4="), "image/svg+xml"),
        (image("data:image/png,rawbytes"), "not base64"),
        (calls(r#"{"a": 1"#), "not valid JSON"),
        (calls("[1, 2]"), "not an object"),
        (calls(""), "not valid JSON"),
        (
            ChatRequest::new(vec![ChatMessage::user("a"), ChatMessage::system("late")]),
            "system message after the first",
        ),
        (
            ChatRequest::new(vec![ChatMessage::user("a")])
                .with_field("tools", json!([{"type": "function"}])),
            "tool 0",
        ),
        (
            ChatRequest::new(vec![ChatMessage::user("a")])
                .with_field("prompt_caching", json!({"type": "persistent"})),
            "ephemeral",
        ),
    ];
    let server = MockServer::start().await;
    let m = model(&server);
    for (req, reason) in cases {
        assert_eq!(build_body(m.config(), &req, false), Value::Null);
        let e = m.chat(req).await.unwrap_err();
        assert_eq!(e.kind, ModelErrorKind::BadRequest);
        assert!(e.message.contains(reason), "{reason}: {}", e.message);
    }
    assert_eq!(server.request_count(), 0);
}

/// `prompt_caching` puts breakpoints on the last tool, the system prompt
/// (now a text block) and the last message before the current turn.
#[tokio::test]
async fn caching_breakpoints() {
    let history = vec![
        ChatMessage::system("Long stable instructions."),
        ChatMessage::user("first"),
        ChatMessage::assistant("answer"),
        ChatMessage::user("current"),
    ];
    let req = ChatRequest::new(history.clone())
        .with_field(
            "tools",
            json!([multiply_tool(), {"name": "native", "input_schema": {"type": "object"}}]),
        )
        .with_field("prompt_caching", true);
    assert_eq!(
        sent_body(req).await,
        concat!(
            r#"{"model":"claude-sonnet-4-5","tools":[{"name":"multiply","description":"Multiply two numbers.","input_schema":{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}},"#,
            r#"{"name":"native","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}}],"#,
            r#""messages":[{"role":"user","content":"first"},{"role":"assistant","content":[{"type":"text","text":"answer","cache_control":{"type":"ephemeral"}}]},{"role":"user","content":"current"}],"#,
            r#""system":[{"type":"text","text":"Long stable instructions.","cache_control":{"type":"ephemeral"}}],"max_tokens":8192}"#
        )
    );
    // A TTL through the same option; the first turn has no history mark.
    let req = ChatRequest::new(vec![ChatMessage::system("S"), ChatMessage::user("q")])
        .with_field("prompt_caching", json!({"type": "ephemeral", "ttl": "1h"}));
    assert_eq!(
        sent_body(req).await,
        r#"{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"q"}],"system":[{"type":"text","text":"S","cache_control":{"type":"ephemeral","ttl":"1h"}}],"max_tokens":8192}"#
    );
    // Breakpoints the caller placed count against the API's four.
    let marked =
        |t: &str| json!({"type": "text", "text": t, "cache_control": {"type": "ephemeral"}});
    let req = ChatRequest::new(vec![
        ChatMessage::system("S"),
        ChatMessage::user(json!([marked("a"), marked("b")])),
        ChatMessage::assistant(json!([marked("c")])),
        ChatMessage::user("d"),
    ])
    .with_field("tools", json!([multiply_tool()]))
    .with_field("prompt_caching", true);
    let body = build_body(&config(None), &req, false);
    let text = body.to_string();
    assert_eq!(text.matches("cache_control").count(), 4, "{text}");
    assert!(body["tools"][0].get("cache_control").is_some());
    assert_eq!(body["system"], "S", "no room left for the system mark");
    // The endpoint's stored flag is the same option.
    let mut stored = config(None).to_dict(false, false);
    stored["endpoint"]["config"]["prompt_caching"] = true.into();
    let c = ModelConfig::from_dict(&stored).unwrap();
    assert!(c.endpoint().prompt_caching);
    let body = build_body(&c, &ChatRequest::new(history), false);
    assert_eq!(
        body["system"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert!(body.get("prompt_caching").is_none());
}

#[tokio::test]
async fn thinking_option_and_structured_output() {
    let schema = json!({"type": "object", "properties": {"capital": {"type": "string"}}, "required": ["capital"]});
    let req = ChatRequest::new(vec![ChatMessage::user("France?")])
        .with_field("max_tokens", 16000)
        .with_field(
            "thinking",
            json!({"type": "enabled", "budget_tokens": 4096}),
        )
        .with_field(
            "response_format",
            json!({"type": "json_schema", "json_schema": {"name": "Capital", "schema": schema}}),
        );
    assert_eq!(
        sent_body(req).await,
        concat!(
            r#"{"model":"claude-sonnet-4-5","max_tokens":16000,"thinking":{"type":"enabled","budget_tokens":4096},"#,
            r#""messages":[{"role":"user","content":"France?"}],"#,
            r#""output_config":{"format":{"type":"json_schema","schema":{"type":"object","properties":{"capital":{"type":"string"}},"required":["capital"]}}}}"#
        )
    );
}

#[test]
fn whole_replies_decode_with_cache_counts_and_no_invented_input() {
    let raw = json!({"id": "msg_2", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [
            {"type": "thinking", "thinking": "hm", "signature": "s1"},
            {"type": "redacted_thinking", "data": "xx"},
            {"type": "text", "text": "Calling."},
            {"type": "tool_use", "id": "toolu_a", "name": "f", "input": {"q": "é"}},
            {"type": "tool_use", "id": "toolu_b", "name": "g"}
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20}});
    let r = Dialect::Anthropic.decode_reply(raw);
    assert_eq!(r.text, "Calling.");
    assert_eq!(r.tool_calls.len(), 2);
    assert_eq!(r.tool_calls[0].arguments, r#"{"q":"é"}"#);
    assert_eq!(r.tool_calls[1].arguments, "", "no input is not `{{}}`");
    assert_eq!(
        r.finish(),
        Some(branch_core::model::FinishReason::ToolCalls)
    );
    let u = r.usage.unwrap();
    assert_eq!(
        (
            u.prompt_tokens,
            u.cache_read_input_tokens,
            u.cache_creation_input_tokens,
            u.input_tokens()
        ),
        (10, 100, 20, 130)
    );
    assert_eq!(
        r.reasoning,
        vec![
            ReasoningBlock::Thinking {
                text: "hm".into(),
                signature: Some("s1".into())
            },
            ReasoningBlock::RedactedThinking { data: "xx".into() }
        ]
    );
}

/// A recorded stream: thinking (with its signature split across two
/// deltas), redacted thinking, text, a `tool_use` whose input is split
/// mid-token and mid-word, interleaved thinking, a second `tool_use`, the
/// usage with cache counts.
const INTERLEAVED_SSE: &str = r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_s","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"usage":{"input_tokens":12,"output_tokens":1,"cache_read_input_tokens":300,"cache_creation_input_tokens":40}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Weather in "}}

event: ping
data: {"type":"ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Zürich?"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQB"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"Zz=="}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"ENC"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"Checking "}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"both."}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: content_block_start
data: {"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_w","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"ci"}}

event: content_block_delta
data: {"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"ty\": \"Zü"}}

event: content_block_delta
data: {"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"rich\", \"days\": 1"}}

event: content_block_delta
data: {"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"0}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":3}

event: content_block_start
data: {"type":"content_block_start","index":4,"content_block":{"type":"thinking","thinking":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":4,"delta":{"type":"thinking_delta","thinking":"And Bern."}}

event: content_block_delta
data: {"type":"content_block_delta","index":4,"delta":{"type":"signature_delta","signature":"Sig4"}}

event: content_block_stop
data: {"type":"content_block_stop","index":4}

event: content_block_start
data: {"type":"content_block_start","index":5,"content_block":{"type":"tool_use","id":"toolu_b","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":5,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}

event: content_block_delta
data: {"type":"content_block_delta","index":5,"delta":{"type":"input_json_delta","partial_json":" \"Bern\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":5}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":87}}

event: message_stop
data: {"type":"message_stop"}

"#;

#[tokio::test]
async fn interleaved_thinking_and_tool_use_stream() {
    let server = MockServer::start().await;
    server.push(MockReply::raw(200, INTERLEAVED_SSE).header("content-type", "text/event-stream"));
    let mut stream = model(&server)
        .stream(ChatRequest::new(vec![ChatMessage::user("weather?")]))
        .await
        .unwrap();
    let mut acc = StreamAccumulator::new();
    let mut kinds = Vec::new();
    while let Some(c) = stream.next().await {
        let c = c.unwrap();
        kinds.push(c.kind);
        acc.push(&c);
    }
    assert!(acc.is_done(), "message_stop is the end marker");
    let r = acc.finish();
    assert_eq!(r.text, "Checking both.");
    let calls: Vec<_> = r
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
        .collect();
    assert_eq!(
        calls,
        vec![
            (
                "toolu_w",
                "get_weather",
                r#"{"city": "Zürich", "days": 10}"#
            ),
            ("toolu_b", "get_weather", r#"{"city": "Bern"}"#),
        ]
    );
    assert_eq!(
        r.reasoning,
        vec![
            ReasoningBlock::Thinking {
                text: "Weather in Zürich?".into(),
                signature: Some("EqQBZz==".into())
            },
            ReasoningBlock::RedactedThinking { data: "ENC".into() },
            ReasoningBlock::Thinking {
                text: "And Bern.".into(),
                signature: Some("Sig4".into())
            },
        ]
    );
    let u = r.usage.unwrap();
    assert_eq!(
        (
            u.prompt_tokens,
            u.completion_tokens,
            u.cache_read_input_tokens,
            u.cache_creation_input_tokens
        ),
        (12, 87, 300, 40)
    );
    assert_eq!(r.finish_reason.as_deref(), Some("tool_use"));
    assert_eq!(r.served_model.as_deref(), Some("claude-sonnet-4-5"));
    assert_eq!(kinds.last(), Some(&ChunkKind::Result));
    assert_eq!(server.bodies()[0]["stream"], true);
}

#[tokio::test]
async fn an_error_event_fails_the_stream_and_a_missing_end_marker_too() {
    let overloaded = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":1}}}\n\n\
        event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n\
        event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let cut = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n";
    for (body, kind, text) in [
        (overloaded, ModelErrorKind::StreamFailed, "Overloaded"),
        (cut, ModelErrorKind::MalformedResponse, "end marker"),
    ] {
        let server = MockServer::start().await;
        server.push(MockReply::raw(200, body).header("content-type", "text/event-stream"));
        let mut stream = model(&server)
            .stream(ChatRequest::new(vec![ChatMessage::user("x")]))
            .await
            .unwrap();
        let mut failure = None;
        while let Some(c) = stream.next().await {
            if let Err(e) = c {
                failure = Some(e);
            }
        }
        let e = failure.expect("the stream fails");
        assert_eq!(e.kind, kind);
        assert!(e.message.contains(text), "{}", e.message);
    }
}

#[test]
fn event_table() {
    let n = |name: &str, data: &str| Dialect::Anthropic.normalize_event(name, data).unwrap();
    let think = n(
        "content_block_delta",
        r#"{"type":"content_block_delta","index":2,"delta":{"type":"thinking_delta","thinking":"hm"}}"#,
    );
    assert_eq!(
        (think.chunk.kind, think.chunk.content.as_deref()),
        (ChunkKind::Thinking, Some("hm"))
    );
    assert_eq!(
        think.chunk.metadata[branch_core::model::thinking_chunk::BLOCK_INDEX],
        2
    );
    let stop = n("message_stop", r#"{"type":"message_stop"}"#);
    assert!(stop.terminal && !stop.call_failed);
    let ping = n("ping", r#"{"type":"ping"}"#);
    assert_eq!(ping.chunk.kind, ChunkKind::System);
    let unnamed_error = n("message", r#"{"type":"error","error":{"message":"bad"}}"#);
    assert!(unnamed_error.call_failed && unnamed_error.chunk.is_error);
    assert!(
        Dialect::Anthropic
            .normalize_event("message", "not json")
            .is_err()
    );
    // A start that carries the whole input (some compatible servers).
    let whole = n(
        "content_block_start",
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"f","input":{"a":1}}}"#,
    );
    assert_eq!(
        whole.chunk.tool_input,
        Some(json!({"arguments": "{\"a\":1}"}))
    );
}

#[test]
fn try_build_body_names_the_message_at_fault() {
    let req = ChatRequest::new(vec![
        ChatMessage::user("a"),
        ChatMessage::new("function", "x"),
    ]);
    let e = try_build_body(&config(None), &req, false).unwrap_err();
    assert!(e.message.contains("message 1 (function)"), "{}", e.message);
}

/// The stand-in Messages server refuses what the reference sends for a
/// tool conversation (OpenAI-shaped tools, `tool_calls`, `role: tool`) and
/// takes the native translation of the same request.
#[test]
fn the_stand_in_refuses_the_reference_body_and_takes_ours() {
    let req = ChatRequest::new(vec![
        ChatMessage::user("6*7?"),
        assistant_calling(
            "",
            vec![tool_call("toolu_1", "multiply", r#"{"a":6,"b":7}"#)],
        ),
        tool_result("toolu_1", "42"),
        ChatMessage::user("So?"),
    ])
    .with_field("tools", json!([multiply_tool()]));
    let reference = req.generic_payload(config(None).kwargs(), false);
    let mut reference = reference.as_object().unwrap().clone();
    reference.insert("max_tokens".into(), 8192.into());
    let e = crate::mock_messages::validate(&Value::Object(reference)).unwrap_err();
    assert!(e.contains("tools.0.custom"), "{e}");
    let ours = build_body(&config(None), &req, false);
    assert_eq!(crate::mock_messages::validate(&ours), Ok(()));
    // And a reply whose results do not answer the calls is refused.
    let mut broken = ours.clone();
    broken["messages"][2]["content"][0]["tool_use_id"] = "toolu_x".into();
    assert!(
        crate::mock_messages::validate(&broken)
            .unwrap_err()
            .contains("unexpected `tool_use_id`")
    );
}

/// The stand-in's event stream of a whole message (thinking, text,
/// `tool_use` split every three characters) assembles back into it.
#[tokio::test]
async fn a_stand_in_stream_assembles_back_into_its_message() {
    let server = crate::mock_messages::MockMessagesServer::start().await;
    server.push(json!({
        "content": [
            {"type": "thinking", "thinking": "Multiply first.", "signature": "sig-Z"},
            {"type": "text", "text": "Working on it…"},
            {"type": "tool_use", "id": "toolu_9", "name": "multiply", "input": {"a": 6, "b": 7, "note": "süß"}}
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 9, "output_tokens": 30}
    }));
    let m = IModel::with_api_key(
        ModelConfig::builder()
            .provider("anthropic")
            .model("claude-sonnet-4-5")
            .base_url(&server.base_url())
            .allow_local_network(true)
            .build()
            .unwrap(),
        ApiKey::new("k"),
    )
    .unwrap();
    let req = ChatRequest::new(vec![ChatMessage::user("6*7?")])
        .with_field("tools", json!([multiply_tool()]));
    let mut s = m.stream(req).await.unwrap();
    let mut acc = StreamAccumulator::new();
    while let Some(c) = s.next().await {
        acc.push(&c.unwrap());
    }
    let r = acc.finish();
    assert_eq!(server.rejections(), Vec::<String>::new());
    assert_eq!(r.text, "Working on it…");
    assert_eq!(r.tool_calls[0].id, "toolu_9");
    let args: Value = serde_json::from_str(&r.tool_calls[0].arguments).unwrap();
    assert_eq!(args, json!({"a": 6, "b": 7, "note": "süß"}));
    assert_eq!(
        r.reasoning,
        vec![ReasoningBlock::Thinking {
            text: "Multiply first.".into(),
            signature: Some("sig-Z".into())
        }]
    );
}

/// A multi-turn native tool conversation through the `anthropic` provider
/// against llama.cpp's `/v1/messages` (`LIONAGI_E2E_BASE_URL`): tools with
/// `input_schema`, a `tool_use` / `tool_result` round, an image-free user
/// turn merged after the results, caching breakpoints; whole and streamed.
/// Only the protocol is asserted, never what the tiny model says.
#[tokio::test]
async fn e2e_llama_cpp_messages_multi_turn_tools() {
    let Some((url, name)) = crate::mock::e2e_server() else {
        return;
    };
    let config = ModelConfig::builder()
        .provider("anthropic")
        .model(&name)
        .base_url(&url)
        .allow_local_network(true)
        .kwarg("max_tokens", 16)
        .build()
        .unwrap();
    let m = IModel::with_api_key(config, ApiKey::new("dummy-key-e2e")).unwrap();
    let req = ChatRequest::new(vec![
        ChatMessage::system("You can multiply."),
        ChatMessage::user("What is 6*7?"),
        assistant_calling(
            "Let me compute.",
            vec![tool_call("toolu_1", "multiply", r#"{"a":6,"b":7}"#)],
        ),
        tool_result("toolu_1", "42"),
        ChatMessage::user("So what is it?"),
    ])
    .with_field("tools", json!([multiply_tool()]))
    .with_field("tool_choice", "auto")
    .with_field("prompt_caching", true)
    .with_field("temperature", 0);
    let r = m.chat(req.clone()).await.unwrap();
    assert!(
        r.raw.get("content").is_some_and(Value::is_array),
        "{}",
        r.raw
    );
    assert!(r.finish().is_some());
    assert!(r.usage.as_ref().is_some_and(|u| u.input_tokens() > 0));
    let mut s = m.stream(req).await.unwrap();
    let mut acc = StreamAccumulator::new();
    while let Some(c) = s.next().await {
        acc.push(&c.unwrap());
    }
    assert!(acc.is_done(), "message_stop seen");
    let r = acc.finish();
    assert!(!r.text.is_empty() || !r.tool_calls.is_empty());
    assert!(r.usage.is_some_and(|u| u.completion_tokens > 0));
}
