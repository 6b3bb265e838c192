//! Fuzzes the decoding of unstreamed provider replies of every dialect
//! (OpenAI chat completions, Anthropic Messages, OpenAI Responses, Gemini
//! and Ollama through their OpenAI-compatible shape): any bytes that parse
//! as JSON are mapped to a `ChatResponse` (text, tool calls, usage, finish
//! reason) and an API-call log record without a panic.

#![no_main]

use branch_core::model::{ChatResponse, api_call_execution};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let r = ChatResponse::from_raw(raw);
    let _ = r.tool_calls.len();
    let _ = r.usage.as_ref().map(|u| u.input_tokens());
    let _ = api_call_execution(Ok(&r), 0.0);
});
