//! Context providers: budgeted, ephemeral context injected into one
//! request and never stored as messages (ADR-0016 D3, extensions.md §2).
//!
//! Charter: the [`ContextProviderRegistry`] behind
//! [`ProvidersExt::providers`], the pre-turn [`gather`] pass, the
//! [`fold_guidance`] rule that places its blocks in a request, and the
//! post-action [`gather_writeback`] pass. It must not know models or
//! storage. Token counts are tiktoken `o200k_base` ([`count_tokens`]).
//!
//! # For the verbs (branch-operations)
//!
//! Per model call:
//!
//! ```no_run
//! use branch_core::{Branch, Message};
//! use branch_providers::{fold_guidance, gather};
//!
//! /// The guidance the oldest instruction of this call's request carries,
//! /// or `None` when the branch has no system message (no fold at all).
//! async fn folded(branch: &mut Branch, instruction: &Message, guidance: &str) -> Option<String> {
//!     let pass = gather(branch, instruction).await;
//!     let blocks = pass.as_ref().map_or("", |p| p.blocks_text.as_str());
//!     let system = branch.system()?.as_system()?.rendered();
//!     Some(fold_guidance(Some(&system), blocks, guidance))
//! }
//! ```
//!
//! After `operate` ran actions with at least one response:
//! `gather_writeback(&mut branch, &responses).await`.
//!
//! # The pass (verified against the reference)
//!
//! Providers run in registration order, sequentially. `None` or `""` is
//! neither fired nor skipped; an error (or panic) names the provider under
//! `failed`; a provider's `degradation_reason` is read after each call;
//! a block over a truthy `max_tokens` is `skipped`. The remaining
//! candidates are admitted greedily by descending priority (ties in
//! registration order) while the running total stays within the budget;
//! refused ones are appended to `skipped`. Admitted blocks are reported in
//! registration order.

// Providers' blocks come from user code and stored data: nothing outside
// tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod ext;
mod fold;
mod gather;
mod registry;
mod report;
mod tokens;

pub use ext::{ContextPass, ProvidersExt, gather, gather_with, gather_writeback};
pub use fold::fold_guidance;
pub use gather::WritebackSummary;
pub use registry::{ContextProviderRegistry, DEFAULT_BUDGET, ProviderEntry, ProviderOptions};
pub use report::{Degraded, Fired, ProviderReport, RegistryStats};
pub use tokens::{count_tokens, count_tokens_async, warm_up};

pub use branch_core::{ContextProvider, ProviderError};
