//! The serialized body of one call, and the token estimate read off it as
//! it is written.

use std::cell::Cell;
use std::io;

use serde::{Serialize, Serializer};
use serde_json::Value;

/// The serialized JSON body of one call, built once: the bytes sent (a
/// retry resends them without copying) and what the API-call log keeps as
/// its `payload`, parsed back only when the log is read.
#[derive(Clone, PartialEq, Eq)]
pub struct RequestBody {
    bytes: bytes::Bytes,
    counted: u64,
    /// Written by serde_json here, so one JSON value by construction; a
    /// log dumps such a body as it is, and checks any other first.
    serialized: bool,
}

/// The most a caller's guess of a body's length reserves up front (a
/// wrong guess cannot reserve much memory the body does not fill; past
/// it, the buffer grows as it is written).
const MAX_CAPACITY_GUESS: usize = 16 << 20;

impl RequestBody {
    /// The body of `value` (compact JSON, as `serde_json::to_vec` writes it).
    pub fn of(value: &Value) -> serde_json::Result<Self> {
        Self::serialize_counting(value, &TokenCount::new())
    }

    /// The body of `value` (compact JSON, as `serde_json::to_vec` writes
    /// it), with the token estimate of the parts `count` marked while it
    /// was written (see [`TokenCount`]).
    pub fn serialize_counting<T: Serialize + ?Sized>(
        value: &T,
        count: &TokenCount,
    ) -> serde_json::Result<Self> {
        Self::serialize_counting_sized(value, count, 512)
    }

    /// [`RequestBody::serialize_counting`] into a buffer of `capacity`
    /// bytes to start with: a caller that knows about how long the body
    /// is spares the buffer its doublings, each a copy of all written so
    /// far (a long conversation's body is hundreds of kilobytes). The body
    /// keeps its length, not the room, whatever the guess.
    pub fn serialize_counting_sized<T: Serialize + ?Sized>(
        value: &T,
        count: &TokenCount,
        capacity: usize,
    ) -> serde_json::Result<Self> {
        let mut out = CountingWriter {
            out: Vec::with_capacity(capacity.min(MAX_CAPACITY_GUESS)),
            count,
            since: None,
        };
        value.serialize(&mut serde_json::Serializer::new(&mut out))?;
        Ok(Self::finish(out))
    }

    /// The body `write` writes (see [`BodyWriter`]), with the token
    /// estimate of the parts it counted, into a buffer of about
    /// `capacity` bytes to start with (as
    /// [`RequestBody::serialize_counting_sized`]).
    pub fn write_counting_sized(
        count: &TokenCount,
        capacity: usize,
        write: impl FnOnce(&mut BodyWriter<'_>) -> serde_json::Result<()>,
    ) -> serde_json::Result<Self> {
        let mut w = BodyWriter {
            out: CountingWriter {
                out: Vec::with_capacity(capacity.min(MAX_CAPACITY_GUESS)),
                count,
                since: None,
            },
            structure: Structure::default(),
        };
        write(&mut w)?;
        w.structure
            .finish()
            .map_err(<serde_json::Error as serde::ser::Error>::custom)?;
        debug_assert!(
            serde_json::from_slice::<serde::de::IgnoredAny>(&w.out.out).is_ok(),
            "a body written in parts is one JSON value"
        );
        Ok(Self::finish(w.out))
    }

    fn finish(mut out: CountingWriter<'_>) -> Self {
        out.settle();
        let chars = out.count.chars.get();
        // The API-call log keeps the body for the conversation's life: it
        // holds its length, not the room it was written in (a short body
        // would keep all 512 bytes). A vector of exact length also becomes
        // `Bytes` without the shared header a spare capacity needs.
        let mut bytes = out.out;
        bytes.shrink_to_fit();
        Self {
            bytes: bytes.into(),
            counted: u64::try_from(chars.div_ceil(4)).unwrap_or(u64::MAX),
            serialized: true,
        }
    }

    /// A body already serialized elsewhere, with the model's token
    /// estimate of its counted parts. The bytes must be one JSON value;
    /// the log checks before it dumps them as such.
    pub fn from_json_bytes(bytes: Vec<u8>, counted: u64) -> Self {
        debug_assert!(serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).is_ok());
        Self {
            bytes: bytes.into(),
            counted,
            serialized: false,
        }
    }

    /// The bytes (shared, not copied).
    pub fn bytes(&self) -> &bytes::Bytes {
        &self.bytes
    }

    /// The model's token estimate of the body (0 when it made none).
    pub fn counted(&self) -> u64 {
        self.counted
    }

    /// Whether serde_json wrote the bytes here (so they are one JSON
    /// value without checking).
    pub(crate) fn is_serialized(&self) -> bool {
        self.serialized
    }

    /// The body parsed back into a `Value` (for a reader of the log).
    pub fn to_value(&self) -> Value {
        crate::parsed_json::json_text_value(&self.bytes)
    }
}

impl std::fmt::Debug for RequestBody {
    // A body carries the conversation: its length only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestBody")
            .field("bytes", &self.bytes.len())
            .field("counted", &self.counted)
            .finish()
    }
}

/// The rough input-token estimate of a body, taken while
/// [`RequestBody::serialize_counting`] writes it: the characters of the
/// counted parts, four a token. A part wrapped by [`TokenCount::json`]
/// counts by its JSON text, one passed to [`TokenCount::text`] by its own
/// text (a string part, without quotes or escapes).
#[derive(Debug, Default)]
pub struct TokenCount {
    on: Cell<bool>,
    chars: Cell<usize>,
}

impl TokenCount {
    /// Nothing counted yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// `value`, whose JSON text is counted as it is written.
    pub fn json<'a, T: Serialize + ?Sized>(&'a self, value: &'a T) -> impl Serialize + 'a {
        Counted { value, count: self }
    }

    /// Counts `text`'s characters.
    pub fn text(&self, text: &str) {
        self.add(text.chars().count());
    }

    fn add(&self, chars: usize) {
        self.chars.set(self.chars.get().saturating_add(chars));
    }
}

/// A body written in parts ([`RequestBody::write_counting_sized`]): values
/// through serde_json, the punctuation between them, and kept JSON copied
/// as it is, with the characters it was counted at, so that a long
/// history is neither written nor counted again. The parts are checked to
/// make one JSON value as they come (a few comparisons a part, not a parse
/// of the text): a body that would not is an error, never sent or logged.
pub struct BodyWriter<'a> {
    out: CountingWriter<'a>,
    structure: Structure,
}

/// Where a body written in parts stands: the objects and arrays open
/// (one bit each, set for an array), and what may come next.
#[derive(Debug, Default)]
struct Structure {
    open: u64,
    depth: u32,
    next: Next,
    broken: Option<&'static str>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// A value (the body itself, or after `:` or an array's `,`).
    #[default]
    Value,
    /// An object's key, or its end right after `{`.
    KeyOrEnd,
    /// An object's key (after its `,`).
    Key,
    /// The `:` after a key.
    Colon,
    /// A value, or the array's end right after `[`.
    ValueOrEnd,
    /// A `,` or the end of what is open; nothing at all at the top.
    After,
}

/// How deep a body's own punctuation may nest (values written whole nest
/// as deep as serde_json lets them).
const MAX_PARTS_DEPTH: u32 = 64;

impl Structure {
    fn in_array(&self) -> bool {
        self.depth > 0 && self.open & (1 << (self.depth - 1)) != 0
    }

    fn fail(&mut self, why: &'static str) {
        self.broken.get_or_insert(why);
    }

    /// A whole value was written; `string` when it began with a `"` (a
    /// string may stand as an object's key).
    fn value(&mut self, string: bool) {
        self.next = match self.next {
            Next::Value | Next::ValueOrEnd => Next::After,
            Next::Key | Next::KeyOrEnd if string => Next::Colon,
            _ => {
                self.fail("a value where none may stand");
                return;
            }
        };
    }

    /// Kept JSON of one or more array elements.
    fn elements(&mut self) {
        if self.in_array() && matches!(self.next, Next::Value | Next::ValueOrEnd) {
            self.next = Next::After;
        } else {
            self.fail("array elements outside an array");
        }
    }

    fn punct(&mut self, p: Punct) {
        match (p, self.next) {
            (Punct::BeginObject | Punct::BeginArray, Next::Value | Next::ValueOrEnd) => {
                if self.depth >= MAX_PARTS_DEPTH {
                    return self.fail("punctuation nested too deep");
                }
                if p == Punct::BeginArray {
                    self.open |= 1 << self.depth;
                } else {
                    self.open &= !(1 << self.depth);
                }
                self.depth += 1;
                self.next = if p == Punct::BeginArray {
                    Next::ValueOrEnd
                } else {
                    Next::KeyOrEnd
                };
            }
            (Punct::EndArray, Next::After | Next::ValueOrEnd) if self.in_array() => self.close(),
            (Punct::EndObject, Next::After | Next::KeyOrEnd)
                if self.depth > 0 && !self.in_array() =>
            {
                self.close()
            }
            (Punct::Comma, Next::After) if self.depth > 0 => {
                self.next = if self.in_array() {
                    Next::Value
                } else {
                    Next::Key
                };
            }
            (Punct::Colon, Next::Colon) => self.next = Next::Value,
            _ => self.fail("punctuation out of place"),
        }
    }

    fn close(&mut self) {
        self.depth -= 1;
        self.next = Next::After;
    }

    fn finish(&self) -> Result<(), &'static str> {
        match self.broken {
            Some(why) => Err(why),
            None if self.depth == 0 && self.next == Next::After => Ok(()),
            None => Err("the body ends before its value does"),
        }
    }
}

/// The punctuation of a JSON text written in parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Punct {
    /// `{`
    BeginObject,
    /// `}`
    EndObject,
    /// `[`
    BeginArray,
    /// `]`
    EndArray,
    /// `,`
    Comma,
    /// `:`
    Colon,
}

impl BodyWriter<'_> {
    /// `value`'s JSON (compact, as `serde_json::to_vec` writes it): a
    /// value, or an object's key (a string).
    #[inline]
    pub fn value<T: Serialize + ?Sized>(&mut self, value: &T) -> serde_json::Result<()> {
        let start = self.out.out.len();
        value.serialize(&mut serde_json::Serializer::new(&mut self.out))?;
        let string = self.out.out.get(start) == Some(&b'"');
        self.structure.value(string);
        Ok(())
    }

    /// One punctuation mark.
    #[inline]
    pub fn punct(&mut self, p: Punct) {
        self.structure.punct(p);
        let mark: &[u8] = match p {
            Punct::BeginObject => b"{",
            Punct::EndObject => b"}",
            Punct::BeginArray => b"[",
            Punct::EndArray => b"]",
            Punct::Comma => b",",
            Punct::Colon => b":",
        };
        self.out.write_bytes(mark);
    }

    /// What `write` writes, counted by the estimate (as a part wrapped by
    /// [`TokenCount::json`] is).
    pub fn counted(
        &mut self,
        write: impl FnOnce(&mut Self) -> serde_json::Result<()>,
    ) -> serde_json::Result<()> {
        let was = self.out.count.on.replace(true);
        let r = write(self);
        self.out.count.on.set(was);
        r
    }

    /// Kept JSON of settled messages ([`super::SettledJson::json`]),
    /// copied; counted at its kept characters when the count is on.
    pub fn settled(&mut self, run: super::SettledRun<'_>) {
        let (json, chars) = (run.json, run.chars);
        if json.is_empty() {
            return;
        }
        self.structure.elements();
        self.out.settle();
        if self.out.since.is_some() {
            // End the counted part here, copy, and start a new one after.
            self.out.switch();
            self.out.out.extend_from_slice(json);
            self.out.count.add(chars);
            self.out.switch();
        } else {
            self.out.out.extend_from_slice(json);
        }
    }

    /// The estimate the body is counted into.
    pub fn count(&self) -> &TokenCount {
        self.out.count
    }
}

struct Counted<'a, T: ?Sized> {
    value: &'a T,
    count: &'a TokenCount,
}

impl<T: Serialize + ?Sized> Serialize for Counted<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // serde_json writes through to the writer as it goes (the `:`
        // before a map value is written before this runs), so exactly the
        // value's text is counted.
        let was = self.count.on.replace(true);
        let r = self.value.serialize(s);
        self.count.on.set(was);
        r
    }
}

/// Collects the bytes, counting the characters of what is written while a
/// counted part is: a part's bytes are counted at once when it ends, not
/// write by write (serde_json writes a few bytes at a time).
struct CountingWriter<'a> {
    out: Vec<u8>,
    count: &'a TokenCount,
    /// Where the counted part being written started.
    since: Option<usize>,
}

impl CountingWriter<'_> {
    /// Follows the count's switch: a part starts at the first byte
    /// written after it went on, and ends (is counted) at the first write
    /// after it went off, or at the end.
    #[inline]
    fn settle(&mut self) {
        if self.count.on.get() != self.since.is_some() {
            self.switch();
        }
    }

    #[cold]
    fn switch(&mut self) {
        match self.since.take() {
            None => self.since = Some(self.out.len()),
            Some(start) => self
                .count
                .add(utf8_chars(self.out.get(start..).unwrap_or_default())),
        }
    }
}

impl CountingWriter<'_> {
    #[inline]
    fn write_bytes(&mut self, buf: &[u8]) {
        self.settle();
        self.out.extend_from_slice(buf);
    }
}

// Inlined into serde_json's writes of every few bytes, across crates.
impl io::Write for CountingWriter<'_> {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_bytes(buf);
        Ok(buf.len())
    }

    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.write_bytes(buf);
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The characters of UTF-8 text: every byte but a continuation byte
/// (`10xxxxxx`) starts one. Eight bytes a step: a body's messages are
/// counted on every call, and byte by byte this was a tenth of a long
/// conversation's turn. A character split across two writes is counted
/// once, by its first byte.
pub(super) fn utf8_chars(bytes: &[u8]) -> usize {
    const LOW: u64 = 0x0101_0101_0101_0101;
    let mut words = bytes.chunks_exact(8);
    let mut continuation = 0usize;
    for w in &mut words {
        let mut word = [0u8; 8];
        word.copy_from_slice(w);
        let v = u64::from_le_bytes(word);
        // Bit 7 set and bit 6 clear, moved to each byte's lowest bit.
        let marks = (v >> 7) & !(v >> 6) & LOW;
        continuation += usize::try_from(marks.count_ones()).unwrap_or(0);
    }
    continuation += words
        .remainder()
        .iter()
        .filter(|&&b| b & 0xC0 == 0x80)
        .count();
    bytes.len().saturating_sub(continuation)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The word-at-a-time count is the byte-by-byte one, at every length
    /// and alignment of one- to four-byte characters.
    #[test]
    fn utf8_chars_counts_what_a_byte_walk_counts() {
        let text = "aé€😀\"\n\u{7f}\u{80}ÿ\u{10ffff}z".repeat(5);
        let bytes = text.as_bytes();
        for from in 0..12 {
            for to in from..bytes.len() {
                let part = &bytes[from..to];
                let walked = part.iter().filter(|&&b| b & 0xC0 != 0x80).count();
                assert_eq!(utf8_chars(part), walked, "{from}..{to}");
            }
        }
        assert_eq!(utf8_chars(text.as_bytes()), text.chars().count());
    }

    /// Exactly the marked parts are counted: a part's JSON text (not the
    /// key or the `:` before it), a text part by its own characters.
    #[test]
    fn the_count_covers_the_marked_parts_only() {
        struct Body<'a>(&'a TokenCount, Value, Value);
        impl Serialize for Body<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeMap;
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("model", "gpt-é")?;
                m.serialize_entry("messages", &self.0.json(&self.1))?;
                self.0.text("ünï");
                m.serialize_entry("system", "ünï")?;
                m.serialize_entry("tools", &self.0.json(&self.2))?;
                m.end()
            }
        }
        let count = TokenCount::new();
        let messages = json!([{"role": "user", "content": "héllo \"q\" ✓\n"}]);
        let tools = json!([{"name": "t"}]);
        let body =
            RequestBody::serialize_counting(&Body(&count, messages.clone(), tools.clone()), &count)
                .unwrap();
        let expected = json!({"model": "gpt-é", "messages": messages, "system": "ünï",
            "tools": tools});
        assert_eq!(
            body.bytes().as_ref(),
            serde_json::to_vec(&expected).unwrap()
        );
        let chars = messages.to_string().chars().count() + 3 + tools.to_string().chars().count();
        assert_eq!(body.counted(), u64::try_from(chars.div_ceil(4)).unwrap());
        assert!(body.is_serialized());
        assert!(!RequestBody::from_json_bytes(b"{}".to_vec(), 0).is_serialized());
    }

    /// A body written in parts is the same text serde_json writes for the
    /// same value, and kept JSON counts at the characters given with it,
    /// the parts around it as written; outside a counted part nothing
    /// counts.
    #[test]
    fn a_body_written_in_parts_counts_kept_json_at_its_given_characters() {
        let kept = r#"{"a":"h\u00e9"},{"b":"é"}"#.as_bytes();
        for counted in [false, true] {
            let count = TokenCount::new();
            let body = RequestBody::write_counting_sized(&count, 0, |w| {
                w.punct(Punct::BeginObject);
                w.value("k")?;
                w.punct(Punct::Colon);
                let array = |w: &mut BodyWriter<'_>| {
                    w.punct(Punct::BeginArray);
                    w.value(&json!("é"))?;
                    w.punct(Punct::Comma);
                    w.settled(super::super::SettledRun {
                        json: kept,
                        chars: 1000,
                    });
                    w.punct(Punct::Comma);
                    w.value(&json!({"x": "yz"}))?;
                    w.punct(Punct::EndArray);
                    Ok(())
                };
                if counted {
                    w.counted(array)?
                } else {
                    array(w)?
                }
                w.punct(Punct::Comma);
                w.value("n")?;
                w.punct(Punct::Colon);
                w.value(&1)?;
                w.punct(Punct::EndObject);
                Ok(())
            })
            .unwrap();
            let expected = json!({"k": ["é", {"a": "hé"}, {"b": "é"}, {"x": "yz"}], "n": 1});
            assert_eq!(body.to_value(), expected);
            let text = std::str::from_utf8(body.bytes()).unwrap();
            assert!(text.starts_with(r#"{"k":["é",{"a":"h\u00e9"},"#), "{text}");
            // `["é",` 5, the kept JSON 1000, `,{"x":"yz"}]` 12.
            let chars = if counted { 5 + 1000 + 12 } else { 0 };
            assert_eq!(count.chars.get(), chars, "counted {counted}");
        }
    }

    /// Parts that would not make one JSON value are an error, whatever the
    /// order of the calls; the empty object and array are values.
    #[test]
    fn parts_that_do_not_make_one_json_value_are_refused() {
        type Parts = fn(&mut BodyWriter<'_>) -> serde_json::Result<()>;
        let write = |parts: Parts| {
            RequestBody::write_counting_sized(&TokenCount::new(), 0, parts)
                .map(|b| String::from_utf8(b.bytes().to_vec()).unwrap())
                .map_err(|e| e.to_string())
        };
        let good: Parts = |w| {
            w.punct(Punct::BeginObject);
            w.value("a")?;
            w.punct(Punct::Colon);
            w.punct(Punct::BeginArray);
            w.punct(Punct::EndArray);
            w.punct(Punct::Comma);
            w.value("b")?;
            w.punct(Punct::Colon);
            w.punct(Punct::BeginArray);
            w.punct(Punct::BeginObject);
            w.punct(Punct::EndObject);
            w.punct(Punct::Comma);
            w.settled(crate::model::SettledRun {
                json: b"1,2",
                chars: 3,
            });
            w.punct(Punct::EndArray);
            w.punct(Punct::EndObject);
            Ok(())
        };
        assert_eq!(write(good).unwrap(), r#"{"a":[],"b":[{},1,2]}"#);
        let bad: [(Parts, &str); 8] = [
            (
                |w| {
                    w.value(&1)?;
                    w.value(&2)
                },
                "a value where none may stand",
            ),
            (
                |w| {
                    w.punct(Punct::BeginObject);
                    w.value(&1)
                },
                "a value where none may stand",
            ),
            (
                |w| {
                    w.punct(Punct::BeginObject);
                    w.punct(Punct::EndArray);
                    Ok(())
                },
                "punctuation out of place",
            ),
            (
                |w| {
                    w.punct(Punct::BeginArray);
                    w.value(&1)?;
                    w.punct(Punct::Comma);
                    w.punct(Punct::EndArray);
                    Ok(())
                },
                "punctuation out of place",
            ),
            (
                |w| {
                    w.punct(Punct::BeginArray);
                    w.value(&1)
                },
                "ends before its value does",
            ),
            (
                |w| {
                    w.settled(crate::model::SettledRun {
                        json: b"1",
                        chars: 1,
                    });
                    Ok(())
                },
                "array elements outside an array",
            ),
            (
                |w| {
                    w.punct(Punct::BeginObject);
                    w.value("k")?;
                    w.value(&1)
                },
                "a value where none may stand",
            ),
            (|_| Ok(()), "ends before its value does"),
        ];
        for (i, (parts, why)) in bad.into_iter().enumerate() {
            let e = write(parts).unwrap_err();
            assert!(e.contains(why), "{i}: {e}");
        }
        // Deeper than the parts may nest.
        let deep: Parts = |w| {
            for _ in 0..=MAX_PARTS_DEPTH {
                w.punct(Punct::BeginArray);
            }
            Ok(())
        };
        assert!(write(deep).unwrap_err().contains("nested too deep"));
    }
}
