//! What one gather pass did, and the registry's running counters.

use serde::Serialize;

/// One admitted provider and the tokens its block cost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fired {
    /// The registered name.
    pub provider_name: String,
    /// `o200k_base` tokens of its block.
    pub tokens: u64,
}

/// A provider that reported itself degraded for this turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Degraded {
    /// The registered name.
    pub provider_name: String,
    /// Its `degradation_reason`.
    pub reason: String,
}

/// The outcome of one gather pass (serializes as the reference's
/// `ProviderReport`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct ProviderReport {
    /// Admitted blocks, in registration order.
    pub blocks: Vec<String>,
    /// Admitted providers, in registration order.
    pub fired: Vec<Fired>,
    /// Providers over their own `max_tokens` (in registration order), then
    /// those refused by the budget (in admission order); or every name when
    /// the branch had no system message.
    pub skipped: Vec<String>,
    /// Providers whose `provide` failed, in registration order.
    pub failed: Vec<String>,
    /// Providers that reported a degradation, in registration order.
    pub degraded: Vec<Degraded>,
}

impl ProviderReport {
    /// The text to inject: the blocks joined with `"\n"`.
    pub fn blocks_text(&self) -> String {
        self.blocks.join("\n")
    }
}

/// Running counters of a registry (the reference's `stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct RegistryStats {
    /// Passes in which at least one provider fired.
    pub recall_turns: u64,
    /// Blocks admitted, over all passes.
    pub blocks_injected: u64,
    /// Provider failures, over all passes.
    pub failed: u64,
    /// Passes with at least one degraded provider.
    pub degraded_turns: u64,
    /// Records the writeback hooks reported.
    pub writeback_records: u64,
    /// Writeback hooks that failed.
    pub writeback_failed: u64,
}
