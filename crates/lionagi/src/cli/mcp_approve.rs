//! `lionagi mcp serve --approve` with a client that can show forms (MCP
//! elicitation): a turn paused on tool calls is settled by asking the
//! person behind the client about each call (run / deny / always for this
//! tool), then resumed, and the model goes on with the results, in the
//! same served call. A client that cannot be asked, or a person who
//! dismisses the question, leaves the turn paused, as without elicitation.

use branch_mcp::{Cancelled, Choice, Confirmation, Confirmer};
use branch_operations::{BranchApproval, Decision};

use super::approve::describe;
use super::chat_error::ModelInfo;
use super::conversation::Conversation;
use super::tool_turn;
use super::turn::{Answer, Display};

const RUN: Choice = Choice {
    value: "run",
    title: "Run it",
};
const DENY: Choice = Choice {
    value: "deny",
    title: "Deny it (the model is told)",
};
const ALWAYS: Choice = Choice {
    value: "always",
    title: "Run it, and every call of this tool from now on",
};

/// How settling a paused turn ended.
pub(crate) enum Settled {
    /// Nothing was paused.
    NothingPaused,
    /// Every call was decided, the batch ran and the model answered with
    /// the results (that answer may be paused again).
    Answered(Answer),
    /// The turn stays paused (written so); why no decision was taken.
    StillPaused(String),
}

/// What a call cancelled while settling is answered: what was decided
/// and ran is stored; a question not answered leaves the turn paused.
const CANCELLED: &str = "the call was cancelled; the conversation is as stored";

/// Settles the conversation's paused turn by asking `confirm`'s person
/// about each waiting call. The pause is in the store before the first
/// question; the resumed turn is written once its batch has run, and the
/// model's answer after it is recorded as its own turn. The questions,
/// the batch and the model's answer stop when the call is `cancelled`;
/// the store writes between them are not cut.
pub(crate) async fn settle(
    conv: &mut Conversation,
    confirm: &Confirmer,
    info: &ModelInfo,
    display: &Display,
    cancelled: &mut Cancelled,
) -> Result<Settled, String> {
    let pending = conv
        .branch_mut()
        .pending_approval()
        .map_err(|e| e.to_string())?;
    let Some(pending) = pending else {
        return Ok(Settled::NothingPaused);
    };
    let Some(mut approvals) = conv.approvals.take() else {
        return Ok(Settled::StillPaused("served without --approve".into()));
    };
    if let Err(e) = conv.save_all().await {
        conv.approvals = Some(approvals);
        return Err(e.to_string());
    }
    let asking = async {
        let mut decisions = Vec::new();
        for call in pending.waiting() {
            if approvals.is_always(&call.function) {
                decisions.push((call.call_id, Decision::Approve));
                continue;
            }
            display.narrate(&format!("asking the client to approve `{}`", call.function));
            let question = format!("{}\n\nRun this tool call?", describe(call));
            let decision = match confirm.choose(&question, &[RUN, DENY, ALWAYS]).await? {
                Confirmation::Chosen(c) if c == RUN.value => Decision::Approve,
                Confirmation::Chosen(c) if c == ALWAYS.value => {
                    approvals.approve_always(&call.function);
                    Decision::Approve
                }
                Confirmation::Chosen(_) | Confirmation::Declined => Decision::Deny(None),
                Confirmation::Dismissed => {
                    return Err("the person dismissed the question".to_owned());
                }
            };
            decisions.push((call.call_id, decision));
        }
        Ok(decisions)
    };
    let asked = tokio::select! {
        biased;
        () = &mut *cancelled => None,
        asked = asking => Some(asked),
    };
    conv.branch_mut()
        .set_approval_policy(Some(approvals.policy()));
    conv.approvals = Some(approvals);
    let decisions = match asked {
        None => return Err(CANCELLED.into()),
        Some(Ok(decisions)) => decisions,
        Some(Err(why)) => return Ok(Settled::StillPaused(why)),
    };
    display.narrate("running the approved calls");
    tokio::select! {
        biased;
        () = &mut *cancelled => return Err(CANCELLED.into()),
        resumed = conv.branch_mut().resume(decisions) => resumed.map_err(|e| e.to_string())?,
    };
    conv.save_all().await.map_err(|e| e.to_string())?;
    let answer = tokio::select! {
        biased;
        () = &mut *cancelled => return Err(CANCELLED.into()),
        answer = tool_turn::follow_up(conv.branch_mut(), info, display) => {
            answer.map_err(|e| e.to_string())?
        }
    };
    display.narrate("recording the turn");
    conv.record_turn().await.map_err(|e| e.to_string())?;
    Ok(Settled::Answered(answer))
}
