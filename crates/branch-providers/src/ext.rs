//! The branch-facing API: `providers()`, `last_context_report()`, and the
//! two passes the verbs call.

use std::sync::Arc;

use branch_core::{Branch, Message};

use crate::gather::{WritebackSummary, record_pass, run_pass, run_writeback};
use crate::registry::{ContextProviderRegistry, DEFAULT_BUDGET, ProviderEntry};
use crate::report::ProviderReport;

/// The report of the latest pass, kept in the branch's extensions.
struct LastContextReport(Arc<ProviderReport>);

/// Context providers on a [`Branch`].
pub trait ProvidersExt {
    /// The branch's registry, created (empty, budget 2,000) on first use.
    fn providers(&mut self) -> &mut ContextProviderRegistry;

    /// The registry if one was ever created; `None` costs nothing.
    fn try_providers(&self) -> Option<&ContextProviderRegistry>;

    /// The report of the latest gather pass. Turn-scoped: a pass over an
    /// absent or empty registry clears it, so a report never outlives the
    /// turn that made it (the reference keeps a stale one; ADR-0018 fix).
    fn last_context_report(&self) -> Option<Arc<ProviderReport>>;
}

impl ProvidersExt for Branch {
    fn providers(&mut self) -> &mut ContextProviderRegistry {
        self.extensions_mut()
            .get_or_insert_with(ContextProviderRegistry::default)
    }

    fn try_providers(&self) -> Option<&ContextProviderRegistry> {
        self.extensions().get::<ContextProviderRegistry>()
    }

    fn last_context_report(&self) -> Option<Arc<ProviderReport>> {
        self.extensions()
            .get::<LastContextReport>()
            .map(|r| r.0.clone())
    }
}

/// The outcome of [`gather`]: what to inject into this one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextPass {
    /// The pass's report (also the branch's `last_context_report`).
    pub report: Arc<ProviderReport>,
    /// The admitted blocks joined with `"\n"`; `""` when none was
    /// admitted. Feed it to [`crate::fold_guidance`].
    pub blocks_text: String,
}

/// The pre-turn pass. Call it on **every model call** (`chat` and all that
/// goes through it: `communicate`, `operate`, each ReAct round,
/// `interpret`, parse repairs, `run`) after the turn's instruction is
/// built and before the request is compiled, passing that instruction
/// (not yet added to the branch).
///
/// * No registry, or an empty one: no provider runs, the last report is
///   cleared, and `None` is returned (nothing to inject).
/// * The branch has no system message: no provider runs (there is no
///   injection target); the report lists every name under `skipped`, the
///   counters are unchanged, and `blocks_text` is empty.
/// * Otherwise every provider runs in registration order and the blocks
///   are admitted as the reference does (see the crate docs).
///
/// Failing or panicking providers are contained, logged and named under
/// `failed`; this function itself cannot fail.
pub async fn gather(branch: &mut Branch, instruction: &Message) -> Option<ContextPass> {
    gather_with(branch, instruction, &[]).await
}

/// [`gather`] over the branch's registry followed by `extra`, providers
/// given for this one call (they share the turn budget, and the registry's
/// budget applies; without a registry, the default one). The pass's
/// counters go to the branch's registry, created if needed.
pub async fn gather_with(
    branch: &mut Branch,
    instruction: &Message,
    extra: &[ProviderEntry],
) -> Option<ContextPass> {
    let registered = branch
        .try_providers()
        .map(|r| (r.entries.clone(), r.budget()));
    let (mut entries, budget) = registered.unwrap_or((Vec::new(), DEFAULT_BUDGET));
    entries.extend(extra.iter().cloned());
    let snapshot = (!entries.is_empty()).then_some((entries, budget));
    let Some((entries, budget)) = snapshot else {
        branch.extensions_mut().remove::<LastContextReport>();
        return None;
    };
    let report = if branch.system().is_none() {
        ProviderReport {
            skipped: entries.iter().map(|e| e.name.clone()).collect(),
            ..ProviderReport::default()
        }
    } else {
        // Boxed: a turn without providers never gets here, and inline the
        // pass would set the size of every turn's future.
        let report = Box::pin(run_pass(&entries, budget, branch, instruction)).await;
        record_pass(&mut branch.providers().stats, &report);
        report
    };
    let report = Arc::new(report);
    branch
        .extensions_mut()
        .insert(LastContextReport(report.clone()));
    Some(ContextPass {
        blocks_text: report.blocks_text(),
        report,
    })
}

/// The post-action pass. Call it after `operate` actually executed
/// actions and at least one produced a response, with the ActionResponse
/// messages of that step (the reference's `{function, arguments, output}`
/// models). Not part of the report nor of the budget.
///
/// Providers with a writeback hook run sequentially in registration order;
/// a failing or panicking hook is logged and counted in
/// `writeback_failed`, and the next still runs. Returns what happened;
/// without a registry, providers or responses nothing runs.
pub async fn gather_writeback(
    branch: &mut Branch,
    action_responses: &[Message],
) -> WritebackSummary {
    if action_responses.is_empty() {
        return WritebackSummary::default();
    }
    let Some(entries) = branch.try_providers().map(|r| r.entries.clone()) else {
        return WritebackSummary::default();
    };
    let summary = run_writeback(&entries, branch, action_responses).await;
    let stats = &mut branch.providers().stats;
    stats.writeback_records += summary.records;
    stats.writeback_failed += summary.failed;
    summary
}
