//! Hostile and damaged store files, with real SQLite: a store opened
//! read-only writes nothing, a file that is not a database is refused and
//! left alone, a truncated file is detected, and errors about bad rows
//! name the file, the table and what is wrong; oversized rows are refused
//! before they are read.

mod common;

use branch_session::limits::MAX_STORED_ROW_BYTES;
use branch_session::{BranchStore, SqliteStore, StoreError};
use common::TempDir;

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

#[tokio::test]
async fn a_read_only_store_is_listed_and_left_unchanged() {
    let dir = TempDir::new("ro");
    let path = dir.join("s.db");
    let b = common::conversation(2);
    {
        let store = SqliteStore::open(&path).await.unwrap();
        store.save(&b).await.unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    #[cfg(unix)]
    let root = running_as_root();
    #[cfg(unix)]
    if !root {
        // A file and directory this process may not write.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o555)).unwrap();
    }
    let store = SqliteStore::open_read_only(&path).await.unwrap();
    let list = store.list().await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].id, b.id());
    let loaded = store.load(b.id()).await.unwrap();
    assert_eq!(loaded.msgs().len(), b.msgs().len());
    let err = store.delete(b.id()).await.unwrap_err();
    assert!(err.to_string().contains("s.db"), "{err}");
    drop(store);
    #[cfg(unix)]
    if !root {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the file was written"
    );
    // Read-only never creates a store.
    let err = SqliteStore::open_read_only(dir.join("missing.db"))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Io { .. }), "{err}");
    assert!(!dir.join("missing.db").exists());
}

#[tokio::test]
async fn a_file_that_is_not_a_store_is_refused_and_left_alone() {
    let dir = TempDir::new("notdb");
    for (name, bytes) in [
        ("one-byte", b"x".to_vec()),
        ("text", b"{\"id\": 1}\n".repeat(30)),
        ("almost", b"SQLite format 2\0".repeat(10)),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, &bytes).unwrap();
        let err = SqliteStore::open(&path).await.unwrap_err();
        assert!(matches!(err, StoreError::NotAStore { .. }), "{name}: {err}");
        assert!(err.to_string().contains(name), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "{name} was changed");
        assert!(SqliteStore::open_read_only(&path).await.is_err());
    }
    // An empty file is a new, empty store, as SQLite treats it.
    let empty = dir.join("empty");
    std::fs::write(&empty, b"").unwrap();
    let store = SqliteStore::open(&empty).await.unwrap();
    assert!(store.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_truncated_store_is_detected() {
    let dir = TempDir::new("trunc");
    let path = dir.join("s.db");
    {
        let store = SqliteStore::open(&path).await.unwrap();
        for _ in 0..4 {
            store.save(&common::conversation(150)).await.unwrap();
        }
        assert!(store.check_consistency().await.unwrap().is_empty());
    }
    // The last pages cut off.
    let len = std::fs::metadata(&path).unwrap().len();
    let cut = len - 3 * 4096;
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(cut).unwrap();
    drop(f);
    let said = format!("the file has {cut}");
    // Opened for writing: refused, naming the file and the truncation.
    let err = SqliteStore::open(&path).await.unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, StoreError::Corrupt { table: "file", .. }),
        "{text}"
    );
    assert!(
        text.contains("s.db") && text.contains("truncated") && text.contains(&said),
        "{text}"
    );
    // Opened read-only: the check finds it, whether or not SQLite does.
    match SqliteStore::open_read_only(&path).await {
        Ok(store) => {
            let problems = store.check_consistency().await.unwrap();
            assert!(
                problems
                    .iter()
                    .any(|p| p.contains("truncated") && p.contains(&said)),
                "{problems:?}"
            );
        }
        Err(e) => assert!(e.to_string().contains("truncated"), "{e}"),
    }
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        cut,
        "the file was changed"
    );
}

#[tokio::test]
async fn bad_rows_are_named_by_file_table_and_fault() {
    let dir = TempDir::new("badrows");
    let path = dir.join("s.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let a = common::conversation(1);
    let b = common::conversation(1);
    store.save(&a).await.unwrap();
    store.save(&b).await.unwrap();
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute(
        "UPDATE messages SET body = '{\"not\": \"a message\"' WHERE seq = 1 AND branch_key =
             (SELECT key FROM branches WHERE id = ?1)",
        [a.id().to_string()],
    )
    .unwrap();
    let err = store.load(a.id()).await.unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(
            err,
            StoreError::Corrupt {
                table: "messages",
                ..
            }
        ),
        "{text}"
    );
    assert!(
        text.contains("s.db") && text.contains("`messages`"),
        "{text}"
    );
    assert!(text.contains(&a.id().to_string()), "{text}");
    // A row over the cap is refused without being read into memory.
    c.execute(
        "UPDATE messages SET body = printf('%.*c', ?2, 'x') WHERE seq = 2 AND branch_key =
             (SELECT key FROM branches WHERE id = ?1)",
        rusqlite::params![b.id().to_string(), (MAX_STORED_ROW_BYTES + 1) as i64],
    )
    .unwrap();
    let err = store.load(b.id()).await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains("cap") && text.contains("seq 2"), "{text}");
    assert!(text.contains("`messages`"), "{text}");
    let err = store.load_since(b.id(), 0).await.unwrap_err();
    assert!(err.to_string().contains("cap"), "{err}");
    // A broken id in the branches table.
    c.execute(
        "UPDATE branches SET id = 'nonsense' WHERE id = ?1",
        [a.id().to_string()],
    )
    .unwrap();
    let err = store.list().await.unwrap_err();
    assert!(err.to_string().contains("`branches`"), "{err}");
}

#[tokio::test]
async fn an_oversized_memory_item_is_refused_unread() {
    use branch_core::{MemoryItem, MemoryQuery, MemoryStore};
    let dir = TempDir::new("bigmem");
    let path = dir.join("s.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let mem = store.memory("m");
    let item = MemoryItem::new("small");
    mem.store(item.clone()).await.unwrap();
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute(
        "UPDATE memory_items SET content = printf('\"%.*c\"', ?1, 'x')",
        [(MAX_STORED_ROW_BYTES + 1) as i64],
    )
    .unwrap();
    let err = mem.retrieve(item.id()).await.unwrap_err().to_string();
    assert!(err.contains("memory_items") && err.contains("cap"), "{err}");
    let err = mem
        .search(&MemoryQuery::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("cap"), "{err}");
}

/// Numbers no write of ours makes are faults, not values to report or to
/// build on: a negative `message_count` (reported as 0 before, and the
/// next turn's rows numbered from it) and a time that is not finite.
#[tokio::test]
async fn impossible_numbers_are_refused() {
    use branch_core::{MemoryItem, MemoryStore, Message};
    let dir = TempDir::new("numbers");
    let path = dir.join("s.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let b = common::conversation(1);
    store.save(&b).await.unwrap();
    let id = b.id().to_string();
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute(
        "UPDATE branches SET message_count = -1 WHERE id = ?1",
        [&id],
    )
    .unwrap();
    let turn = [Message::assistant("after the damage")];
    for err in [
        store.list().await.unwrap_err(),
        store.load_since(b.id(), 0).await.unwrap_err(),
        store.append_turn(b.id(), &turn).await.unwrap_err(),
    ] {
        let text = err.to_string();
        assert!(
            matches!(
                err,
                StoreError::Corrupt {
                    table: "branches",
                    ..
                }
            ),
            "{text}"
        );
        assert!(
            text.contains(&id) && text.contains("message_count is -1"),
            "{text}"
        );
    }
    let rows: i64 = c
        .query_row("SELECT COUNT(*) FROM messages", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 3, "the refused turn wrote nothing");
    c.execute(
        "UPDATE branches SET message_count = 3, updated_at = 9e999 WHERE id = ?1",
        [&id],
    )
    .unwrap();
    let text = store.list().await.unwrap_err().to_string();
    assert!(
        text.contains(&id) && text.contains("updated_at is inf"),
        "{text}"
    );

    let mem = store.memory("m");
    let item = MemoryItem::new("small");
    mem.store(item.clone()).await.unwrap();
    c.execute("UPDATE memory_items SET created_at = -9e999", [])
        .unwrap();
    let err = mem.retrieve(item.id()).await.unwrap_err().to_string();
    assert!(
        err.contains("memory_items") && err.contains("created_at is -inf"),
        "{err}"
    );
}

/// Log rows are data others may have written too: an oversized one is
/// refused unread, one that is not a log and rows under a skeleton that
/// has no log pile are reported against the `logs` table or the branch,
/// never loaded as something else; a stored log pile that is not the
/// branch's is replaced by the next recorded turn.
#[tokio::test]
async fn damaged_log_rows_are_refused() {
    use branch_core::{Log, Message};
    let dir = TempDir::new("badlogs");
    let path = dir.join("s.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let mut b = common::conversation(1);
    for n in 0..2 {
        let mut content = serde_json::Map::new();
        content.insert("n".into(), serde_json::json!(n));
        b.logger_mut().log(Log::new(content));
    }
    store.save(&b).await.unwrap();
    let id = b.id().to_string();
    let c = rusqlite::Connection::open(&path).unwrap();
    let logs_where = "WHERE seq = 1 AND branch_key = (SELECT key FROM branches WHERE id = ?1)";
    let body: String = c
        .query_row(&format!("SELECT body FROM logs {logs_where}"), [&id], |r| {
            r.get(0)
        })
        .unwrap();

    c.execute(
        &format!("UPDATE logs SET body = printf('%.*c', ?2, 'x') {logs_where}"),
        rusqlite::params![id, (MAX_STORED_ROW_BYTES + 1) as i64],
    )
    .unwrap();
    let err = store.load(b.id()).await.unwrap_err().to_string();
    assert!(
        err.contains("cap") && err.contains("log at seq 1") && err.contains("`logs`"),
        "{err}"
    );

    c.execute(
        &format!("UPDATE logs SET body = '[1, 2]' {logs_where}"),
        [&id],
    )
    .unwrap();
    let err = store.load(b.id()).await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");

    // Rows with no pile to hold them.
    c.execute(
        &format!("UPDATE logs SET body = ?2 {logs_where}"),
        [&id, &body],
    )
    .unwrap();
    store.load(b.id()).await.unwrap();
    let skeleton: String = c
        .query_row("SELECT skeleton FROM branches WHERE id = ?1", [&id], |r| {
            r.get(0)
        })
        .unwrap();
    let mut without: serde_json::Value = serde_json::from_str(&skeleton).unwrap();
    without.as_object_mut().unwrap().shift_remove("logs");
    c.execute(
        "UPDATE branches SET skeleton = ?2 WHERE id = ?1",
        [&id, &without.to_string()],
    )
    .unwrap();
    let err = store.load(b.id()).await.unwrap_err().to_string();
    assert!(err.contains("no log pile"), "{err}");

    // A pile id that is not the branch's: the recorded turn replaces the
    // stored logs with the branch's, and the branch loads again.
    let mut other: serde_json::Value = serde_json::from_str(&skeleton).unwrap();
    other["logs"]["id"] = serde_json::json!("not a pile id");
    c.execute(
        "UPDATE branches SET skeleton = ?2 WHERE id = ?1",
        [&id, &other.to_string()],
    )
    .unwrap();
    let version = store.list().await.unwrap()[0].version;
    let m = b.msgs_mut().add_message(Message::assistant("more"));
    let turn = [b.messages().get(&m).unwrap().clone()];
    store.record_turn_at(&b, version, &turn).await.unwrap();
    let full = branch_core::ToDictOptions {
        include_log_config: true,
        include_processor_config: true,
        ..branch_core::ToDictOptions::default()
    };
    assert_eq!(
        store.load(b.id()).await.unwrap().to_dict(&full).unwrap(),
        b.to_dict(&full).unwrap()
    );
    assert!(store.check_consistency().await.unwrap().is_empty());
}
