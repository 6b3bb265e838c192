//! Named async operations (`OperationManager`) and `get_operation`'s result.
//!
//! The reference refuses non-async functions at run time. Here the type of
//! [`OperationManager::register`] only admits functions returning a
//! `Future`, so a synchronous function cannot be registered at all: the
//! check moved from run time to compile time:
//!
//! ```compile_fail
//! use branch_core::OperationManager;
//! use serde_json::Value;
//! fn sync_summarize(_: Value) -> Result<Value, branch_core::OperationError> {
//!     Ok(Value::Null)
//! }
//! let mut ops = OperationManager::new();
//! ops.register("summarize", sync_summarize, false).unwrap();
//! ```
//!
//! while an async function registers:
//!
//! ```
//! use branch_core::{OperationError, OperationManager};
//! use serde_json::{json, Value};
//! async fn summarize(args: Value) -> Result<Value, OperationError> {
//!     Ok(json!(format!("summary of {}", args["text"])))
//! }
//! let mut ops = OperationManager::new();
//! ops.register("summarize", summarize, false).unwrap();
//! assert!(ops.register("summarize", summarize, false).is_err());
//! ops.register("summarize", summarize, true).unwrap();
//! assert_eq!(ops.names(), ["summarize"]);
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;

use crate::error::{BranchError, Result};

/// A boxed future returned by a named operation.
pub type OperationFuture = Pin<Box<dyn Future<Output = Result<Value, OperationError>> + Send>>;

/// An error reported by a named operation.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct OperationError(pub String);

/// A registered async operation: takes keyword arguments as a JSON object.
pub type Operation = Arc<dyn Fn(Value) -> OperationFuture + Send + Sync>;

/// The registry of named async operations. A standalone branch has its
/// own; a session shares one among its branches.
#[derive(Clone, Default)]
pub struct OperationManager {
    registry: HashMap<String, Operation>,
    order: Vec<String>,
}

impl std::fmt::Debug for OperationManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(&self.order).finish()
    }
}

impl OperationManager {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers an async function under `name`. A duplicate name fails
    /// unless `update`.
    pub fn register<F, Fut>(&mut self, name: impl Into<String>, func: F, update: bool) -> Result<()>
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, OperationError>> + Send + 'static,
    {
        let op: Operation = Arc::new(move |args| Box::pin(func(args)));
        self.register_boxed(name, op, update)
    }

    /// Registers an already boxed operation.
    pub fn register_boxed(
        &mut self,
        name: impl Into<String>,
        op: Operation,
        update: bool,
    ) -> Result<()> {
        let name = name.into();
        if self.registry.contains_key(&name) {
            if !update {
                return Err(BranchError::DuplicateOperation(name));
            }
        } else {
            self.order.push(name.clone());
        }
        self.registry.insert(name, op);
        Ok(())
    }

    /// The operation registered under `name`.
    pub fn get(&self, name: &str) -> Option<&Operation> {
        self.registry.get(name)
    }

    /// Registered names, in registration order.
    pub fn names(&self) -> &[String] {
        &self.order
    }

    /// Whether `name` is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.registry.contains_key(name)
    }
}
