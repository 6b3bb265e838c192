//! The curated view (`metadata.current_progression`) decides what is sent,
//! on a branch restored from clone/clone_current_progression_and_no_system
//! (view = [one, three] over one / two / three).

mod support;

use branch_core::Branch;
use branch_core::message::InstructionContent;
use branch_messages::{CompileOptions, RequestMessage, compile_request};
use serde_json::{Value, json};
use support::*;

#[test]
fn clone_current_progression_and_no_system() {
    let output = read_json(
        &fixtures_dir().join("clone/clone_current_progression_and_no_system/output.json"),
    );
    let branch = Branch::from_dict(&output["clone_to_dict"]).expect("fixture branch loads");
    assert_eq!(branch.messages().len(), 3);
    let current = InstructionContent {
        instruction: Some("four".into()),
        ..Default::default()
    };
    let got =
        compile_request(branch.msgs(), &current, &CompileOptions::default()).expect("compiles");
    let got = Value::Array(got.iter().map(RequestMessage::to_value).collect());
    // "two" is outside the view. The reference would also drop "three"
    // (an instruction right after an instruction); lionagi-rs sends it
    // (docs/compat.md M2).
    assert_eq!(
        got,
        json!([
            {"role": "user", "content": "Instruction: one"},
            {"role": "user", "content": "Instruction: three"},
            {"role": "user", "content": "Instruction: four"}
        ])
    );
}
