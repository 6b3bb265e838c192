//! What the running program allows MCP servers to do. Fail-closed: the
//! default policy runs no command, searches no PATH and reaches no local
//! address; the configuration file cannot widen it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::McpError;
use crate::limits;

/// Which commands a stdio server may run.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Commands {
    /// Only these absolute paths (after PATH resolution).
    Listed(Vec<PathBuf>),
    /// Whatever the configuration names: for a configuration the user
    /// handed over themselves (`lionagi chat --mcp FILE`).
    AsConfigured,
}

/// The security policy MCP servers are started and called under.
#[derive(Debug, Clone)]
pub struct McpPolicy {
    commands: Commands,
    search_path: Option<OsString>,
    allow_local_network: bool,
    call_timeout: Duration,
    init_timeout: Duration,
    max_result_bytes: usize,
    max_tools_per_server: usize,
    url_elicitation: bool,
}

impl Default for McpPolicy {
    fn default() -> Self {
        Self {
            commands: Commands::Listed(Vec::new()),
            search_path: None,
            allow_local_network: false,
            call_timeout: limits::CALL_TIMEOUT,
            init_timeout: limits::INIT_TIMEOUT,
            max_result_bytes: limits::MAX_RESULT_BYTES,
            max_tools_per_server: limits::MAX_TOOLS_PER_SERVER,
            url_elicitation: false,
        }
    }
}

impl McpPolicy {
    /// The closed policy: nothing allowed, default caps and deadlines.
    pub fn new() -> Self {
        Self::default()
    }

    /// Allows the command at this absolute path.
    pub fn allow_command(mut self, path: impl Into<PathBuf>) -> Self {
        if let Commands::Listed(list) = &mut self.commands {
            list.push(path.into());
        }
        self
    }

    /// Allows every command the configuration names (it is trusted as a
    /// whole, as a person's own configuration file is).
    pub fn allow_configured_commands(mut self) -> Self {
        self.commands = Commands::AsConfigured;
        self
    }

    /// Resolves bare command names (`npx`) by searching this PATH value;
    /// without it a command must be an absolute path.
    pub fn search_path(mut self, path: impl Into<OsString>) -> Self {
        self.search_path = Some(path.into());
        self
    }

    /// Lets HTTP servers be on loopback, private or link-local addresses.
    pub fn allow_local_network(mut self, on: bool) -> Self {
        self.allow_local_network = on;
        self
    }

    /// The default per-call deadline (at most [`limits::MAX_CALL_TIMEOUT`]).
    pub fn call_timeout(mut self, d: Duration) -> Self {
        self.call_timeout = d.min(limits::MAX_CALL_TIMEOUT);
        self
    }

    /// The deadline of the start and `initialize` handshake.
    pub fn init_timeout(mut self, d: Duration) -> Self {
        self.init_timeout = d.min(limits::MAX_CALL_TIMEOUT);
        self
    }

    /// The cap on one tool result's JSON size.
    pub fn max_result_bytes(mut self, n: usize) -> Self {
        self.max_result_bytes = n;
        self
    }

    /// The cap on tools one server may register.
    pub fn max_tools_per_server(mut self, n: usize) -> Self {
        self.max_tools_per_server = n.min(limits::MAX_TOOLS_TOTAL);
        self
    }

    /// Lets servers ask the person to open addresses (MCP elicitation, URL
    /// mode: a sign-in, a payment), when they are connected with an
    /// [`crate::ElicitHook`]: our client then declares it, and the hook
    /// gets such questions as [`crate::Asks::Url`]. Off by default: a
    /// program whose person cannot open an address must not invite them.
    pub fn allow_url_elicitation(mut self, on: bool) -> Self {
        self.url_elicitation = on;
        self
    }

    /// Whether servers may ask the person to open addresses.
    pub fn url_elicitation_allowed(&self) -> bool {
        self.url_elicitation
    }

    /// Whether local addresses are allowed.
    pub fn local_network_allowed(&self) -> bool {
        self.allow_local_network
    }

    /// The default per-call deadline.
    pub fn default_call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// The start deadline.
    pub fn start_timeout(&self) -> Duration {
        self.init_timeout
    }

    /// The result cap.
    pub fn result_cap(&self) -> usize {
        self.max_result_bytes
    }

    /// The per-server tool cap.
    pub fn tool_cap(&self) -> usize {
        self.max_tools_per_server
    }

    /// The absolute path `command` runs as, when the policy allows it.
    pub fn resolve_command(&self, server: &str, command: &str) -> Result<PathBuf, McpError> {
        let refused = |reason: String| McpError::Refused {
            server: server.to_owned(),
            reason,
        };
        let as_path = Path::new(command);
        let resolved = if as_path.is_absolute() {
            as_path.to_path_buf()
        } else if command.contains('/') {
            return Err(refused(format!(
                "command `{command}` is a relative path; give an absolute one"
            )));
        } else {
            let Some(search) = &self.search_path else {
                return Err(refused(format!(
                    "command `{command}` is not an absolute path and PATH search is off \
                     (give the absolute path, or allow PATH search)"
                )));
            };
            std::env::split_paths(search)
                .filter(|dir| dir.is_absolute())
                .map(|dir| dir.join(command))
                .find(|p| is_executable(p))
                .ok_or_else(|| refused(format!("command `{command}` is not on the PATH")))?
        };
        match &self.commands {
            Commands::AsConfigured => Ok(resolved),
            Commands::Listed(list) => {
                let canonical = std::fs::canonicalize(&resolved).ok();
                let allowed = list.iter().any(|a| {
                    *a == resolved
                        || canonical
                            .as_ref()
                            .is_some_and(|c| std::fs::canonicalize(a).ok().as_ref() == Some(c))
                });
                if allowed {
                    Ok(resolved)
                } else {
                    Err(refused(format!(
                        "command `{}` is not allowed by the policy",
                        resolved.display()
                    )))
                }
            }
        }
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_policy_runs_nothing() {
        let p = McpPolicy::new();
        let e = p.resolve_command("s", "/bin/sh").unwrap_err().to_string();
        assert!(e.contains("not allowed"), "{e}");
        let e = p.resolve_command("s", "sh").unwrap_err().to_string();
        assert!(e.contains("PATH search is off"), "{e}");
        let e = p.resolve_command("s", "./x").unwrap_err().to_string();
        assert!(e.contains("relative path"), "{e}");
    }

    #[test]
    fn listed_commands_and_configured_search() {
        let p = McpPolicy::new().allow_command("/bin/sh");
        assert_eq!(
            p.resolve_command("s", "/bin/sh").unwrap(),
            Path::new("/bin/sh")
        );
        let p = McpPolicy::new()
            .allow_configured_commands()
            .search_path("/usr/bin:/bin");
        assert!(p.resolve_command("s", "sh").unwrap().is_absolute());
        let e = p
            .resolve_command("s", "no-such-cmd-xyz")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not on the PATH"), "{e}");
    }
}
