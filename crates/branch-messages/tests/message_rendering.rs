//! The `rendered` text of every message kind, against
//! `serialization/all_message_kinds` (`facts.rendered`).

mod support;

use branch_core::Branch;
use branch_core::message::MessageContent;
use branch_messages::{RenderedContent, render_message};
use serde_json::{Value, json};
use support::*;

#[test]
fn all_message_kinds() {
    let output = read_json(&fixtures_dir().join("serialization/all_message_kinds/output.json"));
    let mut branch = Branch::from_dict(&output["to_dict"]).expect("fixture branch loads");
    // The dict response format lives in memory only (it is never
    // serialized), so the restored instruction gets it back by hand.
    let ins_id = branch.messages().at(1).expect("an instruction").id();
    match &mut branch.msgs_mut().get_mut(&ins_id).expect("present").content {
        MessageContent::Instruction(c) => {
            c.response_format = Some(json!({"product": "int", "explanation": "str"}));
        }
        other => panic!("expected an instruction, got {:?}", other.kind()),
    }
    let rendered: Vec<Value> = branch
        .messages()
        .iter()
        .map(|m| match render_message(m).expect("renders") {
            RenderedContent::Text(t) => Value::String(t),
            RenderedContent::Parts(p) => Value::Array(p),
        })
        .collect();
    assert_eq!(Value::Array(rendered), output["facts"]["rendered"]);
}
