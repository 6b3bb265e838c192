//! Capability grants (ADR-0016 D3, extensions.md §3).
//!
//! Charter: [`CapabilitiesExt::grant_capabilities`] /
//! [`CapabilitiesExt::revoke_capabilities`] (the marked block in the
//! system prompt, [`CAP_BEGIN`] … [`CAP_END`]) and the extraction of
//! fenced JSON blocks from observed assistant messages into typed signals
//! (`StructuredOutput`, `CapabilityViolation`, `EmissionRejected`).
//! Observation only: it never executes anything and must not know tools
//! or models.
//!
//! A [`Grant`] is an ordered set of uniquely named fields, each with a
//! JSON schema ([`FieldSpec`]); build it by hand, or from any type that
//! derives `schemars::JsonSchema` ([`Grant::from_type`], [`FieldSpec::of`]).
//!
//! For the verbs: nothing to call. A grant installs a message callback, so
//! every assistant response added to the branch is scanned right after its
//! `MessageAdded` signal. [`observe_assistant_message`] is the same step
//! as a pure function, for tests and custom paths.

// Grants are read from model output: nothing outside tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod emission;
mod error;
mod ext;
mod extract;
mod grant;
mod render;

pub use branch_core::json_repair::parse_lenient;
pub use emission::{Extraction, emission_signals, extract_emissions, observe_assistant_message};
pub use error::CapabilityError;
pub use ext::{CAPABILITY_CALLBACK, CapabilitiesExt};
pub use extract::{FencedBlocks, MAX_INPUT, fenced_json_blocks, json_blocks};
pub use grant::{FieldSpec, Grant, GrantBuilder};
pub use render::{
    CAP_BEGIN, CAP_END, capabilities_schema, render_capabilities_prompt, strip_capability_block,
    with_capability_block,
};

pub use branch_core::{CapabilityViolation, EmissionRejected};
