//! Fuzzes the GGUF header reader (`branch_models::gguf`): any bytes as a
//! model file, read as a slice and as a stream; accepted headers keep
//! every tensor inside the file; nothing panics.

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::gguf_header(data));
