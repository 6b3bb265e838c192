//! `SqliteStore`: the embedded default [`BranchStore`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use branch_core::{Branch, Message, MessageKind};
use rusqlite::{OptionalExtension, TransactionBehavior, params};
use serde_json::Value;
use uuid::Uuid;

use super::error::StoreError;
use super::layout;
use super::memory::SqliteMemoryStore;
use super::pool::Pool;
use super::schema::{self, write_branch};
use super::{BranchStore, BranchSummary};

/// When a commit counts as durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Every commit is flushed to disk before it is acknowledged: nothing
    /// acknowledged is lost even on power failure (`synchronous=FULL`).
    #[default]
    Full,
    /// Commits survive a crash of the process; a power failure may lose
    /// the last few, never consistency (`synchronous=NORMAL`). Faster.
    Normal,
}

impl Durability {
    pub(crate) fn pragma(self) -> &'static str {
        match self {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        }
    }
}

/// Settings of a [`SqliteStore`].
#[derive(Debug, Clone, PartialEq)]
pub struct SqliteOptions {
    /// How long a writer waits for another writer (in this or another
    /// process) before failing with "database is locked". Default 5 s.
    pub busy_timeout: Duration,
    /// When a commit is durable. Default [`Durability::Full`].
    pub durability: Durability,
    /// Most connections (and blocking threads) in use at once. Default 4.
    pub max_connections: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            busy_timeout: Duration::from_secs(5),
            durability: Durability::Full,
            max_connections: 4,
        }
    }
}

pub(crate) fn sql_err(path: &Path, op: impl Into<String>, source: rusqlite::Error) -> StoreError {
    StoreError::Sqlite {
        path: path.to_owned(),
        op: op.into(),
        source,
    }
}

/// Branches in one SQLite file (WAL mode), shared safely by many tasks and
/// by several processes on the same machine. Cloning is cheap and shares
/// the connections.
#[derive(Clone)]
pub struct SqliteStore {
    pool: Arc<Pool>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.pool.path())
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the store at `path` with default options,
    /// migrating its schema forward.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, SqliteOptions::default()).await
    }

    /// [`SqliteStore::open`] with options.
    pub async fn open_with(
        path: impl AsRef<Path>,
        opts: SqliteOptions,
    ) -> Result<Self, StoreError> {
        let path: PathBuf = path.as_ref().to_owned();
        let p = path.clone();
        let o = opts.clone();
        let first = tokio::task::spawn_blocking(move || {
            let mut conn = Pool::connect(&p, &o)?;
            schema::migrate(&mut conn, &p)?;
            Ok::<_, StoreError>(conn)
        })
        .await
        .map_err(|e| StoreError::Task {
            path: path.clone(),
            reason: e.to_string(),
        })??;
        Ok(Self {
            pool: Arc::new(Pool::new(path, opts, first)),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        self.pool.path()
    }

    /// The newest schema version this build writes.
    pub const SCHEMA_VERSION: i64 = schema::CURRENT_VERSION;

    /// The schema version recorded in the file.
    pub async fn schema_version(&self) -> Result<i64, StoreError> {
        self.pool
            .run(|c, p| {
                c.pragma_query_value(None, "user_version", |r| r.get(0))
                    .map_err(|e| sql_err(p, "read schema version", e))
            })
            .await
    }

    /// SQLite's own consistency check plus the store's invariants: every
    /// message belongs to a stored branch, positions are dense, counts
    /// match. Returns the problems found (empty when consistent).
    pub async fn check_consistency(&self) -> Result<Vec<String>, StoreError> {
        self.pool
            .run(|c, p| {
                let err = |e| sql_err(p, "check consistency", e);
                let mut problems = Vec::new();
                let mut stmt = c.prepare("PRAGMA integrity_check").map_err(err)?;
                let rows = stmt.query_map([], |r| r.get::<_, String>(0)).map_err(err)?;
                for r in rows {
                    let r = r.map_err(err)?;
                    if r != "ok" {
                        problems.push(format!("integrity: {r}"));
                    }
                }
                let checks = [
                    (
                        "messages without a branch",
                        "SELECT COUNT(*) FROM messages m LEFT JOIN branches b ON b.key = m.branch_key
                         WHERE b.key IS NULL",
                    ),
                    (
                        "branches whose message_count is wrong",
                        "SELECT COUNT(*) FROM branches b WHERE b.message_count !=
                             (SELECT COUNT(*) FROM messages m WHERE m.branch_key = b.key)",
                    ),
                    (
                        "branches whose positions are not 0..message_count",
                        "SELECT COUNT(*) FROM branches b WHERE b.message_count > 0 AND (
                             (SELECT MAX(pos) FROM messages m WHERE m.branch_key = b.key) + 1 != b.message_count
                             OR (SELECT COUNT(DISTINCT pos) FROM messages m WHERE m.branch_key = b.key) != b.message_count
                             OR (SELECT MAX(seq) FROM messages m WHERE m.branch_key = b.key) + 1 != b.message_count
                             OR (SELECT COUNT(DISTINCT seq) FROM messages m WHERE m.branch_key = b.key) != b.message_count)",
                    ),
                ];
                for (what, sql) in checks {
                    let n: i64 = c.query_row(sql, [], |r| r.get(0)).map_err(err)?;
                    if n != 0 {
                        problems.push(format!("{n} {what}"));
                    }
                }
                Ok(problems)
            })
            .await
    }

    /// A durable [`branch_core::MemoryStore`] in this database. Stores
    /// with the same `scope` share items; different scopes never see each
    /// other's.
    pub fn memory(&self, scope: impl Into<String>) -> SqliteMemoryStore {
        SqliteMemoryStore::new(Arc::clone(&self.pool), scope.into())
    }
}

/// Every database call runs on tokio's blocking pool. Serializing the
/// branch for `save` (one `to_json_vec`, about 10 ms for 10,000 messages)
/// happens on the calling task, which holds the borrowed branch.
#[async_trait]
impl BranchStore for SqliteStore {
    async fn save(&self, branch: &Branch) -> Result<(), StoreError> {
        let id = branch.id();
        let split = layout::split(branch).map_err(|source| StoreError::Branch { id, source })?;
        let now = branch_core::element::now();
        self.pool
            .run(move |c, p| {
                let err = |e| sql_err(p, format!("save branch {}", split.id), e);
                let tx = c
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(err)?;
                write_branch(&tx, &split, now).map_err(err)?;
                tx.commit().map_err(err)
            })
            .await
    }

    async fn append_turn(&self, branch_id: Uuid, messages: &[Message]) -> Result<(), StoreError> {
        let mut rows = Vec::with_capacity(messages.len());
        for m in messages {
            if m.kind() == MessageKind::System {
                return Err(StoreError::SystemInTurn {
                    branch_id,
                    message_id: m.id(),
                });
            }
            let body = m
                .to_value()
                .map_err(|source| StoreError::Branch {
                    id: branch_id,
                    source,
                })?
                .to_string();
            rows.push((m.id().to_string(), body));
        }
        let now = branch_core::element::now();
        self.pool
            .run(move |c, p| {
                let err = |e| sql_err(p, format!("append a turn to branch {branch_id}"), e);
                let bid = branch_id.to_string();
                let tx = c.transaction_with_behavior(TransactionBehavior::Immediate).map_err(err)?;
                let head: Option<(i64, bool, i64, String)> = tx
                    .query_row(
                        "SELECT key, has_view, message_count, skeleton FROM branches WHERE id = ?1",
                        params![bid],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                    )
                    .optional()
                    .map_err(err)?;
                let Some((key, has_view, count, skeleton)) = head else {
                    return Err(StoreError::NotFound(branch_id));
                };
                // Positions are dense, so the next one is the count.
                let mut next = count;
                let mut added = Vec::new();
                {
                    let mut update = tx
                        .prepare_cached(
                            "UPDATE messages SET hash = ?3, body = ?4 WHERE branch_key = ?1 AND msg_id = ?2",
                        )
                        .map_err(err)?;
                    let mut insert = tx
                        .prepare_cached(
                            "INSERT INTO messages (branch_key, msg_id, seq, pos, hash, body)
                             VALUES (?1, ?2, ?3, ?3, ?4, ?5)",
                        )
                        .map_err(err)?;
                    for (mid, body) in &rows {
                        let hash = layout::body_hash(body);
                        if update.execute(params![key, mid, hash, body]).map_err(err)? == 0 {
                            insert.execute(params![key, mid, next, hash, body]).map_err(err)?;
                            next += 1;
                            added.push(mid.clone());
                        }
                    }
                }
                let skeleton = if has_view && !added.is_empty() {
                    Some(extend_view(&skeleton, &added).map_err(|reason| StoreError::Corrupt {
                        path: p.to_owned(),
                        what: format!("branch {branch_id}"),
                        reason,
                    })?)
                } else {
                    None
                };
                tx.execute(
                    "UPDATE branches SET message_count = ?2, updated_at = ?3,
                         skeleton = COALESCE(?4, skeleton)
                     WHERE key = ?1",
                    params![key, next, now, skeleton],
                )
                .map_err(err)?;
                tx.commit().map_err(err)
            })
            .await
    }

    async fn load(&self, id: Uuid) -> Result<Branch, StoreError> {
        self.pool
            .run(move |c, p| {
                let err = |e| sql_err(p, format!("load branch {id}"), e);
                let bid = id.to_string();
                // One read transaction: the skeleton and the rows come from
                // the same snapshot even while writers commit.
                let tx = c.transaction().map_err(err)?;
                let head: Option<(i64, String)> = tx
                    .query_row(
                        "SELECT key, skeleton FROM branches WHERE id = ?1",
                        params![bid],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .optional()
                    .map_err(err)?;
                let Some((key, skeleton)) = head else {
                    return Err(StoreError::NotFound(id));
                };
                let rows: Vec<(String, i64, String)> = {
                    let mut stmt = tx
                        .prepare_cached(
                            "SELECT msg_id, pos, body FROM messages WHERE branch_key = ?1 ORDER BY seq",
                        )
                        .map_err(err)?;
                    let it = stmt
                        .query_map(params![key], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                        .map_err(err)?;
                    it.collect::<rusqlite::Result<_>>().map_err(err)?
                };
                tx.finish().map_err(err)?;
                let corrupt = |reason: String| StoreError::Corrupt {
                    path: p.to_owned(),
                    what: format!("branch {id}"),
                    reason,
                };
                let doc = layout::assemble(&skeleton, &rows).map_err(corrupt)?;
                Branch::from_json_slice(&doc).map_err(|e| corrupt(e.to_string()))
            })
            .await
    }

    async fn list(&self) -> Result<Vec<BranchSummary>, StoreError> {
        self.pool
            .run(|c, p| {
                let err = |e| sql_err(p, "list branches", e);
                let mut stmt = c
                    .prepare_cached(
                        "SELECT id, name, message_count, updated_at FROM branches ORDER BY key",
                    )
                    .map_err(err)?;
                let rows = stmt
                    .query_map([], |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get(1)?,
                            r.get::<_, i64>(2)?,
                            r.get(3)?,
                        ))
                    })
                    .map_err(err)?;
                let mut out = Vec::new();
                for r in rows {
                    let (id, name, count, updated_at) = r.map_err(err)?;
                    let id = Uuid::parse_str(&id).map_err(|e| StoreError::Corrupt {
                        path: p.to_owned(),
                        what: format!("branch id `{id}`"),
                        reason: e.to_string(),
                    })?;
                    out.push(BranchSummary {
                        id,
                        name,
                        message_count: count.max(0) as u64,
                        updated_at,
                    });
                }
                Ok(out)
            })
            .await
    }

    async fn delete(&self, id: Uuid) -> Result<bool, StoreError> {
        self.pool
            .run(move |c, p| {
                let err = |e| sql_err(p, format!("delete branch {id}"), e);
                let bid = id.to_string();
                let tx = c
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(err)?;
                tx.execute(
                    "DELETE FROM messages WHERE branch_key = (SELECT key FROM branches WHERE id = ?1)",
                    params![bid],
                )
                .map_err(err)?;
                let n = tx.execute("DELETE FROM branches WHERE id = ?1", params![bid]).map_err(err)?;
                tx.commit().map_err(err)?;
                Ok(n > 0)
            })
            .await
    }
}

/// Appends new message ids to the stored curated view, as the live branch
/// does when a message is added.
fn extend_view(skeleton: &str, added: &[String]) -> Result<String, String> {
    let mut v: Value = serde_json::from_str(skeleton).map_err(|e| e.to_string())?;
    let view = v
        .get_mut("metadata")
        .and_then(|m| m.get_mut("current_progression"))
        .ok_or("the stored view is missing")?;
    let order = match view {
        Value::Array(a) => a,
        Value::Object(o) => match o.get_mut("order") {
            Some(Value::Array(a)) => a,
            _ => return Err("the stored view has no order".into()),
        },
        _ => return Err("the stored view is not a progression".into()),
    };
    order.extend(added.iter().cloned().map(Value::String));
    serde_json::to_string(&v).map_err(|e| e.to_string())
}
