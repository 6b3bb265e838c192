//! Which IP addresses a model call may connect to without the local-network
//! opt-in: a table built from the IANA IPv4 and IPv6 Special-Purpose Address
//! Registries (RFC 6890 and its updates), the IPv4 multicast and reserved
//! space, and the IPv6 address space registry (only `2000::/3` is global
//! unicast).
//!
//! Every entry of the special-purpose registries is refused, the few the
//! registries call "globally reachable" included (anycast relays, AS112,
//! AMT, ORCHID): they are infrastructure, never a model server, and
//! refusing them costs nothing. Addresses that embed an IPv4 address and
//! are routed to it (NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) are judged by
//! the embedded address. The table is listed in `docs/security.md`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What a rule decides for the addresses it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Refused.
    Block,
    /// Judged by the IPv4 address embedded at this bit offset (counted from
    /// the most significant bit of the IPv6 address).
    EmbeddedV4 {
        /// Bit offset of the 32-bit IPv4 address.
        offset: u32,
    },
}

/// One IPv4 rule: the prefix, its length, and the registry's name for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V4Rule {
    /// Network address.
    pub network: Ipv4Addr,
    /// Prefix length.
    pub len: u32,
    /// The registry's name of the block.
    pub name: &'static str,
}

/// One IPv6 rule: the prefix, its length, what it decides, and its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V6Rule {
    /// Network address.
    pub network: Ipv6Addr,
    /// Prefix length.
    pub len: u32,
    /// What the rule decides.
    pub action: Action,
    /// The registry's name of the block.
    pub name: &'static str,
}

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u32, name: &'static str) -> V4Rule {
    V4Rule {
        network: Ipv4Addr::new(a, b, c, d),
        len,
        name,
    }
}

const fn v6(network: u128, len: u32, action: Action, name: &'static str) -> V6Rule {
    V6Rule {
        network: Ipv6Addr::from_bits(network),
        len,
        action,
        name,
    }
}

/// Refused IPv4 ranges (every address in none of them is allowed).
pub const IPV4_RULES: &[V4Rule] = &[
    v4(0, 0, 0, 0, 8, "\"this network\" (RFC 791)"),
    v4(10, 0, 0, 0, 8, "private use (RFC 1918)"),
    v4(100, 64, 0, 0, 10, "shared address space, CGNAT (RFC 6598)"),
    v4(127, 0, 0, 0, 8, "loopback (RFC 1122)"),
    v4(169, 254, 0, 0, 16, "link-local (RFC 3927)"),
    v4(172, 16, 0, 0, 12, "private use (RFC 1918)"),
    v4(192, 0, 0, 0, 24, "IETF protocol assignments (RFC 6890)"),
    v4(192, 0, 2, 0, 24, "documentation TEST-NET-1 (RFC 5737)"),
    v4(192, 31, 196, 0, 24, "AS112-v4 (RFC 7535)"),
    v4(192, 52, 193, 0, 24, "AMT (RFC 7450)"),
    v4(
        192,
        88,
        99,
        0,
        24,
        "deprecated 6to4 relay anycast (RFC 7526)",
    ),
    v4(192, 168, 0, 0, 16, "private use (RFC 1918)"),
    v4(
        192,
        175,
        48,
        0,
        24,
        "direct delegation AS112 service (RFC 7534)",
    ),
    v4(198, 18, 0, 0, 15, "benchmarking (RFC 2544)"),
    v4(198, 51, 100, 0, 24, "documentation TEST-NET-2 (RFC 5737)"),
    v4(203, 0, 113, 0, 24, "documentation TEST-NET-3 (RFC 5737)"),
    v4(224, 0, 0, 0, 4, "multicast (RFC 5771)"),
    v4(
        240,
        0,
        0,
        0,
        4,
        "reserved (RFC 1112), limited broadcast 255.255.255.255 (RFC 919)",
    ),
];

/// IPv6 rules, checked in order; the first that covers an address decides.
/// An address no rule covers is allowed.
pub const IPV6_RULES: &[V6Rule] = &[
    v6(0, 128, Action::Block, "unspecified (RFC 4291)"),
    v6(1, 128, Action::Block, "loopback (RFC 4291)"),
    v6(
        0,
        96,
        Action::Block,
        "IPv4-compatible, deprecated (RFC 4291)",
    ),
    v6(
        0xffff_0000_0000,
        96,
        Action::Block,
        "IPv4-mapped (RFC 4291)",
    ),
    v6(
        0xffff_0000_0000_0000,
        96,
        Action::Block,
        "IPv4-translated, SIIT (RFC 6145)",
    ),
    v6(
        0x0064_ff9b_0000_0000_0000_0000_0000_0000,
        96,
        Action::EmbeddedV4 { offset: 96 },
        "IPv4/IPv6 translation, NAT64 well-known prefix (RFC 6052)",
    ),
    v6(
        0x0064_ff9b_0001_0000_0000_0000_0000_0000,
        48,
        Action::Block,
        "IPv4/IPv6 translation, local-use NAT64 (RFC 8215)",
    ),
    v6(
        0x0100_0000_0000_0000_0000_0000_0000_0000,
        64,
        Action::Block,
        "discard-only (RFC 6666)",
    ),
    v6(
        0x2001_0000_0000_0000_0000_0000_0000_0000,
        23,
        Action::Block,
        "IETF protocol assignments, Teredo 2001::/32 included (RFC 2928, RFC 4380)",
    ),
    v6(
        0x2001_0db8_0000_0000_0000_0000_0000_0000,
        32,
        Action::Block,
        "documentation (RFC 3849)",
    ),
    v6(
        0x2002_0000_0000_0000_0000_0000_0000_0000,
        16,
        Action::EmbeddedV4 { offset: 16 },
        "6to4 (RFC 3056)",
    ),
    v6(
        0x2620_004f_8000_0000_0000_0000_0000_0000,
        48,
        Action::Block,
        "direct delegation AS112 service (RFC 7534)",
    ),
    v6(
        0x3fff_0000_0000_0000_0000_0000_0000_0000,
        20,
        Action::Block,
        "documentation (RFC 9637)",
    ),
    v6(
        0x5f00_0000_0000_0000_0000_0000_0000_0000,
        16,
        Action::Block,
        "segment routing SIDs (RFC 9602)",
    ),
    v6(
        0xfc00_0000_0000_0000_0000_0000_0000_0000,
        7,
        Action::Block,
        "unique local (RFC 4193)",
    ),
    v6(
        0xfe80_0000_0000_0000_0000_0000_0000_0000,
        10,
        Action::Block,
        "link-local unicast (RFC 4291)",
    ),
    v6(
        0xfec0_0000_0000_0000_0000_0000_0000_0000,
        10,
        Action::Block,
        "site-local, deprecated (RFC 3879)",
    ),
    v6(
        0xff00_0000_0000_0000_0000_0000_0000_0000,
        8,
        Action::Block,
        "multicast (RFC 4291)",
    ),
];

/// Everything outside `2000::/3`, the only global unicast space (IANA IPv6
/// address space registry), after the rules above.
const GLOBAL_UNICAST: (u128, u32) = (0x2000_0000_0000_0000_0000_0000_0000_0000, 3);

/// Why an address is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The name of the range that refused it.
    pub range: &'static str,
    /// For an address judged by an embedded IPv4 address: that address.
    pub embedded: Option<Ipv4Addr>,
}

fn covers(network: u128, len: u32, bits: u128, width: u32) -> bool {
    let shift = width.saturating_sub(len);
    if shift >= width {
        return true;
    }
    (bits >> shift) == (network >> shift)
}

/// The IPv4 rule covering `ip`, if any.
pub fn v4_rule(ip: Ipv4Addr) -> Option<&'static V4Rule> {
    let bits = u128::from(ip.to_bits());
    IPV4_RULES
        .iter()
        .find(|r| covers(u128::from(r.network.to_bits()), r.len, bits, 32))
}

/// Whether `ip` may be connected to without the local-network opt-in, and
/// if not, why.
pub fn classify(ip: IpAddr) -> Result<(), Refusal> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4, None),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr, embedded_in: Option<&'static str>) -> Result<(), Refusal> {
    match (v4_rule(ip), embedded_in) {
        (None, _) => Ok(()),
        (Some(r), None) => Err(Refusal {
            range: r.name,
            embedded: None,
        }),
        (Some(_), Some(outer)) => Err(Refusal {
            range: outer,
            embedded: Some(ip),
        }),
    }
}

fn classify_v6(ip: Ipv6Addr) -> Result<(), Refusal> {
    let bits = ip.to_bits();
    for rule in IPV6_RULES {
        if !covers(rule.network.to_bits(), rule.len, bits, 128) {
            continue;
        }
        return match rule.action {
            Action::Block => Err(Refusal {
                range: rule.name,
                embedded: None,
            }),
            Action::EmbeddedV4 { offset } => {
                let shift = 128u32.saturating_sub(offset.saturating_add(32));
                let v4 = u32::try_from((bits >> shift) & u128::from(u32::MAX)).unwrap_or(0);
                classify_v4(Ipv4Addr::from_bits(v4), Some(rule.name))
            }
        };
    }
    if covers(GLOBAL_UNICAST.0, GLOBAL_UNICAST.1, bits, 128) {
        Ok(())
    } else {
        Err(Refusal {
            range: "outside global unicast 2000::/3 (IANA IPv6 address space)",
            embedded: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An oracle written independently of the table: the standard
    /// library's predicates plus the ranges it has none for.
    fn oracle_v4(ip: Ipv4Addr) -> bool {
        let [a, b, c, _] = ip.octets();
        ip.is_unspecified()
            || a == 0
            || ip.is_private()
            || ip.is_loopback()
            || ip.is_link_local()
            || ip.is_multicast()
            || ip.is_broadcast()
            || ip.is_documentation()
            || a >= 240
            || (a == 100 && (b & 0xc0) == 64)
            || (a == 198 && (b == 18 || b == 19))
            || (a, b, c) == (192, 0, 0)
            || (a, b, c) == (192, 31, 196)
            || (a, b, c) == (192, 52, 193)
            || (a, b, c) == (192, 88, 99)
            || (a, b, c) == (192, 175, 48)
    }

    /// Every IPv4 rule is a /24 or wider, so the decision is constant on
    /// each /24: checking one address of every /24 (all 16,777,216 of them,
    /// a different host byte each time) against the oracle checks every
    /// IPv4 address.
    #[test]
    fn every_ipv4_address_matches_the_oracle() {
        assert!(IPV4_RULES.iter().all(|r| r.len <= 24));
        for prefix in 0u32..(1 << 24) {
            let ip = Ipv4Addr::from_bits((prefix << 8) | (prefix & 0xff));
            assert_eq!(classify(IpAddr::V4(ip)).is_err(), oracle_v4(ip), "{ip}");
        }
    }

    #[test]
    fn the_issue_list_is_refused() {
        for ip in [
            "::127.0.0.1",
            "::ffff:0:7f00:1",
            "::ffff:127.0.0.1",
            "64:ff9b::7f00:1",
            "64:ff9b::a00:1",
            "64:ff9b::c0a8:101",
            "64:ff9b:1::7f00:1",
            "64:ff9b:1::808:808",
            "2002:7f00:1::",
            "2002:a00:1::1",
            "2002:c0a8:101::",
            "2001::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
            "198.18.0.1",
            "198.19.255.255",
            "240.0.0.1",
            "ff02::1",
            "ff0e::1",
            "fec0::1",
            "100::1",
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.9",
            "2001:db8::1",
            "3fff::1",
            "::",
            "::1",
            "0.1.2.3",
            "fe80::1",
            "fd00::1",
            "5f00::1",
            "4000::1",
            "2620:4f:8000::1",
        ] {
            let addr: IpAddr = ip.parse().unwrap();
            assert!(classify(addr).is_err(), "{ip} must be refused");
        }
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "198.20.0.1",
            "223.255.255.255",
            "2606:4700::1111",
            "2001:4860:4860::8888",
            "2a00:1450::1",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            let addr: IpAddr = ip.parse().unwrap();
            assert_eq!(classify(addr), Ok(()), "{ip} must be allowed");
        }
    }

    /// NAT64 and 6to4 addresses are judged by their embedded IPv4 address,
    /// for every /24 of IPv4.
    #[test]
    fn embedded_ipv4_is_judged_like_ipv4() {
        for prefix in (0u32..(1 << 24)).step_by(97) {
            let v4 = Ipv4Addr::from_bits((prefix << 8) | 1);
            let want = oracle_v4(v4);
            let nat64 = Ipv6Addr::from_bits(
                0x0064_ff9b_0000_0000_0000_0000_0000_0000 | u128::from(v4.to_bits()),
            );
            let six_to_four = Ipv6Addr::from_bits(
                0x2002_0000_0000_0000_0000_0000_0000_0000 | (u128::from(v4.to_bits()) << 80) | 1,
            );
            for v6 in [nat64, six_to_four] {
                let got = classify(IpAddr::V6(v6));
                assert_eq!(got.is_err(), want, "{v6} ({v4})");
                if let Err(r) = got {
                    assert_eq!(r.embedded, Some(v4));
                }
            }
        }
    }

    /// Each IPv6 rule refuses its first and last address and nothing just
    /// outside it (unless another rule or the global-unicast bound does).
    #[test]
    fn ipv6_rule_boundaries() {
        for rule in IPV6_RULES.iter().filter(|r| r.action == Action::Block) {
            let net = rule.network.to_bits();
            let host_mask = u128::MAX.checked_shr(rule.len).unwrap_or(0);
            let first = Ipv6Addr::from_bits(net);
            let last = Ipv6Addr::from_bits(net | host_mask);
            assert!(classify(IpAddr::V6(first)).is_err(), "{first}");
            assert!(classify(IpAddr::V6(last)).is_err(), "{last}");
        }
        // Just outside ranges that border global unicast space.
        for ip in [
            "2001:200::1",      // after 2001::/23
            "2001:db9::1",      // after 2001:db8::/32
            "2003::1",          // after 2002::/16
            "2620:4f:8001::1",  // after 2620:4f:8000::/48
            "2620:4f:7fff::1",  // before it
            "3ffe:ffff::1",     // before 3fff::/20
            "2001:1ff:ffff::1", // last /48 of 2001::/23 is refused below
        ] {
            let addr: IpAddr = ip.parse().unwrap();
            let refused = classify(addr).is_err();
            assert_eq!(refused, ip.starts_with("2001:1ff"), "{ip}");
        }
    }
}
