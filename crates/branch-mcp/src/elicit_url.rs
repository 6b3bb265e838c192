//! Addresses a server asks the person to open (MCP elicitation, URL mode):
//! a sign-in, a payment, a key typed where the client never sees it.
//!
//! The address is the server's, so it is read as hostile: only `https` and
//! `http`, no user name or password in it (`https://bank.example@evil.example`
//! shows one host and opens another), at most [`MAX_URL_BYTES`]. What the
//! person is shown is the address as parsed and written back: ASCII only,
//! a non-ASCII host in punycode, other characters percent-encoded, so no
//! control character or look-alike letter hides in it. Its host is shown
//! apart, and what deserves a second look is named ([`AddressWarning`]).
//! Nothing here fetches or opens it: that is the person's, after consent.

use reqwest::Url;
use serde_json::Value;

use crate::elicit::{Asks, Elicitation, bounded, cut};

/// Longest address a server may ask the person to open, in bytes. An
/// address is not cut (a cut one opens another page), so a longer one is
/// declined unasked; sign-in addresses with their state run to a few
/// hundred bytes.
pub const MAX_URL_BYTES: usize = 4096;

/// Longest elicitation id kept, in bytes: ids are for the server's own
/// bookkeeping and only appear in logs.
pub const MAX_ELICITATION_ID_BYTES: usize = 256;

/// Entries of one `URLElicitationRequired` error looked at (and so most
/// addresses the person is asked to open); the rest are not read: a
/// server asks for a sign-in or two, and a list of thousands must not
/// become thousands of questions or log lines.
pub const MAX_URLS_PER_ERROR: usize = 4;

/// The JSON-RPC error code of a request that needs the person to open an
/// address first (`URLElicitationRequiredError`).
pub const URL_ELICITATION_REQUIRED: i32 = -32042;

/// An address to open, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// The address as parsed and written back (ASCII only).
    pub url: String,
    /// Its host, shown apart: what the person checks.
    pub host: String,
    /// What deserves a second look before opening it.
    pub warnings: Vec<AddressWarning>,
    /// The server's id of this question (cut at
    /// [`MAX_ELICITATION_ID_BYTES`]; empty when it gave none).
    pub id: String,
}

/// Something about an address the person should weigh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressWarning {
    /// `http`: what is typed there travels unencrypted.
    Unencrypted,
    /// The host is written in punycode (`xn--`): its letters may imitate
    /// another name's.
    Punycode,
    /// The host is a bare IP address, not a name.
    IpAddress,
}

impl AddressWarning {
    /// One line for the person.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Unencrypted => "not encrypted (http): do not type secrets there",
            Self::Punycode => {
                "its name is written in punycode: its letters may imitate another name"
            }
            Self::IpAddress => "it is a bare IP address, not a name",
        }
    }
}

impl Address {
    /// Reads and checks a server's address; the error says why it is
    /// declined.
    pub fn parse(url: &str, id: &str) -> Result<Self, String> {
        if url.len() > MAX_URL_BYTES {
            return Err(format!(
                "the address is {} bytes, more than {MAX_URL_BYTES}",
                url.len()
            ));
        }
        let parsed = Url::parse(url).map_err(|e| format!("the address does not parse: {e}"))?;
        let mut warnings = Vec::new();
        match parsed.scheme() {
            "https" => {}
            "http" => warnings.push(AddressWarning::Unencrypted),
            other => {
                return Err(format!(
                    "only https and http addresses are opened, not `{}`",
                    cut(other, 32)
                ));
            }
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err("the address carries a user name or password".into());
        }
        let Some(host) = parsed.host_str().map(str::to_owned) else {
            return Err("the address has no host".into());
        };
        if parsed.domain().is_none() {
            warnings.push(AddressWarning::IpAddress);
        } else if host.split('.').any(|label| label.starts_with("xn--")) {
            warnings.push(AddressWarning::Punycode);
        }
        Ok(Self {
            url: parsed.into(),
            host,
            warnings,
            id: cut(id, MAX_ELICITATION_ID_BYTES).into_owned(),
        })
    }
}

/// The addresses of a `URLElicitationRequired` error's `data`
/// (`{"elicitations": [{"mode": "url", "message", "url", "elicitationId"}]}`):
/// the first [`MAX_URLS_PER_ERROR`] listed, those that do not read left out.
pub(crate) fn required(server: &str, data: Option<&Value>) -> Vec<Elicitation> {
    let listed = data
        .and_then(|d| d.get("elicitations"))
        .and_then(Value::as_array);
    listed
        .into_iter()
        .flatten()
        .take(MAX_URLS_PER_ERROR)
        .filter(|e| e.get("mode").and_then(Value::as_str) == Some("url"))
        .filter_map(|e| {
            let url = e.get("url")?.as_str()?;
            let id = e.get("elicitationId").and_then(Value::as_str).unwrap_or("");
            let message = e.get("message").and_then(Value::as_str).unwrap_or("");
            match Address::parse(url, id) {
                Ok(address) => Some(Elicitation {
                    server: server.to_owned(),
                    message: bounded(message),
                    asks: Asks::Url(address),
                }),
                Err(reason) => {
                    tracing::warn!(server, %reason, "MCP address to open left out");
                    None
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_address_is_shown_as_parsed_with_its_host_apart() {
        let a = Address::parse("https://Auth.Example.com/sign-in?state=a\u{7}b c", "id-1").unwrap();
        assert_eq!(a.url, "https://auth.example.com/sign-in?state=a%07b%20c");
        assert_eq!(a.host, "auth.example.com");
        assert!(a.warnings.is_empty());
        assert_eq!(a.id, "id-1");
    }

    #[test]
    fn what_deserves_a_second_look_is_named() {
        let a = Address::parse("http://xn--pple-43d.com/pay", "").unwrap();
        assert_eq!(
            a.warnings,
            [AddressWarning::Unencrypted, AddressWarning::Punycode]
        );
        // A non-ASCII name is written in punycode, and named so.
        let a = Address::parse("https://аpple.com/", "").unwrap();
        assert!(a.host.starts_with("xn--"), "{}", a.host);
        assert_eq!(a.warnings, [AddressWarning::Punycode]);
        let a = Address::parse("https://[::1]:8443/x", "").unwrap();
        assert_eq!(a.host, "[::1]");
        assert_eq!(a.warnings, [AddressWarning::IpAddress]);
    }

    #[test]
    fn addresses_that_could_mislead_or_harm_are_declined() {
        for bad in [
            "javascript:alert(1)",
            "file:///etc/passwd",
            "data:text/html,<h1>x</h1>",
            "https://bank.example@evil.example/",
            "https://user:pw@example.com/",
            "not an address",
            "mailto:a@example.com",
        ] {
            assert!(Address::parse(bad, "").is_err(), "{bad}");
        }
        let long = format!("https://example.com/{}", "a".repeat(MAX_URL_BYTES));
        let e = Address::parse(&long, "").unwrap_err();
        assert!(e.contains("more than 4096"), "{e}");
        let a = Address::parse("https://example.com/", &"i".repeat(1000)).unwrap();
        assert!(a.id.len() < 300);
    }

    #[test]
    fn a_required_errors_addresses_are_read_and_bounded() {
        let entry = |url: &str| json!({"mode": "url", "message": "Sign in", "url": url, "elicitationId": "e"});
        let mut list = vec![
            entry("https://a.example/"),
            json!({"mode": "form", "message": "x"}),
            entry("javascript:alert(1)"),
            entry("https://c.example/"),
        ];
        list.extend((0..10).map(|i| entry(&format!("https://b{i}.example/"))));
        // The first four listed are looked at; two of them are addresses.
        let read = required("s", Some(&json!({"elicitations": list})));
        let hosts: Vec<&str> = read
            .iter()
            .map(|q| match &q.asks {
                Asks::Url(a) => a.host.as_str(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(hosts, ["a.example", "c.example"]);
        assert_eq!(read[0].message, "Sign in");
        assert!(required("s", None).is_empty());
        assert!(required("s", Some(&json!({"elicitations": 3}))).is_empty());
    }
}
