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

/// Classification of a failed model call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ModelErrorKind {
    /// 408 / 5xx / an interrupted response: retryable.
    Transient,
    /// 429 (not a quota error): retryable, honouring `Retry-After`.
    RateLimited,
    /// The account's quota is exhausted (`insufficient_quota`): not retried.
    Quota,
    /// The request exceeds the model's context window.
    ContextLength,
    /// 401 / 403, or no API key available.
    Auth,
    /// Any other 4xx: the request is wrong.
    BadRequest,
    /// The endpoint's request model refuses the payload (a sampling field
    /// out of the API's range): nothing was sent, so no call is logged.
    InvalidPayload,
    /// A 2xx reply that is not what the protocol promises (bad JSON,
    /// truncated stream).
    MalformedResponse,
    /// No (complete) reply within the timeout.
    Timeout,
    /// The connection could not be made or was reset.
    Connect,
    /// A configuration-only model was called.
    NotConnected,
    /// The network guard refused the target host.
    NetworkGuard,
    /// The local rate limiter refused (or gave up waiting for) the call.
    LocalRateLimit,
    /// The estimated input exceeds `max_input_tokens`.
    InputTokenCap,
    /// The provider reported a failure inside a stream.
    StreamFailed,
    /// The model configuration cannot produce a request.
    Config,
    /// The circuit breaker is open after repeated failures.
    CircuitOpen,
    /// The reply exceeds a cap of the model layer (its size in bytes, or
    /// the number of tool calls it asks for): refused, not retried.
    ReplyLimit,
}

impl ModelErrorKind {
    /// Whether the model's own checks refused the call before anything
    /// was sent (a payload its request model refuses, an input over its
    /// cap): no call was made, so none is logged, as in the reference,
    /// whose `APICalling` is never created for either.
    pub fn is_refused_before_sending(self) -> bool {
        matches!(self, Self::InvalidPayload | Self::InputTokenCap)
    }

    /// Whether the HTTP layer retries this kind.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            Self::Transient | Self::RateLimited | Self::Timeout | Self::Connect
        )
    }

    fn describe(self) -> &'static str {
        match self {
            Self::Transient => "transient provider error",
            Self::RateLimited => "rate limited by provider",
            Self::Quota => "provider quota exhausted",
            Self::ContextLength => "context length exceeded",
            Self::Auth => "authentication failed",
            Self::BadRequest => "bad request",
            Self::InvalidPayload => "invalid payload",
            Self::MalformedResponse => "malformed provider response",
            Self::Timeout => "request timed out",
            Self::Connect => "connection failed",
            Self::NotConnected => "model not connected",
            Self::NetworkGuard => "blocked by network guard",
            Self::LocalRateLimit => "local rate limit",
            Self::InputTokenCap => "input token cap exceeded",
            Self::StreamFailed => "stream failed",
            Self::Config => "model configuration error",
            Self::CircuitOpen => "circuit breaker open",
            Self::ReplyLimit => "reply exceeds a limit",
        }
    }
}

/// A failed model call: classified, with the HTTP status and the provider's
/// message. Never carries the API key (messages are redacted by the caller
/// that knows the key).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", self.render())]
pub struct ModelError {
    /// Classification.
    pub kind: ModelErrorKind,
    /// Provider name.
    pub provider: String,
    /// Model name, if configured.
    pub model: Option<String>,
    /// HTTP status, if a reply arrived.
    pub status: Option<u16>,
    /// The provider's message (or a description of the local failure).
    pub message: String,
    /// HTTP attempts made (0 if none was sent).
    pub attempts: u32,
    /// Server-requested delay (`Retry-After`), if any.
    pub retry_after: Option<std::time::Duration>,
    /// The provider's error body (JSON if it parsed, else a string),
    /// redacted of the key; `None` when no HTTP reply arrived.
    pub body: Option<Box<serde_json::Value>>,
}

impl ModelError {
    /// A new error of `kind` for `provider` / `model`.
    pub fn new(
        kind: ModelErrorKind,
        provider: &str,
        model: Option<&str>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            provider: provider.to_owned(),
            model: model.map(str::to_owned),
            status: None,
            message: message.into(),
            attempts: 0,
            retry_after: None,
            body: None,
        }
    }

    /// The error of calling a configuration-only model.
    pub fn not_connected(provider: &str, model: Option<&str>) -> Self {
        Self::new(
            ModelErrorKind::NotConnected,
            provider,
            model,
            "this model is configuration only; connect it (branch-models IModel) before calling",
        )
    }

    /// With an HTTP status.
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    /// With an attempt count.
    pub fn with_attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts;
        self
    }

    /// With the provider's error body.
    pub fn with_body(mut self, body: serde_json::Value) -> Self {
        self.body = Some(Box::new(body));
        self
    }

    /// The reference's error type name for the API-call log record
    /// (`execution.error.error`).
    pub fn reference_type(&self) -> &'static str {
        match self.kind {
            _ if self.status.is_some() && self.body.is_some() => "APIClientError",
            ModelErrorKind::Timeout => "TimeoutError",
            ModelErrorKind::Connect => "ConnectionError",
            ModelErrorKind::NetworkGuard => "PermissionError",
            ModelErrorKind::InputTokenCap => "InputTokenCapError",
            _ => "ValueError",
        }
    }

    /// The reference's message for a failed HTTP call:
    /// `Request failed with status {status}: {body as Python repr}`; the
    /// plain message otherwise.
    pub fn reference_message(&self) -> String {
        match (self.status, self.body.as_deref()) {
            (Some(status), Some(body)) => {
                let shown = match body {
                    serde_json::Value::String(s) => s.clone(),
                    other => super::pyrepr::python_repr(other),
                };
                format!("Request failed with status {status}: {shown}")
            }
            _ => self.message.clone(),
        }
    }

    /// Whether the HTTP layer retries it.
    pub fn is_retryable(&self) -> bool {
        self.kind.is_retryable()
    }

    fn render(&self) -> String {
        let mut s = format!("{} ({}", self.kind.describe(), self.provider);
        if let Some(m) = &self.model {
            s.push('/');
            s.push_str(m);
        }
        if let Some(code) = self.status {
            s.push_str(&format!(", status {code}"));
        }
        if self.attempts > 1 {
            s.push_str(&format!(", {} attempts", self.attempts));
        }
        s.push(')');
        if !self.message.is_empty() {
            s.push_str(": ");
            s.push_str(&self.message);
        }
        s
    }
}
