//! A proptest strategy for branches: any system prompt, user, name and
//! metadata, and a history of every message kind with arbitrary text,
//! JSON values and metadata, plus log entries. Shared by the round-trip
//! property tests (to_dict/from_dict, the store, failed turns).
#![allow(dead_code)]

use branch_core::message::{ActionResponseContent, InstructionContent, MessageContent};
use branch_core::{Branch, Log, Message, Participant};
use proptest::prelude::*;
use serde_json::{Map, Value};

/// Keys the aggregate keeps typed entries under; arbitrary metadata uses
/// others.
const RESERVED: &[&str] = &["lion_class", "current_progression", "node_metadata"];

/// Any text, with the characters that trouble encoders over-represented.
pub fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9 ]{0,12}",
        any::<String>(),
        "[\"\\\\\n\t\u{0}\u{7f}é😀{}\\[\\]:,]{0,8}",
    ]
}

/// Any JSON value with finite numbers, a few levels deep.
pub fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((text(), inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

pub fn json_map() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::vec((text(), json_value()), 0..3).prop_map(|kv| {
        kv.into_iter()
            .filter(|(k, _)| !RESERVED.contains(&k.as_str()))
            .collect()
    })
}

fn participant() -> impl Strategy<Value = Option<Participant>> {
    prop_oneof![
        Just(None),
        "[a-z]{1,8}".prop_map(|s| Some(Participant::from(s))),
        any::<u128>().prop_map(|n| Some(Participant::Id(uuid::Uuid::from_u128(n)))),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    let content = prop_oneof![
        (
            prop::option::of(json_value()),
            prop::option::of(json_value()),
            prop::collection::vec(json_value(), 0..3),
            prop::option::of(text()),
        )
            .prop_map(|(instruction, guidance, prompt_context, plain_content)| {
                MessageContent::Instruction(Box::new(InstructionContent {
                    instruction,
                    guidance,
                    prompt_context,
                    plain_content,
                    ..InstructionContent::default()
                }))
            }),
        text().prop_map(|t| Message::assistant(t).content),
        (text(), json_map()).prop_map(|(f, args)| Message::action_request(f, args).content),
        (
            text(),
            json_map(),
            prop::option::of(json_value()),
            prop::option::of(text())
        )
            .prop_map(|(function, arguments, output, error)| {
                MessageContent::ActionResponse(Box::new(ActionResponseContent {
                    function,
                    arguments,
                    output,
                    action_request_id: None,
                    error,
                }))
            }),
    ];
    (content, json_map(), participant(), participant()).prop_map(
        |(content, metadata, sender, recipient)| {
            let mut m = Message::new(content)
                .with_sender(sender)
                .with_recipient(recipient);
            m.element.metadata.extend(metadata);
            m
        },
    )
}

/// A branch with up to `max_messages` messages after its system prompt.
pub fn branch(max_messages: usize) -> impl Strategy<Value = Branch> {
    (
        prop::option::of(text()),
        prop::option::of("[a-z]{1,8}"),
        prop::option::of(text()),
        json_map(),
        prop::collection::vec(message(), 0..=max_messages),
        prop::collection::vec(json_map(), 0..3),
    )
        .prop_map(|(system, user, name, metadata, messages, logs)| {
            let mut builder = Branch::builder().metadata(metadata);
            if let Some(s) = system {
                builder = builder.system(s);
            }
            if let Some(u) = user {
                builder = builder.user(u);
            }
            if let Some(n) = name {
                builder = builder.name(n);
            }
            let mut b = builder.build().expect("a generated branch builds");
            for m in messages {
                b.msgs_mut().add_message(m);
            }
            for l in logs {
                b.log(Log::new(l));
            }
            b
        })
}
