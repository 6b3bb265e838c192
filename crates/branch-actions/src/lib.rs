//! Tools for lionagi branches.
//!
//! Charter: the concrete tools that plug into `branch-core`'s tool seam: a
//! function tool built from a Rust async function whose argument type derives
//! `Deserialize` and `JsonSchema` (schema generated once and cached, arguments
//! validated before decoding), dynamic tools from a raw JSON schema plus a
//! handler, and invocation with timeouts, concurrency and panic containment.
//! It must not know models, providers or the verbs that decide when to call
//! a tool.
//!
//! The code arrives with the operations issue; until then this crate holds
//! only its charter.
