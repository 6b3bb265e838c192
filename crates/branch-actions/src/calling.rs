//! The `FunctionCalling` log snapshot of one tool call
//! (serialization.md §6.1), written to the branch's logs by the verbs.

use branch_core::Log;
use branch_core::element::{lion_class, now};
use serde_json::{Map, Value, json};
use uuid::Uuid;

/// Where a call's execution stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallStatus {
    /// Created, not started.
    Pending,
    /// Running.
    Processing,
    /// Finished with a result.
    Completed,
    /// Finished with an error (tool error, timeout, panic, bad arguments).
    Failed,
    /// Stopped from outside before finishing (its task was cancelled,
    /// e.g. by a runtime shutdown). A call whose caller stops waiting
    /// leaves no record at all.
    Cancelled,
}

impl CallStatus {
    /// The reference's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Processing => "processing",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// The record of one tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionCalling {
    /// The event id.
    pub id: Uuid,
    /// When the call was created (float seconds since the epoch).
    pub created_at: f64,
    /// The tool name.
    pub function: String,
    /// The arguments as given.
    pub arguments: Map<String, Value>,
    /// Execution status.
    pub status: CallStatus,
    /// Elapsed seconds, once finished.
    pub duration: Option<f64>,
    /// What the tool returned.
    pub response: Option<Value>,
    /// `{"error": kind, "message": text}` when the call failed.
    pub error: Option<Value>,
}

impl FunctionCalling {
    /// A pending record created now.
    pub fn new(function: impl Into<String>, arguments: Map<String, Value>) -> Self {
        Self {
            id: Uuid::new_v4(),
            created_at: now(),
            function: function.into(),
            arguments,
            status: CallStatus::Pending,
            duration: None,
            response: None,
            error: None,
        }
    }

    /// The snapshot: `{"id", "created_at", "metadata": {"lion_class"},
    /// "execution": {"status", "duration", "response", "error",
    /// "retryable"}, "arguments", "function"}`.
    pub fn to_value(&self) -> Value {
        json!({
            "id": self.id.to_string(),
            "created_at": self.created_at,
            "metadata": {"lion_class": lion_class::FUNCTION_CALLING},
            "execution": {
                "status": self.status.as_str(),
                "duration": self.duration,
                "response": self.response,
                "error": self.error,
                "retryable": null,
            },
            "arguments": self.arguments,
            "function": self.function,
        })
    }

    /// A log entry holding the snapshot.
    pub fn to_log(&self) -> Log {
        Log::from_json(self.to_value())
    }
}
