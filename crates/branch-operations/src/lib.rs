//! The verbs of a lionagi branch.
//!
//! Charter: the algorithms behind `chat`, `communicate`, `parse`, `operate`,
//! `act`, `interpret`, `ReAct`, `ReActStream` and `run`, attached to
//! `branch_core::Branch` through extension traits so the aggregate never
//! knows them. It owns turn atomicity (a turn is recorded whole or not at
//! all), the parse-repair loop and the ReAct loop. It must not know HTTP
//! details (that is `branch-models`) nor storage.
//!
//! The code arrives with the operations issue; until then this crate holds
//! only its charter.
