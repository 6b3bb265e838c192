//! A conversation saved by us, with native tool calls, an image, prompt
//! caching on its model and reasoning on its replies (Anthropic signed
//! and redacted thinking, a Responses reasoning item, a compatible
//! server's plain `reasoning_content`), loads in Python lionagi 0.36.0,
//! which writes it back; we load that and get the same conversation.
//!
//! The reference's python is `$LIONAGI_REF_PYTHON` (CI:
//! `.ci/services/reference.sh`); without it the test is skipped with a
//! message, unless `CI` or `LIONAGI_REF_REQUIRED` is set.

use std::path::PathBuf;
use std::process::Command;

use lionagi::core::message::{InstructionContent, Message};
use lionagi::core::model::{ModelConfig, REASONING_METADATA_KEY, ReasoningBlock};
use lionagi::core::{Branch, Participant, SerializationMode, ToDictOptions};
use serde_json::{Map, Value, json};

fn reference_python() -> Option<PathBuf> {
    match std::env::var_os("LIONAGI_REF_PYTHON") {
        Some(p) => Some(PathBuf::from(p)),
        None if std::env::var_os("CI").is_some()
            || std::env::var_os("LIONAGI_REF_REQUIRED").is_some() =>
        {
            panic!("LIONAGI_REF_PYTHON is not set: the reference is required here")
        }
        None => {
            println!("skipped: set LIONAGI_REF_PYTHON to a python with lionagi 0.36.0");
            None
        }
    }
}

/// Loads the file at argv[1] with the reference, writes its `to_dict`
/// (json mode) to argv[2].
const LOAD_AND_SAVE: &str = r#"
import json, sys
from lionagi import Branch
with open(sys.argv[1]) as f:
    data = json.load(f)
b = Branch.from_dict(data)
with open(sys.argv[2], "w") as f:
    json.dump(b.to_dict(mode="json"), f)
"#;

fn with_reasoning(mut m: Message, blocks: &[ReasoningBlock]) -> Message {
    m.element.metadata.insert(
        REASONING_METADATA_KEY.into(),
        ReasoningBlock::list_to_value(blocks),
    );
    m
}

fn conversation() -> Branch {
    // Prompt caching is an option of the model's endpoint (stored with it).
    let base = ModelConfig::new("anthropic", "claude-sonnet-4-5").unwrap();
    let mut dict = base.to_dict(false, false);
    dict["endpoint"]["config"]["prompt_caching"] = json!(true);
    let model = ModelConfig::from_dict(&dict).unwrap();
    let mut branch = Branch::builder()
        .system("Use tools when helpful.")
        .chat_model(model)
        .build()
        .unwrap();
    let me = Participant::Id(branch.id());
    let instruction = Message::instruction(InstructionContent {
        instruction: Some(json!("What is in this picture, and what is 6*7?")),
        images: vec!["data:image/png;base64,iVBORw0KGgo=".into()],
        ..InstructionContent::default()
    })
    .with_sender(Participant::parse("user"))
    .with_recipient(me.clone());
    let thinking = [
        ReasoningBlock::Thinking {
            text: "A picture, then arithmetic: use the tool.".into(),
            signature: Some("EqQBCkYIBxgCKkBsig==".into()),
        },
        ReasoningBlock::RedactedThinking {
            data: "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT".into(),
        },
    ];
    let mut asked = Message::assistant("Let me multiply.").with_sender(me.clone());
    asked.element.metadata.insert(
        "model_response".into(),
        json!({"id": "msg_1", "type": "message", "role": "assistant", "stop_reason": "tool_use",
            "content": [{"type": "thinking", "thinking": "A picture, then arithmetic: use the tool.",
                "signature": "EqQBCkYIBxgCKkBsig=="},
                {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"},
                {"type": "text", "text": "Let me multiply."},
                {"type": "tool_use", "id": "toolu_1", "name": "multiply", "input": {"a": 6, "b": 7}}],
            "usage": {"input_tokens": 20, "output_tokens": 30, "cache_read_input_tokens": 1800,
                "cache_creation_input_tokens": 0}}),
    );
    let asked = with_reasoning(asked, &thinking);
    let mut args = Map::new();
    args.insert("a".into(), json!(6));
    args.insert("b".into(), json!(7));
    let call = Message::action_request("multiply", args).with_sender(me.clone());
    let answer = with_reasoning(
        Message::assistant("It is a tiny PNG; 6*7 = 42.").with_sender(me.clone()),
        &[
            ReasoningBlock::ResponsesItem {
                id: "rs_1".into(),
                summary: vec!["The tool said 42.".into()],
                encrypted_content: Some("gAAAAAB".into()),
            },
            ReasoningBlock::Thinking {
                text: "Plain reasoning_content.".into(),
                signature: None,
            },
        ],
    );
    let msgs = branch.msgs_mut();
    msgs.add_message(instruction);
    msgs.add_message(asked);
    let call_id = msgs.add_message(call);
    msgs.add_action_response(call_id, Some(json!(42)), Some(me.clone()), None)
        .unwrap();
    msgs.add_message(answer);
    branch
}

#[test]
fn a_conversation_with_tools_images_caching_and_reasoning_survives_python() {
    let Some(python) = reference_python() else {
        return;
    };
    let branch = conversation();
    let opts = ToDictOptions {
        mode: SerializationMode::Json,
        ..ToDictOptions::default()
    };
    let ours = branch.to_dict(&opts).unwrap();
    let dir = std::env::temp_dir().join(format!("lionagi-roundtrip-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let (input, output) = (dir.join("ours.json"), dir.join("python.json"));
    std::fs::write(&input, serde_json::to_vec(&ours).unwrap()).unwrap();
    let run = Command::new(&python)
        .arg("-c")
        .arg(LOAD_AND_SAVE)
        .arg(&input)
        .arg(&output)
        .current_dir(&dir)
        .env("LOG_AUTO_SAVE_ON_EXIT", "false")
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .expect("run the reference");
    assert!(
        run.status.success(),
        "the reference could not load our file: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let theirs: Value = serde_json::from_slice(&std::fs::read(&output).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    // Python kept every message's metadata, reasoning included.
    let reasoning_of = |v: &Value| -> Vec<Value> {
        v["messages"]["collections"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["metadata"].get(REASONING_METADATA_KEY).cloned())
            .collect()
    };
    assert_eq!(reasoning_of(&theirs), reasoning_of(&ours));
    assert_eq!(reasoning_of(&ours).len(), 2);

    // And we read back the conversation we wrote.
    let back = Branch::from_dict(&theirs).unwrap();
    let mut again = back.to_dict(&opts).unwrap();
    // What the reference's own load writes in (docs/compat.md): the
    // parse model it sets to the chat model, and the image detail it
    // defaults to `auto`. Nothing else may differ.
    let parse = again.as_object_mut().unwrap().remove("parse_model");
    assert_eq!(parse.as_ref(), Some(&again["chat_model"]));
    let instruction = again["messages"]["collections"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|m| m["role"] == "user")
        .unwrap();
    let detail = instruction["content"]
        .as_object_mut()
        .unwrap()
        .remove("image_detail");
    assert_eq!(detail, Some(json!("auto")));
    assert_eq!(again, ours);
    let config = back.chat_model().config().to_dict(false, false);
    assert_eq!(config["endpoint"]["config"]["prompt_caching"], true);
    let images: Vec<&Value> = ours["messages"]["collections"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m.pointer("/content/images"))
        .collect();
    assert_eq!(images, vec![&json!(["data:image/png;base64,iVBORw0KGgo="])]);
}
