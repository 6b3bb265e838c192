//! Fuzzes the local-network guard's decision: any host string is checked
//! without a panic; an IPv6 address embedding an IPv4 one through NAT64
//! (64:ff9b::/96) or 6to4 (2002::/16) is judged exactly like that IPv4
//! address; with the opt-in, only loopback addresses pass.

#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use branch_models::address_rules::classify;
use branch_models::guard::{check_host, check_ip};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(host) = std::str::from_utf8(data) {
        let _ = check_host(host, false);
        let _ = check_host(host, true);
    }
    if data.len() >= 4 {
        let v4 = Ipv4Addr::new(data[0], data[1], data[2], data[3]);
        let bits = u128::from(v4.to_bits());
        let nat64 = Ipv6Addr::from_bits(0x0064_ff9b_0000_0000_0000_0000_0000_0000 | bits);
        let six_to_four = Ipv6Addr::from_bits(0x2002_0000_0000_0000_0000_0000_0000_0000 | (bits << 80));
        let want = classify(IpAddr::V4(v4)).is_err();
        assert_eq!(classify(IpAddr::V6(nat64)).is_err(), want, "{nat64}");
        assert_eq!(classify(IpAddr::V6(six_to_four)).is_err(), want, "{six_to_four}");
    }
    if data.len() >= 16 {
        let mut b = [0u8; 16];
        b.copy_from_slice(&data[..16]);
        let ip = IpAddr::V6(Ipv6Addr::from(b));
        let _ = classify(ip);
        assert_eq!(check_ip("h", ip, true).is_ok(), ip.is_loopback());
    }
});
