//! Fuzzes `checks::retry_after` (see `fuzz/checks.rs` for the property): a
//! failed reply's `retry-after-ms`, `Retry-After` and `Date` headers read
//! as a wait within the cap, as numbers and dates say.

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::retry_after(data));
