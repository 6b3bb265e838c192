use branch_core::message::{InstructionContent, Message, MessageManager, SystemContent};
use serde_json::{Map, Value, json};

use super::*;

fn ins(text: &str) -> InstructionContent {
    InstructionContent {
        instruction: Some(text.into()),
        ..Default::default()
    }
}

fn contents(
    msgs: &MessageManager,
    current: &InstructionContent,
    opts: &CompileOptions<'_>,
) -> Value {
    let out = compile_request(msgs, current, opts).unwrap();
    Value::Array(out.iter().map(RequestMessage::to_value).collect())
}

#[test]
fn system_folds_into_the_oldest_instruction_only() {
    let mut mm = MessageManager::new();
    mm.set_system(Message::system(SystemContent::new("SYS")));
    mm.add_message(Message::instruction(InstructionContent {
        guidance: Some("g1".into()),
        ..ins("first")
    }));
    mm.add_message(Message::assistant("r1"));
    mm.add_message(Message::instruction(InstructionContent {
        guidance: Some("g2".into()),
        prompt_context: vec!["c2".into()],
        ..ins("second")
    }));
    mm.add_message(Message::assistant("r2"));
    assert_eq!(
        contents(&mm, &ins("third"), &CompileOptions::default()),
        json!([
            {"role": "user", "content": "Guidance: SYSg1\nInstruction: first"},
            {"role": "assistant", "content": "r1"},
            {"role": "user", "content": "Guidance: g2\nInstruction: second\nContext:\n- c2"},
            {"role": "assistant", "content": "r2"},
            {"role": "user", "content": "Instruction: third"}
        ])
    );
}

#[test]
fn consecutive_replies_merge_and_consecutive_instructions_are_kept() {
    let mut mm = MessageManager::new();
    mm.add_message(Message::instruction(ins("i1")));
    mm.add_message(Message::instruction(ins("i2")));
    mm.add_message(Message::assistant("a1"));
    mm.add_message(Message::assistant("a2"));
    assert_eq!(
        contents(&mm, &ins("now"), &CompileOptions::default()),
        json!([
            {"role": "user", "content": "Instruction: i1"},
            {"role": "user", "content": "Instruction: i2"},
            {"role": "assistant", "content": "a1\n\na2"},
            {"role": "user", "content": "Instruction: now"}
        ])
    );
}

#[test]
fn action_output_folds_into_the_next_instruction() {
    let mut mm = MessageManager::new();
    mm.add_message(Message::instruction(ins("go")));
    mm.add_message(Message::assistant("calling"));
    let mut args = Map::new();
    args.insert("a".into(), 3.into());
    args.insert("b".into(), 4.into());
    let req = mm.add_message(Message::action_request("multiply", args));
    mm.add_action_response(req, Some(12.into()), None, None)
        .unwrap();
    let out = contents(&mm, &ins("and now?"), &CompileOptions::default());
    assert_eq!(
        out[2],
        json!({"role": "user", "content": "Instruction: and now?\nContext:\n- function: multiply\n  arguments:\n    a: 3\n    b: 4\n  output: 12"})
    );
}

#[test]
fn pending_actions_survive_the_system_fold_into_the_current_turn() {
    let mut mm = MessageManager::new();
    mm.set_system(Message::system(SystemContent::new("S")));
    let req = mm.add_message(Message::action_request("f", Map::new()));
    mm.add_action_response(req, Some("out".into()), None, None)
        .unwrap();
    let out = contents(&mm, &ins("next"), &CompileOptions::default());
    assert_eq!(
        out,
        json!([{"role": "user", "content": "Guidance: S\nInstruction: next\nContext:\n- function: f\n  output: out"}])
    );
}

#[test]
fn history_instructions_drop_tools_and_response_format() {
    let mut mm = MessageManager::new();
    mm.add_message(Message::instruction(InstructionContent {
        tool_schemas: vec![json!({"type": "function", "function": {"name": "f"}})],
        response_format: Some(json!({"x": "int"})),
        ..ins("old")
    }));
    mm.add_message(Message::assistant("r"));
    let out = contents(&mm, &ins("new"), &CompileOptions::default());
    assert_eq!(out[0]["content"], "Instruction: old");
}

#[test]
fn context_blocks_follow_the_system_text() {
    let mut mm = MessageManager::new();
    mm.set_system(Message::system(SystemContent::new("SYS")));
    let blocks = vec!["B1".to_owned(), "B2".to_owned()];
    let opts = CompileOptions {
        context_blocks: &blocks,
        ..Default::default()
    };
    let out = contents(
        &mm,
        &InstructionContent {
            guidance: Some("g".into()),
            ..ins("x")
        },
        &opts,
    );
    assert_eq!(
        out[0]["content"],
        "Guidance: |-\n  SYSB1\n  B2g\nInstruction: x"
    );
}

#[test]
fn an_explicit_progression_and_the_curated_view_choose_the_history() {
    let mut mm = MessageManager::new();
    let a = mm.add_message(Message::instruction(ins("a")));
    let b = mm.add_message(Message::assistant("b"));
    mm.add_message(Message::instruction(ins("c")));
    mm.add_message(Message::assistant("d"));
    let only = [a, b];
    let opts = CompileOptions {
        progression: Some(&only),
        ..Default::default()
    };
    assert_eq!(compile_request(&mm, &ins("z"), &opts).unwrap().len(), 3);
    mm.set_view(Some(branch_core::Progression::from_ids([a, b])));
    assert_eq!(
        compile_request(&mm, &ins("z"), &CompileOptions::default())
            .unwrap()
            .len(),
        3
    );
}

#[test]
fn a_reply_first_history_cannot_carry_the_system_text() {
    let mut mm = MessageManager::new();
    mm.set_system(Message::system(SystemContent::new("S")));
    let id = mm.add_message(Message::assistant("hi"));
    let err = compile_request(&mm, &ins("x"), &CompileOptions::default()).unwrap_err();
    assert_eq!(err, CompileError::FirstNotInstruction { id });
}

#[test]
fn a_turn_with_text_that_renders_empty_is_refused() {
    let mm = MessageManager::new();
    let c = InstructionContent {
        instruction: Some("   ".into()),
        ..Default::default()
    };
    assert!(matches!(
        compile_request(&mm, &c, &CompileOptions::default()),
        Err(CompileError::EmptyOutgoingContent {
            instruction_len: 3,
            ..
        })
    ));
    // Nothing at all to say is not an error: nothing is sent.
    assert!(
        compile_request(
            &mm,
            &InstructionContent::default(),
            &CompileOptions::default()
        )
        .unwrap()
        .is_empty()
    );
}

#[test]
fn react_context_is_shown_once() {
    let ctx = vec![json!("task data"), json!({"k": 1})];
    let with_ctx = |t: &str| InstructionContent {
        prompt_context: ctx.clone(),
        ..ins(t)
    };
    let mut mm = MessageManager::new();
    mm.add_message(Message::instruction(with_ctx("round 1")));
    mm.add_message(Message::assistant("r1"));
    mm.add_message(Message::instruction(InstructionContent {
        prompt_context: vec![json!("extra"), json!("task data"), json!({"k": 1})],
        ..ins("round 2")
    }));
    mm.add_message(Message::assistant("r2"));
    let opts = CompileOptions {
        react_context: Some(&ctx),
        ..Default::default()
    };
    let out = contents(&mm, &with_ctx("round 3"), &opts);
    assert_eq!(
        out[0]["content"],
        "Instruction: round 1\nContext:\n- task data\n- k: 1"
    );
    assert_eq!(out[2]["content"], "Instruction: round 2\nContext:\n- extra");
    assert_eq!(out[4]["content"], "Instruction: round 3");
    // Stored messages keep their context.
    let stored = mm.messages().at(2).unwrap().as_instruction().unwrap();
    assert_eq!(stored.prompt_context.len(), 3);
    // Without a carrier in the history, the current turn keeps it.
    let empty = MessageManager::new();
    let out = contents(&empty, &with_ctx("first"), &opts);
    assert_eq!(
        out[0]["content"],
        "Instruction: first\nContext:\n- task data\n- k: 1"
    );
}

#[test]
fn images_become_content_parts() {
    let mm = MessageManager::new();
    let c = InstructionContent {
        images: vec!["https://example.com/a.png".into()],
        image_detail: Some(branch_core::message::ImageDetail::Low),
        ..ins("look")
    };
    let out = contents(&mm, &c, &CompileOptions::default());
    assert_eq!(
        out[0]["content"],
        json!([{"type": "text", "text": "Instruction: look"},
               {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}}])
    );
}

#[test]
fn compiled_messages_convert_to_the_model_seam() {
    let out = compile_request(
        &MessageManager::new(),
        &ins("hi"),
        &CompileOptions::default(),
    )
    .unwrap();
    let chat: branch_core::model::ChatMessage = out[0].clone().into();
    assert_eq!(
        chat.to_value(),
        json!({"role": "user", "content": "Instruction: hi"})
    );
}
