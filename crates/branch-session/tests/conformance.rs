//! Conformance with the reference fixtures `memory_session/*` and the
//! session parts of `get_operation/*`.

mod common;

use std::sync::Arc;

use branch_core::branch::OperationLookup;
use branch_core::model::ModelConfig;
use branch_core::{Branch, BranchError, MemoryItem, MemoryQuery, OperationError, ToDictOptions};
use branch_session::{BranchStore, Session, SessionError, SqliteStore, share};
use common::{Comparer, TempDir, fixture, masks};
use serde_json::{Value, json};

fn opts() -> ToDictOptions {
    ToDictOptions::default()
}

#[tokio::test]
async fn include_after_memory_read_keeps_own() {
    let expected = fixture("memory_session/include_after_memory_read_keeps_own/output.json");
    let mut s = Session::new().await.unwrap();
    let b = Branch::builder().system("S").build().unwrap();
    let m1 = Arc::clone(b.memory());
    let m2 = Arc::clone(b.memory());
    let h = share(b);
    s.include([h.clone()]).await.unwrap();
    let b = h.lock().await;
    let facts = json!({
        "same_instance_on_repeat_read": Arc::ptr_eq(&m1, &m2),
        "branch_memory_is_session_memory": Arc::ptr_eq(b.memory(), s.memory()),
        "branch_memory_is_private_store": Arc::ptr_eq(b.memory(), &m1),
    });
    assert_eq!(facts, expected["facts"]);
}

#[tokio::test]
async fn include_fresh_branch_adopts_session_memory() {
    let expected = fixture("memory_session/include_fresh_branch_adopts_session_memory/output.json");
    let mut s = Session::new().await.unwrap();
    let b = Branch::builder().system("S").build().unwrap();
    let had_private_before = b.has_memory();
    let h = share(b);
    s.include([h.clone()]).await.unwrap();
    let b = h.lock().await;
    b.memory()
        .store(MemoryItem::new("shared note").with_tags(["t"]))
        .await
        .unwrap();
    let q = MemoryQuery {
        text: Some("shared".into()),
        ..Default::default()
    };
    let found = s.memory().search(&q).await.unwrap();
    let default = s.default_branch().unwrap();
    let default_is_session = Arc::ptr_eq(default.lock().await.memory(), s.memory());
    let facts = json!({
        "had_private_store_before_include": had_private_before,
        "branch_memory_is_session_memory": Arc::ptr_eq(b.memory(), s.memory()),
        "session_sees_branch_item": found.iter().map(|i| i.content.clone()).collect::<Vec<_>>(),
        "default_branch_memory_is_session_memory": default_is_session,
    });
    let mut want = expected["facts"].clone();
    // The class name is a Python fact; the session's default store is an
    // InMemoryStore by construction (`Session::memory`).
    want.as_object_mut().unwrap().shift_remove("store_class");
    assert_eq!(facts, want);
}

#[tokio::test]
async fn memory_not_serialized() {
    let scenario = "memory_session/memory_not_serialized";
    let expected = fixture(&format!("{scenario}/output.json"));
    let m = masks(scenario);
    let b = Branch::builder().system("S").build().unwrap();
    b.memory()
        .store(MemoryItem::new("fact one").with_tags(["a"]))
        .await
        .unwrap();
    b.memory().store(MemoryItem::new("fact two")).await.unwrap();
    let d = b.to_dict(&opts()).unwrap();
    Comparer::new(&m).compare("/to_dict", &expected["to_dict"], &d);

    let restored = Branch::from_dict(&d).unwrap();
    assert_eq!(
        restored
            .memory()
            .search(&MemoryQuery::default())
            .await
            .unwrap()
            .len(),
        0
    );
    let source = b.memory().search(&MemoryQuery::default()).await.unwrap();
    let summary: Vec<Value> = source
        .iter()
        .map(|i| json!({"content": i.content, "tags": i.tags}))
        .collect();
    let want: Vec<Value> = expected["source_memory_items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| json!({"content": i["content"], "tags": i["tags"]}))
        .collect();
    assert_eq!(summary, want);
    assert_eq!(expected["restored_memory_items"], 0);

    // Durable storage keeps the same projection: the memory stays behind.
    let dir = TempDir::new("mem-not-serialized");
    let store = SqliteStore::open(dir.join("s.db")).await.unwrap();
    store.save(&b).await.unwrap();
    let loaded = store.load(b.id()).await.unwrap();
    assert_eq!(loaded.to_dict(&opts()).unwrap(), d);
    assert!(!loaded.has_memory());
}

#[tokio::test]
async fn to_dict_across_session_lifecycle() {
    let scenario = "memory_session/to_dict_across_session_lifecycle";
    let expected = fixture(&format!("{scenario}/output.json"));
    let m = masks(scenario);
    // `from_dict` never grants local-network access by itself; the scenario's
    // model is the mock on loopback, so grant it explicitly.
    let mut model = ModelConfig::from_dict(&expected["standalone"]["chat_model"]).unwrap();
    model.set_allow_local_network(true);
    let mut b = Branch::builder()
        .system("S")
        .chat_model(model)
        .build()
        .unwrap();
    let id = b.id();
    b.msgs_mut()
        .add_message(common::instruction("hello", "user", id));
    let d0 = b.to_dict(&opts()).unwrap();

    let mut s = Session::new().await.unwrap();
    let h = share(b);
    s.include([h.clone()]).await.unwrap();
    let _ = h.lock().await.memory();
    let d1 = h.lock().await.to_dict(&opts()).unwrap();
    s.remove(id).await.unwrap();
    let d2 = h.lock().await.to_dict(&opts()).unwrap();

    let mut cmp = Comparer::new(&m);
    cmp.compare("/standalone", &expected["standalone"], &d0);
    // Deviation (docs/compat.md): inclusion does not overwrite `user`.
    cmp.skip.push("/included/user".into());
    cmp.compare("/included", &expected["included"], &d1);
    cmp.compare("/removed", &expected["removed"], &d2);
    assert_eq!(d1["user"], Value::Null);

    let changed = |a: &Value, b: &Value| -> Vec<String> {
        a.as_object()
            .unwrap()
            .keys()
            .filter(|k| a.get(*k) != b.get(*k))
            .cloned()
            .collect()
    };
    assert!(
        changed(&d0, &d1).is_empty(),
        "inclusion changed {:?}",
        changed(&d0, &d1)
    );
    assert_eq!(
        serde_json::to_value(changed(&d0, &d2)).unwrap(),
        expected["changed_top_level_keys"]["standalone_vs_removed"]
    );
}

async fn summarize(args: Value) -> Result<Value, OperationError> {
    Ok(Value::String(format!(
        "summary of '{}'",
        args["text"].as_str().unwrap_or("")
    )))
}

#[tokio::test]
async fn get_operation_attribute_first_lookup_in_a_session() {
    let expected = fixture("get_operation/attribute_first_lookup/output.json");
    let mut s = Session::new().await.unwrap();
    let b = Branch::builder().system("S").build().unwrap();
    let id = b.id();
    let h = share(b);
    s.include([h.clone()]).await.unwrap();
    s.register_operation("chat", |_| async { Ok(json!("registered chat")) }, false)
        .unwrap();
    s.register_operation("name", |_| async { Ok(json!("registered name")) }, false)
        .unwrap();
    s.register_operation("summarize", summarize, false).unwrap();

    let b = h.lock().await;
    let look = expected["lookups"].as_object().unwrap();
    // chat / name / user: the branch attribute wins over the registry.
    for key in ["chat", "name", "user"] {
        assert_eq!(look[key]["is_registered_function"], false);
    }
    assert!(matches!(
        b.get_operation("chat"),
        Some(OperationLookup::Builtin(_))
    ));
    // `name` is unset: the field still shadows the registered "name", and
    // the lookup finds nothing, as in the reference.
    assert_eq!(look["name"]["is_none"], true);
    assert!(b.get_operation("name").is_none());
    // The reference's `user` is the session id because inclusion overwrote
    // it; here `user` stays unset (compat.md §7), so it resolves to nothing
    // and still shadows the registry.
    assert!(b.get_operation("user").is_none());
    assert_eq!(look["summarize"]["is_registered_function"], true);
    assert!(matches!(
        b.get_operation("summarize"),
        Some(OperationLookup::Registered(_))
    ));
    assert_eq!(look["does_not_exist"]["is_none"], true);
    assert!(b.get_operation("does_not_exist").is_none());
    drop(b);

    let out = s
        .run_operation("summarize", Some(id), json!({"text": "abc"}))
        .await
        .unwrap();
    assert_eq!(out, expected["run_operation_summarize"]["value"]);
    let err = s
        .run_operation("nope", Some(id), Value::Null)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SessionError::UnknownOperation(n) if n == "nope"),
        "{err}"
    );
    assert_eq!(expected["run_operation_unknown"]["ok"], false);
}

#[tokio::test]
async fn get_operation_duplicate_register_fails_through_session() {
    let expected = fixture("get_operation/duplicate_register_fails/output.json");
    assert_eq!(expected["session_duplicate"]["ok"], false);
    let s = Session::new().await.unwrap();
    s.register_operation("x", summarize, false).unwrap();
    let err = s.register_operation("x", summarize, false).unwrap_err();
    assert!(
        matches!(&err, SessionError::Branch(BranchError::DuplicateOperation(n)) if n == "x"),
        "{err}"
    );
    // update=true replaces, keeping one entry.
    s.register_operation("x", |_| async { Ok(json!("other")) }, true)
        .unwrap();
    let names = s.operations().read().unwrap().names().to_vec();
    assert_eq!(names, ["x"]);
    let out = s.run_operation("x", None, Value::Null).await.unwrap();
    assert_eq!(out, "other");
}
