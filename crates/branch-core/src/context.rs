//! The context-provider seam: ephemeral text injected into one request.
//!
//! The registry (budget, priority, reports) lives in `branch-providers`;
//! the aggregate only knows the trait so that a provider can read the
//! branch it serves.

use async_trait::async_trait;

use crate::branch::Branch;
use crate::message::Message;

/// Why a provider failed; contained and reported, never fatal to a turn.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct ProviderError(pub String);

/// Supplies context for one turn, and optionally learns from its actions.
#[async_trait]
pub trait ContextProvider: Send + Sync + 'static {
    /// Text to inject for this instruction; `None` or empty injects nothing.
    async fn provide(
        &self,
        branch: &Branch,
        instruction: &Message,
    ) -> Result<Option<String>, ProviderError>;

    /// The provider's own name, used when it is registered without one.
    fn name(&self) -> Option<String> {
        None
    }

    /// Read after each `provide`: a non-empty reason reports the provider
    /// as degraded for this turn (its block, if any, is still used).
    fn degradation_reason(&self) -> Option<String> {
        None
    }

    /// Whether [`ContextProvider::writeback`] does anything; the registry
    /// skips providers without one.
    fn has_writeback(&self) -> bool {
        false
    }

    /// Called after `operate` executed actions with at least one response.
    /// `Some(n)` reports `n` records written.
    async fn writeback(
        &self,
        _branch: &Branch,
        _action_responses: &[Message],
    ) -> Result<Option<u64>, ProviderError> {
        Ok(None)
    }
}
