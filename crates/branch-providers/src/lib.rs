//! Context providers.
//!
//! Charter: the `ContextProviderRegistry` behind `branch.providers()`:
//! budgeted (2,000 tokens by default), prioritised, ephemeral context blocks
//! gathered before a turn and injected into one provider request, never
//! stored as messages; plus the post-action writeback pass. It must not know
//! models or storage.
//!
//! The code arrives with the extensions issue; until then this crate holds
//! only its charter.
