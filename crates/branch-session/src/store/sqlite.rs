//! `SqliteStore`: the embedded default [`BranchStore`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use branch_core::{Branch, Message};
use rusqlite::{OptionalExtension, TransactionBehavior, params};
use serde_json::Value;
use uuid::Uuid;

use super::error::StoreError;
use super::layout::{self, LoadedRow, LogsWrite, Table, too_big};
use super::memory::SqliteMemoryStore;
use super::pool::Pool;
use super::schema::{self, write_branch_versioned};
use super::{BranchStore, BranchSummary, Since, StoredMessage};
use crate::limits::{MAX_ROWS_PER_BATCH, MAX_STORED_NAME_BYTES, MAX_STORED_ROW_BYTES};

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
    /// Most connections (and blocking threads) in use at once (0 is taken
    /// as 1). Default 4.
    pub max_connections: usize,
    /// Open the file without writing anything to it (no journal change,
    /// no migration, no new file): for listing and exporting a store this
    /// process may not write. Writes fail. Default false.
    pub read_only: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            busy_timeout: Duration::from_secs(5),
            durability: Durability::Full,
            max_connections: 4,
            read_only: false,
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

    /// Opens an existing store without writing to it (see
    /// [`SqliteOptions::read_only`]).
    pub async fn open_read_only(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let opts = SqliteOptions {
            read_only: true,
            max_connections: 1,
            ..SqliteOptions::default()
        };
        Self::open_with(path, opts).await
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
            check_header(&p, o.read_only)?;
            let opened = Pool::connect(&p, &o).and_then(|mut conn| {
                if o.read_only {
                    check_readable_version(&conn, &p)?;
                } else {
                    schema::migrate(&mut conn, &p)?;
                }
                Ok(conn)
            });
            opened.map_err(|e| explain_damage(&p, e))
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
                if let Some(problem) = truncation(p)? {
                    problems.push(problem);
                }
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
                        "logs without a branch",
                        "SELECT COUNT(*) FROM logs l LEFT JOIN branches b ON b.key = l.branch_key
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
                write_branch_versioned(&tx, &split, now).map_err(err)?;
                tx.commit().map_err(err)
            })
            .await
    }

    async fn save_at(&self, branch: &Branch, expected_version: u64) -> Result<u64, StoreError> {
        let id = branch.id();
        let split = layout::split(branch).map_err(|source| StoreError::Branch { id, source })?;
        let now = branch_core::element::now();
        self.pool
            .run(move |c, p| {
                let err = |e| sql_err(p, format!("save branch {}", split.id), e);
                let tx = c
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(err)?;
                let found: Option<i64> = tx
                    .query_row(
                        "SELECT version FROM branches WHERE id = ?1",
                        params![split.id.to_string()],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(err)?;
                let Some(found) = found else {
                    return Err(StoreError::NotFound(split.id));
                };
                let found = version_of(p, split.id, found)?;
                if found != expected_version {
                    return Err(StoreError::Conflict {
                        branch: split.id,
                        expected: expected_version,
                        found,
                    });
                }
                write_branch_versioned(&tx, &split, now).map_err(err)?;
                tx.commit().map_err(err)?;
                Ok(found.saturating_add(1))
            })
            .await
    }

    async fn append_turn(&self, branch_id: Uuid, messages: &[Message]) -> Result<(), StoreError> {
        let rows = layout::turn_rows(branch_id, messages)?;
        let now = branch_core::element::now();
        self.pool
            .run(move |c, p| append_rows(c, p, branch_id, None, &rows, None, now).map(|_| ()))
            .await
    }

    async fn append_turn_at(
        &self,
        branch_id: Uuid,
        expected_version: u64,
        messages: &[Message],
    ) -> Result<u64, StoreError> {
        let rows = layout::turn_rows(branch_id, messages)?;
        let now = branch_core::element::now();
        self.pool
            .run(move |c, p| append_rows(c, p, branch_id, Some(expected_version), &rows, None, now))
            .await
    }

    async fn record_turn_at(
        &self,
        branch: &Branch,
        expected_version: u64,
        messages: &[Message],
    ) -> Result<u64, StoreError> {
        let branch_id = branch.id();
        let rows = layout::turn_rows(branch_id, messages)?;
        // One id more than the branch holds is enough to tell that the
        // store's logs are not the start of the branch's.
        let wanted = i64::try_from(branch.logs().len().saturating_add(1)).unwrap_or(i64::MAX);
        // Which logs the store holds decides which are serialized; the
        // write below checks the version again, so nothing can change
        // between the two.
        let stored = self
            .pool
            .run(move |c, p| stored_logs(c, p, branch_id, expected_version, wanted))
            .await?;
        // A new or edited system message moves the pile's head, which only
        // a whole save writes (on the same version).
        if !layout::head_is(branch, stored.head.as_ref())? {
            return self.save_at(branch, expected_version).await;
        }
        let head = layout::head_of(branch)?;
        let logs = layout::plan_logs(branch, stored.pile.as_deref(), &stored.logs)?;
        let now = branch_core::element::now();
        self.pool
            .run(move |c, p| {
                let at = Some(expected_version);
                append_rows(c, p, branch_id, at, &rows, Some((&head, &logs)), now)
            })
            .await
    }

    async fn load_versioned(&self, id: Uuid) -> Result<(Branch, u64), StoreError> {
        self.pool
            .run(move |c, p| {
                let err = |e| sql_err(p, format!("load branch {id}"), e);
                let bid = id.to_string();
                // One read transaction: the skeleton and the rows come from
                // the same snapshot even while writers commit.
                let tx = c.transaction().map_err(err)?;
                let head: Option<(i64, Option<String>, i64, i64)> = tx
                    .query_row(
                        "SELECT key, CASE WHEN length(CAST(skeleton AS BLOB)) > ?2 THEN NULL ELSE skeleton END,
                                length(CAST(skeleton AS BLOB)), version
                         FROM branches WHERE id = ?1",
                        params![bid, cap_i64(MAX_STORED_ROW_BYTES)],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                    )
                    .optional()
                    .map_err(err)?;
                let Some((key, skeleton, skeleton_len, version)) = head else {
                    return Err(StoreError::NotFound(id));
                };
                let corrupt = |table: &'static str, reason: String| StoreError::Corrupt {
                    path: p.to_owned(),
                    table,
                    what: format!("branch {id}"),
                    reason,
                };
                let skeleton = skeleton.ok_or_else(|| {
                    corrupt("branches", too_big("its skeleton", skeleton_len, MAX_STORED_ROW_BYTES))
                })?;
                let mut total = 0usize;
                let rows = read_rows(&tx, Table::Messages, key, &mut total).map_err(|e| match e {
                    RowsError::Sql(e) => err(e),
                    RowsError::Corrupt(reason) => corrupt("messages", reason),
                })?;
                let logs = read_rows(&tx, Table::Logs, key, &mut total).map_err(|e| match e {
                    RowsError::Sql(e) => err(e),
                    RowsError::Corrupt(reason) => corrupt("logs", reason),
                })?;
                tx.finish().map_err(err)?;
                let doc = layout::assemble(&skeleton, &rows, &logs)
                    .map_err(|r| corrupt("messages", r))?;
                let branch =
                    Branch::from_json_slice(&doc).map_err(|e| corrupt("messages", e.to_string()))?;
                Ok((branch, version_of(p, id, version)?))
            })
            .await
    }

    async fn load_since(&self, branch_id: Uuid, seq: u64) -> Result<Since, StoreError> {
        let from = i64::try_from(seq).unwrap_or(i64::MAX);
        self.pool
            .run(move |c, p| {
                let err = |e| sql_err(p, format!("load branch {branch_id} since {seq}"), e);
                let tx = c.transaction().map_err(err)?;
                let head: Option<(i64, i64, i64)> = tx
                    .query_row(
                        "SELECT key, version, message_count FROM branches WHERE id = ?1",
                        params![branch_id.to_string()],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                    )
                    .optional()
                    .map_err(err)?;
                let Some((key, version, count)) = head else {
                    return Err(StoreError::NotFound(branch_id));
                };
                let mut stmt = tx
                    .prepare_cached(
                        "SELECT seq, pos, CASE WHEN length(CAST(body AS BLOB)) > ?3 THEN NULL ELSE body END,
                                length(CAST(body AS BLOB))
                         FROM messages WHERE branch_key = ?1 AND seq >= ?2 ORDER BY seq LIMIT ?4",
                    )
                    .map_err(err)?;
                let mut it = stmt
                    .query(params![
                        key,
                        from,
                        cap_i64(MAX_STORED_ROW_BYTES),
                        cap_i64(MAX_ROWS_PER_BATCH)
                    ])
                    .map_err(err)?;
                let mut messages = Vec::new();
                while let Some(r) = it.next().map_err(err)? {
                    let (seq, pos, body, len): (i64, i64, Option<String>, i64) = (
                        r.get(0).map_err(err)?,
                        r.get(1).map_err(err)?,
                        r.get(2).map_err(err)?,
                        r.get(3).map_err(err)?,
                    );
                    messages.push(stored_message(p, branch_id, seq, pos, body, len)?);
                }
                drop(it);
                drop(stmt);
                tx.finish().map_err(err)?;
                Ok(Since {
                    version: version_of(p, branch_id, version)?,
                    message_count: count_of(p, branch_id, count)?,
                    messages,
                })
            })
            .await
    }

    async fn list(&self) -> Result<Vec<BranchSummary>, StoreError> {
        self.pool
            .run(|c, p| {
                let err = |e| sql_err(p, "list branches", e);
                let mut stmt = c
                    .prepare_cached(
                        "SELECT CASE WHEN length(CAST(id AS BLOB)) > 64 THEN substr(id, 1, 64) ELSE id END,
                                CASE WHEN length(CAST(name AS BLOB)) > ?1 THEN NULL ELSE name END,
                                message_count, updated_at, version
                         FROM branches ORDER BY key",
                    )
                    .map_err(err)?;
                let rows = stmt
                    .query_map([cap_i64(MAX_STORED_NAME_BYTES)], |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get(1)?,
                            r.get::<_, i64>(2)?,
                            r.get(3)?,
                            r.get::<_, i64>(4)?,
                        ))
                    })
                    .map_err(err)?;
                let mut out = Vec::new();
                for r in rows {
                    let (id, name, count, updated_at, version) = r.map_err(err)?;
                    let uuid = Uuid::parse_str(&id).map_err(|e| StoreError::Corrupt {
                        path: p.to_owned(),
                        table: "branches",
                        what: format!("branch id `{}`", id.chars().take(64).collect::<String>()),
                        reason: e.to_string(),
                    })?;
                    out.push(BranchSummary {
                        id: uuid,
                        name,
                        message_count: count_of(p, uuid, count)?,
                        updated_at: finite_time("updated_at", updated_at).map_err(|reason| {
                            StoreError::Corrupt {
                                path: p.to_owned(),
                                table: "branches",
                                what: format!("branch {uuid}"),
                                reason,
                            }
                        })?,
                        version: version_of(p, uuid, version)?,
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
                for table in ["messages", "logs"] {
                    tx.execute(
                        &format!("DELETE FROM {table} WHERE branch_key = (SELECT key FROM branches WHERE id = ?1)"),
                        params![bid],
                    )
                    .map_err(err)?;
                }
                let n = tx.execute("DELETE FROM branches WHERE id = ?1", params![bid]).map_err(err)?;
                tx.commit().map_err(err)?;
                Ok(n > 0)
            })
            .await
    }
}

/// One turn's rows, in one immediate transaction: in-place replacements
/// and appends, the count, the view and the version; `with` the branch's
/// head (`Branch::head_json`) and its logs to write. With `expected`, a branch at another
/// version is left alone ([`StoreError::Conflict`]).
fn append_rows(
    c: &mut rusqlite::Connection,
    p: &Path,
    branch_id: Uuid,
    expected: Option<u64>,
    rows: &[(String, String)],
    with: Option<(&[u8], &LogsWrite)>,
    now: f64,
) -> Result<u64, StoreError> {
    let err = |e| sql_err(p, format!("append a turn to branch {branch_id}"), e);
    let bid = branch_id.to_string();
    let tx = c
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(err)?;
    let head: Option<(i64, bool, i64, Option<String>, i64, i64)> = tx
        .query_row(
            "SELECT key, has_view, message_count,
                    CASE WHEN length(CAST(skeleton AS BLOB)) > ?2 THEN NULL ELSE skeleton END,
                    version, length(CAST(skeleton AS BLOB))
             FROM branches WHERE id = ?1",
            params![bid, cap_i64(MAX_STORED_ROW_BYTES)],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                ))
            },
        )
        .optional()
        .map_err(err)?;
    let Some((key, has_view, count, skeleton, version, skeleton_len)) = head else {
        return Err(StoreError::NotFound(branch_id));
    };
    let skeleton = skeleton.ok_or_else(|| StoreError::Corrupt {
        path: p.to_owned(),
        table: "branches",
        what: format!("branch {branch_id}"),
        reason: too_big("its skeleton", skeleton_len, MAX_STORED_ROW_BYTES),
    })?;
    let found = version_of(p, branch_id, version)?;
    count_of(p, branch_id, count)?;
    if let Some(expected) = expected {
        if expected != found {
            return Err(StoreError::Conflict {
                branch: branch_id,
                expected,
                found,
            });
        }
    }
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
        for (mid, body) in rows {
            let hash = layout::body_hash(body);
            if update.execute(params![key, mid, hash, body]).map_err(err)? == 0 {
                insert
                    .execute(params![key, mid, next, hash, body])
                    .map_err(err)?;
                next += 1;
                added.push(mid.clone());
            }
        }
    }
    let corrupt = |reason| StoreError::Corrupt {
        path: p.to_owned(),
        table: "branches",
        what: format!("branch {branch_id}"),
        reason,
    };
    let (skeleton, columns) = match with {
        Some((head, logs)) => {
            // The live metadata holds the view with this turn's messages
            // already, so the stored one is replaced, not extended.
            let headed = layout::with_head(&skeleton, head).map_err(corrupt)?;
            let mut s = headed.skeleton;
            if let Some(header) = &logs.header {
                s = layout::with_logs_header(&s, header).map_err(corrupt)?;
                tx.execute("DELETE FROM logs WHERE branch_key = ?1", params![key])
                    .map_err(err)?;
            }
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO logs (branch_key, log_id, seq, pos, hash, body)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .map_err(err)?;
            for (seq, row) in &logs.rows {
                insert
                    .execute(params![key, row.id, seq, row.pos, row.hash, row.body])
                    .map_err(err)?;
            }
            (Some(s), Some((headed.name, headed.has_view)))
        }
        None if has_view && !added.is_empty() => (
            Some(layout::extend_view(&skeleton, &added).map_err(corrupt)?),
            None,
        ),
        None => (None, None),
    };
    let (name, view) = columns.unzip();
    let new_version: i64 = tx
        .query_row(
            "UPDATE branches SET message_count = ?2, updated_at = ?3,
                 skeleton = COALESCE(?4, skeleton), version = version + 1,
                 name = CASE WHEN ?5 THEN ?6 ELSE name END,
                 has_view = COALESCE(?7, has_view)
             WHERE key = ?1 RETURNING version",
            params![
                key,
                next,
                now,
                skeleton,
                view.is_some(),
                name.flatten(),
                view
            ],
            |r| r.get(0),
        )
        .map_err(err)?;
    tx.commit().map_err(err)?;
    version_of(p, branch_id, new_version)
}

/// What the store holds of a branch's logs (the id of the log pile whose
/// header the skeleton keeps, and at most `limit` log ids in `seq` order)
/// and its first message. A branch at another version than `expected` is
/// a conflict here already.
fn stored_logs(
    c: &mut rusqlite::Connection,
    p: &Path,
    branch_id: Uuid,
    expected: u64,
    limit: i64,
) -> Result<StoredState, StoreError> {
    let err = |e| sql_err(p, format!("read the logs of branch {branch_id}"), e);
    let tx = c.transaction().map_err(err)?;
    let head: Option<(i64, Option<String>, i64, i64)> = tx
        .query_row(
            "SELECT key, CASE WHEN length(CAST(skeleton AS BLOB)) > ?2 THEN NULL ELSE skeleton END,
                    length(CAST(skeleton AS BLOB)), version
             FROM branches WHERE id = ?1",
            params![branch_id.to_string(), cap_i64(MAX_STORED_ROW_BYTES)],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .optional()
        .map_err(err)?;
    let Some((key, skeleton, skeleton_len, version)) = head else {
        return Err(StoreError::NotFound(branch_id));
    };
    let corrupt = |reason| StoreError::Corrupt {
        path: p.to_owned(),
        table: "branches",
        what: format!("branch {branch_id}"),
        reason,
    };
    let found = version_of(p, branch_id, version)?;
    if found != expected {
        return Err(StoreError::Conflict {
            branch: branch_id,
            expected,
            found,
        });
    }
    let skeleton = skeleton
        .ok_or_else(|| corrupt(too_big("its skeleton", skeleton_len, MAX_STORED_ROW_BYTES)))?;
    let pile = layout::stored_logs_pile(&skeleton).map_err(corrupt)?;
    // An id longer than a UUID's 36 bytes matches no live log either way.
    let ids = {
        let mut stmt = tx
            .prepare_cached(
                "SELECT substr(log_id, 1, 64) FROM logs WHERE branch_key = ?1 ORDER BY seq LIMIT ?2",
            )
            .map_err(err)?;
        let rows = stmt
            .query_map(params![key, limit], |r| r.get(0))
            .map_err(err)?;
        rows.collect::<rusqlite::Result<Vec<String>>>()
            .map_err(err)?
    };
    let head: Option<(String, i64)> = tx
        .query_row(
            "SELECT substr(msg_id, 1, 64), hash FROM messages WHERE branch_key = ?1 AND pos = 0",
            params![key],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(err)?;
    tx.finish().map_err(err)?;
    Ok(StoredState {
        pile,
        logs: ids,
        head,
    })
}

/// What a recorded turn reads of the stored branch first.
struct StoredState {
    /// The id of the log pile whose header the skeleton keeps.
    pile: Option<String>,
    /// The stored log ids, in `seq` order.
    logs: Vec<String>,
    /// The first message of the pile's order, by id and body digest.
    head: Option<(String, i64)>,
}

/// Why a branch's rows did not read.
enum RowsError {
    Sql(rusqlite::Error),
    Corrupt(String),
}

/// A branch's rows in `table`, in `seq` order, under the caps of
/// [`Table::loaded_body`] (`total` is shared by the branch's tables).
fn read_rows(
    tx: &rusqlite::Transaction<'_>,
    table: Table,
    key: i64,
    total: &mut usize,
) -> Result<Vec<LoadedRow>, RowsError> {
    let (name, id_col) = table.names();
    let mut stmt = tx
        .prepare_cached(&format!(
            "SELECT {id_col}, pos, CASE WHEN length(CAST(body AS BLOB)) > ?2 THEN NULL ELSE body END,
                    length(CAST(body AS BLOB)), seq
             FROM {name} WHERE branch_key = ?1 ORDER BY seq"
        ))
        .map_err(RowsError::Sql)?;
    let mut it = stmt
        .query(params![key, cap_i64(MAX_STORED_ROW_BYTES)])
        .map_err(RowsError::Sql)?;
    let mut out = Vec::new();
    while let Some(r) = it.next().map_err(RowsError::Sql)? {
        let (id, pos, body, len, seq): (String, i64, Option<String>, i64, i64) = (
            r.get(0).map_err(RowsError::Sql)?,
            r.get(1).map_err(RowsError::Sql)?,
            r.get(2).map_err(RowsError::Sql)?,
            r.get(3).map_err(RowsError::Sql)?,
            r.get(4).map_err(RowsError::Sql)?,
        );
        let body = table
            .loaded_body(seq, body, len, total)
            .map_err(RowsError::Corrupt)?;
        out.push((id, pos, body));
    }
    Ok(out)
}

/// A stored version, which is never negative in an intact store.
fn version_of(p: &Path, id: Uuid, v: i64) -> Result<u64, StoreError> {
    branch_number(p, id, "version", v)
}

/// A stored message count, which is never negative in an intact store.
fn count_of(p: &Path, id: Uuid, n: i64) -> Result<u64, StoreError> {
    branch_number(p, id, "message_count", n)
}

fn branch_number(p: &Path, id: Uuid, column: &str, n: i64) -> Result<u64, StoreError> {
    u64::try_from(n).map_err(|_| StoreError::Corrupt {
        path: p.to_owned(),
        table: "branches",
        what: format!("branch {id}"),
        reason: format!("its {column} is {n}"),
    })
}

/// A stored time (seconds since the epoch) read back: a value no clock
/// gives (NaN, infinite) is a fault, not a time to report or write.
pub(crate) fn finite_time(column: &str, t: f64) -> Result<f64, String> {
    if t.is_finite() {
        Ok(t)
    } else {
        Err(format!("its {column} is {t}, not a time"))
    }
}

fn stored_message(
    p: &Path,
    branch_id: Uuid,
    seq: i64,
    pos: i64,
    body: Option<String>,
    len: i64,
) -> Result<StoredMessage, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        path: p.to_owned(),
        table: "messages",
        what: format!("branch {branch_id}, message at seq {seq}"),
        reason,
    };
    let body = body.ok_or_else(|| corrupt(too_big("the body", len, MAX_STORED_ROW_BYTES)))?;
    let value: Value = serde_json::from_str(&body).map_err(|e| corrupt(e.to_string()))?;
    let message = Message::from_value(&value).map_err(|e| corrupt(e.to_string()))?;
    Ok(StoredMessage {
        seq: u64::try_from(seq).map_err(|_| corrupt("negative seq".into()))?,
        pos: u64::try_from(pos).map_err(|_| corrupt("negative pos".into()))?,
        message,
    })
}

fn cap_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The first bytes of every SQLite database file.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";
/// The size of the header at the start of a SQLite database file.
const SQLITE_HEADER_LEN: usize = 100;

fn read_header(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    use std::io::Read;
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(StoreError::Io {
                op: "read",
                path: path.to_owned(),
                source,
            });
        }
    };
    let mut head = Vec::with_capacity(SQLITE_HEADER_LEN);
    file.take(SQLITE_HEADER_LEN as u64)
        .read_to_end(&mut head)
        .map_err(|source| StoreError::Io {
            op: "read",
            path: path.to_owned(),
            source,
        })?;
    Ok(Some(head))
}

/// Refuses a file that exists, is not empty and is not a SQLite database,
/// before SQLite gets a chance to write over it.
fn check_header(path: &Path, read_only: bool) -> Result<(), StoreError> {
    let not_a_store = |reason: String| StoreError::NotAStore {
        path: path.to_owned(),
        reason,
    };
    match read_header(path)? {
        None if read_only => Err(StoreError::Io {
            op: "read",
            path: path.to_owned(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such store"),
        }),
        None => Ok(()),
        Some(head) if head.is_empty() => Ok(()),
        Some(head) if head.len() < SQLITE_HEADER_LEN => Err(not_a_store(format!(
            "{} bytes, shorter than a SQLite header",
            head.len()
        ))),
        Some(head) if !head.starts_with(SQLITE_MAGIC) => {
            Err(not_a_store("no SQLite header".into()))
        }
        Some(_) => Ok(()),
    }
}

/// SQLite's "malformed" or "not a database" while opening says little;
/// say what is wrong with the file when it can be seen (a truncation).
fn explain_damage(path: &Path, e: StoreError) -> StoreError {
    let damaged = matches!(
        &e,
        StoreError::Sqlite {
            source: rusqlite::Error::SqliteFailure(f, _),
            ..
        } if matches!(
            f.code,
            rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase
        )
    );
    if !damaged {
        return e;
    }
    let reason = match truncation(path) {
        Ok(Some(t)) => t,
        _ => format!("SQLite reports it damaged ({e})"),
    };
    StoreError::Corrupt {
        path: path.to_owned(),
        table: "file",
        what: "the database file".into(),
        reason,
    }
}

/// A read-only store cannot migrate, so it must already be current.
fn check_readable_version(conn: &rusqlite::Connection, path: &Path) -> Result<(), StoreError> {
    let found: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(|e| sql_err(path, "read schema version", e))?;
    if found > schema::CURRENT_VERSION {
        return Err(StoreError::NewerSchema {
            path: path.to_owned(),
            found,
            supported: schema::CURRENT_VERSION,
        });
    }
    if found < schema::CURRENT_VERSION {
        return Err(StoreError::Corrupt {
            path: path.to_owned(),
            table: "file",
            what: "the schema".into(),
            reason: format!(
                "it is at version {found}, older than this build's {}; open it once for writing to migrate it",
                schema::CURRENT_VERSION
            ),
        });
    }
    Ok(())
}

/// A file shorter than its own header says has lost pages: SQLite reads
/// the missing pages as absent and may answer queries without noticing.
fn truncation(path: &Path) -> Result<Option<String>, StoreError> {
    let Some(head) = read_header(path)? else {
        return Ok(Some("the database file is missing".into()));
    };
    if head.len() < SQLITE_HEADER_LEN || !head.starts_with(SQLITE_MAGIC) {
        return Ok(Some("file: the SQLite header is missing or damaged".into()));
    }
    let be32 = |at: usize| u32::from_be_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
    let page_size = match u16::from_be_bytes([head[16], head[17]]) {
        1 => 65_536u64,
        n => u64::from(n),
    };
    let pages = u64::from(be32(28));
    // The page count in the header is only valid when the change counter
    // matches the version-valid-for number (SQLite file format, 1.3.7).
    if be32(24) != be32(92) || pages == 0 {
        return Ok(None);
    }
    let len = std::fs::metadata(path)
        .map_err(|source| StoreError::Io {
            op: "read",
            path: path.to_owned(),
            source,
        })?
        .len();
    let want = pages.saturating_mul(page_size);
    Ok((len < want).then(|| {
        format!(
            "truncated: the header says {pages} pages of {page_size} bytes ({want} bytes), the file has {len}"
        )
    }))
}
