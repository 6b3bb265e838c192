//! Errors of session membership and session operations.

use branch_core::{BranchError, OperationError};
use uuid::Uuid;

/// What can go wrong in a [`super::Session`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// A branch of an include batch belongs to another session; nothing of
    /// the batch was changed.
    #[error(
        "branch `{branch}` is already owned by session `{owner}`; remove it from that session first to reparent it"
    )]
    AlreadyOwned {
        /// The refused branch.
        branch: Uuid,
        /// The session that owns it.
        owner: Uuid,
    },
    /// A different branch object with the same id is already a member (or
    /// twice in the batch); nothing of the batch was changed.
    #[error("another branch with id `{0}` is already in this session")]
    DuplicateBranchId(Uuid),
    /// No member has this id.
    #[error("branch `{0}` is not in this session")]
    UnknownBranch(Uuid),
    /// An operation needed the default branch and the session has none.
    #[error("the session has no default branch")]
    NoDefaultBranch,
    /// No operation is registered under this name.
    #[error("unknown operation `{0}`")]
    UnknownOperation(String),
    /// A registered operation returned an error.
    #[error("operation `{name}` failed on branch `{branch}`: {source}")]
    OperationFailed {
        /// The operation.
        name: String,
        /// The branch it ran for.
        branch: Uuid,
        /// Its error.
        #[source]
        source: OperationError,
    },
    /// Operation arguments must be a JSON object (keyword arguments).
    #[error("arguments of operation `{name}` must be a JSON object, not {found}")]
    InvalidArguments {
        /// The operation.
        name: String,
        /// The JSON type given.
        found: &'static str,
    },
    /// A concurrency bound of zero would never run anything.
    #[error("the concurrency bound must be at least 1")]
    ZeroConcurrency,
    /// A task running for one branch panicked or was cancelled.
    #[error("the task for branch `{branch}` did not complete: {reason}")]
    TaskFailed {
        /// The branch.
        branch: Uuid,
        /// The panic message or cancellation.
        reason: String,
    },
    /// The branch aggregate refused something (a duplicate operation name,
    /// a default branch that could not be built).
    #[error(transparent)]
    Branch(#[from] BranchError),
}
