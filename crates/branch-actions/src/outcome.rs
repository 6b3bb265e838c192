//! What one tool call produced, and how the verbs record it: the
//! ActionResponse output, `act`'s return value, the log entry and the
//! messages' participants, each as the reference writes them.

use branch_core::log::Log;
use branch_core::{Participant, ToolError};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::calling::FunctionCalling;
use crate::invoke::{CallError, ToolCall};

/// The result of one call, with everything the verbs record.
#[derive(Debug, Clone, PartialEq)]
pub struct CallOutcome {
    /// The call as requested.
    pub call: ToolCall,
    /// The element id of the tool that ran (an ActionRequest's
    /// `recipient`); `None` for an unknown tool.
    pub tool_id: Option<Uuid>,
    /// The tool's result.
    pub result: Result<Value, CallError>,
    /// The `FunctionCalling` record.
    pub calling: FunctionCalling,
    /// Logs the tool left for the branch ([`branch_core::tool_logs`]): a
    /// connected model's API call, say. Logged before the call's own.
    pub logs: Vec<Log>,
}

impl CallOutcome {
    /// Whether the tool itself ran. Unknown tools, unreadable arguments and
    /// refused arguments fail before it does; the reference logs and answers those
    /// differently (see [`CallOutcome::log_content`]).
    pub fn reached_tool(&self) -> bool {
        !matches!(
            self.result,
            Err(CallError::UnknownTool(_))
                | Err(CallError::MalformedArguments { .. })
                | Err(CallError::Tool(ToolError::InvalidArguments { .. }))
        )
    }

    /// The `output` of the ActionResponse message recorded for this call:
    /// the result (`None` for JSON null), or on failure
    /// `{"error": message, "function": name, "arguments": args}`.
    pub fn response_output(&self) -> Option<Value> {
        match &self.result {
            Ok(Value::Null) => None,
            Ok(v) => Some(v.clone()),
            Err(e) => Some(json!({
                "error": e.to_string(),
                "function": self.call.function,
                "arguments": self.call.arguments,
            })),
        }
    }

    /// What `act` returns as the output of this call with errors
    /// suppressed: the result; `None` when the tool ran and failed; for a
    /// failure before the tool ran,
    /// `{"error": message, "message": "Error invoking action 'f': message"}`.
    pub fn returned_output(&self) -> Option<Value> {
        match &self.result {
            Ok(Value::Null) => None,
            Ok(v) => Some(v.clone()),
            Err(_) if self.reached_tool() => None,
            Err(e) => Some(json!({
                "error": e.to_string(),
                "message": format!("Error invoking action '{}': {e}", self.call.function),
            })),
        }
    }

    /// The branch log entry's content: the `FunctionCalling` snapshot when
    /// the tool ran, else the reference's error record
    /// `{"error", "function", "arguments", "branch"}`.
    pub fn log_content(&self, branch: Uuid) -> Value {
        match &self.result {
            Err(e) if !self.reached_tool() => json!({
                "error": e.to_string(),
                "function": self.call.function,
                "arguments": self.call.arguments,
                "branch": branch.to_string(),
            }),
            _ => self.calling.to_value(),
        }
    }

    /// Senders and recipients of the ActionRequest / ActionResponse pair
    /// for this call, as the reference writes them: on success the request
    /// goes from the branch to the tool and the response has neither; on
    /// any failure both go from the branch to itself.
    pub fn participants(&self, branch: Uuid) -> ActionParticipants {
        let b = Some(Participant::Id(branch));
        match (&self.result, self.tool_id) {
            (Ok(_), Some(tool)) => ActionParticipants {
                request_sender: b,
                request_recipient: Some(Participant::Id(tool)),
                response_sender: None,
                response_recipient: None,
            },
            _ => ActionParticipants {
                request_sender: b.clone(),
                request_recipient: b.clone(),
                response_sender: b.clone(),
                response_recipient: b,
            },
        }
    }
}

/// Who sends and receives the messages recording one call.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionParticipants {
    /// The ActionRequest's sender.
    pub request_sender: Option<Participant>,
    /// The ActionRequest's recipient.
    pub request_recipient: Option<Participant>,
    /// The ActionResponse's sender.
    pub response_sender: Option<Participant>,
    /// The ActionResponse's recipient.
    pub response_recipient: Option<Participant>,
}
