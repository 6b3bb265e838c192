//! `run`'s persistence (`stream_persist`): a branch snapshot before and
//! after the stream, and every streamed message appended to a JSONL buffer
//! that is removed once the turn is in. All file work runs on tokio's
//! blocking pool so the stream's task never waits on the disk.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::{Committed, OperationError, Result};

/// Where the reference keeps run logs: `$LIONAGI_HOME/logs/runs`, else
/// `~/.lionagi/logs/runs`, else (no home) `.lionagi/logs/runs`.
pub fn default_persist_dir() -> PathBuf {
    let home = std::env::var_os("LIONAGI_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".lionagi")))
        .unwrap_or_else(|| PathBuf::from(".lionagi"));
    home.join("logs").join("runs")
}

/// The files of one persisted run.
#[derive(Debug, Clone)]
pub(crate) struct Persist {
    snapshot: PathBuf,
    buffer: PathBuf,
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> OperationError {
    OperationError::Run {
        message: format!("cannot {what} {}: {e}", path.display()),
        committed: Committed::default(),
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())))
}

impl Persist {
    /// The files of `branch_id` under `persist_dir` (snapshot under
    /// `snapshot_dir` when given).
    pub(crate) fn new(
        branch_id: uuid::Uuid,
        persist_dir: Option<&Path>,
        snapshot_dir: Option<&Path>,
    ) -> Self {
        let persist = persist_dir.map_or_else(default_persist_dir, Path::to_path_buf);
        let snap = snapshot_dir.map_or_else(|| persist.clone(), Path::to_path_buf);
        Self {
            snapshot: snap.join(format!("{branch_id}.json")),
            buffer: persist.join(format!("{branch_id}.buffer.jsonl")),
        }
    }

    /// Writes the branch snapshot (replacing an earlier one).
    pub(crate) async fn snapshot(&self, dict: Value) -> Result<()> {
        let path = self.snapshot.clone();
        let p = path.clone();
        blocking(move || {
            if let Some(dir) = p.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let bytes = serde_json::to_vec_pretty(&dict).map_err(std::io::Error::other)?;
            // Written whole then renamed, so a reader never sees half a file.
            let tmp = p.with_extension("json.tmp");
            std::fs::write(&tmp, bytes)?;
            std::fs::rename(&tmp, &p)
        })
        .await
        .map_err(|e| io_error("write the snapshot", &path, e))
    }

    /// Appends one streamed message to the buffer.
    pub(crate) async fn append(&self, line: Value) -> Result<()> {
        let path = self.buffer.clone();
        let p = path.clone();
        blocking(move || {
            if let Some(dir) = p.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&p)?;
            let mut bytes = serde_json::to_vec(&line).map_err(std::io::Error::other)?;
            bytes.push(b'\n');
            f.write_all(&bytes)
        })
        .await
        .map_err(|e| io_error("append to the buffer", &path, e))
    }

    /// Removes the buffer (the turn is in the snapshot now).
    pub(crate) async fn clear_buffer(&self) -> Result<()> {
        let path = self.buffer.clone();
        let p = path.clone();
        blocking(move || match std::fs::remove_file(&p) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other,
        })
        .await
        .map_err(|e| io_error("remove the buffer", &path, e))
    }
}
