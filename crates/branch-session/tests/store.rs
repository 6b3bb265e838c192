//! The store contract, run over SQLite on real files and over PostgreSQL
//! (a fresh schema in `LIONAGI_PG_URL`'s database): exact round trips,
//! turns, versions and conflicts, catching up, list/delete, durable memory
//! and reference-file transfer. Then what is SQLite's own: schema
//! versions in the file, migrations, hostile files.

mod common;

use std::path::Path;

use branch_core::log::DataLoggerConfig;
use branch_core::model::ModelConfig;
use branch_core::{
    Branch, Log, MemoryItem, MemoryQuery, MemoryStore, Message, Progression, ToDictOptions,
};
use branch_session::{
    BranchStore, SqliteOptions, SqliteStore, StoreError, export_file, import_file,
    read_branch_file, read_branch_file_capped,
};
use common::TempDir;
use common::stores::UnderTest;
use serde_json::{Map, Value, json};
use uuid::Uuid;

fn full() -> ToDictOptions {
    ToDictOptions {
        include_log_config: true,
        include_processor_config: true,
        ..ToDictOptions::default()
    }
}

async fn roundtrip<S: UnderTest>(store: &S, b: &Branch) -> Branch {
    store.save(b).await.unwrap();
    let loaded = store.load(b.id()).await.unwrap();
    assert_eq!(
        loaded.to_dict(&full()).unwrap(),
        b.to_dict(&full()).unwrap()
    );
    assert_eq!(
        loaded.to_dict(&ToDictOptions::default()).unwrap(),
        b.to_dict(&ToDictOptions::default()).unwrap()
    );
    loaded
}

async fn save_and_load_reproduce_to_dict<S: UnderTest>(store: S) {
    roundtrip(&store, &Branch::new().unwrap()).await;
    roundtrip(&store, &common::conversation(4)).await;

    // A replaced system prompt: collections and progression orders differ.
    let mut b = common::conversation(2);
    b.msgs_mut()
        .set_system(Message::system(branch_core::message::SystemContent::new(
            "new rules",
        )));
    let d = b.to_dict(&ToDictOptions::default()).unwrap();
    assert_ne!(
        d["messages"]["collections"][0]["id"],
        d["messages"]["progression"]["order"][0]
    );
    roundtrip(&store, &b).await;

    // Logs, a log configuration, rate limits and a distinct parse model.
    let config = DataLoggerConfig {
        persist_dir: "/var/lib/agent/logs".into(),
        capacity: Some(7),
        ..Default::default()
    };
    let parse = ModelConfig::builder()
        .provider("openai")
        .model("gpt-4.1-nano")
        .limit_requests(5)
        .build()
        .unwrap();
    let mut b = Branch::builder()
        .system("S")
        .name("logged")
        .log_config(config)
        .parse_model(parse)
        .build()
        .unwrap();
    let mut content = Map::new();
    content.insert("event".into(), json!("call"));
    b.log(Log::new(content));
    let loaded = roundtrip(&store, &b).await;
    assert_eq!(loaded.logs().len(), 1);
    assert_eq!(loaded.name(), Some("logged"));

    // A curated view.
    let mut b = common::conversation(3);
    let keep: Vec<Uuid> = b.messages().iter().step_by(2).map(|m| m.id()).collect();
    b.msgs_mut().set_view(Some(Progression::from_ids(keep)));
    roundtrip(&store, &b).await;
}

async fn resaving_after_edits_stores_the_new_state<S: UnderTest>(store: S) {
    let mut b = common::conversation(4);
    store.save(&b).await.unwrap();
    // Reorder (a new system prompt goes first), edit, drop and add.
    b.msgs_mut()
        .set_system(Message::system(branch_core::message::SystemContent::new(
            "v2",
        )));
    let third = b.messages().iter().nth(2).unwrap().id();
    b.msgs_mut().get_mut(&third).unwrap().channel = Some("edited".into());
    b.msgs_mut().truncate(6);
    b.msgs_mut().add_message(Message::assistant("new tail"));
    store.save(&b).await.unwrap();
    let loaded = store.load(b.id()).await.unwrap();
    assert_eq!(
        loaded.to_dict(&full()).unwrap(),
        b.to_dict(&full()).unwrap()
    );
    assert_eq!(store.list().await.unwrap()[0].message_count, 7);
    assert!(store.consistency().await.is_empty());
    // Saving an unchanged branch again changes nothing.
    store.save(&b).await.unwrap();
    assert_eq!(
        store.load(b.id()).await.unwrap().to_dict(&full()).unwrap(),
        b.to_dict(&full()).unwrap()
    );
}

/// Every branch the reference wrote in the fixtures survives the store.
async fn every_fixture_branch_survives_the_store<S: UnderTest>(store: S) {
    fn collect(v: &Value, out: &mut Vec<Value>) {
        match v {
            Value::Object(m) => {
                let class = m
                    .get("metadata")
                    .or_else(|| m.get("node_metadata"))
                    .and_then(|x| x.get("lion_class"));
                if class == Some(&json!("lionagi.session.branch.Branch")) {
                    out.push(v.clone());
                }
                m.values().for_each(|x| collect(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| collect(x, out)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    let root = common::fixtures_dir();
    for cat in std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
    {
        for sc in std::fs::read_dir(cat.path()).unwrap().flatten() {
            for name in ["output.json", "input.json"] {
                let p = sc.path().join(name);
                if let Ok(text) = std::fs::read_to_string(&p) {
                    collect(&serde_json::from_str(&text).unwrap(), &mut found);
                }
            }
        }
    }
    assert!(
        found.len() >= 20,
        "only {} branch documents in the fixtures",
        found.len()
    );
    let mut checked = 0;
    for doc in found {
        let Ok(b) = Branch::from_dict(&doc) else {
            continue;
        };
        roundtrip(&store, &b).await;
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} fixture branches load");
}

async fn append_turn_matches_the_live_branch<S: UnderTest>(store: S) {
    let mut live = common::conversation(1);
    let keep: Vec<Uuid> = live.messages().iter().map(|m| m.id()).collect();
    live.msgs_mut().set_view(Some(Progression::from_ids(keep)));
    store.save(&live).await.unwrap();
    let id = live.id();

    // Turn 1: instruction, tool call, its result (which completes the
    // request in place), reply.
    let mut turn = Vec::new();
    turn.push(
        live.msgs_mut()
            .add_message(common::instruction("look it up", "user", id)),
    );
    let req = live
        .msgs_mut()
        .add_message(Message::action_request("search", Map::new()));
    turn.push(req);
    turn.push(
        live.msgs_mut()
            .add_action_response(req, Some(json!({"hits": 2})), None, None)
            .unwrap(),
    );
    turn.push(live.msgs_mut().add_message(Message::assistant("found two")));
    turn.insert(2, req); // the request again, now linked to its response
    let msgs: Vec<Message> = turn
        .iter()
        .map(|i| live.messages().get(i).unwrap().clone())
        .collect();
    store.append_turn(id, &msgs).await.unwrap();
    let loaded = store.load(id).await.unwrap();
    assert_eq!(
        loaded.to_dict(&full()).unwrap(),
        live.to_dict(&full()).unwrap()
    );

    // Turn 2 edits a message of turn 1 in place and appends one.
    let edited = {
        let m = live.msgs_mut().get_mut(&turn[4]).unwrap();
        m.channel = Some("edited".into());
        m.clone()
    };
    let new_id = live.msgs_mut().add_message(Message::assistant("more"));
    let new = live.messages().get(&new_id).unwrap().clone();
    store.append_turn(id, &[edited, new]).await.unwrap();
    let loaded = store.load(id).await.unwrap();
    assert_eq!(
        loaded.to_dict(&full()).unwrap(),
        live.to_dict(&full()).unwrap()
    );
    assert_eq!(
        store.list().await.unwrap()[0].message_count,
        live.msgs().len() as u64
    );
    assert!(store.consistency().await.is_empty());
}

async fn appending_to_an_empty_branch_keeps_a_stable_pile<S: UnderTest>(store: S) {
    let mut live = Branch::new().unwrap();
    store.save(&live).await.unwrap();
    let m_id = live.msgs_mut().add_message(Message::assistant("hi"));
    let m = live.messages().get(&m_id).unwrap().clone();
    store.append_turn(live.id(), &[m]).await.unwrap();
    let a = store
        .load(live.id())
        .await
        .unwrap()
        .to_dict(&full())
        .unwrap();
    let b = store
        .load(live.id())
        .await
        .unwrap()
        .to_dict(&full())
        .unwrap();
    assert_eq!(a, b);
    assert_eq!(a, live.to_dict(&full()).unwrap());
}

async fn refused_turns_write_nothing<S: UnderTest>(store: S) {
    let b = common::conversation(1);
    store.save(&b).await.unwrap();
    let before = store.load(b.id()).await.unwrap().to_dict(&full()).unwrap();
    let sys = Message::system(branch_core::message::SystemContent::new("x"));
    let err = store
        .append_turn(b.id(), &[Message::assistant("a"), sys])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::SystemInTurn { .. }), "{err}");
    let missing = Uuid::new_v4();
    let err = store
        .append_turn(missing, &[Message::assistant("a")])
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::NotFound(x) if x == missing),
        "{err}"
    );
    assert_eq!(
        store.load(b.id()).await.unwrap().to_dict(&full()).unwrap(),
        before
    );
    assert!(matches!(
        store.load(missing).await,
        Err(StoreError::NotFound(_))
    ));
}

async fn list_and_delete<S: UnderTest>(store: S) {
    let a = Branch::builder().name("a").build().unwrap();
    let b = common::conversation(2);
    store.save(&a).await.unwrap();
    store.save(&b).await.unwrap();
    store.save(&a).await.unwrap();
    let list = store.list().await.unwrap();
    assert_eq!(
        list.iter().map(|s| s.id).collect::<Vec<_>>(),
        [a.id(), b.id()]
    );
    assert_eq!(list[0].name.as_deref(), Some("a"));
    assert_eq!(list[1].message_count, 5);
    assert!(store.delete(b.id()).await.unwrap());
    assert!(!store.delete(b.id()).await.unwrap());
    assert_eq!(store.list().await.unwrap().len(), 1);
    assert!(store.consistency().await.is_empty());
}

/// Each stored row carries the first 8 bytes of its body's SHA-256; a row
/// stored with another digest (by a build that hashed otherwise) is
/// rewritten on the next save, with its body unchanged.
#[tokio::test]
async fn rows_carry_their_bodys_sha256_and_other_digests_are_rewritten() {
    use sha2::Digest;
    fn rows(path: &Path) -> Vec<(String, i64, String)> {
        let c = rusqlite::Connection::open(path).unwrap();
        let mut stmt = c
            .prepare("SELECT msg_id, hash, body FROM messages ORDER BY seq")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }
    fn digest(body: &str) -> i64 {
        let d = sha2::Sha256::digest(body.as_bytes());
        i64::from_le_bytes(d[..8].try_into().unwrap())
    }
    let dir = TempDir::new("digest");
    let path = dir.join("s.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let b = common::conversation(3);
    store.save(&b).await.unwrap();
    let saved = rows(&path);
    assert_eq!(saved.len(), b.messages().len());
    for (id, hash, body) in &saved {
        assert_eq!(*hash, digest(body), "message {id}");
    }
    let (old_id, _, _) = &saved[1];
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE messages SET hash = 12345 WHERE msg_id = ?1",
            [old_id],
        )
        .unwrap();
    store.save(&b).await.unwrap();
    assert_eq!(rows(&path), saved);
    assert_eq!(
        store.load(b.id()).await.unwrap().to_dict(&full()).unwrap(),
        b.to_dict(&full()).unwrap()
    );
}

fn set_version(path: &Path, v: i64) {
    let c = rusqlite::Connection::open(path).unwrap();
    c.pragma_update(None, "user_version", v).unwrap();
}

#[tokio::test]
async fn a_newer_schema_is_refused_and_left_alone() {
    let dir = TempDir::new("newer");
    let path = dir.join("s.db");
    drop(SqliteStore::open(&path).await.unwrap());
    set_version(&path, 99);
    let err = SqliteStore::open(&path).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::NewerSchema {
                found: 99,
                supported: 4,
                ..
            }
        ),
        "{err}"
    );
    let c = rusqlite::Connection::open(&path).unwrap();
    assert_eq!(
        c.pragma_query_value(None, "user_version", |r| r.get::<_, i64>(0))
            .unwrap(),
        99
    );
}

/// Any connection count opens a working store: 0 is one connection, and
/// one past what a semaphore holds (it panicked) is as many as asked for.
#[tokio::test]
async fn any_connection_count_opens_a_working_store() {
    let dir = TempDir::new("connections");
    for (i, max_connections) in [0, usize::MAX].into_iter().enumerate() {
        let opts = SqliteOptions {
            max_connections,
            ..SqliteOptions::default()
        };
        let store = SqliteStore::open_with(dir.join(&format!("s{i}.db")), opts)
            .await
            .unwrap();
        let mut b = Branch::new().unwrap();
        b.msgs_mut().add_message(Message::assistant("kept"));
        roundtrip(&store, &b).await;
    }
}

#[tokio::test]
async fn migrates_from_version_0() {
    let dir = TempDir::new("v0");
    let path = dir.join("s.db");
    // An existing, empty SQLite file (version 0) with an unrelated table.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE other (x);")
        .unwrap();
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(
        store.schema_version().await.unwrap(),
        SqliteStore::SCHEMA_VERSION
    );
    roundtrip(&store, &common::conversation(1)).await;
    // Opening again is a no-op.
    drop(store);
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.list().await.unwrap().len(), 1);
}

fn write_v1(path: &Path, docs: &[(String, Option<String>, String)]) {
    let c = rusqlite::Connection::open(path).unwrap();
    c.execute_batch("CREATE TABLE branches (id TEXT PRIMARY KEY NOT NULL, name TEXT, doc TEXT NOT NULL); PRAGMA user_version = 1;").unwrap();
    for (id, name, doc) in docs {
        c.execute(
            "INSERT INTO branches (id, name, doc) VALUES (?1, ?2, ?3)",
            rusqlite::params![id, name, doc],
        )
        .unwrap();
    }
}

#[tokio::test]
async fn migrates_from_version_1_documents() {
    let dir = TempDir::new("v1");
    let path = dir.join("s.db");
    let mut a = common::conversation(3);
    a.logger_mut().log(call_log(0));
    a.logger_mut().log(call_log(1));
    let b = Branch::builder()
        .name("second")
        .system("S")
        .build()
        .unwrap();
    let docs: Vec<_> = [&a, &b]
        .iter()
        .map(|x| {
            (
                x.id().to_string(),
                x.name().map(str::to_owned),
                x.to_dict(&full()).unwrap().to_string(),
            )
        })
        .collect();
    write_v1(&path, &docs);
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(
        store.schema_version().await.unwrap(),
        SqliteStore::SCHEMA_VERSION
    );
    let ids: Vec<Uuid> = store.list().await.unwrap().iter().map(|s| s.id).collect();
    assert_eq!(ids, [a.id(), b.id()]);
    for x in [&a, &b] {
        let loaded = store.load(x.id()).await.unwrap();
        assert_eq!(
            loaded.to_dict(&full()).unwrap(),
            x.to_dict(&full()).unwrap()
        );
    }
    // The logs are rows, not inline in the skeleton.
    assert_eq!(log_rows(&path), 2);
    // The new tables work: turns and memory.
    store
        .append_turn(a.id(), &[Message::assistant("after migration")])
        .await
        .unwrap();
    store.memory("m").store(MemoryItem::new("x")).await.unwrap();
    assert!(store.consistency().await.is_empty());
}

fn log_rows(path: &Path) -> i64 {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row("SELECT COUNT(*) FROM logs", [], |r| r.get(0))
        .unwrap()
}

/// A version 3 store kept a branch's logs inline in its skeleton: the
/// migration moves them to rows, and the branch loads as it was and takes
/// a recorded turn's log after them.
#[tokio::test]
async fn migrates_inline_logs_of_version_3_to_rows() {
    let dir = TempDir::new("v3");
    let path = dir.join("s.db");
    let mut live = common::conversation(2);
    for n in 0..3 {
        live.logger_mut().log(call_log(n));
    }
    let store = SqliteStore::open(&path).await.unwrap();
    store.save(&live).await.unwrap();
    drop(store);
    // Back to version 3's layout: the logs inline, no logs table.
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        let skeleton: String = c
            .query_row("SELECT skeleton FROM branches", [], |r| r.get(0))
            .unwrap();
        let mut skeleton: Value = serde_json::from_str(&skeleton).unwrap();
        skeleton["logs"] = live.to_dict(&full()).unwrap()["logs"].clone();
        c.execute(
            "UPDATE branches SET skeleton = ?1",
            [serde_json::to_string(&skeleton).unwrap()],
        )
        .unwrap();
        c.execute_batch("DROP TABLE logs; PRAGMA user_version = 3;")
            .unwrap();
    }
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.schema_version().await.unwrap(), 4);
    assert_eq!(log_rows(&path), 3);
    let (mut loaded, version) = store.load_versioned(live.id()).await.unwrap();
    assert_eq!(
        loaded.to_dict(&full()).unwrap(),
        live.to_dict(&full()).unwrap()
    );
    loaded.logger_mut().log(call_log(3));
    let m = loaded.msgs_mut().add_message(Message::assistant("after"));
    let turn = [loaded.messages().get(&m).unwrap().clone()];
    store.record_turn_at(&loaded, version, &turn).await.unwrap();
    assert_eq!(log_rows(&path), 4);
    assert_eq!(
        store
            .load(live.id())
            .await
            .unwrap()
            .to_dict(&full())
            .unwrap(),
        loaded.to_dict(&full()).unwrap()
    );
    assert!(store.consistency().await.is_empty());
}

#[tokio::test]
async fn a_failed_migration_changes_nothing() {
    let dir = TempDir::new("v1-bad");
    let path = dir.join("s.db");
    let good = common::conversation(1);
    write_v1(
        &path,
        &[
            (
                good.id().to_string(),
                None,
                good.to_dict(&full()).unwrap().to_string(),
            ),
            ("bad".into(), None, "{\"messages\": 3}".into()),
        ],
    );
    let err = SqliteStore::open(&path).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Corrupt { what, .. } if what.contains("bad")),
        "{err}"
    );
    let c = rusqlite::Connection::open(&path).unwrap();
    assert_eq!(
        c.pragma_query_value(None, "user_version", |r| r.get::<_, i64>(0))
            .unwrap(),
        1
    );
    let n: i64 = c
        .query_row("SELECT COUNT(*) FROM branches", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 2);
}

async fn durable_memory_answers_like_the_in_process_store<S: UnderTest>(store: S) {
    let durable = store.memory_at("session-1");
    let local = branch_core::InMemoryStore::new();
    let mut meta = Map::new();
    meta.insert("branch_id".into(), json!("b1"));
    let mut first = MemoryItem::new("Hello World").with_tags(["greeting", "x"]);
    first.element.metadata = meta.clone().into();
    let items = vec![
        first.clone(),
        MemoryItem::new(json!({"k": "hello there"})).with_tags(["y"]),
        MemoryItem::new("unrelated").with_tags(["x"]),
    ];
    for it in &items {
        durable.store(it.clone()).await.unwrap();
        local.store(it.clone()).await.unwrap();
    }
    // Replacing keeps the position.
    let mut again = first.clone();
    again.content = json!("hello again");
    durable.store(again.clone()).await.unwrap();
    local.store(again).await.unwrap();

    let queries = [
        MemoryQuery::default(),
        MemoryQuery {
            text: Some("HELLO".into()),
            ..Default::default()
        },
        MemoryQuery {
            tags: Some(vec!["x".into()]),
            ..Default::default()
        },
        MemoryQuery {
            filters: Some(meta),
            ..Default::default()
        },
        MemoryQuery {
            limit: 1,
            ..Default::default()
        },
        MemoryQuery {
            limit: 0,
            ..Default::default()
        },
    ];
    for q in &queries {
        assert_eq!(
            durable.search(q).await.unwrap(),
            local.search(q).await.unwrap(),
            "{q:?}"
        );
    }
    assert_eq!(
        durable.retrieve(items[1].id()).await.unwrap(),
        Some(items[1].clone())
    );
    assert_eq!(durable.retrieve(Uuid::new_v4()).await.unwrap(), None);
    assert!(
        store
            .memory_at("other")
            .search(&MemoryQuery::default())
            .await
            .unwrap()
            .is_empty()
    );

    // It survives reopening, and serves a branch as its memory.
    drop(durable);
    let store = store.reopen().await;
    let b = Branch::builder()
        .memory(store.memory_at("session-1"))
        .build()
        .unwrap();
    assert_eq!(
        b.memory()
            .search(&MemoryQuery::default())
            .await
            .unwrap()
            .len(),
        3
    );
}

async fn reference_files_import_and_export<S: UnderTest>(store: S) {
    let dir = TempDir::new("files");
    let reference = common::fixture("memory_session/to_dict_across_session_lifecycle/output.json")
        ["standalone"]
        .clone();
    let input = dir.join("in.json");
    std::fs::write(&input, serde_json::to_vec_pretty(&reference).unwrap()).unwrap();
    let id = import_file(&store, &input).await.unwrap();
    assert_eq!(id.to_string(), reference["id"].as_str().unwrap());
    let output = dir.join("out.json");
    export_file(&store, id, &output).await.unwrap();
    let exported: Value = serde_json::from_slice(&std::fs::read(&output).unwrap()).unwrap();
    let expected = Branch::from_dict(&reference)
        .unwrap()
        .to_dict(&ToDictOptions::default())
        .unwrap();
    assert_eq!(exported, expected);
    // Only loopback access differs from the reference file: from_dict never
    // grants it by itself.
    let mut want = reference.clone();
    want["chat_model"]["endpoint"]["config"]["allow_local_network"] = json!(false);
    assert_eq!(exported, want);

    let bad = dir.join("bad.json");
    std::fs::write(&bad, b"{\"messages\": 3}").unwrap();
    assert!(matches!(
        import_file(&store, &bad).await,
        Err(StoreError::InvalidFile { .. })
    ));
    assert!(matches!(
        import_file(&store, dir.join("none.json")).await,
        Err(StoreError::Io { op: "read", .. })
    ));
    assert!(matches!(
        export_file(&store, Uuid::new_v4(), &output).await,
        Err(StoreError::NotFound(_))
    ));
}

/// A branch file is read up to its cap and no further, and only a regular
/// file is read: a larger file, a directory, a device that never ends and
/// a FIFO no one writes to are each refused at once, naming the file.
#[tokio::test]
async fn branch_files_are_read_within_their_cap() {
    let dir = TempDir::new("capped");
    let file = dir.join("b.json");
    let b = Branch::builder().system("S").build().unwrap();
    let bytes = serde_json::to_vec(&b.to_dict(&ToDictOptions::default()).unwrap()).unwrap();
    std::fs::write(&file, &bytes).unwrap();
    let len = u64::try_from(bytes.len()).unwrap();
    let read = read_branch_file_capped(&file, len).await.unwrap();
    assert_eq!(read.id(), b.id());
    let refused = |e: Result<Branch, StoreError>, kind: std::io::ErrorKind, path: &Path| match e {
        Err(StoreError::Io {
            op: "read",
            path: p,
            source,
        }) => {
            assert_eq!(source.kind(), kind, "{source}");
            assert_eq!(p, path);
            source.to_string()
        }
        other => panic!("{:?}", other.map(|b| b.id())),
    };
    let why = refused(
        read_branch_file_capped(&file, len - 1).await,
        std::io::ErrorKind::FileTooLarge,
        &file,
    );
    assert!(
        why.contains(&format!("more than {} bytes", len - 1)),
        "{why}"
    );
    refused(
        read_branch_file(dir.path()).await,
        std::io::ErrorKind::InvalidInput,
        dir.path(),
    );
    #[cfg(target_os = "linux")]
    {
        let zero = Path::new("/dev/zero");
        refused(
            read_branch_file(zero).await,
            std::io::ErrorKind::InvalidInput,
            zero,
        );
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        refused(
            read_branch_file(&fifo).await,
            std::io::ErrorKind::InvalidInput,
            &fifo,
        );
    }
}

/// Versions count writes; a write based on an old version changes nothing.
async fn versions_detect_concurrent_writers<S: UnderTest>(store: S) {
    let mut live = common::conversation(1);
    store.save(&live).await.unwrap();
    let id = live.id();
    let (_, v1) = store.load_versioned(id).await.unwrap();
    assert_eq!(v1, 1);
    let m = live.msgs_mut().add_message(Message::assistant("first"));
    let first = live.messages().get(&m).unwrap().clone();
    let v2 = store.append_turn_at(id, v1, &[first]).await.unwrap();
    assert_eq!(v2, 2);
    let before = store.load(id).await.unwrap().to_dict(&full()).unwrap();
    // Another writer based on version 1 loses, and writes nothing.
    let err = store
        .append_turn_at(id, v1, &[Message::assistant("stale")])
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Conflict { branch, expected: 1, found: 2 } if branch == id),
        "{err}"
    );
    assert!(err.to_string().contains("nothing was written"), "{err}");
    assert_eq!(
        store.load(id).await.unwrap().to_dict(&full()).unwrap(),
        before
    );
    let (loaded, v) = store.load_versioned(id).await.unwrap();
    assert_eq!(v, 2);
    assert_eq!(
        loaded.to_dict(&full()).unwrap(),
        live.to_dict(&full()).unwrap()
    );
    // Every write bumps it: unversioned turns and whole saves too.
    store
        .append_turn(id, &[Message::assistant("unversioned")])
        .await
        .unwrap();
    store.save(&loaded).await.unwrap();
    let summary = store.list().await.unwrap();
    assert_eq!(summary[0].version, 4);
    assert!(matches!(
        store.append_turn_at(Uuid::new_v4(), 0, &[]).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(store.consistency().await.is_empty());
}

/// A whole save on a version: metadata and messages written when the
/// stored branch is still at that version, nothing written otherwise.
async fn save_at_writes_only_on_the_expected_version<S: UnderTest>(store: S) {
    let mut live = common::conversation(1);
    let id = live.id();
    assert!(matches!(
        store.save_at(&live, 1).await,
        Err(StoreError::NotFound(missing)) if missing == id
    ));
    store.save(&live).await.unwrap();
    let (_, v1) = store.load_versioned(id).await.unwrap();
    live.metadata_mut()
        .insert("paused".into(), serde_json::json!({"calls": 2}));
    live.msgs_mut().add_message(Message::assistant("mine"));
    let v2 = store.save_at(&live, v1).await.unwrap();
    assert_eq!(v2, v1 + 1);
    let (loaded, v) = store.load_versioned(id).await.unwrap();
    assert_eq!(v, v2);
    assert_eq!(
        loaded.to_dict(&full()).unwrap(),
        live.to_dict(&full()).unwrap()
    );
    // Another writer's turn lands; a save on the old version must not
    // erase it.
    store
        .append_turn_at(id, v2, &[Message::assistant("theirs")])
        .await
        .unwrap();
    let before = store.load(id).await.unwrap().to_dict(&full()).unwrap();
    let err = store.save_at(&live, v2).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Conflict { branch, expected, found } if branch == id && expected == v2 && found == v2 + 1),
        "{err}"
    );
    assert_eq!(
        store.load(id).await.unwrap().to_dict(&full()).unwrap(),
        before
    );
    assert!(store.consistency().await.is_empty());
}

/// A log as a model call writes one, its payload holding the history.
fn call_log(turn: usize) -> branch_core::Log {
    let mut content = serde_json::Map::new();
    content.insert(
        "payload".into(),
        serde_json::json!({"messages": [{"role": "user", "content": format!("question {turn}")}]}),
    );
    content.insert("response".into(), serde_json::json!({"turn": turn}));
    branch_core::Log::new(content)
}

/// A recorded turn stores the branch as a whole save would: its messages,
/// its changed metadata (a CLI agent's new session id) and its logs, in
/// one write on the expected version; a stale writer changes nothing.
/// Logs past the stored ones are appended; a logger that was cleared
/// (after a capacity dump, whose file keeps them) replaces them.
async fn a_turn_its_metadata_and_its_logs_are_stored_together<S: UnderTest>(store: S) {
    let mut live = common::conversation(1);
    store.save(&live).await.unwrap();
    let id = live.id();
    let (_, v1) = store.load_versioned(id).await.unwrap();
    let mut version = v1;
    let turn = |live: &mut Branch, n: usize| {
        live.logger_mut().log(call_log(n));
        let m = live
            .msgs_mut()
            .add_message(Message::assistant(format!("answer {n}")));
        vec![live.messages().get(&m).unwrap().clone()]
    };
    // The first turn's log has no pile stored yet; the next turns' logs
    // continue it.
    for n in 0..3 {
        live.metadata_mut()
            .insert("cli_session_id".into(), serde_json::json!(format!("s{n}")));
        let messages = turn(&mut live, n);
        let v = store
            .record_turn_at(&live, version, &messages)
            .await
            .unwrap();
        assert_eq!(v, version + 1);
        version = v;
        let (loaded, v) = store.load_versioned(id).await.unwrap();
        assert_eq!(v, version);
        assert_eq!(loaded.logs().len(), n + 1);
        assert_eq!(
            loaded.to_dict(&full()).unwrap(),
            live.to_dict(&full()).unwrap(),
            "turn {n}"
        );
    }
    // A turn with no new log and no new message still stores metadata.
    live.metadata_mut()
        .insert("cli_session_id".into(), serde_json::json!("quiet"));
    version = store.record_turn_at(&live, version, &[]).await.unwrap();
    assert_eq!(
        store.load(id).await.unwrap().to_dict(&full()).unwrap(),
        live.to_dict(&full()).unwrap()
    );
    // On an old version: a conflict, and nothing changes.
    let before = store.load(id).await.unwrap().to_dict(&full()).unwrap();
    let mut stale = store.load(id).await.unwrap();
    stale
        .metadata_mut()
        .insert("cli_session_id".into(), serde_json::json!("stale"));
    let messages = turn(&mut stale, 9);
    let err = store
        .record_turn_at(&stale, v1, &messages)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
    assert_eq!(
        store.load(id).await.unwrap().to_dict(&full()).unwrap(),
        before
    );
    // The logger cleared, then one more call: the stored logs are the
    // logger's again.
    live.logger_mut().clear();
    let messages = turn(&mut live, 3);
    version = store
        .record_turn_at(&live, version, &messages)
        .await
        .unwrap();
    let loaded = store.load(id).await.unwrap();
    assert_eq!(loaded.logs().len(), 1);
    assert_eq!(
        loaded.to_dict(&full()).unwrap(),
        live.to_dict(&full()).unwrap()
    );
    // A logger replaced by a new pile (a capacity dump's clear) likewise.
    let fresh = branch_core::Pile::new(live.logs().strict_type());
    *live.logger_mut() = branch_core::DataLogger::with_logs(live.logger().config().clone(), fresh);
    let messages = turn(&mut live, 4);
    version = store
        .record_turn_at(&live, version, &messages)
        .await
        .unwrap();
    let (loaded, v) = store.load_versioned(id).await.unwrap();
    assert_eq!(v, version);
    assert_eq!(loaded.logs().element.id, live.logs().element.id);
    assert_eq!(
        loaded.to_dict(&full()).unwrap(),
        live.to_dict(&full()).unwrap()
    );
    // A whole save afterwards writes the same, and a resumed copy goes on.
    store.save(&live).await.unwrap();
    let (mut resumed, v) = store.load_versioned(id).await.unwrap();
    let messages = turn(&mut resumed, 5);
    store.record_turn_at(&resumed, v, &messages).await.unwrap();
    let loaded = store.load(id).await.unwrap();
    assert_eq!(loaded.logs().len(), 2);
    assert_eq!(
        loaded.to_dict(&full()).unwrap(),
        resumed.to_dict(&full()).unwrap()
    );
    assert!(store.consistency().await.is_empty());
}

/// A recorded turn stores the rest of the branch as it is now, as a whole
/// save would: a new name (listed too), a user, another chat model, a
/// parse model that became distinct and then the chat model again, and a
/// curated view set and cleared between turns, which later unrecorded
/// turns extend or not as the live branch does.
async fn a_recorded_turn_stores_the_renamed_branch_its_models_and_view<S: UnderTest>(store: S) {
    let mut live = common::conversation(1);
    store.save(&live).await.unwrap();
    let id = live.id();
    let (_, mut version) = store.load_versioned(id).await.unwrap();
    let answer = |live: &mut Branch, text: &str| {
        let m = live.msgs_mut().add_message(Message::assistant(text));
        vec![live.messages().get(&m).unwrap().clone()]
    };
    let model = |name: &str| {
        let config = ModelConfig::builder()
            .provider("openai")
            .model(name)
            .build()
            .unwrap();
        Branch::builder()
            .chat_model(config)
            .build()
            .unwrap()
            .chat_model()
            .clone()
    };
    let stored_is_live = |loaded: &Branch, live: &Branch, what: &str| {
        assert_eq!(
            loaded.to_dict(&full()).unwrap(),
            live.to_dict(&full()).unwrap(),
            "{what}"
        );
    };

    live.set_name(Some("renamed".into()));
    live.set_user(Some("someone".into()));
    live.set_chat_model(model("gpt-4.1-nano"));
    let keep: Vec<Uuid> = live.messages().iter().map(|m| m.id()).collect();
    live.msgs_mut().set_view(Some(Progression::from_ids(keep)));
    let turn = answer(&mut live, "first");
    version = store.record_turn_at(&live, version, &turn).await.unwrap();
    stored_is_live(&store.load(id).await.unwrap(), &live, "renamed");
    assert!(
        live.to_dict(&full()).unwrap().get("parse_model").is_some(),
        "the old chat model stays the parse model"
    );
    let listed = store.list().await.unwrap();
    assert_eq!(listed[0].name.as_deref(), Some("renamed"));

    // A turn appended without the branch extends the view it now has.
    let turn = answer(&mut live, "unrecorded");
    version = store.append_turn_at(id, version, &turn).await.unwrap();
    stored_is_live(&store.load(id).await.unwrap(), &live, "view extended");

    // The parse model the chat model again, the view and the name gone.
    let chat = live.chat_model().clone();
    live.set_parse_model(chat);
    live.msgs_mut().set_view(None);
    live.set_name(None);
    live.set_user(None);
    let turn = answer(&mut live, "second");
    version = store.record_turn_at(&live, version, &turn).await.unwrap();
    stored_is_live(&store.load(id).await.unwrap(), &live, "cleared");
    assert!(live.to_dict(&full()).unwrap().get("parse_model").is_none());
    assert_eq!(store.list().await.unwrap()[0].name, None);
    let turn = answer(&mut live, "unrecorded again");
    version = store.append_turn_at(id, version, &turn).await.unwrap();
    stored_is_live(&store.load(id).await.unwrap(), &live, "no view to extend");

    // A new system prompt goes to the front, then one edited in place: each
    // recorded turn is stored whole, on its version, and the next one is
    // appended again.
    live.msgs_mut()
        .set_system(Message::system(branch_core::message::SystemContent::new(
            "You are verbose now.",
        )));
    let turn = answer(&mut live, "after the new prompt");
    let stale = version;
    version = store.record_turn_at(&live, version, &turn).await.unwrap();
    assert_eq!(version, stale + 1);
    stored_is_live(&store.load(id).await.unwrap(), &live, "new system");
    let system = live.system().unwrap().id();
    live.msgs_mut().get_mut(&system).unwrap().channel = Some("edited".into());
    let turn = answer(&mut live, "after the edit");
    version = store.record_turn_at(&live, version, &turn).await.unwrap();
    stored_is_live(&store.load(id).await.unwrap(), &live, "edited system");
    let turn = answer(&mut live, "plain again");
    version = store.record_turn_at(&live, version, &turn).await.unwrap();
    stored_is_live(&store.load(id).await.unwrap(), &live, "appended");
    // On a stale version a changed head is a conflict too, and nothing
    // is written.
    live.msgs_mut()
        .set_system(Message::system(branch_core::message::SystemContent::new(
            "Stale.",
        )));
    let before = store.load(id).await.unwrap().to_dict(&full()).unwrap();
    let err = store.record_turn_at(&live, stale, &[]).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
    assert_eq!(
        store.load(id).await.unwrap().to_dict(&full()).unwrap(),
        before
    );
    assert_eq!(store.list().await.unwrap()[0].version, version);
    assert!(store.consistency().await.is_empty());
}

/// A cached copy catches up from its message count.
async fn load_since_returns_only_newer_messages<S: UnderTest>(store: S) {
    let mut live = common::conversation(2);
    store.save(&live).await.unwrap();
    let id = live.id();
    let cached = live.msgs().len() as u64;
    let mut added = Vec::new();
    for i in 0..2 {
        let q = live
            .msgs_mut()
            .add_message(common::instruction(&format!("later {i}"), "user", id));
        let a = live
            .msgs_mut()
            .add_message(Message::assistant(format!("reply {i}")));
        let turn: Vec<Message> = [q, a]
            .iter()
            .map(|m| live.messages().get(m).unwrap().clone())
            .collect();
        added.extend(turn.iter().map(Message::id));
        store.append_turn(id, &turn).await.unwrap();
    }
    let since = store.load_since(id, cached).await.unwrap();
    assert_eq!(since.version, 3);
    assert_eq!(since.message_count, cached + 4);
    assert_eq!(
        since
            .messages
            .iter()
            .map(|m| m.message.id())
            .collect::<Vec<_>>(),
        added
    );
    assert_eq!(
        since.messages.iter().map(|m| m.seq).collect::<Vec<_>>(),
        (cached..cached + 4).collect::<Vec<_>>()
    );
    for m in &since.messages {
        assert_eq!(
            m.message.to_value().unwrap(),
            live.messages()
                .get(&m.message.id())
                .unwrap()
                .to_value()
                .unwrap()
        );
    }
    assert!(
        store
            .load_since(id, cached + 4)
            .await
            .unwrap()
            .messages
            .is_empty()
    );
    assert!(
        store
            .load_since(id, u64::MAX)
            .await
            .unwrap()
            .messages
            .is_empty()
    );
    assert!(matches!(
        store.load_since(Uuid::new_v4(), 0).await,
        Err(StoreError::NotFound(_))
    ));
}

/// Eight writers on one conversation, each appending on the version it
/// last saw and catching up on a conflict: every turn lands exactly once,
/// its two messages side by side, and the version counts the writes.
async fn racing_writers_lose_no_turn<S: UnderTest>(store: S) {
    const WRITERS: usize = 8;
    const TURNS: usize = 6;
    let b = Branch::builder().name("shared").build().unwrap();
    let id = b.id();
    store.save(&b).await.unwrap();
    let store = std::sync::Arc::new(store);
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let store = std::sync::Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            let (_, mut version) = store.load_versioned(id).await.unwrap();
            let mut conflicts = 0;
            for t in 0..TURNS {
                let turn = [
                    common::instruction(&format!("w{w} t{t}"), "user", id),
                    Message::assistant(format!("w{w} t{t} done")),
                ];
                loop {
                    match store.append_turn_at(id, version, &turn).await {
                        Ok(v) => {
                            version = v;
                            break;
                        }
                        Err(StoreError::Conflict { found, .. }) => {
                            conflicts += 1;
                            version = found;
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            conflicts
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (loaded, version) = store.load_versioned(id).await.unwrap();
    assert_eq!(version, 1 + (WRITERS * TURNS) as u64);
    let texts: Vec<String> = loaded
        .messages()
        .iter()
        .map(|m| m.to_value().unwrap().to_string())
        .collect();
    assert_eq!(texts.len(), WRITERS * TURNS * 2);
    for w in 0..WRITERS {
        for t in 0..TURNS {
            let q = format!("\"w{w} t{t}\"");
            let hits: Vec<usize> = (0..texts.len())
                .filter(|&i| texts[i].contains(&q))
                .collect();
            assert_eq!(hits.len(), 1, "turn w{w} t{t} stored {} times", hits.len());
            assert!(texts[hits[0] + 1].contains(&format!("w{w} t{t} done")));
        }
    }
    assert!(store.consistency().await.is_empty());
}

/// Each contract test, once per store.
macro_rules! contract {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let (store, _dir) = crate::common::stores::sqlite(stringify!($name)).await;
                    crate::$name(store).await;
                }
            )*
        }
        #[cfg(feature = "postgres")]
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some((store, ())) = crate::common::stores::postgres(stringify!($name)).await
                    else {
                        return;
                    };
                    crate::$name(store).await;
                }
            )*
        }
    };
}

contract!(
    save_and_load_reproduce_to_dict,
    resaving_after_edits_stores_the_new_state,
    every_fixture_branch_survives_the_store,
    append_turn_matches_the_live_branch,
    appending_to_an_empty_branch_keeps_a_stable_pile,
    refused_turns_write_nothing,
    list_and_delete,
    durable_memory_answers_like_the_in_process_store,
    reference_files_import_and_export,
    versions_detect_concurrent_writers,
    save_at_writes_only_on_the_expected_version,
    a_turn_its_metadata_and_its_logs_are_stored_together,
    a_recorded_turn_stores_the_renamed_branch_its_models_and_view,
    load_since_returns_only_newer_messages,
    racing_writers_lose_no_turn,
);
