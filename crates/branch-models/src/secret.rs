//! API keys held in a type that never prints them.

use std::fmt;

/// An API key. `Debug` prints a mask; there is no `Display`; the value is
/// reachable only through [`ApiKey::expose`].
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a literal key.
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// Resolves an explicitly given key the way the reference does
    /// (providers.md §3): a string starting with `dummy-key` is used
    /// literally; otherwise, if an environment variable of that name is set,
    /// its value; otherwise the string itself.
    pub fn resolve(given: &str) -> Self {
        if given.starts_with("dummy-key") {
            return Self::new(given);
        }
        match env_value(given) {
            Some(v) => Self(v),
            None => Self::new(given),
        }
    }

    /// The key in environment variable `name` (or, as the reference reads
    /// settings, in `.env` / `.env.local` / `.secrets.env` of the working
    /// directory), if set and non-empty.
    pub fn from_env(name: &str) -> Option<Self> {
        env_value(name).map(Self)
    }

    /// The secret value (for building the auth header only).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Replaces every occurrence of the key in `text` by `***`.
    pub fn redact(&self, text: &str) -> String {
        if self.0.len() < 4 {
            text.to_owned()
        } else {
            text.replace(&self.0, "***")
        }
    }
}

fn env_value(name: &str) -> Option<String> {
    if name.is_empty() || name.contains(['=', '\0']) {
        return None;
    }
    branch_core::model::settings::setting(name).filter(|v| !v.trim().is_empty())
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

impl From<&str> for ApiKey {
    fn from(s: &str) -> Self {
        Self::resolve(s)
    }
}

impl From<String> for ApiKey {
    fn from(s: String) -> Self {
        Self::resolve(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_masks_and_redacts() {
        let k = ApiKey::new("sk-secret-123");
        assert_eq!(format!("{k:?}"), "ApiKey(***)");
        assert_eq!(k.redact("bad key sk-secret-123!"), "bad key ***!");
        assert_eq!(ApiKey::resolve("dummy-key-x").expose(), "dummy-key-x");
        assert_eq!(ApiKey::resolve("sk-literal").expose(), "sk-literal");
        assert_eq!(
            ApiKey::resolve("PATH").expose(),
            std::env::var("PATH").unwrap()
        );
    }
}
