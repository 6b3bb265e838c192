//! The llama-architecture forward pass over quantized GGUF weights (CPU).
//!
//! Written against candle-core/candle-nn directly rather than
//! candle-transformers' `quantized_llama`: that crate compiles hundreds of
//! models, and this one needs a KV cache that can be cut back to the prefix
//! the next prompt shares with it, grouped-query attention without copying
//! K/V per head, projections sharing an input stacked into one matrix, and
//! its own Q4_1 kernel (`q4_1.rs`).

use std::borrow::Cow;
use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QMatMul, QStorage, QTensor, gguf_file};
use candle_core::{D, DType, Device, Module, Tensor};

use super::attend::{attend_one, attend_rows};
use super::block_matmul::BlockMatrix;
use super::error::LocalModelError;
use super::kv::LayerCache;
use super::q4_1::Q4_1Matrix;
use super::q8_0::Q8_0Matrix;

/// Hyper-parameters from the GGUF metadata (`llama.*`).
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    /// Transformer blocks.
    pub n_layer: usize,
    /// Hidden size.
    pub n_embd: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
    /// Training context length.
    pub context_length: usize,
    /// RMS norm epsilon.
    pub rms_eps: f64,
    /// RoPE base frequency.
    pub rope_base: f32,
}

impl LlamaConfig {
    fn head_dim(&self) -> usize {
        self.n_embd / self.n_head
    }
}

struct Layer {
    attn_norm: Tensor,
    /// Q, K and V.
    qkv: Projections,
    wo: Matrix,
    ffn_norm: Tensor,
    /// Gate and up.
    gate_up: Projections,
    down: Matrix,
}

/// A weight matrix: ours for Q4_1 (candle's results, vectorized; see
/// `q4_1.rs`) and Q8_0 (candle's portable results on every CPU; see
/// `q8_0.rs`), candle's quantized matmul for the other formats.
enum Matrix {
    Candle(QMatMul),
    Q4_1(Q4_1Matrix),
    Q8_0(Q8_0Matrix),
}

impl Matrix {
    /// A `rows × cols` matrix of `dtype` from its GGUF bytes.
    fn from_bytes(
        bytes: Vec<u8>,
        dtype: GgmlDType,
        rows: usize,
        cols: usize,
    ) -> candle_core::Result<Self> {
        let wrong_size = || candle_core::Error::Msg(format!("{dtype:?} matrix of the wrong size"));
        match dtype {
            GgmlDType::Q4_1 => {
                return Q4_1Matrix::from_bytes(&bytes, rows, cols)
                    .map(Self::Q4_1)
                    .ok_or_else(wrong_size);
            }
            GgmlDType::Q8_0 => {
                return Q8_0Matrix::from_bytes(&bytes, rows, cols)
                    .map(Self::Q8_0)
                    .ok_or_else(wrong_size);
            }
            _ => {}
        }
        // candle reads the buffer as a slice of blocks (align 2 or 4) and
        // panics when it is not aligned; a fresh allocation is, but check.
        if bytes.as_ptr().align_offset(STACK_ALIGN) != 0 {
            candle_core::bail!("unaligned weight buffer");
        }
        let storage = QStorage::from_data(Cow::Owned(bytes), &Device::Cpu, dtype)?;
        QMatMul::from_qtensor(QTensor::new(storage, (rows, cols))?).map(Self::Candle)
    }

    fn new(t: QTensor) -> candle_core::Result<Self> {
        if matches!(t.dtype(), GgmlDType::Q4_1 | GgmlDType::Q8_0) {
            let (rows, cols) = t.shape().dims2()?;
            return Self::from_bytes(t.data()?.into_owned(), t.dtype(), rows, cols);
        }
        QMatMul::from_arc(Arc::new(t)).map(Self::Candle)
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Self::Candle(m) => m.forward(x),
            Self::Q4_1(m) => m.forward(x),
            Self::Q8_0(m) => m.forward(x),
        }
    }
}

/// Matrices applied to the same input. When they share one format their
/// rows are stacked into one matrix (exact: each output is the dot product
/// of one row of blocks with the input, wherever the row sits), so the
/// input is quantized once and the thread pool woken once instead of once
/// per matrix; otherwise they stay apart.
enum Projections {
    Stacked { matrix: Matrix, widths: Vec<usize> },
    Apart(Vec<Matrix>),
}

impl Projections {
    fn new(parts: Vec<QTensor>, what: &str) -> Result<Self, LocalModelError> {
        match stack_rows(&parts).map_err(bad(what))? {
            Some((matrix, widths)) => Ok(Self::Stacked { matrix, widths }),
            None => parts
                .into_iter()
                .map(|t| Matrix::new(t).map_err(bad(what)))
                .collect::<Result<_, _>>()
                .map(Self::Apart),
        }
    }

    /// One output per matrix, in order.
    fn forward(&self, x: &Tensor) -> candle_core::Result<Vec<Tensor>> {
        match self {
            Self::Stacked { matrix, widths } => {
                let y = matrix.forward(x)?;
                let mut at = 0;
                widths
                    .iter()
                    .map(|&w| {
                        let part = y.narrow(D::Minus1, at, w);
                        at += w;
                        part
                    })
                    .collect()
            }
            Self::Apart(ms) => ms.iter().map(|m| m.forward(x)).collect(),
        }
    }
}

/// Alignment asked of a stacked buffer handed to candle.
const STACK_ALIGN: usize = 16;

/// The rows of `parts` (each `(rows, cols)`, one format, one width) as one
/// matrix, and each part's row count; `None` when they differ in format or
/// width.
fn stack_rows(parts: &[QTensor]) -> candle_core::Result<Option<(Matrix, Vec<usize>)>> {
    let Some(first) = parts.first() else {
        return Ok(None);
    };
    let dtype = first.dtype();
    let (_, cols) = first.shape().dims2()?;
    let mut widths = Vec::with_capacity(parts.len());
    for p in parts {
        let (rows, c) = p.shape().dims2()?;
        if p.dtype() != dtype || c != cols {
            return Ok(None);
        }
        widths.push(rows);
    }
    let mut bytes = Vec::new();
    for p in parts {
        bytes.extend_from_slice(&p.data()?);
    }
    let rows = widths.iter().sum::<usize>();
    Ok(Some((
        Matrix::from_bytes(bytes, dtype, rows, cols)?,
        widths,
    )))
}

/// The loaded weights; shared by every generation.
pub struct LlamaWeights {
    config: LlamaConfig,
    embeddings: Tensor,
    layers: Vec<Layer>,
    output_norm: Tensor,
    output: Matrix,
    /// Positions the RoPE tables cover (the engine's context window).
    positions: usize,
    cos: Tensor,
    sin: Tensor,
    vocab: usize,
}

impl std::fmt::Debug for LlamaWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaWeights")
            .field("config", &self.config)
            .field("vocab", &self.vocab)
            .finish_non_exhaustive()
    }
}

/// Checks that every tensor the model reads is there with the shape its
/// hyper-parameters give, before any is read: the forward pass then never
/// meets a shape it does not expect, and a block count the file's tensors
/// do not back is refused before anything is allocated for it.
fn check_shapes(ct: &gguf_file::Content, cfg: &LlamaConfig) -> Result<(), LocalModelError> {
    let dims = |name: &str| -> Result<&[usize], LocalModelError> {
        ct.tensor_infos
            .get(name)
            .map(|t| t.shape.dims())
            .ok_or_else(|| LocalModelError::BadGguf {
                what: name.to_owned(),
                reason: "the tensor is missing".into(),
            })
    };
    let expect = |name: &str, want: &[usize]| -> Result<(), LocalModelError> {
        let got = dims(name)?;
        if got == want {
            Ok(())
        } else {
            Err(LocalModelError::BadGguf {
                what: name.to_owned(),
                reason: format!("shape {got:?}, the model's metadata gives {want:?}"),
            })
        }
    };
    let e = cfg.n_embd;
    let kv = cfg.n_head_kv.checked_mul(cfg.head_dim()).ok_or_else(|| {
        LocalModelError::bad_metadata("llama.attention.head_count_kv", "too large")
    })?;
    let vocab = match dims("token_embd.weight")? {
        &[v, cols] if v > 0 && cols == e => v,
        got => {
            return Err(LocalModelError::BadGguf {
                what: "token_embd.weight".into(),
                reason: format!("shape {got:?}, expected (vocabulary, {e})"),
            });
        }
    };
    if ct.tensor_infos.contains_key("output.weight") {
        expect("output.weight", &[vocab, e])?;
    }
    expect("output_norm.weight", &[e])?;
    for i in 0..cfg.n_layer {
        let p = |s: &str| format!("blk.{i}.{s}.weight");
        let ff = match dims(&p("ffn_gate"))? {
            &[ff, cols] if cols == e => ff,
            got => {
                return Err(LocalModelError::BadGguf {
                    what: p("ffn_gate"),
                    reason: format!("shape {got:?}, expected (feed-forward, {e})"),
                });
            }
        };
        expect(&p("attn_norm"), &[e])?;
        expect(&p("ffn_norm"), &[e])?;
        expect(&p("attn_q"), &[e, e])?;
        expect(&p("attn_k"), &[kv, e])?;
        expect(&p("attn_v"), &[kv, e])?;
        expect(&p("attn_output"), &[e, e])?;
        expect(&p("ffn_up"), &[ff, e])?;
        expect(&p("ffn_down"), &[e, ff])?;
    }
    Ok(())
}

fn bad(what: &str) -> impl Fn(candle_core::Error) -> LocalModelError + '_ {
    move |e| LocalModelError::BadGguf {
        what: what.to_owned(),
        reason: e.to_string(),
    }
}

/// How the matrices of a GGUF are held in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WeightFormat {
    /// Every matrix as the file stores it: the model the file describes,
    /// whose greedy replies follow llama.cpp's but at near ties (tested
    /// against a recording; see docs/compat.md §19). Q4_1 matrices (the
    /// default model's) run on our vectorized kernel (`q4_1.rs`), which
    /// `cargo xtask bench local` measures at least as fast as the Q8_0
    /// conversion with half the bytes per token.
    #[default]
    AsStored,
    /// Q4_0, Q4_1, Q5_0 and Q5_1 become Q8_0 (requantized, so close to the
    /// stored values but not equal: greedy replies drift from the stored
    /// model's after a few words); other formats are kept. Kept for
    /// formats whose candle kernel is scalar (Q4_0/Q5) and for comparison.
    Q8_0,
}

/// Reads a tensor, converting it as `format` says.
fn qtensor<R: std::io::Read + std::io::Seek>(
    ct: &gguf_file::Content,
    r: &mut R,
    name: &str,
    format: WeightFormat,
) -> Result<QTensor, LocalModelError> {
    let t = ct.tensor(r, name, &Device::Cpu).map_err(bad(name))?;
    match t.dtype() {
        GgmlDType::Q4_0 | GgmlDType::Q4_1 | GgmlDType::Q5_0 | GgmlDType::Q5_1
            if format == WeightFormat::Q8_0 =>
        {
            let f = t.dequantize(&Device::Cpu).map_err(bad(name))?;
            QTensor::quantize(&f, GgmlDType::Q8_0).map_err(bad(name))
        }
        _ => Ok(t),
    }
}

fn matmul<R: std::io::Read + std::io::Seek>(
    ct: &gguf_file::Content,
    r: &mut R,
    name: &str,
    format: WeightFormat,
) -> Result<Matrix, LocalModelError> {
    Matrix::new(qtensor(ct, r, name, format)?).map_err(bad(name))
}

fn dense<R: std::io::Read + std::io::Seek>(
    ct: &gguf_file::Content,
    r: &mut R,
    name: &str,
) -> Result<Tensor, LocalModelError> {
    ct.tensor(r, name, &Device::Cpu)
        .and_then(|t| t.dequantize(&Device::Cpu))
        .map_err(bad(name))
}

impl LlamaWeights {
    /// Loads the weights of a llama GGUF, for decoding at most `positions`
    /// positions (the context window; at most the model's own).
    pub fn load<R: std::io::Read + std::io::Seek>(
        ct: &gguf_file::Content,
        r: &mut R,
        config: LlamaConfig,
        positions: usize,
        format: WeightFormat,
    ) -> Result<Self, LocalModelError> {
        if config.n_head == 0
            || config.n_head_kv == 0
            || config.n_head % config.n_head_kv != 0
            || config.n_embd % config.n_head != 0
            || config.head_dim() % 2 != 0
        {
            return Err(LocalModelError::bad_metadata(
                "llama.attention.head_count",
                "heads do not divide the embedding evenly",
            ));
        }
        check_shapes(ct, &config)?;
        let positions = positions.min(config.context_length);
        let embeddings = dense(ct, r, "token_embd.weight")?;
        let vocab = embeddings.dim(0).map_err(bad("token_embd.weight"))?;
        // Tied embeddings when the GGUF has no separate output matrix.
        let output = if ct.tensor_infos.contains_key("output.weight") {
            matmul(ct, r, "output.weight", format)?
        } else {
            matmul(ct, r, "token_embd.weight", format)?
        };
        let output_norm = dense(ct, r, "output_norm.weight")?;
        let mut layers = Vec::with_capacity(config.n_layer);
        for i in 0..config.n_layer {
            let p = |s: &str| format!("blk.{i}.{s}.weight");
            let qkv = ["attn_q", "attn_k", "attn_v"]
                .iter()
                .map(|m| qtensor(ct, r, &p(m), format))
                .collect::<Result<Vec<_>, _>>()?;
            let gate_up = ["ffn_gate", "ffn_up"]
                .iter()
                .map(|m| qtensor(ct, r, &p(m), format))
                .collect::<Result<Vec<_>, _>>()?;
            layers.push(Layer {
                attn_norm: dense(ct, r, &p("attn_norm"))?,
                qkv: Projections::new(qkv, &p("attn_qkv"))?,
                wo: matmul(ct, r, &p("attn_output"), format)?,
                ffn_norm: dense(ct, r, &p("ffn_norm"))?,
                gate_up: Projections::new(gate_up, &p("ffn_gate_up"))?,
                down: matmul(ct, r, &p("ffn_down"), format)?,
            });
        }
        let (cos, sin) = rope_tables(&config, positions).map_err(LocalModelError::compute)?;
        Ok(Self {
            config,
            positions,
            embeddings,
            layers,
            output_norm,
            output,
            cos,
            sin,
            vocab,
        })
    }

    /// The model's hyper-parameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// Vocabulary size of the embedding matrix.
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// A fresh decoding state holding up to `context` positions.
    pub fn state(&self, context: usize) -> State {
        State {
            caches: (0..self.layers.len())
                .map(|_| LayerCache::default())
                .collect(),
            pos: 0,
            max: context.min(self.positions),
        }
    }

    /// Runs `tokens` at the state's next positions; returns the logits of
    /// the last one.
    pub fn forward(&self, state: &mut State, tokens: &[u32]) -> candle_core::Result<Vec<f32>> {
        let cfg = &self.config;
        let (hd, n_kv) = (cfg.head_dim(), cfg.n_head_kv);
        let len = tokens.len();
        let ids = Tensor::new(tokens, &Device::Cpu)?;
        let mut h = self.embeddings.index_select(&ids, 0)?.unsqueeze(0)?;
        let cos = self.cos.narrow(0, state.pos, len)?;
        let sin = self.sin.narrow(0, state.pos, len)?;
        let total = state.pos + len;
        let scale = 1.0 / (hd as f64).sqrt();
        for (layer, cache) in self.layers.iter().zip(state.caches.iter_mut()) {
            let x = candle_nn::ops::rms_norm(&h, &layer.attn_norm, cfg.rms_eps as f32)?;
            let heads = |t: &Tensor, n: usize| -> candle_core::Result<Tensor> {
                t.reshape((1, len, n, hd))?.transpose(1, 2)?.contiguous()
            };
            let [q, k, v] = <[Tensor; 3]>::try_from(layer.qkv.forward(&x)?)
                .map_err(|_| candle_core::Error::Msg("Q, K and V expected".into()))?;
            let q = candle_nn::rotary_emb::rope_i(&heads(&q, cfg.n_head)?, &cos, &sin)?;
            let k = candle_nn::rotary_emb::rope_i(&heads(&k, n_kv)?, &cos, &sin)?;
            let v = heads(&v, n_kv)?;
            let (k, v) = cache.write(state.pos, &k, &v, state.max)?;
            // As candle scales: the factor computed in f64, applied in f32.
            let y = if len == 1 {
                attend_one(&q, &k, &v, scale as f32)?
            } else {
                attend_rows(&q, &k, &v, scale as f32)?
            };
            h = (h + layer.wo.forward(&y)?)?;
            let x = candle_nn::ops::rms_norm(&h, &layer.ffn_norm, cfg.rms_eps as f32)?;
            let [gate, up] = <[Tensor; 2]>::try_from(layer.gate_up.forward(&x)?)
                .map_err(|_| candle_core::Error::Msg("gate and up expected".into()))?;
            let act = (candle_nn::ops::silu(&gate)? * up)?;
            h = (h + layer.down.forward(&act)?)?;
        }
        state.pos = total;
        let last = h.narrow(1, len - 1, 1)?;
        let last = candle_nn::ops::rms_norm(&last, &self.output_norm, cfg.rms_eps as f32)?;
        self.output.forward(&last)?.flatten_all()?.to_vec1::<f32>()
    }
}

/// Decoding state: the KV caches and the next position. Every position
/// below `pos` holds the keys and values of one evaluated token; a
/// `forward` that fails leaves `pos` where it was.
#[derive(Debug)]
pub struct State {
    caches: Vec<LayerCache>,
    pos: usize,
    max: usize,
}

impl State {
    /// Positions used so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Forgets every position from `pos` on (the cache keeps its memory).
    pub fn truncate(&mut self, pos: usize) {
        self.pos = self.pos.min(pos);
    }
}

/// The RoPE cosines and sines of `positions` positions.
fn rope_tables(cfg: &LlamaConfig, positions: usize) -> candle_core::Result<(Tensor, Tensor)> {
    let hd = cfg.head_dim();
    let inv: Vec<f32> = (0..hd)
        .step_by(2)
        .map(|i| 1.0 / cfg.rope_base.powf(i as f32 / hd as f32))
        .collect();
    let n = inv.len();
    let inv = Tensor::from_vec(inv, (1, n), &Device::Cpu)?;
    let Ok(end) = u32::try_from(positions) else {
        candle_core::bail!("a context window of {positions} positions");
    };
    let t = Tensor::arange(0u32, end, &Device::Cpu)?
        .to_dtype(DType::F32)?
        .reshape((positions, 1))?;
    let freqs = t.matmul(&inv)?;
    Ok((freqs.cos()?, freqs.sin()?))
}

/// Index of the largest logit (first on ties).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = (0usize, f32::NEG_INFINITY);
    for (i, &l) in logits.iter().enumerate() {
        if l > best.1 {
            best = (i, l);
        }
    }
    u32::try_from(best.0).unwrap_or(0)
}
