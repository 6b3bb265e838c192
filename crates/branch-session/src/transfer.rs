//! Import and export of reference JSON files: one `Branch.to_dict()`
//! document per file, as lionagi writes and reads them.

use std::path::{Path, PathBuf};

use branch_core::{Branch, ToDictOptions};
use uuid::Uuid;

use crate::store::{BranchStore, StoreError};

fn task_err(path: &Path, e: tokio::task::JoinError) -> StoreError {
    StoreError::Task {
        path: path.to_owned(),
        reason: e.to_string(),
    }
}

/// Reads a branch from a `to_dict` JSON file.
pub async fn read_branch_file(path: impl AsRef<Path>) -> Result<Branch, StoreError> {
    let path: PathBuf = path.as_ref().to_owned();
    let p = path.clone();
    tokio::task::spawn_blocking(move || {
        let bytes = std::fs::read(&p).map_err(|source| StoreError::Io {
            op: "read",
            path: p.clone(),
            source,
        })?;
        Branch::from_json_slice(&bytes)
            .map_err(|source| StoreError::InvalidFile { path: p, source })
    })
    .await
    .map_err(|e| task_err(&path, e))?
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

/// Imports a reference JSON file into `store`; returns the branch id. A
/// branch already stored under that id is replaced.
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
