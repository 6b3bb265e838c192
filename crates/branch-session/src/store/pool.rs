//! A bounded set of SQLite connections used from async code: every call
//! runs on tokio's blocking pool, holding a permit so no more than
//! `max_connections` blocking threads and connections are ever busy.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OpenFlags};
use tokio::sync::Semaphore;

use super::error::StoreError;
use super::sqlite::{SqliteOptions, sql_err};

pub(crate) struct Pool {
    path: PathBuf,
    opts: SqliteOptions,
    idle: Mutex<Vec<Connection>>,
    permits: Arc<Semaphore>,
}

impl Pool {
    pub(crate) fn new(path: PathBuf, opts: SqliteOptions, first: Connection) -> Self {
        let permits = opts.max_connections.clamp(1, Semaphore::MAX_PERMITS);
        let permits = Arc::new(Semaphore::new(permits));
        Self {
            path,
            opts,
            idle: Mutex::new(vec![first]),
            permits,
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Opens and configures one connection (blocking).
    pub(crate) fn connect(path: &Path, opts: &SqliteOptions) -> Result<Connection, StoreError> {
        if opts.read_only {
            // Nothing is changed: no journal mode, no migration, no new
            // file. Works on a file (or directory) this process may not
            // write.
            let conn = Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(|e| sql_err(path, "open read-only", e))?;
            conn.busy_timeout(opts.busy_timeout)
                .map_err(|e| sql_err(path, "set busy timeout", e))?;
            return Ok(conn);
        }
        let conn = Connection::open(path).map_err(|e| sql_err(path, "open", e))?;
        conn.busy_timeout(opts.busy_timeout)
            .map_err(|e| sql_err(path, "set busy timeout", e))?;
        // WAL lets readers proceed while one writer commits, and a commit is
        // one append to the log: a killed process leaves either the whole
        // transaction or none of it.
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(|e| sql_err(path, "enable WAL", e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(path = %path.display(), mode, "sqlite store is not in WAL mode");
        }
        conn.pragma_update(None, "synchronous", opts.durability.pragma())
            .map_err(|e| sql_err(path, "set synchronous", e))?;
        Ok(conn)
    }

    /// Runs `f` with a connection on the blocking pool.
    pub(crate) async fn run<T, F>(self: &Arc<Self>, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(&mut Connection, &Path) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Closed(self.path.clone()))?;
        let pool = Arc::clone(self);
        let joined = tokio::task::spawn_blocking(move || {
            // The permit lives as long as the blocking work, even when the
            // awaiting future is dropped.
            let _permit = permit;
            let taken = pool.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let mut conn = match taken {
                Some(c) => c,
                None => Self::connect(&pool.path, &pool.opts)?,
            };
            let out = f(&mut conn, &pool.path);
            pool.idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(conn);
            out
        })
        .await;
        match joined {
            Ok(out) => out,
            Err(e) => Err(StoreError::Task {
                path: self.path.clone(),
                reason: e.to_string(),
            }),
        }
    }
}
