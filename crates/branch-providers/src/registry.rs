//! `ContextProviderRegistry`: the providers of one branch, their
//! priorities and limits, the turn budget and the running counters.

use std::sync::Arc;

use branch_core::ContextProvider;

use crate::report::RegistryStats;

/// The reference's default total budget per turn, in tokens.
pub const DEFAULT_BUDGET: i64 = 2000;

/// How one provider is registered. The numbers are not validated, as in
/// the reference: `max_tokens = Some(0)` means "no limit", a negative
/// limit skips every non-empty block, and a non-positive budget admits no
/// block that costs tokens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProviderOptions {
    /// Higher is admitted first; ties keep registration order.
    pub priority: i64,
    /// A per-provider token limit (`None` or `Some(0)`: none).
    pub max_tokens: Option<i64>,
    /// The name in reports; defaults to the provider's own name, else its
    /// type name.
    pub name: Option<String>,
}

impl ProviderOptions {
    /// Sets the priority.
    pub fn priority(mut self, priority: i64) -> Self {
        self.priority = priority;
        self
    }

    /// Sets the per-provider token limit.
    pub fn max_tokens(mut self, max_tokens: i64) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// Sets the name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

/// One registered provider.
#[derive(Clone)]
pub struct ProviderEntry {
    pub(crate) provider: Arc<dyn ContextProvider>,
    pub(crate) name: String,
    pub(crate) priority: i64,
    pub(crate) max_tokens: Option<i64>,
}

impl std::fmt::Debug for ProviderEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderEntry")
            .field("name", &self.name)
            .field("priority", &self.priority)
            .field("max_tokens", &self.max_tokens)
            .finish_non_exhaustive()
    }
}

impl ProviderEntry {
    /// An entry for `provider`, named by the options, else by the
    /// provider, else by its type. Registries hold these; a verb can also
    /// take some for one call (`context_provider` on the verbs' options).
    pub fn new<P: ContextProvider>(provider: Arc<P>, options: ProviderOptions) -> Self {
        let name = options
            .name
            .or_else(|| provider.name())
            .unwrap_or_else(short_type_name::<P>);
        Self {
            provider,
            name,
            priority: options.priority,
            max_tokens: options.max_tokens,
        }
    }

    /// The registered name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The priority.
    pub fn priority(&self) -> i64 {
        self.priority
    }

    /// The per-provider limit as given.
    pub fn max_tokens(&self) -> Option<i64> {
        self.max_tokens
    }

    /// The limit that applies: the reference tests truthiness, so 0 means
    /// none.
    pub(crate) fn limit(&self) -> Option<i64> {
        self.max_tokens.filter(|m| *m != 0)
    }
}

/// The context providers of one branch. An empty registry is inert: a
/// gather pass over it does nothing (the reference's falsy registry).
#[derive(Debug)]
pub struct ContextProviderRegistry {
    pub(crate) entries: Vec<ProviderEntry>,
    budget: i64,
    pub(crate) stats: RegistryStats,
}

impl Default for ContextProviderRegistry {
    fn default() -> Self {
        Self::new(DEFAULT_BUDGET)
    }
}

fn short_type_name<P>() -> String {
    let full = std::any::type_name::<P>();
    let base = full.split('<').next().unwrap_or(full);
    base.rsplit("::").next().unwrap_or(base).to_owned()
}

impl ContextProviderRegistry {
    /// An empty registry with this total budget per turn.
    pub fn new(budget: i64) -> Self {
        Self {
            entries: Vec::new(),
            budget,
            stats: RegistryStats::default(),
        }
    }

    /// The total budget per turn, in tokens.
    pub fn budget(&self) -> i64 {
        self.budget
    }

    /// Sets the total budget per turn.
    pub fn set_budget(&mut self, budget: i64) {
        self.budget = budget;
    }

    /// Registers a provider with default options.
    pub fn register<P: ContextProvider>(&mut self, provider: P) -> &mut Self {
        self.register_with(provider, ProviderOptions::default())
    }

    /// Registers a provider. Names need not be unique.
    pub fn register_with<P: ContextProvider>(
        &mut self,
        provider: P,
        options: ProviderOptions,
    ) -> &mut Self {
        self.register_shared(Arc::new(provider), options)
    }

    /// Registers a provider the caller keeps a handle on.
    pub fn register_shared<P: ContextProvider>(
        &mut self,
        provider: Arc<P>,
        options: ProviderOptions,
    ) -> &mut Self {
        self.entries.push(ProviderEntry::new(provider, options));
        self
    }

    /// Removes every provider; the counters and budget stay. The next
    /// gather pass finds an empty registry and clears the last report.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Whether nothing is registered (the reference's `bool(registry)` is
    /// the negation).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Number of registered providers.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Registered names, in registration order.
    pub fn names(&self) -> Vec<&str> {
        self.entries.iter().map(|e| e.name.as_str()).collect()
    }

    /// The registered providers, in registration order.
    pub fn entries(&self) -> &[ProviderEntry] {
        &self.entries
    }

    /// The running counters.
    pub fn stats(&self) -> RegistryStats {
        self.stats
    }
}
