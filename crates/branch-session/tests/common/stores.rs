//! The stores the contract tests run over: a SQLite file in a temporary
//! directory, and (feature `postgres`) a fresh schema in the PostgreSQL
//! database `LIONAGI_PG_URL` names, so tests run in parallel.
#![allow(dead_code)]

use std::sync::Arc;

use branch_core::MemoryStore;
use branch_session::{BranchStore, SqliteStore};

use super::TempDir;

/// What every store under test offers beyond the trait.
pub trait UnderTest: BranchStore + 'static {
    /// The store's own consistency check.
    fn consistency(&self) -> impl std::future::Future<Output = Vec<String>> + Send;
    /// A durable memory store under `scope`.
    fn memory_at(&self, scope: &str) -> Arc<dyn MemoryStore>;
    /// A second handle on the same data (another process would open one).
    fn reopen(&self) -> impl std::future::Future<Output = Self> + Send
    where
        Self: Sized;
}

impl UnderTest for SqliteStore {
    async fn consistency(&self) -> Vec<String> {
        self.check_consistency().await.expect("consistency check")
    }
    fn memory_at(&self, scope: &str) -> Arc<dyn MemoryStore> {
        Arc::new(self.memory(scope))
    }
    async fn reopen(&self) -> Self {
        SqliteStore::open(self.path()).await.expect("reopen")
    }
}

/// A SQLite store in its own directory (kept alive by the returned guard).
pub async fn sqlite(tag: &str) -> (SqliteStore, TempDir) {
    let dir = TempDir::new(tag);
    let store = SqliteStore::open(dir.join("s.db")).await.expect("open");
    (store, dir)
}

/// The PostgreSQL test database's URL, or `None` (with a message) when
/// none is configured locally. In CI, or with `LIONAGI_PG_REQUIRED=1`, a
/// missing database fails the test.
pub fn pg_url() -> Option<String> {
    match std::env::var("LIONAGI_PG_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let required = std::env::var("LIONAGI_PG_REQUIRED").is_ok_and(|v| v == "1")
                || std::env::var_os("CI").is_some();
            assert!(
                !required,
                "LIONAGI_PG_URL is not set but PostgreSQL is required (CI or LIONAGI_PG_REQUIRED=1); .ci/services/postgres.sh starts one"
            );
            eprintln!("skipped: set LIONAGI_PG_URL to run the PostgreSQL store tests");
            None
        }
    }
}

/// `url` for a plain driver connection of a test (no TLS stack): the
/// store connects with TLS as the URL asks; the test's own side channel
/// (killing backends, adding triggers) does not need it.
pub fn without_tls(url: &str) -> String {
    url.replace("sslmode=require", "sslmode=disable")
}

/// A schema name of its own for one test.
pub fn fresh_schema(tag: &str) -> String {
    format!("t_{tag}_{}", uuid::Uuid::new_v4().simple())
        .chars()
        .take(63)
        .collect()
}

#[cfg(feature = "postgres")]
mod pg {
    use super::*;
    use branch_session::{PgOptions, PgStore};

    impl UnderTest for PgStore {
        async fn consistency(&self) -> Vec<String> {
            self.check_consistency().await.expect("consistency check")
        }
        fn memory_at(&self, scope: &str) -> Arc<dyn MemoryStore> {
            Arc::new(self.memory(scope))
        }
        async fn reopen(&self) -> Self {
            self.clone()
        }
    }

    /// A PostgreSQL store in a fresh schema, or `None` when skipped.
    pub async fn postgres(tag: &str) -> Option<(PgStore, ())> {
        let url = pg_url()?;
        let opts = PgOptions {
            schema: Some(fresh_schema(tag)),
            max_connections: 4,
            ..PgOptions::default()
        };
        Some((
            PgStore::connect_with(&url, opts).await.expect("connect"),
            (),
        ))
    }
}
#[cfg(feature = "postgres")]
#[allow(unused_imports)]
pub use pg::postgres;
