//! A turn paused on tool calls awaiting approval, and its resumption (no
//! reference counterpart).
//!
//! When some proposed call is asked about and nobody answers in process,
//! nothing of the batch runs: the turn's model reply is committed and the
//! proposed calls, with everything needed to run them later (the batch's
//! options, `operate`'s parsed structure, the provider's call ids), are
//! kept in the branch's metadata under [`PENDING_KEY`]. Metadata is part of
//! `to_dict` (so of every store), and the reference keeps it without
//! reading it, so a paused branch still loads there.
//!
//! Another process can load the branch, decide each call and call
//! [`resume`]: the batch then runs exactly as an in-process approval would
//! have run it, and the conversation ends up the same.

use std::time::Duration;

use branch_core::Branch;
use branch_core::object_only::{Object, object_only};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::act::{ActOptions, ActionResponseModel, Strategy, execute, settle};

use crate::approval::Decision;
use crate::error::{Committed, OperationError, Result};

/// The metadata key of a branch's paused turn.
pub const PENDING_KEY: &str = "pending_approval";

/// The metadata key, on the messages recording a call that was asked
/// about or refused by policy, of what was decided.
pub const APPROVAL_KEY: &str = "approval";

/// The version of the pending state's shape.
const PENDING_VERSION: u64 = 1;

/// Where a call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallStatus {
    /// The policy runs it without asking.
    Allowed,
    /// Asked; no decision yet.
    Pending,
    /// Approved as proposed.
    Approved,
    /// Approved with other arguments.
    Edited,
    /// Denied (by policy or by whoever was asked).
    Denied,
    /// Still undecided when the approval window closed.
    Expired,
}

impl CallStatus {
    /// The word recorded for it, `None` when no approval was involved.
    pub(crate) fn recorded(self) -> Option<&'static str> {
        match self {
            CallStatus::Allowed | CallStatus::Pending => None,
            CallStatus::Approved => Some("approved"),
            CallStatus::Edited => Some("edited"),
            CallStatus::Denied => Some("denied"),
            CallStatus::Expired => Some("expired"),
        }
    }
}

/// One proposed tool call and its approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProposedCall {
    /// The id decisions name it by.
    pub call_id: Uuid,
    /// The tool.
    pub function: String,
    /// The arguments as the model proposed them.
    pub arguments: Map<String, Value>,
    /// The provider's id of a native tool call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Where it stands.
    pub status: CallStatus,
    /// The arguments it was approved with, when edited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_arguments: Option<Map<String, Value>>,
    /// Why it was denied, when a reason was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why the model's arguments could not be read: such a call is never
    /// asked about, gated or run; it is answered as a failed call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub malformed: Option<String>,
}

impl ProposedCall {
    pub(crate) fn new(function: String, arguments: Map<String, Value>) -> Self {
        Self {
            call_id: Uuid::new_v4(),
            function,
            arguments,
            tool_call_id: None,
            status: CallStatus::Allowed,
            approved_arguments: None,
            reason: None,
            malformed: None,
        }
    }

    /// Applies a decision to an asked call.
    pub(crate) fn decide(&mut self, d: Decision) {
        match d {
            Decision::Approve => self.status = CallStatus::Approved,
            Decision::Edit(args) => {
                self.status = CallStatus::Edited;
                self.approved_arguments = Some(args);
            }
            Decision::Deny(reason) => {
                self.status = CallStatus::Denied;
                self.reason = reason;
            }
            Decision::Defer => self.status = CallStatus::Pending,
        }
    }

    /// The arguments it runs with.
    pub fn effective_arguments(&self) -> &Map<String, Value> {
        self.approved_arguments.as_ref().unwrap_or(&self.arguments)
    }
}

/// A paused turn, as kept in the branch's metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingApproval {
    /// The shape's version.
    pub version: u64,
    /// The verb that paused (`act`, `operate`, `run`).
    pub verb: String,
    /// When it paused, float seconds since the epoch.
    pub created_at: f64,
    /// When undecided calls expire, if ever.
    pub expires_at: Option<f64>,
    /// How the batch runs.
    pub strategy: Strategy,
    /// Whether failures become error outputs.
    pub suppress_errors: bool,
    /// The per-call deadline, in milliseconds.
    pub timeout_ms: Option<u64>,
    /// The concurrency bound.
    pub max_concurrency: Option<usize>,
    /// The calls, in the order proposed.
    #[serde(deserialize_with = "calls_from_objects")]
    pub calls: Vec<ProposedCall>,
    /// `operate`'s parsed structure, to fill in `action_responses`.
    pub structured: Option<Value>,
}

fn calls_from_objects<'de, D: Deserializer<'de>>(
    d: D,
) -> std::result::Result<Vec<ProposedCall>, D::Error> {
    let calls = Vec::<Object<ProposedCall>>::deserialize(d)?;
    Ok(calls.into_iter().map(|Object(c)| c).collect())
}

impl PendingApproval {
    pub(crate) fn new(
        verb: &str,
        calls: Vec<ProposedCall>,
        opts: ActOptions,
        expiry: Option<Duration>,
        structured: Option<Value>,
    ) -> Self {
        let now = branch_core::element::now();
        Self {
            version: PENDING_VERSION,
            verb: verb.to_owned(),
            created_at: now,
            expires_at: expiry.map(|d| now + d.as_secs_f64()),
            strategy: opts.strategy,
            suppress_errors: opts.suppress_errors,
            timeout_ms: opts
                .timeout
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            max_concurrency: opts.max_concurrency,
            calls,
            structured,
        }
    }

    /// The calls still awaiting a decision.
    pub fn waiting(&self) -> impl Iterator<Item = &ProposedCall> {
        self.calls
            .iter()
            .filter(|c| c.status == CallStatus::Pending)
    }

    fn act_options(&self) -> ActOptions {
        ActOptions {
            strategy: self.strategy,
            suppress_errors: self.suppress_errors,
            timeout: self.timeout_ms.map(Duration::from_millis),
            max_concurrency: self.max_concurrency,
        }
    }

    /// Writes it into the branch's metadata.
    pub(crate) fn store(&self, branch: &mut Branch) {
        let v = serde_json::to_value(self).unwrap_or(Value::Null);
        branch.metadata_mut().insert(PENDING_KEY.into(), v);
    }

    /// The error a paused verb returns.
    pub(crate) fn paused(&self, committed: Committed) -> OperationError {
        OperationError::ApprovalPending {
            calls: self.waiting().count(),
            committed,
        }
    }
}

/// The branch's paused turn, if it has one. Stored data is not trusted: a
/// value that does not read as a pending state is an error, never a
/// silently ignored pause.
pub fn pending_approval(branch: &Branch) -> Result<Option<PendingApproval>> {
    let Some(v) = branch.metadata().get(PENDING_KEY) else {
        return Ok(None);
    };
    // Only from objects, the state and each of its calls: serde's derive
    // would also read a list, its items taken as the fields in order.
    let p: PendingApproval = object_only(v).map_err(|e| OperationError::InvalidArgument {
        what: "pending_approval",
        message: format!("the stored pending approval does not read: {e}"),
    })?;
    if p.version != PENDING_VERSION {
        return Err(OperationError::InvalidArgument {
            what: "pending_approval",
            message: format!(
                "pending approval version {} is not {PENDING_VERSION}",
                p.version
            ),
        });
    }
    Ok(Some(p))
}

/// What a resumed turn produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Resumed {
    /// The verb that had paused.
    pub verb: String,
    /// The calls, in proposal order, as `act` returns them.
    pub action_responses: Vec<ActionResponseModel>,
    /// `operate`'s parsed structure with `action_responses` filled.
    pub structured: Option<Value>,
}

/// Applies `decisions` (by call id) to the branch's paused turn. When every
/// call is decided (or the window closed), the batch runs and is recorded,
/// the pause is cleared, and the result is returned; otherwise the
/// decisions are kept and [`OperationError::ApprovalPending`] says how many
/// calls still wait.
pub async fn resume(
    branch: &mut Branch,
    decisions: impl IntoIterator<Item = (Uuid, Decision)>,
) -> Result<Resumed> {
    let Some(mut p) = pending_approval(branch)? else {
        return Err(OperationError::InvalidArgument {
            what: "resume",
            message: "the branch has no turn awaiting approval".into(),
        });
    };
    // A window that has closed closes it for late decisions too.
    let expired = p
        .expires_at
        .is_some_and(|t| branch_core::element::now() > t);
    for (id, d) in decisions {
        let Some(call) = p.calls.iter_mut().find(|c| c.call_id == id) else {
            return Err(OperationError::InvalidArgument {
                what: "decisions",
                message: format!("no proposed call has id {id}"),
            });
        };
        if call.status != CallStatus::Pending {
            return Err(OperationError::InvalidArgument {
                what: "decisions",
                message: format!("call {id} ({}) was already decided", call.function),
            });
        }
        if !expired {
            call.decide(d);
        }
    }
    if expired {
        for c in p.calls.iter_mut() {
            if c.status == CallStatus::Pending {
                c.status = CallStatus::Expired;
            }
        }
    }
    if p.waiting().next().is_some() {
        p.store(branch);
        return Err(p.paused(Committed::default()));
    }
    let opts = p.act_options();
    let acted = execute(branch, p.calls.clone(), opts).await;
    branch.metadata_mut().remove(PENDING_KEY);
    let messages: Vec<_> = acted.entries.iter().map(|e| e.pair.1.clone()).collect();
    // Each verb records its batch as it would have uninterrupted: `act`
    // surfaces failures as it does; `operate` and `run` record every call.
    let responses = if p.verb == "act" {
        settle(branch, acted, opts.suppress_errors)?
    } else {
        crate::turn::commit(branch, acted.messages);
        acted.responses
    };
    let mut structured = p.structured;
    if p.verb == "operate" {
        if let Some(Value::Object(o)) = structured.as_mut() {
            o.insert(
                "action_responses".into(),
                serde_json::to_value(&responses).unwrap_or(Value::Null),
            );
        }
        // Context providers learn from the calls once they are in, as
        // after an uninterrupted `operate`.
        branch_providers::gather_writeback(branch, &messages).await;
    }
    Ok(Resumed {
        verb: p.verb,
        action_responses: responses,
        structured,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stored state and each call are read only from objects: serde's
    /// derive alone reads a list as the fields in order.
    #[test]
    fn a_stored_state_or_call_written_as_a_list_is_refused() {
        let mut call = ProposedCall::new("f".into(), Map::new());
        call.status = CallStatus::Pending;
        call.tool_call_id = Some("call_1".into());
        let state = PendingApproval::new("act", vec![call], ActOptions::default(), None, None);
        let stored = serde_json::to_value(&state).unwrap();
        let mut branch = Branch::new().unwrap();
        let read = |branch: &mut Branch, v: Value| {
            branch.metadata_mut().insert(PENDING_KEY.into(), v);
            pending_approval(branch)
        };
        assert_eq!(read(&mut branch, stored.clone()).unwrap(), Some(state));

        let as_list = |o: &Value| Value::Array(o.as_object().unwrap().values().cloned().collect());
        assert!(serde_json::from_value::<PendingApproval>(as_list(&stored)).is_ok());
        let e = read(&mut branch, as_list(&stored)).unwrap_err();
        assert!(e.to_string().contains("expected a JSON object"), "{e}");

        let mut listed_call = stored.clone();
        listed_call["calls"][0] = as_list(&stored["calls"][0]);
        assert!(serde_json::from_value::<ProposedCall>(listed_call["calls"][0].clone()).is_ok());
        let e = read(&mut branch, listed_call).unwrap_err();
        assert!(e.to_string().contains("expected a JSON object"), "{e}");
    }
}
