//! Dynamic tools: a raw JSON Schema plus a handler over JSON arguments,
//! for tools whose shape is only known at run time (MCP servers, plugins,
//! configuration).

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use branch_core::{Tool, ToolError};
use serde_json::Value;

use crate::error::{ToolBuildError, check_name};
use crate::function_tool::Handler;
use crate::schema::{ArgSchema, function_schema};

/// A tool built from a JSON Schema and a handler taking the (validated)
/// JSON arguments.
#[derive(Clone)]
pub struct DynamicTool {
    name: String,
    schema: Value,
    args: Arc<ArgSchema>,
    handler: Handler,
}

impl std::fmt::Debug for DynamicTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamicTool")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl DynamicTool {
    /// Builds the tool; `parameters` must be a valid JSON Schema object
    /// (it is compiled now, not at the first call).
    pub fn new<F, Fut, E>(
        name: impl Into<String>,
        description: Option<String>,
        parameters: Value,
        f: F,
    ) -> Result<Self, ToolBuildError>
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, E>> + Send + 'static,
        E: Display,
    {
        let name = name.into();
        check_name(&name)?;
        let args = Arc::new(ArgSchema::from_value(parameters)?);
        let f = Arc::new(f);
        let handler: Handler = Arc::new(move |value: Value| {
            let fut = f(value);
            Box::pin(async move { fut.await.map_err(|e| ToolError::Failed(e.to_string())) })
        });
        let schema = function_schema(&name, description.as_deref(), args.parameters());
        Ok(Self {
            name,
            schema,
            args,
            handler,
        })
    }

    /// The tool behind the seam `ActionManager` registers.
    pub fn into_tool(self) -> Arc<dyn Tool> {
        Arc::new(self)
    }
}

#[async_trait]
impl Tool for DynamicTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn schema(&self) -> &Value {
        &self.schema
    }

    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        self.args.validate(&arguments)?;
        (self.handler)(arguments).await
    }
}
