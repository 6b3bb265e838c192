//! The lionagi `Branch` aggregate.
pub mod model;
