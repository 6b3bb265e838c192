//! The servers of one configuration, connected together, and their tools
//! registered on a branch under deterministic names.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use branch_core::Branch;

use crate::config::McpConfig;
use crate::elicit::ElicitHook;
use crate::error::McpError;
use crate::limits;
use crate::naming;
use crate::policy::McpPolicy;
use crate::progress::ProgressHook;
use crate::resources::McpResources;
use crate::session::{McpServer, Reading};
use crate::tool::{self, CallHook};

/// A tool of an MCP server as registered on a branch.
#[derive(Debug, Clone, PartialEq)]
pub struct McpToolInfo {
    /// The name the model calls.
    pub name: String,
    /// The server's name.
    pub server: String,
    /// The tool's name on the server.
    pub original: String,
    /// Its description.
    pub description: Option<String>,
}

/// Connected servers and the tools they registered.
pub struct McpServers {
    servers: Vec<Arc<McpServer>>,
    registered: Mutex<Vec<McpToolInfo>>,
    call_hook: Option<CallHook>,
}

impl std::fmt::Debug for McpServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServers")
            .field("servers", &self.servers)
            .finish_non_exhaustive()
    }
}

impl McpServers {
    /// Connects every server of `config` (together); if one fails, the
    /// others are shut down and its error returned.
    pub async fn connect(config: &McpConfig, policy: &McpPolicy) -> Result<Self, McpError> {
        Self::connect_with(config, policy, None, None).await
    }

    /// As [`McpServers::connect`], with hooks that hear progress and calls.
    pub async fn connect_with(
        config: &McpConfig,
        policy: &McpPolicy,
        progress: Option<ProgressHook>,
        call_hook: Option<CallHook>,
    ) -> Result<Self, McpError> {
        Self::connect_asking(config, policy, progress, call_hook, None).await
    }

    /// As [`McpServers::connect_with`]; with `elicit`, every server may put
    /// questions to the person during its calls
    /// ([`McpServer::connect_asking`]).
    pub async fn connect_asking(
        config: &McpConfig,
        policy: &McpPolicy,
        progress: Option<ProgressHook>,
        call_hook: Option<CallHook>,
        elicit: Option<ElicitHook>,
    ) -> Result<Self, McpError> {
        let results = futures_util::future::join_all(
            config
                .servers
                .iter()
                .map(|s| McpServer::connect_asking(s, policy, progress.clone(), elicit.clone())),
        )
        .await;
        let mut servers = Vec::new();
        let mut first_error = None;
        for r in results {
            match r {
                Ok(s) => servers.push(Arc::new(s)),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            for s in &servers {
                s.shutdown().await;
            }
            return Err(e);
        }
        Ok(Self {
            servers,
            registered: Mutex::new(Vec::new()),
            call_hook,
        })
    }

    /// The connected servers, in the configuration's order.
    pub fn servers(&self) -> &[Arc<McpServer>] {
        &self.servers
    }

    /// The server with this name.
    pub fn server(&self, name: &str) -> Option<&Arc<McpServer>> {
        self.servers.iter().find(|s| s.name() == name)
    }

    /// The tools registered by the last [`McpServers::register`].
    pub fn registered(&self) -> Vec<McpToolInfo> {
        self.registered
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// Whether any server announced a changed tool list since it was read.
    pub fn tools_changed(&self) -> bool {
        self.servers.iter().any(|s| s.tools_changed())
    }

    /// Lists every server's tools and registers them on `branch`
    /// (replacing what an earlier call registered). Names clash with
    /// tools already on the branch only by prefixing. A tool whose schema
    /// does not compile is left out with a warning.
    pub async fn register(&self, branch: &mut Branch) -> Result<Vec<McpToolInfo>, McpError> {
        // Each listing clears its server's change; one that fails after
        // others succeeded registers nothing, so all are to be read again.
        let reading = Reading::of(self.servers.iter().map(|s| s.tools_changed_flag()));
        let mut listed = Vec::new();
        let mut total = 0usize;
        for s in &self.servers {
            let tools = s.list_tools().await?;
            total = total.saturating_add(tools.len());
            if total > limits::MAX_TOOLS_TOTAL {
                return Err(McpError::Cap {
                    server: s.name().to_owned(),
                    what: "the number of tools of all servers".into(),
                    cap: limits::MAX_TOOLS_TOTAL,
                });
            }
            listed.push((Arc::clone(s), tools));
        }
        for (s, _) in &listed {
            s.listen(branch.id(), branch.observer_slot());
        }
        let previous = self.registered();
        for p in &previous {
            branch.acts_mut().remove(&p.name);
        }
        let taken: HashSet<String> = branch.tools().map(|t| t.name().to_owned()).collect();
        let shape: Vec<(String, Vec<String>)> = listed
            .iter()
            .map(|(s, tools)| {
                (
                    s.name().to_owned(),
                    tools.iter().map(|t| t.name.to_string()).collect(),
                )
            })
            .collect();
        let names = naming::assign(&shape, &taken);
        let mut infos = Vec::new();
        for ((server, tools), names) in listed.iter().zip(names) {
            for (t, name) in tools.iter().zip(names) {
                let built = match tool::build(Arc::clone(server), t, &name, self.call_hook.clone())
                {
                    Ok(b) => b,
                    Err(e) => {
                        tracing::warn!(server = %server.name(), tool = %t.name, error = %e, "MCP tool left out");
                        continue;
                    }
                };
                branch
                    .acts_mut()
                    .register(built.into_tool(), true)
                    .map_err(|e| McpError::Protocol {
                        server: server.name().to_owned(),
                        reason: format!("tool `{name}` could not be registered: {e}"),
                    })?;
                infos.push(McpToolInfo {
                    name,
                    server: server.name().to_owned(),
                    original: t.name.to_string(),
                    description: t.description.as_ref().map(|d| d.to_string()),
                });
            }
        }
        if let Ok(mut r) = self.registered.lock() {
            r.clone_from(&infos);
        }
        reading.done();
        Ok(infos)
    }

    /// Registers again when a server announced a changed tool list;
    /// whether it did.
    pub async fn refresh(&self, branch: &mut Branch) -> Result<bool, McpError> {
        if !self.tools_changed() {
            return Ok(false);
        }
        self.register(branch).await?;
        Ok(true)
    }

    /// The resources of the server `name` as a context provider (all, or
    /// only `uris`).
    pub fn resources(&self, name: &str, uris: Option<Vec<String>>) -> Option<McpResources> {
        let s = Arc::clone(self.server(name)?);
        Some(match uris {
            Some(u) => McpResources::only(s, u),
            None => McpResources::all(s),
        })
    }

    /// Shuts every server down (children ended and reaped).
    pub async fn shutdown(&self) {
        futures_util::future::join_all(self.servers.iter().map(|s| s.shutdown())).await;
    }
}
