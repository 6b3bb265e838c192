//! Chat completions from compatible servers, against the real scripted
//! server on 127.0.0.1: streamed reasoning (`reasoning_content` /
//! `reasoning` deltas), usage and finish reasons, DeepSeek's reasoning
//! replay, and the registered compatible providers (Mistral, xAI, Cohere,
//! Azure OpenAI): URL, auth header and body.

use branch_core::model::{
    ChatMessage, ChatModel, ChatRequest, ChunkKind, FinishReason, ModelConfig, ReasoningBlock,
    StreamAccumulator,
};
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::mock::{MockReply, MockServer};
use crate::{ApiKey, IModel};

fn sse(events: &[Value]) -> String {
    let mut body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    body.push_str("data: [DONE]\n\n");
    body
}

fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({"id": "c1", "object": "chat.completion.chunk", "created": 1,
        "model": "deepseek-reasoner",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
}

fn model_on(server: &MockServer, provider: &str, model: &str) -> IModel {
    let c = ModelConfig::builder()
        .provider(provider)
        .model(model)
        .base_url(&server.base_url())
        .allow_local_network(true)
        .build()
        .unwrap();
    IModel::with_api_key(c, ApiKey::new("k-123")).unwrap()
}

/// A DeepSeek thinking-mode stream (the chunk shape of
/// api-docs.deepseek.com/guides/thinking_mode, "API Example": reasoning in
/// `delta.reasoning_content`, then the answer or tool calls in the
/// usual fields), cut into 7-byte pieces so events and UTF-8 characters
/// split on the wire; the tool call's arguments split mid-token.
#[tokio::test]
async fn streamed_reasoning_content_builds_one_unsigned_thinking_block() {
    let server = MockServer::start().await;
    let body = sse(&[
        chunk(
            json!({"role": "assistant", "content": null, "reasoning_content": ""}),
            None,
        ),
        chunk(
            json!({"content": null, "reasoning_content": "Six × seven"}),
            None,
        ),
        chunk(
            json!({"content": null, "reasoning_content": " — use the tool."}),
            None,
        ),
        chunk(
            json!({"content": null, "reasoning_content": null, "tool_calls": [{"index": 0,
                "id": "call_0", "type": "function",
                "function": {"name": "multiply", "arguments": "{\"a"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "\": 6, \"b\": 7}"}}]}),
            None,
        ),
        chunk(json!({"content": ""}), Some("tool_calls")),
        json!({"id": "c1", "object": "chat.completion.chunk", "choices": [],
            "usage": {"prompt_tokens": 30, "completion_tokens": 20, "total_tokens": 50,
                "prompt_tokens_details": {"cached_tokens": 16},
                "completion_tokens_details": {"reasoning_tokens": 12},
                "prompt_cache_hit_tokens": 16, "prompt_cache_miss_tokens": 14}}),
    ]);
    server.push(
        MockReply::raw(200, &body)
            .header("content-type", "text/event-stream")
            .chunk_size(7),
    );
    let model = model_on(&server, "deepseek", "deepseek-reasoner");
    let mut stream = model
        .stream(ChatRequest::new(vec![ChatMessage::user("6*7?")]))
        .await
        .unwrap();
    let mut acc = StreamAccumulator::new();
    let mut kinds = Vec::new();
    let mut thinking = String::new();
    while let Some(c) = stream.next().await {
        let c = c.unwrap();
        if c.kind == ChunkKind::Thinking {
            thinking.push_str(c.content.as_deref().unwrap());
            assert!(c.is_delta);
        }
        kinds.push(c.kind);
        acc.push(&c);
    }
    assert_eq!(thinking, "Six × seven — use the tool.");
    let first_tool = kinds.iter().position(|k| *k == ChunkKind::ToolUse).unwrap();
    assert_eq!(
        kinds[..first_tool]
            .iter()
            .filter(|k| **k == ChunkKind::Thinking)
            .count(),
        2
    );
    let resp = acc.finish();
    assert_eq!(
        resp.reasoning,
        vec![ReasoningBlock::Thinking {
            text: "Six × seven — use the tool.".into(),
            signature: None
        }]
    );
    assert_eq!(resp.tool_calls.len(), 1);
    assert_eq!(resp.tool_calls[0].id, "call_0");
    assert_eq!(resp.tool_calls[0].arguments, r#"{"a": 6, "b": 7}"#);
    assert_eq!(resp.text, "");
    assert_eq!(resp.finish(), Some(FinishReason::ToolCalls));
    let usage = resp.usage.unwrap();
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.cache_read_input_tokens,
            usage.input_tokens(),
            usage.completion_tokens,
            usage.reasoning_tokens
        ),
        (14, 16, 30, 20, 12)
    );
}

/// vLLM and OpenRouter name the delta `reasoning` (vLLM's reasoning
/// outputs; openrouter.ai/docs "Reasoning Tokens"): the same block,
/// then the answer text.
#[tokio::test]
async fn streamed_reasoning_field_then_text() {
    let server = MockServer::start().await;
    let body = sse(&[
        chunk(json!({"role": "assistant", "content": ""}), None),
        chunk(json!({"reasoning": "think"}), None),
        chunk(json!({"reasoning": "ing"}), None),
        chunk(json!({"content": "Answer"}), None),
        chunk(json!({"content": "."}), Some("length")),
    ]);
    server.push(MockReply::raw(200, &body).header("content-type", "text/event-stream"));
    let model = model_on(&server, "my-vllm", "qwen3");
    let mut stream = model
        .stream(ChatRequest::new(vec![ChatMessage::user("q")]))
        .await
        .unwrap();
    let mut acc = StreamAccumulator::new();
    while let Some(c) = stream.next().await {
        acc.push(&c.unwrap());
    }
    let resp = acc.finish();
    assert_eq!(resp.text, "Answer.");
    assert_eq!(
        resp.reasoning,
        vec![ReasoningBlock::Thinking {
            text: "thinking".into(),
            signature: None
        }]
    );
    assert_eq!(resp.finish(), Some(FinishReason::Length));
}

/// A whole reply carrying `message.reasoning_content` (DeepSeek) or
/// `message.reasoning` (OpenRouter): kept as the reply's reasoning.
#[tokio::test]
async fn whole_reply_reasoning_in_either_field() {
    let server = MockServer::start().await;
    for field in ["reasoning_content", "reasoning"] {
        server.push(MockReply::raw(
            200,
            &json!({"id": "r", "object": "chat.completion", "model": "m",
                "choices": [{"index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "42", field: "hm"}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}})
            .to_string(),
        ));
        let model = model_on(&server, "deepseek", "deepseek-reasoner");
        let r = model
            .chat(ChatRequest::new(vec![ChatMessage::user("q")]))
            .await
            .unwrap();
        assert_eq!(r.text, "42", "{field}");
        assert_eq!(
            r.reasoning,
            vec![ReasoningBlock::Thinking {
                text: "hm".into(),
                signature: None
            }],
            "{field}"
        );
        assert_eq!(r.finish(), Some(FinishReason::Stop));
    }
}

fn tool_turn_history() -> ChatRequest {
    let mut assistant = ChatMessage::new("assistant", "");
    assistant.extra.insert(
        "tool_calls".into(),
        json!([{"id": "call_0", "type": "function",
            "function": {"name": "multiply", "arguments": "{\"a\":6,\"b\":7}"}}]),
    );
    assistant.reasoning = vec![ReasoningBlock::Thinking {
        text: "use the tool".into(),
        signature: None,
    }];
    let mut answered = ChatMessage::new("assistant", "Hello.");
    answered.reasoning = vec![ReasoningBlock::Thinking {
        text: "greet".into(),
        signature: None,
    }];
    let mut tool = ChatMessage::new("tool", "42");
    tool.extra.insert("tool_call_id".into(), "call_0".into());
    ChatRequest::new(vec![
        ChatMessage::user("hi"),
        answered,
        ChatMessage::user("6*7?"),
        assistant,
        tool,
    ])
}

/// DeepSeek: "if the model performed a tool call, the intermediate
/// assistant's reasoning_content must ... be passed back to the API"
/// (api-docs.deepseek.com/guides/thinking_mode, "Tool Calls"); a turn
/// without tool calls keeps it out (it would be ignored). Any other
/// chat-completions server never gets reasoning back.
#[tokio::test]
async fn reasoning_goes_back_only_to_deepseek_and_only_with_tool_calls() {
    let server = MockServer::start().await;
    server.push(MockReply::text("ok"));
    server.push(MockReply::text("ok"));
    let deepseek = model_on(&server, "deepseek", "deepseek-reasoner");
    deepseek.chat(tool_turn_history()).await.unwrap();
    let openai = model_on(&server, "openai", "gpt-4.1-mini");
    openai.chat(tool_turn_history()).await.unwrap();
    let bodies = server.bodies();
    assert_eq!(
        serde_json::to_string(&bodies[0]["messages"]).unwrap(),
        concat!(
            r#"[{"role":"user","content":"hi"},{"role":"assistant","content":"Hello."},"#,
            r#"{"role":"user","content":"6*7?"},{"role":"assistant","content":"","tool_calls":"#,
            r#"[{"id":"call_0","type":"function","function":{"name":"multiply","arguments":"{\"a\":6,\"b\":7}"}}],"#,
            r#""reasoning_content":"use the tool"},{"role":"tool","content":"42","tool_call_id":"call_0"}]"#
        )
    );
    assert!(
        !serde_json::to_string(&bodies[1])
            .unwrap()
            .contains("reasoning"),
        "{}",
        bodies[1]
    );
}

/// The registered compatible providers: each sends to its base URL's
/// `chat/completions` with its key as a Bearer token, the body in
/// chat-completions shape (Mistral: docs.mistral.ai/api "Chat
/// Completion"; xAI: docs.x.ai/docs/api-reference "Chat completions";
/// Cohere: docs.cohere.com/docs/compatibility-api).
#[tokio::test]
async fn mistral_xai_and_cohere_bodies_and_auth() {
    let server = MockServer::start().await;
    for (provider, model) in [
        ("mistral", "mistral-large-latest"),
        ("xai", "grok-4"),
        ("cohere", "command-a-03-2025"),
    ] {
        server.push(MockReply::text("ok"));
        let m = model_on(&server, provider, model);
        let req = ChatRequest::new(vec![ChatMessage::system("S"), ChatMessage::user("hi")])
            .with_field("temperature", 0.2)
            .with_field("branch", "internal");
        assert_eq!(m.chat(req).await.unwrap().text, "ok", "{provider}");
        let sent = server.requests().pop().unwrap();
        assert_eq!(sent.path, "/v1/chat/completions", "{provider}");
        assert_eq!(sent.header("authorization"), Some("Bearer k-123"));
        assert_eq!(
            serde_json::to_string(&sent.body).unwrap(),
            format!(
                r#"{{"model":"{model}","temperature":0.2,"messages":[{{"role":"system","content":"S"}},{{"role":"user","content":"hi"}}]}}"#
            ),
            "{provider}"
        );
    }
}

/// Azure OpenAI: the key in an `api-key` header, never `Authorization`
/// (learn.microsoft.com/azure/ai-foundry/openai/reference, "Authentication");
/// the v1 URL `{base}/chat/completions` with the deployment as `model`
/// (learn.microsoft.com/azure/ai-foundry/openai/api-version-lifecycle), or
/// the older deployment URL with its `api-version` query kept last.
#[tokio::test]
async fn azure_sends_api_key_header_to_v1_and_deployment_urls() {
    let server = MockServer::start().await;
    server.push(MockReply::text("v1"));
    let m = model_on(&server, "azure", "my-gpt-4o-deployment");
    let r = m
        .chat(ChatRequest::new(vec![ChatMessage::user("hi")]))
        .await
        .unwrap();
    assert_eq!(r.text, "v1");
    let sent = server.requests().pop().unwrap();
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.header("api-key"), Some("k-123"));
    assert_eq!(sent.header("authorization"), None);
    assert_eq!(
        serde_json::to_string(&sent.body).unwrap(),
        r#"{"model":"my-gpt-4o-deployment","messages":[{"role":"user","content":"hi"}]}"#
    );

    server.push(MockReply::text("legacy"));
    let base = format!(
        "http://{}/openai/deployments/dep1?api-version=2024-10-21",
        server.addr()
    );
    let c = ModelConfig::builder()
        .provider("azure_openai")
        .model("dep1")
        .base_url(&base)
        .allow_local_network(true)
        .build()
        .unwrap();
    let m = IModel::with_api_key(c, ApiKey::new("k-456")).unwrap();
    m.chat(ChatRequest::new(vec![ChatMessage::user("hi")]))
        .await
        .unwrap();
    let sent = server.requests().pop().unwrap();
    assert_eq!(
        sent.path,
        "/openai/deployments/dep1/chat/completions?api-version=2024-10-21"
    );
    assert_eq!(sent.header("api-key"), Some("k-456"));
    assert!(!format!("{m:?}").contains("k-456"));
}

/// The environment key goes only to a registered URL: a compatible
/// provider pointed elsewhere, or Azure at a host that is not an Azure
/// resource, never reads it (see `ModelConfig::base_url_is_registered`).
#[test]
fn env_keys_stay_with_registered_urls() {
    for (provider, var, url) in [
        ("mistral", "MISTRAL_API_KEY", "https://elsewhere.example/v1"),
        ("xai", "XAI_API_KEY", "https://elsewhere.example/v1"),
        ("cohere", "COHERE_API_KEY", "https://elsewhere.example/v1"),
        (
            "azure",
            "AZURE_OPENAI_API_KEY",
            "https://contoso.example/openai/v1",
        ),
    ] {
        if std::env::var_os(var).is_some() {
            println!("{var} is set here; the unset case is checked where it is not");
            continue;
        }
        let c = ModelConfig::builder()
            .provider(provider)
            .model("m")
            .base_url(url)
            .build()
            .unwrap();
        assert!(!c.base_url_is_registered(), "{provider}");
        assert!(!IModel::new(c).unwrap().has_api_key(), "{provider}");
    }
}
