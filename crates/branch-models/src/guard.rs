//! The network guard (providers.md §5.2).
//!
//! Without `allow_local_network`, a target is refused if any address it
//! resolves to is loopback, private, link-local, CGNAT, unspecified,
//! multicast or IPv4-mapped, or if it cannot be resolved. With it, only
//! `localhost`, `127.0.0.1` and `::1` resolving to loopback are allowed
//! (the reference's rule: LAN and public hosts are refused too).
//!
//! The check runs inside the HTTP client's DNS resolver, so the addresses
//! checked are the addresses connected to (no re-resolution window), and in
//! the redirect policy for IP-literal hosts.

use std::error::Error as StdError;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Why the guard refused a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardBlocked {
    /// The host that was refused.
    pub host: String,
    /// Human-readable reason.
    pub reason: &'static str,
}

impl fmt::Display for GuardBlocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SSRF guard: request to '{}' is blocked ({})",
            self.host, self.reason
        )
    }
}

impl StdError for GuardBlocked {}

/// Is `ip` in a range the guard treats as local/private?
pub fn is_restricted(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_restricted_v4(v4),
        IpAddr::V6(v6) => is_restricted_v6(v6),
    }
}

fn is_restricted_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    a == 10
        || (a == 172 && (16..=31).contains(&b))
        || (a == 192 && b == 168)
        || (a == 169 && b == 254)
        || a == 127
        || a == 0
        || (a == 100 && (64..=127).contains(&b))
}

fn is_restricted_v6(ip: Ipv6Addr) -> bool {
    let seg = ip.segments();
    ip.is_loopback()
        || ip.is_unspecified()
        || (seg[0] & 0xfe00) == 0xfc00
        || (seg[0] & 0xffc0) == 0xfe80
        || (seg[0] & 0xff00) == 0xff00
        || ip.to_ipv4_mapped().is_some()
}

fn is_loopback_name(host: &str) -> bool {
    matches!(
        host.to_ascii_lowercase().as_str(),
        "localhost" | "127.0.0.1" | "::1" | "[::1]"
    )
}

/// Checks a host name (before resolution): with `allow_local`, only the
/// loopback names pass; IP literals are checked here too.
pub fn check_host(host: &str, allow_local: bool) -> Result<(), GuardBlocked> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if allow_local && !is_loopback_name(bare) {
        return Err(GuardBlocked {
            host: host.to_owned(),
            reason: "allow_local_network permits only localhost, 127.0.0.1 and ::1",
        });
    }
    if let Ok(ip) = bare.parse::<IpAddr>() {
        check_addrs(host, [ip], allow_local)?;
    }
    Ok(())
}

fn check_addrs(
    host: &str,
    addrs: impl IntoIterator<Item = IpAddr>,
    allow_local: bool,
) -> Result<(), GuardBlocked> {
    let mut any = false;
    for ip in addrs {
        any = true;
        if allow_local {
            if !ip.is_loopback() {
                return Err(GuardBlocked {
                    host: host.to_owned(),
                    reason: "a loopback name resolved to a non-loopback address",
                });
            }
        } else if is_restricted(ip) {
            return Err(GuardBlocked {
                host: host.to_owned(),
                reason: "it resolves to a loopback, private or link-local address",
            });
        }
    }
    if !any {
        return Err(GuardBlocked {
            host: host.to_owned(),
            reason: "it cannot be resolved",
        });
    }
    Ok(())
}

/// A DNS resolver that refuses guarded addresses.
#[derive(Debug, Clone, Copy)]
pub struct GuardedResolver {
    /// The model's `allow_local_network`.
    pub allow_local: bool,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_local = self.allow_local;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            check_host(&host, allow_local).map_err(boxed)?;
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|_| {
                    boxed(GuardBlocked {
                        host: host.clone(),
                        reason: "it cannot be resolved",
                    })
                })?
                .collect();
            check_addrs(&host, addrs.iter().map(SocketAddr::ip), allow_local).map_err(boxed)?;
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

fn boxed(e: GuardBlocked) -> Box<dyn StdError + Send + Sync> {
    Box::new(e)
}

/// The guard error somewhere in `err`'s source chain, if any.
pub fn find_blocked(err: &(dyn StdError + 'static)) -> Option<GuardBlocked> {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(b) = e.downcast_ref::<GuardBlocked>() {
            return Some(b.clone());
        }
        cur = e.source();
    }
    None
}

/// A redirect policy that follows at most 10 redirects, only within the
/// original origin (scheme, host, port: credentials such as `x-api-key` are
/// never forwarded to another host), and re-checks every hop (IP literals
/// here, names in the resolver).
pub fn redirect_policy(allow_local: bool) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() >= 10 {
            return attempt.error("too many redirects");
        }
        let url = attempt.url();
        let host = url.host_str().unwrap_or_default().to_owned();
        let same_origin = attempt.previous().first().is_some_and(|first| {
            first.scheme() == url.scheme()
                && first.host_str() == url.host_str()
                && first.port_or_known_default() == url.port_or_known_default()
        });
        if !same_origin {
            return attempt.error(GuardBlocked {
                host,
                reason: "cross-origin redirect refused",
            });
        }
        match check_host(&host, allow_local) {
            Ok(()) => attempt.follow(),
            Err(blocked) => attempt.error(blocked),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        for ip in [
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "127.0.0.1",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "ff02::1",
            "::ffff:8.8.8.8",
        ] {
            assert!(is_restricted(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["8.8.8.8", "172.32.0.1", "100.128.0.1", "2606:4700::1111"] {
            assert!(!is_restricted(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn host_rules() {
        assert!(check_host("127.0.0.1", false).is_err());
        assert!(check_host("[::1]", false).is_err());
        assert!(check_host("8.8.8.8", false).is_ok());
        assert!(check_host("127.0.0.1", true).is_ok());
        assert!(check_host("localhost", true).is_ok());
        assert!(check_host("192.168.0.2", true).is_err());
        assert!(check_host("api.openai.com", true).is_err());
    }

    #[tokio::test]
    async fn resolver_refuses_localhost_without_opt_in() {
        let r = GuardedResolver { allow_local: false };
        let err = r.resolve("localhost".parse().unwrap()).await.err().unwrap();
        assert!(find_blocked(err.as_ref()).is_some());
        let ok = GuardedResolver { allow_local: true };
        assert!(ok.resolve("localhost".parse().unwrap()).await.is_ok());
    }
}
