//! The store's schema, versioned with `PRAGMA user_version` and migrated
//! forward one step at a time inside a single immediate transaction.
//!
//! * version 1: one `to_dict` document per branch (`branches.doc`), the
//!   layout of a reference JSON file;
//! * version 2: the skeleton of each branch plus one row per message, so a
//!   turn appends rows instead of rewriting the conversation; durable
//!   memory items.
//!
//! Every step runs from an empty file too, so a new store and a migrated
//! one end with the same schema.

use std::path::Path;

use branch_core::Branch;
use rusqlite::{Connection, Transaction, TransactionBehavior, params};

use super::error::StoreError;
use super::layout::{self, SplitBranch};
use super::sqlite::sql_err;

/// The newest schema version this build writes.
pub const CURRENT_VERSION: i64 = 2;

/// Brings the database to [`CURRENT_VERSION`]. A newer file is refused and
/// left untouched; a failing step rolls every step back.
pub(crate) fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let err = |op: &str| {
        let op = op.to_owned();
        move |e| sql_err(path, op.clone(), e)
    };
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(err("begin migration"))?;
    // Read inside the write lock: another process may have migrated while
    // this one waited for it.
    let found: i64 = tx
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(err("read schema version"))?;
    if found > CURRENT_VERSION {
        return Err(StoreError::NewerSchema {
            path: path.to_owned(),
            found,
            supported: CURRENT_VERSION,
        });
    }
    if found == CURRENT_VERSION {
        return Ok(());
    }
    if found < 1 {
        to_v1(&tx).map_err(err("migrate to version 1"))?;
    }
    if found < 2 {
        to_v2(&tx, path)?;
    }
    tx.pragma_update(None, "user_version", CURRENT_VERSION)
        .map_err(err("write schema version"))?;
    tx.commit().map_err(err("commit migration"))
}

fn to_v1(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS branches (
             id   TEXT PRIMARY KEY NOT NULL,
             name TEXT,
             doc  TEXT NOT NULL
         );",
    )
}

fn to_v2(tx: &Transaction<'_>, path: &Path) -> Result<(), StoreError> {
    let err = |e| sql_err(path, "migrate to version 2", e);
    tx.execute_batch(
        "ALTER TABLE branches RENAME TO branches_v1;
         CREATE TABLE branches (
             id            TEXT PRIMARY KEY NOT NULL,
             name          TEXT,
             skeleton      TEXT NOT NULL,
             has_view      INTEGER NOT NULL DEFAULT 0,
             message_count INTEGER NOT NULL DEFAULT 0,
             updated_at    REAL NOT NULL
         );
         CREATE TABLE messages (
             branch_id TEXT NOT NULL,
             msg_id    TEXT NOT NULL,
             seq       INTEGER NOT NULL,
             pos       INTEGER NOT NULL,
             body      TEXT NOT NULL,
             PRIMARY KEY (branch_id, msg_id)
         ) WITHOUT ROWID;
         CREATE UNIQUE INDEX messages_by_seq ON messages (branch_id, seq);
         CREATE TABLE memory_items (
             scope      TEXT NOT NULL,
             id         TEXT NOT NULL,
             seq        INTEGER NOT NULL,
             created_at REAL NOT NULL,
             metadata   TEXT NOT NULL,
             content    TEXT NOT NULL,
             tags       TEXT NOT NULL,
             PRIMARY KEY (scope, id)
         ) WITHOUT ROWID;
         CREATE UNIQUE INDEX memory_by_seq ON memory_items (scope, seq);",
    )
    .map_err(err)?;
    let docs: Vec<(String, String)> = {
        let mut stmt = tx
            .prepare("SELECT id, doc FROM branches_v1 ORDER BY rowid")
            .map_err(err)?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(err)?;
        rows.collect::<rusqlite::Result<_>>().map_err(err)?
    };
    let now = branch_core::element::now();
    for (id, doc) in docs {
        let corrupt = |reason: String| StoreError::Corrupt {
            path: path.to_owned(),
            what: format!("branch {id} (version 1 document)"),
            reason,
        };
        let branch = Branch::from_json_slice(doc.as_bytes()).map_err(|e| corrupt(e.to_string()))?;
        let split = layout::split(&branch).map_err(|e| corrupt(e.to_string()))?;
        write_branch(tx, &split, now).map_err(err)?;
    }
    tx.execute_batch("DROP TABLE branches_v1;").map_err(err)
}

/// Writes a whole branch (replacing its rows) inside `tx`.
pub(crate) fn write_branch(
    tx: &Transaction<'_>,
    b: &SplitBranch,
    now: f64,
) -> rusqlite::Result<()> {
    let id = b.id.to_string();
    tx.execute(
        "INSERT INTO branches (id, name, skeleton, has_view, message_count, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (id) DO UPDATE SET
             name = excluded.name, skeleton = excluded.skeleton, has_view = excluded.has_view,
             message_count = excluded.message_count, updated_at = excluded.updated_at",
        params![id, b.name, b.skeleton, b.has_view, b.rows.len() as i64, now],
    )?;
    tx.execute("DELETE FROM messages WHERE branch_id = ?1", params![id])?;
    let mut insert = tx.prepare_cached(
        "INSERT INTO messages (branch_id, msg_id, seq, pos, body) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for (seq, row) in b.rows.iter().enumerate() {
        insert.execute(params![id, row.id, seq as i64, row.pos, row.body])?;
    }
    Ok(())
}
