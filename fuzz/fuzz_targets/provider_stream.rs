//! Fuzzes the decoding of streamed provider replies of every dialect
//! (OpenAI chat-completion chunks, Anthropic Messages events, OpenAI
//! Responses events): bytes are framed as SSE, each event normalised into
//! a chunk (`branch_models::sse::normalize`) and folded into the whole
//! reply (`StreamAccumulator`), as a streaming call does. Nothing panics,
//! and the accumulated text is exactly the text chunks' content.

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::provider_stream(data));
