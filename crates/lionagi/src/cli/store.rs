//! The conversation store `--store` names: a `postgres://` (or
//! `postgresql://`) URL is a PostgreSQL database shared by many workers,
//! anything else a SQLite file. The name shown in messages never carries
//! a password.

use std::sync::Arc;

use branch_session::store::postgres::{is_postgres_url, redact_url};
use branch_session::store::{BranchStore, PgStore, SqliteStore, StoreError};

/// Whether the command only reads the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Nothing is written: a SQLite file is opened read-only, so a store
    /// this user may not write can still be listed and exported.
    Read,
    /// Turns and imports are written (a new SQLite file is created).
    Write,
}

/// An open store and the name to show for it.
#[derive(Clone)]
pub(crate) struct OpenStore {
    pub db: Arc<dyn BranchStore>,
    pub label: String,
}

/// How `spec` is shown: a URL without its password, or the path.
pub(crate) fn label(spec: &str) -> String {
    if is_postgres_url(spec) {
        redact_url(spec)
    } else {
        spec.to_owned()
    }
}

/// Opens the store `spec` names.
pub(crate) async fn open(spec: &str, access: Access) -> Result<OpenStore, StoreError> {
    let db: Arc<dyn BranchStore> = if is_postgres_url(spec) {
        Arc::new(PgStore::connect(spec).await?)
    } else if access == Access::Read {
        Arc::new(SqliteStore::open_read_only(spec).await?)
    } else {
        Arc::new(SqliteStore::open(spec).await?)
    };
    Ok(OpenStore {
        db,
        label: label(spec),
    })
}
