//! Capability grants.
//!
//! Charter: `grant_capabilities` / `revoke_capabilities` (the marked block in
//! the system prompt) and the extraction of fenced JSON blocks from observed
//! assistant messages into typed signals (`StructuredOutput`,
//! `CapabilityViolation`, `EmissionRejected`). Observation only: it never
//! executes anything and must not know tools or models.
//!
//! The code arrives with the extensions issue; until then this crate holds
//! only its charter.
