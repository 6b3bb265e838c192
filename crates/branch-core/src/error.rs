//! Errors of the branch aggregate.

use crate::model::ModelConfigError;

/// Everything that can go wrong inside `branch-core`.
///
/// Messages name *what* and *where*; they never quote user values that may
/// be secrets (model configuration errors name fields only).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BranchError {
    /// Stored data (a `to_dict` output, a message dict, a pile) does not
    /// describe a valid branch. `path` is the JSON path of the fault.
    #[error("invalid data at `{path}`: {reason}")]
    InvalidData {
        /// JSON path of the offending value, `.` for the root.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A value cannot be written as JSON (a non-finite float).
    #[error("cannot serialize `{path}`: {reason}")]
    Serialize {
        /// Where the value sits in the output.
        path: String,
        /// Why it cannot be written.
        reason: String,
    },
    /// `to_dict` was asked for a mode other than python, json or db.
    #[error("unsupported serialization mode `{0}` (expected python, json or db)")]
    UnsupportedMode(String),
    /// A model configuration was rejected.
    #[error(transparent)]
    ModelConfig(#[from] ModelConfigError),
    /// A tool name is registered already and `update` was not requested.
    #[error("tool `{0}` is already registered")]
    DuplicateTool(String),
    /// An operation name is registered already and `update` was not requested.
    #[error("operation `{0}` is already registered")]
    DuplicateOperation(String),
    /// An action response was requested without the request it answers.
    #[error("an action response needs the action request it answers")]
    MissingActionRequest,
    /// A log configuration field is out of range.
    #[error("invalid log configuration: field `{field}` {reason}")]
    InvalidLogConfig {
        /// The offending field.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Writing logs to disk failed.
    #[error("cannot write logs to `{path}`: {source}")]
    LogIo {
        /// The file that could not be written.
        path: std::path::PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl BranchError {
    pub(crate) fn invalid(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::InvalidData {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

/// Result alias used across the crate.
pub type Result<T, E = BranchError> = std::result::Result<T, E>;
