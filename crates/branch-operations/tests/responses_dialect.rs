//! A native-tools conversation through the OpenAI Responses protocol
//! (provider `openai`, endpoint `responses`) on a loopback server: the
//! function call is run, its reasoning item is stored on the assistant
//! message (`metadata.reasoning`) and both go back on the next turn as
//! `reasoning`, `function_call` and `function_call_output` input items
//! (OpenAI API reference, "Create a model response",
//! https://platform.openai.com/docs/api-reference/responses/create).

mod common;

use branch_core::Branch;
use branch_models::mock::{MockReply, MockServer};
use branch_operations::{BranchOperations, OperateOptions};
use serde_json::{Value, json};

#[tokio::test]
async fn a_native_tool_conversation_through_responses() {
    let server = MockServer::start().await;
    let reasoning = json!({"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Multiply."}],
        "encrypted_content": "gAAAA-enc"});
    server.script([
        MockReply::raw(
            200,
            &json!({"id": "resp_1", "object": "response", "status": "completed", "model": "gpt-5",
                "output": [reasoning, {"type": "function_call", "id": "fc_1", "call_id": "call_9",
                    "name": "multiply", "arguments": "{\"a\":2,\"b\":3}", "status": "completed"}],
                "usage": {"input_tokens": 30, "output_tokens": 12, "total_tokens": 42}})
            .to_string(),
        ),
        MockReply::raw(
            200,
            &json!({"id": "resp_2", "object": "response", "status": "completed", "model": "gpt-5",
                "output": [{"type": "message", "id": "msg_2", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": "It is 6."}]}],
                "usage": {"input_tokens": 60, "output_tokens": 4, "total_tokens": 64}})
            .to_string(),
        ),
    ]);
    let mut b = Branch::builder()
        .system("S")
        .chat_model(common::responses_model(&server, "gpt-5"))
        .build()
        .unwrap();
    b.acts_mut().register(common::multiply(), false).unwrap();
    let r = b
        .operate(OperateOptions::new("2*3?").actions(true).native_tools(true))
        .await
        .unwrap();
    assert_eq!(r.action_responses[0].output, Some(json!(6)));
    let stored: Vec<Value> = b
        .messages()
        .iter()
        .filter_map(|m| m.element.metadata.get("reasoning").cloned())
        .collect();
    assert_eq!(
        stored,
        vec![
            json!([{"type": "responses_item", "id": "rs_1", "summary": ["Multiply."],
            "encrypted_content": "gAAAA-enc"}])
        ]
    );

    b.operate(OperateOptions::new("So?").actions(true).native_tools(true))
        .await
        .unwrap();
    let bodies = server.bodies();
    let requests = server.requests();
    assert!(requests.iter().all(|r| r.path == "/v1/responses"));
    assert_eq!(
        bodies[0]["tools"][0],
        json!({"type": "function", "name": "multiply",
            "description": "Multiply two integers and return the product.",
            "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"]},
            "strict": false})
    );
    assert_eq!(bodies[0]["store"], false);
    assert_eq!(bodies[0]["include"], json!(["reasoning.encrypted_content"]));
    assert!(bodies[0].get("messages").is_none());
    let input = bodies[1]["input"].as_array().unwrap();
    let at = input
        .iter()
        .position(|i| i["type"] == "reasoning")
        .expect("the reasoning item goes back");
    assert_eq!(input[at], reasoning);
    assert_eq!(input[at + 1]["type"], "function_call");
    assert_eq!(input[at + 1]["call_id"], "call_9");
    assert_eq!(input[at + 1]["name"], "multiply");
    let args: Value = serde_json::from_str(input[at + 1]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"a": 2, "b": 3}));
    assert_eq!(
        input[at + 2],
        json!({"type": "function_call_output", "call_id": "call_9", "output": "6"})
    );
    let last = input.last().unwrap();
    assert_eq!(
        (&last["type"], &last["role"]),
        (&json!("message"), &json!("user"))
    );
    assert_eq!(last["content"][0]["type"], "input_text");
    assert!(
        input.iter().all(|i| i
            .get("role")
            .is_none_or(|r| r == "user" || r == "assistant")),
        "no chat-completions roles left: {input:?}"
    );
}
