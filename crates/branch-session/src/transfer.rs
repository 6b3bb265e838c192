//! Import and export of reference JSON files: one `Branch.to_dict()`
//! document per file, as lionagi writes and reads them.

use std::path::{Path, PathBuf};

use branch_core::capped_read::read_regular_file;
use branch_core::{Branch, ToDictOptions};
use uuid::Uuid;

use crate::limits::{BRANCH_FILE_READ_TIMEOUT, MAX_BRANCH_FILE_BYTES};
use crate::store::{BranchStore, StoreError};

fn task_err(path: &Path, e: tokio::task::JoinError) -> StoreError {
    StoreError::Task {
        path: path.to_owned(),
        reason: e.to_string(),
    }
}

/// Reads a branch from a `to_dict` JSON file of at most
/// [`MAX_BRANCH_FILE_BYTES`] (see [`read_branch_file_capped`]).
pub async fn read_branch_file(path: impl AsRef<Path>) -> Result<Branch, StoreError> {
    read_branch_file_capped(path, MAX_BRANCH_FILE_BYTES).await
}

/// Reads a branch from a `to_dict` JSON file of at most `max_bytes`,
/// within [`BRANCH_FILE_READ_TIMEOUT`]. Only a regular file is read: a
/// FIFO could hold the read open for ever and a device (`/dev/zero`) never
/// ends. A larger file is refused after reading one byte past the cap, so
/// memory stays at the cap. Each of these is an [`StoreError::Io`] naming
/// the file and the limit.
pub async fn read_branch_file_capped(
    path: impl AsRef<Path>,
    max_bytes: u64,
) -> Result<Branch, StoreError> {
    let path: PathBuf = path.as_ref().to_owned();
    let p = path.clone();
    let read = tokio::task::spawn_blocking(move || {
        let bytes = read_regular_file(
            &p,
            max_bytes,
            "the limit on branch files (`read_branch_file_capped` takes another)",
        )
        .map_err(|source| StoreError::Io {
            op: "read",
            path: p.clone(),
            source,
        })?;
        Branch::from_json_slice(&bytes)
            .map_err(|source| StoreError::InvalidFile { path: p, source })
    });
    // A read past the deadline is left to end on its own (it holds at most
    // the cap); the caller has its answer now.
    match tokio::time::timeout(BRANCH_FILE_READ_TIMEOUT, read).await {
        Ok(done) => done.map_err(|e| task_err(&path, e))?,
        Err(_) => Err(StoreError::Io {
            op: "read",
            path,
            source: std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "not read within {} s (BRANCH_FILE_READ_TIMEOUT)",
                    BRANCH_FILE_READ_TIMEOUT.as_secs()
                ),
            ),
        }),
    }
}

/// Writes `branch.to_dict(opts)` as pretty JSON. The file is replaced
/// atomically: a crash leaves the old file or the new one, never half.
pub async fn write_branch_file(
    branch: &Branch,
    path: impl AsRef<Path>,
    opts: &ToDictOptions,
) -> Result<(), StoreError> {
    let path: PathBuf = path.as_ref().to_owned();
    let id = branch.id();
    let dict = branch
        .to_dict(opts)
        .map_err(|source| StoreError::Branch { id, source })?;
    let p = path.clone();
    tokio::task::spawn_blocking(move || {
        let io = |source| StoreError::Io {
            op: "write",
            path: p.clone(),
            source,
        };
        let mut bytes = serde_json::to_vec_pretty(&dict)
            .map_err(|e| io(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
        bytes.push(b'\n');
        let mut tmp = p.clone().into_os_string();
        tmp.push(format!(".{}.tmp", Uuid::new_v4().simple()));
        let tmp = PathBuf::from(tmp);
        std::fs::write(&tmp, &bytes).map_err(io)?;
        std::fs::rename(&tmp, &p).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io(e)
        })
    })
    .await
    .map_err(|e| task_err(&path, e))?
}

/// Imports a reference JSON file (read as [`read_branch_file`] reads it)
/// into `store`; returns the branch id. A branch already stored under that
/// id is replaced.
pub async fn import_file(
    store: &dyn BranchStore,
    path: impl AsRef<Path>,
) -> Result<Uuid, StoreError> {
    let branch = read_branch_file(path).await?;
    store.save(&branch).await?;
    Ok(branch.id())
}

/// Exports a stored branch as a reference JSON file (default `to_dict`).
pub async fn export_file(
    store: &dyn BranchStore,
    id: Uuid,
    path: impl AsRef<Path>,
) -> Result<(), StoreError> {
    let branch = store.load(id).await?;
    write_branch_file(&branch, path, &ToDictOptions::default()).await
}
