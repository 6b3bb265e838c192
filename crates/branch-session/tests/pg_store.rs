//! What only the PostgreSQL store has: migrations shared by workers that
//! start together, the outbox and its watch, a connection dropped in the
//! middle of a turn, a password that never shows, and rows damaged by hand
//! (SQLite's are in `store_files.rs`). Runs against the
//! database `LIONAGI_PG_URL` names (each test in a schema of its own);
//! skips without one locally, fails without one in CI.
#![cfg(feature = "postgres")]

mod common;

use std::time::Duration;

use branch_core::{Branch, Message};
use branch_session::{BranchStore, PgOptions, PgStore, StoreError};
use common::stores::{fresh_schema, pg_url, without_tls};

async fn raw(url: &str, schema: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&without_tls(url), tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    client
        .batch_execute(&format!("SET search_path = {schema}"))
        .await
        .unwrap();
    client
}

fn opts(schema: &str) -> PgOptions {
    PgOptions {
        schema: Some(schema.to_owned()),
        max_connections: 2,
        ..PgOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_starting_together_migrate_once() {
    let Some(url) = pg_url() else { return };
    let schema = fresh_schema("migrate");
    let starts: Vec<_> = (0..8)
        .map(|_| {
            let (url, o) = (url.clone(), opts(&schema));
            tokio::spawn(async move { PgStore::connect_with(&url, o).await })
        })
        .collect();
    for s in starts {
        let store = s.await.unwrap().expect("every worker starts");
        assert_eq!(
            store.schema_version().await.unwrap(),
            PgStore::SCHEMA_VERSION
        );
    }
    let c = raw(&url, &schema).await;
    let rows: i64 = c
        .query_one("SELECT COUNT(*) FROM schema_version", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
}

/// Version 1 kept a branch's logs inline in its skeleton: version 2 moves
/// them to rows, and the branch loads as it was and takes a recorded
/// turn's log after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_logs_of_version_1_move_to_rows() {
    let Some(url) = pg_url() else { return };
    let schema = fresh_schema("v1logs");
    let full = branch_core::ToDictOptions {
        include_log_config: true,
        include_processor_config: true,
        ..branch_core::ToDictOptions::default()
    };
    let mut live = common::conversation(2);
    for n in 0..3 {
        let mut content = serde_json::Map::new();
        content.insert("payload".into(), serde_json::json!({"n": n}));
        live.logger_mut().log(branch_core::Log::new(content));
    }
    let store = PgStore::connect_with(&url, opts(&schema)).await.unwrap();
    store.save(&live).await.unwrap();
    drop(store);
    let c = raw(&url, &schema).await;
    let row = c
        .query_one("SELECT skeleton FROM branches", &[])
        .await
        .unwrap();
    let mut skeleton: serde_json::Value = serde_json::from_str(row.get(0)).unwrap();
    skeleton["logs"] = live.to_dict(&full).unwrap()["logs"].clone();
    c.execute(
        "UPDATE branches SET skeleton = $1",
        &[&serde_json::to_string(&skeleton).unwrap()],
    )
    .await
    .unwrap();
    c.batch_execute("DROP TABLE logs; UPDATE schema_version SET version = 1;")
        .await
        .unwrap();
    let store = PgStore::connect_with(&url, opts(&schema)).await.unwrap();
    assert_eq!(store.schema_version().await.unwrap(), 2);
    let count = "SELECT COUNT(*) FROM logs";
    let rows = c.query_one(count, &[]).await.unwrap();
    assert_eq!(rows.get::<_, i64>(0), 3);
    let (mut loaded, version) = store.load_versioned(live.id()).await.unwrap();
    assert_eq!(loaded.to_dict(&full).unwrap(), live.to_dict(&full).unwrap());
    loaded
        .logger_mut()
        .log(branch_core::Log::new(serde_json::Map::new()));
    let m = loaded.msgs_mut().add_message(Message::assistant("after"));
    let turn = [loaded.messages().get(&m).unwrap().clone()];
    store.record_turn_at(&loaded, version, &turn).await.unwrap();
    let rows = c.query_one(count, &[]).await.unwrap();
    assert_eq!(rows.get::<_, i64>(0), 4);
    assert_eq!(
        store.load(live.id()).await.unwrap().to_dict(&full).unwrap(),
        loaded.to_dict(&full).unwrap()
    );
    assert!(store.check_consistency().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_database_is_refused_and_left_alone() {
    let Some(url) = pg_url() else { return };
    let schema = fresh_schema("newer");
    let store = PgStore::connect_with(&url, opts(&schema)).await.unwrap();
    store.save(&common::conversation(1)).await.unwrap();
    let c = raw(&url, &schema).await;
    c.execute("UPDATE schema_version SET version = 99", &[])
        .await
        .unwrap();
    let err = PgStore::connect_with(&url, opts(&schema))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::NewerSchema {
                found: 99,
                supported: 2,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("schema version 99"), "{err}");
    let v: i64 = c
        .query_one("SELECT version FROM schema_version", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(v, 99);
    let n: i64 = c
        .query_one("SELECT COUNT(*) FROM branches", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_never_shows() {
    let Some(url) = pg_url() else { return };
    const SECRET: &str = "pw-7c1e-do-not-print";
    // The test server trusts loopback, so a password in the URL is
    // accepted and ignored: the store works and never repeats it.
    let with_pw = url.replacen("://postgres@", &format!("://postgres:{SECRET}@"), 1);
    assert!(with_pw.contains(SECRET), "unexpected test URL shape");
    let store = PgStore::connect_with(&with_pw, opts(&fresh_schema("secret")))
        .await
        .unwrap();
    assert!(!format!("{store:?}").contains(SECRET));
    assert!(!store.label().contains(SECRET));
    assert!(!format!("{:?}", store.memory("m")).contains(SECRET));
    // A server that is not there: the error names it, not the password.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dead = format!("postgres://postgres:{SECRET}@127.0.0.1:{port}/x?connect_timeout=2");
    let err = PgStore::connect(&dead).await.unwrap_err();
    assert!(
        err.to_string().contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );
    for text in [err.to_string(), format!("{err:?}")] {
        assert!(!text.contains(SECRET), "{text}");
    }
    let bad = format!("postgres://postgres:{SECRET}@127.0.0.1:{port}/x?port=notanumber");
    let err = PgStore::connect(&bad).await.unwrap_err();
    for text in [err.to_string(), format!("{err:?}")] {
        assert!(!text.contains(SECRET), "{text}");
    }
}

/// Rows are data someone else may have written, by hand or by a botched
/// migration: a malformed or oversized body, a negative count, a time no
/// clock gives, and columns altered to hold NULL or another type are each
/// refused as `Corrupt`, naming the table and the row, and never panic
/// the store (`Row::get` would); an oversized row is refused unread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_rows_are_refused_by_name_and_never_panic() {
    use branch_core::{MemoryItem, MemoryQuery, MemoryStore};
    use branch_session::limits::MAX_STORED_ROW_BYTES;
    let Some(url) = pg_url() else { return };
    let schema = fresh_schema("damaged");
    let store = &PgStore::connect_with(&url, opts(&schema)).await.unwrap();
    let c = raw(&url, &schema).await;
    let corrupt = |e: StoreError, table: &str, id: &str| {
        let text = e.to_string();
        assert!(
            matches!(&e, StoreError::Corrupt { table: t, .. } if *t == table),
            "{text}"
        );
        assert!(
            text.contains(&format!("`{table}`")) && text.contains(id),
            "{text}"
        );
        text
    };
    let saved = |n| async move {
        let b = common::conversation(n);
        store.save(&b).await.unwrap();
        b.id()
    };

    // A body that is not a message, and one over the row cap.
    let a = saved(1).await;
    c.execute(
        "UPDATE messages SET body = '{\"not\": \"a message\"' WHERE branch_id = $1 AND seq = 1",
        &[&a],
    )
    .await
    .unwrap();
    corrupt(store.load(a).await.unwrap_err(), "messages", &a.to_string());
    corrupt(
        store.load_since(a, 0).await.unwrap_err(),
        "messages",
        &a.to_string(),
    );
    let b = saved(1).await;
    let over = i32::try_from(MAX_STORED_ROW_BYTES + 1).unwrap();
    c.execute(
        "UPDATE messages SET body = repeat('x', $2) WHERE branch_id = $1 AND seq = 2",
        &[&b, &over],
    )
    .await
    .unwrap();
    for e in [
        store.load(b).await.unwrap_err(),
        store.load_since(b, 0).await.unwrap_err(),
    ] {
        let text = corrupt(e, "messages", &b.to_string());
        assert!(text.contains("cap") && text.contains("seq 2"), "{text}");
    }
    store.delete(a).await.unwrap();
    store.delete(b).await.unwrap();

    // A negative count: refused by every reading, and no turn is appended
    // after it.
    let d = saved(1).await;
    c.execute(
        "UPDATE branches SET message_count = -1 WHERE id = $1",
        &[&d],
    )
    .await
    .unwrap();
    let id = d.to_string();
    let text = corrupt(store.list().await.unwrap_err(), "branches", &id);
    assert!(text.contains("message_count is -1"), "{text}");
    corrupt(store.load_since(d, 0).await.unwrap_err(), "branches", &id);
    let turn = [Message::assistant("after the damage")];
    corrupt(
        store.append_turn(d, &turn).await.unwrap_err(),
        "branches",
        &id,
    );
    let rows: i64 = c
        .query_one("SELECT COUNT(*) FROM messages WHERE branch_id = $1", &[&d])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 3, "the refused turn wrote nothing");
    c.execute("UPDATE branches SET message_count = 3 WHERE id = $1", &[&d])
        .await
        .unwrap();

    // A time no clock gives.
    c.execute(
        "UPDATE branches SET updated_at = 'Infinity' WHERE id = $1",
        &[&d],
    )
    .await
    .unwrap();
    let text = corrupt(store.list().await.unwrap_err(), "branches", &id);
    assert!(text.contains("updated_at is inf"), "{text}");
    store.delete(d).await.unwrap();

    // Columns altered by hand: a NULL where the schema had NOT NULL, and
    // another type.
    let eb = common::conversation(1);
    store.save(&eb).await.unwrap();
    let e = eb.id();
    let id = e.to_string();
    c.batch_execute("ALTER TABLE branches ALTER COLUMN version DROP NOT NULL")
        .await
        .unwrap();
    c.execute("UPDATE branches SET version = NULL WHERE id = $1", &[&e])
        .await
        .unwrap();
    for err in [
        store.list().await.unwrap_err(),
        store.load(e).await.unwrap_err(),
        store.load_since(e, 0).await.unwrap_err(),
        store.append_turn(e, &turn).await.unwrap_err(),
        store.save_at(&eb, 1).await.unwrap_err(),
        // A save writes `version + 1`, NULL too: refused and rolled back.
        store.save(&eb).await.unwrap_err(),
    ] {
        let text = corrupt(err, "branches", &id);
        assert!(
            text.contains("`version`") && text.contains("NULL"),
            "{text}"
        );
    }
    store.delete(e).await.unwrap();
    let f = saved(1).await;
    c.batch_execute("ALTER TABLE messages ALTER COLUMN pos TYPE numeric")
        .await
        .unwrap();
    // The pool's prepared statements fail at the server ("cached plan must
    // not change result type"); a store with fresh connections reads the
    // column and refuses its type.
    assert!(store.load(f).await.is_err());
    let fresh = PgStore::connect_with(&url, opts(&schema)).await.unwrap();
    let text = corrupt(fresh.load(f).await.unwrap_err(), "messages", &f.to_string());
    assert!(text.contains("`pos`"), "{text}");
    corrupt(
        fresh.load_since(f, 0).await.unwrap_err(),
        "messages",
        &f.to_string(),
    );

    // Memory items: a time no clock gives, and content over the cap.
    let mem = store.memory("m");
    let item = MemoryItem::new("small");
    mem.store(item.clone()).await.unwrap();
    c.execute("UPDATE memory_items SET created_at = 'NaN'", &[])
        .await
        .unwrap();
    let err = mem.retrieve(item.id()).await.unwrap_err().to_string();
    assert!(
        err.contains("memory_items") && err.contains("created_at is NaN"),
        "{err}"
    );
    c.execute(
        "UPDATE memory_items SET created_at = 1, content = repeat('x', $1)",
        &[&over],
    )
    .await
    .unwrap();
    let err = mem
        .search(&MemoryQuery::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("memory_items") && err.contains("cap"), "{err}");
}

/// A trigger that fails any turn which brings a branch past `limit`
/// messages, after the turn's messages and outbox rows were written: a
/// real rollback of a real transaction.
async fn fail_turns_past(c: &tokio_postgres::Client, limit: i64) {
    c.batch_execute(&format!(
        "CREATE FUNCTION refuse_long() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF NEW.message_count > {limit} THEN
                 RAISE EXCEPTION 'test: refused turn';
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER refuse_long BEFORE UPDATE ON branches
             FOR EACH ROW EXECUTE FUNCTION refuse_long();"
    ))
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_committed_turns_only_and_resumes() {
    let Some(url) = pg_url() else { return };
    let schema = fresh_schema("watch");
    let store = PgStore::connect_with(&url, opts(&schema)).await.unwrap();
    let b = Branch::new().unwrap();
    let id = b.id();
    store.save(&b).await.unwrap();
    let c = raw(&url, &schema).await;
    fail_turns_past(&c, 6).await;

    let mut watch = store.watch(id, 0);
    let reader = tokio::spawn(async move {
        let mut seen = Vec::new();
        while seen.len() < 6 {
            let e = tokio::time::timeout(Duration::from_secs(20), watch.next())
                .await
                .expect("the watch delivers within 20 s")
                .unwrap();
            seen.push(e);
        }
        (seen, watch.position())
    });
    for t in 0..3 {
        let turn = [
            Message::assistant(format!("q{t}")),
            Message::assistant(format!("a{t}")),
        ];
        store.append_turn(id, &turn).await.unwrap();
    }
    // The fourth turn rolls back inside PostgreSQL: nothing may be
    // published for it.
    let err = store
        .append_turn(id, &[Message::assistant("rolled back")])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("refused turn"), "{err}");
    let (seen, position) = reader.await.unwrap();
    let texts: Vec<String> = seen
        .iter()
        .map(|e| e.message.to_value().unwrap()["content"]["assistant_response"].to_string())
        .collect();
    assert_eq!(
        texts,
        ["q0", "a0", "q1", "a1", "q2", "a2"].map(|s| format!("\"{s}\""))
    );
    assert_eq!(
        seen.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4, 5]
    );
    assert_eq!(
        seen.iter().map(|e| e.version).collect::<Vec<_>>(),
        [2, 2, 3, 3, 4, 4]
    );
    let events: i64 = c
        .query_one("SELECT COUNT(*) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(events, 6, "no outbox row for the rolled-back turn");

    // Resuming from the middle repeats nothing and skips nothing.
    c.batch_execute("DROP TRIGGER refuse_long ON branches")
        .await
        .unwrap();
    let mut resumed = store.watch(id, seen[3].id);
    store
        .append_turn(id, &[Message::assistant("after")])
        .await
        .unwrap();
    let mut rest = Vec::new();
    for _ in 0..3 {
        rest.push(
            tokio::time::timeout(Duration::from_secs(20), resumed.next())
                .await
                .expect("resumed watch delivers")
                .unwrap(),
        );
    }
    assert_eq!(rest.iter().map(|e| e.seq).collect::<Vec<_>>(), [4, 5, 6]);
    assert!(rest[2].id > position);

    // The watch's connection is killed: it reconnects and carries on.
    let killed: i64 = c
        .query_one(
            "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()
               AND query LIKE '%FROM events WHERE branch_id%'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(killed >= 1, "no watch connection found to kill");
    store
        .append_turn(id, &[Message::assistant("after the kill")])
        .await
        .unwrap();
    let e = tokio::time::timeout(Duration::from_secs(30), resumed.next())
        .await
        .expect("the watch recovers from a killed connection")
        .unwrap();
    assert_eq!(e.seq, 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_dropped_mid_turn_writes_nothing_and_the_store_recovers() {
    let Some(url) = pg_url() else { return };
    let schema = fresh_schema("dropped");
    let store = PgStore::connect_with(&url, opts(&schema)).await.unwrap();
    let live = common::conversation(1);
    let id = live.id();
    store.save(&live).await.unwrap();
    let before = store.load_versioned(id).await.unwrap();
    let c = raw(&url, &schema).await;
    // The branch update of the next turn stalls after the messages and
    // outbox rows are in, long enough to cut its connection.
    c.batch_execute(
        "CREATE FUNCTION stall() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_sleep(30); RETURN NEW; END $$;
         CREATE TRIGGER stall BEFORE UPDATE ON branches
             FOR EACH ROW EXECUTE FUNCTION stall();",
    )
    .await
    .unwrap();
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .append_turn_at(id, before.1, &[Message::assistant("cut off")])
                .await
        })
    };
    let mut killed = 0i64;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        killed = c
            .query_one(
                "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()
                   AND query LIKE 'SELECT pg_sleep%' OR (wait_event = 'PgSleep' AND pid <> pg_backend_pid())",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if killed > 0 {
            break;
        }
    }
    assert!(killed > 0, "the stalled turn was never seen");
    let err = tokio::time::timeout(Duration::from_secs(20), writer)
        .await
        .expect("the cut-off turn returns")
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, StoreError::Postgres { .. }), "{err}");
    c.batch_execute("DROP TRIGGER stall ON branches")
        .await
        .unwrap();
    // Nothing of the turn is visible, in the rows or the outbox.
    let (after, version) = store.load_versioned(id).await.unwrap();
    assert_eq!(version, before.1);
    assert_eq!(
        after.to_dict(&Default::default()).unwrap(),
        before.0.to_dict(&Default::default()).unwrap()
    );
    let events: i64 = c
        .query_one("SELECT COUNT(*) FROM events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(events, 3, "only the saved messages were announced");
    // The same store carries on: the pool replaced the dead connection.
    let mut ok = None;
    for _ in 0..3 {
        match store
            .append_turn_at(id, version, &[Message::assistant("retried")])
            .await
        {
            Ok(v) => {
                ok = Some(v);
                break;
            }
            Err(StoreError::Postgres { .. }) => continue,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(ok, Some(version + 1));
    assert!(store.check_consistency().await.unwrap().is_empty());
}

/// The test server speaks TLS with a certificate from a throwaway CA
/// (`PGSSLROOTCERT`): the store's connections verify it, and a store that
/// trusts another CA refuses the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_is_used_and_the_server_is_verified() {
    let Some(url) = pg_url() else { return };
    if !url.contains("sslmode=require") {
        let required = std::env::var("LIONAGI_PG_REQUIRED").is_ok_and(|v| v == "1")
            || std::env::var_os("CI").is_some();
        assert!(
            !required,
            "the CI server must be started with TLS (sslmode=require)"
        );
        eprintln!("skipped: LIONAGI_PG_URL does not ask for TLS");
        return;
    }
    let store = PgStore::connect_with(&url, opts(&fresh_schema("tls")))
        .await
        .unwrap();
    let c = store.connection().await.unwrap();
    let ssl: bool = c
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ssl, "the store's connection is not encrypted");
    let Some(other) = std::env::var_os("LIONAGI_PG_OTHER_CA") else {
        eprintln!("skipped the refusal: LIONAGI_PG_OTHER_CA is not set");
        return;
    };
    let untrusting = PgOptions {
        ca_file: Some(other.into()),
        ..opts(&fresh_schema("tls_no"))
    };
    let err = PgStore::connect_with(&url, untrusting).await.unwrap_err();
    let text = err.to_string();
    assert!(text.to_lowercase().contains("certificate"), "{text}");
}
