//! The store's schema, versioned with `PRAGMA user_version` and migrated
//! forward one step at a time inside a single immediate transaction.
//!
//! * version 1: one `to_dict` document per branch (`branches.doc`), the
//!   layout of a reference JSON file;
//! * version 2: the skeleton of each branch plus one row per message, so a
//!   turn appends rows instead of rewriting the conversation; durable
//!   memory items;
//! * version 3: a version per branch, bumped by every write, for
//!   optimistic concurrency (`append_turn_at`);
//! * version 4: one row per log, so a turn appends its logs too
//!   (`record_turn_at`); logs stored inline in a skeleton move to rows.
//!
//! Every step runs from an empty file too, so a new store and a migrated
//! one end with the same schema.

use std::collections::HashMap;
use std::path::Path;

use branch_core::Branch;
use rusqlite::{Connection, Transaction, TransactionBehavior, params};

use super::error::StoreError;
use super::layout::{self, MessageRow, SplitBranch, Table};
use super::sqlite::sql_err;

/// The newest schema version this build writes.
pub const CURRENT_VERSION: i64 = 4;

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
        // Version 2's rewrite writes logs as rows already.
        create_logs(&tx).map_err(err("migrate to version 2"))?;
        to_v2(&tx, path)?;
    }
    if found < 3 {
        tx.execute_batch("ALTER TABLE branches ADD COLUMN version INTEGER NOT NULL DEFAULT 0;")
            .map_err(err("migrate to version 3"))?;
    }
    if found < 4 {
        create_logs(&tx).map_err(err("migrate to version 4"))?;
        to_v4(&tx, path)?;
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

fn create_logs(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS logs (
             row        INTEGER PRIMARY KEY,
             branch_key INTEGER NOT NULL,
             log_id     TEXT NOT NULL,
             seq        INTEGER NOT NULL,
             pos        INTEGER NOT NULL,
             hash       INTEGER NOT NULL,
             body       TEXT NOT NULL
         );
         CREATE UNIQUE INDEX IF NOT EXISTS logs_by_id ON logs (branch_key, log_id);
         CREATE INDEX IF NOT EXISTS logs_by_seq ON logs (branch_key, seq);",
    )
}

/// Moves the logs each skeleton holds inline into rows. A skeleton over
/// the row cap is left as it is: loading it fails with that cap either
/// way.
fn to_v4(tx: &Transaction<'_>, path: &Path) -> Result<(), StoreError> {
    let err = |e| sql_err(path, "migrate to version 4", e);
    let skeletons: Vec<(i64, String, Option<String>)> = {
        let mut stmt = tx
            .prepare(
                "SELECT key, id, CASE WHEN length(CAST(skeleton AS BLOB)) > ?1 THEN NULL ELSE skeleton END
                 FROM branches ORDER BY key",
            )
            .map_err(err)?;
        let rows = stmt
            .query_map(
                params![i64::try_from(crate::limits::MAX_STORED_ROW_BYTES).unwrap_or(i64::MAX)],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .map_err(err)?;
        rows.collect::<rusqlite::Result<_>>().map_err(err)?
    };
    for (key, id, skeleton) in skeletons {
        let Some(skeleton) = skeleton else { continue };
        let moved = layout::take_inline_logs(&skeleton).map_err(|reason| StoreError::Corrupt {
            path: path.to_owned(),
            table: "branches",
            what: format!("branch {id}"),
            reason,
        })?;
        let Some((skeleton, logs)) = moved else {
            continue;
        };
        tx.execute(
            "UPDATE branches SET skeleton = ?2 WHERE key = ?1",
            params![key, skeleton],
        )
        .map_err(err)?;
        sync_rows(tx, Table::Logs, key, &logs).map_err(err)?;
    }
    Ok(())
}

fn to_v2(tx: &Transaction<'_>, path: &Path) -> Result<(), StoreError> {
    let err = |e| sql_err(path, "migrate to version 2", e);
    tx.execute_batch(
        "ALTER TABLE branches RENAME TO branches_v1;
         CREATE TABLE branches (
             key           INTEGER PRIMARY KEY,
             id            TEXT NOT NULL UNIQUE,
             name          TEXT,
             skeleton      TEXT NOT NULL,
             has_view      INTEGER NOT NULL DEFAULT 0,
             message_count INTEGER NOT NULL DEFAULT 0,
             updated_at    REAL NOT NULL
         );
         CREATE TABLE messages (
             row        INTEGER PRIMARY KEY,
             branch_key INTEGER NOT NULL,
             msg_id     TEXT NOT NULL,
             seq        INTEGER NOT NULL,
             pos        INTEGER NOT NULL,
             hash       INTEGER NOT NULL,
             body       TEXT NOT NULL
         );
         CREATE UNIQUE INDEX messages_by_id ON messages (branch_key, msg_id);
         CREATE INDEX messages_by_seq ON messages (branch_key, seq);
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
            table: "branches",
            what: format!("branch {id} (version 1 document)"),
            reason,
        };
        let branch = Branch::from_json_slice(doc.as_bytes()).map_err(|e| corrupt(e.to_string()))?;
        let split = layout::split(&branch).map_err(|e| corrupt(e.to_string()))?;
        write_branch(tx, &split, now).map_err(err)?;
    }
    tx.execute_batch("DROP TABLE branches_v1;").map_err(err)
}

/// Writes a whole branch inside `tx`. Rows already stored unchanged
/// (same position, same content hash) are left alone, so saving a long
/// conversation after one more turn writes only that turn.
pub(crate) fn write_branch(
    tx: &Transaction<'_>,
    b: &SplitBranch,
    now: f64,
) -> rusqlite::Result<()> {
    write_branch_rows(tx, b, now, false)
}

/// [`write_branch`], bumping the branch's version (schema 3 and later).
pub(crate) fn write_branch_versioned(
    tx: &Transaction<'_>,
    b: &SplitBranch,
    now: f64,
) -> rusqlite::Result<()> {
    write_branch_rows(tx, b, now, true)
}

fn write_branch_rows(
    tx: &Transaction<'_>,
    b: &SplitBranch,
    now: f64,
    versioned: bool,
) -> rusqlite::Result<()> {
    let upsert = if versioned {
        "INSERT INTO branches (id, name, skeleton, has_view, message_count, updated_at, version)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1)
         ON CONFLICT (id) DO UPDATE SET
             name = excluded.name, skeleton = excluded.skeleton, has_view = excluded.has_view,
             message_count = excluded.message_count, updated_at = excluded.updated_at,
             version = branches.version + 1
         RETURNING key"
    } else {
        "INSERT INTO branches (id, name, skeleton, has_view, message_count, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (id) DO UPDATE SET
             name = excluded.name, skeleton = excluded.skeleton, has_view = excluded.has_view,
             message_count = excluded.message_count, updated_at = excluded.updated_at
         RETURNING key"
    };
    let key: i64 = tx.query_row(
        upsert,
        params![
            b.id.to_string(),
            b.name,
            b.skeleton,
            b.has_view,
            b.rows.len() as i64,
            now
        ],
        |r| r.get(0),
    )?;
    sync_rows(tx, Table::Messages, key, &b.rows)?;
    sync_rows(tx, Table::Logs, key, &b.logs)
}

/// Makes a branch's rows in `table` exactly `rows` (in `collections`
/// order). Rows already stored unchanged (same place, same digest) are
/// left alone.
pub(crate) fn sync_rows(
    tx: &Transaction<'_>,
    table: Table,
    key: i64,
    rows: &[MessageRow],
) -> rusqlite::Result<()> {
    let (name, id_col) = table.names();
    let mut stored: HashMap<String, (i64, i64, i64, i64)> = {
        let mut stmt = tx.prepare_cached(&format!(
            "SELECT {id_col}, row, seq, pos, hash FROM {name} WHERE branch_key = ?1"
        ))?;
        let rows = stmt.query_map(params![key], |r| {
            Ok((r.get(0)?, (r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        })?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    let mut update = tx.prepare_cached(&format!(
        "UPDATE {name} SET seq = ?2, pos = ?3, hash = ?4, body = ?5 WHERE row = ?1"
    ))?;
    let mut insert = tx.prepare_cached(&format!(
        "INSERT INTO {name} (branch_key, {id_col}, seq, pos, hash, body)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
    ))?;
    for (seq, row) in (0i64..).zip(rows) {
        match stored.remove(&row.id) {
            Some((_, s, p, h)) if (s, p, h) == (seq, row.pos, row.hash) => {}
            Some((rowid, ..)) => {
                update.execute(params![rowid, seq, row.pos, row.hash, row.body])?;
            }
            None => {
                insert.execute(params![key, row.id, seq, row.pos, row.hash, row.body])?;
            }
        }
    }
    let mut delete = tx.prepare_cached(&format!("DELETE FROM {name} WHERE row = ?1"))?;
    for (rowid, ..) in stored.into_values() {
        delete.execute(params![rowid])?;
    }
    Ok(())
}
