//! A loaded model: weights, tokenizer and template from one GGUF file, shared
//! process-wide by path so every `LocalModel` of the same file uses one copy.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use candle_core::quantized::gguf_file;

use super::error::LocalModelError;
use super::llama::{LlamaConfig, LlamaWeights, WeightFormat};
use super::prefix::PromptCache;
use super::template::{ChatTemplate, IM_END, Piece};
use super::tokenizer::{PreTokenizer, Tokenizer};

/// Context window used when the caller gives none (capped by the model's).
pub const DEFAULT_CONTEXT: usize = 2048;

/// Weights, tokenizer and template of one GGUF.
#[derive(Debug)]
pub struct Engine {
    pub(crate) weights: LlamaWeights,
    pub(crate) tokenizer: Tokenizer,
    pub(crate) template: ChatTemplate,
    pub(crate) stop_ids: Vec<u32>,
    pub(crate) context: usize,
    /// One generation at a time: two would only share the same cores.
    pub(crate) turn: Mutex<()>,
    /// The last calls' evaluated tokens (see [`super::prefix`]); a call
    /// takes its sequence out and puts it back only when consistent.
    pub(crate) prompt_cache: Mutex<PromptCache>,
    pub(crate) tokens_generated: AtomicU64,
    pub(crate) active: AtomicUsize,
}

fn meta<'a>(
    ct: &'a gguf_file::Content,
    key: &str,
) -> Result<&'a gguf_file::Value, LocalModelError> {
    ct.metadata
        .get(key)
        .ok_or_else(|| LocalModelError::bad_metadata(key, "missing"))
}

fn meta_usize(ct: &gguf_file::Content, key: &str) -> Result<usize, LocalModelError> {
    let v = meta(ct, key)?;
    v.to_u32()
        .map(|n| n as usize)
        .or_else(|_| v.to_u64().map(|n| usize::try_from(n).unwrap_or(usize::MAX)))
        .map_err(|_| LocalModelError::bad_metadata(key, "expected an unsigned integer"))
}

fn meta_f32(ct: &gguf_file::Content, key: &str) -> Result<f32, LocalModelError> {
    meta(ct, key)?
        .to_f32()
        .map_err(|_| LocalModelError::bad_metadata(key, "expected a float"))
}

fn meta_str<'a>(ct: &'a gguf_file::Content, key: &str) -> Result<&'a str, LocalModelError> {
    meta(ct, key)?
        .to_string()
        .map(String::as_str)
        .map_err(|_| LocalModelError::bad_metadata(key, "expected a string"))
}

fn meta_strings(ct: &gguf_file::Content, key: &str) -> Result<Vec<String>, LocalModelError> {
    meta(ct, key)?
        .to_vec()
        .map_err(|_| LocalModelError::bad_metadata(key, "expected an array"))?
        .iter()
        .map(|v| v.to_string().cloned())
        .collect::<Result<_, _>>()
        .map_err(|_| LocalModelError::bad_metadata(key, "expected an array of strings"))
}

fn meta_ints(ct: &gguf_file::Content, key: &str) -> Result<Vec<i64>, LocalModelError> {
    meta(ct, key)?
        .to_vec()
        .map_err(|_| LocalModelError::bad_metadata(key, "expected an array"))?
        .iter()
        .map(|v| v.to_i32().map(i64::from).or_else(|_| v.to_i64()))
        .collect::<Result<_, _>>()
        .map_err(|_| LocalModelError::bad_metadata(key, "expected an array of integers"))
}

/// Reads the tokenizer from the GGUF metadata.
pub fn tokenizer_from_gguf(ct: &gguf_file::Content) -> Result<Tokenizer, LocalModelError> {
    let model = meta_str(ct, "tokenizer.ggml.model")?;
    if model != "gpt2" {
        return Err(LocalModelError::UnsupportedTokenizer {
            what: format!("tokenizer model `{model}` (only byte-level BPE `gpt2`)"),
        });
    }
    let pre = match ct.metadata.get("tokenizer.ggml.pre") {
        Some(_) => PreTokenizer::from_gguf_name(meta_str(ct, "tokenizer.ggml.pre")?)?,
        None => PreTokenizer::Gpt2,
    };
    Tokenizer::new(
        meta_strings(ct, "tokenizer.ggml.tokens")?,
        &meta_ints(ct, "tokenizer.ggml.token_type")?,
        &meta_strings(ct, "tokenizer.ggml.merges")?,
        pre,
    )
}

/// Reads only the tokenizer of a GGUF file (no weights).
pub fn tokenizer_from_file(path: &Path) -> Result<Tokenizer, LocalModelError> {
    let (ct, _) = super::header::open(path)?;
    tokenizer_from_gguf(&ct)
}

impl Engine {
    /// Loads a GGUF file (blocking: seconds of I/O and conversion).
    pub fn load(
        path: &Path,
        context: Option<usize>,
        format: WeightFormat,
    ) -> Result<Self, LocalModelError> {
        let (ct, mut file) = super::header::open(path)?;
        let arch = meta_str(&ct, "general.architecture")?;
        if arch != "llama" {
            return Err(LocalModelError::UnsupportedArchitecture(arch.to_owned()));
        }
        let config = LlamaConfig {
            n_layer: meta_usize(&ct, "llama.block_count")?,
            n_embd: meta_usize(&ct, "llama.embedding_length")?,
            n_head: meta_usize(&ct, "llama.attention.head_count")?,
            n_head_kv: meta_usize(&ct, "llama.attention.head_count_kv")?,
            context_length: meta_usize(&ct, "llama.context_length")?,
            rms_eps: f64::from(meta_f32(&ct, "llama.attention.layer_norm_rms_epsilon")?),
            rope_base: meta_f32(&ct, "llama.rope.freq_base").unwrap_or(10_000.0),
        };
        let tokenizer = tokenizer_from_gguf(&ct)?;
        let template = ChatTemplate::from_jinja(meta_str(&ct, "tokenizer.chat_template")?)?;
        let mut stop_ids = Vec::new();
        if let Ok(eos) = meta_usize(&ct, "tokenizer.ggml.eos_token_id") {
            stop_ids.push(u32::try_from(eos).unwrap_or(u32::MAX));
        }
        for name in [IM_END, "<|endoftext|>"] {
            if let Some(id) = tokenizer.control_id(name) {
                stop_ids.push(id);
            }
        }
        let context = context
            .unwrap_or(DEFAULT_CONTEXT)
            .min(config.context_length)
            .max(1);
        let weights = LlamaWeights::load(&ct, &mut file, config, context, format)?;
        if weights.vocab() < tokenizer.vocab_size() {
            return Err(LocalModelError::bad_metadata(
                "tokenizer.ggml.tokens",
                "more tokens than embedding rows",
            ));
        }
        Ok(Self {
            weights,
            tokenizer,
            template,
            stop_ids,
            context,
            turn: Mutex::new(()),
            prompt_cache: Mutex::new(PromptCache::default()),
            tokens_generated: AtomicU64::new(0),
            active: AtomicUsize::new(0),
        })
    }

    /// The prompt tokens of a rendered conversation.
    pub fn prompt_tokens(&self, pieces: &[Piece]) -> Result<Vec<u32>, LocalModelError> {
        let mut ids = Vec::new();
        for p in pieces {
            match p {
                Piece::Control(name) => {
                    ids.push(self.tokenizer.control_id(name).ok_or_else(|| {
                        LocalModelError::UnsupportedTokenizer {
                            what: format!(
                                "the template's control token {name} is not in the vocabulary"
                            ),
                        }
                    })?)
                }
                Piece::Text(t) => ids.extend(self.tokenizer.encode(t)),
            }
        }
        Ok(ids)
    }
}

/// Live engines by file, context window and weight format.
type EngineMap = HashMap<(PathBuf, Option<usize>, WeightFormat), Weak<Engine>>;

/// The process-wide engine of `path`, loading it if no live one exists.
pub fn shared_engine(
    path: &Path,
    context: Option<usize>,
    format: WeightFormat,
) -> Result<Arc<Engine>, LocalModelError> {
    static ENGINES: OnceLock<Mutex<EngineMap>> = OnceLock::new();
    let engines = ENGINES.get_or_init(Default::default);
    let key = (path.to_owned(), context, format);
    // Held while loading: a second caller waits for the first load instead
    // of loading the same file again.
    let mut map = engines
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(engine) = map.get(&key).and_then(Weak::upgrade) {
        return Ok(engine);
    }
    let engine = Arc::new(Engine::load(path, context, format)?);
    map.retain(|_, w| w.strong_count() > 0);
    map.insert(key, Arc::downgrade(&engine));
    Ok(engine)
}
