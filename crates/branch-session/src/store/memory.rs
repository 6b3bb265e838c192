//! `SqliteMemoryStore`: durable branch memory in the store's database.

use std::sync::Arc;

use async_trait::async_trait;
use branch_core::element::Element;
use branch_core::{MemoryError, MemoryItem, MemoryQuery, MemoryStore};
use rusqlite::{OptionalExtension, TransactionBehavior, params};
use serde_json::Value;
use uuid::Uuid;

use super::error::StoreError;
use super::pool::Pool;
use super::sqlite::sql_err;
use crate::limits::MAX_STORED_ROW_BYTES;

/// A [`MemoryStore`] whose items live in a [`super::SqliteStore`]'s file,
/// under one scope (a session id, a branch id, an application name...).
/// It answers queries exactly as the in-process store does: insertion
/// order, replacing an item keeps its position.
#[derive(Clone)]
pub struct SqliteMemoryStore {
    pool: Arc<Pool>,
    scope: Arc<str>,
}

impl std::fmt::Debug for SqliteMemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteMemoryStore")
            .field("path", &self.pool.path())
            .field("scope", &self.scope)
            .finish()
    }
}

impl SqliteMemoryStore {
    pub(crate) fn new(pool: Arc<Pool>, scope: String) -> Self {
        Self {
            pool,
            scope: scope.into(),
        }
    }

    /// The scope this store reads and writes.
    pub fn scope(&self) -> &str {
        &self.scope
    }
}

fn mem_err(e: StoreError) -> MemoryError {
    MemoryError(e.to_string())
}

/// An item's columns; `None` for a text over the row cap.
type Row = (String, f64, Option<String>, Option<String>, Option<String>);

/// The item columns, each text capped at [`MAX_STORED_ROW_BYTES`] (the
/// parameter `cap`, such as `?3`).
fn columns(cap: &str) -> String {
    format!(
        "id, created_at,
         CASE WHEN length(CAST(metadata AS BLOB)) > {cap} THEN NULL ELSE metadata END,
         CASE WHEN length(CAST(content AS BLOB)) > {cap} THEN NULL ELSE content END,
         CASE WHEN length(CAST(tags AS BLOB)) > {cap} THEN NULL ELSE tags END"
    )
}

fn cap() -> i64 {
    i64::try_from(MAX_STORED_ROW_BYTES).unwrap_or(i64::MAX)
}

fn decode(
    path: &std::path::Path,
    (id, created_at, metadata, content, tags): Row,
) -> Result<MemoryItem, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        path: path.to_owned(),
        table: "memory_items",
        what: format!("memory item {id}"),
        reason,
    };
    let uuid = Uuid::parse_str(&id).map_err(|e| corrupt(e.to_string()))?;
    let created_at = super::sqlite::finite_time("created_at", created_at).map_err(corrupt)?;
    let too_big = || corrupt(format!("over the {MAX_STORED_ROW_BYTES}-byte row cap"));
    let (metadata, content, tags) = (
        metadata.ok_or_else(too_big)?,
        content.ok_or_else(too_big)?,
        tags.ok_or_else(too_big)?,
    );
    let metadata: branch_core::Metadata =
        serde_json::from_str(&metadata).map_err(|e| corrupt(e.to_string()))?;
    let content: Value = serde_json::from_str(&content).map_err(|e| corrupt(e.to_string()))?;
    let tags: Vec<String> = serde_json::from_str(&tags).map_err(|e| corrupt(e.to_string()))?;
    Ok(MemoryItem {
        element: Element {
            id: uuid,
            created_at,
            metadata,
        },
        content,
        tags,
    })
}

#[async_trait]
impl MemoryStore for SqliteMemoryStore {
    async fn store(&self, item: MemoryItem) -> Result<Uuid, MemoryError> {
        let id = item.id();
        let scope = Arc::clone(&self.scope);
        let enc = |e: serde_json::Error| MemoryError(format!("memory item {id}: {e}"));
        let metadata = serde_json::to_string(&item.element.metadata).map_err(enc)?;
        let content = serde_json::to_string(&item.content).map_err(enc)?;
        let tags = serde_json::to_string(&item.tags).map_err(enc)?;
        let created_at = item.element.created_at;
        self.pool
            .run(move |c, p| {
                let err = |e| sql_err(p, format!("store memory item {id}"), e);
                let tx = c
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(err)?;
                tx.execute(
                    "INSERT INTO memory_items (scope, id, seq, created_at, metadata, content, tags)
                     VALUES (?1, ?2,
                             (SELECT COALESCE(MAX(seq), -1) + 1 FROM memory_items WHERE scope = ?1),
                             ?3, ?4, ?5, ?6)
                     ON CONFLICT (scope, id) DO UPDATE SET
                         created_at = excluded.created_at, metadata = excluded.metadata,
                         content = excluded.content, tags = excluded.tags",
                    params![&*scope, id.to_string(), created_at, metadata, content, tags],
                )
                .map_err(err)?;
                tx.commit().map_err(err)
            })
            .await
            .map_err(mem_err)?;
        Ok(id)
    }

    async fn retrieve(&self, id: Uuid) -> Result<Option<MemoryItem>, MemoryError> {
        let scope = Arc::clone(&self.scope);
        self.pool
            .run(move |c, p| {
                let row: Option<Row> = c
                    .query_row(
                        &format!(
                            "SELECT {} FROM memory_items WHERE scope = ?1 AND id = ?2",
                            columns("?3")
                        ),
                        params![&*scope, id.to_string(), cap()],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
                    )
                    .optional()
                    .map_err(|e| sql_err(p, format!("retrieve memory item {id}"), e))?;
                row.map(|r| decode(p, r)).transpose()
            })
            .await
            .map_err(mem_err)
    }

    async fn search(&self, query: &MemoryQuery) -> Result<Vec<MemoryItem>, MemoryError> {
        let scope = Arc::clone(&self.scope);
        let q = query.clone();
        self.pool
            .run(move |c, p| {
                let err = |e| sql_err(p, "search memory", e);
                let mut out = Vec::new();
                if q.limit == 0 {
                    return Ok(out);
                }
                let mut stmt = c
                    .prepare_cached(&format!(
                        "SELECT {} FROM memory_items WHERE scope = ?1 ORDER BY seq",
                        columns("?2")
                    ))
                    .map_err(err)?;
                let rows = stmt
                    .query_map(params![&*scope, cap()], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                    })
                    .map_err(err)?;
                // Filtering in Rust with the shared predicate keeps the
                // semantics (Unicode lower-casing, JSON equality) identical
                // to the in-process store.
                for r in rows {
                    let item = decode(p, r.map_err(err)?)?;
                    if q.matches(&item) {
                        out.push(item);
                        if out.len() >= q.limit {
                            break;
                        }
                    }
                }
                Ok(out)
            })
            .await
            .map_err(mem_err)
    }
}
