//! `Log`, `DataLoggerConfig` and `DataLogger`: the branch's record of API
//! calls, tool calls and custom events.

// Parsing of stored data: nothing read from outside may panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::de::{self, Deserializer};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::element::{self, Element, Finite, MetadataOut, de_metadata, lion_class};
use crate::error::{BranchError, Result};
use crate::pile::{Pile, Stored};
use crate::progression::de_opt_created_at;

/// An immutable log entry holding a JSON snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct Log {
    element: Element,
    content: Map<String, Value>,
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
            content,
        }
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
        &self.content
    }

    /// The element fields.
    pub fn element(&self) -> &Element {
        &self.element
    }
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
        m.serialize_entry("content", &self.content)?;
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
    metadata: Map<String, Value>,
    #[serde(default)]
    content: Value,
}

impl<'de> Deserialize<'de> for Log {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = LogWire::deserialize(d)?;
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
            content,
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

    fn parse(s: &str) -> Option<Self> {
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

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn env_bool(name: &str, default: bool) -> bool {
    match env_var(name).map(|v| v.to_ascii_lowercase()) {
        Some(v) if ["1", "true", "yes", "on"].contains(&v.as_str()) => true,
        Some(v) if ["0", "false", "no", "off"].contains(&v.as_str()) => false,
        _ => default,
    }
}

impl DataLoggerConfig {
    /// The settings defaults a branch uses when given no (or an empty)
    /// configuration: `LOG_PERSIST_DIR`, `LOG_SUBFOLDER`, `LOG_FILE_PREFIX`
    /// (`log`), `LOG_CAPACITY` (50), `LOG_EXTENSION`, `LOG_USE_TIMESTAMP`,
    /// `LOG_HASH_DIGITS`, `LOG_AUTO_SAVE_ON_EXIT`, `LOG_CLEAR_AFTER_DUMP`,
    /// `LOG_REDACT_BINARY`, `LOG_REDACT_BINARY_THRESHOLD` from the
    /// environment, each falling back to the reference's default.
    pub fn from_settings() -> Self {
        let d = Self::default();
        Self {
            persist_dir: env_var("LOG_PERSIST_DIR").unwrap_or(d.persist_dir),
            subfolder: env_var("LOG_SUBFOLDER"),
            file_prefix: Some(env_var("LOG_FILE_PREFIX").unwrap_or_else(|| "log".into())),
            capacity: Some(
                env_var("LOG_CAPACITY")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(50),
            ),
            extension: env_var("LOG_EXTENSION")
                .and_then(|v| LogExtension::parse(&v))
                .unwrap_or(d.extension),
            use_timestamp: env_bool("LOG_USE_TIMESTAMP", true),
            hash_digits: Some(
                env_var("LOG_HASH_DIGITS")
                    .and_then(|v| v.parse().ok())
                    .filter(|n| *n <= 10)
                    .unwrap_or(5),
            ),
            auto_save_on_exit: env_bool("LOG_AUTO_SAVE_ON_EXIT", true),
            clear_after_dump: env_bool("LOG_CLEAR_AFTER_DUMP", true),
            redact_binary: env_bool("LOG_REDACT_BINARY", true),
            redact_binary_threshold: env_var("LOG_REDACT_BINARY_THRESHOLD")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1024),
        }
    }

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

/// One JSON object per line, or CSV with the content as a JSON cell.
fn render_logs(logs: &Pile<Log>, csv: bool) -> Result<String> {
    let mut out = String::new();
    if csv {
        out.push_str("id,created_at,content\n");
    }
    for log in logs.iter() {
        let err = |e: serde_json::Error| BranchError::Serialize {
            path: format!("logs.{}", log.id()),
            reason: e.to_string(),
        };
        if csv {
            let content = serde_json::to_string(log.content()).map_err(err)?;
            out.push_str(&format!(
                "{},{},\"{}\"\n",
                log.id(),
                log.created_at(),
                content.replace('"', "\"\"")
            ));
        } else {
            out.push_str(&serde_json::to_string(log).map_err(err)?);
            out.push('\n');
        }
    }
    Ok(out)
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    let io = |source| BranchError::LogIo {
        path: path.to_owned(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    std::fs::write(path, text).map_err(io)
}

/// The branch's logs and their configuration.
#[derive(Debug, Clone)]
pub struct DataLogger {
    logs: Pile<Log>,
    // Shared: most branches use the same settings configuration.
    config: Arc<DataLoggerConfig>,
}

impl Default for DataLogger {
    fn default() -> Self {
        Self::new(DataLoggerConfig::from_settings())
    }
}

impl DataLogger {
    /// An empty logger with this configuration.
    pub fn new(config: impl Into<Arc<DataLoggerConfig>>) -> Self {
        Self {
            logs: Pile::new(true),
            config: config.into(),
        }
    }

    /// A logger over existing logs.
    pub fn with_logs(config: impl Into<Arc<DataLoggerConfig>>, logs: Pile<Log>) -> Self {
        Self {
            logs,
            config: config.into(),
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

    /// The capacity dump. Inside a tokio runtime the file is written on the
    /// blocking pool so a turn never waits for the disk; a failed write is
    /// reported through `tracing` with the number of logs it held.
    fn dump_at_capacity(&mut self) {
        let path = self.config.new_file_path();
        let text = match render_logs(&self.logs, is_csv(&path)) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "log dump at capacity failed; logs kept in memory");
                return;
            }
        };
        let count = self.logs.len();
        if self.config.clear_after_dump {
            self.logs.clear();
        }
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn_blocking(move || {
                    if let Err(e) = write_file(&path, &text) {
                        tracing::error!(error = %e, count, "log dump at capacity failed");
                    }
                });
            }
            Err(_) => {
                if let Err(e) = write_file(&path, &text) {
                    tracing::error!(error = %e, count, "log dump at capacity failed");
                }
            }
        }
    }

    /// Writes the logs to `path` (one JSON object per line, or CSV) and
    /// clears them when `clear`. Returns the number of logs written. This
    /// is blocking file I/O: from async code call it on the blocking pool.
    pub fn dump_to(&mut self, path: &Path, clear: bool) -> Result<usize> {
        let text = render_logs(&self.logs, is_csv(path))?;
        write_file(path, &text)?;
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

    #[test]
    fn empty_log_content() {
        assert_eq!(
            Log::new(Map::new()).content()["error"],
            "No content to log."
        );
    }
}
