//! Caps on what the stores read back and wait for. Stored rows come from a
//! file or a server other programs can write, so every read is bounded and
//! every wait has a deadline; `docs/security.md` lists the defaults.

use std::time::Duration;

/// Largest stored message or log body or branch skeleton read back
/// (16 MiB). A real message is a few KiB, and a log (which holds the
/// request it sent) the size of its conversation; a row beyond this is
/// damage or an attack,
/// and reading it would let a file decide how much memory we take.
pub const MAX_STORED_ROW_BYTES: usize = 16 * 1024 * 1024;

/// Largest branch name `list` reads back (64 KiB); a longer stored name
/// is reported as missing (`None`) rather than read.
pub const MAX_STORED_NAME_BYTES: usize = 64 * 1024;

/// Largest whole conversation read back by one load (512 MiB of message
/// and log bodies): 10,000 messages of 50 KiB each fit with room to spare.
pub const MAX_STORED_BRANCH_BYTES: usize = 512 * 1024 * 1024;

/// Largest branch file `read_branch_file` and `import_file` read (64 MiB,
/// the CLI's default for the files it reads): a conversation of 10,000
/// long messages is a few MiB, and a larger file (or `/dev/zero` behind a
/// symlink) is refused before it fills memory.
/// `read_branch_file_capped` takes another cap.
pub const MAX_BRANCH_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// How long reading a branch file may take: a regular file of the largest
/// size reads in well under a second; a stalled network mount does not
/// hold the caller for ever.
pub const BRANCH_FILE_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// Most messages one `load_since` or `watch` batch returns; callers page.
pub const MAX_ROWS_PER_BATCH: usize = 10_000;

/// How long connecting to PostgreSQL may take before the store reports the
/// server unreachable.
pub const PG_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a store call waits for a free pooled connection.
pub const PG_POOL_WAIT: Duration = Duration::from_secs(30);

/// Longest one SQL statement may run on the server (`statement_timeout`):
/// a store call is a handful of indexed statements, so this only cuts off
/// a stuck server or lock.
pub const PG_STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

/// How often a watcher re-reads the outbox when no notification arrives,
/// in case one was lost with a dropped connection.
pub const WATCH_POLL_INTERVAL: Duration = Duration::from_secs(2);

/// Longest pause between a watcher's reconnection attempts.
pub const WATCH_MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Largest `.pgpass` file read (64 KiB): it holds a few lines.
pub const MAX_PGPASS_BYTES: u64 = 64 * 1024;
