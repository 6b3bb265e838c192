//! An MCP server's resources as a context provider: their text reaches the
//! next request through the provider registry (and its budget), and is
//! never stored in the conversation.

use std::sync::Arc;

use async_trait::async_trait;
use branch_core::{Branch, ContextProvider, Message, ProviderError};
use serde_json::Value;

use crate::limits;
use crate::session::McpServer;

/// Resources of one server (all of them, or the chosen URIs) as context.
#[derive(Debug, Clone)]
pub struct McpResources {
    server: Arc<McpServer>,
    uris: Option<Vec<String>>,
    max_bytes: usize,
}

impl McpResources {
    /// Every resource the server lists.
    pub fn all(server: Arc<McpServer>) -> Self {
        Self {
            server,
            uris: None,
            max_bytes: limits::MAX_RESOURCE_TEXT_BYTES,
        }
    }

    /// Only these resources.
    pub fn only(server: Arc<McpServer>, uris: Vec<String>) -> Self {
        Self {
            server,
            uris: Some(uris),
            max_bytes: limits::MAX_RESOURCE_TEXT_BYTES,
        }
    }

    /// The cap on the text injected per request.
    pub fn max_bytes(mut self, n: usize) -> Self {
        self.max_bytes = n;
        self
    }

    /// The text this provider injects now.
    pub async fn text(&self) -> Result<String, ProviderError> {
        let err = |e: crate::McpError| ProviderError(e.to_string());
        let uris = match &self.uris {
            Some(u) => u.clone(),
            None => self
                .server
                .list_resources()
                .await
                .map_err(err)?
                .into_iter()
                .map(|r| r.uri.clone())
                .collect(),
        };
        let mut out = String::new();
        for uri in uris {
            for c in self.server.read_resource(&uri).await.map_err(err)? {
                let shown = c.get("uri").and_then(Value::as_str).unwrap_or(&uri);
                let block = match c.get("text").and_then(Value::as_str) {
                    Some(t) => format!("## {shown}\n{t}\n\n"),
                    None => {
                        let mime = c
                            .get("mimeType")
                            .and_then(Value::as_str)
                            .unwrap_or("binary");
                        format!("## {shown}\n[{mime} content, not text]\n\n")
                    }
                };
                if out.len().saturating_add(block.len()) > self.max_bytes {
                    return Err(ProviderError(format!(
                        "the resources of MCP server `{}` exceed the cap of {} bytes",
                        self.server.name(),
                        self.max_bytes
                    )));
                }
                out.push_str(&block);
            }
        }
        Ok(out.trim_end().to_owned())
    }
}

#[async_trait]
impl ContextProvider for McpResources {
    async fn provide(
        &self,
        _branch: &Branch,
        _instruction: &Message,
    ) -> Result<Option<String>, ProviderError> {
        let text = self.text().await?;
        Ok((!text.is_empty()).then_some(text))
    }

    fn name(&self) -> Option<String> {
        Some(format!("mcp:{}", self.server.name()))
    }
}
