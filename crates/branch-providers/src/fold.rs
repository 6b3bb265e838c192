//! Where the gathered blocks go in a request: the system fold of the
//! first instruction (extensions.md §2.4, operations.md §1.2 step 5).

/// The guidance the **oldest** instruction of a request carries:
/// `system + blocks_text + guidance`, plain concatenation with no
/// separator between the three parts, exactly as the reference folds it.
///
/// * `system` — the system message's rendered text
///   (`SystemContent::rendered`). Pass `None` on a path that sends the
///   system text natively (the reference does so for Anthropic with prompt
///   caching); the fold is then `blocks_text + guidance`.
/// * `blocks_text` — [`crate::ContextPass::blocks_text`] (the admitted
///   blocks joined with `"\n"`), or `""` when no pass ran.
/// * `guidance` — the instruction's guidance text (a non-string guidance
///   rendered and stripped by the caller), or `""` when it has none.
///
/// A branch with **no system message** gets no fold at all: the request
/// builder must not call this, and context blocks are never used (the
/// gather pass reports every provider as skipped in that case).
///
/// The folded text lives only in the outgoing request: the stored
/// instruction is never changed and the blocks are never stored.
pub fn fold_guidance(system: Option<&str>, blocks_text: &str, guidance: &str) -> String {
    let system = system.unwrap_or("");
    let mut out = String::with_capacity(system.len() + blocks_text.len() + guidance.len());
    out.push_str(system);
    out.push_str(blocks_text);
    out.push_str(guidance);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verified_reference_fold() {
        // extensions.md §2.4: system "SYS", guidance "G", two blocks.
        let blocks = ["LOW BLOCK", "HIGH BLOCK"].join("\n");
        assert_eq!(
            fold_guidance(Some("SYS"), &blocks, "G"),
            "SYSLOW BLOCK\nHIGH BLOCKG"
        );
        assert_eq!(fold_guidance(None, &blocks, "G"), "LOW BLOCK\nHIGH BLOCKG");
        assert_eq!(fold_guidance(Some("S"), "", ""), "S");
    }
}
