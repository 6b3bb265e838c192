//! Reading input from outside with a size cap and a deadline: a whole
//! conversation file (or stdin) for `lionagi branch`, and one line at a
//! time for a piped `lionagi chat`. Whatever the input is (a huge file,
//! `/dev/zero`, a FIFO no one writes to), a read ends at the cap or the
//! deadline with an error that names the limit and how to change it.

use std::io::{BufRead, Read};
use std::sync::mpsc;
use std::time::Duration;

use crate::limits::{MAX_FILE_BYTES_VAR, MAX_LINE_BYTES_VAR, READ_TIMEOUT_VAR};

/// Why a bounded read failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BoundedReadError {
    /// The input could not be opened or read.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The input is larger than the cap.
    #[error(
        "more than {max} bytes, the limit on conversation files (set {MAX_FILE_BYTES_VAR} to change it)"
    )]
    TooLarge {
        /// The cap.
        max: u64,
    },
    /// The input did not end in time.
    #[error(
        "not read to its end within {} s (set {READ_TIMEOUT_VAR} to change the deadline); a pipe or FIFO that never ends?",
        .after.as_secs()
    )]
    TimedOut {
        /// The deadline.
        after: Duration,
    },
}

/// Reads all of `path` (`-` is stdin), at most `max` bytes, within
/// `deadline`. The read runs on a thread of its own so that a blocked
/// `open` or `read` (a FIFO) cannot outlast the deadline; when the
/// deadline passes, that thread is left to finish or block on its own
/// (it holds at most `max` bytes) and the caller gets the error at once.
pub(crate) fn read_all(
    path: &str,
    max: u64,
    deadline: Duration,
) -> Result<Vec<u8>, BoundedReadError> {
    let (tx, rx) = mpsc::sync_channel(1);
    let source = path.to_owned();
    std::thread::Builder::new()
        .name("lionagi-read".into())
        .spawn(move || {
            let read = if source == "-" {
                read_capped(std::io::stdin().lock(), max)
            } else {
                std::fs::File::open(&source)
                    .map_err(BoundedReadError::from)
                    .and_then(|f| read_capped(f, max))
            };
            // The receiver is gone when the deadline passed first.
            let _ = tx.send(read);
        })?;
    match rx.recv_timeout(deadline) {
        Ok(read) => read,
        Err(mpsc::RecvTimeoutError::Timeout) => Err(BoundedReadError::TimedOut { after: deadline }),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(BoundedReadError::Io(
            std::io::Error::other("the reading thread stopped without an answer"),
        )),
    }
}

/// At most `max` bytes of `r`; one byte more is the error.
fn read_capped(r: impl Read, max: u64) -> Result<Vec<u8>, BoundedReadError> {
    branch_core::capped_read::read_to_cap(r, max, "").map_err(|e| match e.kind() {
        std::io::ErrorKind::FileTooLarge => BoundedReadError::TooLarge { max },
        _ => BoundedReadError::Io(e),
    })
}

/// The next line of `r` without its `\n` (or `\r\n`), `None` at the end.
/// A line longer than `max` bytes is an error once `max` bytes have been
/// seen (nothing more is buffered), as is a line that is not UTF-8.
pub(crate) fn read_line(r: &mut impl BufRead, max: usize) -> std::io::Result<Option<String>> {
    let mut line: Vec<u8> = Vec::new();
    let mut seen_any = false;
    loop {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return if seen_any {
                finish(line, max).map(Some)
            } else {
                Ok(None)
            };
        }
        seen_any = true;
        let (chunk, newline) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], true),
            None => (buf, false),
        };
        // One byte of slack keeps a `\r` before the newline; `finish`
        // checks the line itself.
        if line.len().saturating_add(chunk.len()) > max.saturating_add(1) {
            return Err(too_long(max));
        }
        line.extend_from_slice(chunk);
        let used = chunk.len() + usize::from(newline);
        r.consume(used);
        if newline {
            return finish(line, max).map(Some);
        }
    }
}

fn too_long(max: usize) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!(
            "a line is longer than {max} bytes, the limit on one input line (set {MAX_LINE_BYTES_VAR} to change it)"
        ),
    )
}

fn finish(mut line: Vec<u8>, max: usize) -> std::io::Result<String> {
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    if line.len() > max {
        return Err(too_long(max));
    }
    String::from_utf8(line).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "a line is not UTF-8 text")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn lines(input: &[u8], max: usize) -> Vec<std::io::Result<Option<String>>> {
        let mut r = std::io::BufReader::with_capacity(4, Cursor::new(input.to_vec()));
        let mut out = Vec::new();
        loop {
            let l = read_line(&mut r, max);
            let stop = !matches!(l, Ok(Some(_)));
            out.push(l);
            if stop {
                return out;
            }
        }
    }

    #[test]
    fn lines_split_on_newlines_within_the_cap() {
        let got: Vec<_> = lines(b"one\r\ntwo\nthree", 5)
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            got,
            [
                Some("one".into()),
                Some("two".into()),
                Some("three".into()),
                None
            ]
        );
        let got: Vec<_> = lines(b"\n\n", 5).into_iter().map(Result::unwrap).collect();
        assert_eq!(got, [Some(String::new()), Some(String::new()), None]);
    }

    #[test]
    fn a_long_line_fails_without_reading_on() {
        let got = lines(b"ok\n123456789\nnext\n", 5);
        assert_eq!(got[0].as_ref().unwrap(), &Some("ok".into()));
        let e = got[1].as_ref().unwrap_err();
        assert!(e.to_string().contains(MAX_LINE_BYTES_VAR), "{e}");
        // Exactly the cap is fine, with or without `\r`; one more is not.
        assert_eq!(
            lines(b"12345\n", 5)[0].as_ref().unwrap(),
            &Some("12345".into())
        );
        assert_eq!(
            lines(b"12345\r\n", 5)[0].as_ref().unwrap(),
            &Some("12345".into())
        );
        assert!(lines(b"123456\n", 5)[0].is_err());
        assert!(lines(b"123456", 5)[0].is_err());
        // Zeros without a newline fail at the cap too.
        let zeros = vec![0u8; 64];
        assert!(lines(&zeros, 8)[0].is_err());
    }

    #[test]
    fn a_line_that_is_not_utf8_is_an_error() {
        assert!(lines(b"\xff\xfe\n", 5)[0].is_err());
    }

    #[test]
    fn whole_reads_stop_at_the_cap() {
        let got = read_capped(Cursor::new(vec![b'x'; 10]), 10).unwrap();
        assert_eq!(got.len(), 10);
        let e = read_capped(Cursor::new(vec![b'x'; 11]), 10).unwrap_err();
        assert!(matches!(e, BoundedReadError::TooLarge { max: 10 }));
        assert!(e.to_string().contains(MAX_FILE_BYTES_VAR));
        // An endless source stops at the cap plus one byte.
        let e = read_capped(std::io::repeat(0), 1000).unwrap_err();
        assert!(matches!(e, BoundedReadError::TooLarge { max: 1000 }));
    }
}
