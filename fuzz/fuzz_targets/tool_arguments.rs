//! Fuzzes `checks::tool_arguments` (see `fuzz/checks.rs` for the properties).

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::tool_arguments(data));
