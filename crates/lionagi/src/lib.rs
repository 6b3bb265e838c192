//! lionagi-rs.
pub use branch_core as core;
