//! Fuzzes `checks::uuid_text` (see `fuzz/checks.rs` for the property): an
//! id is read exactly as `uuid` reads it, through the canonical form's
//! path or the general one.

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::uuid_text(data));
