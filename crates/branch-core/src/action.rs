//! The tool seam and the branch's tool registry (`ActionManager`).
//!
//! Concrete tools (function tools with generated schemas, dynamic tools,
//! invocation with timeouts) live in `branch-actions`; the registry lives
//! here because the aggregate owns it.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use indexmap::IndexMap;
use serde_json::Value;
use uuid::Uuid;

use crate::error::{BranchError, Result};

/// Why a tool call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The arguments do not match the tool's schema; `path` names the field.
    #[error("invalid argument at `{path}`: {reason}")]
    InvalidArguments {
        /// JSON path of the offending argument.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The tool ran and reported an error.
    #[error("{0}")]
    Failed(String),
    /// The tool did not finish in time.
    #[error("tool timed out after {0:?}")]
    Timeout(std::time::Duration),
    /// The tool panicked; the panic was contained.
    #[error("tool panicked: {0}")]
    Panicked(String),
}

/// A callable tool: a name, an OpenAI-style function schema and an async
/// body taking JSON arguments.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The function name the model calls.
    fn name(&self) -> &str;

    /// The schema: `{"type": "function", "function": {"name", "description",
    /// "parameters", "strict"}}`.
    fn schema(&self) -> &Value;

    /// Runs the tool.
    async fn call(&self, arguments: Value) -> std::result::Result<Value, ToolError>;
}

/// A registered tool with the element id the reference gives each Tool
/// object (an ActionRequest's `recipient`).
#[derive(Clone)]
pub struct RegisteredTool {
    id: Uuid,
    tool: Arc<dyn Tool>,
}

impl RegisteredTool {
    /// The tool's element id.
    pub fn id(&self) -> Uuid {
        self.id
    }

    /// The tool.
    pub fn tool(&self) -> &Arc<dyn Tool> {
        &self.tool
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        self.tool.name()
    }
}

impl std::fmt::Debug for RegisteredTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredTool")
            .field("id", &self.id)
            .field("name", &self.name())
            .finish()
    }
}

/// The branch's tool registry: name → tool, in registration order.
#[derive(Clone, Default)]
pub struct ActionManager {
    tools: IndexMap<String, RegisteredTool>,
}

impl std::fmt::Debug for ActionManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl ActionManager {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a tool. A name already present fails unless `update`, which
    /// replaces it.
    pub fn register(&mut self, tool: Arc<dyn Tool>, update: bool) -> Result<()> {
        let name = tool.name().to_owned();
        if self.tools.contains_key(&name) && !update {
            return Err(BranchError::DuplicateTool(name));
        }
        self.tools.insert(
            name,
            RegisteredTool {
                id: Uuid::new_v4(),
                tool,
            },
        );
        Ok(())
    }

    /// Registers several tools; on a duplicate nothing is registered.
    pub fn register_all(
        &mut self,
        tools: impl IntoIterator<Item = Arc<dyn Tool>>,
        update: bool,
    ) -> Result<()> {
        let mut next = self.clone();
        for t in tools {
            next.register(t, update)?;
        }
        *self = next;
        Ok(())
    }

    /// Registers an already registered tool (same element id), as clone does.
    pub fn adopt(&mut self, tool: RegisteredTool) {
        self.tools.insert(tool.name().to_owned(), tool);
    }

    /// Removes a tool by name.
    pub fn remove(&mut self, name: &str) -> Option<RegisteredTool> {
        self.tools.shift_remove(name)
    }

    /// The tool registered under `name`.
    pub fn get(&self, name: &str) -> Option<&RegisteredTool> {
        self.tools.get(name)
    }

    /// Whether a tool is registered under `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    /// Registered tools, in registration order.
    pub fn iter(&self) -> impl Iterator<Item = &RegisteredTool> {
        self.tools.values()
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Name → schema, sorted by name.
    pub fn schemas(&self) -> BTreeMap<&str, &Value> {
        self.tools
            .iter()
            .map(|(k, t)| (k.as_str(), t.tool.schema()))
            .collect()
    }
}
