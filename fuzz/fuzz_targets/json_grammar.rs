//! Fuzzes `checks::json_grammar` (see `fuzz/checks.rs` for the properties).

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::json_grammar(data));
