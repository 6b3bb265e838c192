//! Seeded sampling: greedy at temperature 0, otherwise temperature and
//! nucleus (top-p) sampling from a seeded generator, so the same seed gives
//! the same text.

use serde_json::{Map, Value};

use super::error::LocalModelError;
use super::llama::argmax;

/// Sampling settings of one call.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampling {
    /// 0 = greedy.
    pub temperature: f32,
    /// Nucleus mass in (0, 1].
    pub top_p: f32,
    /// Generator seed.
    pub seed: u64,
    /// Tokens to generate at most.
    pub max_tokens: usize,
    /// Texts that end the reply (not included in it).
    pub stop: Vec<String>,
}

/// llama.cpp server's defaults, so the same request behaves alike here and there.
pub const DEFAULT_TEMPERATURE: f32 = 0.8;
/// Default nucleus mass.
pub const DEFAULT_TOP_P: f32 = 0.95;
/// Default reply length cap.
pub const DEFAULT_MAX_TOKENS: usize = 512;

fn number(fields: &Map<String, Value>, key: &'static str) -> Result<Option<f64>, LocalModelError> {
    match fields.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or(LocalModelError::BadParameter {
            field: key,
            reason: "expected a number",
        }),
    }
}

impl Sampling {
    /// Reads `temperature`, `top_p`, `seed`, `max_tokens` /
    /// `max_completion_tokens` and `stop` from a request body; a missing
    /// seed is drawn at random.
    pub fn from_fields(fields: &Map<String, Value>) -> Result<Self, LocalModelError> {
        let temperature = number(fields, "temperature")?.unwrap_or(f64::from(DEFAULT_TEMPERATURE));
        if !(0.0..=100.0).contains(&temperature) {
            return Err(LocalModelError::BadParameter {
                field: "temperature",
                reason: "must be between 0 and 100",
            });
        }
        let top_p = number(fields, "top_p")?.unwrap_or(f64::from(DEFAULT_TOP_P));
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(LocalModelError::BadParameter {
                field: "top_p",
                reason: "must be in (0, 1]",
            });
        }
        let seed = match fields.get("seed") {
            None | Some(Value::Null) => fastrand::u64(..),
            Some(v) => v.as_u64().ok_or(LocalModelError::BadParameter {
                field: "seed",
                reason: "expected a non-negative integer",
            })?,
        };
        let max_key = if fields.contains_key("max_completion_tokens") {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        let max_tokens = match fields.get(max_key) {
            None | Some(Value::Null) => DEFAULT_MAX_TOKENS,
            Some(v) => v
                .as_u64()
                .filter(|&n| n > 0)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or(LocalModelError::BadParameter {
                    field: "max_tokens",
                    reason: "expected a positive integer",
                })?,
        };
        let stop = match fields.get("stop") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(items)) => items
                .iter()
                .map(|i| i.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or(LocalModelError::BadParameter {
                    field: "stop",
                    reason: "expected a string or a list of strings",
                })?,
            Some(_) => {
                return Err(LocalModelError::BadParameter {
                    field: "stop",
                    reason: "expected a string or a list of strings",
                });
            }
        };
        Ok(Self {
            temperature: temperature as f32,
            top_p: top_p as f32,
            seed,
            max_tokens,
            stop: stop.into_iter().filter(|s| !s.is_empty()).collect(),
        })
    }
}

/// Draws tokens according to [`Sampling`].
#[derive(Debug)]
pub struct Sampler {
    temperature: f32,
    top_p: f32,
    rng: fastrand::Rng,
}

impl Sampler {
    /// A sampler seeded from `sampling.seed`.
    pub fn new(sampling: &Sampling) -> Self {
        Self {
            temperature: sampling.temperature,
            top_p: sampling.top_p,
            rng: fastrand::Rng::with_seed(sampling.seed),
        }
    }

    /// The next token from the logits.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.temperature <= 0.0 || logits.is_empty() {
            return argmax(logits);
        }
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut probs: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| {
                (
                    u32::try_from(i).unwrap_or(0),
                    ((l - max) / self.temperature).exp(),
                )
            })
            .collect();
        let total: f32 = probs.iter().map(|p| p.1).sum();
        // Descending probability, then ascending id: a total order, so the
        // draw depends on the seed only.
        probs.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut kept = 0.0;
        let mut cut = probs.len();
        for (i, p) in probs.iter().enumerate() {
            kept += p.1 / total;
            if kept >= self.top_p {
                cut = i + 1;
                break;
            }
        }
        probs.truncate(cut);
        let mass: f32 = probs.iter().map(|p| p.1).sum();
        let mut target = self.rng.f32() * mass;
        for &(id, p) in &probs {
            if target < p {
                return id;
            }
            target -= p;
        }
        probs.last().map_or(0, |p| p.0)
    }
}
