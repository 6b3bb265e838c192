//! `ModelConfig`: what Python `iModel.to_dict` writes, as plain data.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Number, Value};
use uuid::Uuid;

use super::error::ModelConfigError;
use super::registry::{
    EndpointSpec, ProviderKind, ProviderSpec, RequestModel, WireProtocol, lookup_provider,
    url_matches_template,
};
use super::sanitize::{
    is_sensitive_name, normalize_base_url, strip_sensitive_keys, strip_url_credentials,
};

/// Provider used when neither the caller nor `LIONAGI_CHAT_PROVIDER` names one.
pub const DEFAULT_CHAT_PROVIDER: &str = "openai";
/// Model used when `LIONAGI_CHAT_MODEL` is unset.
pub const DEFAULT_CHAT_MODEL: &str = "gpt-4.1-mini";

/// Keyword arguments the reference never writes into `kwargs`.
const NEVER_WRITTEN_KWARGS: &[&str] = &["env", "on_spawn", "account_connectors"];

/// `client_kwargs` keys restored by `from_dict`; everything else (proxies,
/// TLS switches, auth, headers, cookies ...) is dropped.
const RESTORABLE_CLIENT_KWARGS: &[&str] = &[
    "timeout",
    "follow_redirects",
    "max_redirects",
    "http1",
    "http2",
    "limits",
];

/// A request model's schema compiled in, parsed once into `cell`.
fn embedded_schema(cell: &'static OnceLock<Value>, text: &'static str) -> &'static Value {
    #[allow(
        clippy::expect_used,
        reason = "compiled-in text, parsed by a test; not input"
    )]
    cell.get_or_init(|| serde_json::from_str(text).expect("embedded schema is valid JSON"))
}

/// The JSON Schema of the reference's OpenAI chat-completions request model,
/// exactly as `to_dict(include_request_options=True)` writes it.
pub fn openai_chat_request_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    embedded_schema(&SCHEMA, include_str!("openai_chat_request_schema.json"))
}

/// The JSON Schema of the reference's Anthropic Messages request model,
/// exactly as `to_dict(include_request_options=True)` writes it.
pub fn anthropic_messages_request_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    embedded_schema(
        &SCHEMA,
        include_str!("anthropic_messages_request_schema.json"),
    )
}

/// How the API key is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuthType {
    /// `Authorization: Bearer <key>`.
    Bearer,
    /// `x-api-key: <key>`.
    XApiKey,
    /// `api-key: <key>` (Azure OpenAI's key header).
    ApiKeyHeader,
    /// No auth header.
    None,
}

impl AuthType {
    /// The serialized name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Bearer => "bearer",
            Self::XApiKey => "x-api-key",
            Self::ApiKeyHeader => "api-key",
            Self::None => "none",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "bearer" => Some(Self::Bearer),
            "x-api-key" => Some(Self::XApiKey),
            "api-key" => Some(Self::ApiKeyHeader),
            "none" => Some(Self::None),
            _ => None,
        }
    }
}

/// The request model of an endpoint: which payload fields are sent, and the
/// schema written under `request_options`.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum RequestOptions {
    /// No request model: every payload key except the internal ones is sent.
    #[default]
    None,
    /// The OpenAI chat-completions request model.
    OpenAiChat,
    /// The Anthropic Messages request model.
    AnthropicMessages,
    /// A schema restored from stored data.
    Custom(Box<Value>),
}

impl RequestOptions {
    /// The JSON Schema, if any.
    pub fn schema(&self) -> Option<&Value> {
        match self {
            Self::None => None,
            Self::OpenAiChat => Some(openai_chat_request_schema()),
            Self::AnthropicMessages => Some(anthropic_messages_request_schema()),
            Self::Custom(v) => Some(v),
        }
    }

    /// The fields the request model accepts (`properties` of the schema,
    /// by name), if there is a request model.
    pub fn fields(&self) -> Option<&Map<String, Value>> {
        self.schema()?.get("properties")?.as_object()
    }

    /// The field names the request model accepts (see [`Self::fields`]).
    pub fn field_names(&self) -> Option<Vec<&str>> {
        Some(self.fields()?.keys().map(String::as_str).collect())
    }
}

/// A number of seconds kept as the JSON number it was given as, so `600`
/// is written back as `600` and `0.5` as `0.5`.
#[derive(Debug, Clone, PartialEq)]
pub struct Seconds(Number);

impl Seconds {
    /// Whole seconds.
    pub fn from_secs(secs: u64) -> Self {
        Self(Number::from(secs))
    }

    /// Fractional seconds; `None` if not finite. Whole values are stored
    /// as integers.
    pub fn from_secs_f64(secs: f64) -> Option<Self> {
        if secs.is_finite() && secs.fract() == 0.0 && secs.abs() < 9.0e15 {
            // exact: integral and within i64's exactly-representable range
            #[allow(clippy::cast_possible_truncation)]
            return Some(Self(Number::from(secs as i64)));
        }
        Number::from_f64(secs).map(Self)
    }

    /// From a `Duration` (whole seconds stay integers).
    pub fn from_duration(d: Duration) -> Self {
        if d.subsec_nanos() == 0 {
            Self::from_secs(d.as_secs())
        } else {
            Self::from_secs_f64(d.as_secs_f64()).unwrap_or_else(|| Self::from_secs(d.as_secs()))
        }
    }

    /// The value in seconds.
    pub fn as_f64(&self) -> f64 {
        self.0.as_f64().unwrap_or(0.0)
    }

    /// As a duration; `None` for zero or negative values ("no limit");
    /// saturated at [`super::limits::MAX_CONFIG_DURATION`].
    pub fn as_duration(&self) -> Option<Duration> {
        super::limits::saturating_duration(self.as_f64())
    }

    /// The JSON number.
    pub fn as_number(&self) -> &Number {
        &self.0
    }
}

/// Optional retry policy of an endpoint (`endpoint.retry_config`).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryConfig {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// Delay before the first retry, seconds.
    pub base_delay: f64,
    /// Cap on any delay, seconds.
    pub max_delay: f64,
    /// Multiplier per retry.
    pub backoff_factor: f64,
    /// Whether random jitter is added.
    pub jitter: bool,
    /// Jitter as a fraction of the delay.
    pub jitter_factor: f64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max_retries: 3,
            base_delay: 1.0,
            max_delay: 60.0,
            backoff_factor: 2.0,
            jitter: true,
            jitter_factor: 0.2,
        }
    }
}

/// Optional circuit breaker of an endpoint (`endpoint.circuit_breaker`).
#[derive(Debug, Clone, PartialEq)]
pub struct CircuitBreakerConfig {
    /// Consecutive failures that open the circuit.
    pub failure_threshold: u32,
    /// Seconds before a half-open probe.
    pub recovery_time: f64,
    /// Calls allowed while half-open.
    pub half_open_max_calls: u32,
    /// Optional name.
    pub name: Option<String>,
}

impl Default for CircuitBreakerConfig {
    fn default() -> Self {
        Self {
            failure_threshold: 5,
            recovery_time: 30.0,
            half_open_max_calls: 1,
            name: None,
        }
    }
}

/// Rate-limiter settings (`processor_config`, providers.md §6).
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessorConfig {
    /// Calls started per processing pass (100 for API, 10 for CLI).
    pub queue_capacity: u64,
    /// Replenisher period when `interval` is unset; must be > 0.
    pub capacity_refresh_time: Seconds,
    /// Replenisher period.
    pub interval: Option<Seconds>,
    /// Requests per period.
    pub limit_requests: Option<u64>,
    /// Estimated request tokens per period.
    pub limit_tokens: Option<u64>,
    /// Simultaneous in-flight calls.
    pub concurrency_limit: Option<u64>,
}

impl Default for ProcessorConfig {
    fn default() -> Self {
        Self::api()
    }
}

impl ProcessorConfig {
    /// Defaults of API providers: 100 / 60 s, no limits.
    pub fn api() -> Self {
        Self {
            queue_capacity: 100,
            capacity_refresh_time: Seconds::from_secs(60),
            interval: None,
            limit_requests: None,
            limit_tokens: None,
            concurrency_limit: None,
        }
    }

    /// Defaults of CLI providers: 10 / 60 s, concurrency 3.
    pub fn cli() -> Self {
        Self {
            queue_capacity: 10,
            concurrency_limit: Some(3),
            ..Self::api()
        }
    }

    /// The effective replenisher period.
    pub fn period(&self) -> Duration {
        self.interval
            .as_ref()
            .and_then(Seconds::as_duration)
            .or_else(|| self.capacity_refresh_time.as_duration())
            .unwrap_or(Duration::from_secs(60))
    }

    fn validate(&self) -> Result<(), ModelConfigError> {
        if self.capacity_refresh_time.as_f64() <= 0.0 {
            return Err(ModelConfigError::invalid(
                "processor_config.capacity_refresh_time",
                "must be greater than zero",
            ));
        }
        if self.interval.as_ref().is_some_and(|i| i.as_f64() <= 0.0) {
            return Err(ModelConfigError::invalid(
                "processor_config.interval",
                "must be greater than zero",
            ));
        }
        Ok(())
    }

    fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("queue_capacity".into(), self.queue_capacity.into());
        m.insert(
            "capacity_refresh_time".into(),
            self.capacity_refresh_time.0.clone().into(),
        );
        m.insert(
            "interval".into(),
            opt_number(self.interval.as_ref().map(|s| s.0.clone())),
        );
        m.insert("limit_requests".into(), self.limit_requests.into());
        m.insert("limit_tokens".into(), self.limit_tokens.into());
        m.insert("concurrency_limit".into(), self.concurrency_limit.into());
        Value::Object(m)
    }
}

fn opt_number(n: Option<Number>) -> Value {
    n.map_or(Value::Null, Value::Number)
}

/// The endpoint configuration (`endpoint.config`). Read-only from outside;
/// change it through `ModelConfig`'s setters.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EndpointConfig {
    /// `"{provider}_{endpoint}"`, or `"openai_compatible_chat"`.
    pub name: String,
    /// Lower-cased provider name.
    pub provider: String,
    /// Base URL (absent for a known provider with an unknown endpoint).
    pub base_url: Option<String>,
    /// Path appended to the base URL.
    pub endpoint: String,
    /// Optional endpoint parameters.
    pub endpoint_params: Option<Value>,
    /// HTTP method.
    pub method: String,
    /// URL template parameters.
    pub params: Map<String, Value>,
    /// Request content type.
    pub content_type: Option<String>,
    /// How the key is sent.
    pub auth_type: AuthType,
    /// Headers sent with every request (string values).
    pub default_headers: Map<String, Value>,
    /// Request model.
    pub request_options: RequestOptions,
    /// Per-phase HTTP timeout; <= 0 means none.
    pub timeout: Seconds,
    /// Total HTTP attempts.
    pub max_retries: u32,
    /// Whether an `Idempotency-Key` header is added.
    pub idempotent_retries: bool,
    /// Whether this is the generic OpenAI-compatible endpoint.
    pub openai_compatible: bool,
    /// Whether request tokens are estimated for rate limiting.
    pub requires_tokens: bool,
    /// Optional context window.
    pub context_window: Option<u64>,
    /// Anthropic prompt caching.
    pub prompt_caching: bool,
    /// Default payload fields (`model` first).
    pub kwargs: Map<String, Value>,
    /// HTTP client options.
    pub client_kwargs: Map<String, Value>,
    /// Whether loopback targets are allowed (and only those).
    pub allow_local_network: bool,
    /// Pydantic alias flag of the reference; carried through.
    pub serialize_by_alias: bool,
}

impl EndpointConfig {
    fn registered(spec: &ProviderSpec, ep: &EndpointSpec, provider: &str) -> Self {
        Self {
            name: format!("{}_{}", spec.name, ep.path),
            provider: provider.to_owned(),
            base_url: ep.base_url.map(str::to_owned),
            endpoint: ep.path.to_owned(),
            endpoint_params: None,
            method: "POST".into(),
            params: Map::new(),
            content_type: Some("application/json".into()),
            auth_type: ep.auth_type,
            default_headers: ep
                .default_headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Value::from(*v)))
                .collect(),
            request_options: match ep.request_model {
                RequestModel::OpenAiChat => RequestOptions::OpenAiChat,
                RequestModel::AnthropicMessages => RequestOptions::AnthropicMessages,
                _ => RequestOptions::None,
            },
            timeout: Seconds::from_secs(spec.default_timeout_secs()),
            max_retries: 3,
            idempotent_retries: false,
            openai_compatible: false,
            requires_tokens: ep.requires_tokens,
            context_window: None,
            prompt_caching: false,
            kwargs: Map::new(),
            client_kwargs: Map::new(),
            allow_local_network: ep.allow_local_network,
            serialize_by_alias: false,
        }
    }

    fn generic(provider: &str, endpoint: &str, base_url: Option<String>) -> Self {
        Self {
            name: "openai_compatible_chat".into(),
            provider: provider.to_owned(),
            base_url,
            endpoint: endpoint.to_owned(),
            endpoint_params: None,
            method: "POST".into(),
            params: Map::new(),
            content_type: Some("application/json".into()),
            auth_type: AuthType::Bearer,
            default_headers: Map::new(),
            request_options: RequestOptions::None,
            timeout: Seconds::from_secs(300),
            max_retries: 3,
            idempotent_retries: false,
            openai_compatible: true,
            requires_tokens: true,
            context_window: None,
            prompt_caching: false,
            kwargs: Map::new(),
            client_kwargs: Map::new(),
            allow_local_network: false,
            serialize_by_alias: false,
        }
    }

    fn to_value(&self, include_request_options: bool) -> Value {
        let mut m = Map::new();
        m.insert("name".into(), self.name.clone().into());
        m.insert("provider".into(), self.provider.clone().into());
        if let Some(url) = &self.base_url {
            m.insert("base_url".into(), url.clone().into());
        }
        m.insert("endpoint".into(), self.endpoint.clone().into());
        if let Some(p) = self.endpoint_params.as_ref().filter(|p| !p.is_null()) {
            m.insert("endpoint_params".into(), p.clone());
        }
        m.insert("method".into(), self.method.clone().into());
        m.insert("params".into(), Value::Object(self.params.clone()));
        if let Some(ct) = &self.content_type {
            m.insert("content_type".into(), ct.clone().into());
        }
        m.insert("auth_type".into(), self.auth_type.as_str().into());
        m.insert(
            "default_headers".into(),
            Value::Object(self.default_headers.clone()),
        );
        if include_request_options {
            if let Some(schema) = self.request_options.schema() {
                m.insert("request_options".into(), schema.clone());
            }
        }
        m.insert("timeout".into(), self.timeout.0.clone().into());
        m.insert("max_retries".into(), self.max_retries.into());
        m.insert("idempotent_retries".into(), self.idempotent_retries.into());
        m.insert("openai_compatible".into(), self.openai_compatible.into());
        m.insert("requires_tokens".into(), self.requires_tokens.into());
        if let Some(cw) = self.context_window {
            m.insert("context_window".into(), cw.into());
        }
        if self.prompt_caching {
            m.insert("prompt_caching".into(), true.into());
        }
        let kwargs: Map<String, Value> = self
            .kwargs
            .iter()
            .filter(|(k, _)| !NEVER_WRITTEN_KWARGS.contains(&k.as_str()) && !is_sensitive_name(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        m.insert("kwargs".into(), Value::Object(kwargs));
        m.insert(
            "client_kwargs".into(),
            Value::Object(self.client_kwargs.clone()),
        );
        m.insert(
            "allow_local_network".into(),
            self.allow_local_network.into(),
        );
        m.insert("serialize_by_alias".into(), self.serialize_by_alias.into());
        Value::Object(m)
    }
}

/// The plain-data configuration of a chat model: exactly what the reference's
/// `iModel.to_dict` writes. Holds no API key.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    id: Uuid,
    created_at: f64,
    provider_metadata: Map<String, Value>,
    retry_config: Option<Box<RetryConfig>>,
    circuit_breaker: Option<Box<CircuitBreakerConfig>>,
    endpoint: Box<EndpointConfig>,
    processor: Box<ProcessorConfig>,
    max_input_tokens: Option<u64>,
    input_token_scale: f64,
}

/// Current time as float seconds since the Unix epoch.
pub fn now_timestamp() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A setting from the environment or the dotenv files (see
/// [`super::settings::setting`]), trimmed, if non-empty.
fn env_nonempty(name: &str) -> Option<String> {
    super::settings::setting(name)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

impl ModelConfig {
    /// A builder for anything beyond provider and model.
    pub fn builder() -> ModelConfigBuilder {
        ModelConfigBuilder::default()
    }

    /// The registered defaults of `provider`'s chat endpoint with `model`.
    pub fn new(provider: &str, model: &str) -> Result<Self, ModelConfigError> {
        Self::builder().provider(provider).model(model).build()
    }

    /// `"prov/model"`, or a bare model name with the provider from
    /// `LIONAGI_CHAT_PROVIDER` (default `openai`).
    pub fn from_model_string(spec: &str) -> Result<Self, ModelConfigError> {
        Self::builder().model(spec).build()
    }

    /// The default chat model: `LIONAGI_CHAT_PROVIDER` / `LIONAGI_CHAT_MODEL`,
    /// defaults `openai` / `gpt-4.1-mini`.
    pub fn default_chat() -> Result<Self, ModelConfigError> {
        let provider =
            env_nonempty("LIONAGI_CHAT_PROVIDER").unwrap_or_else(|| DEFAULT_CHAT_PROVIDER.into());
        let model = env_nonempty("LIONAGI_CHAT_MODEL").unwrap_or_else(|| DEFAULT_CHAT_MODEL.into());
        Self::new(&provider, &model)
    }

    /// Restores a configuration written by `to_dict` (serialization.md §7.1).
    ///
    /// Never restores `allow_local_network = true` (for any provider, even
    /// one whose registered address is local), API keys,
    /// credential-like or proxy headers/settings, or `user:password@` in URLs;
    /// restores only the six processor limits; keeps `id`, `created_at` and
    /// `provider_metadata` (minus credential-like keys).
    pub fn from_dict(value: &Value) -> Result<Self, ModelConfigError> {
        parse::from_dict(value)
    }

    /// The reference's `iModel.to_dict` shape and key order.
    pub fn to_dict(&self, include_request_options: bool, include_processor_config: bool) -> Value {
        let mut m = Map::new();
        m.insert("id".into(), self.id.to_string().into());
        m.insert("created_at".into(), self.created_at.into());
        m.insert(
            "provider_metadata".into(),
            Value::Object(self.provider_metadata.clone()),
        );
        let mut ep = Map::new();
        ep.insert(
            "retry_config".into(),
            self.retry_config
                .as_deref()
                .map_or(Value::Null, retry_value),
        );
        ep.insert(
            "circuit_breaker".into(),
            self.circuit_breaker
                .as_deref()
                .map_or(Value::Null, breaker_value),
        );
        ep.insert(
            "config".into(),
            self.endpoint.to_value(include_request_options),
        );
        m.insert("endpoint".into(), Value::Object(ep));
        if include_processor_config {
            m.insert("processor_config".into(), self.processor.to_value());
        }
        if let Some(n) = self.max_input_tokens {
            m.insert("max_input_tokens".into(), n.into());
        }
        if self.input_token_scale != 1.0 {
            m.insert("input_token_scale".into(), self.input_token_scale.into());
        }
        Value::Object(m)
    }

    /// Lower-cased provider name as configured.
    pub fn provider(&self) -> &str {
        &self.endpoint.provider
    }

    /// `kwargs.model`, if set.
    pub fn model_name(&self) -> Option<&str> {
        self.endpoint.kwargs.get("model").and_then(Value::as_str)
    }

    /// The model's id.
    pub fn id(&self) -> Uuid {
        self.id
    }

    /// The same configuration under a new id and creation time (a model
    /// for another conversation; see `ChatModel::fork`).
    pub fn forked(&self) -> Self {
        let mut c = self.clone();
        c.id = Uuid::new_v4();
        c.created_at = now_timestamp();
        c
    }

    /// Creation time, float seconds since the epoch.
    pub fn created_at(&self) -> f64 {
        self.created_at
    }

    /// The endpoint configuration.
    pub fn endpoint(&self) -> &EndpointConfig {
        &self.endpoint
    }

    /// Rate-limiter settings.
    pub fn processor_config(&self) -> &ProcessorConfig {
        &self.processor
    }

    /// Optional retry policy.
    pub fn retry_config(&self) -> Option<&RetryConfig> {
        self.retry_config.as_deref()
    }

    /// Optional circuit breaker.
    pub fn circuit_breaker(&self) -> Option<&CircuitBreakerConfig> {
        self.circuit_breaker.as_deref()
    }

    /// Provider metadata (`served_model` after a call).
    pub fn provider_metadata(&self) -> &Map<String, Value> {
        &self.provider_metadata
    }

    /// Input-token cap.
    pub fn max_input_tokens(&self) -> Option<u64> {
        self.max_input_tokens
    }

    /// Calibrated input-token scale (>= 1.0).
    pub fn input_token_scale(&self) -> f64 {
        self.input_token_scale
    }

    /// Base URL, if any.
    pub fn base_url(&self) -> Option<&str> {
        self.endpoint.base_url.as_deref()
    }

    /// Default payload fields.
    pub fn kwargs(&self) -> &Map<String, Value> {
        &self.endpoint.kwargs
    }

    /// Whether loopback targets are allowed.
    pub fn allow_local_network(&self) -> bool {
        self.endpoint.allow_local_network
    }

    /// The registered provider, if any.
    pub fn provider_spec(&self) -> Option<&'static ProviderSpec> {
        lookup_provider(&self.endpoint.provider)
    }

    /// The wire protocol of the endpoint: the registry's word for a known
    /// provider's endpoint, chat completions for an unregistered provider
    /// (a generic OpenAI-compatible server), [`WireProtocol::Other`] for a
    /// known provider's unregistered endpoint.
    pub fn wire_protocol(&self) -> WireProtocol {
        match self.provider_spec() {
            None => WireProtocol::OpenAiChat,
            Some(spec) => spec
                .endpoint(&self.endpoint.endpoint)
                .map_or(WireProtocol::Other, |e| e.protocol),
        }
    }

    /// Whether this is a CLI (subprocess) model; such models are copied by
    /// `Branch::clone`.
    pub fn is_cli(&self) -> bool {
        self.provider_spec()
            .is_some_and(|s| s.kind == ProviderKind::Cli)
    }

    /// The environment variable holding this provider's API key.
    pub fn key_env(&self) -> Option<&'static str> {
        self.provider_spec().and_then(|s| s.key_env)
    }

    /// Whether the base URL is the provider's registered one (scheme/host
    /// case, default port and trailing slash normalised). Only then may the
    /// environment key be attached to a restored model.
    pub fn base_url_is_registered(&self) -> bool {
        let Some(spec) = self.provider_spec() else {
            return false;
        };
        let Some(ep) = spec.endpoint(&self.endpoint.endpoint) else {
            return false;
        };
        let Some(cur) = &self.endpoint.base_url else {
            return false;
        };
        let cur = normalize_base_url(cur);
        ep.base_url
            .into_iter()
            .chain(ep.base_url_templates.iter().copied())
            .any(|reg| url_matches_template(&normalize_base_url(reg), &cur))
    }

    /// The request URL: `base_url + "/" + endpoint`, a query of the base
    /// URL kept after the path (Azure's
    /// `.../openai/deployments/{deployment}?api-version=...`).
    pub fn url(&self) -> Option<String> {
        let base = self.endpoint.base_url.as_deref()?;
        let (base, query) = base.split_once('?').unwrap_or((base, ""));
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        Some(format!(
            "{}/{}{query}",
            base.trim_end_matches('/'),
            self.endpoint.endpoint
        ))
    }

    /// Replaces the base URL. URLs carrying credentials are refused.
    pub fn set_base_url(&mut self, url: &str) -> Result<(), ModelConfigError> {
        check_url(url)?;
        self.endpoint.base_url = Some(url.to_owned());
        Ok(())
    }

    /// Sets a default payload field (`temperature`, `max_tokens` ...).
    /// Credential-like names are refused.
    pub fn set_kwarg(&mut self, key: &str, value: Value) -> Result<(), ModelConfigError> {
        check_kwarg(key)?;
        self.endpoint.kwargs.insert(key.to_owned(), value);
        Ok(())
    }

    /// Removes a default payload field.
    pub fn remove_kwarg(&mut self, key: &str) -> Option<Value> {
        self.endpoint.kwargs.shift_remove(key)
    }

    /// Allows (only) loopback targets, or forbids local targets again.
    pub fn set_allow_local_network(&mut self, allow: bool) {
        self.endpoint.allow_local_network = allow;
    }

    /// Per-phase HTTP timeout; zero means none.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.endpoint.timeout = Seconds::from_duration(timeout);
    }

    /// Total HTTP attempts when no retry configuration is set.
    pub fn set_max_retries(&mut self, attempts: u32) {
        self.endpoint.max_retries = attempts;
    }

    /// Sets a default header. Credential-like and proxy names are refused:
    /// keys belong to the secret store of `branch-models`.
    pub fn set_default_header(&mut self, name: &str, value: &str) -> Result<(), ModelConfigError> {
        if is_sensitive_name(name) {
            return Err(ModelConfigError::invalid(
                "endpoint.config.default_headers",
                "credential-like or proxy headers are not configuration",
            ));
        }
        self.endpoint
            .default_headers
            .insert(name.to_owned(), value.into());
        Ok(())
    }

    /// Replaces the rate-limiter settings.
    pub fn set_processor_config(&mut self, p: ProcessorConfig) -> Result<(), ModelConfigError> {
        p.validate()?;
        *self.processor = p;
        Ok(())
    }

    /// Sets or clears the input-token cap (must be positive).
    pub fn set_max_input_tokens(&mut self, cap: Option<u64>) -> Result<(), ModelConfigError> {
        if cap == Some(0) {
            return Err(ModelConfigError::invalid(
                "max_input_tokens",
                "must be positive",
            ));
        }
        self.max_input_tokens = cap;
        Ok(())
    }

    /// Raises the input-token scale (it never falls below its current value
    /// or 1.0).
    pub fn raise_input_token_scale(&mut self, scale: f64) {
        if scale.is_finite() && scale > self.input_token_scale {
            self.input_token_scale = scale;
        }
    }

    /// Sets or clears the retry policy.
    pub fn set_retry_config(&mut self, retry: Option<RetryConfig>) {
        self.retry_config = retry.map(Box::new);
    }

    /// Sets or clears the circuit breaker.
    pub fn set_circuit_breaker(&mut self, breaker: Option<CircuitBreakerConfig>) {
        self.circuit_breaker = breaker.map(Box::new);
    }

    /// Records the model name the provider reported (`served_model`).
    pub fn record_served_model(&mut self, model: &str) {
        self.provider_metadata
            .insert("served_model".into(), model.into());
    }

    /// Sets a provider-metadata entry; credential-like keys are ignored.
    pub fn set_provider_metadata(&mut self, key: &str, value: Value) {
        if !is_sensitive_name(key) {
            let value = match value {
                Value::Object(m) => Value::Object(strip_sensitive_keys(&m)),
                other => other,
            };
            self.provider_metadata.insert(key.to_owned(), value);
        }
    }

    /// Gives this configuration a fresh id and creation time (a copy that is
    /// a distinct model).
    pub fn renew_identity(&mut self) {
        self.id = Uuid::new_v4();
        self.created_at = now_timestamp();
    }
}

fn retry_value(r: &RetryConfig) -> Value {
    let mut m = Map::new();
    m.insert("max_retries".into(), r.max_retries.into());
    m.insert("base_delay".into(), r.base_delay.into());
    m.insert("max_delay".into(), r.max_delay.into());
    m.insert("backoff_factor".into(), r.backoff_factor.into());
    m.insert("jitter".into(), r.jitter.into());
    m.insert("jitter_factor".into(), r.jitter_factor.into());
    Value::Object(m)
}

fn breaker_value(c: &CircuitBreakerConfig) -> Value {
    let mut m = Map::new();
    m.insert("failure_threshold".into(), c.failure_threshold.into());
    m.insert("recovery_time".into(), c.recovery_time.into());
    m.insert("half_open_max_calls".into(), c.half_open_max_calls.into());
    m.insert(
        "name".into(),
        c.name.clone().map_or(Value::Null, Value::String),
    );
    Value::Object(m)
}

fn check_url(url: &str) -> Result<(), ModelConfigError> {
    if url.trim().is_empty() {
        return Err(ModelConfigError::invalid("base_url", "must not be empty"));
    }
    if strip_url_credentials(url) != url {
        return Err(ModelConfigError::invalid(
            "base_url",
            "must not carry credentials (user:password@ or key query parameters)",
        ));
    }
    Ok(())
}

fn check_kwarg(key: &str) -> Result<(), ModelConfigError> {
    if is_sensitive_name(key) {
        return Err(ModelConfigError::invalid(
            "kwargs",
            "credential-like or proxy settings are not configuration; give API keys to branch-models",
        ));
    }
    Ok(())
}

/// Builds a [`ModelConfig`] like the reference's `iModel(...)` constructor.
#[derive(Debug, Clone, Default)]
pub struct ModelConfigBuilder {
    provider: Option<String>,
    model: Option<String>,
    endpoint: Option<String>,
    base_url: Option<String>,
    kwargs: Map<String, Value>,
    headers: Vec<(String, String)>,
    allow_local_network: Option<bool>,
    timeout: Option<Seconds>,
    max_retries: Option<u32>,
    processor: Option<ProcessorConfig>,
    max_input_tokens: Option<u64>,
    retry_config: Option<RetryConfig>,
    circuit_breaker: Option<CircuitBreakerConfig>,
    id: Option<Uuid>,
    created_at: Option<f64>,
}

impl ModelConfigBuilder {
    /// Provider name (case-insensitive, aliases honoured).
    pub fn provider(mut self, provider: &str) -> Self {
        self.provider = Some(provider.to_owned());
        self
    }

    /// Model name; `"prov/name"` selects the provider when none is given.
    pub fn model(mut self, model: &str) -> Self {
        self.model = Some(model.to_owned());
        self
    }

    /// Endpoint path or alias (default `"chat"`).
    pub fn endpoint(mut self, endpoint: &str) -> Self {
        self.endpoint = Some(endpoint.to_owned());
        self
    }

    /// Base URL overriding the registered one; required for unknown
    /// providers (generic OpenAI-compatible endpoint).
    pub fn base_url(mut self, url: &str) -> Self {
        self.base_url = Some(url.to_owned());
        self
    }

    /// A default payload field (`temperature`, `max_tokens` ...).
    pub fn kwarg(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.kwargs.insert(key.to_owned(), value.into());
        self
    }

    /// A default header (not credentials).
    pub fn default_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Allow loopback targets (and only those).
    pub fn allow_local_network(mut self, allow: bool) -> Self {
        self.allow_local_network = Some(allow);
        self
    }

    /// Per-phase HTTP timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(Seconds::from_duration(timeout));
        self
    }

    /// Total HTTP attempts.
    pub fn max_retries(mut self, attempts: u32) -> Self {
        self.max_retries = Some(attempts);
        self
    }

    /// Rate-limiter settings.
    pub fn processor_config(mut self, p: ProcessorConfig) -> Self {
        self.processor = Some(p);
        self
    }

    /// Queue capacity per processing pass.
    pub fn queue_capacity(mut self, n: u64) -> Self {
        self.processor_mut().queue_capacity = n;
        self
    }

    /// Capacity refresh period.
    pub fn capacity_refresh_time(mut self, d: Duration) -> Self {
        self.processor_mut().capacity_refresh_time = Seconds::from_duration(d);
        self
    }

    /// Replenisher period.
    pub fn interval(mut self, d: Duration) -> Self {
        self.processor_mut().interval = Some(Seconds::from_duration(d));
        self
    }

    /// Requests per period.
    pub fn limit_requests(mut self, n: u64) -> Self {
        self.processor_mut().limit_requests = Some(n);
        self
    }

    /// Estimated tokens per period.
    pub fn limit_tokens(mut self, n: u64) -> Self {
        self.processor_mut().limit_tokens = Some(n);
        self
    }

    /// In-flight calls.
    pub fn concurrency_limit(mut self, n: u64) -> Self {
        self.processor_mut().concurrency_limit = Some(n);
        self
    }

    /// Input-token cap.
    pub fn max_input_tokens(mut self, n: u64) -> Self {
        self.max_input_tokens = Some(n);
        self
    }

    /// Retry policy.
    pub fn retry_config(mut self, r: RetryConfig) -> Self {
        self.retry_config = Some(r);
        self
    }

    /// Circuit breaker.
    pub fn circuit_breaker(mut self, c: CircuitBreakerConfig) -> Self {
        self.circuit_breaker = Some(c);
        self
    }

    /// Explicit id (otherwise a new v4 UUID).
    pub fn id(mut self, id: Uuid) -> Self {
        self.id = Some(id);
        self
    }

    /// Explicit creation time (otherwise now).
    pub fn created_at(mut self, t: f64) -> Self {
        self.created_at = Some(t);
        self
    }

    fn processor_mut(&mut self) -> &mut ProcessorConfig {
        self.processor.get_or_insert_with(ProcessorConfig::api)
    }

    /// Resolves the provider and endpoint (providers.md §2) and validates.
    pub fn build(self) -> Result<ModelConfig, ModelConfigError> {
        let mut model = self.model.clone();
        let mut kwargs = self.kwargs;
        if model.is_none() {
            if let Some(Value::String(m)) = kwargs.get("model") {
                model = Some(m.clone());
            }
        }
        let provider = match (self.provider, model.as_deref()) {
            (Some(p), _) => p,
            (None, Some(m)) if m.contains('/') => {
                let (p, name) = m.split_once('/').unwrap_or_default();
                let p = p.to_owned();
                model = Some(name.to_owned());
                p
            }
            (None, _) => env_nonempty("LIONAGI_CHAT_PROVIDER")
                .unwrap_or_else(|| DEFAULT_CHAT_PROVIDER.into()),
        };
        let provider = provider.trim().to_ascii_lowercase();
        if provider.is_empty() {
            return Err(ModelConfigError::invalid("provider", "must not be empty"));
        }
        if model.as_deref().is_some_and(|m| m.trim().is_empty()) {
            return Err(ModelConfigError::invalid("model", "must not be empty"));
        }
        if let Some(url) = &self.base_url {
            check_url(url)?;
        }
        for key in kwargs.keys() {
            check_kwarg(key)?;
        }
        let endpoint_arg = self.endpoint.unwrap_or_else(|| "chat".into());
        let spec = lookup_provider(&provider);
        let mut ep = match spec {
            Some(spec) => match spec.endpoint(&endpoint_arg) {
                Some(es) => EndpointConfig::registered(spec, es, &provider),
                None => EndpointConfig::generic(&provider, &endpoint_arg, None),
            },
            None if self.base_url.is_some() => {
                EndpointConfig::generic(&provider, &endpoint_arg, None)
            }
            None => return Err(ModelConfigError::UnknownProvider),
        };
        if let Some(url) = self.base_url {
            ep.base_url = Some(url);
        }
        if ep.base_url.is_none()
            && spec
                .and_then(|s| s.endpoint(&endpoint_arg))
                .is_some_and(|e| !e.base_url_templates.is_empty())
        {
            return Err(ModelConfigError::invalid(
                "base_url",
                "this provider's URL names your own resource; give it (for Azure OpenAI: https://{resource}.openai.azure.com/openai/v1)",
            ));
        }
        let mut ordered = Map::new();
        if let Some(m) = model {
            ordered.insert("model".into(), m.into());
        }
        kwargs.shift_remove("model");
        ordered.extend(kwargs);
        ep.kwargs = ordered;
        for (name, value) in self.headers {
            if is_sensitive_name(&name) {
                return Err(ModelConfigError::invalid(
                    "default_headers",
                    "credential-like or proxy headers are not configuration",
                ));
            }
            ep.default_headers.insert(name, value.into());
        }
        if let Some(allow) = self.allow_local_network {
            ep.allow_local_network = allow;
        }
        if let Some(t) = self.timeout {
            ep.timeout = t;
        }
        if let Some(n) = self.max_retries {
            ep.max_retries = n;
        }
        let is_cli = spec.is_some_and(|s| s.kind == ProviderKind::Cli);
        let processor = self.processor.unwrap_or_else(|| {
            if is_cli {
                ProcessorConfig::cli()
            } else {
                ProcessorConfig::api()
            }
        });
        processor.validate()?;
        if self.max_input_tokens == Some(0) {
            return Err(ModelConfigError::invalid(
                "max_input_tokens",
                "must be positive",
            ));
        }
        if self.created_at.is_some_and(|t| !t.is_finite()) {
            return Err(ModelConfigError::invalid(
                "created_at",
                "must be a finite number",
            ));
        }
        Ok(ModelConfig {
            id: self.id.unwrap_or_else(Uuid::new_v4),
            created_at: self.created_at.unwrap_or_else(now_timestamp),
            provider_metadata: Map::new(),
            retry_config: self.retry_config.map(Box::new),
            circuit_breaker: self.circuit_breaker.map(Box::new),
            endpoint: Box::new(ep),
            processor: Box::new(processor),
            max_input_tokens: self.max_input_tokens,
            input_token_scale: 1.0,
        })
    }
}

mod parse {
    //! `from_dict`: hand-written so that errors never echo values.

    use super::super::limits::MAX_CONFIG_SECONDS;
    use super::*;

    struct Obj<'a> {
        map: &'a Map<String, Value>,
        path: &'a str,
    }

    impl<'a> Obj<'a> {
        fn field(&self, key: &str) -> String {
            if self.path.is_empty() {
                key.to_owned()
            } else {
                format!("{}.{key}", self.path)
            }
        }

        /// The value, treating `null` as absent.
        fn get(&self, key: &str) -> Option<&'a Value> {
            self.map.get(key).filter(|v| !v.is_null())
        }

        fn str(&self, key: &str) -> Result<Option<&'a str>, ModelConfigError> {
            self.get(key)
                .map(|v| {
                    v.as_str().ok_or_else(|| {
                        ModelConfigError::invalid(self.field(key), "expected a string")
                    })
                })
                .transpose()
        }

        fn bool(&self, key: &str) -> Result<Option<bool>, ModelConfigError> {
            self.get(key)
                .map(|v| {
                    v.as_bool().ok_or_else(|| {
                        ModelConfigError::invalid(self.field(key), "expected a boolean")
                    })
                })
                .transpose()
        }

        fn u64(&self, key: &str) -> Result<Option<u64>, ModelConfigError> {
            self.get(key)
                .map(|v| {
                    v.as_u64().ok_or_else(|| {
                        ModelConfigError::invalid(
                            self.field(key),
                            "expected a non-negative integer",
                        )
                    })
                })
                .transpose()
        }

        fn u32(&self, key: &str) -> Result<Option<u32>, ModelConfigError> {
            self.u64(key)?
                .map(|n| {
                    u32::try_from(n).map_err(|_| {
                        ModelConfigError::invalid(self.field(key), "integer too large")
                    })
                })
                .transpose()
        }

        fn f64(&self, key: &str) -> Result<Option<f64>, ModelConfigError> {
            self.get(key)
                .map(|v| {
                    v.as_f64().ok_or_else(|| {
                        ModelConfigError::invalid(self.field(key), "expected a number")
                    })
                })
                .transpose()
        }

        /// A number of seconds, at most [`MAX_CONFIG_SECONDS`] (zero and
        /// negative values keep their meaning, "none").
        fn seconds(&self, key: &str) -> Result<Option<Seconds>, ModelConfigError> {
            self.get(key)
                .map(|v| match v {
                    Value::Number(n) if n.as_f64().is_some_and(|s| s <= MAX_CONFIG_SECONDS) => {
                        Ok(Seconds(n.clone()))
                    }
                    Value::Number(_) => Err(ModelConfigError::invalid(
                        self.field(key),
                        "must be at most 2592000 seconds (30 days)",
                    )),
                    _ => Err(ModelConfigError::invalid(
                        self.field(key),
                        "expected a number",
                    )),
                })
                .transpose()
        }

        fn map(&self, key: &str) -> Result<Option<&'a Map<String, Value>>, ModelConfigError> {
            self.get(key)
                .map(|v| {
                    v.as_object().ok_or_else(|| {
                        ModelConfigError::invalid(self.field(key), "expected an object")
                    })
                })
                .transpose()
        }
    }

    pub(super) fn from_dict(value: &Value) -> Result<ModelConfig, ModelConfigError> {
        let map = value
            .as_object()
            .ok_or_else(|| ModelConfigError::invalid("<model>", "expected a JSON object"))?;
        let root = Obj { map, path: "" };
        let endpoint = root
            .map("endpoint")?
            .ok_or_else(|| ModelConfigError::missing("endpoint"))?;
        let endpoint = Obj {
            map: endpoint,
            path: "endpoint",
        };
        let cfg = endpoint
            .map("config")?
            .ok_or_else(|| ModelConfigError::missing("endpoint.config"))?;
        let cfg = Obj {
            map: cfg,
            path: "endpoint.config",
        };

        let provider = cfg
            .str("provider")?
            .ok_or_else(|| ModelConfigError::missing("endpoint.config.provider"))?
            .trim()
            .to_ascii_lowercase();
        if provider.is_empty() {
            return Err(ModelConfigError::invalid(
                "endpoint.config.provider",
                "must not be empty",
            ));
        }
        let path = cfg.str("endpoint")?.unwrap_or("chat");
        let spec = lookup_provider(&provider);
        let es = spec.and_then(|s| s.endpoint(path));
        let mut ep = match (spec, es) {
            (Some(s), Some(e)) => EndpointConfig::registered(s, e, &provider),
            _ => EndpointConfig::generic(&provider, path, None),
        };
        ep.endpoint = path.to_owned();
        if let Some(name) = cfg.str("name")? {
            ep.name = name.to_owned();
        }
        if let Some(url) = cfg.str("base_url")? {
            ep.base_url = Some(strip_url_credentials(url));
        }
        if let Some(p) = cfg.get("endpoint_params") {
            ep.endpoint_params = Some(match p {
                Value::Object(m) => Value::Object(strip_sensitive_keys(m)),
                other => other.clone(),
            });
        }
        if let Some(method) = cfg.str("method")? {
            ep.method = method.to_ascii_uppercase();
        }
        if let Some(params) = cfg.map("params")? {
            ep.params = strip_sensitive_keys(params);
        }
        if let Some(ct) = cfg.str("content_type")? {
            ep.content_type = Some(ct.to_owned());
        }
        if let Some(auth) = cfg.str("auth_type")? {
            ep.auth_type = AuthType::parse(auth).ok_or_else(|| {
                ModelConfigError::invalid(
                    "endpoint.config.auth_type",
                    "expected \"bearer\", \"x-api-key\", \"api-key\" or \"none\"",
                )
            })?;
        }
        if let Some(headers) = cfg.map("default_headers")? {
            let mut kept = Map::new();
            for (name, value) in headers {
                if is_sensitive_name(name) || value.is_null() {
                    continue;
                }
                if !value.is_string() {
                    return Err(ModelConfigError::invalid(
                        "endpoint.config.default_headers",
                        "header values must be strings",
                    ));
                }
                kept.insert(name.clone(), value.clone());
            }
            ep.default_headers = kept;
        }
        if let Some(ro) = cfg.get("request_options") {
            if !ro.is_object() {
                return Err(ModelConfigError::invalid(
                    "endpoint.config.request_options",
                    "expected a JSON schema object",
                ));
            }
            ep.request_options = if ro == openai_chat_request_schema() {
                RequestOptions::OpenAiChat
            } else if ro == anthropic_messages_request_schema() {
                RequestOptions::AnthropicMessages
            } else {
                RequestOptions::Custom(Box::new(ro.clone()))
            };
        }
        if let Some(t) = cfg.seconds("timeout")? {
            ep.timeout = t;
        }
        if let Some(n) = cfg.u32("max_retries")? {
            ep.max_retries = n;
        }
        if let Some(b) = cfg.bool("idempotent_retries")? {
            ep.idempotent_retries = b;
        }
        if let Some(b) = cfg.bool("openai_compatible")? {
            ep.openai_compatible = b;
        }
        if let Some(b) = cfg.bool("requires_tokens")? {
            ep.requires_tokens = b;
        }
        if let Some(n) = cfg.u64("context_window")? {
            ep.context_window = Some(n);
        }
        if let Some(b) = cfg.bool("prompt_caching")? {
            ep.prompt_caching = b;
        }
        if let Some(kwargs) = cfg.map("kwargs")? {
            ep.kwargs = kwargs
                .iter()
                .filter(|(k, _)| {
                    !is_sensitive_name(k) && !NEVER_WRITTEN_KWARGS.contains(&k.as_str())
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
        }
        if let Some(client) = cfg.map("client_kwargs")? {
            ep.client_kwargs = client
                .iter()
                .filter(|(k, _)| RESTORABLE_CLIENT_KWARGS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
        }
        if let Some(b) = cfg.bool("serialize_by_alias")? {
            ep.serialize_by_alias = b;
        }
        // Local-network permission is never taken from data, whatever the
        // provider: a stored `true` (or a provider whose registered address
        // is local, such as Ollama) would let a file make this host call its
        // own services. Only the running program grants it, explicitly.
        cfg.bool("allow_local_network")?;
        ep.allow_local_network = false;

        let retry_config = endpoint
            .map("retry_config")?
            .map(|m| {
                parse_retry(&Obj {
                    map: m,
                    path: "endpoint.retry_config",
                })
            })
            .transpose()?;
        let circuit_breaker = endpoint
            .map("circuit_breaker")?
            .map(|m| {
                parse_breaker(&Obj {
                    map: m,
                    path: "endpoint.circuit_breaker",
                })
            })
            .transpose()?;

        let is_cli = spec.is_some_and(|s| s.kind == ProviderKind::Cli);
        let mut processor = if is_cli {
            ProcessorConfig::cli()
        } else {
            ProcessorConfig::api()
        };
        if let Some(pc) = root.map("processor_config")? {
            let pc = Obj {
                map: pc,
                path: "processor_config",
            };
            if let Some(n) = pc.u64("queue_capacity")? {
                processor.queue_capacity = n;
            }
            if let Some(s) = pc.seconds("capacity_refresh_time")? {
                processor.capacity_refresh_time = s;
            }
            processor.interval = pc.seconds("interval")?;
            processor.limit_requests = pc.u64("limit_requests")?;
            processor.limit_tokens = pc.u64("limit_tokens")?;
            if pc.map.contains_key("concurrency_limit") {
                processor.concurrency_limit = pc.u64("concurrency_limit")?;
            }
            processor.validate()?;
        }

        let max_input_tokens = root.u64("max_input_tokens")?;
        if max_input_tokens == Some(0) {
            return Err(ModelConfigError::invalid(
                "max_input_tokens",
                "must be positive",
            ));
        }
        let input_token_scale = root
            .f64("input_token_scale")?
            .filter(|s| *s > 1.0 && s.is_finite())
            .unwrap_or(1.0);
        let id = match root.str("id")? {
            Some(s) => {
                Uuid::parse_str(s).map_err(|_| ModelConfigError::invalid("id", "not a UUID"))?
            }
            None => Uuid::new_v4(),
        };
        let created_at = match root.f64("created_at")? {
            Some(t) if t.is_finite() => t,
            Some(_) => {
                return Err(ModelConfigError::invalid(
                    "created_at",
                    "must be a finite number",
                ));
            }
            None => now_timestamp(),
        };
        let provider_metadata = root
            .map("provider_metadata")?
            .map(strip_sensitive_keys)
            .unwrap_or_default();

        Ok(ModelConfig {
            id,
            created_at,
            provider_metadata,
            retry_config: retry_config.map(Box::new),
            circuit_breaker: circuit_breaker.map(Box::new),
            endpoint: Box::new(ep),
            processor: Box::new(processor),
            max_input_tokens,
            input_token_scale,
        })
    }

    fn parse_retry(o: &Obj<'_>) -> Result<RetryConfig, ModelConfigError> {
        let d = RetryConfig::default();
        Ok(RetryConfig {
            max_retries: o.u32("max_retries")?.unwrap_or(d.max_retries),
            base_delay: wait_seconds(o, "base_delay")?.unwrap_or(d.base_delay),
            max_delay: wait_seconds(o, "max_delay")?.unwrap_or(d.max_delay),
            backoff_factor: non_negative(o, "backoff_factor")?.unwrap_or(d.backoff_factor),
            jitter: o.bool("jitter")?.unwrap_or(d.jitter),
            jitter_factor: non_negative(o, "jitter_factor")?.unwrap_or(d.jitter_factor),
        })
    }

    fn parse_breaker(o: &Obj<'_>) -> Result<CircuitBreakerConfig, ModelConfigError> {
        let d = CircuitBreakerConfig::default();
        Ok(CircuitBreakerConfig {
            failure_threshold: o.u32("failure_threshold")?.unwrap_or(d.failure_threshold),
            recovery_time: wait_seconds(o, "recovery_time")?.unwrap_or(d.recovery_time),
            half_open_max_calls: o
                .u32("half_open_max_calls")?
                .unwrap_or(d.half_open_max_calls),
            name: o.str("name")?.map(str::to_owned),
        })
    }

    fn non_negative(o: &Obj<'_>, key: &str) -> Result<Option<f64>, ModelConfigError> {
        match o.f64(key)? {
            Some(v) if !(v.is_finite() && v >= 0.0) => Err(ModelConfigError::invalid(
                o.field(key),
                "must be a non-negative number",
            )),
            other => Ok(other),
        }
    }

    /// A non-negative number of seconds, at most [`MAX_CONFIG_SECONDS`].
    fn wait_seconds(o: &Obj<'_>, key: &str) -> Result<Option<f64>, ModelConfigError> {
        match non_negative(o, key)? {
            Some(v) if v > MAX_CONFIG_SECONDS => Err(ModelConfigError::invalid(
                o.field(key),
                "must be at most 2592000 seconds (30 days)",
            )),
            other => Ok(other),
        }
    }
}
