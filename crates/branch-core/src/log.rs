//! `Log`, `DataLoggerConfig` and `DataLogger`: the branch's record of API
//! calls, tool calls and custom events.

// Parsing of stored data: nothing read from outside may panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde::de::{self, Deserializer};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::element::{self, Element, Finite, MetadataOut, de_metadata, lion_class};
use crate::error::{BranchError, Result};
use crate::metadata::Metadata;
use crate::model::{ChatResponse, ModelError, RequestBody, execution_error, execution_record};
use crate::parsed_json::{ParsedJson, has_line_break, json_text_value};
use crate::pile::{Pile, Stored};
use crate::progression::de_opt_created_at;

/// An immutable log entry holding a JSON snapshot.
///
/// Its largest values may be kept as the JSON text they were sent or
/// received as ([`Log::with_kept`]: an API call's request body and reply):
/// they are parsed only when the content is read ([`Log::content`],
/// `to_dict`) and copied verbatim into a dump, so a turn does not build,
/// keep and free a second tree of the conversation.
#[derive(Debug, Clone)]
pub struct Log {
    element: Element,
    /// The content, or its head with `null` where a kept value goes
    /// (materialized from the head and `kept` on first read).
    head: Head,
    kept: Vec<KeptJson>,
    // Boxed: most logs are never read whole, and every log carries the slot.
    full: OnceLock<Box<Map<String, Value>>>,
}

/// A log's content, or the head it is materialized from.
#[derive(Debug, Clone)]
enum Head {
    Map(Map<String, Value>),
    /// An API call's fields, kept typed: a turn builds no maps for them.
    ApiCall(ApiCallHead),
}

/// The fixed fields of an API call's log ([`Log::api_call`]), which reads
/// as the reference's `APICalling` snapshot:
/// `{"id", "created_at", "metadata": {["served_model",] "lion_class"},
/// "execution": {"status", "duration", "response", "error", "retryable"},
/// "payload"}`, with `null` for the response and the payload (the kept
/// values go there) and for `retryable`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiCallHead {
    /// The snapshot's own id (not the log's).
    pub id: Uuid,
    /// When the call started (Unix seconds).
    pub created_at: f64,
    /// The model the provider reports having served.
    pub served_model: Option<String>,
    /// The call's duration in seconds.
    pub duration: f64,
    /// `None` for a completed call; the `execution.error` object of a
    /// failed one.
    pub error: Option<Value>,
}

impl ApiCallHead {
    /// The head of a call that started at `created_at` and took
    /// `duration` seconds, with a new id.
    pub fn of(result: Result<&ChatResponse, &ModelError>, created_at: f64, duration: f64) -> Self {
        Self {
            id: Uuid::new_v4(),
            created_at,
            served_model: result.ok().and_then(|r| r.served_model.clone()),
            duration,
            error: result.err().map(execution_error),
        }
    }

    /// The head as the map it reads as, `null` at the places of the
    /// payload and the response.
    fn to_map(&self) -> Map<String, Value> {
        self.record(Value::Null, Value::Null)
    }

    /// The whole record: the head with the request `payload` and the
    /// `response` (`null` for a failed call) in their places.
    pub fn record(&self, payload: Value, response: Value) -> Map<String, Value> {
        let mut metadata = Map::with_capacity(2);
        if let Some(s) = &self.served_model {
            metadata.insert("served_model".into(), s.clone().into());
        }
        metadata.insert("lion_class".into(), lion_class::API_CALLING.into());
        let execution = execution_record(self.duration, self.error.clone(), response);
        let mut m = Map::with_capacity(5);
        m.insert("id".into(), self.id.to_string().into());
        m.insert("created_at".into(), self.created_at.into());
        m.insert("metadata".into(), Value::Object(metadata));
        m.insert("execution".into(), Value::Object(execution));
        m.insert("payload".into(), payload);
        m
    }
}

/// A value of a log's content kept as JSON text, at a path of keys.
#[derive(Debug, Clone)]
pub struct KeptJson {
    path: &'static [&'static str],
    text: bytes::Bytes,
    /// What is known of `text`, which decides what a dump checks.
    form: TextForm,
}

/// What is known of a kept JSON text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TextForm {
    /// serde_json wrote it: one compact JSON value, dumped as it is.
    Written,
    /// serde_json parsed it: one JSON value in UTF-8, dumped as it is
    /// unless it spans lines.
    Parsed,
    /// Nothing: checked whole before a dump copies it.
    Unchecked,
}

impl KeptJson {
    /// The serialized request body, at `path`.
    pub fn body(path: &'static [&'static str], body: &RequestBody) -> Self {
        Self {
            path,
            text: body.bytes().clone(),
            form: if body.is_serialized() {
                TextForm::Written
            } else {
                TextForm::Unchecked
            },
        }
    }

    /// JSON text as received, which `serde_json` parsed (a reply's
    /// bytes), at `path`, shared; `None` when it is longer than
    /// [`ParsedJson::MAX_KEPT_BYTES`] (a server's padding is not kept). A
    /// dump copies it as it is when it is one line, else writes it
    /// compactly.
    pub fn parsed(path: &'static [&'static str], text: &ParsedJson) -> Option<Self> {
        text.is_keepable().then(|| Self {
            path,
            text: text.bytes().clone(),
            form: TextForm::Parsed,
        })
    }

    /// `value`, serialized, at `path` (one compact serialization instead
    /// of a deep copy).
    pub fn value(path: &'static [&'static str], value: &Value) -> serde_json::Result<Self> {
        Ok(Self {
            path,
            text: serde_json::to_vec(value)?.into(),
            form: TextForm::Written,
        })
    }
}

impl PartialEq for Log {
    fn eq(&self, other: &Self) -> bool {
        self.element == other.element && self.content() == other.content()
    }
}

impl Stored for Log {
    fn id(&self) -> Uuid {
        self.element.id
    }
}

impl Log {
    /// A log of this content. An empty content becomes
    /// `{"error": "No content to log."}`, as in the reference.
    pub fn new(content: Map<String, Value>) -> Self {
        let content = if content.is_empty() {
            let mut m = Map::new();
            m.insert("error".into(), "No content to log.".into());
            m
        } else {
            content
        };
        Self {
            element: Element::new(),
            head: Head::Map(content),
            kept: Vec::new(),
            full: OnceLock::new(),
        }
    }

    /// The log of an API call: `head`'s fields, with the `kept` request
    /// body at `["payload"]` and reply at `["execution", "response"]`.
    /// Its content reads as the map [`ApiCallHead`] describes, built only
    /// when it is read.
    pub fn api_call(head: ApiCallHead, kept: Vec<KeptJson>) -> Self {
        Self {
            element: Element::new(),
            head: Head::ApiCall(head),
            kept,
            full: OnceLock::new(),
        }
    }

    /// A log of `head` with the `kept` values put in at their paths (each
    /// path must name a key of `head`, or of an object in it, holding the
    /// place; a value whose path is missing is added at its end).
    pub fn with_kept(head: Map<String, Value>, kept: Vec<KeptJson>) -> Self {
        let mut log = Self::new(head);
        log.kept = kept;
        log
    }

    /// A log of any JSON value; a non-object is stored under `"value"`.
    pub fn from_json(v: Value) -> Self {
        match v {
            Value::Object(m) => Self::new(m),
            Value::Null => Self::new(Map::new()),
            other => {
                let mut m = Map::new();
                m.insert("value".into(), other);
                Self::new(m)
            }
        }
    }

    /// The id.
    pub fn id(&self) -> Uuid {
        self.element.id
    }

    /// The creation time.
    pub fn created_at(&self) -> f64 {
        self.element.created_at
    }

    /// The snapshot.
    pub fn content(&self) -> &Map<String, Value> {
        match &self.head {
            Head::Map(m) if self.kept.is_empty() => m,
            _ => self.full.get_or_init(|| Box::new(self.materialize())),
        }
    }

    /// The head as a map: the plain content's, or a typed head's built.
    fn head_map(&self) -> std::borrow::Cow<'_, Map<String, Value>> {
        match &self.head {
            Head::Map(m) => std::borrow::Cow::Borrowed(m),
            Head::ApiCall(h) => std::borrow::Cow::Owned(h.to_map()),
        }
    }

    /// The element fields.
    pub fn element(&self) -> &Element {
        &self.element
    }

    /// Writes the content as compact JSON (what serde_json writes for
    /// [`Log::content`]), copying kept values verbatim.
    fn write_content<W: std::io::Write>(&self, out: &mut W) -> serde_json::Result<()> {
        let head = self.head_map();
        if self.kept.iter().any(|k| !has_place(&head, k.path)) {
            // Not a shape this writer splices: the plain way.
            return serde_json::to_writer(out, self.content());
        }
        write_map(out, &head, &self.kept, 0)
    }

    /// The content with the kept values parsed in.
    fn materialize(&self) -> Map<String, Value> {
        let mut m = self.head_map().into_owned();
        for k in &self.kept {
            put_at(&mut m, k.path, json_text_value(&k.text));
        }
        m
    }

    /// This log as one line of a dump: what `serde_json::to_writer` writes
    /// for it.
    fn write_json<W: std::io::Write>(&self, out: &mut W) -> serde_json::Result<()> {
        let head = self.head_map();
        if self.kept.iter().any(|k| !has_place(&head, k.path)) {
            // Not a shape this writer splices: the plain way.
            return serde_json::to_writer(out, self);
        }
        put(out, b"{\"id\":")?;
        serde_json::to_writer(&mut *out, &self.element.id)?;
        put(out, b",\"created_at\":")?;
        serde_json::to_writer(&mut *out, &Finite(self.element.created_at))?;
        put(out, b",\"metadata\":")?;
        serde_json::to_writer(
            &mut *out,
            &MetadataOut {
                metadata: &self.element.metadata,
                lion_class: lion_class::LOG,
            },
        )?;
        put(out, b",\"content\":")?;
        write_map(out, &head, &self.kept, 0)?;
        put(out, b"}")
    }
}

/// Writes `bytes` to `out`, a failure as serde_json reports a writer's.
fn put<W: std::io::Write>(out: &mut W, bytes: &[u8]) -> serde_json::Result<()> {
    out.write_all(bytes).map_err(serde_json::Error::io)
}

/// Whether a custom model's body can be copied into a dump as it is: one
/// JSON value, in UTF-8, on one line. Otherwise it is written as `content()`
/// reads it (the value, compact; a string if it is not JSON), so that a
/// dump line stays one JSON object and the dump stays UTF-8.
fn is_one_line_of_json(text: &[u8]) -> bool {
    !has_line_break(text)
        && std::str::from_utf8(text).is_ok()
        && serde_json::from_slice::<de::IgnoredAny>(text).is_ok()
}

/// Puts `v` at `path` in `m` (the last key replaced or added; missing or
/// non-object intermediate keys become objects).
fn put_at(m: &mut Map<String, Value>, path: &[&str], v: Value) {
    match path {
        [] => {}
        [last] => {
            m.insert((*last).to_owned(), v);
        }
        [first, rest @ ..] => {
            let slot = m
                .entry((*first).to_owned())
                .or_insert_with(|| Value::Object(Map::new()));
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
            if let Value::Object(inner) = slot {
                put_at(inner, rest, v);
            }
        }
    }
}

/// Whether `path` names a key that exists in `m` through objects.
fn has_place(m: &Map<String, Value>, path: &[&str]) -> bool {
    match path {
        [] => false,
        [last] => m.contains_key(*last),
        [first, rest @ ..] => match m.get(*first) {
            Some(Value::Object(inner)) => has_place(inner, rest),
            _ => false,
        },
    }
}

/// Writes `m` compactly, the kept values (every one has its place in `m`)
/// spliced in at `depth` of their paths.
fn write_map<W: std::io::Write>(
    out: &mut W,
    m: &Map<String, Value>,
    kept: &[KeptJson],
    depth: usize,
) -> serde_json::Result<()> {
    put(out, b"{")?;
    for (i, (k, v)) in m.iter().enumerate() {
        if i > 0 {
            put(out, b",")?;
        }
        serde_json::to_writer(&mut *out, k)?;
        put(out, b":")?;
        let here = |p: &&KeptJson| p.path.get(depth) == Some(&k.as_str());
        if let Some(leaf) = kept.iter().filter(here).find(|p| p.path.len() == depth + 1) {
            // Text serde_json wrote is copied as it is: checking it would
            // cost a parse of the whole conversation on every turn.
            let as_is = match leaf.form {
                TextForm::Written => true,
                TextForm::Parsed => !has_line_break(&leaf.text),
                TextForm::Unchecked => is_one_line_of_json(&leaf.text),
            };
            if as_is {
                put(out, &leaf.text)?;
            } else {
                serde_json::to_writer(&mut *out, &json_text_value(&leaf.text))?;
            }
            continue;
        }
        match v {
            Value::Object(inner) if kept.iter().any(|p| here(&p)) => {
                let below: Vec<KeptJson> = kept.iter().filter(here).cloned().collect();
                write_map(out, inner, &below, depth + 1)?;
            }
            _ => serde_json::to_writer(&mut *out, v)?,
        }
    }
    put(out, b"}")
}

impl Serialize for Log {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(4))?;
        m.serialize_entry("id", &self.element.id)?;
        m.serialize_entry("created_at", &Finite(self.element.created_at))?;
        m.serialize_entry(
            "metadata",
            &MetadataOut {
                metadata: &self.element.metadata,
                lion_class: lion_class::LOG,
            },
        )?;
        // An export parses kept values without keeping the parsed copy.
        let parsed;
        let content = match (self.full.get(), &self.head) {
            (Some(full), _) => &**full,
            (None, Head::Map(m)) if self.kept.is_empty() => m,
            (None, _) => {
                parsed = self.materialize();
                &parsed
            }
        };
        m.serialize_entry("content", content)?;
        m.end()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LogWire {
    #[serde(default, deserialize_with = "element::de_opt_uuid")]
    id: Option<Uuid>,
    #[serde(default, deserialize_with = "de_opt_created_at")]
    created_at: Option<f64>,
    #[serde(default, deserialize_with = "de_metadata")]
    metadata: Metadata,
    #[serde(default)]
    content: Value,
}

impl<'de> Deserialize<'de> for Log {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Only from an object: serde's derive would also read a list, its
        // items taken as the fields in order.
        let w: LogWire = crate::object_only::object_only(d)?;
        let content = match w.content {
            Value::Object(m) => m,
            Value::Null => Map::new(),
            _ => return Err(de::Error::custom("a log's `content` must be an object")),
        };
        Ok(Log {
            element: Element {
                id: w.id.unwrap_or_else(Uuid::new_v4),
                created_at: w.created_at.unwrap_or_else(element::now),
                metadata: w.metadata,
            },
            head: Head::Map(content),
            kept: Vec::new(),
            full: OnceLock::new(),
        })
    }
}

/// The file format of dumped logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogExtension {
    /// Comma-separated values.
    Csv,
    /// One JSON object per line.
    Json,
    /// One JSON object per line.
    Jsonl,
}

impl LogExtension {
    /// The spelling with its dot.
    pub fn as_str(self) -> &'static str {
        match self {
            LogExtension::Csv => ".csv",
            LogExtension::Json => ".json",
            LogExtension::Jsonl => ".jsonl",
        }
    }

    /// `.csv`, `.json` or `.jsonl`, the dot optional (the reference adds it).
    pub(crate) fn parse(s: &str) -> Option<Self> {
        let s = s.strip_prefix('.').unwrap_or(s);
        Some(match s {
            "csv" => LogExtension::Csv,
            "json" => LogExtension::Json,
            "jsonl" => LogExtension::Jsonl,
            _ => return None,
        })
    }
}

/// Where and how a branch's logs are dumped.
#[derive(Debug, Clone, PartialEq)]
pub struct DataLoggerConfig {
    /// Directory of dump files.
    pub persist_dir: String,
    /// Optional subdirectory.
    pub subfolder: Option<String>,
    /// File name prefix.
    pub file_prefix: Option<String>,
    /// Dump (and maybe clear) when this many logs are held; `None` is unbounded.
    pub capacity: Option<u64>,
    /// File format.
    pub extension: LogExtension,
    /// Whether file names carry a timestamp.
    pub use_timestamp: bool,
    /// Hex digits of a random suffix in file names (0 disables it).
    pub hash_digits: Option<u8>,
    /// Dump remaining logs when the branch is closed.
    pub auto_save_on_exit: bool,
    /// Clear the logs after a dump.
    pub clear_after_dump: bool,
    /// Replace large base64 payloads in logs by a marker.
    pub redact_binary: bool,
    /// Decoded size from which a payload is redacted.
    pub redact_binary_threshold: u64,
}

impl Default for DataLoggerConfig {
    /// The class defaults (what a dict configuration is validated against).
    fn default() -> Self {
        Self {
            persist_dir: "./data/logs".into(),
            subfolder: None,
            file_prefix: None,
            capacity: None,
            extension: LogExtension::Json,
            use_timestamp: true,
            hash_digits: Some(5),
            auto_save_on_exit: true,
            clear_after_dump: true,
            redact_binary: true,
            redact_binary_threshold: 1024,
        }
    }
}

impl DataLoggerConfig {
    /// Validates a dict configuration against the class defaults (so
    /// `{"capacity": 3}` has no file prefix, as in the reference). Unknown
    /// keys and out-of-range values are errors naming the field.
    pub fn from_value(v: &Value) -> Result<Self> {
        let Value::Object(m) = v else {
            return Err(BranchError::InvalidLogConfig {
                field: "log_config".into(),
                reason: "must be an object".into(),
            });
        };
        let mut c = Self::default();
        let bad = |field: &str, reason: &str| BranchError::InvalidLogConfig {
            field: field.into(),
            reason: reason.into(),
        };
        let opt_str = |k: &str, v: &Value| match v {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(s.clone())),
            _ => Err(bad(k, "must be a string or null")),
        };
        let boolean = |k: &str, v: &Value| v.as_bool().ok_or_else(|| bad(k, "must be a boolean"));
        for (k, v) in m {
            match k.as_str() {
                "persist_dir" => {
                    c.persist_dir = opt_str(k, v)?.ok_or_else(|| bad(k, "must be a string"))?
                }
                "subfolder" => c.subfolder = opt_str(k, v)?,
                "file_prefix" => c.file_prefix = opt_str(k, v)?,
                "capacity" => {
                    c.capacity = match v {
                        Value::Null => None,
                        _ => Some(
                            v.as_u64()
                                .ok_or_else(|| bad(k, "must be a non-negative integer"))?,
                        ),
                    }
                }
                "extension" => {
                    c.extension = v
                        .as_str()
                        .and_then(LogExtension::parse)
                        .ok_or_else(|| bad(k, "must be .csv, .json or .jsonl"))?
                }
                "use_timestamp" => c.use_timestamp = boolean(k, v)?,
                "hash_digits" => {
                    c.hash_digits = match v {
                        Value::Null => None,
                        _ => Some(
                            v.as_u64()
                                .filter(|n| *n <= 10)
                                .ok_or_else(|| bad(k, "must be an integer from 0 to 10"))?
                                as u8,
                        ),
                    }
                }
                "auto_save_on_exit" => c.auto_save_on_exit = boolean(k, v)?,
                "clear_after_dump" => c.clear_after_dump = boolean(k, v)?,
                "redact_binary" => c.redact_binary = boolean(k, v)?,
                "redact_binary_threshold" => {
                    c.redact_binary_threshold = v
                        .as_u64()
                        .ok_or_else(|| bad(k, "must be a non-negative integer"))?
                }
                _ => return Err(bad(k, "is not a log configuration field")),
            }
        }
        Ok(c)
    }

    /// The dict form, keys in the reference's order.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("persist_dir".into(), self.persist_dir.clone().into());
        m.insert("subfolder".into(), self.subfolder.clone().into());
        m.insert("file_prefix".into(), self.file_prefix.clone().into());
        m.insert("capacity".into(), self.capacity.into());
        m.insert("extension".into(), self.extension.as_str().into());
        m.insert("use_timestamp".into(), self.use_timestamp.into());
        m.insert("hash_digits".into(), self.hash_digits.into());
        m.insert("auto_save_on_exit".into(), self.auto_save_on_exit.into());
        m.insert("clear_after_dump".into(), self.clear_after_dump.into());
        m.insert("redact_binary".into(), self.redact_binary.into());
        m.insert(
            "redact_binary_threshold".into(),
            self.redact_binary_threshold.into(),
        );
        Value::Object(m)
    }

    /// A new dump file path under this configuration.
    pub fn new_file_path(&self) -> PathBuf {
        let mut dir = PathBuf::from(&self.persist_dir);
        if let Some(sub) = &self.subfolder {
            dir.push(sub);
        }
        let mut name = self.file_prefix.clone().unwrap_or_default();
        if self.use_timestamp {
            let now = time::OffsetDateTime::now_utc();
            if !name.is_empty() {
                name.push('_');
            }
            name.push_str(&format!(
                "{:04}{:02}{:02}{:02}{:02}{:02}",
                now.year(),
                u8::from(now.month()),
                now.day(),
                now.hour(),
                now.minute(),
                now.second()
            ));
        }
        if let Some(n) = self.hash_digits.filter(|n| *n > 0) {
            let hex = Uuid::new_v4().simple().to_string();
            if !name.is_empty() {
                name.push('-');
            }
            name.push_str(&hex[..usize::from(n).min(hex.len())]);
        }
        if name.is_empty() {
            name.push_str("log");
        }
        name.push_str(self.extension.as_str());
        dir.join(name)
    }
}

fn is_csv(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "csv")
}

/// Writes the logs to `out`, one JSON object per line, or CSV with the
/// content as a JSON cell: a log at a time, so a dump never holds its whole
/// text. `io` names a failed write.
fn write_logs<W: std::io::Write>(
    logs: &Pile<Log>,
    csv: bool,
    out: &mut W,
    io: impl Fn(std::io::Error) -> BranchError,
) -> Result<()> {
    if csv {
        out.write_all(b"id,created_at,content\n").map_err(&io)?;
    }
    let (mut line, mut cell) = (Vec::new(), Vec::new());
    for log in logs.iter() {
        let err = |e: serde_json::Error| {
            if e.is_io() {
                io(e.into())
            } else {
                BranchError::Serialize {
                    path: format!("logs.{}", log.id()),
                    reason: e.to_string(),
                }
            }
        };
        if csv {
            cell.clear();
            log.write_content(&mut cell).map_err(err)?;
            line.clear();
            line.extend_from_slice(format!("{},{},\"", log.id(), log.created_at()).as_bytes());
            for &b in &cell {
                if b == b'"' {
                    line.push(b'"');
                }
                line.push(b);
            }
            line.extend_from_slice(b"\"\n");
            out.write_all(&line).map_err(&io)?;
        } else {
            // Straight to the writer: a long conversation's body is copied
            // once, not first into a line of its own.
            log.write_json(&mut *out).map_err(err)?;
            out.write_all(b"\n").map_err(&io)?;
        }
    }
    Ok(())
}

/// The dump of `logs` as text (serde_json writes UTF-8, and a kept value
/// is copied only when it is UTF-8).
#[cfg(test)]
fn render_logs(logs: &Pile<Log>, csv: bool) -> Result<String> {
    let mut out = Vec::new();
    write_logs(logs, csv, &mut out, |e| BranchError::Serialize {
        path: "logs".into(),
        reason: e.to_string(),
    })?;
    String::from_utf8(out).map_err(|e| BranchError::Serialize {
        path: "logs".into(),
        reason: e.to_string(),
    })
}

/// Writes the logs to the file at `path` (made, with its directory),
/// through a buffer; a file left half-written by a failure is removed.
/// Blocking file I/O.
fn write_logs_file(path: &Path, logs: &Pile<Log>) -> Result<()> {
    let io = |source| BranchError::LogIo {
        path: path.to_owned(),
        source,
    };
    let mut out = std::io::BufWriter::new(create_file(path)?);
    let written = write_logs(logs, is_csv(path), &mut out, io)
        .and_then(|()| std::io::Write::flush(&mut out).map_err(io));
    if written.is_err() {
        drop(out);
        let _ = std::fs::remove_file(path);
    }
    written
}

/// Writes `text` to the file at `path` (made, with its directory).
fn write_file(path: &Path, text: &[u8]) -> Result<()> {
    std::io::Write::write_all(&mut create_file(path)?, text).map_err(|source| BranchError::LogIo {
        path: path.to_owned(),
        source,
    })
}

/// Creates (or truncates) the file at `path`, making its directory.
fn create_file(path: &Path) -> Result<std::fs::File> {
    let io = |source| BranchError::LogIo {
        path: path.to_owned(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    std::fs::File::create(path).map_err(io)
}

/// A capacity dump handed to the blocking pool. Tokio drops a blocking
/// task that has not started when its runtime shuts down; the dump is
/// then written by its drop (on whichever thread drops the task: a pool
/// thread draining its queue, or the one shutting the runtime down), so
/// the logs it took from the branch are not lost with it.
struct QueuedDump {
    path: PathBuf,
    content: Option<DumpContent>,
    count: usize,
    // Counted until the dump is written (it is dropped after `drop`).
    _in_flight: DumpInFlight,
}

/// What a queued dump writes: the logs themselves (moved out of a branch
/// that clears after a dump), or their text (the branch keeps them).
enum DumpContent {
    Logs(Box<Pile<Log>>),
    Text(Vec<u8>),
}

impl QueuedDump {
    /// Writes the dump, once.
    fn write(&mut self) {
        let written = match self.content.take() {
            None => return,
            Some(DumpContent::Logs(logs)) => write_logs_file(&self.path, &logs),
            Some(DumpContent::Text(text)) => write_file(&self.path, &text),
        };
        if let Err(e) = written {
            let count = self.count;
            tracing::error!(error = %e, count, "log dump at capacity failed");
        }
    }
}

impl Drop for QueuedDump {
    fn drop(&mut self) {
        self.write();
    }
}

/// The capacity dumps a logger has handed to the blocking pool and that
/// are not written yet (see [`DataLogger::dumps_written`]).
#[derive(Debug, Default)]
struct DumpsInFlight {
    count: std::sync::atomic::AtomicUsize,
    written: tokio::sync::Notify,
}

/// One dump in flight: counted while it lives, even if writing panics.
struct DumpInFlight(Arc<DumpsInFlight>);

impl DumpInFlight {
    fn start(dumps: &Arc<DumpsInFlight>) -> Self {
        dumps
            .count
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Self(dumps.clone())
    }
}

impl Drop for DumpInFlight {
    fn drop(&mut self) {
        if self
            .0
            .count
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel)
            == 1
        {
            self.0.written.notify_waiters();
        }
    }
}

/// The branch's logs and their configuration.
#[derive(Debug, Clone)]
pub struct DataLogger {
    logs: Pile<Log>,
    // Shared: most branches use the same settings configuration.
    config: Arc<DataLoggerConfig>,
    // Shared with clones, which then wait for each other's dumps too.
    dumps: Arc<DumpsInFlight>,
}

impl Default for DataLogger {
    /// An empty logger with the class defaults (no capacity), as the
    /// reference's `DataLogger()`; a branch's default logger takes the
    /// settings instead ([`DataLoggerConfig::from_settings`]).
    fn default() -> Self {
        Self::new(DataLoggerConfig::default())
    }
}

impl DataLogger {
    /// An empty logger with this configuration.
    pub fn new(config: impl Into<Arc<DataLoggerConfig>>) -> Self {
        Self::with_logs(config, Pile::new(true))
    }

    /// A logger over existing logs.
    pub fn with_logs(config: impl Into<Arc<DataLoggerConfig>>, logs: Pile<Log>) -> Self {
        Self {
            logs,
            config: config.into(),
            dumps: Arc::default(),
        }
    }

    /// The logs.
    pub fn logs(&self) -> &Pile<Log> {
        &self.logs
    }

    /// The configuration.
    pub fn config(&self) -> &DataLoggerConfig {
        &self.config
    }

    /// Appends a log. When `capacity` logs are already held, they are first
    /// dumped to a file (and cleared when `clear_after_dump`); a failed dump
    /// is reported through `tracing` and the logs are kept.
    pub fn log(&mut self, log: Log) {
        if let Some(cap) = self.config.capacity {
            if cap > 0 && self.logs.len() as u64 >= cap {
                self.dump_at_capacity();
            }
        }
        self.logs.push(log);
    }

    /// The capacity dump. Inside a tokio runtime the logs are written on
    /// the blocking pool, so a turn neither waits for the disk nor renders
    /// the dump: cleared after the dump (the default), they move there
    /// whole; kept, their text is rendered here and moves there. A failed
    /// dump is reported through `tracing` with the number of logs it held
    /// (outside a runtime, the logs are then kept).
    fn dump_at_capacity(&mut self) {
        let path = self.config.new_file_path();
        let count = self.logs.len();
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            match write_logs_file(&path, &self.logs) {
                Ok(()) if self.config.clear_after_dump => self.logs.clear(),
                Ok(()) => {}
                Err(e) => tracing::error!(error = %e, count, "log dump at capacity failed"),
            }
            return;
        };
        let content = if self.config.clear_after_dump {
            let empty = Pile::new(self.logs.strict_type());
            DumpContent::Logs(Box::new(std::mem::replace(&mut self.logs, empty)))
        } else {
            let mut text = Vec::new();
            let io = |source| BranchError::LogIo {
                path: path.clone(),
                source,
            };
            if let Err(e) = write_logs(&self.logs, is_csv(&path), &mut text, io) {
                tracing::warn!(error = %e, "log dump at capacity failed; logs kept in memory");
                return;
            }
            DumpContent::Text(text)
        };
        let mut dump = QueuedDump {
            path,
            content: Some(content),
            count,
            _in_flight: DumpInFlight::start(&self.dumps),
        };
        handle.spawn_blocking(move || dump.write());
    }

    /// Waits until every capacity dump this logger (or a clone of it) has
    /// handed to the blocking pool is written, or has failed.
    pub async fn dumps_written(&self) {
        loop {
            let written = self.dumps.written.notified();
            tokio::pin!(written);
            written.as_mut().enable();
            if self.dumps.count.load(std::sync::atomic::Ordering::Acquire) == 0 {
                return;
            }
            written.await;
        }
    }

    /// Writes the logs to `path` (one JSON object per line, or CSV) and
    /// clears them when `clear`. Returns the number of logs written. This
    /// is blocking file I/O: from async code call it on the blocking pool.
    pub fn dump_to(&mut self, path: &Path, clear: bool) -> Result<usize> {
        write_logs_file(path, &self.logs)?;
        let n = self.logs.len();
        if clear {
            self.logs.clear();
        }
        Ok(n)
    }

    /// Dumps to a new file named by the configuration; returns its path.
    pub fn dump(&mut self, clear: bool) -> Result<Option<PathBuf>> {
        if self.logs.is_empty() {
            return Ok(None);
        }
        let path = self.config.new_file_path();
        self.dump_to(&path, clear)?;
        Ok(Some(path))
    }

    /// Removes every log.
    pub fn clear(&mut self) {
        self.logs.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn dict_config_uses_class_defaults() {
        let c =
            DataLoggerConfig::from_value(&json!({"capacity": 3, "extension": "jsonl"})).unwrap();
        assert_eq!(c.file_prefix, None);
        assert_eq!(c.extension, LogExtension::Jsonl);
        assert!(DataLoggerConfig::from_value(&json!({"hash_digits": 11})).is_err());
        assert!(DataLoggerConfig::from_value(&json!({"colour": 1})).is_err());
    }

    #[test]
    fn capacity_dumps_and_clears() {
        let dir = std::env::temp_dir().join(format!("lionagi-logs-{}", Uuid::new_v4()));
        let config = DataLoggerConfig {
            persist_dir: dir.to_string_lossy().into_owned(),
            capacity: Some(2),
            ..DataLoggerConfig::default()
        };
        let mut logger = DataLogger::new(config);
        for n in 0..3 {
            logger.log(Log::from_json(json!({"n": n})));
        }
        assert_eq!(logger.logs().len(), 1);
        let files: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(files.len(), 1);
        let text = std::fs::read_to_string(files[0].as_ref().unwrap().path()).unwrap();
        assert_eq!(text.lines().count(), 2);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Inside a runtime the dump is written on the blocking pool (the logs
    /// moved there, or their text when they are kept), and
    /// `dumps_written` returns once every file is complete.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn capacity_dumps_are_written_off_the_turn_and_can_be_awaited() {
        for clear in [true, false] {
            let dir = std::env::temp_dir().join(format!("lionagi-logs-{}", Uuid::new_v4()));
            let config = DataLoggerConfig {
                persist_dir: dir.to_string_lossy().into_owned(),
                capacity: Some(50),
                clear_after_dump: clear,
                ..DataLoggerConfig::default()
            };
            let mut logger = DataLogger::new(config);
            let big = "x".repeat(100_000);
            // Kept, every log past the capacity dumps them all again.
            let count = if clear { 151 } else { 52 };
            for n in 0..count {
                logger.log(Log::from_json(json!({"n": n, "big": big})));
            }
            let clone = logger.clone();
            clone.dumps_written().await;
            let mut lines = 0;
            let mut files = 0;
            for f in std::fs::read_dir(&dir).unwrap() {
                let text = std::fs::read_to_string(f.unwrap().path()).unwrap();
                for line in text.lines() {
                    let v: Value = serde_json::from_str(line).unwrap();
                    assert_eq!(v["content"]["big"].as_str().map(str::len), Some(100_000));
                    lines += 1;
                }
                files += 1;
            }
            if clear {
                // Three dumps of 50; one log left.
                assert_eq!((files, lines, logger.logs().len()), (3, 150, 1));
            } else {
                assert_eq!((files, lines, logger.logs().len()), (2, 50 + 51, 52));
            }
            logger.dumps_written().await;
            std::fs::remove_dir_all(dir).unwrap();
        }
    }

    /// A dump still queued when its runtime shuts down (tokio drops a
    /// blocking task that has not started) is written all the same.
    #[test]
    fn a_dump_queued_at_shutdown_is_written() {
        for clear in [true, false] {
            let dir = std::env::temp_dir().join(format!("lionagi-logs-{}", Uuid::new_v4()));
            let config = DataLoggerConfig {
                persist_dir: dir.to_string_lossy().into_owned(),
                capacity: Some(2),
                clear_after_dump: clear,
                ..DataLoggerConfig::default()
            };
            let runtime = tokio::runtime::Builder::new_current_thread()
                .max_blocking_threads(1)
                .build()
                .unwrap();
            let mut logger = DataLogger::new(config);
            let (busy, release) = std::sync::mpsc::channel::<()>();
            runtime.block_on(async {
                // The one blocking thread is taken: the dump waits in the queue.
                let (started, is_started) = tokio::sync::oneshot::channel();
                tokio::task::spawn_blocking(move || {
                    let _ = started.send(());
                    let _ = release.recv();
                });
                is_started.await.unwrap();
                for n in 0..3 {
                    logger.log(Log::from_json(json!({"n": n})));
                }
            });
            assert!(!dir.exists(), "the dump has not run yet");
            runtime.shutdown_timeout(std::time::Duration::from_millis(50));
            // The blocking thread, once free, drops the queued task.
            drop(busy);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            let text = loop {
                let file = std::fs::read_dir(&dir)
                    .ok()
                    .and_then(|mut files| files.next())
                    .and_then(|f| std::fs::read_to_string(f.ok()?.path()).ok())
                    .filter(|text| text.lines().count() == 2);
                if let Some(text) = file {
                    break text;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "the queued dump was lost"
                );
                std::thread::sleep(std::time::Duration::from_millis(10));
            };
            assert!(
                text.contains(r#""n":0"#) && text.contains(r#""n":1"#),
                "{text}"
            );
            assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
            std::fs::remove_dir_all(dir).unwrap();
        }
    }

    /// An API call's typed head reads, exports, dumps and compares as the
    /// map it stands for, the reply and the body spliced in, for a
    /// completed call and a failed one; its error is the one the
    /// `execution` record of the model layer carries.
    #[test]
    fn an_api_call_head_reads_and_writes_as_its_map() {
        let payload = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        let reply =
            json!({"id": "r", "model": "m-2024", "choices": [{"message": {"content": "yo"}}]});
        let body = RequestBody::of(&payload).unwrap();
        let err = ModelError::new(
            crate::model::ModelErrorKind::BadRequest,
            "openai",
            Some("m"),
            "x",
        )
        .with_status(400);
        let ok = ChatResponse::from_raw(reply.clone());
        for result in [Ok(&ok), Err(&err)] {
            let head = ApiCallHead::of(result, 1_700_000_000.25, 0.125);
            let mut kept = vec![KeptJson::body(&["payload"], &body)];
            let mut full = head.to_map();
            full.insert("payload".into(), payload.clone());
            if let Ok(r) = result {
                kept.push(KeptJson::value(&["execution", "response"], &r.raw).unwrap());
                full["execution"]["response"] = reply.clone();
            }
            let expected = json!({
                "id": head.id.to_string(),
                "created_at": 1_700_000_000.25,
                "metadata": if result.is_ok() {
                    json!({"served_model": "m-2024", "lion_class": lion_class::API_CALLING})
                } else {
                    json!({"lion_class": lion_class::API_CALLING})
                },
                "execution": crate::model::api_call_execution(result, 0.125),
                "payload": payload,
            });
            // In the reference's key order too (maps compare without it).
            assert_eq!(
                serde_json::to_string(&full).unwrap(),
                serde_json::to_string(&expected).unwrap()
            );
            let typed = Log::api_call(head, kept);
            let plain = Log {
                element: typed.element.clone(),
                ..Log::new(full)
            };
            assert_eq!(
                serde_json::to_string(&typed).unwrap(),
                serde_json::to_string(&plain).unwrap()
            );
            let (mut pile, mut plain_pile) = (Pile::new(true), Pile::new(true));
            pile.push(typed.clone());
            plain_pile.push(plain.clone());
            for csv in [false, true] {
                assert_eq!(
                    render_logs(&pile, csv).unwrap(),
                    render_logs(&plain_pile, csv).unwrap()
                );
            }
            assert_eq!(typed.content(), plain.content());
            assert_eq!(typed, plain);
        }
    }

    /// A log keeping its payload and reply as JSON text reads, exports and
    /// dumps exactly as the same log holding them as values.
    #[test]
    fn kept_values_read_and_write_as_plain_values() {
        let payload = json!({"model": "m", "temperature": 0.7, "messages": [
            {"role": "user", "content": "a \"quoted\" é\n"}], "n": 1.0});
        let reply = json!({"id": "r", "choices": [{"message": {"content": "hi"}}],
            "usage": {"prompt_tokens": 3}});
        let head = |response: Value, payload: Value| {
            let mut m = Map::new();
            m.insert("id".into(), "x".into());
            m.insert("created_at".into(), 1.5.into());
            m.insert("metadata".into(), json!({"lion_class": "L"}));
            m.insert(
                "execution".into(),
                json!({"status": "completed", "duration": 0.1, "response": response,
                    "error": null, "retryable": null}),
            );
            m.insert("payload".into(), payload);
            m
        };
        let plain = Log::new(head(reply.clone(), payload.clone()));
        let body = RequestBody::of(&payload).unwrap();
        let kept = Log {
            element: plain.element.clone(),
            ..Log::with_kept(
                head(Value::Null, Value::Null),
                vec![
                    KeptJson::body(&["payload"], &body),
                    KeptJson::value(&["execution", "response"], &reply).unwrap(),
                ],
            )
        };
        // Export (a `Value`, and text) before anything was read.
        assert_eq!(
            serde_json::to_value(&kept).unwrap(),
            serde_json::to_value(&plain).unwrap()
        );
        assert_eq!(
            serde_json::to_string(&kept).unwrap(),
            serde_json::to_string(&plain).unwrap()
        );
        let mut pile = Pile::new(true);
        pile.push(kept.clone());
        let mut plain_pile = Pile::new(true);
        plain_pile.push(plain.clone());
        for csv in [false, true] {
            assert_eq!(
                render_logs(&pile, csv).unwrap(),
                render_logs(&plain_pile, csv).unwrap()
            );
        }
        assert_eq!(
            render_logs(&pile, false).unwrap(),
            format!("{}\n", serde_json::to_string(&plain).unwrap())
        );
        assert_eq!(kept.content(), plain.content());
        assert_eq!(kept, plain);
        // A kept value whose place is missing is added, and still dumps.
        let odd = Log::with_kept(
            head(Value::Null, Value::Null),
            vec![KeptJson::value(&["extra", "deep"], &json!([1])).unwrap()],
        );
        assert_eq!(odd.content()["extra"], json!({"deep": [1]}));
        // A body that is not JSON (a custom model's, built in release mode
        // where `from_json_bytes` does not check) reads and dumps as text.
        let junk = KeptJson {
            path: &["payload"],
            text: bytes::Bytes::from_static(b"{not json"),
            form: TextForm::Unchecked,
        };
        let bad = Log::with_kept(head(Value::Null, Value::Null), vec![junk]);
        assert_eq!(bad.content()["payload"], json!("{not json"));
        let mut bad_pile = Pile::new(true);
        bad_pile.push(bad.clone());
        let line = render_logs(&bad_pile, false).unwrap();
        let parsed: Value = serde_json::from_str(line.trim_end()).unwrap();
        assert_eq!(parsed["content"]["payload"], json!("{not json"));
        // A custom body that is JSON but not one line (pretty-printed), or
        // holds bytes that are not UTF-8, still dumps as one line of UTF-8
        // that reads back as what `content()` gives.
        for text in [&b"{\n  \"a\": [1,\r\n 2]\n}\n"[..], b"{\"a\": \"\xff\"}"] {
            let kept = KeptJson {
                path: &["payload"],
                text: bytes::Bytes::copy_from_slice(text),
                form: TextForm::Unchecked,
            };
            let log = Log::with_kept(head(Value::Null, Value::Null), vec![kept]);
            let mut pile = Pile::new(true);
            pile.push(log.clone());
            let dump = render_logs(&pile, false).unwrap();
            assert_eq!(dump.matches('\n').count(), 1, "{dump:?}");
            let line: Value = serde_json::from_str(dump.trim_end()).unwrap();
            assert_eq!(&line["content"], &Value::Object(log.content().clone()));
        }
        // A reply kept as received: copied into a dump as it is when it is
        // one line (its spacing and escapes too), written compactly when it
        // spans lines; read, it is the value either way.
        let one_line = &b"{ \"a\": \"\\u00e9\", \"b\": [1 ,2] }"[..];
        let pretty = &b"{\n  \"a\": \"\\u00e9\",\r\n  \"b\": [1, 2]\n}\n"[..];
        for text in [one_line, pretty] {
            let log = Log::with_kept(
                head(Value::Null, Value::Null),
                vec![
                    KeptJson::parsed(
                        &["execution", "response"],
                        &ParsedJson::parse(String::from_utf8(text.to_vec()).unwrap())
                            .unwrap()
                            .1,
                    )
                    .unwrap(),
                ],
            );
            assert_eq!(
                log.content()["execution"]["response"],
                json!({"a": "é", "b": [1, 2]})
            );
            let mut pile = Pile::new(true);
            pile.push(log.clone());
            let dump = render_logs(&pile, false).unwrap();
            assert_eq!(dump.matches('\n').count(), 1, "{dump:?}");
            let copied = dump.contains(std::str::from_utf8(text).unwrap());
            assert_eq!(copied, text == one_line, "{dump:?}");
            let line: Value = serde_json::from_str(dump.trim_end()).unwrap();
            assert_eq!(&line["content"], &Value::Object(log.content().clone()));
        }
        let mut odd_pile = Pile::new(true);
        odd_pile.push(odd.clone());
        assert_eq!(
            render_logs(&odd_pile, false).unwrap(),
            format!("{}\n", serde_json::to_string(&odd).unwrap())
        );
    }

    #[test]
    fn empty_log_content() {
        assert_eq!(
            Log::new(Map::new()).content()["error"],
            "No content to log."
        );
    }
}
