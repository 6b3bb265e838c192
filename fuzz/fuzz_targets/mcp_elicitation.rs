//! Fuzzes a hostile MCP server's question to our person (its elicitation
//! form, read by `branch_mcp::Form::from_schema`): the form stays within
//! the caps, its defaults fit their fields, and an answer it takes holds
//! only its fields, each of its kind.

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::mcp_elicitation(data));
