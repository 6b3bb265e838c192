//! Fuzzes the local-network guard's decision: any host string is checked
//! without a panic; an IPv6 address embedding an IPv4 one through NAT64
//! (64:ff9b::/96) or 6to4 (2002::/16) is judged exactly like that IPv4
//! address; with the opt-in, only loopback addresses pass.

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::address_guard(data));
