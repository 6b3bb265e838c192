//! The network guard (providers.md §5.2).
//!
//! Without `allow_local_network`, a target is refused if any address it
//! resolves to is covered by the special-purpose table of
//! [`crate::address_rules`] (loopback, private, link-local, CGNAT,
//! multicast, broadcast, reserved, documentation, benchmarking, IPv4
//! disguised in IPv6 ...). With it, only `localhost`, `127.0.0.1` and `::1`
//! resolving to loopback are allowed (the reference's rule: LAN and public
//! hosts are refused too).
//!
//! The check runs inside the HTTP client's DNS resolver, so the addresses
//! checked are the addresses connected to (no re-resolution window), and in
//! the redirect policy for IP-literal hosts. A name that cannot be resolved
//! is a [`DnsFailure`], not a guard refusal.

use std::error::Error as StdError;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::address_rules;

/// Why the guard refused a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardBlocked {
    /// The host that was refused.
    pub host: String,
    /// Human-readable reason.
    pub reason: &'static str,
    /// The range of the address table that refused it, if an address did.
    pub range: Option<&'static str>,
}

impl fmt::Display for GuardBlocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "blocked by the local-network guard: '{}' {}",
            self.host, self.reason
        )?;
        if let Some(range) = self.range {
            write!(f, " ({range})")?;
        }
        Ok(())
    }
}

impl StdError for GuardBlocked {}

/// A host name that could not be resolved (no guard decision was made).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsFailure {
    /// The host that could not be resolved.
    pub host: String,
    /// What the resolver said (or that it returned no address).
    pub detail: String,
}

impl fmt::Display for DnsFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "could not resolve '{}': {}", self.host, self.detail)
    }
}

impl StdError for DnsFailure {}

/// Is `ip` in a range the guard refuses without the local-network opt-in?
/// (See [`address_rules::classify`] for the reason.)
pub fn is_restricted(ip: IpAddr) -> bool {
    address_rules::classify(ip).is_err()
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
            reason: "is refused: allow_local_network permits only localhost, 127.0.0.1 and ::1",
            range: None,
        });
    }
    if let Ok(ip) = bare.parse::<IpAddr>() {
        check_ip(host, ip, allow_local)?;
    }
    Ok(())
}

/// Checks one address `host` resolved to (or is).
pub fn check_ip(host: &str, ip: IpAddr, allow_local: bool) -> Result<(), GuardBlocked> {
    if allow_local {
        if ip.is_loopback() {
            return Ok(());
        }
        return Err(GuardBlocked {
            host: host.to_owned(),
            reason: "is a loopback name that resolved to a non-loopback address",
            range: None,
        });
    }
    address_rules::classify(ip).map_err(|refusal| GuardBlocked {
        host: host.to_owned(),
        reason: "resolves to an address that is not publicly routable",
        range: Some(refusal.range),
    })
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
                .map_err(|e| {
                    Box::new(DnsFailure {
                        host: host.clone(),
                        detail: e.to_string(),
                    }) as Box<dyn StdError + Send + Sync>
                })?
                .collect();
            if addrs.is_empty() {
                return Err(Box::new(DnsFailure {
                    host: host.clone(),
                    detail: "no address".into(),
                }) as Box<dyn StdError + Send + Sync>);
            }
            for a in &addrs {
                check_ip(&host, a.ip(), allow_local).map_err(boxed)?;
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

fn boxed(e: GuardBlocked) -> Box<dyn StdError + Send + Sync> {
    Box::new(e)
}

/// The guard error somewhere in `err`'s source chain, if any.
pub fn find_blocked(err: &(dyn StdError + 'static)) -> Option<GuardBlocked> {
    find_in_chain(err)
}

/// The DNS failure somewhere in `err`'s source chain, if any.
pub fn find_dns_failure(err: &(dyn StdError + 'static)) -> Option<DnsFailure> {
    find_in_chain(err)
}

fn find_in_chain<T: StdError + Clone + 'static>(err: &(dyn StdError + 'static)) -> Option<T> {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(b) = e.downcast_ref::<T>() {
            return Some(b.clone());
        }
        cur = e.source();
    }
    None
}

/// A redirect policy that follows at most [`crate::limits::MAX_REDIRECTS`] redirects, only within the
/// original origin (scheme, host, port: credentials such as `x-api-key` are
/// never forwarded to another host), and re-checks every hop (IP literals
/// here, names in the resolver).
pub fn redirect_policy(allow_local: bool) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() >= crate::limits::MAX_REDIRECTS {
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
                reason: "is another origin: cross-origin redirects are refused",
                range: None,
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
        assert!(check_host("[::127.0.0.1]", false).is_err());
        assert!(check_host("[64:ff9b::7f00:1]", false).is_err());
        assert!(check_host("8.8.8.8", false).is_ok());
        assert!(check_host("127.0.0.1", true).is_ok());
        assert!(check_host("localhost", true).is_ok());
        assert!(check_host("192.168.0.2", true).is_err());
        assert!(check_host("api.openai.com", true).is_err());
        let e = check_host("[::ffff:0:7f00:1]", false).unwrap_err();
        assert!(e.to_string().contains("SIIT"), "{e}");
    }

    #[tokio::test]
    async fn resolver_refuses_localhost_without_opt_in() {
        let r = GuardedResolver { allow_local: false };
        let err = r.resolve("localhost".parse().unwrap()).await.err().unwrap();
        assert!(find_blocked(err.as_ref()).is_some());
        let ok = GuardedResolver { allow_local: true };
        assert!(ok.resolve("localhost".parse().unwrap()).await.is_ok());
    }

    /// A name that does not resolve is a DNS failure, not a guard refusal
    /// (`.invalid` never resolves: RFC 6761).
    #[tokio::test]
    async fn unresolvable_names_are_dns_failures() {
        let r = GuardedResolver { allow_local: false };
        let err = r
            .resolve("no-such-host.invalid".parse().unwrap())
            .await
            .err()
            .unwrap();
        assert!(find_blocked(err.as_ref()).is_none(), "{err}");
        let dns = find_dns_failure(err.as_ref()).unwrap();
        assert_eq!(dns.host, "no-such-host.invalid");
        assert!(!err.to_string().contains("guard"), "{err}");
    }
}
