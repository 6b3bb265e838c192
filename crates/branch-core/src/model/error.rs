//! Errors of the plain-data model configuration.

/// Why a model configuration could not be built or restored.
///
/// Messages name the field and the reason only, never the offending value:
/// configuration values may be secrets (a key pasted into the wrong field, a
/// URL with a password).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelConfigError {
    /// The provider is not registered and no `base_url` was given for a
    /// generic OpenAI-compatible endpoint.
    #[error(
        "unknown provider (field `provider`): it is not registered; give a base_url to use a \
         generic OpenAI-compatible endpoint"
    )]
    UnknownProvider,
    /// A required field is absent.
    #[error("missing field `{field}`")]
    Missing {
        /// Dotted path of the field, e.g. `endpoint.config.provider`.
        field: String,
    },
    /// A field is present but unusable.
    #[error("invalid field `{field}`: {reason}")]
    Invalid {
        /// Dotted path of the field.
        field: String,
        /// Why it was refused (never contains the value).
        reason: &'static str,
    },
}

impl ModelConfigError {
    pub(crate) fn missing(field: impl Into<String>) -> Self {
        Self::Missing {
            field: field.into(),
        }
    }

    pub(crate) fn invalid(field: impl Into<String>, reason: &'static str) -> Self {
        Self::Invalid {
            field: field.into(),
            reason,
        }
    }
}
