//! Fuzzes the decoding of streamed provider replies of every dialect
//! (OpenAI chat-completion chunks, Anthropic Messages events, OpenAI
//! Responses events): bytes are framed as SSE, each event normalised into
//! a chunk (`branch_models::sse::normalize`) and folded into the whole
//! reply (`StreamAccumulator`), as a streaming call does. Nothing panics,
//! and the accumulated text is exactly the text chunks' content.

#![no_main]

use branch_core::model::{ChunkKind, StreamAccumulator};
use branch_models::sse::normalize;
use branch_models::sse_frame::SseFramer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut framer = SseFramer::new();
    let mut events = Vec::new();
    if framer.push(data, &mut events).is_err() {
        return;
    }
    let mut acc = StreamAccumulator::new();
    let mut text = String::new();
    for ev in &events {
        let name = if ev.event.is_empty() { "message" } else { ev.event.as_str() };
        let Ok(n) = normalize(name, &ev.data) else {
            continue;
        };
        if n.chunk.kind == ChunkKind::Text {
            text.push_str(n.chunk.content.as_deref().unwrap_or_default());
        }
        acc.push(&n.chunk);
        let _ = n.chunk.to_value();
    }
    let reply = acc.finish();
    assert_eq!(reply.text, text);
});
