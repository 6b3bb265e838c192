//! Lifecycle signals around a public verb: `RunStarted`, then `RunEnded`
//! (result and usage summed over the branch's replies) or `RunFailed`.
//! Nothing is built when no observer is attached. Inner calls of a verb
//! (ReAct's rounds) go through the unobserved functions, so a verb emits
//! exactly one pair.

use std::time::Instant;

use branch_core::Branch;
use branch_core::observer::{ObserverSlot, RunUsage, Signal};
use serde_json::Value;

use crate::error::{OperationError, Result};

/// One observed run: the observer's slot and the run's start, when an
/// observer is attached (without one, a run reads no clock).
pub(crate) struct RunObs {
    observed: Option<(ObserverSlot, Instant)>,
    verb: &'static str,
}

impl RunObs {
    /// Emits `RunStarted` when an observer is attached.
    pub(crate) fn start(branch: &Branch, verb: &'static str) -> Self {
        let slot = branch.observer_slot();
        let slot = slot.get().is_some().then_some(slot);
        if let Some(s) = &slot {
            s.emit(Signal::RunStarted {
                branch_id: branch.id(),
                verb: verb.to_owned(),
            });
        }
        Self {
            observed: slot.map(|s| (s, Instant::now())),
            verb,
        }
    }

    /// Emits `RunEnded` or `RunFailed` for `result` and passes it on.
    pub(crate) fn finish<T>(
        self,
        branch: &Branch,
        result: Result<T>,
        to_json: impl FnOnce(&T) -> Value,
    ) -> Result<T> {
        let Some((slot, started)) = self.observed else {
            return result;
        };
        let branch_id = branch.id();
        let verb = self.verb.to_owned();
        match &result {
            Ok(v) => {
                let mut usage = RunUsage::from_messages(branch.messages().iter());
                usage.duration_ms = started.elapsed().as_secs_f64() * 1000.0;
                slot.emit(Signal::RunEnded {
                    branch_id,
                    verb,
                    result: to_json(v),
                    usage,
                });
            }
            Err(e) => slot.emit(Signal::RunFailed {
                branch_id,
                verb,
                error_kind: error_kind(e).to_owned(),
                error: e.to_string(),
            }),
        }
        result
    }
}

fn error_kind(e: &OperationError) -> &'static str {
    match e {
        OperationError::ApiCall { .. } => "ExecutionError",
        OperationError::Compile { .. } => "CompileError",
        OperationError::Parse { .. } => "ParseError",
        OperationError::Action { .. } => "ActionError",
        OperationError::InvalidArgument { .. } => "ValueError",
        OperationError::Run { .. } => "RunError",
        OperationError::ApprovalPending { .. } => "ApprovalPending",
    }
}
