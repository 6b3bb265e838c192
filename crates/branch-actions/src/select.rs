//! Which tool schemas an instruction offers.

use branch_core::ActionManager;
use serde_json::Value;

use crate::invoke::CallError;

/// The tools to offer the model.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ToolSelection {
    /// Every registered tool, in registration order.
    #[default]
    All,
    /// These tools, in this order.
    Named(Vec<String>),
}

/// The function schemas of the selected tools. An unknown name fails
/// (the reference raises too).
pub fn tool_schemas(
    acts: &ActionManager,
    selection: &ToolSelection,
) -> Result<Vec<Value>, CallError> {
    match selection {
        ToolSelection::All => Ok(acts.iter().map(|t| t.tool().schema().clone()).collect()),
        ToolSelection::Named(names) => names
            .iter()
            .map(|n| {
                acts.get(n)
                    .map(|t| t.tool().schema().clone())
                    .ok_or_else(|| CallError::UnknownTool(n.clone()))
            })
            .collect(),
    }
}
