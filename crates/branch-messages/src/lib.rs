//! Message rendering and provider-request compilation.
//!
//! Charter: this crate turns a branch's conversation (the message model that
//! lives in `branch-core`) into what a provider sees: the rendering of an
//! Instruction into prompt text, the folding of the system message and
//! context-provider blocks into guidance, and the compilation of history into
//! the provider's role/content list. It knows messages and requests; it must
//! not know HTTP, tools' implementations or the verbs' algorithms.
//!
//! The code arrives with the operations issue; until then this crate holds
//! only its charter.
