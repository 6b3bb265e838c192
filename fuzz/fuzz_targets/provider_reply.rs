//! Fuzzes the decoding of unstreamed provider replies of every dialect
//! (OpenAI chat completions, Anthropic Messages, OpenAI Responses, Gemini
//! and Ollama through their OpenAI-compatible shape): any bytes that parse
//! as JSON are mapped to a `ChatResponse` (text, tool calls, usage, finish
//! reason) and an API-call log record without a panic. A text the plain
//! chat-completion reader takes reads the same the general way, and a
//! text `ParsedJson::check` accepts parses to the same value.

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::provider_reply(data));
