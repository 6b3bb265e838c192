//! What a stored branch document must hold: the identity every writer puts
//! there (`id`, `created_at`) and, when it names a class, the Branch class.
//! Anything less is refused with the JSON path at fault, never restored
//! as a new, invented conversation.

use branch_core::{Branch, BranchError, SerializationMode, ToDictOptions};
use serde_json::{Value, json};

fn path_of(e: BranchError) -> String {
    match e {
        BranchError::InvalidData { path, .. } => path,
        other => panic!("not a data error: {other}"),
    }
}

fn stored() -> Value {
    let b = Branch::builder().system("S").name("n").build().unwrap();
    b.to_dict(&ToDictOptions::default()).unwrap()
}

#[test]
fn an_empty_object_is_not_a_branch() {
    let e = Branch::from_dict(&json!({})).unwrap_err();
    assert!(e.to_string().contains("`id`"), "{e}");
    assert_eq!(path_of(e), "id");
    let e = Branch::from_json_slice(b"{}").unwrap_err();
    assert_eq!(path_of(e), "id");
}

#[test]
fn id_and_created_at_are_required_and_named() {
    let mut doc = stored();
    doc.as_object_mut().unwrap().shift_remove("id");
    assert_eq!(path_of(Branch::from_dict(&doc).unwrap_err()), "id");
    let mut doc = stored();
    doc["id"] = Value::Null;
    assert_eq!(path_of(Branch::from_dict(&doc).unwrap_err()), "id");
    let mut doc = stored();
    doc.as_object_mut().unwrap().shift_remove("created_at");
    let e = Branch::from_dict(&doc).unwrap_err();
    assert_eq!(path_of(e), "created_at");
    let bytes = serde_json::to_vec(&doc).unwrap();
    assert_eq!(
        path_of(Branch::from_json_slice(&bytes).unwrap_err()),
        "created_at"
    );
}

#[test]
fn another_class_is_refused() {
    let mut doc = stored();
    doc["metadata"]["lion_class"] = json!("lionagi.protocols.messages.system.System");
    let e = Branch::from_dict(&doc).unwrap_err();
    assert_eq!(path_of(e), "metadata.lion_class");
    let mut doc = stored();
    doc["metadata"]["lion_class"] = json!(7);
    assert_eq!(
        path_of(Branch::from_dict(&doc).unwrap_err()),
        "metadata.lion_class"
    );
}

#[test]
fn every_written_form_still_loads() {
    let b = Branch::builder().system("S").name("n").build().unwrap();
    for mode in [
        SerializationMode::Python,
        SerializationMode::Json,
        SerializationMode::Db,
    ] {
        let doc = b.to_dict(&ToDictOptions::mode(mode)).unwrap();
        let back = Branch::from_dict(&doc).unwrap();
        assert_eq!(back.id(), b.id());
    }
    // The short legacy class name and a document with no metadata.
    let mut doc = stored();
    doc["metadata"]["lion_class"] = json!("Branch");
    assert!(Branch::from_dict(&doc).is_ok());
    doc.as_object_mut().unwrap().shift_remove("metadata");
    assert!(Branch::from_dict(&doc).is_ok());
}

/// The bytes entry point reads what `from_dict` reads from the parsed
/// value, even where its one-pass reader cannot: db-mode metadata under a
/// custom key, and a key written twice (the value keeps the last).
#[test]
fn the_bytes_read_what_the_parsed_value_reads() {
    let b = Branch::builder().system("S").name("n").build().unwrap();
    let opts = ToDictOptions {
        db_meta_key: Some("meta".into()),
        ..ToDictOptions::mode(SerializationMode::Db)
    };
    let doc = b.to_dict(&opts).unwrap();
    assert!(doc.get("meta").is_some() && doc.get("node_metadata").is_none());
    let from_bytes = Branch::from_json_slice(&serde_json::to_vec(&doc).unwrap()).unwrap();
    let from_value = Branch::from_dict(&doc).unwrap();
    let plain = ToDictOptions::default();
    assert_eq!(
        from_bytes.to_dict(&plain).unwrap(),
        from_value.to_dict(&plain).unwrap()
    );
    assert_eq!(from_bytes.id(), b.id());

    // `name` twice: the last is the branch's name, read either way.
    let text = serde_json::to_string(&stored()).unwrap();
    let twice = text.replacen("{", "{\"name\":\"first\",", 1);
    let value: Value = serde_json::from_str(&twice).unwrap();
    let from_value = Branch::from_dict(&value).unwrap();
    let from_bytes = Branch::from_json_slice(twice.as_bytes()).unwrap();
    assert_eq!(from_value.name(), Some("n"));
    assert_eq!(
        from_bytes.to_dict(&plain).unwrap(),
        from_value.to_dict(&plain).unwrap()
    );
}

/// A document neither reading takes keeps the one-pass reader's error,
/// which says where in the text it failed.
#[test]
fn a_refused_document_is_refused_where_it_fails() {
    let mut doc = stored();
    doc["surprise"] = json!(1);
    let text = serde_json::to_string_pretty(&doc).unwrap();
    assert!(Branch::from_dict(&doc).is_err());
    let e = Branch::from_json_slice(text.as_bytes()).unwrap_err();
    assert!(
        e.to_string().contains("surprise") && e.to_string().contains("line"),
        "{e}"
    );
}
