//! The Responses dialect against a real HTTP server on 127.0.0.1 (exact
//! request bodies, replies, recorded event streams) and, when
//! `LIONAGI_E2E_BASE_URL` is set, against llama.cpp's `/v1/responses`.
//!
//! Shapes are those of the OpenAI API reference, "Create a model
//! response" (https://platform.openai.com/docs/api-reference/responses/create:
//! `instructions`, `input` items `message` with `input_text` /
//! `input_image` (`image_url` string, `detail`) parts, `function_call`
//! (`call_id`, `name`, `arguments`), `function_call_output` (`call_id`,
//! `output`), `reasoning` (`id`, `summary` of `summary_text`,
//! `encrypted_content`); flat function `tools` with `strict`;
//! `tool_choice` `{type: function, name}`; `text.format`;
//! `max_output_tokens`; `reasoning.effort`; `store`; `include:
//! ["reasoning.encrypted_content"]`), the response object (`status`,
//! `incomplete_details.reason`, `error`, `usage` with
//! `input_tokens_details.cached_tokens` and
//! `output_tokens_details.reasoning_tokens`) and "Streaming events"
//! (https://platform.openai.com/docs/api-reference/responses-streaming:
//! `response.created`, `response.output_item.added` / `.done`,
//! `response.function_call_arguments.delta`, `response.output_text.delta`,
//! `response.reasoning_summary_text.delta`, `response.completed`,
//! `response.incomplete`, `response.failed`, `error`); the same shapes are
//! in the Open Responses reference (https://www.openresponses.org/reference).

use branch_core::model::{
    ChatMessage, ChatModel, ChatRequest, ChatResponse, ChunkKind, FinishReason, ModelConfig,
    ModelErrorKind, ReasoningBlock, RetryConfig, StreamAccumulator, ToolCall,
};
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::mock::{MockReply, MockServer};
use crate::{ApiKey, IModel};

use super::super::Dialect;

fn config(base_url: &str, model: &str) -> ModelConfig {
    let mut c = ModelConfig::builder()
        .provider("openai")
        .endpoint("responses")
        .model(model)
        .base_url(base_url)
        .allow_local_network(true)
        .build()
        .unwrap();
    c.set_retry_config(Some(RetryConfig {
        max_retries: 1,
        base_delay: 0.001,
        max_delay: 0.01,
        jitter: false,
        ..RetryConfig::default()
    }));
    c
}

fn model(server: &MockServer, name: &str) -> IModel {
    IModel::with_api_key(config(&server.base_url(), name), ApiKey::new("test")).unwrap()
}

fn json_reply(v: &Value) -> MockReply {
    MockReply::raw(200, &v.to_string())
}

/// Byte-exact, key order included.
fn assert_body(got: &Value, want: &Value) {
    assert_eq!(
        serde_json::to_string(got).unwrap(),
        serde_json::to_string(want).unwrap()
    );
}

fn weather_tool() -> Value {
    json!({"type": "function", "function": {"name": "get_weather", "description": "Current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "strict": null}})
}

fn flat_weather_tool() -> Value {
    json!({"type": "function", "name": "get_weather", "description": "Current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "strict": false})
}

fn tool_calls_extra(calls: &[ToolCall]) -> Value {
    calls
        .iter()
        .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
        .collect()
}

/// The assistant message the operations layer records for `r` and the
/// compile step gives back: text (or null), tool calls, reasoning.
fn assistant_turn(r: &ChatResponse) -> ChatMessage {
    let content = if r.text.is_empty() && !r.tool_calls.is_empty() {
        Value::Null
    } else {
        r.text.clone().into()
    };
    let mut m = ChatMessage::assistant(content);
    if !r.tool_calls.is_empty() {
        m.extra
            .insert("tool_calls".into(), tool_calls_extra(&r.tool_calls));
    }
    m.reasoning.clone_from(&r.reasoning);
    m
}

fn tool_result(id: &str, output: &str) -> ChatMessage {
    let mut m = ChatMessage::new("tool", output);
    m.extra.insert("tool_call_id".into(), id.into());
    m
}

#[test]
fn the_openai_responses_endpoint_selects_this_dialect() {
    assert_eq!(
        Dialect::of(&config("http://127.0.0.1:1/v1", "gpt-5")),
        Dialect::Responses
    );
    let chat = ModelConfig::new("openai", "gpt-5").unwrap();
    assert_eq!(Dialect::of(&chat), Dialect::OpenAiChat);
}

/// Every translation at once, against the reference's field shapes.
#[tokio::test]
async fn request_body_is_the_native_responses_body() {
    let server = MockServer::start().await;
    server.push(json_reply(&json!({
        "id": "resp_1", "object": "response", "status": "completed",
        "model": "gpt-5-mini-2025-08-07",
        "output": [
            {"type": "reasoning", "id": "rs_2", "summary": [{"type": "summary_text", "text": "Answer plainly."}],
             "encrypted_content": "gAAAA2"},
            {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
             "content": [{"type": "output_text", "text": "{\"answer\":\"no\"}", "annotations": []}]}
        ],
        "usage": {"input_tokens": 120, "input_tokens_details": {"cached_tokens": 100},
                  "output_tokens": 30, "output_tokens_details": {"reasoning_tokens": 12}, "total_tokens": 150}
    })));
    let mut c = config(&server.base_url(), "gpt-5-mini");
    c.set_kwarg("max_tokens", 256.into()).unwrap();
    let m = IModel::with_api_key(c, ApiKey::new("test")).unwrap();

    let mut called = ChatMessage::assistant(Value::Null);
    called.extra.insert(
        "tool_calls".into(),
        json!([{"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]),
    );
    called.reasoning = vec![
        ReasoningBlock::ResponsesItem {
            id: "rs_1".into(),
            summary: vec!["Need the weather.".into()],
            encrypted_content: Some("gAAAA1".into()),
        },
        // Unstored and without encrypted content: nothing to send back.
        ReasoningBlock::ResponsesItem {
            id: "rs_gone".into(),
            summary: vec![],
            encrypted_content: None,
        },
        // Another protocol's reasoning never goes to this one.
        ReasoningBlock::Thinking {
            text: "anthropic".into(),
            signature: Some("sig".into()),
        },
    ];
    let req = ChatRequest::new(vec![
        ChatMessage::system("You are terse."),
        ChatMessage::user(json!([
            {"type": "text", "text": "What is in this image, and how warm is Paris?"},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "low"}}
        ])),
        called,
        tool_result("call_1", "{\"temp_c\": 21}"),
        ChatMessage::assistant("A cat; 21 °C."),
        ChatMessage::user("Anything else?"),
    ])
    .with_field("tools", json!([weather_tool()]))
    .with_field(
        "tool_choice",
        json!({"type": "function", "function": {"name": "get_weather"}}),
    )
    .with_field(
        "response_format",
        json!({"type": "json_schema", "json_schema": {"name": "answer", "strict": true,
            "schema": {"type": "object", "properties": {"answer": {"type": "string"}}}}}),
    )
    .with_field("reasoning_effort", "low")
    .with_field("branch", "internal")
    .with_field("stop", json!(["\n"]))
    .with_field("stream_options", json!({"include_usage": true}));

    let r = m.chat(req).await.unwrap();
    let sent = server.requests();
    assert_eq!(sent[0].path, "/v1/responses");
    assert_eq!(sent[0].header("authorization"), Some("Bearer test"));
    assert_body(
        &sent[0].body,
        &json!({
            "model": "gpt-5-mini",
            "tools": [flat_weather_tool()],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "max_output_tokens": 256,
            "reasoning": {"effort": "low"},
            "text": {"format": {"type": "json_schema", "name": "answer", "strict": true,
                "schema": {"type": "object", "properties": {"answer": {"type": "string"}}}}},
            "instructions": "You are terse.",
            "input": [
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "What is in this image, and how warm is Paris?"},
                    {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "low"}
                ]},
                {"type": "reasoning", "id": "rs_1",
                 "summary": [{"type": "summary_text", "text": "Need the weather."}],
                 "encrypted_content": "gAAAA1"},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                 "arguments": "{\"city\":\"Paris\"}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "{\"temp_c\": 21}"},
                {"type": "message", "role": "assistant",
                 "content": [{"type": "output_text", "text": "A cat; 21 °C."}]},
                {"type": "message", "role": "user",
                 "content": [{"type": "input_text", "text": "Anything else?"}]}
            ],
            "store": false,
            "include": ["reasoning.encrypted_content"]
        }),
    );

    assert_eq!(r.text, "{\"answer\":\"no\"}");
    assert_eq!(r.finish(), Some(FinishReason::Stop));
    assert_eq!(r.served_model.as_deref(), Some("gpt-5-mini-2025-08-07"));
    let u = r.usage.unwrap();
    assert_eq!(
        (
            u.prompt_tokens,
            u.cache_read_input_tokens,
            u.completion_tokens,
            u.reasoning_tokens,
            u.total_tokens
        ),
        (20, 100, 30, 12, 150)
    );
    assert_eq!(
        r.reasoning,
        vec![ReasoningBlock::ResponsesItem {
            id: "rs_2".into(),
            summary: vec!["Answer plainly.".into()],
            encrypted_content: Some("gAAAA2".into()),
        }]
    );
}

/// A caller's `store: true` is kept: reasoning items go back by id, no
/// encrypted content is asked for; a non-reasoning model is not asked for
/// it either; `max_completion_tokens` wins over `max_tokens`; json_object
/// and `tool_choice` words pass; a stream says `stream: true` and keeps
/// only the Responses stream options.
#[test]
fn state_and_option_variants() {
    let c = config("http://127.0.0.1:1/v1", "o4-mini");
    let mut a = ChatMessage::assistant("done");
    a.reasoning = vec![ReasoningBlock::ResponsesItem {
        id: "rs_9".into(),
        summary: vec![],
        encrypted_content: None,
    }];
    let req = ChatRequest::new(vec![ChatMessage::user("u"), a, ChatMessage::user("v")])
        .with_field("store", true)
        .with_field("max_tokens", 10)
        .with_field("max_completion_tokens", 20)
        .with_field("response_format", json!({"type": "json_object"}))
        .with_field("text", json!({"verbosity": "low"}))
        .with_field("tool_choice", "required")
        .with_field(
            "stream_options",
            json!({"include_usage": true, "include_obfuscation": false}),
        );
    let body = super::super::build_body(&c, &req, true);
    assert_body(
        &body,
        &json!({
            "model": "o4-mini",
            "store": true,
            "text": {"verbosity": "low", "format": {"type": "json_object"}},
            "tool_choice": "required",
            "stream_options": {"include_obfuscation": false},
            "max_output_tokens": 20,
            "input": [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "u"}]},
                {"type": "reasoning", "id": "rs_9", "summary": []},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "v"}]}
            ],
            "stream": true
        }),
    );
    let plain = config("http://127.0.0.1:1/v1", "gpt-4.1-mini");
    let req = ChatRequest::new(vec![ChatMessage::user("hi")])
        .with_field("include", json!(["message.output_text.logprobs"]))
        .with_field("stream_options", json!({"include_usage": true}));
    let body = super::super::build_body(&plain, &req, false);
    assert_body(
        &body,
        &json!({"model": "gpt-4.1-mini", "include": ["message.output_text.logprobs"],
            "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
            "store": false}),
    );
    // A reasoning request on any model asks for the encrypted content
    // (once), and an unset image detail is `auto`.
    let req = ChatRequest::new(vec![ChatMessage::user(json!([
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}}
    ]))])
    .with_field("reasoning", json!({"effort": "high", "summary": "auto"}))
    .with_field("reasoning_effort", "low")
    .with_field("include", json!(["reasoning.encrypted_content"]));
    let body = super::super::build_body(&plain, &req, false);
    assert_eq!(
        body["reasoning"],
        json!({"effort": "high", "summary": "auto"})
    );
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(
        body["input"][0]["content"][0],
        json!({"type": "input_image", "image_url": "data:image/png;base64,QUJD", "detail": "auto"})
    );
}

fn function_call_reply() -> Value {
    json!({
        "id": "resp_t1", "object": "response", "status": "completed", "model": "gpt-5",
        "output": [
            {"type": "reasoning", "id": "rs_t1", "summary": [], "encrypted_content": "enc-t1"},
            {"type": "function_call", "id": "fc_1", "call_id": "call_w", "name": "get_weather",
             "arguments": "{\"city\":\"Paris\"}", "status": "completed"}
        ],
        "usage": {"input_tokens": 40, "output_tokens": 20, "total_tokens": 60}
    })
}

/// Three turns: a function call (with a reasoning item), the tool result
/// sent back with that reasoning item before the call, the answer, and a
/// follow-up carrying the whole history.
#[tokio::test]
async fn multi_turn_tool_conversation() {
    let server = MockServer::start().await;
    server.push(json_reply(&function_call_reply()));
    server.push(json_reply(&json!({
        "id": "resp_t2", "object": "response", "status": "completed", "model": "gpt-5",
        "output": [{"type": "message", "id": "msg_2", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": "It is 21 °C in Paris."}]}],
        "usage": {"input_tokens": 70, "output_tokens": 9, "total_tokens": 79}
    })));
    server.push(json_reply(&json!({
        "id": "resp_t3", "object": "response", "status": "completed", "model": "gpt-5",
        "output": [{"type": "message", "id": "msg_3", "role": "assistant", "status": "completed",
                    "content": [{"type": "refusal", "refusal": "I can't help with that."}]}]
    })));
    let m = model(&server, "gpt-5");
    let tools = json!([weather_tool()]);
    let mut history = vec![
        ChatMessage::system("S"),
        ChatMessage::user("Weather in Paris?"),
    ];

    let r1 = m
        .chat(ChatRequest::new(history.clone()).with_field("tools", tools.clone()))
        .await
        .unwrap();
    assert_eq!(r1.text, "");
    assert_eq!(
        r1.tool_calls,
        vec![ToolCall {
            id: "call_w".into(),
            name: "get_weather".into(),
            arguments: "{\"city\":\"Paris\"}".into()
        }]
    );
    assert_eq!(r1.finish(), Some(FinishReason::ToolCalls));
    history.push(assistant_turn(&r1));
    history.push(tool_result("call_w", "21"));

    let r2 = m
        .chat(ChatRequest::new(history.clone()).with_field("tools", tools.clone()))
        .await
        .unwrap();
    assert_eq!(r2.text, "It is 21 °C in Paris.");
    assert_eq!(r2.finish(), Some(FinishReason::Stop));
    history.push(assistant_turn(&r2));
    history.push(ChatMessage::user("And tomorrow?"));

    let r3 = m.chat(ChatRequest::new(history)).await.unwrap();
    assert_eq!(r3.text, "I can't help with that.");
    assert_eq!(r3.finish(), Some(FinishReason::Refusal));

    let bodies = server.bodies();
    let user = |t: &str| json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": t}]});
    let turn1 = vec![user("Weather in Paris?")];
    let mut turn2 = turn1.clone();
    turn2.extend([
        json!({"type": "reasoning", "id": "rs_t1", "summary": [], "encrypted_content": "enc-t1"}),
        json!({"type": "function_call", "call_id": "call_w", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}),
        json!({"type": "function_call_output", "call_id": "call_w", "output": "21"}),
    ]);
    let mut turn3 = turn2.clone();
    turn3.extend([
        json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is 21 °C in Paris."}]}),
        user("And tomorrow?"),
    ]);
    let with_tools = |input: Vec<Value>| {
        json!({"model": "gpt-5", "tools": [flat_weather_tool()], "instructions": "S", "input": input,
               "store": false, "include": ["reasoning.encrypted_content"]})
    };
    assert_body(&bodies[0], &with_tools(turn1));
    assert_body(&bodies[1], &with_tools(turn2));
    assert_body(
        &bodies[2],
        &json!({"model": "gpt-5", "instructions": "S", "input": turn3,
                "store": false, "include": ["reasoning.encrypted_content"]}),
    );
}

#[tokio::test]
async fn failed_and_incomplete_replies() {
    let server = MockServer::start().await;
    let failed = |code: &str| {
        json_reply(
            &json!({"id": "resp_f", "object": "response", "status": "failed", "output": [],
            "error": {"code": code, "message": format!("failed: {code}")}}),
        )
    };
    server.push(failed("invalid_prompt"));
    server.push(failed("server_error"));
    server.push(json_reply(&json!({
        "id": "resp_i", "object": "response", "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Par"}]}]
    })));
    let m = model(&server, "gpt-4.1");
    let e = m
        .chat(ChatRequest::new(vec![ChatMessage::user("x")]))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ModelErrorKind::BadRequest);
    assert_eq!(e.status, Some(400));
    assert_eq!(e.message, "failed: invalid_prompt");
    // A server error is the provider's trouble: retried, then answered.
    let r = m
        .chat(ChatRequest::new(vec![ChatMessage::user("x")]))
        .await
        .unwrap();
    assert_eq!(r.attempts, 2);
    assert_eq!(r.text, "Par");
    assert_eq!(r.finish_reason.as_deref(), Some("length"));

    let filtered = Dialect::Responses.decode_reply(json!({"status": "incomplete",
        "incomplete_details": {"reason": "content_filter"}, "output": []}));
    assert_eq!(filtered.finish(), Some(FinishReason::ContentFilter));
    assert_eq!(
        Dialect::Responses.decode_reply(json!({})).finish_reason,
        None
    );
    assert_eq!(
        Dialect::Responses.reply_error_status(
            &json!({"status": "failed",
            "error": {"code": "rate_limit_exceeded", "message": "slow"}}),
            200
        ),
        Some(429)
    );
    assert_eq!(
        Dialect::Responses.reply_error_status(&json!({"error": {"message": "bare"}}), 200),
        Some(200)
    );
    assert_eq!(
        Dialect::Responses.reply_error_status(&function_call_reply(), 200),
        None
    );
}

/// SSE text of `(event, data)` pairs.
fn sse(events: &[Value]) -> String {
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect()
}

/// A recorded reasoning + two function calls stream: summary deltas,
/// the encrypted reasoning item, argument deltas split mid-token (and
/// inside a multi-byte character's word), usage and status at the end.
fn tool_stream() -> Vec<Value> {
    let reasoning_item = json!({"type": "reasoning", "id": "rs_s",
        "summary": [{"type": "summary_text", "text": "Look up the weather."}], "encrypted_content": "gAAAAenc"});
    let call = json!({"type": "function_call", "id": "fc_s", "call_id": "call_s", "name": "get_weather",
        "arguments": "{\"city\":\"Zürich\"}", "status": "completed"});
    let call2 = json!({"type": "function_call", "id": "fc_t", "call_id": "call_t", "name": "get_time",
        "arguments": "{}", "status": "completed"});
    vec![
        json!({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_s", "object": "response",
            "status": "in_progress", "model": "gpt-5-mini-2025-08-07", "output": [], "usage": null}}),
        json!({"type": "response.in_progress", "sequence_number": 1, "response": {"id": "resp_s", "object": "response",
            "status": "in_progress", "model": "gpt-5-mini-2025-08-07", "output": [], "usage": null}}),
        json!({"type": "response.output_item.added", "sequence_number": 2, "output_index": 0,
            "item": {"type": "reasoning", "id": "rs_s", "summary": []}}),
        json!({"type": "response.reasoning_summary_part.added", "sequence_number": 3, "item_id": "rs_s",
            "output_index": 0, "summary_index": 0, "part": {"type": "summary_text", "text": ""}}),
        json!({"type": "response.reasoning_summary_text.delta", "sequence_number": 4, "item_id": "rs_s",
            "output_index": 0, "summary_index": 0, "delta": "Look up "}),
        json!({"type": "response.reasoning_summary_text.delta", "sequence_number": 5, "item_id": "rs_s",
            "output_index": 0, "summary_index": 0, "delta": "the weather."}),
        json!({"type": "response.reasoning_summary_text.done", "sequence_number": 6, "item_id": "rs_s",
            "output_index": 0, "summary_index": 0, "text": "Look up the weather."}),
        json!({"type": "response.output_item.done", "sequence_number": 7, "output_index": 0, "item": reasoning_item}),
        json!({"type": "response.output_item.added", "sequence_number": 8, "output_index": 1,
            "item": {"type": "function_call", "id": "fc_s", "call_id": "call_s", "name": "get_weather",
                     "arguments": "", "status": "in_progress"}}),
        json!({"type": "response.function_call_arguments.delta", "sequence_number": 9, "item_id": "fc_s",
            "output_index": 1, "delta": "{\"ci"}),
        json!({"type": "response.function_call_arguments.delta", "sequence_number": 10, "item_id": "fc_s",
            "output_index": 1, "delta": "ty\":\"Zü"}),
        json!({"type": "response.function_call_arguments.delta", "sequence_number": 11, "item_id": "fc_s",
            "output_index": 1, "delta": "rich\"}"}),
        json!({"type": "response.function_call_arguments.done", "sequence_number": 12, "item_id": "fc_s",
            "output_index": 1, "arguments": "{\"city\":\"Zürich\"}"}),
        json!({"type": "response.output_item.done", "sequence_number": 13, "output_index": 1, "item": call}),
        json!({"type": "response.output_item.added", "sequence_number": 14, "output_index": 2,
            "item": {"type": "function_call", "id": "fc_t", "call_id": "call_t", "name": "get_time",
                     "arguments": "", "status": "in_progress"}}),
        json!({"type": "response.function_call_arguments.delta", "sequence_number": 15, "item_id": "fc_t",
            "output_index": 2, "delta": "{}"}),
        json!({"type": "response.output_item.done", "sequence_number": 16, "output_index": 2, "item": call2}),
        json!({"type": "response.completed", "sequence_number": 17, "response": {"id": "resp_s", "object": "response",
            "status": "completed", "model": "gpt-5-mini-2025-08-07", "output": [reasoning_item, call, call2],
            "usage": {"input_tokens": 50, "input_tokens_details": {"cached_tokens": 32}, "output_tokens": 40,
                      "output_tokens_details": {"reasoning_tokens": 16}, "total_tokens": 90}}}),
    ]
}

async fn collect(
    m: &IModel,
    req: ChatRequest,
) -> (
    Vec<branch_core::model::ChatChunk>,
    Option<crate::ModelError>,
) {
    let mut s = m.stream(req).await.unwrap();
    let mut chunks = Vec::new();
    let mut err = None;
    while let Some(c) = s.next().await {
        match c {
            Ok(c) => chunks.push(c),
            Err(e) => err = Some(e),
        }
    }
    (chunks, err)
}

#[tokio::test]
async fn streamed_reasoning_and_tool_calls_assemble() {
    let server = MockServer::start().await;
    server.push(MockReply::raw(200, &sse(&tool_stream())));
    let m = model(&server, "gpt-5-mini");
    let (chunks, err) = collect(&m, ChatRequest::new(vec![ChatMessage::user("go")])).await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(server.bodies()[0]["stream"], true);
    let thinking: Vec<&str> = chunks
        .iter()
        .filter(|c| c.kind == ChunkKind::Thinking)
        .filter_map(|c| c.content.as_deref())
        .collect();
    assert_eq!(thinking, ["Look up ", "the weather."]);
    let mut acc = StreamAccumulator::new();
    chunks.iter().for_each(|c| acc.push(c));
    assert!(acc.is_done());
    let r = acc.finish();
    assert_eq!(
        r.reasoning,
        vec![ReasoningBlock::ResponsesItem {
            id: "rs_s".into(),
            summary: vec!["Look up the weather.".into()],
            encrypted_content: Some("gAAAAenc".into()),
        }],
        "the whole item replaces the streamed summary, never doubles it"
    );
    assert_eq!(
        r.tool_calls,
        vec![
            ToolCall {
                id: "call_s".into(),
                name: "get_weather".into(),
                arguments: "{\"city\":\"Zürich\"}".into()
            },
            ToolCall {
                id: "call_t".into(),
                name: "get_time".into(),
                arguments: "{}".into()
            },
        ]
    );
    assert_eq!(r.finish(), Some(FinishReason::ToolCalls));
    assert_eq!(r.served_model.as_deref(), Some("gpt-5-mini-2025-08-07"));
    let u = r.usage.clone().unwrap();
    assert_eq!(
        (
            u.prompt_tokens,
            u.cache_read_input_tokens,
            u.completion_tokens,
            u.reasoning_tokens
        ),
        (18, 32, 40, 16)
    );

    // The streamed reasoning goes back on the next turn.
    server.push(json_reply(&json!({"status": "completed", "output": [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}]})));
    let next = ChatRequest::new(vec![
        ChatMessage::user("go"),
        assistant_turn(&r),
        tool_result("call_s", "3 °C"),
        tool_result("call_t", "noon"),
    ]);
    m.chat(next).await.unwrap();
    let input = &server.bodies()[1]["input"];
    assert_eq!(
        input[1],
        json!({"type": "reasoning", "id": "rs_s",
               "summary": [{"type": "summary_text", "text": "Look up the weather."}],
               "encrypted_content": "gAAAAenc"})
    );
    assert_eq!(input[2]["call_id"], "call_s");
    assert_eq!(input[3]["call_id"], "call_t");
    assert_eq!(input[4]["type"], "function_call_output");
    assert_eq!(input[5]["output"], "noon");
}

/// The three ways a Responses stream ends without `response.completed`:
/// `response.incomplete` (a reply cut at the token limit), and
/// `response.failed` and `error` (a failed call, with the provider's
/// message); refusal deltas are text.
#[tokio::test]
async fn streamed_text_incomplete_failed_and_error_events() {
    let server = MockServer::start().await;
    let text = |d: &str, i: u64| {
        json!({"type": "response.output_text.delta", "item_id": "msg_1",
        "output_index": 0, "content_index": 0, "delta": d, "sequence_number": i})
    };
    server.push(MockReply::raw(200, &sse(&[
        text("Par", 1),
        text("is", 2),
        json!({"type": "response.refusal.delta", "delta": "!", "sequence_number": 3}),
        json!({"type": "response.incomplete", "response": {"status": "incomplete", "model": "gpt-4.1",
            "incomplete_details": {"reason": "max_output_tokens"}, "output": [],
            "usage": {"input_tokens": 5, "output_tokens": 3, "total_tokens": 8}}}),
    ])));
    server.push(MockReply::raw(
        200,
        &sse(&[
            text("x", 1),
            json!({"type": "response.failed", "response": {"status": "failed",
            "error": {"code": "server_error", "message": "The model failed."}}}),
        ]),
    ));
    server.push(MockReply::raw(200, &sse(&[
        text("y", 1),
        json!({"type": "error", "code": "ERR_SOMETHING", "message": "Something went wrong", "param": null}),
    ])));
    let m = model(&server, "gpt-4.1");
    let req = || ChatRequest::new(vec![ChatMessage::user("u")]);

    let (chunks, err) = collect(&m, req()).await;
    assert!(err.is_none(), "{err:?}");
    let mut acc = StreamAccumulator::new();
    chunks.iter().for_each(|c| acc.push(c));
    let r = acc.finish();
    assert_eq!(r.text, "Paris!");
    assert_eq!(r.finish(), Some(FinishReason::Length));
    assert_eq!(r.usage.map(|u| u.completion_tokens), Some(3));

    let (_, err) = collect(&m, req()).await;
    let e = err.unwrap();
    assert_eq!(e.kind, ModelErrorKind::StreamFailed);
    assert_eq!(e.message, "The model failed.");

    let (_, err) = collect(&m, req()).await;
    let e = err.unwrap();
    assert_eq!(e.kind, ModelErrorKind::StreamFailed);
    assert_eq!(e.message, "Something went wrong");

    assert!(
        Dialect::Responses
            .normalize_event("message", "not json")
            .is_err()
    );
    let odd = Dialect::Responses
        .normalize_event(
            "message",
            r#"{"type":"response.output_item.done","item":{"type":"reasoning"}}"#,
        )
        .unwrap();
    assert_eq!(
        odd.chunk.kind,
        ChunkKind::System,
        "an item without id is not a block"
    );
}

fn e2e_model(url: &str, name: &str) -> IModel {
    let config = ModelConfig::builder()
        .provider("openai")
        .endpoint("responses")
        .model(name)
        .base_url(url)
        .allow_local_network(true)
        .kwarg("max_output_tokens", 8)
        .kwarg("temperature", 0)
        .build()
        .unwrap();
    IModel::with_api_key(config, ApiKey::new("dummy-key-e2e")).unwrap()
}

/// llama.cpp's `/v1/responses`: a conversation with a tool call and its
/// result in the history, answered whole and streamed (shapes only; the
/// model is tiny).
#[tokio::test]
async fn e2e_llama_cpp_responses_multi_turn() {
    let Some((url, name)) = crate::mock::e2e_server() else {
        return;
    };
    let m = e2e_model(&url, &name);
    let tools = json!([weather_tool()]);
    let mut history = vec![
        ChatMessage::system("You answer briefly."),
        ChatMessage::user("Say hello."),
    ];
    let r1 = m
        .chat(ChatRequest::new(history.clone()).with_field("tools", tools.clone()))
        .await
        .unwrap();
    assert!(!r1.text.is_empty() || !r1.tool_calls.is_empty());
    assert!(r1.raw.get("output").is_some(), "a native response object");
    assert!(r1.usage.as_ref().is_some_and(|u| u.input_tokens() > 0));
    assert!(r1.finish().is_some());
    history.push(assistant_turn(&r1));
    // A tool exchange in the history, as a native-tools turn leaves it.
    let mut called = ChatMessage::assistant(Value::Null);
    called.extra.insert(
        "tool_calls".into(),
        json!([{"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]),
    );
    history.push(ChatMessage::user("Weather in Paris?"));
    history.push(called);
    history.push(tool_result("call_1", "21 C"));
    let r2 = m
        .chat(ChatRequest::new(history.clone()).with_field("tools", tools.clone()))
        .await
        .unwrap();
    assert!(!r2.text.is_empty() || !r2.tool_calls.is_empty());
    history.push(assistant_turn(&r2));
    history.push(ChatMessage::user("Thanks."));

    let (chunks, err) = collect(&m, ChatRequest::new(history)).await;
    assert!(err.is_none(), "{err:?}");
    assert!(chunks.iter().any(|c| c.kind == ChunkKind::Text));
    let mut acc = StreamAccumulator::new();
    chunks.iter().for_each(|c| acc.push(c));
    assert!(acc.is_done(), "response.completed seen");
    let r = acc.finish();
    assert!(!r.text.is_empty());
    assert!(r.finish().is_some());
    assert!(r.served_model.is_some());
    assert!(r.usage.is_some_and(|u| u.completion_tokens > 0));
}
