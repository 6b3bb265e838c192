//! Reading from outside up to a cap: a file or stream is read one byte
//! past its cap and no further, so memory stays at the cap whatever the
//! input is (a huge file, `/dev/zero`). Every crate that reads a file it
//! did not write reads it through here and names its own limit.

use std::io::{Error, ErrorKind, Read, Result};
use std::path::Path;

/// All of `r`, if it holds at most `max` bytes; past that the error is
/// `FileTooLarge`, "more than `max` bytes, `limit`" (`limit` names the
/// cap and how to change it). Bytes, not text: a cut at the cap may split
/// a character, and the size is then the reason to give.
pub fn read_to_cap(r: impl Read, max: u64, limit: &str) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    r.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if u64::try_from(bytes.len()).map_or(true, |n| n > max) {
        return Err(Error::new(
            ErrorKind::FileTooLarge,
            format!("more than {max} bytes, {limit}"),
        ));
    }
    Ok(bytes)
}

/// All of the regular file at `path`, as [`read_to_cap`] reads it. A name
/// that is not a regular file is refused (`InvalidInput`) before it is
/// opened: opening a FIFO waits for a writer, a device such as
/// `/dev/zero` never ends, a directory is not a document.
pub fn read_regular_file(path: &Path, max: u64, limit: &str) -> Result<Vec<u8>> {
    if !std::fs::metadata(path)?.is_file() {
        return Err(Error::new(ErrorKind::InvalidInput, "not a regular file"));
    }
    let file = std::fs::File::open(path)?;
    read_to_cap(file, max, limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_is_read_to_its_cap_and_one_byte_past_is_refused() {
        let at = read_to_cap(&b"abcd"[..], 4, "the test's limit").unwrap();
        assert_eq!(at, b"abcd");
        let e = read_to_cap(&b"abcde"[..], 4, "the test's limit").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::FileTooLarge);
        assert_eq!(e.to_string(), "more than 4 bytes, the test's limit");
        // An endless reader ends at the cap.
        let e = read_to_cap(std::io::repeat(b'x'), 1024, "l").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::FileTooLarge);
        // The size is the reason even where the cap falls inside a
        // character.
        let e = read_to_cap("éé".as_bytes(), 3, "l").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::FileTooLarge);
    }

    #[test]
    fn only_a_regular_file_is_opened() {
        let dir = std::env::temp_dir();
        let e = read_regular_file(&dir, 10, "l").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        #[cfg(target_os = "linux")]
        {
            let e = read_regular_file(Path::new("/dev/zero"), 10, "l").unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
        }
        let missing = dir.join(format!("lionagi-missing-{}", uuid::Uuid::new_v4()));
        let e = read_regular_file(&missing, 10, "l").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
    }
}
