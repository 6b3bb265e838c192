//! The failures of `lionagi chat`, each one line naming what to do, and
//! their exit statuses.

use branch_models::{ModelError, ModelErrorKind};
use branch_operations::OperationError;
use serde_json::{Value, json};

/// Why `lionagi chat` stopped or a turn failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ChatError {
    /// The command line is wrong.
    #[error("{0} (lionagi chat --help lists the options)")]
    Usage(String),
    /// An MCP server could not be configured, started or used.
    #[error("{0}")]
    Mcp(String),
    /// The provider needs a key and none is set.
    #[error(
        "no API key for {provider}: set {var} (or use --base-url for a server that needs none)"
    )]
    MissingKey {
        /// The provider.
        provider: String,
        /// The environment variable to set.
        var: String,
    },
    /// The provider refused the key.
    #[error("{provider} refused the API key{}: {message}", var.as_ref().map(|v| format!(" from {v}")).unwrap_or_default())]
    Auth {
        /// The provider.
        provider: String,
        /// Where the key came from.
        var: Option<String>,
        /// The provider's message (keys redacted).
        message: String,
    },
    /// No connection could be made.
    #[error("cannot reach {url}: {reason}")]
    Unreachable {
        /// The server.
        url: String,
        /// Why.
        reason: String,
    },
    /// Any other model failure.
    #[error("{0}")]
    Model(Box<ModelError>),
    /// No model is configured and the embedded one is not available.
    #[error("{0}")]
    NoModel(String),
    /// The conversation store failed.
    #[error("{path}: {message}")]
    Store {
        /// The store file.
        path: String,
        /// What failed.
        message: String,
    },
    /// `--resume` names nothing in the store.
    #[error("--resume: {reason} in {path} (lionagi branch list --store {path} lists them)")]
    NotFound {
        /// The store file.
        path: String,
        /// What was looked for.
        reason: String,
    },
    /// A turn failed for another reason.
    #[error("{0}")]
    Turn(String),
    /// The terminal or a file could not be used.
    #[error("{what}: {source}")]
    Io {
        /// What was being read or written.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// Ctrl-C cancelled the turn.
    #[error("cancelled; nothing of this turn was kept")]
    Interrupted,
}

/// What the error messages need to know about the model in use.
#[derive(Debug, Clone, Default)]
pub(crate) struct ModelInfo {
    /// `provider/model`.
    pub label: String,
    /// The provider.
    pub provider: String,
    /// The request URL's base, if HTTP.
    pub base_url: Option<String>,
    /// The key's environment variable, if the provider has one.
    pub key_var: Option<String>,
}

impl ChatError {
    /// The process exit status.
    pub(crate) fn exit_code(&self) -> i32 {
        match self {
            Self::Usage(_) => 2,
            Self::Interrupted => 130,
            _ => 1,
        }
    }

    /// A stable name for scripts (`--json`).
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Usage(_) => "usage",
            Self::MissingKey { .. } => "missing_key",
            Self::Auth { .. } => "auth",
            Self::Unreachable { .. } => "unreachable",
            Self::Model(_) => "model",
            Self::NoModel(_) => "no_model",
            Self::Store { .. } => "store",
            Self::NotFound { .. } => "not_found",
            Self::Turn(_) => "turn",
            Self::Io { .. } => "io",
            Self::Interrupted => "cancelled",
            Self::Mcp(_) => "mcp",
        }
    }

    /// The `--json` form: `{"error": {"kind": ..., "message": ...}}`.
    pub(crate) fn to_json(&self) -> Value {
        json!({"error": {"kind": self.kind(), "message": self.to_string()}})
    }

    /// A model failure in words a user can act on.
    pub(crate) fn from_model(e: ModelError, info: &ModelInfo) -> Self {
        let url = || {
            info.base_url
                .clone()
                .unwrap_or_else(|| format!("the {} API", info.provider))
        };
        match e.kind {
            ModelErrorKind::Auth if e.status.is_none() => match &info.key_var {
                Some(var) => Self::MissingKey {
                    provider: info.provider.clone(),
                    var: var.clone(),
                },
                None => Self::Model(Box::new(e)),
            },
            ModelErrorKind::Auth => Self::Auth {
                provider: info.provider.clone(),
                var: info.key_var.clone(),
                message: e.reference_message(),
            },
            ModelErrorKind::Connect => Self::Unreachable {
                url: url(),
                reason: connect_reason(&e.message),
            },
            ModelErrorKind::Timeout => Self::Unreachable {
                url: url(),
                reason: if e.message.contains("overall deadline") {
                    "no complete reply within the call's deadline (--timeout SECS)".into()
                } else {
                    "no reply in time".into()
                },
            },
            // The one guard a flag lifts: name it.
            ModelErrorKind::NetworkGuard if e.message.contains("local-network guard") => {
                Self::Unreachable {
                    url: url(),
                    reason: format!(
                        "{} (--allow-local-network lets the model reach this machine and its network)",
                        e.message
                    ),
                }
            }
            _ => Self::Model(Box::new(e)),
        }
    }

    /// A verb's failure in words a user can act on.
    pub(crate) fn from_operation(e: OperationError, info: &ModelInfo) -> Self {
        match e {
            OperationError::ApiCall { source, .. } => Self::from_model(*source, info),
            other => Self::Turn(other.to_string()),
        }
    }
}

/// The useful part of a connection failure ("connection refused" rather
/// than reqwest's chain of wrappers).
fn connect_reason(message: &str) -> String {
    let lower = message.to_ascii_lowercase();
    for known in [
        "connection refused",
        "connection reset",
        "dns error",
        "failed to lookup address",
        "network is unreachable",
        "no route to host",
    ] {
        if lower.contains(known) {
            return known.to_owned();
        }
    }
    if message.is_empty() {
        "connection failed".into()
    } else {
        message.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> ModelInfo {
        ModelInfo {
            label: "openai/gpt-x".into(),
            provider: "openai".into(),
            base_url: Some("http://127.0.0.1:9/v1".into()),
            key_var: Some("OPENAI_API_KEY".into()),
        }
    }

    #[test]
    fn model_failures_become_actionable_messages() {
        let missing = ModelError::new(
            ModelErrorKind::Auth,
            "openai",
            Some("gpt-x"),
            "API key is required",
        );
        let e = ChatError::from_model(missing, &info());
        assert_eq!(e.kind(), "missing_key");
        assert!(e.to_string().contains("set OPENAI_API_KEY"), "{e}");
        let refused = ModelError::new(
            ModelErrorKind::Connect,
            "openai",
            None,
            "error sending request: tcp connect error: Connection refused (os error 111)",
        );
        let e = ChatError::from_model(refused, &info());
        assert_eq!(
            e.to_string(),
            "cannot reach http://127.0.0.1:9/v1: connection refused"
        );
        assert_eq!(e.exit_code(), 1);
        assert_eq!(ChatError::Interrupted.exit_code(), 130);
        assert_eq!(
            ChatError::Usage("x".into()).to_json()["error"]["kind"],
            "usage"
        );
    }
}
