//! Secrets of a configuration (environment and header values) kept out of
//! `Debug`, logs and error text.

use std::fmt;

/// The text that stands for a secret.
pub const REDACTED: &str = "[redacted]";

/// A value that is written as `[redacted]` by `Debug` and `Display`; only
/// [`Secret::expose`] reads it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

/// Replaces every occurrence of each secret in `text` (a server's stderr,
/// an error body) with `[redacted]`. Values shorter than four bytes are
/// left alone: they are not secrets and would shred the text.
pub fn scrub<'a>(text: &str, secrets: impl IntoIterator<Item = &'a Secret>) -> String {
    let mut out = text.to_owned();
    for s in secrets {
        if s.0.len() >= 4 {
            out = out.replace(&s.0, REDACTED);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("sk-very-secret");
        assert_eq!(format!("{s:?} {s}"), "[redacted] [redacted]");
        assert_eq!(
            scrub("token sk-very-secret rejected", [&s]),
            "token [redacted] rejected"
        );
        assert_eq!(scrub("a b", [&Secret::new("a")]), "a b");
    }
}
