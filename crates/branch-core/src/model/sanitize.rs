//! Filters that keep credentials and proxy settings out of restored (and
//! written) model configurations.

use serde_json::{Map, Value};

/// Substrings that mark a name as a credential wherever they occur.
const CREDENTIAL_SUBSTRINGS: &[&str] = &[
    "apikey",
    "api_key",
    "secret",
    "password",
    "passwd",
    "credential",
    "authorization",
    "cookie",
    "accesskey",
    "access_key",
    "privatekey",
    "private_key",
    "bearer",
    "authtoken",
    "auth_token",
];

/// Whole name segments (split on anything not alphanumeric) that mark a
/// credential. `max_tokens` survives: its segment is `tokens`.
const CREDENTIAL_SEGMENTS: &[&str] = &[
    "auth",
    "authn",
    "authz",
    "authentication",
    "token",
    "key",
    "pwd",
    "pass",
    "signature",
    "sig",
];

/// Does `name` read as a credential (API key, token, password, auth header,
/// cookie ...)?
pub fn is_credential_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase().replace('-', "_");
    if CREDENTIAL_SUBSTRINGS.iter().any(|s| lower.contains(s)) {
        return true;
    }
    lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|seg| CREDENTIAL_SEGMENTS.contains(&seg))
}

/// Does `name` read as a proxy setting?
pub fn is_proxy_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.contains("proxy") || lower.contains("proxies")
}

/// Credential or proxy: never taken from stored data, never written.
pub fn is_sensitive_name(name: &str) -> bool {
    is_credential_name(name) || is_proxy_name(name)
}

/// A copy of `map` without sensitive keys, recursively through nested objects
/// and arrays.
pub fn strip_sensitive_keys(map: &Map<String, Value>) -> Map<String, Value> {
    map.iter()
        .filter(|(k, _)| !is_sensitive_name(k))
        .map(|(k, v)| (k.clone(), strip_sensitive_value(v)))
        .collect()
}

fn strip_sensitive_value(value: &Value) -> Value {
    match value {
        Value::Object(m) => Value::Object(strip_sensitive_keys(m)),
        Value::Array(items) => Value::Array(items.iter().map(strip_sensitive_value).collect()),
        other => other.clone(),
    }
}

/// `url` without a `user:password@` part and without credential-like query
/// parameters (e.g. `?key=...`).
pub fn strip_url_credentials(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => (&url[..i + 3], &url[i + 3..]),
        None => ("", url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rfind('@') {
        Some(i) => &authority[i + 1..],
        None => authority,
    };
    let (path, fragment) = match tail.find('#') {
        Some(i) => tail.split_at(i),
        None => (tail, ""),
    };
    let path = match path.split_once('?') {
        Some((p, query)) => {
            let kept: Vec<&str> = query
                .split('&')
                .filter(|pair| {
                    let name = pair.split('=').next().unwrap_or_default();
                    !pair.is_empty() && !is_sensitive_name(name)
                })
                .collect();
            if kept.is_empty() {
                p.to_owned()
            } else {
                format!("{p}?{}", kept.join("&"))
            }
        }
        None => path.to_owned(),
    };
    format!("{scheme}{authority}{path}{fragment}")
}

/// Normalised form of a base URL for "is this the registered URL?" checks:
/// scheme and host lower-cased, default port and trailing slash removed.
pub fn normalize_base_url(url: &str) -> String {
    let url = url.trim();
    let Some(i) = url.find("://") else {
        return url.trim_end_matches('/').to_owned();
    };
    let scheme = url[..i].to_ascii_lowercase();
    let rest = &url[i + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let mut host = authority.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "https" => Some(":443"),
        "http" => Some(":80"),
        _ => None,
    };
    if let Some(port) = default_port {
        if let Some(stripped) = host.strip_suffix(port) {
            host = stripped.to_owned();
        }
    }
    format!("{scheme}://{host}{}", path.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_names() {
        for name in [
            "api_key",
            "API_KEY",
            "x-api-key",
            "Authorization",
            "Proxy-Authorization",
            "access_token",
            "token",
            "client_secret",
            "password",
            "Cookie",
            "apiKey",
            "openai_api_key",
            "key",
        ] {
            assert!(is_sensitive_name(name), "{name}");
        }
        for name in [
            "model",
            "max_tokens",
            "max_completion_tokens",
            "temperature",
            "anthropic-version",
            "served_model",
            "top_k",
            "author",
            "monkey",
        ] {
            assert!(!is_sensitive_name(name), "{name}");
        }
        assert!(is_sensitive_name("https_proxy"));
        assert!(is_sensitive_name("proxies"));
    }

    #[test]
    fn url_credentials_are_stripped() {
        assert_eq!(
            strip_url_credentials("https://user:pw@example.com:8443/v1?key=abc&x=1#f"),
            "https://example.com:8443/v1?x=1#f"
        );
        assert_eq!(
            strip_url_credentials("http://127.0.0.1:47611/v1"),
            "http://127.0.0.1:47611/v1"
        );
        assert_eq!(
            strip_url_credentials("https://a@b@host/p?api_key=1"),
            "https://host/p"
        );
        assert_eq!(strip_url_credentials("internal"), "internal");
    }

    #[test]
    fn normalisation() {
        assert_eq!(
            normalize_base_url("HTTPS://API.OpenAI.com:443/v1/"),
            "https://api.openai.com/v1"
        );
        assert_eq!(
            normalize_base_url("http://localhost:80/v1"),
            "http://localhost/v1"
        );
    }
}
