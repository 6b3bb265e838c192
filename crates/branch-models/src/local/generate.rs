//! The generation loop, run on tokio's blocking pool: prefill, sample,
//! stream text deltas over a channel, stop on a stop token, a stop string,
//! the token budget or the context window — or as soon as the receiver is
//! gone (the caller dropped the stream).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use branch_core::model::{ChatChunk, ChunkKind, ModelError};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::engine::Engine;
use super::error::LocalModelError;
use super::prefix::Sequence;
use super::sampler::{Sampler, Sampling};
use super::tokenizer::StreamDecoder;
use crate::json_grammar::Grammar;

/// What one call generates from.
#[derive(Debug)]
pub struct Job {
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// Sampling settings.
    pub sampling: Sampling,
    /// Keep going past stop tokens (llama.cpp's `ignore_eos`; benchmarks).
    pub ignore_eos: bool,
    /// Start from the cached prefix and leave this call's tokens cached
    /// (llama.cpp's `cache_prompt`, default true).
    pub cache_prompt: bool,
    /// The JSON grammar the reply must follow (`response_format`).
    pub grammar: Option<Grammar>,
    /// Completion id (`chatcmpl-...`).
    pub id: String,
    /// Model name reported in chunks.
    pub model: String,
    /// Unix time of the call.
    pub created: u64,
}

type Sender = mpsc::Sender<Result<ChatChunk, ModelError>>;

/// Decrements the active-generation count however the loop ends.
struct Active<'a>(&'a Engine);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs `job` to its end, sending chunks on `tx`. Blocking.
pub fn run(engine: &Arc<Engine>, job: &Job, tx: &Sender) {
    engine.active.fetch_add(1, Ordering::SeqCst);
    let _active = Active(engine);
    let _turn = engine
        .turn
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if tx.is_closed() {
        return;
    }
    // Taken out of the engine: if this thread dies mid-call the cache is
    // simply gone, never half-written.
    let cached = if job.cache_prompt {
        engine
            .prompt_cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take(&job.prompt)
    } else {
        None
    };
    let mut seq = cached.unwrap_or_else(|| Sequence::new(engine.weights.state(engine.context)));
    match generate(engine, job, tx, &mut seq) {
        // Every way out of `generate` that is not an error (finished, or the
        // reader gone) leaves each held token's position evaluated.
        Ok(()) if job.cache_prompt => {
            engine
                .prompt_cache
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .put(seq);
        }
        Ok(()) => {}
        Err(e) => {
            let _ = tx.blocking_send(Err(e.into_model_error(&job.model)));
        }
    }
}

/// Longest suffix of `text` that starts some stop string (held back until
/// it is known not to be one).
fn held_suffix(text: &str, stops: &[String]) -> usize {
    stops
        .iter()
        .flat_map(|s| {
            (1..s.len().min(text.len() + 1))
                .rev()
                .filter(|&n| s.is_char_boundary(n) && text.ends_with(&s[..n]))
                .take(1)
        })
        .max()
        .unwrap_or(0)
}

fn generate(
    engine: &Engine,
    job: &Job,
    tx: &Sender,
    seq: &mut Sequence,
) -> Result<(), LocalModelError> {
    let context = engine.context;
    if job.prompt.len() >= context {
        return Err(LocalModelError::ContextLength {
            prompt_tokens: job.prompt.len(),
            context,
        });
    }
    let mut sampler = Sampler::new(&job.sampling);
    let mut decoder = StreamDecoder::new();
    let mut text = String::new();
    let mut sent = 0;
    let mut completion = 0usize;
    let mut cut_at_stop_string = false;
    let rest = seq.reuse(&job.prompt);
    let cached = job.prompt.len() - rest.len();
    let mut logits = seq
        .forward(&engine.weights, rest)
        .map_err(LocalModelError::compute)?;
    let send = |delta: &str| -> bool {
        if delta.is_empty() {
            return true;
        }
        tx.blocking_send(Ok(text_chunk(job, delta))).is_ok()
    };
    let mut guide = job.grammar.as_ref().map(|g| (g, g.start()));
    let finish_reason = loop {
        if completion >= job.sampling.max_tokens {
            break "length";
        }
        let token = match &guide {
            None => sampler.sample(&logits),
            Some((g, state)) => {
                let can_end = state.can_end();
                let allowed = |t: u32| {
                    if engine.stop_ids.contains(&t) {
                        can_end
                    } else if engine.tokenizer.is_control(t) {
                        false
                    } else {
                        let bytes = engine.tokenizer.token_bytes(t);
                        !bytes.is_empty() && state.accepts(g, bytes)
                    }
                };
                match sampler.sample_allowed(&logits, allowed) {
                    Some(t) => t,
                    // No token continues the document: end it here.
                    None => break "stop",
                }
            }
        };
        if engine.stop_ids.contains(&token) && (!job.ignore_eos || guide.is_some()) {
            break "stop";
        }
        completion += 1;
        engine.tokens_generated.fetch_add(1, Ordering::Relaxed);
        if !engine.tokenizer.is_control(token) {
            let bytes = engine.tokenizer.token_bytes(token);
            if let Some((g, state)) = &mut guide {
                state.feed(g, bytes);
            }
            text.push_str(&decoder.push(bytes));
        }
        if let Some(at) = job
            .sampling
            .stop
            .iter()
            .filter_map(|s| text[sent..].find(s.as_str()))
            .min()
        {
            text.truncate(sent + at);
            if !send(&text[sent..]) {
                return Ok(());
            }
            sent = text.len();
            cut_at_stop_string = true;
            break "stop";
        }
        if guide.as_ref().is_some_and(|(_, state)| state.is_complete()) {
            // The document is closed: nothing more may follow.
            break "stop";
        }
        let ready = text.len() - held_suffix(&text[sent..], &job.sampling.stop);
        if ready > sent {
            if !send(&text[sent..ready]) {
                return Ok(());
            }
            sent = ready;
        }
        if tx.is_closed() {
            return Ok(());
        }
        if seq.position() >= context {
            break "length";
        }
        logits = seq
            .forward(&engine.weights, &[token])
            .map_err(LocalModelError::compute)?;
    };
    if !cut_at_stop_string {
        text.push_str(&decoder.finish());
    }
    if !send(&text[sent..]) {
        return Ok(());
    }
    let usage = json!({
        "prompt_tokens": job.prompt.len(),
        "completion_tokens": completion,
        "total_tokens": job.prompt.len() + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    });
    let mut end = ChatChunk::new(ChunkKind::Result);
    end.metadata.insert(
        "raw".into(),
        json!({"id": job.id, "object": "chat.completion.chunk", "created": job.created,
               "model": job.model,
               "choices": [{"index": 0, "delta": {}, "finish_reason": finish_reason}],
               "usage": usage}),
    );
    end.metadata.insert("usage".into(), usage);
    end.metadata.insert("done".into(), Value::Bool(true));
    let _ = tx.blocking_send(Ok(end));
    Ok(())
}

fn text_chunk(job: &Job, delta: &str) -> ChatChunk {
    let mut c = ChatChunk::new(ChunkKind::Text);
    c.content = Some(delta.to_owned());
    c.is_delta = true;
    c.metadata.insert(
        "raw".into(),
        json!({"id": job.id, "object": "chat.completion.chunk", "created": job.created,
               "model": job.model,
               "choices": [{"index": 0, "delta": {"content": delta}, "finish_reason": null}]}),
    );
    c
}
