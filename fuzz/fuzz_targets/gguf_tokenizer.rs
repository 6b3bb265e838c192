//! Fuzzes a GGUF's tokenizer (`branch_models::local::tokenizer`): any
//! vocabulary, control tokens and merges, then any text and any ids; see
//! `fuzz/checks.rs` for the properties.

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::gguf_tokenizer(data));
