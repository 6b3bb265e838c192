//! An API call's log and the reply's message record the reply the
//! conversation keeps: the bytes received when the model vouches that its
//! reply is their parse (an `IModel` does), the reply as returned when a
//! wrapper model may have changed it.

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use branch_core::model::{
    ChatModel, ChatRequest, ChatResponse, ChatStream, ModelConfig, ModelError, RequestBody,
};
use branch_core::{Branch, Log, ParsedJson, ToDictOptions};
use branch_models::mock::{MockReply, MockServer};
use branch_operations::{BranchOperations, CommunicateOptions};
use serde_json::{Value, json};

/// A reply on one line, spaced and escaped as no serializer of ours writes
/// it, holding a secret.
const REPLY: &str = r#"{"id": "r1",  "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": "caf\u00e9 sk-secret-1"}, "finish_reason": "stop"}]}"#;

/// A model that removes the secret from every reply of the model it wraps,
/// as a user's redacting wrapper does: it changes `raw` and does not know
/// of `raw_text`.
#[derive(Debug)]
struct Redacting(Arc<dyn ChatModel>);

fn redacted(mut r: ChatResponse) -> ChatResponse {
    r.text = r.text.replace("sk-secret-1", "[redacted]");
    r.raw["choices"][0]["message"]["content"] = r.text.clone().into();
    r
}

#[async_trait]
impl ChatModel for Redacting {
    fn config(&self) -> &ModelConfig {
        self.0.config()
    }

    fn duplicate(&self) -> Arc<dyn ChatModel> {
        Arc::new(Self(self.0.duplicate()))
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        self.0.chat(request).await.map(redacted)
    }

    fn request_body(&self, request: &ChatRequest) -> Result<RequestBody, ModelError> {
        self.0.request_body(request)
    }

    async fn chat_with_body(
        &self,
        request: ChatRequest,
        body: &RequestBody,
    ) -> Result<ChatResponse, ModelError> {
        self.0.chat_with_body(request, body).await.map(redacted)
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        self.0.stream(request).await
    }
}

/// A model that wraps another and returns its replies as they are, without
/// vouching for `raw_text`.
#[derive(Debug)]
struct PassThrough(Arc<dyn ChatModel>);

#[async_trait]
impl ChatModel for PassThrough {
    fn config(&self) -> &ModelConfig {
        self.0.config()
    }

    fn duplicate(&self) -> Arc<dyn ChatModel> {
        Arc::new(Self(self.0.duplicate()))
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        self.0.chat(request).await
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        self.0.stream(request).await
    }
}

/// One turn against a server sending `reply`; the branch, the reply's
/// `model_response`, the dump of its one log as written to a JSON-lines
/// file, and the branch's JSON.
async fn one_turn(reply: &str, wrap: bool) -> (Branch, Value, String, String) {
    let server = MockServer::start().await;
    server.push(MockReply::raw(200, reply));
    let model = common::model(&server, "gpt-4.1-mini");
    let model: Arc<dyn ChatModel> = if wrap {
        Arc::new(Redacting(model))
    } else {
        model
    };
    let mut b = Branch::builder()
        .system("S")
        .chat_model(model)
        .build()
        .unwrap();
    b.communicate(CommunicateOptions::new("q")).await.unwrap();
    let reply = b.messages().iter().last().unwrap().element.metadata["model_response"].clone();
    let dir = common::temp_dir("reply-log");
    let path = dir.join("logs.json");
    b.logger_mut().dump_to(&path, false).unwrap();
    let dump = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let json = b.to_json_vec(&ToDictOptions::default()).unwrap();
    let json = String::from_utf8(json).unwrap();
    // The branch reads back with the same reply.
    let back = Branch::from_json_slice(json.as_bytes()).unwrap();
    assert_eq!(
        back.messages().iter().last().unwrap().element.metadata["model_response"],
        reply
    );
    // Messages and logs alike (the chat model's address guard opt-in is
    // not stored).
    let (ours, theirs) = (
        b.to_dict(&Default::default()).unwrap(),
        back.to_dict(&Default::default()).unwrap(),
    );
    assert!(ours["messages"] == theirs["messages"] && ours["logs"] == theirs["logs"]);
    (b, reply, dump, json)
}

fn only_log(b: &Branch) -> &Log {
    let logs: Vec<&Log> = b.logs().iter().collect();
    assert_eq!(logs.len(), 1);
    logs[0]
}

#[tokio::test]
async fn the_log_and_the_message_keep_the_reply_bytes_an_imodel_received() {
    let (b, reply, dump, json) = one_turn(REPLY, false).await;
    assert_eq!(
        reply["choices"][0]["message"]["content"],
        "café sk-secret-1"
    );
    assert_eq!(only_log(&b).content()["execution"]["response"], reply);
    // Copied into the dump as received, spacing and escapes included.
    assert!(dump.contains(REPLY), "{dump}");
    let line: Value = serde_json::from_str(dump.trim_end()).unwrap();
    assert_eq!(line["content"]["execution"]["response"], reply);
    // The message keeps them too, and the branch's JSON copies them.
    assert!(json.contains(REPLY), "{json}");
}

#[tokio::test]
async fn the_log_and_the_message_keep_the_reply_a_wrapper_returned() {
    let (b, reply, dump, json) = one_turn(REPLY, true).await;
    assert_eq!(
        reply["choices"][0]["message"]["content"],
        json!("café [redacted]")
    );
    assert_eq!(only_log(&b).content()["execution"]["response"], reply);
    assert!(!dump.contains("sk-secret-1"), "{dump}");
    let line: Value = serde_json::from_str(dump.trim_end()).unwrap();
    assert_eq!(line["content"]["execution"]["response"], reply);
    assert!(!json.contains("sk-secret-1"), "{json}");
}

/// A server's padding is not kept: a reply longer than what is kept as
/// received is kept as its value.
#[tokio::test]
async fn a_padded_reply_is_kept_compact() {
    let pad = " ".repeat(ParsedJson::MAX_KEPT_BYTES);
    let padded = format!("{{{pad}{}", &REPLY[1..]);
    let (b, reply, dump, json) = one_turn(&padded, false).await;
    assert_eq!(only_log(&b).content()["execution"]["response"], reply);
    assert!(!dump.contains(&pad[..100]), "the padding is kept");
    assert!(dump.len() < 2_000, "{} bytes", dump.len());
    let line: Value = serde_json::from_str(dump.trim_end()).unwrap();
    assert_eq!(line["content"]["execution"]["response"], reply);
    assert!(!json.contains(&pad[..100]), "the padding is kept");
}

/// Every reply of a conversation keeps the bytes received as its
/// `model_response`: turns after it do not read them back into a tree.
#[tokio::test]
async fn each_reply_keeps_the_bytes_received() {
    let server = MockServer::start().await;
    let mut b = Branch::builder()
        .system("S")
        .chat_model(common::model(&server, "gpt-4.1-mini"))
        .build()
        .unwrap();
    for i in 0..3 {
        server.push(MockReply::raw(200, &REPLY.replace("r1", &format!("r{i}"))));
        b.communicate(CommunicateOptions::new(format!("q{i}")))
            .await
            .unwrap();
    }
    let kept: Vec<String> = b
        .messages()
        .iter()
        .filter_map(|m| m.element.metadata.kept_text("model_response"))
        .map(|t| t.as_str().to_owned())
        .collect();
    let sent: Vec<String> = (0..3)
        .map(|i| REPLY.replace("r1", &format!("r{i}")))
        .collect();
    assert_eq!(kept, sent);
}

/// A reply a wrapper returned unchanged is still its text: kept as it was
/// received, by the message and the log.
#[tokio::test]
async fn a_reply_passed_through_a_wrapper_unchanged_keeps_its_bytes() {
    let server = MockServer::start().await;
    server.push(MockReply::raw(200, REPLY));
    let model: Arc<dyn ChatModel> = Arc::new(PassThrough(common::model(&server, "gpt-4.1-mini")));
    let mut b = Branch::builder().chat_model(model).build().unwrap();
    b.communicate(CommunicateOptions::new("q")).await.unwrap();
    let reply = b.messages().iter().last().unwrap();
    let kept = reply.element.metadata.kept_text("model_response");
    assert_eq!(kept.map(ParsedJson::as_str), Some(REPLY));
    let json = b.to_json_vec(&ToDictOptions::default()).unwrap();
    assert!(String::from_utf8(json).unwrap().contains(REPLY));
}
