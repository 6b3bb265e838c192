//! Errors of building a tool.

/// A tool that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolBuildError {
    /// The parameters schema is not a usable JSON Schema.
    #[error("invalid tool parameters schema: {0}")]
    InvalidSchema(String),
    /// The tool name is empty or not a valid function name.
    #[error("invalid tool name `{0}`: use 1-64 letters, digits, `_` or `-`")]
    InvalidName(String),
}

/// Checks a function name as providers accept it (`^[a-zA-Z0-9_-]{1,64}$`).
pub(crate) fn check_name(name: &str) -> Result<(), ToolBuildError> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(ToolBuildError::InvalidName(name.to_owned()))
    }
}
