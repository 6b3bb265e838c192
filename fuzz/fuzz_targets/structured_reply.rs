//! Fuzzes `checks::structured_reply` (see `fuzz/checks.rs` for the properties).

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::structured_reply(data));
