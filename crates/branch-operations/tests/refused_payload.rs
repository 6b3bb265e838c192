//! A turn whose call the model refuses before sending (a sampling field
//! out of the API's range, an input over its `max_input_tokens`) leaves
//! the branch as it was: nothing is sent, no message is added and, as in
//! the reference, whose `APICalling` is never made, no call is logged.

mod common;

use std::sync::Arc;

use branch_core::Branch;
use branch_core::model::{ChatModel, ModelConfig};
use branch_models::IModel;
use branch_models::mock::{MockReply, MockServer};
use branch_operations::{BranchOperations, CommunicateOptions};
use serde_json::json;

fn claude(server: &MockServer) -> Arc<dyn ChatModel> {
    let c = ModelConfig::builder()
        .provider("anthropic")
        .model("claude-sonnet-4-5")
        .base_url(&server.base_url())
        .allow_local_network(true)
        .build()
        .unwrap();
    Arc::new(IModel::with_api_key(c, "test").unwrap())
}

fn branch(model: Arc<dyn ChatModel>) -> Branch {
    Branch::builder()
        .system("You are terse.")
        .chat_model(model)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_refused_payload_leaves_the_branch_as_it_was() {
    let server = MockServer::start().await;
    server.script([MockReply::text("one"), MockReply::text("two")]);
    for (model, field, value) in [
        (
            common::model(&server, "gpt-4.1-mini"),
            "temperature",
            json!(2.5),
        ),
        (claude(&server), "temperature", json!(1.2)),
        (claude(&server), "max_tokens", json!(0)),
    ] {
        let mut b = branch(model.clone());
        b.communicate(CommunicateOptions::new("first"))
            .await
            .unwrap();
        let (messages, logs) = (b.messages().len(), b.logs().len());
        let e = b
            .communicate(CommunicateOptions::new("second").field(field, value.clone()))
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains(&format!("`{field}` is {value}")),
            "{e}"
        );
        assert_eq!((b.messages().len(), b.logs().len()), (messages, logs));
        server.push(MockReply::text("again"));
    }
    assert_eq!(server.request_count(), 3);
}

#[tokio::test]
async fn an_input_over_the_cap_is_no_call_either() {
    let server = MockServer::start().await;
    server.push(MockReply::text("never"));
    let mut c = common::config(&server, "gpt-4.1-mini");
    c.set_max_input_tokens(Some(5)).unwrap();
    let mut b = branch(Arc::new(IModel::with_api_key(c, "test").unwrap()));
    let e = b
        .communicate(CommunicateOptions::new(
            "a question longer than five tokens, surely",
        ))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("max_input_tokens"), "{e}");
    assert_eq!((b.messages().len(), b.logs().len()), (1, 0));
    assert_eq!(server.request_count(), 0);
}

#[tokio::test]
async fn the_token_note_goes_only_to_an_endpoint_that_counts_tokens() {
    let server = MockServer::start().await;
    server.script([MockReply::text("a"), MockReply::text("b")]);
    for model in [common::model(&server, "gpt-4.1-mini"), claude(&server)] {
        let mut b = branch(model);
        b.communicate(CommunicateOptions::new("q").include_token_usage_to_model(true))
            .await
            .unwrap();
    }
    let note = |i: usize| {
        let body = &server.bodies()[i];
        let last = body["messages"].as_array().unwrap().last().unwrap().clone();
        last["content"]
            .as_str()
            .unwrap()
            .contains("Estimated Current Token Usage")
    };
    // OpenAI's chat counts tokens; Anthropic's Messages does not, and the
    // reference adds the note only where the endpoint counts them.
    assert!(note(0));
    assert!(!note(1));
}
