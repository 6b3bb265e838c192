//! `IModel`: a connected chat model.

use std::borrow::Cow;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use branch_core::ParsedJson;
use branch_core::model::{
    AuthType, ChatModel, ChatRequest, ChatResponse, ChatStream, ModelConfig, ModelError,
    ModelErrorKind, RequestBody,
};
use branch_core::telemetry;
use serde_json::Value;

use crate::breaker::Breaker;
use crate::dialect::openai_chat::{self, ChatPayload};
use crate::dialect::{self, Dialect};
use crate::guard::{self, GuardedResolver};
use crate::limiter::Limiter;
use crate::limits::{self, CallLimits};
use crate::reply_stream::ReplyStream;
use crate::retry_after::requested_wait;
use crate::secret::ApiKey;
use crate::target::{Target, put_header};
use crate::traced;

/// Counted estimates at or above this calibrate the input-token scale.
const CALIBRATION_MIN_TOKENS: u64 = 4000;

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) served_model: Option<String>,
    input_token_scale: f64,
    cap_refusal: Option<ModelError>,
}

struct Inner {
    config: ModelConfig,
    key: Option<ApiKey>,
    /// The URL and fixed headers every call uses, or the configuration
    /// error every call reports (the configuration never changes).
    target: Result<Target, (ModelErrorKind, String)>,
    client: reqwest::Client,
    limiter: Limiter,
    dialect: Dialect,
    /// The chat-completions payload of calls without fields of their own,
    /// made on the first such call; `[non-streaming, streaming]`.
    chat_payloads: [OnceLock<ChatPayload>; 2],
    state: Mutex<State>,
    max_rate_limit_wait: Option<Duration>,
    breaker: Option<Breaker>,
    ollama_ready: tokio::sync::OnceCell<()>,
    limits: CallLimits,
}

/// A chat model connected to its provider over HTTP. Cheap to clone (shared
/// client, limiter and state).
#[derive(Clone)]
pub struct IModel {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for IModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IModel")
            .field("provider", &self.inner.config.provider())
            .field("model", &self.inner.config.model_name())
            .field("base_url", &self.inner.config.base_url())
            .field("key", &self.inner.key)
            .finish()
    }
}

/// Builds an [`IModel`] with an explicit key or options.
#[derive(Debug)]
pub struct IModelBuilder {
    config: ModelConfig,
    key: Option<ApiKey>,
    env_key: bool,
    max_rate_limit_wait: Option<Duration>,
    limits: CallLimits,
}

impl IModelBuilder {
    /// The overall deadline of one call, retries and the whole stream
    /// included (default [`limits::DEFAULT_CALL_DEADLINE`]); saturated at
    /// [`limits::MAX_CONFIG_WAIT`].
    pub fn call_deadline(mut self, deadline: Duration) -> Self {
        self.limits.deadline = deadline.min(limits::MAX_CONFIG_WAIT);
        self
    }

    /// The largest reply accepted, in bytes (default
    /// [`limits::DEFAULT_MAX_REPLY_BYTES`]).
    pub fn max_reply_bytes(mut self, bytes: usize) -> Self {
        self.limits.max_reply_bytes = bytes;
        self
    }

    /// The most tool calls one reply may ask for (default
    /// [`limits::DEFAULT_MAX_TOOL_CALLS`]).
    pub fn max_tool_calls(mut self, calls: usize) -> Self {
        self.limits.max_tool_calls = calls;
        self
    }

    /// All three caps at once.
    pub fn call_limits(mut self, limits: CallLimits) -> Self {
        self.limits = limits;
        self.limits.deadline = self.limits.deadline.min(limits::MAX_CONFIG_WAIT);
        self
    }

    /// An explicit key (see [`ApiKey::resolve`] for strings).
    pub fn api_key(mut self, key: impl Into<ApiKey>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Whether the provider's environment key may be used (default: only
    /// when the base URL is the registered one).
    pub fn env_key(mut self, allow: bool) -> Self {
        self.env_key = allow;
        self
    }

    /// How long a call may wait for the rate limiter before failing with
    /// `LocalRateLimit` (default: as long as needed).
    pub fn max_rate_limit_wait(mut self, wait: Duration) -> Self {
        self.max_rate_limit_wait = Some(wait);
        self
    }

    /// Builds the model and its HTTP client.
    pub fn build(self) -> Result<IModel, ModelError> {
        let config = self.config;
        let err = |kind, msg: &str| dialect::error(&config, kind, msg);
        let auth = config.endpoint().auth_type;
        let key = match auth {
            AuthType::None => None,
            _ => self.key.or_else(|| {
                let registered = config.base_url_is_registered();
                let env = config.key_env().filter(|_| self.env_key || registered);
                env.and_then(ApiKey::from_env)
            }),
        };
        let allow_local = config.allow_local_network();
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .redirect(guard::redirect_policy(allow_local))
            .dns_resolver(Arc::new(GuardedResolver { allow_local }));
        if let Some(t) = config.endpoint().timeout.as_duration() {
            builder = builder.connect_timeout(t);
            // Silence between reads lasts no longer than the call, so a
            // read timeout no shorter than the overall deadline could never
            // fire first; unset, it spares every request a timer.
            if t < self.limits.deadline {
                builder = builder.read_timeout(t);
            }
        }
        let client = builder
            .build()
            .map_err(|_| err(ModelErrorKind::Config, "the HTTP client could not be built"))?;
        let limiter = Limiter::new(config.processor_config(), self.max_rate_limit_wait);
        let config_breaker = config.circuit_breaker().cloned().map(Breaker::new);
        let state = State {
            served_model: None,
            input_token_scale: config.input_token_scale(),
            cap_refusal: None,
        };
        let target = Target::of(&config, key.as_ref());
        Ok(IModel {
            inner: Arc::new(Inner {
                dialect: Dialect::of(&config),
                chat_payloads: [OnceLock::new(), OnceLock::new()],
                target,
                config,
                key,
                client,
                limiter,
                state: Mutex::new(state),
                max_rate_limit_wait: self.max_rate_limit_wait,
                breaker: config_breaker,
                ollama_ready: tokio::sync::OnceCell::new(),
                limits: self.limits,
            }),
        })
    }
}

fn config_error(e: branch_core::model::ModelConfigError) -> ModelError {
    ModelError::new(ModelErrorKind::Config, "unknown", None, e.to_string())
}

impl IModel {
    /// A builder around `config`.
    pub fn builder(config: ModelConfig) -> IModelBuilder {
        IModelBuilder {
            config,
            key: None,
            env_key: false,
            max_rate_limit_wait: None,
            limits: CallLimits::default(),
        }
    }

    /// Connects `config`. The provider's environment key (`OPENAI_API_KEY`
    /// ...) is attached only when the base URL is the registered one, so a
    /// configuration pointing elsewhere (e.g. restored from data) never
    /// receives it; use [`IModel::builder`] to give a key explicitly.
    pub fn new(config: ModelConfig) -> Result<Self, ModelError> {
        Self::builder(config).build()
    }

    /// Connects `config` with an explicit key.
    pub fn with_api_key(config: ModelConfig, key: impl Into<ApiKey>) -> Result<Self, ModelError> {
        Self::builder(config).api_key(key).build()
    }

    /// The registered defaults of `provider` with `model`, key from the
    /// environment.
    pub fn from_provider(provider: &str, model: &str) -> Result<Self, ModelError> {
        Self::new(ModelConfig::new(provider, model).map_err(config_error)?)
    }

    /// `"prov/model"` or a bare model name (provider from
    /// `LIONAGI_CHAT_PROVIDER`, default `openai`).
    pub fn from_model_string(spec: &str) -> Result<Self, ModelError> {
        Self::new(ModelConfig::from_model_string(spec).map_err(config_error)?)
    }

    /// Restores a model written by `to_dict` (serialization.md §7.1). The
    /// environment key is attached only if the stored base URL is the
    /// registered one; local-network permission is never regained.
    pub fn from_dict(value: &Value) -> Result<Self, ModelError> {
        Self::new(ModelConfig::from_dict(value).map_err(config_error)?)
    }

    /// The caps and deadline of this model's calls.
    pub fn call_limits(&self) -> CallLimits {
        self.inner.limits
    }

    /// Whether a key is attached.
    pub fn has_api_key(&self) -> bool {
        self.inner.key.is_some()
    }

    /// The configuration including what calls changed.
    pub fn current_config(&self) -> ModelConfig {
        let mut c = self.inner.config.clone();
        let st = self
            .inner
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(m) = &st.served_model {
            c.record_served_model(m);
        }
        c.raise_input_token_scale(st.input_token_scale);
        c
    }

    /// Forgets a remembered input-token-cap refusal.
    pub fn clear_input_token_cap_refusal(&self) {
        self.lock_state().cap_refusal = None;
    }

    /// The wire protocol of the endpoint.
    pub(crate) fn dialect(&self) -> Dialect {
        self.inner.dialect
    }

    pub(crate) fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn err(&self, kind: ModelErrorKind, message: impl Into<String>) -> ModelError {
        let msg: String = message.into();
        let msg = match &self.inner.key {
            Some(k) => k.redact(&msg),
            None => msg,
        };
        dialect::error(&self.inner.config, kind, msg)
    }

    /// The provider's error body for `ModelError::body`, redacted of the key.
    fn error_body(&self, text: &str) -> Value {
        let text = match &self.inner.key {
            Some(k) => k.redact(text),
            None => text.to_owned(),
        };
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    }

    /// The body of `request`, serialized once, with its token estimate.
    fn body(&self, request: &ChatRequest, stream: bool) -> Result<RequestBody, ModelError> {
        // One serialization gives both the bytes sent and the estimate.
        let written = if self.inner.dialect == Dialect::OpenAiChat && request.fields.is_empty() {
            let config = &self.inner.config;
            let payload = self.inner.chat_payloads[usize::from(stream)]
                .get_or_init(|| dialect::chat_payload(config, stream));
            if let Some(reason) = payload.refusal() {
                return Err(dialect::refused(config, reason));
            }
            payload.write(request)
        } else {
            dialect::try_build_body_bytes(&self.inner.config, request, stream)?
        };
        written.map_err(|_| {
            self.err(
                ModelErrorKind::Config,
                "the request body is not serializable",
            )
        })
    }

    /// Everything before the first byte: URL, key, body, cap, guard.
    /// `body` is the body when the caller already built it (with
    /// [`ChatModel::request_body`]); otherwise it is built here.
    fn prepare(
        &self,
        request: &ChatRequest,
        body: Option<&RequestBody>,
        stream: bool,
    ) -> Result<Prepared<'_>, ModelError> {
        let config = &self.inner.config;
        let target = self
            .inner
            .target
            .as_ref()
            .map_err(|(kind, msg)| self.err(*kind, msg.clone()))?;
        let mut headers = Cow::Borrowed(&target.headers);
        for (name, value) in &request.extra_headers {
            put_header(headers.to_mut(), name, value)
                .map_err(|m| self.err(ModelErrorKind::Config, m))?;
        }
        if config.endpoint().idempotent_retries {
            put_header(
                headers.to_mut(),
                "idempotency-key",
                &uuid::Uuid::new_v4().to_string(),
            )
            .map_err(|m| self.err(ModelErrorKind::Config, m))?;
        }

        let body = match body {
            Some(b) => b.clone(),
            None => self.body(request, stream)?,
        };
        let counted = body.counted();
        let body_bytes = body.bytes().clone();
        let scale = self.lock_state().input_token_scale.max(1.0);
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let scaled = if scale > 1.0 {
            (counted as f64 * scale).ceil() as u64
        } else {
            counted
        };
        if let Some(cap) = config.max_input_tokens() {
            let mut st = self.lock_state();
            if let Some(refusal) = &st.cap_refusal {
                return Err(refusal.clone());
            }
            if scaled > cap {
                let e = self.err(
                    ModelErrorKind::InputTokenCap,
                    format!("estimated {scaled} input tokens exceed max_input_tokens {cap}"),
                );
                st.cap_refusal = Some(e.clone());
                return Err(e);
            }
        }
        Ok(Prepared {
            url: &target.url,
            headers,
            body_bytes,
            counted,
            scaled,
        })
    }

    fn limiter_tokens(&self, p: &Prepared<'_>) -> u64 {
        if self.inner.config.endpoint().requires_tokens {
            p.scaled
        } else {
            0
        }
    }

    pub(crate) fn map_transport(&self, e: &reqwest::Error) -> ModelError {
        if let Some(blocked) = guard::find_blocked(e) {
            return self.err(ModelErrorKind::NetworkGuard, blocked.to_string());
        }
        if let Some(dns) = guard::find_dns_failure(e) {
            return self.err(ModelErrorKind::Connect, dns.to_string());
        }
        let text = e.to_string();
        let mut detail = text.clone();
        let mut src = std::error::Error::source(e);
        while let Some(s) = src {
            detail.push_str(": ");
            detail.push_str(&s.to_string());
            src = s.source();
        }
        if e.is_timeout() || detail.contains("timed out") {
            self.err(ModelErrorKind::Timeout, detail)
        } else {
            self.err(ModelErrorKind::Connect, detail)
        }
    }

    /// One HTTP attempt of a non-streaming call: the reply read, with the
    /// bytes it reads as (`raw_text`).
    async fn attempt(&self, p: &Prepared<'_>) -> Result<ChatResponse, ModelError> {
        // The request is built in a block of its own: a moved local keeps
        // its room in the future until its scope ends, which would hold
        // the request's 264 bytes across every wait of the attempt.
        let sent = {
            let mut req = p.request();
            // The endpoint's timeout bounds each attempt; one no shorter
            // than the call's overall deadline (which runs around every
            // attempt, from before the first) could never fire first, and
            // a timer is work on every call.
            if let Some(t) = self.inner.config.endpoint().timeout.as_duration() {
                if t < self.inner.limits.deadline {
                    *req.timeout_mut() = Some(t);
                }
            }
            self.inner.client.execute(req)
        };
        let mut resp = sent.await.map_err(|e| self.map_transport(&e))?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            let retry_after = requested_wait(resp.headers());
            // An error body is only kept for the message: its head is enough.
            let (bytes, _cut) = read_capped(&mut resp, limits::MAX_ERROR_BODY_BYTES)
                .await
                .map_err(|e| self.map_transport(&e))?;
            let text = String::from_utf8_lossy(&bytes);
            let (kind, message) = dialect::classify(status, &text);
            let mut e = self
                .err(kind, message)
                .with_status(status)
                .with_body(self.error_body(&text));
            e.retry_after = retry_after;
            return Err(e);
        }
        let cap = self.inner.limits.max_reply_bytes;
        let (bytes, cut) = read_capped(&mut resp, cap)
            .await
            .map_err(|e| self.map_transport(&e))?;
        if cut {
            return Err(self
                .err(
                    ModelErrorKind::ReplyLimit,
                    format!("the reply is larger than {cap} bytes (max_reply_bytes)"),
                )
                .with_status(status));
        }
        // What `Response::text` gives, without copying a valid UTF-8 body
        // (checked a word at a time first: the lossy reading goes byte by
        // byte).
        let text = match String::from_utf8(bytes) {
            Ok(t) => t,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        if text.trim().is_empty() {
            return Err(self
                .err(ModelErrorKind::MalformedResponse, "the reply is empty")
                .with_status(status));
        }
        // A plain chat completion is read from its text, whose tree is
        // then never built; any other reply is parsed whole.
        let text = match self.inner.dialect {
            Dialect::OpenAiChat => match openai_chat::plain_reply::read(text) {
                Ok(response) => return Ok(response),
                Err(text) => text,
            },
            _ => text,
        };
        // The text is kept as the proof it was parsed: the reply's message
        // and log hold it instead of the value's tree.
        let (value, text) = ParsedJson::parse(text).map_err(|_| {
            self.err(
                ModelErrorKind::MalformedResponse,
                "the reply is not valid JSON",
            )
            .with_status(status)
        })?;
        if let Some(eff) = self.inner.dialect.reply_error_status(&value, status) {
            let (kind, message) = dialect::classify(eff, text.as_str());
            let mut e = self
                .err(kind, message)
                .with_status(eff)
                .with_body(self.error_body(text.as_str()));
            e.retry_after = requested_wait(resp.headers());
            return Err(e);
        }
        let mut response = self.inner.dialect.decode_reply(value);
        response.raw_text = Some(text);
        Ok(response)
    }

    /// The checks of a decoded reply: at most `max_tool_calls` tool calls,
    /// and something to record (text or a tool call).
    fn check_reply(&self, response: &ChatResponse) -> Result<(), ModelError> {
        let cap = self.inner.limits.max_tool_calls;
        if response.tool_calls.len() > cap {
            return Err(self.err(
                ModelErrorKind::ReplyLimit,
                format!(
                    "the reply asks for {} tool calls; at most {cap} are accepted (max_tool_calls)",
                    response.tool_calls.len()
                ),
            ));
        }
        if response.text.is_empty() && response.tool_calls.is_empty() {
            return Err(self.err(
                ModelErrorKind::MalformedResponse,
                empty_reply_message(response.finish_reason.as_deref()),
            ));
        }
        Ok(())
    }

    /// Whether calls go to Ollama, whose model may need pulling first
    /// ([`IModel::ensure_ollama_model`]). That rare wait is boxed where it
    /// is awaited, so that every other provider's call state does not carry
    /// it.
    fn serves_ollama(&self) -> bool {
        let config = &self.inner.config;
        config.provider_spec().is_some_and(|s| s.name == "ollama")
    }

    /// For Ollama (callers check [`IModel::serves_ollama`] first): once per
    /// model, list the local models (`GET /api/tags`) and pull the
    /// configured one if it is missing (`POST /api/pull`), as the reference
    /// does before calls. Failures are logged and left to the call itself
    /// to report (the server may be another OpenAI-compatible one).
    async fn ensure_ollama_model(&self) {
        let config = &self.inner.config;
        let (Some(base), Some(model)) = (config.base_url(), config.model_name()) else {
            return;
        };
        let root = base.trim_end_matches('/');
        let root = root
            .strip_suffix("/v1")
            .or_else(|| root.strip_suffix("/api"))
            .unwrap_or(root);
        self.inner
            .ollama_ready
            .get_or_init(|| async {
                let client = &self.inner.client;
                let tags = client.get(format!("{root}/api/tags")).send().await;
                let listed: Option<Value> = match tags {
                    Ok(mut r) if r.status().is_success() => {
                        match read_capped(&mut r, limits::MAX_LISTING_BYTES).await {
                            Ok((bytes, false)) => serde_json::from_slice(&bytes).ok(),
                            _ => None,
                        }
                    }
                    _ => None,
                };
                let Some(listed) = listed else {
                    tracing::debug!("ollama: could not list local models");
                    return;
                };
                let present = listed["models"].as_array().into_iter().flatten().any(|m| {
                    let name = m["name"]
                        .as_str()
                        .or_else(|| m["model"].as_str())
                        .unwrap_or_default();
                    name == model || name.strip_suffix(":latest") == Some(model)
                });
                if !present {
                    tracing::info!(model, "ollama: pulling missing model");
                    let pull = client
                        .post(format!("{root}/api/pull"))
                        .json(&serde_json::json!({"model": model, "stream": false}))
                        .send()
                        .await;
                    if !pull.is_ok_and(|r| r.status().is_success()) {
                        tracing::warn!(model, "ollama: pull failed");
                    }
                }
            })
            .await;
    }

    fn retry_policy(&self) -> RetryPolicy {
        let ep = self.inner.config.endpoint();
        match self.inner.config.retry_config() {
            Some(rc) => RetryPolicy {
                max_attempts: rc.max_retries.saturating_add(1),
                base: rc.base_delay,
                factor: rc.backoff_factor,
                max: rc.max_delay,
                jitter: if rc.jitter { rc.jitter_factor } else { 0.0 },
            },
            None => RetryPolicy {
                max_attempts: ep.max_retries.max(1),
                base: 1.0,
                factor: 2.0,
                max: 60.0,
                jitter: 0.5,
            },
        }
    }

    async fn chat_inner(
        &self,
        request: &ChatRequest,
        body: Option<&RequestBody>,
    ) -> Result<ChatResponse, ModelError> {
        if let Some(b) = &self.inner.breaker {
            b.admit().map_err(|_| {
                self.err(
                    ModelErrorKind::CircuitOpen,
                    "too many consecutive failures; waiting to recover",
                )
            })?;
        }
        let deadline = self.inner.limits.deadline;
        let mut attempts = 0;
        let result =
            match tokio::time::timeout(deadline, self.chat_attempts(request, body, &mut attempts))
                .await
            {
                Ok(r) => r,
                Err(_) => Err(self.deadline_error().with_attempts(attempts)),
            };
        if let Some(b) = &self.inner.breaker {
            let failed = result.as_ref().err().is_some_and(|e| {
                e.attempts > 0
                    && (e.is_retryable()
                        || matches!(
                            e.kind,
                            ModelErrorKind::MalformedResponse | ModelErrorKind::ReplyLimit
                        ))
            });
            b.record(failed);
        }
        result
    }

    pub(crate) fn deadline_error(&self) -> ModelError {
        self.err(
            ModelErrorKind::Timeout,
            format!(
                "the call did not finish within its overall deadline of {} s (call_deadline)",
                self.inner.limits.deadline.as_secs_f64()
            ),
        )
    }

    async fn chat_attempts(
        &self,
        request: &ChatRequest,
        body: Option<&RequestBody>,
        attempts: &mut u32,
    ) -> Result<ChatResponse, ModelError> {
        let span = tracing::Span::current();
        let p = self.prepare(request, body, false)?;
        if self.serves_ollama() {
            Box::pin(self.ensure_ollama_model()).await;
        }
        let _permit = self
            .inner
            .limiter
            .acquire(self.limiter_tokens(&p))
            .await
            .map_err(|r| self.err(ModelErrorKind::LocalRateLimit, r.reason))?;
        let policy = self.retry_policy();
        let mut response = loop {
            *attempts += 1;
            let attempts = *attempts;
            // The error is taken out of the attempt's result before the
            // retry's sleep: a `match` on the result itself would keep the
            // whole result (328 bytes) alive across that wait, and room
            // for it in every turn's future.
            let e = match self.attempt(&p).await {
                Ok(v) => break v,
                Err(e) => e,
            };
            let delay = (e.is_retryable() && attempts < policy.max_attempts)
                .then(|| policy.delay(attempts, e.retry_after))
                .flatten();
            match delay {
                Some(d) => {
                    tracing::debug!(attempt = attempts, kind = ?e.kind, status = ?e.status, delay_ms = d.as_millis() as u64, "retrying model call");
                    drop(e);
                    tokio::time::sleep(d).await;
                }
                None => {
                    telemetry::record_int(&span, telemetry::LIONAGI_ATTEMPTS, attempts.into());
                    if let Some(s) = e.status {
                        telemetry::record_int(
                            &span,
                            telemetry::HTTP_RESPONSE_STATUS_CODE,
                            s.into(),
                        );
                    }
                    return Err(e.with_attempts(attempts));
                }
            }
        };
        let attempts = *attempts;
        response.attempts = attempts;
        self.check_reply(&response)
            .map_err(|e| e.with_status(200).with_attempts(attempts))?;
        telemetry::record_int(&span, telemetry::LIONAGI_ATTEMPTS, attempts.into());
        telemetry::record_int(&span, telemetry::HTTP_RESPONSE_STATUS_CODE, 200);
        {
            let mut st = self.lock_state();
            if let Some(m) = &response.served_model {
                if st.served_model.as_ref() != Some(m) {
                    st.served_model = Some(m.clone());
                }
            }
            if let Some(u) = &response.usage {
                if p.counted >= CALIBRATION_MIN_TOKENS && u.input_tokens() > 0 {
                    #[allow(clippy::cast_precision_loss)]
                    let ratio = u.input_tokens() as f64 / p.counted as f64;
                    if ratio > st.input_token_scale {
                        st.input_token_scale = ratio;
                    }
                }
            }
        }
        Ok(response)
    }

    async fn stream_inner(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        let now = tokio::time::Instant::now();
        let deadline = now
            .checked_add(self.inner.limits.deadline)
            .unwrap_or(now + limits::MAX_CONFIG_WAIT);
        let attempts = std::sync::atomic::AtomicU32::new(0);
        let opened = tokio::time::timeout_at(deadline, self.open_stream(request, &attempts)).await;
        let (resp, permit) = match opened {
            Ok(r) => r?,
            Err(_) => {
                let made = attempts.load(std::sync::atomic::Ordering::Relaxed);
                return Err(self.deadline_error().with_attempts(made));
            }
        };
        Ok(ReplyStream::new(self.clone(), resp, permit, deadline).into_chat_stream())
    }

    /// Everything of a streaming call up to a 2xx response head.
    async fn open_stream(
        &self,
        request: ChatRequest,
        attempts: &std::sync::atomic::AtomicU32,
    ) -> Result<(reqwest::Response, crate::limiter::Permit), ModelError> {
        let span = tracing::Span::current();
        let p = self.prepare(&request, None, true)?;
        if self.serves_ollama() {
            Box::pin(self.ensure_ollama_model()).await;
        }
        let permit = self
            .inner
            .limiter
            .acquire(self.limiter_tokens(&p))
            .await
            .map_err(|r| self.err(ModelErrorKind::LocalRateLimit, r.reason))?;
        telemetry::record_int(&span, telemetry::LIONAGI_ATTEMPTS, 1);
        attempts.store(1, std::sync::atomic::Ordering::Relaxed);
        let mut resp = self
            .inner
            .client
            .execute(p.request())
            .await
            .map_err(|e| self.map_transport(&e).with_attempts(1))?;
        let status = resp.status().as_u16();
        telemetry::record_int(&span, telemetry::HTTP_RESPONSE_STATUS_CODE, status.into());
        if !(200..300).contains(&status) {
            let retry_after = requested_wait(resp.headers());
            let (bytes, _cut) = read_capped(&mut resp, limits::MAX_ERROR_BODY_BYTES)
                .await
                .unwrap_or_default();
            let text = String::from_utf8_lossy(&bytes);
            let (kind, message) = dialect::classify(status, &text);
            let mut e = self
                .err(kind, message)
                .with_status(status)
                .with_attempts(1)
                .with_body(self.error_body(&text));
            e.retry_after = retry_after;
            return Err(e);
        }
        Ok((resp, permit))
    }

    /// The GenAI `chat {model}` span of one call (`branch_core::telemetry`).
    fn span(&self, request: &ChatRequest, stream: bool) -> tracing::Span {
        let config = &self.inner.config;
        let url = self.inner.target.as_ref().ok().map(|t| &t.url);
        let server = url.and_then(|u| {
            Some(telemetry::Server {
                address: u.host_str()?,
                port: u.port_or_known_default()?,
            })
        });
        telemetry::chat_span(
            config.provider(),
            config.model_name(),
            stream,
            server,
            config.kwargs(),
            request,
        )
    }

    /// One complete call (see [`ChatModel::chat`]).
    ///
    /// This and [`IModel::invoke_with_body`] are blocks rather than `async
    /// fn`s: an `async fn` moves its arguments into locals of its state,
    /// which would then hold the request twice for the whole call (152
    /// bytes more in the future every turn boxes).
    #[allow(clippy::manual_async_fn)] // An `async fn` holds its arguments twice.
    pub fn invoke(
        &self,
        request: ChatRequest,
    ) -> impl Future<Output = Result<ChatResponse, ModelError>> + Send + '_ {
        async move {
            let span = self.span(&request, false);
            traced::call(span, self.chat_inner(&request, None)).await
        }
    }

    /// One complete call sending `body`, the body
    /// [`ChatModel::request_body`] built for `request` (see
    /// [`ChatModel::chat_with_body`]).
    #[allow(clippy::manual_async_fn)] // An `async fn` holds its arguments twice.
    pub fn invoke_with_body<'a>(
        &'a self,
        request: ChatRequest,
        body: &'a RequestBody,
    ) -> impl Future<Output = Result<ChatResponse, ModelError>> + Send + 'a {
        async move {
            let span = self.span(&request, false);
            traced::call(span, self.chat_inner(&request, Some(body))).await
        }
    }

    /// A streaming call (see [`ChatModel::stream`]); its span stays open
    /// until the stream ends or is dropped, and records the usage the
    /// stream reported.
    #[allow(clippy::manual_async_fn)] // An `async fn` holds its arguments twice.
    pub fn invoke_stream(
        &self,
        request: ChatRequest,
    ) -> impl Future<Output = Result<ChatStream, ModelError>> + Send + '_ {
        async move {
            let span = self.span(&request, true);
            traced::open_stream(span, self.stream_inner(request)).await
        }
    }

    /// The maximum time a call waits for the rate limiter, if bounded.
    pub fn max_rate_limit_wait(&self) -> Option<Duration> {
        self.inner.max_rate_limit_wait
    }
}

struct Prepared<'a> {
    url: &'a reqwest::Url,
    /// The target's own headers unless the call adds some.
    headers: Cow<'a, reqwest::header::HeaderMap>,
    body_bytes: bytes::Bytes,
    counted: u64,
    scaled: u64,
}

impl Prepared<'_> {
    /// One attempt's request. Its headers are set whole: a request
    /// builder would insert them one by one into an empty map.
    fn request(&self) -> reqwest::Request {
        let mut req = reqwest::Request::new(reqwest::Method::POST, self.url.clone());
        *req.headers_mut() = self.headers.as_ref().clone();
        *req.body_mut() = Some(self.body_bytes.clone().into());
        req
    }
}

#[derive(Debug, Clone, Copy)]
struct RetryPolicy {
    max_attempts: u32,
    base: f64,
    factor: f64,
    max: f64,
    jitter: f64,
}

impl RetryPolicy {
    /// Delay before retry number `n` (1-based); `None` if the server asks for
    /// a longer wait than the policy allows.
    fn delay(&self, n: u32, retry_after: Option<Duration>) -> Option<Duration> {
        // Every input may come from stored data or code: NaN is zero,
        // infinite or huge values saturate (`limits::saturating_wait`).
        let max = limits::saturating_wait(self.max);
        let exp = i32::try_from(n.saturating_sub(1)).unwrap_or(i32::MAX);
        let base = limits::saturating_wait(self.base * self.factor.powi(exp)).min(max);
        let jitter = if self.jitter.is_nan() {
            0.0
        } else {
            self.jitter.max(0.0)
        };
        let jittered =
            limits::saturating_wait(base.as_secs_f64() * (1.0 + fastrand::f64() * jitter));
        match retry_after {
            // A longer wait than the policy allows is not slept: the call
            // fails at once and reports the requested wait.
            Some(ra) if ra > max.max(jittered) => None,
            Some(ra) => Some(ra),
            None => Some(jittered),
        }
    }
}

/// Reads a body, at most `cap` bytes: the bytes, and whether the body was
/// longer (reading stopped there; the rest is never buffered).
pub(crate) async fn read_capped(
    resp: &mut reqwest::Response,
    cap: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let announced = resp.content_length().and_then(|n| usize::try_from(n).ok());
    if announced.is_some_and(|n| n > cap) {
        return Ok((Vec::new(), true));
    }
    let mut out = Vec::with_capacity(announced.unwrap_or(0).min(cap));
    while let Some(chunk) = resp.chunk().await? {
        let room = cap.saturating_sub(out.len());
        if chunk.len() > room {
            out.extend_from_slice(&chunk[..room]);
            return Ok((out, true));
        }
        out.extend_from_slice(&chunk);
    }
    Ok((out, false))
}

/// The error text of a reply with nothing to record.
pub(crate) fn empty_reply_message(finish_reason: Option<&str>) -> String {
    match finish_reason {
        Some(reason) => {
            format!("the reply has no text and no tool calls (finish_reason: {reason})")
        }
        None => "the reply has no text and no tool calls".to_owned(),
    }
}

/// The boxed future of a [`ChatModel`] call, as `async_trait` declares it.
type BoxedCall<'f, T> = Pin<Box<dyn Future<Output = Result<T, ModelError>> + Send + 'f>>;

#[async_trait::async_trait]
impl ChatModel for IModel {
    fn config(&self) -> &ModelConfig {
        &self.inner.config
    }

    fn snapshot(&self) -> ModelConfig {
        self.current_config()
    }

    fn request_payload(&self, request: &ChatRequest, stream: bool) -> Value {
        dialect::build_body(&self.inner.config, request, stream)
    }

    fn is_cli(&self) -> bool {
        self.inner.config.is_cli()
    }

    fn fork(&self) -> Arc<dyn ChatModel> {
        IModelBuilder {
            config: self.current_config().forked(),
            key: self.inner.key.clone(),
            env_key: false,
            max_rate_limit_wait: self.inner.max_rate_limit_wait,
            limits: self.inner.limits,
        }
        .build()
        .map_or_else(|_| self.duplicate(), |m| Arc::new(m) as Arc<dyn ChatModel>)
    }

    fn duplicate(&self) -> Arc<dyn ChatModel> {
        let copy = IModelBuilder {
            config: self.current_config(),
            key: self.inner.key.clone(),
            env_key: false,
            max_rate_limit_wait: self.inner.max_rate_limit_wait,
            limits: self.inner.limits,
        }
        .build()
        .unwrap_or_else(|_| self.clone());
        Arc::new(copy)
    }

    // `chat`, `chat_with_body` and `stream` box the call's own future: the
    // wrapper `async_trait` writes around an `async fn` would keep another
    // copy of the request beside it.
    fn chat<'s, 'f>(&'s self, request: ChatRequest) -> BoxedCall<'f, ChatResponse>
    where
        's: 'f,
        Self: 'f,
    {
        Box::pin(self.invoke(request))
    }

    fn request_body(&self, request: &ChatRequest) -> Result<RequestBody, ModelError> {
        self.body(request, false)
    }

    fn chat_with_body<'s, 'b, 'f>(
        &'s self,
        request: ChatRequest,
        body: &'b RequestBody,
    ) -> BoxedCall<'f, ChatResponse>
    where
        's: 'f,
        'b: 'f,
        Self: 'f,
    {
        Box::pin(self.invoke_with_body(request, body))
    }

    /// Every reply is returned as parsed from the bytes it carries.
    fn keeps_reply_bytes(&self) -> bool {
        true
    }

    fn stream<'s, 'f>(&'s self, request: ChatRequest) -> BoxedCall<'f, ChatStream>
    where
        's: 'f,
        Self: 'f,
    {
        Box::pin(self.invoke_stream(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_shape() {
        let p = RetryPolicy {
            max_attempts: 3,
            base: 1.0,
            factor: 2.0,
            max: 60.0,
            jitter: 0.5,
        };
        let d1 = p.delay(1, None).unwrap().as_secs_f64();
        let d2 = p.delay(2, None).unwrap().as_secs_f64();
        assert!((1.0..=1.5).contains(&d1), "{d1}");
        assert!((2.0..=3.0).contains(&d2), "{d2}");
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(5))),
            Some(Duration::from_secs(5))
        );
        assert_eq!(p.delay(1, Some(Duration::from_secs(120))), None);
        let capped = RetryPolicy {
            max: 2.0,
            jitter: 0.0,
            ..p
        };
        assert_eq!(capped.delay(10, None), Some(Duration::from_secs(2)));
    }

    /// A model keeps the payload of calls without fields of their own
    /// between calls; every body it writes is still the one the dialect
    /// writes for the call, fields or none, streamed or not.
    #[test]
    fn kept_chat_payloads_write_the_dialects_bodies() {
        use branch_core::model::ChatMessage;
        let mut reply = ChatMessage::assistant(Value::Null);
        reply.extra.insert(
            "tool_calls".into(),
            serde_json::json!([{"id": "c1", "type": "function",
                "function": {"name": "f", "arguments": "{}"}}]),
        );
        reply.reasoning = vec![branch_core::model::ReasoningBlock::Thinking {
            text: "why".into(),
            signature: None,
        }];
        let plain = ChatRequest::new(vec![
            ChatMessage::system("be brief"),
            ChatMessage::user("hi"),
            reply,
            ChatMessage::user("again"),
        ]);
        let fielded = plain
            .clone()
            .with_field("temperature", 0.5)
            .with_field("model", "o3-mini")
            .with_field("stream", true);
        for (provider, model) in [
            ("openai", "gpt-4.1-mini"),
            ("openai", "o3-mini"),
            ("deepseek", "deepseek-chat"),
            ("ollama", "llama3"),
            ("anthropic", "claude-sonnet-4-5"),
        ] {
            let config = ModelConfig::builder()
                .provider(provider)
                .model(model)
                .kwarg("temperature", 0.25)
                .kwarg("stream", true)
                .kwarg("reasoning_effort", "low")
                .build()
                .unwrap();
            let m = IModel::with_api_key(config.clone(), "k").unwrap();
            for request in [&plain, &fielded, &plain, &fielded] {
                for stream in [false, true] {
                    let expected = dialect::try_build_body_bytes(&config, request, stream)
                        .unwrap()
                        .unwrap();
                    let written = m.body(request, stream).unwrap();
                    assert_eq!(
                        std::str::from_utf8(written.bytes()).unwrap(),
                        std::str::from_utf8(expected.bytes()).unwrap(),
                        "{provider} {model} stream {stream}"
                    );
                    assert_eq!(written.counted(), expected.counted());
                }
            }
        }
    }

    #[test]
    fn debug_never_shows_the_key() {
        let m = IModel::with_api_key(
            ModelConfig::new("openai", "gpt-4.1-mini").unwrap(),
            "sk-very-secret",
        )
        .unwrap();
        let dbg = format!("{m:?}");
        assert!(!dbg.contains("sk-very-secret"), "{dbg}");
        assert!(m.has_api_key());
    }

    #[test]
    fn env_key_only_for_registered_urls() {
        // SAFETY-free: use a provider variable unlikely to be set elsewhere.
        let mut c = ModelConfig::new("deepseek", "deepseek-chat").unwrap();
        if std::env::var_os("DEEPSEEK_API_KEY").is_some() {
            return;
        }
        assert!(!IModel::new(c.clone()).unwrap().has_api_key());
        c.set_base_url("https://elsewhere.example/v1").unwrap();
        assert!(!IModel::new(c).unwrap().has_api_key());
        assert!(
            !IModel::from_provider("ollama", "llama3")
                .unwrap()
                .has_api_key()
        );
    }
}
