//! What every call of a model shares: the endpoint URL (parsed and checked
//! by the network guard) and the fixed headers (content type, auth,
//! configured defaults). A model's configuration never changes, so this is
//! worked out once when the model is built, not on every call.

use branch_core::model::registry::ProviderKind;
use branch_core::model::{AuthType, ModelConfig, ModelErrorKind};
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};

use crate::dialect;
use crate::guard;
use crate::secret::ApiKey;

/// The URL and fixed headers of a model's calls.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// The endpoint URL.
    pub(crate) url: reqwest::Url,
    /// Content type, auth and the configured default headers.
    pub(crate) headers: HeaderMap,
}

impl Target {
    /// The target of `config`, or the error (kind and message, before key
    /// redaction) every call of it reports. The checks run in the order a
    /// call used to run them, so the first problem found is the same.
    pub(crate) fn of(
        config: &ModelConfig,
        key: Option<&ApiKey>,
    ) -> Result<Self, (ModelErrorKind, String)> {
        let config_err = |m: &str| (ModelErrorKind::Config, m.to_owned());
        if config
            .provider_spec()
            .is_some_and(|s| s.kind != ProviderKind::Api)
        {
            return Err(config_err(
                "CLI and agentic providers are not served over HTTP by branch-models",
            ));
        }
        let url = config
            .url()
            .ok_or_else(|| config_err("the endpoint has no base_url"))?;
        let url =
            reqwest::Url::parse(&url).map_err(|_| config_err("the base_url is not a valid URL"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(config_err("the base_url must be http or https"));
        }
        let host = url.host_str().unwrap_or_default();
        guard::check_host(host, config.allow_local_network())
            .map_err(|b| (ModelErrorKind::NetworkGuard, b.to_string()))?;

        let mut headers = HeaderMap::new();
        let header_err = |m: &'static str| (ModelErrorKind::Config, m.to_owned());
        put_header(&mut headers, "content-type", "application/json").map_err(header_err)?;
        let auth = config.endpoint().auth_type;
        if auth != AuthType::None {
            let key = key.ok_or_else(|| {
                let mut msg = "API key is required for authentication".to_owned();
                if let Some(var) = config.key_env() {
                    msg.push_str(&format!(" (set {var} or give the key explicitly)"));
                }
                (ModelErrorKind::Auth, msg)
            })?;
            if let Some((name, value)) = dialect::auth_header(auth, key.expose()) {
                put_header(&mut headers, name, &value).map_err(header_err)?;
            }
        }
        for (name, value) in &config.endpoint().default_headers {
            if let Some(v) = value.as_str() {
                put_header(&mut headers, name, v).map_err(header_err)?;
            }
        }
        // The header reqwest adds to a request that has none (its client
        // default), set here: each attempt's copy of this map is made at
        // its length, and reqwest's insert would grow it on every call.
        headers
            .entry(ACCEPT)
            .or_insert(HeaderValue::from_static("*/*"));
        Ok(Self { url, headers })
    }
}

/// Sets one header; credentials are marked sensitive (kept out of Debug).
/// The error names which half was invalid.
pub(crate) fn put_header(
    headers: &mut HeaderMap,
    name: &str,
    value: &str,
) -> Result<(), &'static str> {
    let n = HeaderName::from_bytes(name.as_bytes()).map_err(|_| "a header name is invalid")?;
    let mut v = HeaderValue::from_str(value).map_err(|_| "a header value is invalid")?;
    v.set_sensitive(n == AUTHORIZATION || n.as_str() == "x-api-key");
    headers.insert(n, v);
    Ok(())
}
