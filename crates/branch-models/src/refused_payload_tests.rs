//! A payload the endpoint's request model refuses (a sampling field out of
//! the API's range) is never sent: the call fails with `InvalidPayload`
//! before any byte reaches the server, whether the field comes with the
//! call or from the model's kwargs (the kept payload of calls without
//! fields of their own).

use branch_core::model::{ChatMessage, ChatModel, ChatRequest, ModelConfig, ModelErrorKind};
use serde_json::json;

use crate::mock::{MockReply, MockServer};
use crate::{ApiKey, IModel};

fn model(server: &MockServer, provider: &str, name: &str, kwargs: &[(&str, f64)]) -> IModel {
    let mut b = ModelConfig::builder()
        .provider(provider)
        .model(name)
        .base_url(&server.base_url())
        .allow_local_network(true);
    for (k, v) in kwargs {
        b = b.kwarg(k, *v);
    }
    IModel::with_api_key(b.build().unwrap(), ApiKey::new("k")).unwrap()
}

fn user(text: &str) -> ChatRequest {
    ChatRequest::new(vec![ChatMessage::user(text)])
}

#[tokio::test]
async fn out_of_range_fields_are_refused_before_sending() {
    let server = MockServer::start().await;
    server.push(MockReply::text("sent"));
    let cases = [
        (
            "anthropic",
            "claude-sonnet-4-5",
            "temperature",
            json!(1.2),
            "from 0 to 1",
        ),
        (
            "anthropic",
            "claude-sonnet-4-5",
            "top_k",
            json!(-1),
            "at least 0",
        ),
        (
            "anthropic",
            "claude-sonnet-4-5",
            "max_tokens",
            json!(0),
            "at least 1",
        ),
        (
            "openai",
            "gpt-4.1-mini",
            "temperature",
            json!(2.5),
            "from 0 to 2",
        ),
        (
            "openai",
            "gpt-4.1-mini",
            "frequency_penalty",
            json!(-3),
            "from -2 to 2",
        ),
        ("openai", "gpt-4.1-mini", "n", json!(0), "at least 1"),
        (
            "openai",
            "gpt-4.1-mini",
            "seed",
            json!("7"),
            "a whole number",
        ),
    ];
    for (provider, name, field, value, takes) in cases {
        let m = model(&server, provider, name, &[]);
        let e = m
            .chat(user("hi").with_field(field, value.clone()))
            .await
            .unwrap_err();
        assert_eq!(
            (e.kind, e.attempts),
            (ModelErrorKind::InvalidPayload, 0),
            "{field}"
        );
        assert!(
            e.message.contains(&format!("`{field}` is {value}")),
            "{}",
            e.message
        );
        assert!(e.message.contains(takes), "{}", e.message);
        assert!(
            m.request_body(&user("hi").with_field(field, value))
                .is_err()
        );
    }
    assert_eq!(server.request_count(), 0);
    // In range, the same model sends.
    let m = model(&server, "anthropic", "claude-sonnet-4-5", &[]);
    let r = m
        .chat(user("hi").with_field("temperature", 1))
        .await
        .unwrap();
    assert_eq!(r.text, "sent");
    assert_eq!(server.bodies()[0]["temperature"], json!(1));
}

#[tokio::test]
async fn a_models_own_kwargs_are_checked_too() {
    let server = MockServer::start().await;
    server.script([MockReply::text("one"), MockReply::text("two")]);
    // The kept payload of calls without fields (chat completions builds
    // it once, so it is asked twice) and the Anthropic body alike.
    for (provider, name, t) in [
        ("openai", "gpt-4.1-mini", 2.5),
        ("anthropic", "claude-haiku-4-5", 1.5),
    ] {
        let m = model(&server, provider, name, &[("temperature", t)]);
        for _ in 0..2 {
            let e = m.chat(user("hi")).await.unwrap_err();
            assert_eq!(e.kind, ModelErrorKind::InvalidPayload);
        }
        let e = m.stream(user("hi")).await.err().unwrap();
        assert_eq!(e.kind, ModelErrorKind::InvalidPayload);
        // A call's own field in range takes the model's place.
        m.chat(user("hi").with_field("temperature", 0.5))
            .await
            .unwrap();
    }
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn a_restored_schema_of_its_own_checks_nothing() {
    // The reference validates against whatever schema was stored; ours
    // checks only the two request models it knows.
    let server = MockServer::start().await;
    server.push(MockReply::text("sent"));
    let mut c = ModelConfig::builder()
        .provider("openai")
        .model("gpt-4.1-mini")
        .base_url(&server.base_url())
        .allow_local_network(true)
        .build()
        .unwrap();
    let mut d = c.to_dict(true, false);
    d["endpoint"]["config"]["request_options"] =
        json!({"properties": {"model": {}, "messages": {}, "temperature": {}}});
    c = ModelConfig::from_dict(&d).unwrap();
    // A stored configuration never opts into local addresses by itself.
    c.set_allow_local_network(true);
    let m = IModel::with_api_key(c, ApiKey::new("k")).unwrap();
    m.chat(user("hi").with_field("temperature", 5))
        .await
        .unwrap();
    assert_eq!(server.bodies()[0]["temperature"], json!(5));
}
