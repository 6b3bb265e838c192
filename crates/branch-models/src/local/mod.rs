//! The embedded local model: a GGUF chat model run in-process on the CPU
//! with candle (pure Rust, no C++ build), behind the `embedded` feature.
//!
//! [`LocalModel`] implements `branch-core`'s [`ChatModel`] seam, so a
//! `Branch` and the verbs use it like any provider. Its configuration is a
//! [`ModelConfig`] of provider `local` (alias `embedded`) whose `model` is
//! [`DEFAULT_MODEL`] or a path to a `.gguf` file (absolute, or relative to
//! the model directory); it has no base URL and never touches the network.
//!
//! The default model, SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0), is put
//! into the model directory (`$LIONAGI_MODEL_DIR`, else
//! `~/.cache/lionagi/models`) by `cargo xtask fetch-model`.
//!
//! Request fields honoured: `temperature` (0 = greedy; default 0.8),
//! `top_p` (default 0.95), `seed` (default random), `max_tokens` /
//! `max_completion_tokens` (default 512), `stop`, llama.cpp's
//! `ignore_eos`, and llama.cpp's `cache_prompt` (default true, except for
//! a sampled request with a `seed`, which stays reproducible bit for bit:
//! the tokens of recent calls stay evaluated, and a prompt starting with
//! them evaluates only the rest, so a conversation's next turn does not redo
//! its history; see `prefix.rs`), and `response_format`: `json_object`, or `json_schema`
//! with a schema, makes the reply a JSON document that follows it
//! (constrained decoding: only tokens that keep the text a valid prefix
//! are sampled; see [`crate::json_grammar`]). Other fields (`tools` ...)
//! are ignored: the model has no native tool calls.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use branch_core::model::{ChatMessage, ChatModel, ChatRequest};
//! let model = branch_models::local::LocalModel::load_default()?;
//! let request = ChatRequest::new(vec![ChatMessage::user("What is the capital of France?")])
//!     .with_field("temperature", 0);
//! println!("{}", model.chat(request).await?.text);
//! # Ok(()) }
//! ```

mod attend;
mod block_matmul;
mod bpe;
mod engine;
mod error;
mod generate;
mod header;
mod kv;
pub mod llama;
#[cfg(test)]
mod load_tests;
mod prefix;
mod q4_1;
mod q8_0;
pub mod sampler;
pub mod template;
pub mod tokenizer;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use branch_core::model::{
    ChatModel, ChatRequest, ChatResponse, ChatStream, ModelConfig, ModelError, ModelErrorKind,
    StreamAccumulator,
};
use branch_core::telemetry;
use futures_util::StreamExt;
use serde_json::{Value, json};

pub use engine::{DEFAULT_CONTEXT, tokenizer_from_file, tokenizer_from_gguf};
pub use error::LocalModelError;
pub use llama::WeightFormat;

use crate::json_grammar::Grammar;
use engine::{Engine, shared_engine};
use generate::Job;
use sampler::Sampling;

/// Provider name of the embedded model in a [`ModelConfig`].
pub const PROVIDER: &str = "local";
/// The default model's name (`kwargs.model`).
pub const DEFAULT_MODEL: &str = "SmolLM2-135M-Instruct";
/// The default model's file in the model directory.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// Environment variable naming the model directory.
pub const MODEL_DIR_ENV: &str = "LIONAGI_MODEL_DIR";

/// The model directory: `$LIONAGI_MODEL_DIR`, else `~/.cache/lionagi/models`.
pub fn model_dir() -> Result<PathBuf, LocalModelError> {
    if let Some(dir) = std::env::var_os(MODEL_DIR_ENV).filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .ok_or(LocalModelError::NoModelDir)?;
    Ok(PathBuf::from(home).join(".cache/lionagi/models"))
}

/// Where the default model is expected.
pub fn default_model_path() -> Result<PathBuf, LocalModelError> {
    Ok(model_dir()?.join(DEFAULT_MODEL_FILE))
}

/// The GGUF file a model name stands for: [`DEFAULT_MODEL`] is the default
/// file; anything else is a path (relative ones to the model directory).
pub fn resolve_model_path(model: &str) -> Result<PathBuf, LocalModelError> {
    let path = if model.eq_ignore_ascii_case(DEFAULT_MODEL) {
        default_model_path()?
    } else {
        let p = Path::new(model);
        if p.is_absolute() {
            p.to_owned()
        } else {
            model_dir()?.join(p)
        }
    };
    if !path.is_file() {
        return Err(LocalModelError::ModelMissing { path });
    }
    Ok(path)
}

/// A configuration of the embedded model `model` ([`DEFAULT_MODEL`] or a
/// GGUF path).
pub fn local_config(model: &str) -> Result<ModelConfig, ModelError> {
    ModelConfig::new(PROVIDER, model)
        .map_err(|e| ModelError::new(ModelErrorKind::Config, PROVIDER, Some(model), e.to_string()))
}

/// Whether a configuration names the embedded model.
pub fn is_local(config: &ModelConfig) -> bool {
    config.provider_spec().is_some_and(|s| s.name == PROVIDER)
}

/// The embedded chat model. Cheap to clone; clones share the loaded weights.
#[derive(Clone)]
pub struct LocalModel {
    config: ModelConfig,
    path: PathBuf,
    context: Option<usize>,
    weights: WeightFormat,
    engine: Arc<Mutex<Option<Arc<Engine>>>>,
}

impl std::fmt::Debug for LocalModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalModel")
            .field("provider", &self.config.provider())
            .field("model", &self.config.model_name())
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl LocalModel {
    /// A model for `config` (provider `local`). Checks that the file exists;
    /// the weights load on the first call, on the blocking pool.
    pub fn new(config: ModelConfig) -> Result<Self, LocalModelError> {
        if !is_local(&config) {
            return Err(LocalModelError::bad_metadata(
                "provider",
                "the embedded model's configuration must have provider `local`",
            ));
        }
        let path = resolve_model_path(config.model_name().unwrap_or(DEFAULT_MODEL))?;
        Ok(Self {
            config,
            path,
            context: None,
            weights: WeightFormat::default(),
            engine: Arc::new(Mutex::new(None)),
        })
    }

    /// The default model, loaded now (blocking; call it outside async code
    /// or through `spawn_blocking`).
    pub fn load_default() -> Result<Self, LocalModelError> {
        let config = ModelConfig::new(PROVIDER, DEFAULT_MODEL).map_err(|_| {
            LocalModelError::bad_metadata("provider", "the `local` provider is not registered")
        })?;
        let model = Self::new(config)?;
        model.engine()?;
        Ok(model)
    }

    /// The same model with a different context window (tokens; capped by
    /// the model's own). Default [`DEFAULT_CONTEXT`].
    pub fn with_context(mut self, tokens: usize) -> Self {
        self.context = Some(tokens);
        self.engine = Arc::new(Mutex::new(None));
        self
    }

    /// The same model with its weights held in `format`.
    pub fn with_weight_format(mut self, format: WeightFormat) -> Self {
        self.weights = format;
        self.engine = Arc::new(Mutex::new(None));
        self
    }

    /// The GGUF file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Loads the weights if not yet loaded (blocking).
    fn engine(&self) -> Result<Arc<Engine>, LocalModelError> {
        let mut slot = self
            .engine
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(e) = &*slot {
            return Ok(Arc::clone(e));
        }
        let e = shared_engine(&self.path, self.context, self.weights)?;
        *slot = Some(Arc::clone(&e));
        Ok(e)
    }

    fn loaded(&self) -> Option<Arc<Engine>> {
        self.engine
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Tokens generated so far by every call on this model's weights.
    pub fn tokens_generated(&self) -> u64 {
        self.loaded()
            .map_or(0, |e| e.tokens_generated.load(Ordering::Relaxed))
    }

    /// Whether a generation on this model's weights is running or queued.
    pub fn is_generating(&self) -> bool {
        self.loaded()
            .is_some_and(|e| e.active.load(Ordering::SeqCst) > 0)
    }

    /// The prompt the template renders for `request` (for inspection).
    pub fn render_prompt(&self, request: &ChatRequest) -> Result<String, LocalModelError> {
        self.engine()?.template.render_string(&request.messages)
    }

    fn model_name(&self) -> String {
        self.config.model_name().unwrap_or(DEFAULT_MODEL).to_owned()
    }

    fn error(&self, e: LocalModelError) -> ModelError {
        e.into_model_error(&self.model_name())
    }

    /// Renders, tokenizes and reads the sampling settings (blocking work).
    fn prepare(&self, request: &ChatRequest) -> Result<(Arc<Engine>, Job), LocalModelError> {
        let engine = self.engine()?;
        let mut fields = self.config.kwargs().clone();
        for (k, v) in &request.fields {
            fields.insert(k.clone(), v.clone());
        }
        let sampling = Sampling::from_fields(&fields)?;
        let ignore_eos = match fields.get("ignore_eos") {
            None | Some(Value::Null) => false,
            Some(v) => v.as_bool().ok_or(LocalModelError::BadParameter {
                field: "ignore_eos",
                reason: "expected a boolean",
            })?,
        };
        // The cached prefix changes how the prompt is split into batches,
        // which moves the logits in their last bits: enough to change a
        // seeded draw. A request naming its seed asks for the same text
        // every time, so it evaluates its whole prompt unless it opts in.
        let seeded = fields.get("seed").is_some_and(|v| !v.is_null()) && sampling.temperature > 0.0;
        let cache_prompt = match fields.get("cache_prompt") {
            None | Some(Value::Null) => !seeded,
            Some(v) => v.as_bool().ok_or(LocalModelError::BadParameter {
                field: "cache_prompt",
                reason: "expected a boolean",
            })?,
        };
        let grammar = response_grammar(fields.get("response_format"))?;
        let pieces = engine.template.render(&request.messages)?;
        let prompt = engine.prompt_tokens(&pieces)?;
        if prompt.len() >= engine.context {
            return Err(LocalModelError::ContextLength {
                prompt_tokens: prompt.len(),
                context: engine.context,
            });
        }
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let job = Job {
            prompt,
            sampling,
            ignore_eos,
            cache_prompt,
            grammar,
            id: format!("chatcmpl-local-{}", uuid::Uuid::new_v4().simple()),
            model: self.model_name(),
            created,
        };
        Ok((engine, job))
    }
}

/// The grammar an OpenAI-style `response_format` asks for: none for text,
/// any object for `json_object` (or its `schema`, as llama.cpp allows), the
/// schema's for `json_schema`.
fn response_grammar(format: Option<&Value>) -> Result<Option<Grammar>, LocalModelError> {
    let bad = |why: &str| LocalModelError::ResponseFormat(why.to_owned());
    let Some(format) = format.filter(|f| !f.is_null()) else {
        return Ok(None);
    };
    let kind = format
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("expected an object with a string `type`"))?;
    match kind {
        "text" => Ok(None),
        "json_object" => match format.get("schema") {
            Some(schema) => Ok(Some(Grammar::compile(schema)?)),
            None => Ok(Some(Grammar::any_object())),
        },
        "json_schema" => {
            let schema = format
                .get("json_schema")
                .and_then(|j| j.get("schema"))
                .ok_or_else(|| bad("`json_schema` needs `json_schema.schema`"))?;
            Ok(Some(Grammar::compile(schema)?))
        }
        other => Err(LocalModelError::ResponseFormat(format!(
            "unknown type `{other}` (expected text, json_object or json_schema)"
        ))),
    }
}

#[async_trait::async_trait]
impl ChatModel for LocalModel {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn duplicate(&self) -> Arc<dyn ChatModel> {
        Arc::new(self.clone())
    }

    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        let span = self.span(&request, false);
        crate::traced::call(span, self.complete(request)).await
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        let span = self.span(&request, true);
        crate::traced::open_stream(span, self.generate(request)).await
    }
}

impl LocalModel {
    /// The GenAI `chat {model}` span of one call, as the HTTP providers
    /// open theirs (no server: the model runs in this process).
    fn span(&self, request: &ChatRequest, stream: bool) -> tracing::Span {
        telemetry::chat_span(
            self.config.provider(),
            self.config.model_name(),
            stream,
            None,
            self.config.kwargs(),
            request,
        )
    }

    /// One complete reply: the generation stream, accumulated.
    async fn complete(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        let mut stream = self.generate(request).await?;
        let mut acc = StreamAccumulator::new();
        let mut id = None;
        let mut created = None;
        let mut prompt_details = None;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            if let Some(raw) = chunk.raw() {
                id = id.or_else(|| raw.get("id").cloned());
                created = created.or_else(|| raw.get("created").cloned());
                prompt_details =
                    prompt_details.or_else(|| raw.pointer("/usage/prompt_tokens_details").cloned());
            }
            acc.push(&chunk);
        }
        if !acc.is_done() {
            return Err(ModelError::new(
                ModelErrorKind::StreamFailed,
                PROVIDER,
                Some(&self.model_name()),
                "generation ended without a result",
            ));
        }
        let done = acc.finish();
        let usage = done.usage.clone().unwrap_or_default();
        let raw = json!({
            "id": id.unwrap_or(Value::Null),
            "object": "chat.completion",
            "created": created.unwrap_or(Value::Null),
            "model": self.model_name(),
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": done.text},
                "finish_reason": done.finish_reason,
            }],
            "usage": {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.total_tokens,
                "prompt_tokens_details": prompt_details.unwrap_or(Value::Null),
            },
        });
        Ok(ChatResponse::from_raw(raw))
    }

    /// Prepares the prompt and starts generating on a blocking thread.
    async fn generate(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        let this = self.clone();
        let (engine, job) = tokio::task::spawn_blocking(move || this.prepare(&request))
            .await
            .map_err(|e| self.error(LocalModelError::Compute(e.to_string())))?
            .map_err(|e| self.error(e))?;
        // A small buffer: generation runs at most a few tokens ahead of the
        // reader, and stops soon after the reader goes away.
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        tokio::task::spawn_blocking(move || generate::run(&engine, &job, &tx));
        Ok(Box::pin(futures_util::stream::unfold(
            rx,
            |mut rx| async move { rx.recv().await.map(|item| (item, rx)) },
        )))
    }
}

#[cfg(test)]
mod tests;
