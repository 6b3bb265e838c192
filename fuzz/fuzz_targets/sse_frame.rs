//! Fuzzes the SSE framer (`branch_models::sse_frame`): any bytes, cut into
//! chunks anywhere, give the same events (or the same error) as the whole
//! body at once; no event is larger than the cap; nothing panics. Small
//! caps so the cap paths are reached.

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::sse_frame(data));
