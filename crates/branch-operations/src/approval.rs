//! Approval policies on top of the governance gate (no reference
//! counterpart): which tool calls run without asking, which never run, and
//! which wait for a person or a program to approve them.
//!
//! A policy is a live extension of the branch (like the gate: never
//! serialized), consulted by `act` for every proposed call before the gate:
//! a rule on the arguments first, then the tool's own setting, then the
//! default. An `Ask` goes to the approver callback when there is one; an
//! approver that defers, or no approver at all, pauses the turn (see
//! [`crate::pending`]).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use branch_core::Branch;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::pending::ProposedCall;

/// What a policy says about one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolPolicy {
    /// Runs without asking.
    Always,
    /// Never runs: recorded as denied by policy.
    Never,
    /// Asks the approver, or pauses the turn until someone decides.
    Ask,
}

/// An answer to an asked call.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Run it as proposed.
    Approve,
    /// Run it with these arguments instead (recorded as edited, with the
    /// proposed arguments kept beside the ones that ran).
    Edit(Map<String, Value>),
    /// Do not run it; the reason, if any, is shown to the model.
    Deny(Option<String>),
    /// No answer now: the turn pauses until one is given.
    Defer,
}

/// What an approver returns.
pub type ApproverFuture<'a> = Pin<Box<dyn Future<Output = Decision> + Send + 'a>>;

/// Decides asked calls in process (a person at a terminal, a rules
/// service). It is awaited on the path of the turn: bound its own waits,
/// or return [`Decision::Defer`] to pause the turn instead.
pub trait Approver: Send + Sync + 'static {
    /// The decision on `call`.
    fn decide<'a>(&'a self, call: &'a ProposedCall) -> ApproverFuture<'a>;
}

struct ApproverFn<F>(F);

impl<F, Fut> Approver for ApproverFn<F>
where
    F: Fn(ProposedCall) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Decision> + Send + 'static,
{
    fn decide<'a>(&'a self, call: &'a ProposedCall) -> ApproverFuture<'a> {
        Box::pin((self.0)(call.clone()))
    }
}

type Predicate = Arc<dyn Fn(&Map<String, Value>) -> bool + Send + Sync>;

#[derive(Clone)]
struct Rule {
    tool: Option<String>,
    when: Predicate,
    then: ToolPolicy,
}

/// Which calls run, which never do, and which are asked about. The
/// default policy runs everything (as without a policy).
#[derive(Clone)]
pub struct ApprovalPolicy {
    default: ToolPolicy,
    tools: HashMap<String, ToolPolicy>,
    rules: Vec<Rule>,
    approver: Option<Arc<dyn Approver>>,
    expires_after: Option<Duration>,
}

impl Default for ApprovalPolicy {
    fn default() -> Self {
        Self {
            default: ToolPolicy::Always,
            tools: HashMap::new(),
            rules: Vec::new(),
            approver: None,
            expires_after: None,
        }
    }
}

impl std::fmt::Debug for ApprovalPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalPolicy")
            .field("default", &self.default)
            .field("tools", &self.tools)
            .field("rules", &self.rules.len())
            .field("approver", &self.approver.is_some())
            .field("expires_after", &self.expires_after)
            .finish()
    }
}

impl ApprovalPolicy {
    /// A policy that runs everything until told otherwise.
    pub fn new() -> Self {
        Self::default()
    }

    /// The policy of tools not named otherwise.
    pub fn default_policy(mut self, p: ToolPolicy) -> Self {
        self.default = p;
        self
    }

    /// The policy of one tool.
    pub fn tool(mut self, name: impl Into<String>, p: ToolPolicy) -> Self {
        self.tools.insert(name.into(), p);
        self
    }

    /// A rule on the arguments of `tool` (any tool when `None`): when
    /// `when` holds, `then` applies. Rules are tried in the order added
    /// and win over the tool's own policy.
    pub fn when<F>(mut self, tool: Option<&str>, when: F, then: ToolPolicy) -> Self
    where
        F: Fn(&Map<String, Value>) -> bool + Send + Sync + 'static,
    {
        self.rules.push(Rule {
            tool: tool.map(str::to_owned),
            when: Arc::new(when),
            then,
        });
        self
    }

    /// The in-process approver of asked calls.
    pub fn approver(mut self, a: Arc<dyn Approver>) -> Self {
        self.approver = Some(a);
        self
    }

    /// An async closure as the approver.
    pub fn approver_fn<F, Fut>(self, f: F) -> Self
    where
        F: Fn(ProposedCall) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Decision> + Send + 'static,
    {
        self.approver(Arc::new(ApproverFn(f)))
    }

    /// How long a paused turn waits: calls still undecided after this are
    /// recorded as expired when the turn resumes.
    pub fn expires_after(mut self, d: Duration) -> Self {
        self.expires_after = Some(d);
        self
    }

    /// The expiry window, if any.
    pub fn expiry(&self) -> Option<Duration> {
        self.expires_after
    }

    /// The policy that applies to `function(arguments)`.
    pub fn evaluate(&self, function: &str, arguments: &Map<String, Value>) -> ToolPolicy {
        self.rules
            .iter()
            .find(|r| r.tool.as_deref().is_none_or(|t| t == function) && (r.when)(arguments))
            .map(|r| r.then)
            .or_else(|| self.tools.get(function).copied())
            .unwrap_or(self.default)
    }

    /// The approver, if any.
    pub fn approver_ref(&self) -> Option<&Arc<dyn Approver>> {
        self.approver.as_ref()
    }
}

/// The branch's approval policy (kept in its extensions).
pub(crate) fn policy_of(branch: &Branch) -> Option<ApprovalPolicy> {
    branch.extensions().get::<ApprovalPolicy>().cloned()
}

/// Approval on a branch: its policy, its paused turn, and resuming it.
pub trait BranchApproval {
    /// Sets (or removes) the approval policy `act` consults. A live
    /// extension: never serialized, never cloned.
    fn set_approval_policy(&mut self, policy: Option<ApprovalPolicy>);

    /// The approval policy in force.
    fn approval_policy(&self) -> Option<&ApprovalPolicy>;

    /// The paused turn, if any (read from the metadata; a malformed one is
    /// an error).
    fn pending_approval(&self) -> crate::Result<Option<crate::pending::PendingApproval>>;

    /// Decides calls of the paused turn and, once all are decided, runs
    /// the batch (see [`crate::pending::resume`]).
    fn resume(
        &mut self,
        decisions: Vec<(uuid::Uuid, Decision)>,
    ) -> impl Future<Output = crate::Result<crate::pending::Resumed>> + Send;
}

impl BranchApproval for Branch {
    fn set_approval_policy(&mut self, policy: Option<ApprovalPolicy>) {
        match policy {
            Some(p) => {
                self.extensions_mut().insert(p);
            }
            None => {
                self.extensions_mut().remove::<ApprovalPolicy>();
            }
        }
    }

    fn approval_policy(&self) -> Option<&ApprovalPolicy> {
        self.extensions().get::<ApprovalPolicy>()
    }

    fn pending_approval(&self) -> crate::Result<Option<crate::pending::PendingApproval>> {
        crate::pending::pending_approval(self)
    }

    fn resume(
        &mut self,
        decisions: Vec<(uuid::Uuid, Decision)>,
    ) -> impl Future<Output = crate::Result<crate::pending::Resumed>> + Send {
        crate::pending::resume(self, decisions)
    }
}
