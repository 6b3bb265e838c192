//! Every stored record is read only from a JSON object. serde's derive
//! alone also reads a struct from a list, its items taken as the fields in
//! order: a file holding `[id, created_at, metadata, ...]` where a log, a
//! progression, a pile or a branch belongs was restored as if it had
//! named its keys.

use branch_core::log::Log;
use branch_core::pile::Pile;
use branch_core::progression::Progression;
use branch_core::{Branch, ToDictOptions};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

/// The object's values in order: the list the derive would have read.
fn as_list(v: &Value) -> Value {
    Value::Array(
        v.as_object()
            .expect("an object")
            .values()
            .cloned()
            .collect(),
    )
}

/// Reads `doc` from its value and from its text; both must refuse it, for
/// want of an object.
fn refused_both_ways<T: DeserializeOwned>(doc: &Value) {
    let from_value = serde_json::from_value::<T>(doc.clone()).err();
    let from_text = serde_json::from_str::<T>(&doc.to_string()).err();
    for e in [from_value, from_text] {
        let e = e.unwrap_or_else(|| panic!("{doc} was read"));
        assert!(
            e.to_string().contains("expected a JSON object"),
            "{doc}: {e}"
        );
    }
}

fn read_both_ways<T: DeserializeOwned>(doc: &Value) {
    serde_json::from_value::<T>(doc.clone()).unwrap();
    serde_json::from_str::<T>(&doc.to_string()).unwrap();
}

fn log() -> Log {
    let mut content = Map::new();
    content.insert("a".into(), json!(1));
    Log::new(content)
}

#[test]
fn a_log_a_progression_and_a_pile_written_as_lists_are_refused() {
    let log_doc = serde_json::to_value(log()).unwrap();
    read_both_ways::<Log>(&log_doc);
    refused_both_ways::<Log>(&as_list(&log_doc));

    let mut pile = Pile::new(true);
    pile.push(log());
    let pile_doc = serde_json::to_value(&pile).unwrap();
    read_both_ways::<Pile<Log>>(&pile_doc);
    refused_both_ways::<Pile<Log>>(&as_list(&pile_doc));
    // A log inside a pile, and the pile's progression object.
    let mut inner = pile_doc.clone();
    inner["collections"][0] = as_list(&inner["collections"][0]);
    refused_both_ways::<Pile<Log>>(&inner);

    let progression = Progression::from_ids([log().id()]);
    let progression_doc = serde_json::to_value(&progression).unwrap();
    read_both_ways::<Progression>(&progression_doc);
    refused_both_ways::<Progression>(&as_list(&progression_doc));
}

#[test]
fn a_branch_written_as_a_list_is_refused_from_its_text_as_from_its_value() {
    let doc = Branch::new()
        .unwrap()
        .to_dict(&ToDictOptions::default())
        .unwrap();
    let text = serde_json::to_vec(&doc).unwrap();
    assert!(Branch::from_json_slice(&text).is_ok());
    let list = as_list(&doc);
    assert!(Branch::from_dict(&list).is_err());
    let e = Branch::from_json_slice(&serde_json::to_vec(&list).unwrap())
        .expect_err("a list was read as a branch");
    assert!(e.to_string().contains("expected a JSON object"), "{e}");
}
