//! Sessions of lionagi branches and durable conversation storage.
//!
//! Charter: `Session`, which includes and removes branches by attaching and
//! detaching coordination references (observer, hooks, owning-session id,
//! the shared operation registry, a default memory store) without ever
//! owning a conversation; and `BranchStore`, durable storage of branches
//! with an embedded SQLite default. It must not know the verbs' algorithms.
//!
//! The code arrives with the sessions issue; until then this crate holds
//! only its charter.
