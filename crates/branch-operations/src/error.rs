//! Why a verb failed, and what it had recorded when it did.

use branch_core::model::ModelError;
use branch_messages::CompileError;

/// What a failed verb left in the branch. Turns are atomic: a failed turn
/// commits nothing, so this counts only messages of earlier, completed
/// turns of the same call (ReAct rounds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Committed {
    /// Messages appended to the branch by this call before it failed.
    pub messages: usize,
    /// Completed turns (ReAct rounds) among them.
    pub turns: usize,
}

impl std::fmt::Display for Committed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.messages == 0 {
            f.write_str("nothing was recorded")
        } else {
            write!(
                f,
                "{} message(s) of {} completed turn(s) were recorded",
                self.messages, self.turns
            )
        }
    }
}

/// A verb's failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OperationError {
    /// The provider call failed (the reference's `ExecutionError("API call
    /// failed: ...")`). The call is logged.
    #[error("API call failed: {} ({committed})", source.reference_message())]
    ApiCall {
        /// The provider error.
        #[source]
        source: Box<ModelError>,
        /// What was recorded before the failure.
        committed: Committed,
    },
    /// The request could not be compiled from the history.
    #[error("cannot compile the request: {source} ({committed})")]
    Compile {
        /// Why.
        #[source]
        source: Box<CompileError>,
        /// What was recorded before the failure.
        committed: Committed,
    },
    /// Structured output could not be obtained, even after repairs.
    #[error("Failed to parse model response into {format}: {reason} ({committed})")]
    Parse {
        /// The requested format (its title).
        format: String,
        /// The last failure.
        reason: ParseFailure,
        /// What was recorded (the turn itself is recorded before parsing,
        /// as in the reference).
        committed: Committed,
    },
    /// A tool call could not run and errors were not suppressed.
    #[error("action {function:?} failed: {message} ({committed})")]
    Action {
        /// The tool name.
        function: String,
        /// The error.
        message: String,
        /// What was recorded.
        committed: Committed,
    },
    /// An argument is invalid (bad request shape, unknown tool selection,
    /// a non-CLI model given to `run`, ...).
    #[error("invalid argument {what}: {message}")]
    InvalidArgument {
        /// Which argument.
        what: &'static str,
        /// Why.
        message: String,
    },
    /// Tool calls await approval: the turn is paused, not failed. Its
    /// model reply is recorded and the proposed calls are kept in the
    /// branch's metadata (`pending_approval`) until `resume`.
    #[error("{calls} tool call(s) await approval; the turn is paused ({committed})")]
    ApprovalPending {
        /// Calls still awaiting a decision.
        calls: usize,
        /// What was recorded (the paused turn's reply included).
        committed: Committed,
    },
    /// A streamed run failed.
    #[error("run failed: {message} ({committed})")]
    Run {
        /// Why.
        message: String,
        /// What was recorded.
        committed: Committed,
    },
}

impl OperationError {
    /// What the failed call left in the branch.
    pub fn committed(&self) -> Committed {
        match self {
            Self::ApiCall { committed, .. }
            | Self::Compile { committed, .. }
            | Self::Parse { committed, .. }
            | Self::Action { committed, .. }
            | Self::ApprovalPending { committed, .. }
            | Self::Run { committed, .. } => *committed,
            Self::InvalidArgument { .. } => Committed::default(),
        }
    }

    pub(crate) fn with_committed(mut self, c: Committed) -> Self {
        match &mut self {
            Self::ApiCall { committed, .. }
            | Self::Compile { committed, .. }
            | Self::Parse { committed, .. }
            | Self::Action { committed, .. }
            | Self::ApprovalPending { committed, .. }
            | Self::Run { committed, .. } => *committed = c,
            Self::InvalidArgument { .. } => {}
        }
        self
    }

    pub(crate) fn api(source: ModelError) -> Self {
        Self::ApiCall {
            source: Box::new(source),
            committed: Committed::default(),
        }
    }

    pub(crate) fn compile(source: CompileError) -> Self {
        Self::Compile {
            source: Box::new(source),
            committed: Committed::default(),
        }
    }
}

/// Why a text did not parse into the requested structure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseFailure {
    /// No JSON object could be found in the text.
    #[error("Failed to parse text: Input cannot be None")]
    Extraction,
    /// JSON was found but the schema refused it.
    #[error("{0}")]
    Validation(String),
}

impl ParseFailure {
    /// `"extraction"` or `"validation"` (the reference's `failure_kind`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Extraction => "extraction",
            Self::Validation(_) => "validation",
        }
    }
}

/// Result alias of the verbs.
pub type Result<T, E = OperationError> = std::result::Result<T, E>;
