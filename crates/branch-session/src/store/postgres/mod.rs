//! `PgStore`: branches in PostgreSQL, shared by workers on many machines.
//!
//! The layout is SQLite's (a skeleton per branch, a row per message); what
//! PostgreSQL adds is a version per branch checked by every versioned
//! write ([`BranchStore::append_turn_at`]), an outbox of added messages
//! written in the same transaction as the turn and announced with
//! `NOTIFY` ([`PgStore::watch`]), and a pool of connections that recover
//! from a restarted server by themselves.

mod memory;
mod schema;
mod target;
mod watch;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use branch_core::{Branch, Message};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use futures_util::{StreamExt, pin_mut};
use serde_json::Value;
use tokio_postgres::IsolationLevel;
use tokio_postgres::types::FromSql;
use uuid::Uuid;

pub use memory::PgMemoryStore;
pub use target::{is_postgres_url, redact as redact_url};
pub use watch::{Watch, WatchEvent};

use super::error::StoreError;
use super::layout::{self, LoadedRow, MessageRow, SplitBranch, Table, too_big};
use super::sqlite::{Durability, finite_time};
use super::{BranchStore, BranchSummary, Since, StoredMessage};
use crate::limits::{
    MAX_ROWS_PER_BATCH, MAX_STORED_NAME_BYTES, MAX_STORED_ROW_BYTES, PG_CONNECT_TIMEOUT,
    PG_POOL_WAIT,
};

/// Settings of a [`PgStore`].
#[derive(Debug, Clone, PartialEq)]
pub struct PgOptions {
    /// Most connections this store holds open (the pool size). Default 8.
    pub max_connections: usize,
    /// The PostgreSQL schema holding the tables (created when missing);
    /// `None` uses the server's `search_path` (normally `public`). Lets
    /// several stores share one database.
    pub schema: Option<String>,
    /// When a commit counts as durable: [`Durability::Full`] waits for the
    /// server's WAL flush (`synchronous_commit = on`); `Normal` does not
    /// (a crash of the database host may lose the last commits, never
    /// consistency).
    pub durability: Durability,
    /// A PEM file of CA certificates trusted for TLS to the server, beside
    /// the Mozilla roots (`PGSSLROOTCERT` when unset). TLS itself follows
    /// the URL's `sslmode` (`disable`, `prefer` by default, `require`).
    pub ca_file: Option<PathBuf>,
}

impl Default for PgOptions {
    fn default() -> Self {
        Self {
            max_connections: 8,
            schema: None,
            durability: Durability::Full,
            ca_file: None,
        }
    }
}

pub(crate) struct Shared {
    pub pool: Pool,
    pub label: String,
    pub config: tokio_postgres::Config,
    pub tls: tokio_postgres_rustls::MakeRustlsConnect,
    /// The `NOTIFY` channel of this store's schema.
    pub channel: String,
}

/// Branches in a PostgreSQL database. Cloning is cheap and shares the
/// pool. `Debug` and every error name the server without its password.
#[derive(Clone)]
pub struct PgStore {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("store", &self.shared.label)
            .finish_non_exhaustive()
    }
}

pub(crate) fn pg_err(label: &str, op: impl Into<String>, e: impl Into<PgFailure>) -> StoreError {
    StoreError::Postgres {
        store: label.to_owned(),
        op: op.into(),
        source: e.into().0,
    }
}

/// Any driver or pool error, boxed for [`StoreError::Postgres`].
pub(crate) struct PgFailure(Box<dyn std::error::Error + Send + Sync>);

impl From<tokio_postgres::Error> for PgFailure {
    fn from(e: tokio_postgres::Error) -> Self {
        Self(Box::new(DriverError(e)))
    }
}

/// The driver's error, with the server's message in the text (the driver
/// itself prints only "db error").
#[derive(Debug)]
struct DriverError(tokio_postgres::Error);

impl std::fmt::Display for DriverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_db_error() {
            Some(db) => write!(
                f,
                "{} {}: {}",
                db.severity(),
                db.code().code(),
                db.message()
            ),
            None => match std::error::Error::source(&self.0) {
                Some(cause) => write!(f, "{}: {cause}", self.0),
                None => write!(f, "{}", self.0),
            },
        }
    }
}

impl std::error::Error for DriverError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

impl From<deadpool_postgres::PoolError> for PgFailure {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            // Connecting failed: say why (refused, TLS, authentication).
            deadpool_postgres::PoolError::Backend(e) => Self::from(e),
            other => Self(Box::new(other)),
        }
    }
}

impl PgStore {
    /// The newest schema version this build writes.
    pub const SCHEMA_VERSION: i64 = schema::CURRENT_VERSION;

    /// Connects to `url` (`postgres://USER@HOST:PORT/DB`; the password from
    /// the URL, `PGPASSWORD` or `.pgpass`) and migrates its schema forward.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, PgOptions::default()).await
    }

    /// [`PgStore::connect`] with options.
    pub async fn connect_with(url: &str, opts: PgOptions) -> Result<Self, StoreError> {
        let t = target::resolve(
            url,
            opts.schema.as_deref(),
            opts.durability == Durability::Full,
            opts.ca_file.as_deref(),
        )?;
        let mgr = Manager::from_config(
            t.config.clone(),
            t.tls.clone(),
            ManagerConfig {
                // Every connection taken from the pool is checked with an
                // empty query (one round trip): one the server closed (a
                // restart, a terminated backend) is replaced before a
                // store call fails on it.
                recycling_method: RecyclingMethod::Verified,
            },
        );
        let pool = Pool::builder(mgr)
            .max_size(opts.max_connections.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(PG_POOL_WAIT))
            .create_timeout(Some(PG_CONNECT_TIMEOUT))
            .recycle_timeout(Some(PG_CONNECT_TIMEOUT))
            .build()
            .map_err(|e| StoreError::Config {
                store: t.label.clone(),
                reason: format!("connection pool: {e}"),
            })?;
        // Notifications are per database; a channel per schema keeps
        // stores sharing a database apart (a hash: channel names are
        // short).
        let channel = match &opts.schema {
            Some(s) => format!("lionagi_events_{:016x}", fnv1a(s.as_bytes())),
            None => "lionagi_events".to_owned(),
        };
        let shared = Arc::new(Shared {
            pool,
            label: t.label,
            config: t.config,
            tls: t.tls,
            channel,
        });
        let mut client = shared
            .pool
            .get()
            .await
            .map_err(|e| pg_err(&shared.label, "connect", e))?;
        schema::migrate(&mut client, &shared.label, opts.schema.as_deref()).await?;
        Ok(Self { shared })
    }

    /// The server, database and schema, without the password.
    pub fn label(&self) -> &str {
        &self.shared.label
    }

    /// The schema version recorded in the database.
    pub async fn schema_version(&self) -> Result<i64, StoreError> {
        let label = &self.shared.label;
        let c = self.client().await?;
        let row = c
            .query_one("SELECT COALESCE(MAX(version), 0) FROM schema_version", &[])
            .await
            .map_err(|e| pg_err(label, "read schema version", e))?;
        column(&row, 0).map_err(|r| self.corrupt("schema_version", "the version".into(), r))
    }

    /// A durable [`branch_core::MemoryStore`] in this database. Stores with
    /// the same `scope` share items; different scopes never see each
    /// other's.
    pub fn memory(&self, scope: impl Into<String>) -> PgMemoryStore {
        PgMemoryStore::new(Arc::clone(&self.shared), scope.into())
    }

    /// The messages added to `branch_id` after outbox event `after` (0 for
    /// all), as they commit, from any process: a turn that rolled back
    /// publishes nothing. The watch reconnects by itself after the server
    /// or the connection goes away and carries on from the last event it
    /// returned; a new watch resumes from a saved [`WatchEvent::id`].
    pub fn watch(&self, branch_id: Uuid, after: u64) -> Watch {
        Watch::new(Arc::clone(&self.shared), branch_id, after)
    }

    /// The store's invariants: every branch's count matches its rows and
    /// positions are dense. Returns the problems found (empty when
    /// consistent).
    pub async fn check_consistency(&self) -> Result<Vec<String>, StoreError> {
        let label = &self.shared.label;
        let c = self.client().await?;
        let checks = [
            (
                "branches whose message_count is wrong",
                "SELECT COUNT(*) FROM branches b WHERE b.message_count !=
                     (SELECT COUNT(*) FROM messages m WHERE m.branch_id = b.id)",
            ),
            (
                "branches whose positions are not 0..message_count",
                "SELECT COUNT(*) FROM branches b WHERE b.message_count > 0 AND (
                     (SELECT MAX(pos) FROM messages m WHERE m.branch_id = b.id) + 1 != b.message_count
                     OR (SELECT COUNT(DISTINCT pos) FROM messages m WHERE m.branch_id = b.id) != b.message_count
                     OR (SELECT MAX(seq) FROM messages m WHERE m.branch_id = b.id) + 1 != b.message_count)",
            ),
        ];
        let mut problems = Vec::new();
        for (what, sql) in checks {
            let n = c
                .query_one(sql, &[])
                .await
                .map_err(|e| pg_err(label, "check consistency", e))?;
            let n: i64 = column(&n, 0).map_err(|r| self.corrupt("branches", what.into(), r))?;
            if n != 0 {
                problems.push(format!("{n} {what}"));
            }
        }
        Ok(problems)
    }

    /// A pooled connection to the store's database (and schema), for an
    /// application's own tables beside the conversations: a work queue,
    /// leases. Returned to the pool when dropped.
    pub async fn connection(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.client().await
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.shared
            .pool
            .get()
            .await
            .map_err(|e| pg_err(&self.shared.label, "take a connection", e))
    }

    fn corrupt(&self, table: &'static str, what: String, reason: String) -> StoreError {
        StoreError::Corrupt {
            path: PathBuf::from(&self.shared.label),
            table,
            what,
            reason,
        }
    }

    async fn append(
        &self,
        branch_id: Uuid,
        expected: Option<u64>,
        messages: &[Message],
        live: Option<&Branch>,
    ) -> Result<u64, StoreError> {
        let label = self.shared.label.clone();
        let err = |e: tokio_postgres::Error| {
            pg_err(&label, format!("append a turn to branch {branch_id}"), e)
        };
        let rows = layout::turn_rows(branch_id, messages)?;
        let ids: Vec<Uuid> = rows
            .iter()
            .map(|(id, _)| Uuid::parse_str(id))
            .collect::<Result<_, _>>()
            .map_err(|e| StoreError::Config {
                store: label.clone(),
                reason: format!("a message id is not a UUID: {e}"),
            })?;
        let now = branch_core::element::now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(err)?;
        // Sent at once (pipelined): the others run after the first holds
        // the row lock, so they see every message committed before.
        let lock = tx
            .prepare_cached(
                "SELECT has_view, message_count, version FROM branches WHERE id = $1 FOR UPDATE",
            )
            .await
            .map_err(err)?;
        let known = tx
            .prepare_cached("SELECT msg_id FROM messages WHERE branch_id = $1 AND msg_id = ANY($2)")
            .await
            .map_err(err)?;
        // With the live branch, the pile's first row too: a changed system
        // message makes the turn a whole save.
        let first = tx
            .prepare_cached("SELECT msg_id, hash FROM messages WHERE branch_id = $1 AND pos = 0")
            .await
            .map_err(err)?;
        let first_row = async {
            match live {
                Some(_) => tx.query_opt(&first, &[&branch_id]).await,
                None => Ok(None),
            }
        };
        let (head, stored, first_row) = futures_util::future::try_join3(
            tx.query_opt(&lock, &[&branch_id]),
            tx.query(&known, &[&branch_id, &ids]),
            first_row,
        )
        .await
        .map_err(err)?;
        let Some(head) = head else {
            return Err(StoreError::NotFound(branch_id));
        };
        let bad = |r| self.corrupt("branches", format!("branch {branch_id}"), r);
        let has_view: bool = column(&head, 0).map_err(bad)?;
        let count: i64 = column(&head, 1).map_err(bad)?;
        self.count_of(branch_id, count)?;
        let found = self.version_of(branch_id, column(&head, 2).map_err(bad)?)?;
        if let Some(expected) = expected {
            if expected != found {
                return Err(StoreError::Conflict {
                    branch: branch_id,
                    expected,
                    found,
                });
            }
        }
        if let Some(branch) = live {
            let first_row = first_row
                .map(|r| {
                    let id: Uuid = column(&r, 0)?;
                    let hash: i64 = column(&r, 1)?;
                    Ok((id.to_string(), hash))
                })
                .transpose()
                .map_err(|r| self.corrupt("messages", format!("branch {branch_id}"), r))?;
            if !layout::head_is(branch, first_row.as_ref())? {
                // The lock goes with the rolled-back transaction; the whole
                // save checks the version again.
                drop(tx);
                drop(client);
                return self.save_at(branch, found).await;
            }
        }
        let stored: HashSet<Uuid> = stored
            .iter()
            .map(|r| column(r, 0))
            .collect::<Result<_, _>>()
            .map_err(|r| self.corrupt("messages", format!("branch {branch_id}"), r))?;
        let skeleton = if has_view || live.is_some() {
            Some(self.skeleton_in(&tx, branch_id).await?)
        } else {
            None
        };
        let corrupt = |reason| self.corrupt("branches", format!("branch {branch_id}"), reason);
        // With the live branch: its head, and the logs the store lacks
        // (worked out under the row lock, so nothing changes meanwhile).
        let with = match (live, &skeleton) {
            (Some(branch), Some(text)) => {
                let head = layout::head_of(branch)?;
                let pile = layout::stored_logs_pile(text).map_err(corrupt)?;
                // One id more than the branch holds is enough to tell that
                // the store's logs are not the start of the branch's.
                let wanted =
                    i64::try_from(branch.logs().len().saturating_add(1)).unwrap_or(i64::MAX);
                let ids: Vec<String> = tx
                    .query(
                        &tx.prepare_cached(
                            "SELECT log_id FROM logs WHERE branch_id = $1 ORDER BY seq LIMIT $2",
                        )
                        .await
                        .map_err(err)?,
                        &[&branch_id, &wanted],
                    )
                    .await
                    .map_err(err)?
                    .iter()
                    .map(|r| column::<Uuid>(r, 0).map(|u| u.to_string()))
                    .collect::<Result<_, _>>()
                    .map_err(|r| self.corrupt("logs", format!("branch {branch_id}"), r))?;
                let logs = layout::plan_logs(branch, pile.as_deref(), &ids)?;
                Some((head, logs))
            }
            _ => None,
        };
        // In order, as if one by one: a message seen again in the same
        // turn (a request completed by its response) replaces the body
        // it was written with.
        let mut updates: Vec<(Uuid, String)> = Vec::new();
        let mut inserts: Vec<(Uuid, String)> = Vec::new();
        let mut slot: HashMap<Uuid, (bool, usize)> = HashMap::new();
        for (id, (_, body)) in ids.iter().zip(rows) {
            match slot.get(id) {
                Some(&(true, i)) => inserts[i].1 = body,
                Some(&(false, i)) => updates[i].1 = body,
                None if stored.contains(id) => {
                    slot.insert(*id, (false, updates.len()));
                    updates.push((*id, body));
                }
                None => {
                    slot.insert(*id, (true, inserts.len()));
                    inserts.push((*id, body));
                }
            }
        }
        let new_version = i64::try_from(found.saturating_add(1)).unwrap_or(i64::MAX);
        if !updates.is_empty() {
            let (uid, ubody): (Vec<Uuid>, Vec<String>) = updates.into_iter().unzip();
            let uhash: Vec<i64> = ubody.iter().map(|b| layout::body_hash(b)).collect();
            tx.execute(
                &tx.prepare_cached(
                    "UPDATE messages m SET hash = u.hash, body = u.body
                 FROM UNNEST($2::uuid[], $3::bigint[], $4::text[]) AS u(msg_id, hash, body)
                 WHERE m.branch_id = $1 AND m.msg_id = u.msg_id",
                )
                .await
                .map_err(err)?,
                &[&branch_id, &uid, &uhash, &ubody],
            )
            .await
            .map_err(err)?;
        }
        let added: Vec<String> = inserts.iter().map(|(id, _)| id.to_string()).collect();
        let next = count.saturating_add(i64::try_from(inserts.len()).unwrap_or(i64::MAX));
        if !inserts.is_empty() {
            let seqs: Vec<i64> = (count..next).collect();
            let (iid, ibody): (Vec<Uuid>, Vec<String>) = inserts.into_iter().unzip();
            let ihash: Vec<i64> = ibody.iter().map(|b| layout::body_hash(b)).collect();
            // The outbox rows go in with the messages: both commit or
            // neither does.
            tx.execute(
                &tx.prepare_cached("WITH added AS (
                     INSERT INTO messages (branch_id, seq, pos, msg_id, hash, body)
                     SELECT $1, s, s, i, h, b
                     FROM UNNEST($2::bigint[], $3::uuid[], $4::bigint[], $5::text[]) AS u(s, i, h, b)
                     RETURNING seq, body)
                 INSERT INTO events (branch_id, seq, version, body)
                 SELECT $1, seq, $6, body FROM added ORDER BY seq").await.map_err(err)?,
                &[&branch_id, &seqs, &iid, &ihash, &ibody, &new_version],
            )
            .await
            .map_err(err)?;
        }
        let (skeleton, columns) = match (skeleton, &with) {
            (Some(text), Some((head, logs))) => {
                // The live metadata holds the view with this turn's
                // messages already, so the stored one is replaced, not
                // extended.
                let headed = layout::with_head(&text, head).map_err(corrupt)?;
                let mut text = headed.skeleton;
                if let Some(header) = &logs.header {
                    text = layout::with_logs_header(&text, header).map_err(corrupt)?;
                    tx.execute(
                        &tx.prepare_cached("DELETE FROM logs WHERE branch_id = $1")
                            .await
                            .map_err(err)?,
                        &[&branch_id],
                    )
                    .await
                    .map_err(err)?;
                }
                self.insert_logs(&tx, branch_id, &logs.rows).await?;
                (Some(text), Some((headed.name, headed.has_view)))
            }
            (Some(text), None) if has_view && !added.is_empty() => (
                Some(layout::extend_view(&text, &added).map_err(corrupt)?),
                None,
            ),
            _ => (None, None),
        };
        let (name, view) = columns.unzip();
        let rename = view.is_some();
        let name = name.flatten();
        // The branch row and the wake-up in one statement; the
        // notification is delivered at commit, never for a rolled-back
        // turn.
        let notify = !added.is_empty();
        tx.execute(
            &tx.prepare_cached(
                "WITH updated AS (
                     UPDATE branches SET message_count = $2, updated_at = $3,
                         skeleton = COALESCE($4, skeleton), version = $5,
                         name = CASE WHEN $9 THEN $10 ELSE name END,
                         has_view = COALESCE($11, has_view)
                     WHERE id = $1 RETURNING id)
                 SELECT pg_notify($6, $7) FROM updated WHERE $8",
            )
            .await
            .map_err(err)?,
            &[
                &branch_id,
                &next,
                &now,
                &skeleton,
                &new_version,
                &self.shared.channel,
                &branch_id.to_string(),
                &notify,
                &rename,
                &name,
                &view,
            ],
        )
        .await
        .map_err(err)?;
        tx.commit().await.map_err(err)?;
        self.version_of(branch_id, new_version)
    }

    /// A branch's rows in `table`, in `seq` order, read inside `tx`, under
    /// the caps of [`Table::loaded_body`] (`total` is shared by the
    /// branch's tables).
    async fn read_rows(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        table: Table,
        id: Uuid,
        total: &mut usize,
    ) -> Result<Vec<LoadedRow>, StoreError> {
        let (name, id_col) = table.names();
        let label = &self.shared.label;
        let err = |e: tokio_postgres::Error| pg_err(label, format!("load branch {id}"), e);
        let cap = i64::try_from(MAX_STORED_ROW_BYTES).unwrap_or(i64::MAX);
        let stream = tx
            .query_raw(
                &tx.prepare_cached(&format!(
                    "SELECT {id_col}, pos, CASE WHEN octet_length(body)::bigint > $2 THEN NULL ELSE body END,
                            octet_length(body)::bigint, seq
                     FROM {name} WHERE branch_id = $1 ORDER BY seq"
                ))
                .await
                .map_err(err)?,
                [&id as &(dyn tokio_postgres::types::ToSql + Sync), &cap],
            )
            .await
            .map_err(err)?;
        pin_mut!(stream);
        let mut rows = Vec::new();
        let corrupt = |reason| self.corrupt(name, format!("branch {id}"), reason);
        while let Some(r) = stream.next().await {
            let r = r.map_err(err)?;
            let item: Uuid = column(&r, 0).map_err(corrupt)?;
            let pos: i64 = column(&r, 1).map_err(corrupt)?;
            let (body, len) = capped(&r, 2).map_err(corrupt)?;
            let seq: i64 = column(&r, 4).map_err(corrupt)?;
            let body = table.loaded_body(seq, body, len, total).map_err(corrupt)?;
            rows.push((item.to_string(), pos, body));
        }
        Ok(rows)
    }

    /// The branch's skeleton, read inside `tx` under the row cap.
    async fn skeleton_in(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        branch_id: Uuid,
    ) -> Result<String, StoreError> {
        let label = &self.shared.label;
        let err = |e: tokio_postgres::Error| {
            pg_err(label, format!("append a turn to branch {branch_id}"), e)
        };
        let cap = i64::try_from(MAX_STORED_ROW_BYTES).unwrap_or(i64::MAX);
        let row = tx
            .query_one(
                &tx.prepare_cached(
                    "SELECT CASE WHEN octet_length(skeleton)::bigint > $2 THEN NULL ELSE skeleton END,
                            octet_length(skeleton)::bigint
                     FROM branches WHERE id = $1",
                )
                .await
                .map_err(err)?,
                &[&branch_id, &cap],
            )
            .await
            .map_err(err)?;
        let (text, len) = capped(&row, 0)
            .map_err(|r| self.corrupt("branches", format!("branch {branch_id}"), r))?;
        text.ok_or_else(|| {
            self.corrupt(
                "branches",
                format!("branch {branch_id}"),
                too_big("its skeleton", len, MAX_STORED_ROW_BYTES),
            )
        })
    }

    /// Inserts a turn's log rows (`(seq, row)`).
    async fn insert_logs(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        branch_id: Uuid,
        rows: &[(i64, MessageRow)],
    ) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        let label = &self.shared.label;
        let err = |e: tokio_postgres::Error| {
            pg_err(label, format!("append a turn to branch {branch_id}"), e)
        };
        let mut seqs = Vec::with_capacity(rows.len());
        let mut poss = Vec::with_capacity(rows.len());
        let mut ids = Vec::with_capacity(rows.len());
        let mut hashes = Vec::with_capacity(rows.len());
        let mut bodies = Vec::with_capacity(rows.len());
        for (seq, row) in rows {
            let id = Uuid::parse_str(&row.id).map_err(|e| StoreError::Branch {
                id: branch_id,
                source: branch_core::BranchError::InvalidData {
                    path: format!("logs.collections[{seq}].id"),
                    reason: e.to_string(),
                },
            })?;
            seqs.push(*seq);
            poss.push(row.pos);
            ids.push(id);
            hashes.push(row.hash);
            bodies.push(row.body.as_str());
        }
        tx.execute(
            &tx.prepare_cached(
                "INSERT INTO logs (branch_id, seq, pos, log_id, hash, body)
                 SELECT $1, s, p, i, h, b
                 FROM UNNEST($2::bigint[], $3::bigint[], $4::uuid[], $5::bigint[], $6::text[])
                     AS u(s, p, i, h, b)",
            )
            .await
            .map_err(err)?,
            &[&branch_id, &seqs, &poss, &ids, &hashes, &bodies],
        )
        .await
        .map_err(err)?;
        Ok(())
    }

    fn version_of(&self, id: Uuid, v: i64) -> Result<u64, StoreError> {
        self.branch_number(id, "version", v)
    }

    fn count_of(&self, id: Uuid, n: i64) -> Result<u64, StoreError> {
        self.branch_number(id, "message_count", n)
    }

    /// A branch's version or count, never negative in an intact store.
    fn branch_number(&self, id: Uuid, column: &str, n: i64) -> Result<u64, StoreError> {
        u64::try_from(n).map_err(|_| {
            self.corrupt(
                "branches",
                format!("branch {id}"),
                format!("its {column} is {n}"),
            )
        })
    }

    /// Writes the whole branch; with `expected`, only if the stored branch
    /// is at that version (checked under the row's lock). Returns the new
    /// version.
    async fn write(&self, split: SplitBranch, expected: Option<u64>) -> Result<u64, StoreError> {
        let id = split.id;
        let label = self.shared.label.clone();
        let err = |e: tokio_postgres::Error| pg_err(&label, format!("save branch {id}"), e);
        let now = branch_core::element::now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(err)?;
        if let Some(expected) = expected {
            let head = tx
                .query_opt(
                    &tx.prepare_cached("SELECT version FROM branches WHERE id = $1 FOR UPDATE")
                        .await
                        .map_err(err)?,
                    &[&id],
                )
                .await
                .map_err(err)?;
            let Some(head) = head else {
                return Err(StoreError::NotFound(id));
            };
            let found = column(&head, 0)
                .map_err(|r| self.corrupt("branches", format!("branch {id}"), r))?;
            let found = self.version_of(id, found)?;
            if found != expected {
                return Err(StoreError::Conflict {
                    branch: id,
                    expected,
                    found,
                });
            }
        }
        let count = i64::try_from(split.rows.len()).unwrap_or(i64::MAX);
        let version = tx
            .query_one(
                &tx.prepare_cached("INSERT INTO branches (id, name, skeleton, has_view, message_count, version, updated_at)
                 VALUES ($1, $2, $3, $4, $5, 1, $6)
                 ON CONFLICT (id) DO UPDATE SET
                     name = excluded.name, skeleton = excluded.skeleton,
                     has_view = excluded.has_view, message_count = excluded.message_count,
                     updated_at = excluded.updated_at, version = branches.version + 1
                 RETURNING version").await.map_err(err)?,
                &[&id, &split.name, &split.skeleton, &split.has_view, &count, &now],
            )
            .await
            .map_err(err)?;
        let version: i64 =
            column(&version, 0).map_err(|r| self.corrupt("branches", format!("branch {id}"), r))?;
        let added = self.sync_rows(&tx, Table::Messages, id, split.rows).await?;
        self.sync_rows(&tx, Table::Logs, id, split.logs).await?;
        // The outbox announces the messages this write added.
        if !added.is_empty() {
            let (eseq, ebody): (Vec<i64>, Vec<String>) = added.into_iter().unzip();
            tx.execute(
                &tx.prepare_cached(
                    "INSERT INTO events (branch_id, seq, version, body)
                     SELECT $1, s, $2, b FROM UNNEST($3::bigint[], $4::text[]) AS u(s, b)",
                )
                .await
                .map_err(err)?,
                &[&id, &version, &eseq, &ebody],
            )
            .await
            .map_err(err)?;
            tx.execute(
                &tx.prepare_cached("SELECT pg_notify($1, $2)")
                    .await
                    .map_err(err)?,
                &[&self.shared.channel, &id.to_string()],
            )
            .await
            .map_err(err)?;
        }
        tx.commit().await.map_err(err)?;
        self.version_of(id, version)
    }
}

impl PgStore {
    /// Makes a branch's rows in `table` exactly `rows` (in `collections`
    /// order) inside `tx`. Rows stored unchanged (same place, same digest)
    /// are left alone. Returns the `(seq, body)` of the rows that were not
    /// stored before.
    async fn sync_rows(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        table: Table,
        id: Uuid,
        rows: Vec<MessageRow>,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        let (name, id_col) = table.names();
        let label = &self.shared.label;
        let err = |e: tokio_postgres::Error| pg_err(label, format!("save branch {id}"), e);
        let mut stored: HashMap<Uuid, (i64, i64, i64)> = tx
            .query(
                &tx.prepare_cached(&format!(
                    "SELECT {id_col}, seq, pos, hash FROM {name} WHERE branch_id = $1"
                ))
                .await
                .map_err(err)?,
                &[&id],
            )
            .await
            .map_err(err)?
            .iter()
            .map(|r| Ok((column(r, 0)?, (column(r, 1)?, column(r, 2)?, column(r, 3)?))))
            .collect::<Result<_, String>>()
            .map_err(|r| self.corrupt(name, format!("branch {id}"), r))?;
        let mut seqs = Vec::new();
        let mut poss = Vec::new();
        let mut ids = Vec::new();
        let mut hashes = Vec::new();
        let mut bodies = Vec::new();
        let mut fresh = Vec::new();
        let mut rewrite = Vec::new();
        for (seq, row) in (0i64..).zip(rows) {
            let item = Uuid::parse_str(&row.id).map_err(|e| StoreError::Branch {
                id,
                source: branch_core::BranchError::InvalidData {
                    path: format!("{name}.collections[{seq}].id"),
                    reason: e.to_string(),
                },
            })?;
            let is_new = match stored.remove(&item) {
                Some(s) if s == (seq, row.pos, row.hash) => continue,
                // Changed rows are deleted and written again: rewriting
                // them in place could collide on (branch_id, seq).
                Some(_) => {
                    rewrite.push(item);
                    false
                }
                None => true,
            };
            fresh.push(is_new);
            seqs.push(seq);
            poss.push(row.pos);
            ids.push(item);
            hashes.push(row.hash);
            bodies.push(row.body);
        }
        rewrite.extend(stored.into_keys());
        if !rewrite.is_empty() {
            tx.execute(
                &tx.prepare_cached(&format!(
                    "DELETE FROM {name} WHERE branch_id = $1 AND {id_col} = ANY($2)"
                ))
                .await
                .map_err(err)?,
                &[&id, &rewrite],
            )
            .await
            .map_err(err)?;
        }
        if !ids.is_empty() {
            tx.execute(
                &tx.prepare_cached(&format!(
                    "INSERT INTO {name} (branch_id, seq, pos, {id_col}, hash, body)
                     SELECT $1, s, p, i, h, b
                     FROM UNNEST($2::bigint[], $3::bigint[], $4::uuid[], $5::bigint[], $6::text[])
                         AS u(s, p, i, h, b)"
                ))
                .await
                .map_err(err)?,
                &[&id, &seqs, &poss, &ids, &hashes, &bodies],
            )
            .await
            .map_err(err)?;
        }
        Ok(seqs
            .into_iter()
            .zip(bodies)
            .zip(fresh)
            .filter_map(|(row, is_new)| is_new.then_some(row))
            .collect())
    }
}

/// FNV-1a: stable across processes and builds, unlike std's hasher.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Reads capped text columns: `(text or NULL when over the cap, length)`.
fn capped(row: &tokio_postgres::Row, at: usize) -> Result<(Option<String>, i64), String> {
    Ok((column(row, at)?, column(row, at + 1)?))
}

/// Column `i` of a row read from the database. Rows are data others may
/// have written, and a column altered by hand may hold NULL or another
/// type: such a value is a fault that names its column, never a panic
/// (`Row::get` panics).
pub(super) fn column<'a, T: FromSql<'a>>(
    row: &'a tokio_postgres::Row,
    i: usize,
) -> Result<T, String> {
    row.try_get(i).map_err(|e| {
        let name = row.columns().get(i).map_or("?", |c| c.name());
        let why = std::error::Error::source(&e).map_or_else(|| e.to_string(), ToString::to_string);
        format!("its column `{name}` does not read: {why}")
    })
}

#[async_trait]
impl BranchStore for PgStore {
    async fn save(&self, branch: &Branch) -> Result<(), StoreError> {
        let id = branch.id();
        let split = layout::split(branch).map_err(|source| StoreError::Branch { id, source })?;
        self.write(split, None).await.map(|_| ())
    }

    async fn save_at(&self, branch: &Branch, expected_version: u64) -> Result<u64, StoreError> {
        let id = branch.id();
        let split = layout::split(branch).map_err(|source| StoreError::Branch { id, source })?;
        self.write(split, Some(expected_version)).await
    }

    async fn append_turn(&self, branch_id: Uuid, messages: &[Message]) -> Result<(), StoreError> {
        self.append(branch_id, None, messages, None)
            .await
            .map(|_| ())
    }

    async fn append_turn_at(
        &self,
        branch_id: Uuid,
        expected_version: u64,
        messages: &[Message],
    ) -> Result<u64, StoreError> {
        self.append(branch_id, Some(expected_version), messages, None)
            .await
    }

    async fn record_turn_at(
        &self,
        branch: &Branch,
        expected_version: u64,
        messages: &[Message],
    ) -> Result<u64, StoreError> {
        // A new or edited system message moves the pile's head, which only
        // a whole save writes: `append` turns to one (on the same version).
        self.append(branch.id(), Some(expected_version), messages, Some(branch))
            .await
    }

    async fn load_versioned(&self, id: Uuid) -> Result<(Branch, u64), StoreError> {
        let label = self.shared.label.clone();
        let err = |e: tokio_postgres::Error| pg_err(&label, format!("load branch {id}"), e);
        let cap = i64::try_from(MAX_STORED_ROW_BYTES).unwrap_or(i64::MAX);
        let mut client = self.client().await?;
        // One snapshot for the skeleton and the rows.
        let tx = client
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(err)?;
        let head = tx
            .query_opt(
                &tx.prepare_cached("SELECT CASE WHEN octet_length(skeleton)::bigint > $2 THEN NULL ELSE skeleton END,
                        octet_length(skeleton)::bigint, version
                 FROM branches WHERE id = $1").await.map_err(err)?,
                &[&id, &cap],
            )
            .await
            .map_err(err)?;
        let Some(head) = head else {
            return Err(StoreError::NotFound(id));
        };
        let what = || format!("branch {id}");
        let (skeleton, skeleton_len) =
            capped(&head, 0).map_err(|r| self.corrupt("branches", what(), r))?;
        let version = column(&head, 2).map_err(|r| self.corrupt("branches", what(), r))?;
        let version = self.version_of(id, version)?;
        let skeleton = skeleton.ok_or_else(|| {
            self.corrupt(
                "branches",
                what(),
                too_big("its skeleton", skeleton_len, MAX_STORED_ROW_BYTES),
            )
        })?;
        let mut total = 0usize;
        let rows = self.read_rows(&tx, Table::Messages, id, &mut total).await?;
        let logs = self.read_rows(&tx, Table::Logs, id, &mut total).await?;
        tx.commit().await.map_err(err)?;
        let doc = layout::assemble(&skeleton, &rows, &logs)
            .map_err(|r| self.corrupt("messages", what(), r))?;
        let branch = Branch::from_json_slice(&doc)
            .map_err(|e| self.corrupt("messages", what(), e.to_string()))?;
        Ok((branch, version))
    }

    async fn load_since(&self, branch_id: Uuid, seq: u64) -> Result<Since, StoreError> {
        let label = self.shared.label.clone();
        let err = |e: tokio_postgres::Error| {
            pg_err(&label, format!("load branch {branch_id} since {seq}"), e)
        };
        let from = i64::try_from(seq).unwrap_or(i64::MAX);
        let cap = i64::try_from(MAX_STORED_ROW_BYTES).unwrap_or(i64::MAX);
        let limit = i64::try_from(MAX_ROWS_PER_BATCH).unwrap_or(i64::MAX);
        let mut client = self.client().await?;
        let tx = client
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(err)?;
        let head = tx
            .query_opt(
                &tx.prepare_cached("SELECT version, message_count FROM branches WHERE id = $1")
                    .await
                    .map_err(err)?,
                &[&branch_id],
            )
            .await
            .map_err(err)?;
        let Some(head) = head else {
            return Err(StoreError::NotFound(branch_id));
        };
        let bad = |r| self.corrupt("branches", format!("branch {branch_id}"), r);
        let version = self.version_of(branch_id, column(&head, 0).map_err(bad)?)?;
        let count = self.count_of(branch_id, column(&head, 1).map_err(bad)?)?;
        let rows = tx
            .query(
                &tx.prepare_cached("SELECT seq, pos, CASE WHEN octet_length(body)::bigint > $3 THEN NULL ELSE body END,
                        octet_length(body)::bigint
                 FROM messages WHERE branch_id = $1 AND seq >= $2 ORDER BY seq LIMIT $4").await.map_err(err)?,
                &[&branch_id, &from, &cap, &limit],
            )
            .await
            .map_err(err)?;
        tx.commit().await.map_err(err)?;
        let mut messages = Vec::with_capacity(rows.len());
        for r in &rows {
            let bad = |reason| self.corrupt("messages", format!("branch {branch_id}"), reason);
            let seq: i64 = column(r, 0).map_err(bad)?;
            let pos: i64 = column(r, 1).map_err(bad)?;
            let (body, len) = capped(r, 2).map_err(bad)?;
            messages.push(self.stored_message(branch_id, seq, pos, body, len)?);
        }
        Ok(Since {
            version,
            message_count: count,
            messages,
        })
    }

    async fn list(&self) -> Result<Vec<BranchSummary>, StoreError> {
        let label = &self.shared.label;
        let c = self.client().await?;
        let rows = c
            .query(
                "SELECT id, CASE WHEN octet_length(name)::bigint > $1 THEN NULL ELSE name END,
                        message_count, updated_at, version
                 FROM branches ORDER BY ord",
                &[&i64::try_from(MAX_STORED_NAME_BYTES).unwrap_or(i64::MAX)],
            )
            .await
            .map_err(|e| pg_err(label, "list branches", e))?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let id: Uuid = column(&r, 0)
                .map_err(|reason| self.corrupt("branches", "a branch".into(), reason))?;
            let bad = |reason| self.corrupt("branches", format!("branch {id}"), reason);
            out.push(BranchSummary {
                id,
                name: column(&r, 1).map_err(bad)?,
                message_count: self.count_of(id, column(&r, 2).map_err(bad)?)?,
                updated_at: finite_time("updated_at", column(&r, 3).map_err(bad)?).map_err(bad)?,
                version: self.version_of(id, column(&r, 4).map_err(bad)?)?,
            });
        }
        Ok(out)
    }

    async fn delete(&self, id: Uuid) -> Result<bool, StoreError> {
        let label = &self.shared.label;
        let c = self.client().await?;
        let n = c
            .execute("DELETE FROM branches WHERE id = $1", &[&id])
            .await
            .map_err(|e| pg_err(label, format!("delete branch {id}"), e))?;
        Ok(n > 0)
    }
}

impl PgStore {
    fn stored_message(
        &self,
        branch_id: Uuid,
        seq: i64,
        pos: i64,
        body: Option<String>,
        len: i64,
    ) -> Result<StoredMessage, StoreError> {
        let corrupt = |reason: String| {
            self.corrupt(
                "messages",
                format!("branch {branch_id}, message at seq {seq}"),
                reason,
            )
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
}
