//! A linear, bounded framer for `text/event-stream` bodies (the WHATWG
//! "event stream interpretation"): bytes in, events out.
//!
//! Every byte is looked at once: a partial line is kept and only the new
//! bytes are scanned for its end, so a long unterminated line costs time in
//! proportion to its length (a library that re-scans its buffer on every
//! chunk is quadratic). A line longer than [`limits::MAX_SSE_LINE_BYTES`]
//! or an event larger than [`limits::MAX_SSE_EVENT_BYTES`] is an error, so
//! memory stays bounded whatever the server sends.

use std::fmt;

use crate::limits;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field; empty when unnamed (`message`).
    pub event: String,
    /// The `data:` lines joined by `\n`.
    pub data: String,
    /// The last `id:` field seen, if any.
    pub id: Option<String>,
}

/// Why a stream could not be framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SseError {
    /// A line is longer than the cap (bytes).
    LineTooLong {
        /// The cap.
        limit: usize,
    },
    /// An event's data is larger than the cap (bytes).
    EventTooLarge {
        /// The cap.
        limit: usize,
    },
    /// A line is not UTF-8.
    NotUtf8,
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::LineTooLong { limit } => {
                write!(f, "an event-stream line is longer than {limit} bytes")
            }
            Self::EventTooLarge { limit } => {
                write!(f, "an event-stream event is larger than {limit} bytes")
            }
            Self::NotUtf8 => f.write_str("an event-stream line is not UTF-8"),
        }
    }
}

impl std::error::Error for SseError {}

/// The framer: feed it chunks with [`SseFramer::push`].
#[derive(Debug)]
pub struct SseFramer {
    max_line: usize,
    max_event: usize,
    /// The current, unterminated line.
    line: Vec<u8>,
    /// The previous chunk ended in `\r`: a `\n` starting the next one
    /// belongs to the same line ending.
    after_cr: bool,
    /// No byte seen yet (a leading byte-order mark is dropped).
    at_start: bool,
    event: String,
    data: String,
    has_data: bool,
    last_id: Option<String>,
    failed: Option<SseError>,
}

impl Default for SseFramer {
    fn default() -> Self {
        Self::new()
    }
}

impl SseFramer {
    /// A framer with the default caps.
    pub fn new() -> Self {
        Self::with_limits(limits::MAX_SSE_LINE_BYTES, limits::MAX_SSE_EVENT_BYTES)
    }

    /// A framer with explicit caps (bytes per line, bytes of data per
    /// event).
    pub fn with_limits(max_line: usize, max_event: usize) -> Self {
        Self {
            max_line,
            max_event,
            line: Vec::new(),
            after_cr: false,
            at_start: true,
            event: String::new(),
            data: String::new(),
            has_data: false,
            last_id: None,
            failed: None,
        }
    }

    /// Frames `chunk`, appending the events it completes to `out`. After
    /// an error every later call returns the same error.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let r = self.push_inner(chunk, out);
        if let Err(e) = r {
            self.failed = Some(e);
        }
        r
    }

    fn push_inner(&mut self, mut chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if self.after_cr && !chunk.is_empty() {
            self.after_cr = false;
            if chunk.first() == Some(&b'\n') {
                chunk = &chunk[1..];
            }
        }
        while !chunk.is_empty() {
            match chunk.iter().position(|&b| b == b'\n' || b == b'\r') {
                None => {
                    self.extend_line(chunk)?;
                    return Ok(());
                }
                Some(i) => {
                    self.extend_line(&chunk[..i])?;
                    let ending = chunk[i];
                    let mut rest = &chunk[i + 1..];
                    if ending == b'\r' {
                        match rest.first() {
                            Some(b'\n') => rest = &rest[1..],
                            None => self.after_cr = true,
                            Some(_) => {}
                        }
                    }
                    self.end_line(out)?;
                    chunk = rest;
                }
            }
        }
        Ok(())
    }

    fn extend_line(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.line.len().saturating_add(bytes.len()) > self.max_line {
            return Err(SseError::LineTooLong {
                limit: self.max_line,
            });
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn end_line(&mut self, out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        let mut bytes = std::mem::take(&mut self.line);
        if self.at_start {
            self.at_start = false;
            if bytes.starts_with(&[0xEF, 0xBB, 0xBF]) {
                bytes.drain(..3);
            }
        }
        let line = String::from_utf8(bytes).map_err(|_| SseError::NotUtf8)?;
        self.process_line(&line, out)?;
        // Keep the buffer's allocation for the next line, unless a huge line
        // made it large.
        let mut reuse = line.into_bytes();
        reuse.clear();
        if reuse.capacity() <= 64 * 1024 {
            self.line = reuse;
        }
        Ok(())
    }

    fn process_line(&mut self, line: &str, out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if line.is_empty() {
            if self.has_data {
                out.push(SseEvent {
                    event: std::mem::take(&mut self.event),
                    data: std::mem::take(&mut self.data),
                    id: self.last_id.clone(),
                });
            } else {
                self.event.clear();
            }
            self.has_data = false;
            return Ok(());
        }
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => {
                self.event.clear();
                self.event.push_str(value);
            }
            "data" => {
                let sep = usize::from(self.has_data);
                let new_len = self
                    .data
                    .len()
                    .saturating_add(sep)
                    .saturating_add(value.len());
                if new_len > self.max_event {
                    return Err(SseError::EventTooLarge {
                        limit: self.max_event,
                    });
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "id" if !value.contains('\0') => self.last_id = Some(value.to_owned()),
            // `retry` tunes reconnection, which a model call never does;
            // other fields are ignored by the protocol.
            _ => {}
        }
        Ok(())
    }

    /// The end of the body: an event not terminated by a blank line is
    /// dropped (as the protocol says), so a truncated last event is never
    /// taken for a complete one.
    pub fn finish(&mut self) -> Result<(), SseError> {
        match self.failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(chunks: &[&[u8]]) -> Result<Vec<SseEvent>, SseError> {
        let mut f = SseFramer::new();
        let mut out = Vec::new();
        for c in chunks {
            f.push(c, &mut out)?;
        }
        f.finish()?;
        Ok(out)
    }

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
            id: None,
        }
    }

    #[test]
    fn the_protocol() {
        let body = b"\xEF\xBB\xBF: comment\n\ndata: a\ndata:b\n\nevent: x\r\ndata: {\"k\": 1}\r\n\r\nevent: y\n\ndata\n\n";
        let want = vec![ev("", "a\nb"), ev("x", "{\"k\": 1}"), ev("", "")];
        assert_eq!(frame(&[body]).unwrap(), want);
        // Any split gives the same events (\r\n split across chunks too).
        for i in 0..body.len() {
            assert_eq!(frame(&[&body[..i], &body[i..]]).unwrap(), want, "{i}");
        }
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(frame(&bytes).unwrap(), want);
        // A lone \r ends a line; an unterminated last event is dropped.
        assert_eq!(
            frame(&[b"data: 1\r\rdata: 2\n"]).unwrap(),
            vec![ev("", "1")]
        );
        let with_id = frame(&[b"id: 7\ndata: z\n\n"]).unwrap();
        assert_eq!(with_id[0].id.as_deref(), Some("7"));
    }

    #[test]
    fn caps_are_typed_errors() {
        let mut f = SseFramer::with_limits(8, 12);
        let mut out = Vec::new();
        assert_eq!(
            f.push(b"data: 123", &mut out),
            Err(SseError::LineTooLong { limit: 8 })
        );
        assert_eq!(
            f.push(b"\n\n", &mut out),
            Err(SseError::LineTooLong { limit: 8 }),
            "an error is final"
        );
        let mut f = SseFramer::with_limits(16, 12);
        let r = f.push(b"data:12345\ndata:1234567\n", &mut out);
        assert_eq!(r, Err(SseError::EventTooLarge { limit: 12 }));
        let mut f = SseFramer::new();
        assert_eq!(f.push(b"data: \xff\n", &mut out), Err(SseError::NotUtf8));
    }

    /// The quadratic case of `eventsource-stream`: a long unterminated line
    /// fed in small chunks. Linear framing handles 8 MiB in 64-byte chunks
    /// (131,072 pushes) by looking at each byte once; the line cap then
    /// ends it with a typed error instead of an ever-growing buffer.
    #[test]
    fn a_long_unterminated_line_is_capped() {
        let mut f = SseFramer::new();
        let mut out = Vec::new();
        let chunk = [b'a'; 64];
        let mut pushed = 0usize;
        let err = loop {
            if let Err(e) = f.push(&chunk, &mut out) {
                break e;
            }
            pushed += chunk.len();
            assert!(pushed <= limits::MAX_SSE_LINE_BYTES);
        };
        assert_eq!(
            err,
            SseError::LineTooLong {
                limit: limits::MAX_SSE_LINE_BYTES
            }
        );
        assert_eq!(pushed, limits::MAX_SSE_LINE_BYTES);
    }
}
