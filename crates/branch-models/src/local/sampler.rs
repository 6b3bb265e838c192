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
/// Constrained sampling draws among at most this many allowed tokens.
pub const ALLOWED_TOP_K: usize = 40;
/// Constrained sampling checks the likeliest tokens first, this many at a
/// time before it looks at the whole vocabulary.
const CANDIDATE_WINDOW: usize = 1024;

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
        let candidates = (0..logits.len()).map(|i| u32::try_from(i).unwrap_or(0));
        self.draw(logits, candidates).unwrap_or(0)
    }

    /// The next token among those `allowed` accepts (constrained
    /// decoding); `None` when it accepts none. Tokens are tried in order
    /// of decreasing logit, so usually only a handful are checked: the
    /// best one when greedy, else the best [`ALLOWED_TOP_K`].
    pub fn sample_allowed(
        &mut self,
        logits: &[f32],
        mut allowed: impl FnMut(u32) -> bool,
    ) -> Option<u32> {
        let want = if self.temperature <= 0.0 {
            1
        } else {
            ALLOWED_TOP_K
        };
        let by_logit = |a: &u32, b: &u32| {
            logits[*b as usize]
                .total_cmp(&logits[*a as usize])
                .then(a.cmp(b))
        };
        let mut order: Vec<u32> = (0..logits.len())
            .map(|i| u32::try_from(i).unwrap_or(0))
            .collect();
        let head = order.len().min(CANDIDATE_WINDOW);
        if head == 0 {
            return None;
        }
        if head < order.len() {
            order.select_nth_unstable_by(head - 1, by_logit);
        }
        order[..head].sort_unstable_by(by_logit);
        let mut pick = |slice: &[u32]| -> Vec<u32> {
            slice
                .iter()
                .copied()
                .filter(|&t| allowed(t))
                .take(want)
                .collect()
        };
        let mut kept = pick(&order[..head]);
        if kept.is_empty() && head < order.len() {
            // Nothing allowed among the likeliest: look at the rest.
            order[head..].sort_unstable_by(by_logit);
            kept = pick(&order[head..]);
        }
        if self.temperature <= 0.0 {
            return kept.first().copied();
        }
        self.draw(logits, kept.into_iter())
    }

    /// Temperature and nucleus sampling among `candidates`.
    fn draw(&mut self, logits: &[f32], candidates: impl Iterator<Item = u32>) -> Option<u32> {
        let candidates: Vec<u32> = candidates.collect();
        let max = candidates
            .iter()
            .map(|&t| logits[t as usize])
            .fold(f32::NEG_INFINITY, f32::max);
        let mut probs: Vec<(u32, f32)> = candidates
            .into_iter()
            .map(|t| (t, ((logits[t as usize] - max) / self.temperature).exp()))
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
                return Some(id);
            }
            target -= p;
        }
        probs.last().map(|p| p.0)
    }
}
