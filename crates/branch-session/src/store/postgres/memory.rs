//! `PgMemoryStore`: durable branch memory in a [`super::PgStore`]'s
//! database, answering exactly as the in-process store does.

use std::sync::Arc;

use async_trait::async_trait;
use branch_core::element::Element;
use branch_core::{MemoryError, MemoryItem, MemoryQuery, MemoryStore};
use futures_util::{StreamExt, pin_mut};
use serde_json::Value;
use uuid::Uuid;

use super::{Shared, column, pg_err};
use crate::limits::MAX_STORED_ROW_BYTES;
use crate::store::error::StoreError;
use crate::store::sqlite::finite_time;

/// A [`MemoryStore`] whose items live in PostgreSQL under one scope.
/// Insertion order is kept and replacing an item keeps its place; the
/// final match is [`MemoryQuery::matches`], so Unicode case folding and
/// JSON equality behave as in `InMemoryStore`.
#[derive(Clone)]
pub struct PgMemoryStore {
    shared: Arc<Shared>,
    scope: Arc<str>,
}

impl std::fmt::Debug for PgMemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgMemoryStore")
            .field("store", &self.shared.label)
            .field("scope", &self.scope)
            .finish()
    }
}

fn mem_err(e: StoreError) -> MemoryError {
    MemoryError(e.to_string())
}

impl PgMemoryStore {
    pub(crate) fn new(shared: Arc<Shared>, scope: String) -> Self {
        Self {
            shared,
            scope: scope.into(),
        }
    }

    /// The scope this store reads and writes.
    pub fn scope(&self) -> &str {
        &self.scope
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, MemoryError> {
        self.shared
            .pool
            .get()
            .await
            .map_err(|e| mem_err(pg_err(&self.shared.label, "take a connection", e)))
    }

    fn decode(&self, row: &tokio_postgres::Row) -> Result<MemoryItem, StoreError> {
        let corrupt_as = |what: String, reason: String| StoreError::Corrupt {
            path: self.shared.label.clone().into(),
            table: "memory_items",
            what,
            reason,
        };
        let id: Uuid = column(row, 0).map_err(|r| corrupt_as("a memory item".into(), r))?;
        let corrupt = |reason: String| corrupt_as(format!("memory item {id}"), reason);
        let created_at: f64 = column(row, 1).map_err(corrupt)?;
        let created_at = finite_time("created_at", created_at).map_err(corrupt)?;
        let metadata: Option<String> = column(row, 2).map_err(corrupt)?;
        let content: Option<String> = column(row, 3).map_err(corrupt)?;
        let tags: Vec<String> = column(row, 4).map_err(corrupt)?;
        let too_big = || corrupt(format!("over the {MAX_STORED_ROW_BYTES}-byte row cap"));
        let metadata: branch_core::Metadata = serde_json::from_str(&metadata.ok_or_else(too_big)?)
            .map_err(|e| corrupt(e.to_string()))?;
        let content: Value = serde_json::from_str(&content.ok_or_else(too_big)?)
            .map_err(|e| corrupt(e.to_string()))?;
        Ok(MemoryItem {
            element: Element {
                id,
                created_at,
                metadata,
            },
            content,
            tags,
        })
    }
}

/// The item columns, text capped by the parameter `cap` (`$2`, `$3`...).
fn columns(cap: &str) -> String {
    format!(
        "id, created_at,
         CASE WHEN octet_length(metadata)::bigint > {cap} THEN NULL ELSE metadata END,
         CASE WHEN octet_length(content)::bigint > {cap} THEN NULL ELSE content END, tags"
    )
}

#[async_trait]
impl MemoryStore for PgMemoryStore {
    async fn store(&self, item: MemoryItem) -> Result<Uuid, MemoryError> {
        let id = item.id();
        let enc = |e: serde_json::Error| MemoryError(format!("memory item {id}: {e}"));
        let metadata = serde_json::to_string(&item.element.metadata).map_err(enc)?;
        let content = serde_json::to_string(&item.content).map_err(enc)?;
        let c = self.client().await?;
        c.execute(
            "INSERT INTO memory_items (scope, id, created_at, metadata, content, tags)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (scope, id) DO UPDATE SET
                 created_at = excluded.created_at, metadata = excluded.metadata,
                 content = excluded.content, tags = excluded.tags",
            &[
                &&*self.scope,
                &id,
                &item.element.created_at,
                &metadata,
                &content,
                &item.tags,
            ],
        )
        .await
        .map_err(|e| {
            mem_err(pg_err(
                &self.shared.label,
                format!("store memory item {id}"),
                e,
            ))
        })?;
        Ok(id)
    }

    async fn retrieve(&self, id: Uuid) -> Result<Option<MemoryItem>, MemoryError> {
        let cap = i64::try_from(MAX_STORED_ROW_BYTES).unwrap_or(i64::MAX);
        let c = self.client().await?;
        let row = c
            .query_opt(
                &format!(
                    "SELECT {} FROM memory_items WHERE scope = $1 AND id = $2",
                    columns("$3")
                ),
                &[&&*self.scope, &id, &cap],
            )
            .await
            .map_err(|e| {
                mem_err(pg_err(
                    &self.shared.label,
                    format!("retrieve memory item {id}"),
                    e,
                ))
            })?;
        row.map(|r| self.decode(&r)).transpose().map_err(mem_err)
    }

    async fn search(&self, query: &MemoryQuery) -> Result<Vec<MemoryItem>, MemoryError> {
        let mut out = Vec::new();
        if query.limit == 0 {
            return Ok(out);
        }
        let cap = i64::try_from(MAX_STORED_ROW_BYTES).unwrap_or(i64::MAX);
        let err = |e| mem_err(pg_err(&self.shared.label, "search memory", e));
        let c = self.client().await?;
        // Streamed in insertion order and stopped at the limit.
        let stream = c
            .query_raw(
                &format!(
                    "SELECT {} FROM memory_items WHERE scope = $1 ORDER BY seq",
                    columns("$2")
                ),
                [
                    &&*self.scope as &(dyn tokio_postgres::types::ToSql + Sync),
                    &cap,
                ],
            )
            .await
            .map_err(err)?;
        pin_mut!(stream);
        while let Some(row) = stream.next().await {
            let item = self.decode(&row.map_err(err)?).map_err(mem_err)?;
            if query.matches(&item) {
                out.push(item);
                if out.len() >= query.limit {
                    break;
                }
            }
        }
        Ok(out)
    }
}
