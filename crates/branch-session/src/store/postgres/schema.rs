//! The PostgreSQL schema (docs/scaling.md), migrated forward one step at a
//! time in one transaction under an advisory lock, so workers starting
//! together migrate once and the others find the work done.
//!
//! * version 1: branches (skeleton, count, version), one row per message,
//!   the outbox of added messages (`events`), durable memory items;
//! * version 2: one row per log (`record_turn_at` appends a turn's logs);
//!   logs stored inline in a skeleton move to rows.
//!
//! Bodies and skeletons are `text`, not `jsonb`: `jsonb` reorders keys and
//! respells numbers, and the reference's key order and float spelling are
//! part of the contract.

use std::path::PathBuf;

use tokio_postgres::Client;

use crate::store::error::StoreError;

/// The newest schema version this build writes.
pub const CURRENT_VERSION: i64 = 2;

/// Key of the advisory lock migrations run under (any fixed number; this
/// one spells "lionagi" in ASCII).
const MIGRATION_LOCK: i64 = 0x6c_696f_6e61_6769;

const V1: &str = "
CREATE TABLE branches (
    id            uuid PRIMARY KEY,
    ord           bigserial NOT NULL UNIQUE,
    name          text,
    skeleton      text NOT NULL,
    has_view      boolean NOT NULL DEFAULT false,
    message_count bigint NOT NULL DEFAULT 0,
    version       bigint NOT NULL DEFAULT 0,
    updated_at    double precision NOT NULL
);
CREATE TABLE messages (
    branch_id uuid   NOT NULL REFERENCES branches (id) ON DELETE CASCADE,
    seq       bigint NOT NULL,
    pos       bigint NOT NULL,
    msg_id    uuid   NOT NULL,
    hash      bigint NOT NULL,
    body      text   NOT NULL,
    PRIMARY KEY (branch_id, seq),
    UNIQUE (branch_id, msg_id)
);
CREATE TABLE events (
    id        bigserial PRIMARY KEY,
    branch_id uuid   NOT NULL REFERENCES branches (id) ON DELETE CASCADE,
    seq       bigint NOT NULL,
    version   bigint NOT NULL,
    body      text   NOT NULL
);
CREATE INDEX events_by_branch ON events (branch_id, id);
CREATE TABLE memory_items (
    scope      text   NOT NULL,
    id         uuid   NOT NULL,
    seq        bigserial NOT NULL,
    created_at double precision NOT NULL,
    metadata   text   NOT NULL,
    content    text   NOT NULL,
    tags       text[] NOT NULL,
    PRIMARY KEY (scope, id)
);
CREATE INDEX memory_by_seq ON memory_items (scope, seq);
CREATE INDEX memory_by_tag ON memory_items USING GIN (tags);
";

const V2: &str = "
CREATE TABLE logs (
    branch_id uuid   NOT NULL REFERENCES branches (id) ON DELETE CASCADE,
    seq       bigint NOT NULL,
    pos       bigint NOT NULL,
    log_id    uuid   NOT NULL,
    hash      bigint NOT NULL,
    body      text   NOT NULL,
    PRIMARY KEY (branch_id, seq),
    UNIQUE (branch_id, log_id)
);
";

/// Brings the database (or `schema`) to [`CURRENT_VERSION`]. A newer one
/// is refused and left untouched; a failing step rolls every step back.
pub(crate) async fn migrate(
    client: &mut Client,
    label: &str,
    schema: Option<&str>,
) -> Result<(), StoreError> {
    let err = |op: &'static str| move |e: tokio_postgres::Error| super::pg_err(label, op, e);
    let tx = client.transaction().await.map_err(err("begin migration"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(err("take the migration lock"))?;
    if let Some(s) = schema {
        // The name was checked to be a plain identifier.
        tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {s}"))
            .await
            .map_err(err("create the schema"))?;
    }
    tx.batch_execute("CREATE TABLE IF NOT EXISTS schema_version (version bigint NOT NULL)")
        .await
        .map_err(err("create schema_version"))?;
    let found = tx
        .query_one("SELECT COALESCE(MAX(version), 0) FROM schema_version", &[])
        .await
        .map_err(err("read schema version"))?;
    let found: i64 = super::column(&found, 0).map_err(|reason| StoreError::Corrupt {
        path: PathBuf::from(label),
        table: "schema_version",
        what: "the version".into(),
        reason,
    })?;
    if found > CURRENT_VERSION {
        return Err(StoreError::NewerSchema {
            path: PathBuf::from(label),
            found,
            supported: CURRENT_VERSION,
        });
    }
    if found == CURRENT_VERSION {
        return tx.commit().await.map_err(err("commit migration"));
    }
    if found < 1 {
        tx.batch_execute(V1)
            .await
            .map_err(err("migrate to version 1"))?;
    }
    if found < 2 {
        tx.batch_execute(V2)
            .await
            .map_err(err("migrate to version 2"))?;
        inline_logs_to_rows(&tx, label).await?;
    }
    tx.execute("DELETE FROM schema_version", &[])
        .await
        .map_err(err("write schema version"))?;
    tx.execute(
        "INSERT INTO schema_version (version) VALUES ($1)",
        &[&CURRENT_VERSION],
    )
    .await
    .map_err(err("write schema version"))?;
    tx.commit().await.map_err(err("commit migration"))
}

/// Moves the logs each skeleton holds inline (written by version 1) into
/// rows. A skeleton over the row cap is left as it is: loading it fails
/// with that cap either way.
async fn inline_logs_to_rows(
    tx: &tokio_postgres::Transaction<'_>,
    label: &str,
) -> Result<(), StoreError> {
    let err = |e: tokio_postgres::Error| super::pg_err(label, "migrate to version 2", e);
    let cap = i64::try_from(crate::limits::MAX_STORED_ROW_BYTES).unwrap_or(i64::MAX);
    let rows = tx
        .query(
            "SELECT id, skeleton FROM branches
             WHERE octet_length(skeleton)::bigint <= $1 AND skeleton LIKE '%\"logs\":{%'",
            &[&cap],
        )
        .await
        .map_err(err)?;
    for row in rows {
        let corrupt = |what: String, reason: String| StoreError::Corrupt {
            path: PathBuf::from(label),
            table: "branches",
            what,
            reason,
        };
        let id: uuid::Uuid =
            super::column(&row, 0).map_err(|r| corrupt("a branch id".into(), r))?;
        let skeleton: String =
            super::column(&row, 1).map_err(|r| corrupt(format!("branch {id}"), r))?;
        let moved = crate::store::layout::take_inline_logs(&skeleton)
            .map_err(|r| corrupt(format!("branch {id}"), r))?;
        let Some((skeleton, logs)) = moved else {
            continue;
        };
        tx.execute(
            "UPDATE branches SET skeleton = $2 WHERE id = $1",
            &[&id, &skeleton],
        )
        .await
        .map_err(err)?;
        for (seq, log) in (0i64..).zip(logs) {
            let log_id = uuid::Uuid::parse_str(&log.id)
                .map_err(|e| corrupt(format!("branch {id}"), format!("log {seq}'s id: {e}")))?;
            tx.execute(
                "INSERT INTO logs (branch_id, seq, pos, log_id, hash, body)
                 VALUES ($1, $2, $3, $4, $5, $6)",
                &[&id, &seq, &log.pos, &log_id, &log.hash, &log.body],
            )
            .await
            .map_err(err)?;
        }
    }
    Ok(())
}
