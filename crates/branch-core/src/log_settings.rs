//! The log configuration a branch gets from the settings (`LOG_*` in the
//! environment or the dotenv files), read with the reference's coercions:
//! a value that does not fit its field is an error naming the variable,
//! never the default in its place.

use crate::error::{BranchError, Result};
use crate::log::{DataLoggerConfig, LogExtension};
use crate::model::settings::setting_as_given;

/// The most hash digits a file name takes (a field's range in the reference).
const MAX_HASH_DIGITS: u8 = 10;

impl DataLoggerConfig {
    /// The configuration a branch uses when given no (or an empty) one:
    /// `LOG_PERSIST_DIR`, `LOG_SUBFOLDER`, `LOG_FILE_PREFIX` (`log`),
    /// `LOG_CAPACITY` (50), `LOG_EXTENSION`, `LOG_USE_TIMESTAMP`,
    /// `LOG_HASH_DIGITS`, `LOG_AUTO_SAVE_ON_EXIT`, `LOG_CLEAR_AFTER_DUMP`,
    /// `LOG_REDACT_BINARY`, `LOG_REDACT_BINARY_THRESHOLD`, from the
    /// environment, else the dotenv files of the working directory (see
    /// [`setting_as_given`]), each falling back to the reference's default
    /// when unset. A value that is set but malformed (`LOG_CAPACITY=abc`,
    /// `LOG_USE_TIMESTAMP=maybe`, `LOG_HASH_DIGITS=11`) is an error naming
    /// the variable, as the reference refuses it.
    pub fn from_settings() -> Result<Self> {
        Self::from_lookup(setting_as_given)
    }

    /// [`DataLoggerConfig::from_settings`] over any source of settings:
    /// `var(name)` is the value as given (`Ok(None)` when unset) or why it
    /// cannot be read.
    pub fn from_lookup(
        var: impl Fn(&str) -> std::result::Result<Option<String>, String>,
    ) -> Result<Self> {
        let get = |name: &str| {
            var(name).map_err(|reason| BranchError::InvalidLogConfig {
                field: name.into(),
                reason,
            })
        };
        let d = Self::default();
        let whole = |name: &str, default: u64| -> Result<u64> {
            get(name)?.map_or(Ok(default), |v| {
                settings_whole_number(&v).map_err(|why| invalid(name, &v, why))
            })
        };
        let flag = |name: &str, default: bool| -> Result<bool> {
            get(name)?.map_or(Ok(default), |v| {
                settings_bool(&v).ok_or_else(|| {
                    invalid(
                        name,
                        &v,
                        "must be a boolean (true/false, 1/0, yes/no, on/off, t/f, y/n)",
                    )
                })
            })
        };
        let hash_digits = match get("LOG_HASH_DIGITS")? {
            None => 5,
            Some(v) => settings_whole_number(&v)
                .and_then(|n| {
                    u8::try_from(n)
                        .ok()
                        .filter(|n| *n <= MAX_HASH_DIGITS)
                        .ok_or("must be a whole number from 0 to 10")
                })
                .map_err(|why| invalid("LOG_HASH_DIGITS", &v, why))?,
        };
        let extension = match get("LOG_EXTENSION")? {
            None => d.extension,
            Some(v) => LogExtension::parse(&v)
                .ok_or_else(|| invalid("LOG_EXTENSION", &v, "must be .csv, .json or .jsonl"))?,
        };
        Ok(Self {
            persist_dir: get("LOG_PERSIST_DIR")?.unwrap_or(d.persist_dir),
            subfolder: get("LOG_SUBFOLDER")?,
            file_prefix: Some(get("LOG_FILE_PREFIX")?.unwrap_or_else(|| "log".into())),
            capacity: Some(whole("LOG_CAPACITY", 50)?),
            extension,
            use_timestamp: flag("LOG_USE_TIMESTAMP", d.use_timestamp)?,
            hash_digits: Some(hash_digits),
            auto_save_on_exit: flag("LOG_AUTO_SAVE_ON_EXIT", d.auto_save_on_exit)?,
            clear_after_dump: flag("LOG_CLEAR_AFTER_DUMP", d.clear_after_dump)?,
            redact_binary: flag("LOG_REDACT_BINARY", d.redact_binary)?,
            redact_binary_threshold: whole(
                "LOG_REDACT_BINARY_THRESHOLD",
                d.redact_binary_threshold,
            )?,
        })
    }
}

/// The error for setting `name` given as `value`; the value is quoted
/// (cut to 40 characters) so a stray character is visible.
fn invalid(name: &str, value: &str, why: &str) -> BranchError {
    BranchError::InvalidLogConfig {
        field: name.into(),
        reason: format!(
            "{why}, not `{}`",
            value.chars().take(40).collect::<String>()
        ),
    }
}

/// A non-negative whole number as the reference's settings take it from
/// text: surrounding whitespace, a sign, single underscores between digits
/// and a fraction of zeros (`4.00`) are accepted; anything else (`1e3`,
/// `4.5`, `0x10`, `4.`) is not.
fn settings_whole_number(text: &str) -> std::result::Result<u64, &'static str> {
    const NOT_WHOLE: &str = "must be a whole number";
    let t = text.trim();
    let (negative, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (digits, fraction) = t.split_once('.').map_or((t, None), |(d, f)| (d, Some(f)));
    if let Some(f) = fraction {
        if f.is_empty() || f.bytes().any(|b| b != b'0') {
            return Err(NOT_WHOLE);
        }
    }
    let mut n: u64 = 0;
    let mut previous_was_digit = false;
    for b in digits.bytes() {
        match b {
            b'0'..=b'9' => {
                n = n
                    .checked_mul(10)
                    .and_then(|n| n.checked_add(u64::from(b - b'0')))
                    .ok_or("is too large")?;
                previous_was_digit = true;
            }
            b'_' if previous_was_digit => previous_was_digit = false,
            _ => return Err(NOT_WHOLE),
        }
    }
    if !previous_was_digit {
        // Empty, or ending in an underscore.
        return Err(NOT_WHOLE);
    }
    if negative && n != 0 {
        return Err("must not be negative");
    }
    Ok(n)
}

/// A boolean as the reference's settings take it from text (any case, no
/// surrounding whitespace).
fn settings_bool(text: &str) -> Option<bool> {
    const TRUE: [&str; 6] = ["1", "on", "t", "true", "y", "yes"];
    const FALSE: [&str; 6] = ["0", "off", "f", "false", "n", "no"];
    if TRUE.iter().any(|w| w.eq_ignore_ascii_case(text)) {
        Some(true)
    } else if FALSE.iter().any(|w| w.eq_ignore_ascii_case(text)) {
        Some(false)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn from(vars: &[(&str, &str)]) -> Result<DataLoggerConfig> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        DataLoggerConfig::from_lookup(|name| Ok(vars.get(name).cloned()))
    }

    fn refusal(vars: &[(&str, &str)]) -> String {
        from(vars).unwrap_err().to_string()
    }

    #[test]
    fn unset_settings_are_the_reference_defaults() {
        let c = from(&[]).unwrap();
        assert_eq!(
            c.to_value(),
            serde_json::json!({"persist_dir": "./data/logs", "subfolder": null,
                "file_prefix": "log", "capacity": 50, "extension": ".json",
                "use_timestamp": true, "hash_digits": 5, "auto_save_on_exit": true,
                "clear_after_dump": true, "redact_binary": true,
                "redact_binary_threshold": 1024})
        );
    }

    /// Each accepted spelling, checked against lionagi 0.36.0.
    #[test]
    fn numbers_and_flags_are_coerced_as_the_reference_does() {
        for (given, n) in [
            ("3", 3),
            ("+4", 4),
            ("-0", 0),
            (" 5 ", 5),
            ("\t6", 6),
            ("04", 4),
            ("4.0", 4),
            ("4.00", 4),
            ("1_000", 1000),
            ("0", 0),
        ] {
            let c = from(&[("LOG_CAPACITY", given)]).unwrap();
            assert_eq!(c.capacity, Some(n), "{given:?}");
        }
        for (given, b) in [
            ("0", false),
            ("off", false),
            ("F", false),
            ("No", false),
            ("1", true),
            ("T", true),
            ("yes", true),
            ("ON", true),
        ] {
            let c = from(&[("LOG_USE_TIMESTAMP", given)]).unwrap();
            assert_eq!(c.use_timestamp, b, "{given:?}");
        }
        let c = from(&[
            ("LOG_EXTENSION", "jsonl"),
            ("LOG_HASH_DIGITS", "10"),
            ("LOG_REDACT_BINARY_THRESHOLD", "5.0"),
        ])
        .unwrap();
        assert_eq!(c.extension, LogExtension::Jsonl);
        assert_eq!(c.hash_digits, Some(10));
        assert_eq!(c.redact_binary_threshold, 5);
    }

    /// Set to nothing is a value, as in the reference: an empty text
    /// where one fits, an error where a number or a flag is due.
    #[test]
    fn an_empty_setting_is_a_value_not_an_absence() {
        let c = from(&[
            ("LOG_PERSIST_DIR", ""),
            ("LOG_SUBFOLDER", ""),
            ("LOG_FILE_PREFIX", ""),
        ])
        .unwrap();
        assert_eq!(c.persist_dir, "");
        assert_eq!(c.subfolder.as_deref(), Some(""));
        assert_eq!(c.file_prefix.as_deref(), Some(""));
        assert!(refusal(&[("LOG_CAPACITY", "")]).contains("LOG_CAPACITY"));
        assert!(refusal(&[("LOG_USE_TIMESTAMP", "")]).contains("LOG_USE_TIMESTAMP"));
    }

    #[test]
    fn a_malformed_setting_is_refused_by_name() {
        for (name, given) in [
            ("LOG_CAPACITY", "abc"),
            ("LOG_CAPACITY", "-1"),
            ("LOG_CAPACITY", "1e3"),
            ("LOG_CAPACITY", "4.5"),
            ("LOG_CAPACITY", "4."),
            ("LOG_CAPACITY", ".0"),
            ("LOG_CAPACITY", "0x10"),
            ("LOG_CAPACITY", "_4"),
            ("LOG_CAPACITY", "4_"),
            ("LOG_CAPACITY", "4__0"),
            ("LOG_CAPACITY", "+-4"),
            ("LOG_CAPACITY", "- 4"),
            ("LOG_CAPACITY", "１２"),
            ("LOG_CAPACITY", "null"),
            ("LOG_CAPACITY", "99999999999999999999999"),
            ("LOG_HASH_DIGITS", "11"),
            ("LOG_HASH_DIGITS", "-1"),
            ("LOG_REDACT_BINARY_THRESHOLD", "-1"),
            ("LOG_USE_TIMESTAMP", "maybe"),
            ("LOG_USE_TIMESTAMP", " yes "),
            ("LOG_REDACT_BINARY", "2"),
            ("LOG_EXTENSION", ".txt"),
            ("LOG_EXTENSION", ".JSON"),
            ("LOG_EXTENSION", " .csv"),
        ] {
            let text = refusal(&[(name, given)]);
            assert!(
                text.starts_with(&format!("invalid log configuration: field `{name}` ")),
                "{name}={given:?}: {text}"
            );
        }
        assert!(refusal(&[("LOG_CAPACITY", "abc")]).ends_with("must be a whole number, not `abc`"));
    }

    #[test]
    fn an_unreadable_setting_is_refused_by_name() {
        let e = DataLoggerConfig::from_lookup(|name| {
            if name == "LOG_SUBFOLDER" {
                Err("LOG_SUBFOLDER is not UTF-8".into())
            } else {
                Ok(None)
            }
        })
        .unwrap_err();
        assert!(e.to_string().contains("LOG_SUBFOLDER is not UTF-8"), "{e}");
    }
}
