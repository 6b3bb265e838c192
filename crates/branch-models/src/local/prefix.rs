//! The prompt cache: the tokens a decoding state has evaluated, kept
//! between calls so the next prompt that starts with them only evaluates
//! the rest (llama.cpp's `cache_prompt`).
//!
//! A conversation's next turn repeats the whole history before the new
//! message, so without this the time to the first token grows with the
//! history. The cache is keyed by the tokens themselves: the keys and values
//! of a position depend only on the tokens up to it, so reusing another
//! caller's matching prefix gives the same result as computing it, and a
//! prompt that diverges reuses only the part before the divergence.
//! [`crate::limits::LOCAL_PROMPT_CACHES`] sequences are kept per loaded model.

use super::llama::State;
use crate::limits::LOCAL_PROMPT_CACHES;

/// The sequences kept between calls, oldest first, at most
/// [`LOCAL_PROMPT_CACHES`].
#[derive(Debug, Default)]
pub struct PromptCache {
    sequences: Vec<Sequence>,
}

impl PromptCache {
    /// Takes out the sequence sharing the longest prefix with `prompt`;
    /// with none sharing any, the oldest when the cache is full (it would be
    /// evicted by this call's sequence anyway: its buffers are reused).
    pub fn take(&mut self, prompt: &[u32]) -> Option<Sequence> {
        let best = self
            .sequences
            .iter()
            .enumerate()
            .map(|(i, s)| (s.shared(prompt), i))
            .max()
            .filter(|&(shared, _)| shared > 0 || self.sequences.len() >= LOCAL_PROMPT_CACHES)
            .map(|(shared, i)| if shared > 0 { i } else { 0 })?;
        Some(self.sequences.remove(best))
    }

    /// Keeps `seq` as the newest, evicting the oldest beyond the cap.
    pub fn put(&mut self, seq: Sequence) {
        self.sequences.push(seq);
        while self.sequences.len() > LOCAL_PROMPT_CACHES {
            self.sequences.remove(0);
        }
    }
}

/// A decoding state and the tokens it holds, position by position.
#[derive(Debug)]
pub struct Sequence {
    tokens: Vec<u32>,
    state: State,
}

impl Sequence {
    /// An empty sequence over `state`.
    pub fn new(mut state: State) -> Self {
        state.truncate(0);
        Self {
            tokens: Vec::new(),
            state,
        }
    }

    /// Keeps the longest prefix of the cached tokens that `prompt` starts
    /// with, leaving at least one prompt token to evaluate (its logits pick
    /// the first reply token), and returns the tokens still to evaluate.
    pub fn reuse<'p>(&mut self, prompt: &'p [u32]) -> &'p [u32] {
        let shared = self.shared(prompt).min(prompt.len().saturating_sub(1));
        self.tokens.truncate(shared);
        self.state.truncate(shared);
        &prompt[shared..]
    }

    /// Leading tokens of `prompt` already held.
    fn shared(&self, prompt: &[u32]) -> usize {
        self.tokens
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count()
    }

    /// Evaluates `tokens` after the held ones and records them; returns the
    /// logits of the last. On an error the sequence must be dropped.
    pub fn forward(
        &mut self,
        weights: &super::llama::LlamaWeights,
        tokens: &[u32],
    ) -> candle_core::Result<Vec<f32>> {
        let logits = weights.forward(&mut self.state, tokens)?;
        self.tokens.extend_from_slice(tokens);
        Ok(logits)
    }

    /// Positions used: the tokens held.
    pub fn position(&self) -> usize {
        self.state.position()
    }
}
