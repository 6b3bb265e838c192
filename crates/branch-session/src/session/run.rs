//! Running named operations, and one async operation over many members
//! concurrently under a bound.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use serde_json::{Map, Value};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use uuid::Uuid;

use super::{Session, SessionError, SharedBranch};

/// The outcome of an operation on one branch of a concurrent run.
#[derive(Debug)]
pub struct BranchRun<T> {
    /// The branch the operation ran for.
    pub branch_id: Uuid,
    /// What it returned, or why it did not complete.
    pub result: Result<T, SessionError>,
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

impl Session {
    fn branch_or_default(&self, branch: Option<Uuid>) -> Result<Uuid, SessionError> {
        let id = branch
            .or(self.default_branch)
            .ok_or(SessionError::NoDefaultBranch)?;
        if self.members.contains_key(&id) {
            Ok(id)
        } else {
            Err(SessionError::UnknownBranch(id))
        }
    }

    /// Runs the operation registered under `name` for a member (the default
    /// branch when `branch` is `None`). `kwargs` are its keyword arguments
    /// (an object, or null for none); the branch id is passed under
    /// `"branch"` unless the caller set that key. Only the registry is
    /// consulted: an unregistered name is [`SessionError::UnknownOperation`].
    pub async fn run_operation(
        &self,
        name: &str,
        branch: Option<Uuid>,
        kwargs: Value,
    ) -> Result<Value, SessionError> {
        let branch = self.branch_or_default(branch)?;
        let op = self
            .operations
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
            .ok_or_else(|| SessionError::UnknownOperation(name.to_owned()))?;
        let mut args = match kwargs {
            Value::Null => Map::new(),
            Value::Object(m) => m,
            other => {
                return Err(SessionError::InvalidArguments {
                    name: name.to_owned(),
                    found: json_type(&other),
                });
            }
        };
        args.entry("branch")
            .or_insert_with(|| Value::String(branch.to_string()));
        op(Value::Object(args))
            .await
            .map_err(|source| SessionError::OperationFailed {
                name: name.to_owned(),
                branch,
                source,
            })
    }

    /// Runs `op` once for each listed member, at most `max_concurrent` at a
    /// time, each as its own task. Results come back in the order of
    /// `branch_ids`; a panicking task is reported for its branch and does
    /// not stop the others. An unknown id fails before anything runs.
    /// Dropping the returned future aborts the tasks still running.
    pub async fn run_each<T, F, Fut>(
        &self,
        branch_ids: &[Uuid],
        max_concurrent: usize,
        op: F,
    ) -> Result<Vec<BranchRun<T>>, SessionError>
    where
        F: Fn(Uuid, SharedBranch) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        if max_concurrent == 0 {
            return Err(SessionError::ZeroConcurrency);
        }
        let targets: Vec<(Uuid, SharedBranch)> = branch_ids
            .iter()
            .map(|id| {
                self.get(*id)
                    .map(|h| (*id, h))
                    .ok_or(SessionError::UnknownBranch(*id))
            })
            .collect::<Result<_, _>>()?;
        // A bound past what a semaphore holds bounds nothing.
        let limit = Arc::new(Semaphore::new(max_concurrent.min(Semaphore::MAX_PERMITS)));
        let mut tasks = JoinSet::new();
        let mut slot_of = HashMap::with_capacity(targets.len());
        for (slot, (id, handle)) in targets.iter().cloned().enumerate() {
            // Waiting here (not inside each task) keeps at most
            // `max_concurrent` tasks alive, however many branches there are.
            let permit =
                Arc::clone(&limit)
                    .acquire_owned()
                    .await
                    .map_err(|e| SessionError::TaskFailed {
                        branch: id,
                        reason: e.to_string(),
                    })?;
            let fut = op(id, handle);
            let task = tasks.spawn(async move {
                let _permit = permit;
                fut.await
            });
            slot_of.insert(task.id(), slot);
        }
        let mut results: Vec<Option<Result<T, SessionError>>> = std::iter::repeat_with(|| None)
            .take(targets.len())
            .collect();
        while let Some(joined) = tasks.join_next_with_id().await {
            match joined {
                Ok((task, value)) => results[slot_of[&task]] = Some(Ok(value)),
                Err(e) => {
                    let slot = slot_of[&e.id()];
                    results[slot] = Some(Err(SessionError::TaskFailed {
                        branch: targets[slot].0,
                        reason: e.to_string(),
                    }));
                }
            }
        }
        Ok(targets
            .iter()
            .zip(results)
            .map(|((id, _), r)| BranchRun {
                branch_id: *id,
                result: r.unwrap_or_else(|| {
                    Err(SessionError::TaskFailed {
                        branch: *id,
                        reason: "no result".into(),
                    })
                }),
            })
            .collect())
    }

    /// [`Session::run_operation`] for each listed member, concurrently, at
    /// most `max_concurrent` at a time; results in the order of `branch_ids`.
    pub async fn run_operation_many(
        &self,
        name: &str,
        branch_ids: &[Uuid],
        kwargs: Value,
        max_concurrent: usize,
    ) -> Result<Vec<BranchRun<Value>>, SessionError> {
        let op = self
            .operations
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
            .ok_or_else(|| SessionError::UnknownOperation(name.to_owned()))?;
        let base = match kwargs {
            Value::Null => Map::new(),
            Value::Object(m) => m,
            other => {
                return Err(SessionError::InvalidArguments {
                    name: name.to_owned(),
                    found: json_type(&other),
                });
            }
        };
        let name: Arc<str> = name.into();
        let runs = self
            .run_each(branch_ids, max_concurrent, |id, _| {
                let mut args = base.clone();
                args.entry("branch")
                    .or_insert_with(|| Value::String(id.to_string()));
                let fut = op(Value::Object(args));
                let name = Arc::clone(&name);
                async move {
                    fut.await.map_err(|source| SessionError::OperationFailed {
                        name: name.to_string(),
                        branch: id,
                        source,
                    })
                }
            })
            .await?;
        Ok(runs
            .into_iter()
            .map(|r| BranchRun {
                branch_id: r.branch_id,
                result: r.result.and_then(|x| x),
            })
            .collect())
    }
}
