//! The caps and deadlines of the `lionagi` command on what it reads: a
//! conversation file (or `-`, standard input) and the lines of a piped
//! `lionagi chat`. Each can be changed with the environment variable named
//! beside it; `docs/security.md` lists them with their defaults.

use std::time::Duration;

/// The largest conversation file `lionagi branch` reads (`show`,
/// `roundtrip`, `import`, and `-` for stdin). A conversation of thousands
/// of turns is a few megabytes; a larger input (or `/dev/zero`) is refused
/// once this many bytes have been read, so memory stays bounded.
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;
/// Changes [`MAX_FILE_BYTES`] (a number of bytes).
pub const MAX_FILE_BYTES_VAR: &str = "LIONAGI_MAX_FILE_BYTES";

/// How long reading a conversation file may take. A regular file is read
/// in well under a second; a pipe or FIFO that never ends (or never
/// opens) fails at this deadline instead of holding the command forever.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Changes [`READ_TIMEOUT`] (whole seconds, 1 to [`MAX_READ_TIMEOUT_SECS`]).
pub const READ_TIMEOUT_VAR: &str = "LIONAGI_READ_TIMEOUT";
/// The longest [`READ_TIMEOUT`] that may be set: a day.
pub const MAX_READ_TIMEOUT_SECS: u64 = 24 * 60 * 60;

/// The longest line a piped `lionagi chat` reads from stdin: one turn's
/// question. A longer line (or stdin without newlines, such as
/// `/dev/zero`) ends the conversation with an error.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;
/// Changes [`MAX_LINE_BYTES`] (a number of bytes).
pub const MAX_LINE_BYTES_VAR: &str = "LIONAGI_MAX_LINE_BYTES";

/// The longest one OTLP export request may take, reply included (feature
/// `otel`): a collector that does not answer must not hold spans, or the
/// program's exit, for long. `OTEL_EXPORTER_OTLP_TIMEOUT` is not read past
/// this.
pub const OTLP_EXPORT_DEADLINE: Duration = Duration::from_secs(10);

/// The longest the exit waits for buffered spans to be sent (feature
/// `otel`).
pub const OTLP_SHUTDOWN_DEADLINE: Duration = Duration::from_secs(5);

/// The longest `lionagi chat` and `lionagi mcp serve` wait, at exit and
/// before `/clear`, for the conversation's log dumps at capacity to be
/// written (they are written on tokio's blocking pool, which drops a
/// write not yet started when the runtime shuts down). Past it, a warning
/// names the directory.
pub const LOG_DUMP_DEADLINE: Duration = Duration::from_secs(30);

/// The longest `lionagi chat`, `lionagi mcp serve` and the store commands
/// of `lionagi branch` wait at exit for work left on tokio's blocking pool
/// (a store write whose turn was cancelled, a log dump past
/// [`LOG_DUMP_DEADLINE`]): a disk that stopped answering must not hold the
/// command forever. A write cut there is not committed.
pub const EXIT_DEADLINE: Duration = Duration::from_secs(10);

/// The largest collector reply read (feature `otel`): it is a small status
/// message, and only its status code is used.
pub const MAX_COLLECTOR_REPLY_BYTES: usize = 64 * 1024;

/// The caps in force: the defaults, or the values the environment sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputLimits {
    /// See [`MAX_FILE_BYTES`].
    pub max_file_bytes: u64,
    /// See [`READ_TIMEOUT`].
    pub read_timeout: Duration,
    /// See [`MAX_LINE_BYTES`].
    pub max_line_bytes: usize,
}

impl Default for InputLimits {
    fn default() -> Self {
        Self {
            max_file_bytes: MAX_FILE_BYTES,
            read_timeout: READ_TIMEOUT,
            max_line_bytes: MAX_LINE_BYTES,
        }
    }
}

impl InputLimits {
    /// The defaults with the environment's overrides. A variable that is
    /// set but not a positive whole number (or, for the timeout, over a
    /// day) is an error naming it, never silently ignored.
    pub fn from_env() -> Result<Self, String> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`InputLimits::from_env`] over any source of variables.
    pub fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let mut limits = Self::default();
        if let Some(v) = var(MAX_FILE_BYTES_VAR) {
            limits.max_file_bytes = positive(MAX_FILE_BYTES_VAR, &v, u64::MAX)?;
        }
        if let Some(v) = var(READ_TIMEOUT_VAR) {
            limits.read_timeout =
                Duration::from_secs(positive(READ_TIMEOUT_VAR, &v, MAX_READ_TIMEOUT_SECS)?);
        }
        if let Some(v) = var(MAX_LINE_BYTES_VAR) {
            let max = u64::try_from(usize::MAX).unwrap_or(u64::MAX);
            let n = positive(MAX_LINE_BYTES_VAR, &v, max)?;
            limits.max_line_bytes = usize::try_from(n).unwrap_or(usize::MAX);
        }
        Ok(limits)
    }
}

fn positive(name: &str, value: &str, max: u64) -> Result<u64, String> {
    match value.trim().parse::<u64>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "{name} must be a whole number from 1 to {max}, not `{}`",
            value.chars().take(40).collect::<String>()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(
            InputLimits::from_lookup(|_| None).unwrap(),
            InputLimits::default()
        );
        let l = InputLimits::from_lookup(|n| {
            Some(
                match n {
                    MAX_FILE_BYTES_VAR => "10",
                    READ_TIMEOUT_VAR => " 2 ",
                    _ => "7",
                }
                .to_owned(),
            )
        })
        .unwrap();
        assert_eq!(l.max_file_bytes, 10);
        assert_eq!(l.read_timeout, Duration::from_secs(2));
        assert_eq!(l.max_line_bytes, 7);
    }

    #[test]
    fn nonsense_is_an_error_naming_the_variable() {
        for bad in ["0", "-1", "1e9", "lots", "", "99999999999999999999999"] {
            let e = InputLimits::from_lookup(|n| (n == MAX_FILE_BYTES_VAR).then(|| bad.to_owned()))
                .unwrap_err();
            assert!(e.contains(MAX_FILE_BYTES_VAR), "{e}");
        }
        let e = InputLimits::from_lookup(|n| (n == READ_TIMEOUT_VAR).then(|| "86401".to_owned()))
            .unwrap_err();
        assert!(e.contains(READ_TIMEOUT_VAR), "{e}");
    }
}
