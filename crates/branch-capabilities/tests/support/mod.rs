//! Helpers of the tests that drive the verbs: fixture comparison with an id
//! mapping, and the loopback mock (both copied from branch-operations'
//! conformance helpers).

#![allow(dead_code)]

#[path = "../../../../tests/support/mod.rs"]
pub mod compare;
#[path = "../../../branch-operations/tests/common/mod.rs"]
pub mod verbs;
