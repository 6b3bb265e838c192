//! The gather pass (one instruction) and the writeback pass (after
//! actions), over a snapshot of the registry's entries.

use std::panic::AssertUnwindSafe;

use branch_core::{Branch, Message};
use futures_util::FutureExt;

use crate::registry::ProviderEntry;
use crate::report::{Degraded, Fired, ProviderReport, RegistryStats};
use crate::tokens::count_tokens_async;

struct Candidate {
    index: usize,
    text: String,
    tokens: u64,
}

/// Runs every provider in registration order, sequentially, then admits
/// candidates by descending priority (stable) within `budget`, and reports
/// the admitted blocks in registration order.
pub(crate) async fn run_pass(
    entries: &[ProviderEntry],
    budget: i64,
    branch: &Branch,
    instruction: &Message,
) -> ProviderReport {
    let mut report = ProviderReport::default();
    let mut candidates = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let outcome = AssertUnwindSafe(entry.provider.provide(branch, instruction))
            .catch_unwind()
            .await;
        if let Some(reason) = entry
            .provider
            .degradation_reason()
            .filter(|r| !r.is_empty())
        {
            report.degraded.push(Degraded {
                provider_name: entry.name.clone(),
                reason,
            });
        }
        let text = match outcome {
            Ok(Ok(Some(text))) if !text.is_empty() => text,
            Ok(Ok(_)) => continue,
            Ok(Err(e)) => {
                tracing::warn!(provider = %entry.name, error = %e, "context provider failed");
                report.failed.push(entry.name.clone());
                continue;
            }
            Err(_) => {
                tracing::warn!(provider = %entry.name, "context provider panicked; contained");
                report.failed.push(entry.name.clone());
                continue;
            }
        };
        let tokens = count_tokens_async(&text).await;
        if entry
            .limit()
            .is_some_and(|limit| tokens as i128 > limit as i128)
        {
            report.skipped.push(entry.name.clone());
            continue;
        }
        candidates.push(Candidate {
            index,
            text,
            tokens,
        });
    }

    let mut by_priority: Vec<usize> = (0..candidates.len()).collect();
    // A stable sort keeps registration order among equal priorities.
    by_priority.sort_by_key(|&c| std::cmp::Reverse(entries[candidates[c].index].priority));
    let mut admitted = vec![false; candidates.len()];
    let mut total: i128 = 0;
    for c in by_priority {
        let tokens = candidates[c].tokens as i128;
        if total + tokens > budget as i128 {
            report
                .skipped
                .push(entries[candidates[c].index].name.clone());
        } else {
            total += tokens;
            admitted[c] = true;
        }
    }
    for (c, cand) in candidates.into_iter().enumerate() {
        if admitted[c] {
            report.fired.push(Fired {
                provider_name: entries[cand.index].name.clone(),
                tokens: cand.tokens,
            });
            report.blocks.push(cand.text);
        }
    }
    report
}

/// Folds one pass into the running counters.
pub(crate) fn record_pass(stats: &mut RegistryStats, report: &ProviderReport) {
    if !report.fired.is_empty() {
        stats.recall_turns += 1;
    }
    stats.blocks_injected += report.fired.len() as u64;
    stats.failed += report.failed.len() as u64;
    if !report.degraded.is_empty() {
        stats.degraded_turns += 1;
    }
}

/// What a writeback pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WritebackSummary {
    /// Hooks that ran (successfully or not).
    pub called: u64,
    /// Records the hooks reported.
    pub records: u64,
    /// Hooks that failed (contained).
    pub failed: u64,
}

/// Calls every writeback hook in registration order, sequentially; a
/// failing or panicking hook is logged and the next one still runs.
pub(crate) async fn run_writeback(
    entries: &[ProviderEntry],
    branch: &Branch,
    action_responses: &[Message],
) -> WritebackSummary {
    let mut summary = WritebackSummary::default();
    for entry in entries.iter().filter(|e| e.provider.has_writeback()) {
        summary.called += 1;
        let outcome = AssertUnwindSafe(entry.provider.writeback(branch, action_responses))
            .catch_unwind()
            .await;
        match outcome {
            Ok(Ok(records)) => summary.records += records.unwrap_or(0),
            Ok(Err(e)) => {
                tracing::warn!(provider = %entry.name, error = %e, "context writeback failed");
                summary.failed += 1;
            }
            Err(_) => {
                tracing::warn!(provider = %entry.name, "context writeback panicked; contained");
                summary.failed += 1;
            }
        }
    }
    summary
}
