//! `operate` with native tools on the `anthropic` provider, end to end
//! against a stand-in Messages server that checks every request the way
//! the API does (alternating turns, `tool_result` ids answering the
//! `tool_use` ids just before, tools with `input_schema`, extended
//! thinking's signed blocks first in the calling turn). The rules:
//! <https://docs.claude.com/en/api/messages>,
//! <https://platform.claude.com/docs/en/agents-and-tools/tool-use/handle-tool-calls>,
//! <https://docs.claude.com/en/docs/build-with-claude/extended-thinking>.

mod common;

use std::sync::Arc;

use branch_core::Branch;
use branch_core::model::{ChatModel, ModelConfig};
use branch_models::IModel;
use branch_models::mock_messages::MockMessagesServer;
use branch_operations::{BranchOperations, OperateOptions};
use serde_json::json;

fn branch(server: &MockMessagesServer) -> Branch {
    let config = ModelConfig::builder()
        .provider("anthropic")
        .model("claude-sonnet-4-5")
        .base_url(&server.base_url())
        .allow_local_network(true)
        .kwarg(
            "thinking",
            json!({"type": "enabled", "budget_tokens": 1024}),
        )
        .build()
        .unwrap();
    let model: Arc<dyn ChatModel> = Arc::new(IModel::with_api_key(config, "test").unwrap());
    let mut b = Branch::builder()
        .system("Use tools when helpful.")
        .chat_model(model)
        .build()
        .unwrap();
    b.acts_mut().register(common::multiply(), false).unwrap();
    b
}

#[tokio::test]
async fn operate_with_native_tools_passes_the_messages_api_rules() {
    let server = MockMessagesServer::start().await;
    server.push(json!({
        "content": [
            {"type": "thinking", "thinking": "I should multiply.", "signature": "sig-A"},
            {"type": "text", "text": "Multiplying."},
            {"type": "tool_use", "id": "toolu_01", "name": "multiply", "input": {"a": 6, "b": 7}}
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 50, "output_tokens": 20, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
    }));
    server.push(json!({
        "content": [{"type": "thinking", "thinking": "Done.", "signature": "sig-B"},
                    {"type": "text", "text": "It is 42."}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 80, "output_tokens": 6, "cache_read_input_tokens": 40}
    }));
    let mut b = branch(&server);
    let r = b
        .operate(OperateOptions::new("6*7?").actions(true).native_tools(true))
        .await
        .unwrap();
    assert_eq!(r.action_responses[0].output, Some(json!(42)));
    b.operate(OperateOptions::new("So?").actions(true).native_tools(true))
        .await
        .unwrap();
    assert_eq!(server.rejections(), Vec::<String>::new());
    let sent = server.requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0]["tools"][0]["name"], "multiply");
    assert_eq!(sent[0]["tools"][0]["input_schema"]["type"], "object");
    // The reference folds the system text into the first instruction.
    assert!(sent[0].get("system").is_none());
    // The second request replays the calling turn with its signed
    // thinking first and answers the call under the provider's id.
    let msgs = sent[1]["messages"].as_array().unwrap();
    let calling = msgs
        .iter()
        .find(|m| m["role"] == "assistant")
        .expect("the calling turn is sent");
    assert_eq!(
        calling["content"][0],
        json!({"type": "thinking", "thinking": "I should multiply.", "signature": "sig-A"})
    );
    let tool_use = calling["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_use")
        .unwrap();
    assert_eq!(tool_use["id"], "toolu_01");
    assert_eq!(tool_use["input"], json!({"a": 6, "b": 7}));
    let answer = msgs.last().unwrap();
    assert_eq!(answer["role"], "user");
    assert_eq!(answer["content"][0]["type"], "tool_result");
    assert_eq!(answer["content"][0]["tool_use_id"], "toolu_01");
    assert_eq!(answer["content"][0]["content"], "42");
    assert_eq!(
        answer["content"].as_array().unwrap().last().unwrap()["type"],
        "text"
    );
}

/// Without the native translation the same first request is refused at
/// once: the stand-in answers the reference's body 400, as the issue saw.
#[tokio::test]
async fn the_reference_body_is_what_the_api_refuses() {
    let server = MockMessagesServer::start().await;
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 8192,
        "tools": [{"type": "function", "function": {"name": "multiply", "parameters": {"type": "object"}}}],
        "messages": [{"role": "user", "content": "6*7?"}]});
    let resp = reqwest::Client::new()
        .post(format!("{}/messages", server.base_url()))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    assert!(server.rejections()[0].contains("tools.0.custom"));
}
