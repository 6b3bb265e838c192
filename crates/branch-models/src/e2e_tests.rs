//! End-to-end tests against a real OpenAI-compatible server (llama.cpp's
//! server with a small chat model). Skipped unless `LIONAGI_E2E_BASE_URL`
//! (e.g. `http://127.0.0.1:8080/v1`) is set; `LIONAGI_E2E_MODEL` names the
//! served model (default `smollm2`). With `LIONAGI_E2E_REQUIRED=1` (as in
//! CI) an unset URL is a failure instead of a skip. Only protocol and
//! shapes are asserted, never what a tiny model chooses to say.

use branch_core::model::{
    ChatMessage, ChatModel, ChatRequest, ChunkKind, ModelConfig, StreamAccumulator,
};
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::{ApiKey, IModel};

fn server() -> Option<(String, String)> {
    crate::mock::e2e_server()
}

fn model(provider: &str, url: &str, name: &str) -> IModel {
    let config = ModelConfig::builder()
        .provider(provider)
        .model(name)
        .base_url(url)
        .allow_local_network(true)
        .kwarg("max_tokens", 24)
        .build()
        .unwrap();
    IModel::with_api_key(config, ApiKey::new("dummy-key-e2e")).unwrap()
}

fn ask(q: &str) -> ChatRequest {
    ChatRequest::new(vec![ChatMessage::user(q)]).with_field("temperature", 0)
}

#[tokio::test]
async fn e2e_openai_chat_and_stream() {
    let Some((url, name)) = server() else { return };
    let m = model("openai", &url, &name);
    let r = m.chat(ask("What is the capital of France?")).await.unwrap();
    assert!(!r.text.is_empty());
    assert_eq!(r.attempts, 1);
    assert!(
        r.usage
            .as_ref()
            .is_some_and(|u| u.prompt_tokens > 0 && u.completion_tokens > 0)
    );
    assert!(r.served_model.is_some());
    assert!(r.raw.get("choices").is_some());

    let req = ask("Name a colour.").with_field("stream_options", json!({"include_usage": true}));
    let mut s = m.stream(req).await.unwrap();
    let mut acc = StreamAccumulator::new();
    let mut text_chunks = 0;
    while let Some(c) = s.next().await {
        let c = c.unwrap();
        text_chunks += usize::from(c.kind == ChunkKind::Text);
        acc.push(&c);
    }
    assert!(acc.is_done(), "[DONE] seen");
    assert!(text_chunks > 0);
    let r = acc.finish();
    assert!(!r.text.is_empty());
    assert!(r.finish_reason.is_some());
    assert!(r.usage.is_some_and(|u| u.completion_tokens > 0));
}

#[tokio::test]
async fn e2e_json_response_format() {
    let Some((url, name)) = server() else { return };
    let m = model("openai", &url, &name);
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}},
                        "required": ["city"]});
    let req = ask("Which city is the capital of France? Answer in JSON.").with_field(
        "response_format",
        json!({"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}),
    );
    let r = m.chat(req).await.unwrap();
    let v: Value = serde_json::from_str(&r.text).expect("grammar-constrained JSON");
    assert!(v.get("city").is_some_and(Value::is_string), "{v}");
}

#[tokio::test]
async fn e2e_anthropic_messages() {
    let Some((url, name)) = server() else { return };
    let m = model("anthropic", &url, &name);
    let r = m.chat(ask("Say hello.")).await.unwrap();
    assert!(!r.text.is_empty());
    assert!(r.raw.get("content").is_some(), "native Messages reply");
    assert!(r.usage.is_some());
    let mut s = m.stream(ask("Say hello.")).await.unwrap();
    let mut acc = StreamAccumulator::new();
    while let Some(c) = s.next().await {
        acc.push(&c.unwrap());
    }
    let r = acc.finish();
    assert!(!r.text.is_empty());
    assert!(r.usage.is_some_and(|u| u.completion_tokens > 0));
}

#[tokio::test]
async fn e2e_errors_are_typed() {
    let Some((url, name)) = server() else { return };
    let mut config = ModelConfig::builder()
        .provider("openai")
        .model(&name)
        .base_url(&url)
        .allow_local_network(true)
        .build()
        .unwrap();
    config.set_allow_local_network(false);
    let guarded = IModel::with_api_key(config, ApiKey::new("k")).unwrap();
    let e = guarded.chat(ask("x")).await.unwrap_err();
    assert_eq!(e.kind, crate::ModelErrorKind::NetworkGuard);
}
