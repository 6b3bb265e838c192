//! The configuration format people already have:
//! `{"mcpServers": {"NAME": {"command", "args", "env", "cwd"} | {"url", "headers"}}}`.
//!
//! Parsed strictly: a wrong type is an error naming its path, never a
//! default. Keys other clients add (`disabled`, `autoApprove`, ...) are
//! ignored, except `disabled: true`, which leaves the server out.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

use crate::error::McpError;
use crate::limits;
use crate::redact::Secret;

/// Servers named by a configuration, in the file's order.
#[derive(Debug, Clone, PartialEq)]
pub struct McpConfig {
    /// The servers, in the order the file lists them (the order that
    /// decides nothing but the listing: name prefixing is by name).
    pub servers: Vec<ServerSpec>,
}

/// One server of the configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSpec {
    /// Its key in `mcpServers`.
    pub name: String,
    /// How it is reached.
    pub transport: TransportSpec,
    /// Its own per-call deadline (`"timeout"`, seconds), else the policy's.
    pub call_timeout: Option<Duration>,
}

/// How a server is reached.
#[derive(Debug, Clone, PartialEq)]
pub enum TransportSpec {
    /// A child process speaking JSON-RPC over stdin/stdout.
    Stdio {
        /// The command as written (a bare name needs PATH search).
        command: String,
        /// Its arguments (no shell: passed as they are).
        args: Vec<String>,
        /// The child's whole environment: nothing else is inherited.
        env: Vec<(String, Secret)>,
        /// Its working directory, when given.
        cwd: Option<PathBuf>,
    },
    /// A server over HTTP: streamable HTTP, falling back to the older
    /// HTTP+SSE transport when the server only speaks that.
    Http {
        /// The endpoint.
        url: String,
        /// Sent with every request.
        headers: Vec<(String, Secret)>,
        /// `"type": "sse"` asks for the older transport directly.
        legacy_sse: bool,
    },
}

impl TransportSpec {
    /// The secret values (environment, headers), for scrubbing text.
    pub fn secrets(&self) -> Vec<&Secret> {
        match self {
            Self::Stdio { env, .. } => env.iter().map(|(_, v)| v).collect(),
            Self::Http { headers, .. } => headers.iter().map(|(_, v)| v).collect(),
        }
    }
}

impl McpConfig {
    /// Reads and parses a configuration file (at most
    /// [`limits::MAX_CONFIG_BYTES`]).
    pub fn from_file(path: &Path) -> Result<Self, McpError> {
        let shown = path.display();
        let file = std::fs::File::open(path)
            .map_err(|e| McpError::Config(format!("{shown}: cannot open: {e}")))?;
        let bytes = branch_core::capped_read::read_to_cap(file, limits::MAX_CONFIG_BYTES, "")
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::FileTooLarge => McpError::Config(format!(
                    "{shown}: larger than the cap of {} bytes",
                    limits::MAX_CONFIG_BYTES
                )),
                _ => McpError::Config(format!("{shown}: cannot read: {e}")),
            })?;
        let text = String::from_utf8(bytes)
            .map_err(|e| McpError::Config(format!("{shown}: cannot read: {e}")))?;
        Self::from_json_str(&text).map_err(|e| match e {
            McpError::Config(m) => McpError::Config(format!("{shown}: {m}")),
            other => other,
        })
    }

    /// Parses configuration text.
    pub fn from_json_str(text: &str) -> Result<Self, McpError> {
        let v: Value =
            serde_json::from_str(text).map_err(|e| McpError::Config(format!("not JSON: {e}")))?;
        Self::from_value(&v)
    }

    /// Parses a configuration value.
    pub fn from_value(v: &Value) -> Result<Self, McpError> {
        let root = v
            .as_object()
            .ok_or_else(|| bad("$", "must be an object with `mcpServers`"))?;
        let servers = root
            .get("mcpServers")
            .ok_or_else(|| bad("$", "has no `mcpServers`"))?
            .as_object()
            .ok_or_else(|| bad("$.mcpServers", "must be an object"))?;
        if servers.len() > limits::MAX_SERVERS {
            return Err(bad(
                "$.mcpServers",
                &format!("names more than {} servers", limits::MAX_SERVERS),
            ));
        }
        let mut out = Vec::new();
        for (name, spec) in servers {
            let path = format!("$.mcpServers.{name}");
            if name.is_empty() || name.len() > 64 || name.chars().any(char::is_control) {
                return Err(bad(&path, "a server name is 1 to 64 printable characters"));
            }
            let spec = spec
                .as_object()
                .ok_or_else(|| bad(&path, "must be an object"))?;
            if let Some(d) = spec.get("disabled") {
                match d.as_bool() {
                    Some(true) => continue,
                    Some(false) => {}
                    None => return Err(bad(&format!("{path}.disabled"), "must be a boolean")),
                }
            }
            out.push(server(name, spec, &path)?);
        }
        Ok(Self { servers: out })
    }
}

fn bad(path: &str, why: &str) -> McpError {
    McpError::Config(format!("{path} {why}"))
}

fn server(name: &str, spec: &Map<String, Value>, path: &str) -> Result<ServerSpec, McpError> {
    let kind = match spec.get("type").or_else(|| spec.get("transport")) {
        None => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => return Err(bad(&format!("{path}.type"), "must be a string")),
    };
    let call_timeout = match spec.get("timeout") {
        None => None,
        Some(t) => {
            let secs = t
                .as_u64()
                .filter(|s| (1..=limits::MAX_CALL_TIMEOUT.as_secs()).contains(s))
                .ok_or_else(|| {
                    bad(
                        &format!("{path}.timeout"),
                        &format!(
                            "must be whole seconds from 1 to {}",
                            limits::MAX_CALL_TIMEOUT.as_secs()
                        ),
                    )
                })?;
            Some(Duration::from_secs(secs))
        }
    };
    let transport = match (spec.get("command"), spec.get("url")) {
        (Some(_), Some(_)) => return Err(bad(path, "has both `command` and `url`")),
        (None, None) => return Err(bad(path, "needs `command` (stdio) or `url` (HTTP)")),
        (Some(command), None) => {
            if matches!(kind, Some(k) if k != "stdio") {
                return Err(bad(
                    &format!("{path}.type"),
                    "must be `stdio` with `command`",
                ));
            }
            let command = string(command, &format!("{path}.command"))?;
            if command.is_empty() {
                return Err(bad(&format!("{path}.command"), "is empty"));
            }
            let args = match spec.get("args") {
                None => Vec::new(),
                Some(a) => a
                    .as_array()
                    .ok_or_else(|| bad(&format!("{path}.args"), "must be an array of strings"))?
                    .iter()
                    .enumerate()
                    .map(|(i, x)| string(x, &format!("{path}.args[{i}]")))
                    .collect::<Result<_, _>>()?,
            };
            let env = pairs(spec.get("env"), &format!("{path}.env"))?;
            let cwd = match spec.get("cwd") {
                None => None,
                Some(c) => Some(PathBuf::from(string(c, &format!("{path}.cwd"))?)),
            };
            TransportSpec::Stdio {
                command,
                args,
                env,
                cwd,
            }
        }
        (None, Some(url)) => {
            let legacy_sse = match kind {
                None | Some("http" | "streamable-http" | "streamableHttp") => false,
                Some("sse") => true,
                Some(other) => {
                    return Err(bad(
                        &format!("{path}.type"),
                        &format!("`{other}` is not `http`, `streamable-http` or `sse`"),
                    ));
                }
            };
            let url = string(url, &format!("{path}.url"))?;
            let parsed = reqwest::Url::parse(&url)
                .map_err(|e| bad(&format!("{path}.url"), &format!("is not a URL: {e}")))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(bad(&format!("{path}.url"), "must be http or https"));
            }
            let headers = pairs(spec.get("headers"), &format!("{path}.headers"))?;
            for (k, v) in &headers {
                if reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_err()
                    || reqwest::header::HeaderValue::from_str(v.expose()).is_err()
                {
                    return Err(bad(
                        &format!("{path}.headers.{k}"),
                        "is not a valid HTTP header",
                    ));
                }
            }
            TransportSpec::Http {
                url,
                headers,
                legacy_sse,
            }
        }
    };
    Ok(ServerSpec {
        name: name.to_owned(),
        transport,
        call_timeout,
    })
}

fn string(v: &Value, path: &str) -> Result<String, McpError> {
    v.as_str()
        .map(str::to_owned)
        .ok_or_else(|| bad(path, "must be a string"))
}

fn pairs(v: Option<&Value>, path: &str) -> Result<Vec<(String, Secret)>, McpError> {
    let Some(v) = v else {
        return Ok(Vec::new());
    };
    let map = v
        .as_object()
        .ok_or_else(|| bad(path, "must be an object of strings"))?;
    map.iter()
        .map(|(k, v)| {
            let s = v
                .as_str()
                .ok_or_else(|| bad(&format!("{path}.{k}"), "must be a string"))?;
            if s.contains('\0') || k.contains('\0') || k.contains('=') || k.is_empty() {
                return Err(bad(&format!("{path}.{k}"), "has a forbidden character"));
            }
            Ok((k.clone(), Secret::new(s)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn both_kinds_parse_and_secrets_stay_hidden() {
        let c = McpConfig::from_value(&json!({"mcpServers": {
            "files": {"command": "/usr/bin/fs", "args": ["-v"], "env": {"TOKEN": "s3cr3t-value"}},
            "web": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer abcdef"}},
            "off": {"command": "x", "disabled": true},
            "old": {"type": "sse", "url": "https://example.invalid/sse"}
        }}))
        .unwrap();
        assert_eq!(c.servers.len(), 3);
        assert_eq!(c.servers[0].name, "files");
        assert!(matches!(
            &c.servers[2].transport,
            TransportSpec::Http {
                legacy_sse: true,
                ..
            }
        ));
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("s3cr3t") && !shown.contains("abcdef"),
            "{shown}"
        );
    }

    #[test]
    fn malformed_configurations_name_the_path() {
        let err = |v: Value| McpConfig::from_value(&v).unwrap_err().to_string();
        assert!(err(json!({})).contains("no `mcpServers`"));
        assert!(
            err(json!({"mcpServers": {"a": {"command": 3}}})).contains("$.mcpServers.a.command")
        );
        assert!(err(json!({"mcpServers": {"a": {"command": "x", "args": "y"}}})).contains("args"));
        assert!(err(json!({"mcpServers": {"a": {"url": "ftp://x"}}})).contains("http or https"));
        assert!(err(json!({"mcpServers": {"a": {}}})).contains("needs `command`"));
        assert!(
            err(json!({"mcpServers": {"a": {"command": "x", "timeout": 0}}})).contains("timeout")
        );
        assert!(
            err(json!({"mcpServers": {"a": {"command": "x", "env": {"K": 1}}}})).contains("env.K")
        );
    }
}
