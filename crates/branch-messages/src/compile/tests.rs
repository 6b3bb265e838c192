use branch_core::Progression;
use branch_core::message::{
    ImageDetail, InstructionContent, Message, MessageManager, SystemContent,
};
use std::sync::Arc;

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

/// Compiles with `cache` and cold; both must give the same request (or the
/// same error).
fn same_as_cold(
    mm: &MessageManager,
    current: &InstructionContent,
    opts: &CompileOptions<'_>,
    cache: &mut RenderCache,
    step: &str,
) {
    let cold = compile_request(mm, current, opts);
    let warm = compile_request_cached(mm, current, opts, cache);
    match (cold, warm) {
        (Ok(c), Ok(w)) => {
            let c: Vec<ChatMessage> = c.iter().map(RequestMessage::to_chat_message).collect();
            assert_kept_json_is_the_messages(&w, step);
            let w: Vec<ChatMessage> = w.messages.iter().map(|m| ChatMessage::clone(m)).collect();
            assert_eq!(w, c, "{step}");
        }
        (Err(c), Err(w)) => assert_eq!(w.to_string(), c.to_string(), "{step}"),
        (c, w) => panic!("{step}: cold {c:?}, cached {w:?}"),
    }
}

/// Each kept JSON the request carries is the JSON of the message it goes
/// with: a message's own, and the settled history's for its prefix.
fn assert_kept_json_is_the_messages(request: &ChatRequest, step: &str) {
    for (i, m) in request.messages.iter().enumerate() {
        if let Some(wire) = request.wire_form(i) {
            let json = wire.json_for(m).expect("made for this message");
            assert_eq!(json.get(), m.to_value().to_string(), "{step}");
        }
    }
    if let Some((settled, n)) = request.settled_prefix() {
        let joined = request.messages[..n]
            .iter()
            .map(|m| m.to_value().to_string())
            .collect::<Vec<_>>()
            .join(",");
        let run = settled.json(0..n).expect("the prefix's JSON");
        assert_eq!(std::str::from_utf8(run.json()).unwrap(), joined, "{step}");
        assert_eq!(run.chars(), joined.chars().count(), "{step}");
    }
}

fn reply_mut(mm: &mut MessageManager, id: Uuid) -> &mut String {
    match &mut mm.get_mut(&id).unwrap().content {
        MessageContent::AssistantResponse(a) => &mut a.assistant_response,
        _ => panic!("not a reply"),
    }
}

fn instruction_mut(mm: &mut MessageManager, id: Uuid) -> &mut InstructionContent {
    match &mut mm.get_mut(&id).unwrap().content {
        MessageContent::Instruction(c) => c,
        _ => panic!("not an instruction"),
    }
}

/// The render cache never changes what is compiled: every edit of a
/// message or of what its rendering depends on (its fields, the system
/// message, the order, folded action results, ReAct's context, the tool
/// mode) gives, with one cache kept throughout, the cold compilation.
#[test]
fn cached_compilation_equals_a_cold_one_through_every_change() {
    let mut cache = RenderCache::new();
    let mut mm = MessageManager::new();
    mm.set_system(Message::system(SystemContent::new("SYS")));
    let a = mm.add_message(Message::instruction(InstructionContent {
        guidance: Some("g".into()),
        prompt_context: vec![json!({"k": "v"})],
        ..ins("first")
    }));
    mm.add_message(Message::assistant("r1"));
    let b = mm.add_message(Message::instruction(ins("second")));
    let r2 = mm.add_message(Message::assistant("r2"));
    let c = mm.add_message(Message::instruction(InstructionContent {
        images: vec!["https://example.com/a.png".into()],
        ..ins("third")
    }));
    mm.add_message(Message::assistant("r3"));
    let now = ins("now");
    let d = CompileOptions::default();
    let mut check = |mm: &MessageManager, opts: &CompileOptions<'_>, step: &str| {
        same_as_cold(mm, &now, opts, &mut cache, step);
    };
    check(&mm, &d, "initial");
    check(&mm, &d, "again (all cached)");

    instruction_mut(&mut mm, b).instruction = Some("second, edited".into());
    check(&mm, &d, "instruction edited in place");
    instruction_mut(&mut mm, b).guidance = Some(json!({"style": "terse"}));
    check(&mm, &d, "guidance added");
    // Equal as maps, but rendered in their own order.
    instruction_mut(&mut mm, b).guidance = Some(json!({"style": "terse", "tone": "dry"}));
    check(&mm, &d, "guidance of two keys");
    instruction_mut(&mut mm, b).guidance = Some(json!({"tone": "dry", "style": "terse"}));
    check(&mm, &d, "guidance's keys reordered");
    instruction_mut(&mut mm, b).guidance = Some(json!({"style": "terse", "tone": "dry"}));
    check(&mm, &d, "guidance's keys in their first order again");
    // Equal as numbers, but rendered with their signs.
    instruction_mut(&mut mm, b).guidance = Some(json!([0.0]));
    check(&mm, &d, "a zero");
    instruction_mut(&mut mm, b).guidance = Some(json!([-0.0]));
    check(&mm, &d, "a negative zero");
    instruction_mut(&mut mm, b).guidance = Some(json!({"style": "terse"}));
    instruction_mut(&mut mm, b)
        .prompt_context
        .push("more".into());
    check(&mm, &d, "context item added");
    instruction_mut(&mut mm, b).plain_content = Some("PLAIN".into());
    check(&mm, &d, "plain content set");
    instruction_mut(&mut mm, b).plain_content = None;
    check(&mm, &d, "plain content cleared");
    instruction_mut(&mut mm, c).image_detail = Some(ImageDetail::Low);
    check(&mm, &d, "image detail changed");
    instruction_mut(&mut mm, c).images.push("ftp://nope".into());
    check(&mm, &d, "a refused image source");
    instruction_mut(&mut mm, c).images.pop();
    check(&mm, &d, "refused source removed");
    instruction_mut(&mut mm, c)
        .tool_schemas
        .push(json!({"name": "t"}));
    instruction_mut(&mut mm, c).response_format = Some(json!({"x": "str"}));
    check(&mm, &d, "tool schemas and format (not shown in history)");

    // Replies: edited in place, given reasoning, merged with the next one.
    reply_mut(&mut mm, r2).push_str(", edited");
    check(&mm, &d, "reply edited in place");
    mm.get_mut(&r2).unwrap().element.metadata.insert(
        REASONING_METADATA_KEY.into(),
        ReasoningBlock::list_to_value(&[ReasoningBlock::Thinking {
            text: "hm".into(),
            signature: Some("sig".into()),
        }]),
    );
    check(&mm, &d, "reply given reasoning");
    mm.get_mut(&r2)
        .unwrap()
        .element
        .metadata
        .insert(REASONING_METADATA_KEY.into(), json!("not blocks"));
    check(&mm, &d, "reply with malformed reasoning");
    mm.get_mut(&r2)
        .unwrap()
        .element
        .metadata
        .remove(REASONING_METADATA_KEY);
    check(&mm, &d, "reasoning removed");
    reply_mut(&mut mm, r2).clear();
    check(&mm, &d, "reply emptied");
    reply_mut(&mut mm, r2).push_str("r2");
    check(&mm, &d, "reply back");
    let merged: Vec<Uuid> = mm
        .progression()
        .iter()
        .copied()
        .filter(|id| *id != b)
        .collect();
    check(
        &mm,
        &CompileOptions {
            progression: Some(&merged),
            ..d
        },
        "two replies in a row merge",
    );
    check(&mm, &d, "unmerged again");

    // The same id turned into another kind and back.
    let saved = mm.get_mut(&b).unwrap().content.clone();
    mm.get_mut(&b).unwrap().content = Message::assistant("now a reply").content;
    check(&mm, &d, "instruction replaced by a reply");
    mm.get_mut(&b).unwrap().content = saved;
    check(&mm, &d, "instruction restored");

    // The system message: changed, removed (the fold moves), restored.
    mm.set_system(Message::system(SystemContent::new("OTHER SYSTEM")));
    check(&mm, &d, "system changed");
    mm.remove_system();
    check(&mm, &d, "system removed");
    mm.set_system(Message::system(SystemContent::new("SYS")));
    check(&mm, &d, "system back");

    // Order: an explicit progression, reversed, and a curated view.
    let order: Vec<Uuid> = mm.progression().iter().copied().collect();
    let reversed: Vec<Uuid> = order.iter().rev().copied().collect();
    let skip_first: Vec<Uuid> = order.iter().skip(2).copied().collect();
    check(
        &mm,
        &CompileOptions {
            progression: Some(&skip_first),
            ..d
        },
        "first turn left out (the fold moves to a cached one)",
    );
    check(
        &mm,
        &CompileOptions {
            progression: Some(&reversed),
            ..d
        },
        "reversed",
    );
    check(&mm, &d, "natural order again");
    mm.set_view(Some(Progression::from_ids(skip_first.iter().copied())));
    check(&mm, &d, "curated view");
    mm.set_view(None);

    // Action results fold into the next instruction, then it is cached
    // again once nothing folds into it.
    let mut args = Map::new();
    args.insert("a".into(), 1.into());
    let req = mm.add_message(Message::action_request("f", args));
    mm.add_action_response(req, Some(2.into()), None, None)
        .unwrap();
    let e = mm.add_message(Message::instruction(ins("after the call")));
    check(&mm, &d, "results folded into a new instruction");
    check(
        &mm,
        &CompileOptions {
            tool_mode: ToolMode::Native,
            ..d
        },
        "native tool mode",
    );
    instruction_mut(&mut mm, e).prompt_context.push("x".into());
    check(&mm, &d, "folded-into instruction edited");

    // ReAct's context shown once.
    let ctx = vec![json!({"k": "v"}), json!("more")];
    let react = CompileOptions {
        react_context: Some(&ctx),
        ..d
    };
    check(&mm, &react, "react context de-duplicated");
    check(&mm, &d, "without react context");

    // Truncation and a new message reusing nothing.
    mm.truncate(3);
    check(&mm, &d, "truncated");
    instruction_mut(&mut mm, a).instruction = Some("first, edited".into());
    check(&mm, &d, "first edited after truncation");
    mm.add_message(Message::instruction(ins("second")));
    check(&mm, &d, "a new message with an old text");
    mm.clear_messages();
    check(&mm, &d, "cleared");
}

/// Entries of messages no longer compiled are dropped once they outnumber
/// the live ones.
#[test]
fn render_cache_drops_what_is_no_longer_compiled() {
    let mut cache = RenderCache::new();
    let mut mm = MessageManager::new();
    for i in 0..200 {
        mm.add_message(Message::instruction(ins(&format!("q{i}"))));
        mm.add_message(Message::assistant("r"));
    }
    compile_request_cached(&mm, &ins("now"), &CompileOptions::default(), &mut cache).unwrap();
    assert_eq!(cache.len(), 400);
    mm.truncate(4);
    compile_request_cached(&mm, &ins("now"), &CompileOptions::default(), &mut cache).unwrap();
    assert_eq!(cache.len(), 4);
}

/// A turn sends the very messages the previous turn compiled for its
/// history (shared, not copied), the first instruction carrying the system
/// text too (it is settled history); after an edit, all but the message
/// edited: the first instruction, folded anew by a full compilation, is
/// found equal to what its slot was made from.
#[test]
fn past_messages_are_shared_between_turns() {
    let mut cache = RenderCache::new();
    let mut mm = MessageManager::new();
    mm.set_system(Message::system(SystemContent::new("SYS")));
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(mm.add_message(Message::instruction(ins(&format!("q{i}")))));
        ids.push(mm.add_message(Message::assistant(format!("r{i}"))));
    }
    let d = CompileOptions::default();
    let first = compile_request_cached(&mm, &ins("now"), &d, &mut cache)
        .unwrap()
        .messages;
    let second = compile_request_cached(&mm, &ins("next"), &d, &mut cache).unwrap();
    // The settled ones (up to the last past instruction) carry their JSON
    // in one buffer the requests share, not one reference each; the reply
    // after them its own; the one made for this turn none.
    let (_, settled) = second.settled_prefix().expect("settled history");
    assert_eq!(settled, 7);
    assert!(second.wire[..7].iter().all(Option::is_none));
    let kept: Vec<bool> = (7..second.messages.len())
        .map(|i| second.wire_form(i).is_some())
        .collect();
    assert_eq!(kept, [true, false]);
    assert_kept_json_is_the_messages(&second, "second");
    let second = second.messages;
    assert_eq!(first.len(), 9);
    let shared: Vec<bool> = first
        .iter()
        .zip(&second)
        .map(|(a, b)| Arc::ptr_eq(a, b))
        .collect();
    // The current turn is compiled anew.
    assert_eq!(
        shared,
        [true, true, true, true, true, true, true, true, false]
    );

    reply_mut(&mut mm, ids[3]).push('!');
    let third = compile_request_cached(&mm, &ins("next"), &d, &mut cache)
        .unwrap()
        .messages;
    assert!(!Arc::ptr_eq(&second[3], &third[3]));
    assert_eq!(third[3].content, json!("r1!"));
    assert!(Arc::ptr_eq(&second[0], &third[0]));
    assert!(Arc::ptr_eq(&second[2], &third[2]));
    assert!(Arc::ptr_eq(&second[4], &third[4]));
}

/// A slot left alone by a compilation (its message was changed by the
/// compilation, so not kept) is compared again once the message was
/// edited, even if no edit happens after that compilation.
#[test]
fn a_slot_skipped_while_its_message_changed_is_checked_again() {
    let mut cache = RenderCache::new();
    let mut mm = MessageManager::new();
    mm.set_system(Message::system(SystemContent::new("SYS")));
    let a = mm.add_message(Message::instruction(ins("first")));
    let r1 = mm.add_message(Message::assistant("r1"));
    let x = mm.add_message(Message::assistant("x"));
    let req = mm.add_message(Message::action_request("f", Map::new()));
    let resp = mm
        .add_action_response(req, Some(1.into()), None, None)
        .unwrap();
    let b = mm.add_message(Message::instruction(ins("second")));
    let sys = mm.system().unwrap().id();
    // `b` at position 5 either way; with the call before it, results fold
    // into it.
    let plain = [sys, a, r1, x, x, b];
    let folded = [sys, a, r1, req, resp, b];
    let with = |order: &'static [Uuid; 6]| CompileOptions {
        progression: Some(order),
        ..CompileOptions::default()
    };
    let plain: &'static [Uuid; 6] = Box::leak(Box::new(plain));
    let folded: &'static [Uuid; 6] = Box::leak(Box::new(folded));
    let now = ins("now");
    same_as_cold(&mm, &now, &with(plain), &mut cache, "kept");
    instruction_mut(&mut mm, b).instruction = Some("second, edited".into());
    same_as_cold(&mm, &now, &with(folded), &mut cache, "folded, so not kept");
    same_as_cold(&mm, &now, &with(plain), &mut cache, "kept again, as edited");
}

/// The first instruction carries the system text (and the context
/// blocks) folded in, which the edit stamp does not vouch for: the turn
/// after it was sent finds it as sent, and a compilation that walks the
/// whole history again (native tool mode) finds it in its slot, equal to
/// what the slot was made from; other blocks fold into another text, which
/// is rendered anew. Each compiles as a cold compilation does.
#[test]
fn the_first_instruction_with_the_system_text_folded_in_is_rendered_once() {
    let mut cache = RenderCache::new();
    let mut mm = MessageManager::new();
    mm.set_system(Message::system(SystemContent::new("SYS")));
    let d = CompileOptions::default();
    let native = CompileOptions {
        tool_mode: ToolMode::Native,
        ..d
    };
    let blocks = vec!["memory: a".to_owned()];
    let with_blocks = CompileOptions {
        context_blocks: &blocks,
        ..native
    };
    let mut first_message = |mm: &MessageManager, now: &str, opts: &CompileOptions<'_>| {
        same_as_cold(mm, &ins(now), opts, &mut RenderCache::new(), now);
        let request = compile_request_cached(mm, &ins(now), opts, &mut cache).unwrap();
        assert_kept_json_is_the_messages(&request, now);
        (Arc::clone(&request.messages[0]), cache.sent_found)
    };
    let (sent, _) = first_message(&mm, "q0", &d);
    mm.add_message(Message::instruction(ins("q0")));
    mm.add_message(Message::assistant("r0"));
    let (second, found) = first_message(&mm, "q1", &d);
    assert!(Arc::ptr_eq(&sent, &second), "found as sent");
    assert_eq!(found, 1);
    let (third, _) = first_message(&mm, "q1", &native);
    assert!(Arc::ptr_eq(&sent, &third), "found in its slot");
    let (fourth, _) = first_message(&mm, "q1", &with_blocks);
    assert!(!Arc::ptr_eq(&sent, &fourth), "other blocks, another text");
    assert!(
        fourth
            .content
            .as_str()
            .is_some_and(|t| t.contains("memory: a"))
    );
    let (fifth, _) = first_message(&mm, "q1", &native);
    assert!(!Arc::ptr_eq(&fourth, &fifth), "the blocks gone again");
    same_as_cold(&mm, &ins("q1"), &native, &mut cache, "the cache itself");
}

/// The instruction sent is found as the past instruction of the next
/// compilation when it was stored where it was to go, with the content it
/// was sent with, and renders as history the way it was sent; otherwise it
/// is rendered again. Every step compiles as a cold compilation does.
#[test]
fn the_instruction_sent_is_found_by_the_next_turn() {
    let mut cache = RenderCache::new();
    let mut mm = MessageManager::new();
    mm.set_system(Message::system(SystemContent::new("SYS")));
    mm.add_message(Message::instruction(ins("q0")));
    mm.add_message(Message::assistant("r0"));
    let d = CompileOptions::default();
    let mut turn = |mm: &mut MessageManager,
                    sent: InstructionContent,
                    stored: InstructionContent,
                    what: &str| {
        same_as_cold(mm, &sent, &d, &mut cache, what);
        mm.add_message(Message::instruction(stored));
        mm.add_message(Message::assistant("r"));
        same_as_cold(mm, &ins("next"), &d, &mut cache, what);
        cache.sent_found
    };
    assert_eq!(turn(&mut mm, ins("q1"), ins("q1"), "stored as sent"), 1);
    let with_tools = InstructionContent {
        tool_schemas: vec![json!({"name": "f"})],
        ..ins("q2")
    };
    assert_eq!(
        turn(
            &mut mm,
            with_tools.clone(),
            with_tools,
            "tools: rendered without them"
        ),
        1
    );
    let with_format = InstructionContent {
        response_format: Some(json!({"type": "object", "properties": {"a": {"type": "string"}}})),
        ..ins("q3")
    };
    assert_eq!(
        turn(
            &mut mm,
            with_format.clone(),
            with_format,
            "a response format"
        ),
        1
    );
    assert_eq!(
        turn(&mut mm, ins("q4"), ins("q4, edited"), "stored changed"),
        1
    );
    assert_eq!(
        turn(&mut mm, ins("q5"), ins("q5"), "stored as sent, again"),
        2
    );
    // Stored elsewhere: a reply came first.
    same_as_cold(&mm, &ins("q6"), &d, &mut cache, "sent");
    mm.add_message(Message::assistant("first"));
    mm.add_message(Message::instruction(ins("q6")));
    same_as_cold(&mm, &ins("next"), &d, &mut cache, "stored one later");
    assert_eq!(cache.sent_found, 2);
}

/// A conversation that only grows resumes the settled history of the
/// turn before (up to its last past instruction) and compiles the same as
/// a cold compilation at every step: replies merging across turns, action
/// results waiting for the next instruction, an instruction rendering
/// empty, context blocks changing, and every way that rules resuming out
/// (an edit, a new system message, a curated view, an explicit order,
/// ReAct's context, native tool mode, truncation) followed by growth.
#[test]
fn a_growing_conversation_resumes_its_settled_history() {
    let mut cache = RenderCache::new();
    let mut mm = MessageManager::new();
    mm.set_system(Message::system(SystemContent::new("SYS")));
    let d = CompileOptions::default();
    let now = ins("now");
    let mut step = |mm: &MessageManager, opts: &CompileOptions<'_>, what: &str| {
        same_as_cold(mm, &now, opts, &mut cache, what);
        cache.resumed_at
    };

    assert_eq!(step(&mm, &d, "no history"), None);
    let first = mm.add_message(Message::instruction(InstructionContent {
        guidance: Some("g".into()),
        ..ins("q0")
    }));
    assert_eq!(
        step(&mm, &d, "one instruction"),
        None,
        "nothing settled yet"
    );
    mm.add_message(Message::assistant("r0"));
    // Settled: the system message and q0 (positions 0 and 1).
    assert_eq!(step(&mm, &d, "a reply"), Some(2));
    mm.add_message(Message::assistant("r0, continued"));
    assert_eq!(step(&mm, &d, "two replies merge"), Some(2));
    mm.add_message(Message::instruction(ins("q1")));
    mm.add_message(Message::assistant("r1"));
    assert_eq!(step(&mm, &d, "a turn"), Some(2));
    assert_eq!(step(&mm, &d, "again"), Some(5), "q1 settled");

    // Action results wait for the next instruction, across turns.
    let req = mm.add_message(Message::action_request("f", Map::new()));
    mm.add_action_response(req, Some(json!({"ok": 1})), None, None)
        .unwrap();
    assert_eq!(step(&mm, &d, "results pending"), None, "an edit");
    assert_eq!(step(&mm, &d, "pending, settled before"), Some(5));
    mm.add_message(Message::assistant("r2"));
    assert_eq!(step(&mm, &d, "a reply after the results"), Some(5));
    mm.add_message(Message::instruction(ins("q3")));
    assert_eq!(step(&mm, &d, "results folded into q3"), Some(5));
    mm.add_message(Message::assistant("r3"));
    assert_eq!(step(&mm, &d, "q3 settled"), Some(10));

    // An instruction that renders empty, and replies around it.
    mm.add_message(Message::instruction(InstructionContent::default()));
    mm.add_message(Message::assistant("r4"));
    assert_eq!(step(&mm, &d, "an empty instruction"), Some(10));
    mm.add_message(Message::assistant("r5"));
    assert_eq!(step(&mm, &d, "after it, merged"), Some(12));

    // Context blocks are part of the first instruction.
    let blocks = vec!["memory: a".to_owned()];
    let with_blocks = CompileOptions {
        context_blocks: &blocks,
        ..d
    };
    assert_eq!(step(&mm, &with_blocks, "context blocks"), None);
    assert_eq!(step(&mm, &with_blocks, "the same blocks"), Some(12));
    assert_eq!(step(&mm, &d, "blocks gone"), None);

    // What rules resuming out, then growth again.
    instruction_mut(&mut mm, first).instruction = Some("q0, edited".into());
    assert_eq!(step(&mm, &d, "the first instruction edited"), None);
    mm.add_message(Message::instruction(ins("q6")));
    mm.add_message(Message::assistant("r6"));
    assert_eq!(step(&mm, &d, "growth after the edit"), Some(12));
    let order: Vec<Uuid> = mm.progression().iter().copied().collect();
    let explicit = CompileOptions {
        progression: Some(&order),
        ..d
    };
    assert_eq!(step(&mm, &explicit, "an explicit order"), None);
    let ctx = vec![json!("k")];
    let react = CompileOptions {
        react_context: Some(&ctx),
        ..d
    };
    assert_eq!(step(&mm, &react, "ReAct's context"), None);
    let native = CompileOptions {
        tool_mode: ToolMode::Native,
        ..d
    };
    assert_eq!(step(&mm, &native, "native tool mode"), None);
    assert_eq!(step(&mm, &d, "the settled history outlives them"), Some(15));
    mm.set_view(Some(Progression::from_ids(order.iter().skip(3).copied())));
    assert_eq!(step(&mm, &d, "a curated view"), None);
    mm.set_view(None);
    mm.set_system(Message::system(SystemContent::new("OTHER")));
    assert_eq!(step(&mm, &d, "a new system message"), None);
    mm.add_message(Message::assistant("r7"));
    assert_eq!(step(&mm, &d, "growth"), Some(15));
    mm.remove_system();
    mm.add_message(Message::instruction(ins("q8")));
    assert_eq!(step(&mm, &d, "no system message"), None);
    mm.add_message(Message::assistant("r8"));
    assert_eq!(step(&mm, &d, "growth without one"), Some(17));
    mm.truncate(4);
    assert_eq!(step(&mm, &d, "truncated"), None);
    mm.add_message(Message::instruction(ins("q9")));
    assert_eq!(step(&mm, &d, "growth after truncation"), Some(4));
    mm.clear_messages();
    assert_eq!(step(&mm, &d, "cleared"), None);
}

/// Random growth and edits of a conversation, compiled with random options
/// after each step, always equal a cold compilation (a model check of the
/// render cache and its settled history; deterministic seeds).
#[test]
fn random_histories_compile_like_cold_ones() {
    // xorshift64*: enough for choosing steps.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            let r = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33;
            usize::try_from(r).unwrap() % n
        }
    }
    let blocks_a = vec!["memory: a".to_owned()];
    let blocks_b = vec!["memory: b".to_owned(), "more".to_owned()];
    let react = vec![json!({"k": "v"}), json!("shown once")];
    let mut resumed = 0;
    for seed in 1..=12u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut cache = RenderCache::new();
        let mut mm = MessageManager::new();
        let mut requests: Vec<Uuid> = Vec::new();
        for step in 0..300 {
            match rng.below(14) {
                0..=3 => {
                    let n = rng.below(4);
                    let content = match n {
                        0 => InstructionContent::default(),
                        1 => InstructionContent {
                            guidance: Some("g".into()),
                            prompt_context: vec![json!({"k": "v"})],
                            ..ins(&format!("q{step}"))
                        },
                        _ => ins(&format!("q{step}")),
                    };
                    mm.add_message(Message::instruction(content));
                }
                4..=6 => {
                    let text = if rng.below(5) == 0 {
                        String::new()
                    } else {
                        format!("r{step}")
                    };
                    mm.add_message(Message::assistant(text));
                }
                7 => {
                    let id = mm.add_message(Message::action_request("f", Map::new()));
                    requests.push(id);
                }
                8 => {
                    if let Some(&req) = requests.get(rng.below(requests.len().max(1))) {
                        if mm.messages().contains(&req) {
                            let _ = mm.add_action_response(req, Some(step.into()), None, None);
                        }
                    }
                }
                9 => {
                    let ids: Vec<Uuid> = mm.progression().iter().copied().collect();
                    if let Some(&id) = ids.get(rng.below(ids.len().max(1))) {
                        match &mut mm.get_mut(&id).unwrap().content {
                            MessageContent::Instruction(c) => {
                                c.prompt_context.push(json!(step));
                            }
                            MessageContent::AssistantResponse(a) => {
                                a.assistant_response.push('!');
                            }
                            _ => {}
                        }
                    }
                }
                10 => match rng.below(3) {
                    0 => {
                        mm.set_system(Message::system(SystemContent::new(format!("S{step}"))));
                    }
                    1 => {
                        mm.remove_system();
                    }
                    _ => {
                        let ids: Vec<Uuid> = mm.progression().iter().copied().collect();
                        let view = (rng.below(2) == 0)
                            .then(|| Progression::from_ids(ids.into_iter().skip(1)));
                        mm.set_view(view);
                    }
                },
                11 if rng.below(4) == 0 => {
                    let len = mm.len();
                    mm.truncate(rng.below(len.max(1)));
                }
                _ => {}
            }
            let order: Vec<Uuid> = mm.progression().iter().copied().collect();
            let tail: Vec<Uuid> = order.iter().skip(1).copied().collect();
            let mut opts = CompileOptions::default();
            match rng.below(10) {
                0 => opts.context_blocks = &blocks_a,
                1 => opts.context_blocks = &blocks_b,
                2 => opts.tool_mode = ToolMode::Native,
                3 => opts.react_context = Some(&react),
                4 => opts.progression = Some(&tail),
                _ => {}
            }
            let current = ins(&format!("now {step}"));
            same_as_cold(
                &mm,
                &current,
                &opts,
                &mut cache,
                &format!("seed {seed} step {step}"),
            );
            resumed += usize::from(cache.resumed_at.is_some());
        }
    }
    // The settled history is actually resumed, most of the time.
    assert!(resumed > 300, "resumed {resumed} times");
}

/// The settled history's JSON grows in place once no request holds it; a
/// request still held keeps the JSON it was made with, unchanged.
#[test]
fn the_settled_json_grows_in_place_and_a_held_request_keeps_its_own() {
    let mut cache = RenderCache::new();
    let mut mm = MessageManager::new();
    mm.set_system(Message::system(SystemContent::new("SYS")));
    let d = CompileOptions::default();
    let turn = |mm: &mut MessageManager, i: usize, cache: &mut RenderCache| {
        mm.add_message(Message::instruction(ins(&format!("q{i}"))));
        mm.add_message(Message::assistant(format!("r{i}")));
        compile_request_cached(mm, &ins("now"), &d, cache).unwrap()
    };
    let settled = |r: &ChatRequest| Arc::clone(r.settled.as_ref().expect("settled history"));
    turn(&mut mm, 0, &mut cache);
    let held = turn(&mut mm, 1, &mut cache);
    let held_len = settled(&held).messages().len();
    let held_prefix = held.settled_prefix().unwrap().1;
    let next = turn(&mut mm, 2, &mut cache);
    // `held` kept its JSON; `next` has a longer copy.
    assert_eq!(settled(&held).messages().len(), held_len);
    assert_eq!(held.settled_prefix().unwrap().1, held_prefix);
    assert_kept_json_is_the_messages(&held, "held");
    let list = settled(&next);
    assert!(list.messages().len() > held_len);
    assert!(!Arc::ptr_eq(&settled(&held), &list));
    let at = Arc::as_ptr(&list);
    drop((held, next, list));
    let third = turn(&mut mm, 3, &mut cache);
    assert_eq!(Arc::as_ptr(&settled(&third)), at);
    assert!(third.settled_prefix().unwrap().1 > held_prefix);
    assert_kept_json_is_the_messages(&third, "third");
}

/// A settled message's JSON is kept once, in the settled buffer, not also
/// in its slot; after an edit drops the settled history, each message's
/// JSON is made again and the request is still the messages'.
#[test]
fn a_settled_messages_json_is_kept_once() {
    let mut cache = RenderCache::new();
    let mut mm = MessageManager::new();
    mm.set_system(Message::system(SystemContent::new("SYS")));
    let d = CompileOptions::default();
    let mut replies = Vec::new();
    for i in 0..6 {
        mm.add_message(Message::instruction(ins(&format!("q{i}"))));
        replies.push(mm.add_message(Message::assistant(format!("r{i}"))));
        let request = compile_request_cached(&mm, &ins("now"), &d, &mut cache).unwrap();
        assert_kept_json_is_the_messages(&request, &format!("turn {i}"));
        assert_eq!(cache.settled_slots_with_json(), 0, "turn {i}");
    }
    reply_mut(&mut mm, replies[2]).push('!');
    let request = compile_request_cached(&mm, &ins("now"), &d, &mut cache).unwrap();
    assert_kept_json_is_the_messages(&request, "after the edit");
    assert_eq!(
        contents(&mm, &ins("now"), &d),
        Value::Array(request.messages.iter().map(|m| m.to_value()).collect())
    );
    assert_eq!(cache.settled_slots_with_json(), 0, "after the edit");
    let request = compile_request_cached(&mm, &ins("again"), &d, &mut cache).unwrap();
    assert!(request.settled_prefix().is_some());
    assert_kept_json_is_the_messages(&request, "the turn after");
}
