use branch_core::message::{InstructionContent, Message, MessageManager, SystemContent};
use branch_core::model::ChatMessage;
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

fn native() -> CompileOptions<'static> {
    CompileOptions {
        tool_mode: ToolMode::Native,
        ..Default::default()
    }
}

fn args_ab(a: i64, b: i64) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("a".into(), a.into());
    m.insert("b".into(), b.into());
    m
}

#[test]
fn native_mode_sends_calls_and_results_as_messages() {
    let mut mm = MessageManager::new();
    mm.set_system(Message::system(SystemContent::new("S")));
    mm.add_message(Message::instruction(ins("compute")));
    mm.add_message(Message::assistant("calling tools"));
    let mut provider_call = Message::action_request("multiply", args_ab(6, 7));
    provider_call
        .element
        .metadata
        .insert("tool_call_id".into(), "call_abc".into());
    let r1 = mm.add_message(provider_call);
    let r2 = mm.add_message(Message::action_request("lookup", Map::new()));
    mm.add_action_response(r1, Some(42.into()), None, None)
        .unwrap();
    mm.add_action_response(r2, Some("Paris".into()), None, None)
        .unwrap();
    let current = InstructionContent {
        tool_schemas: vec![json!({"type": "function", "function": {"name": "multiply"}})],
        ..ins("and now?")
    };
    let out = contents(&mm, &current, &native());
    assert_eq!(
        out,
        json!([
            {"role": "user", "content": "Guidance: S\nInstruction: compute"},
            {"role": "assistant", "content": "calling tools", "tool_calls": [
                {"id": "call_abc", "type": "function", "function": {"name": "multiply", "arguments": "{\"a\":6,\"b\":7}"}},
                {"id": r2.to_string(), "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
            ]},
            {"role": "tool", "content": "42", "tool_call_id": "call_abc"},
            {"role": "tool", "content": "Paris", "tool_call_id": r2.to_string()},
            {"role": "user", "content": "Instruction: and now?"}
        ])
    );
    let chat = compile_request(&mm, &current, &native()).unwrap()[1].to_chat_message();
    assert_eq!(chat.extra["tool_calls"][0]["id"], "call_abc");
}

#[test]
fn native_mode_answers_a_call_left_without_result() {
    let mut mm = MessageManager::new();
    mm.add_message(Message::instruction(ins("go")));
    let r = mm.add_message(Message::action_request("slow", Map::new()));
    let out = contents(&mm, &ins("next"), &native());
    assert_eq!(out[1]["content"], Value::Null);
    assert_eq!(
        out[2],
        json!({"role": "tool", "content": entry::MISSING_RESULT, "tool_call_id": r.to_string()})
    );
    assert_eq!(out[3]["role"], "user");
}

#[test]
fn native_mode_puts_the_system_first_when_calls_open_the_history() {
    let mut mm = MessageManager::new();
    mm.set_system(Message::system(SystemContent::new("S")));
    let r = mm.add_message(Message::action_request("f", Map::new()));
    mm.add_action_response(r, None, None, None).unwrap();
    let out = contents(&mm, &ins("next"), &native());
    assert_eq!(out[0], json!({"role": "system", "content": "S"}));
    assert_eq!(
        out[2],
        json!({"role": "tool", "content": "null", "tool_call_id": r.to_string()})
    );
    assert_eq!(
        out[3],
        json!({"role": "user", "content": "Instruction: next"})
    );
}

#[test]
fn native_mode_folds_results_whose_call_is_not_sent() {
    let mut mm = MessageManager::new();
    let r = mm.add_message(Message::action_request("f", Map::new()));
    let resp = mm
        .add_action_response(r, Some(1.into()), None, None)
        .unwrap();
    let only = [resp];
    let opts = CompileOptions {
        progression: Some(&only),
        tool_mode: ToolMode::Native,
        ..Default::default()
    };
    let out = contents(&mm, &ins("next"), &opts);
    assert_eq!(
        out,
        json!([{"role": "user", "content": "Instruction: next\nContext:\n- function: f\n  output: 1"}])
    );
}

#[test]
fn non_text_guidance_folds_as_yaml() {
    let mut mm = MessageManager::new();
    mm.set_system(Message::system(SystemContent::new("SYS")));
    let c = InstructionContent {
        guidance: Some(json!({"tone": "dry"})),
        ..ins("x")
    };
    assert_eq!(
        contents(&mm, &c, &CompileOptions::default())[0]["content"],
        "Guidance: 'SYStone: dry'\nInstruction: x"
    );
    // A falsy guidance adds nothing; a number is PyYAML's open-ended scalar.
    let zero = InstructionContent {
        guidance: Some(json!(0)),
        ..ins("x")
    };
    assert_eq!(
        contents(&mm, &zero, &CompileOptions::default())[0]["content"],
        "Guidance: SYS\nInstruction: x"
    );
    let five = InstructionContent {
        guidance: Some(json!(5)),
        ..ins("x")
    };
    assert_eq!(
        contents(&mm, &five, &CompileOptions::default())[0]["content"],
        "Guidance: |-\n  SYS5\n  ...\nInstruction: x"
    );
}

#[test]
fn plain_content_never_carries_react_context() {
    let ctx = vec![json!("data")];
    let mut mm = MessageManager::new();
    mm.add_message(Message::instruction(InstructionContent {
        plain_content: Some("raw".into()),
        prompt_context: ctx.clone(),
        ..Default::default()
    }));
    mm.add_message(Message::assistant("r"));
    let opts = CompileOptions {
        react_context: Some(&ctx),
        ..Default::default()
    };
    let current = InstructionContent {
        prompt_context: ctx.clone(),
        ..ins("next")
    };
    // The only holder renders as plain text, so the current turn keeps it.
    assert_eq!(
        contents(&mm, &current, &opts)[2]["content"],
        "Instruction: next\nContext:\n- data"
    );
}

#[test]
fn the_seam_message_moved_out_equals_the_copied_one() {
    let mut m = RequestMessage::new(RequestRole::Assistant, RenderedContent::Text(String::new()));
    m.tool_calls = vec![json!({"id": "c1", "type": "function"})];
    let mut t = RequestMessage::new(RequestRole::Tool, RenderedContent::Text("out".into()));
    t.tool_call_id = Some("c1".into());
    let u = RequestMessage::new(
        RequestRole::User,
        RenderedContent::Parts(vec![json!({"type": "text", "text": "hi"})]),
    );
    for r in [m, t, u] {
        assert_eq!(ChatMessage::from(r.clone()), r.to_chat_message());
    }
}

#[test]
fn a_past_instruction_renders_without_its_schemas_and_format() {
    let c = InstructionContent {
        guidance: Some("g".into()),
        tool_schemas: vec![json!({"type": "function", "function": {"name": "f"}})],
        response_format: Some(json!({"x": "int"})),
        prompt_context: vec![json!("ctx")],
        ..ins("do it")
    };
    let stripped = InstructionContent {
        tool_schemas: Vec::new(),
        response_format: None,
        ..c.clone()
    };
    assert_eq!(
        crate::render::instruction_text_as(&c, true),
        crate::render::instruction_text(&stripped)
    );
    assert_ne!(
        crate::render::instruction_text_as(&c, false),
        crate::render::instruction_text(&stripped)
    );
}
