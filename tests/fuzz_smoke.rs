//! The fuzz targets' smoke run on the stable toolchain: every seed in
//! `fuzz/seeds/TARGET/`, then deterministic mutations of them (byte
//! flips, insertions, deletions, truncations, splices), through the same
//! property checks the cargo-fuzz targets run (`fuzz/checks.rs`). The
//! long runs (a million executions each) are nightly-only; see
//! `fuzz/README.md`. `LIONAGI_FUZZ_SMOKE_ITERS` sets the mutations per
//! target (default 2000).

#[path = "../fuzz/checks.rs"]
mod checks;

use std::path::PathBuf;

/// A small deterministic generator (xorshift64*), so a failure
/// reproduces from the printed round.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % u64::try_from(n.max(1)).unwrap_or(1)).unwrap_or(0)
    }
}

/// Bytes that matter to JSON and to the grammar's split.
const INTERESTING: &[u8] = b"{}[]\",:\\0123456789-+.eEtrufalsn \n\x00\xff";

fn mutate(rng: &mut Rng, seed: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..=rng.below(4) {
        let at = rng.below(v.len() + 1);
        match rng.below(6) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 => {
                let b = INTERESTING[rng.below(INTERESTING.len())];
                v.insert(at, b);
            }
            2 if !v.is_empty() => {
                let end = (at + 1 + rng.below(16)).min(v.len());
                v.drain(at.min(end)..end);
            }
            3 => v.truncate(at),
            4 if !other.is_empty() => {
                let from = rng.below(other.len());
                let len = rng.below(other.len() - from + 1);
                v.splice(at..at, other[from..from + len].iter().copied());
            }
            _ => {
                if !v.is_empty() {
                    let i = rng.below(v.len());
                    v[i] = INTERESTING[rng.below(INTERESTING.len())];
                }
            }
        }
    }
    v
}

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    let out: Vec<Vec<u8>> = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert!(!out.is_empty(), "no seeds in {}", dir.display());
    out
}

fn iterations() -> usize {
    std::env::var("LIONAGI_FUZZ_SMOKE_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

fn smoke(target: &str, check: fn(&[u8])) {
    let seeds = seeds(target);
    for s in &seeds {
        check(s);
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ target.len() as u64);
    for round in 0..iterations() {
        let seed = &seeds[rng.below(seeds.len())];
        let other = &seeds[rng.below(seeds.len())];
        let input = mutate(&mut rng, seed, other);
        let caught = std::panic::catch_unwind(|| check(&input));
        assert!(
            caught.is_ok(),
            "{target} round {round} failed on {:?}",
            String::from_utf8_lossy(&input)
        );
    }
}

#[test]
fn branch_document() {
    smoke("branch_document", checks::branch_document);
}

#[test]
fn branch_request() {
    smoke("branch_request", checks::branch_request);
}

#[test]
fn extract() {
    smoke("extract", checks::extract);
}

#[test]
fn store_roundtrip() {
    struct RemoveStore;
    impl Drop for RemoveStore {
        fn drop(&mut self) {
            checks::remove_sqlite_store();
        }
    }
    let _remove = RemoveStore;
    smoke("store_roundtrip", checks::store_roundtrip);
}

#[test]
fn pending_approval() {
    smoke("pending_approval", checks::pending_approval);
}

#[test]
fn cli_stream() {
    smoke("cli_stream", checks::cli_stream);
}

#[test]
fn mcp_tool() {
    smoke("mcp_tool", checks::mcp_tool);
}

#[test]
fn mcp_elicitation() {
    smoke("mcp_elicitation", checks::mcp_elicitation);
}

#[test]
fn json_repair() {
    smoke("json_repair", checks::json_repair);
}

#[test]
fn tool_arguments() {
    smoke("tool_arguments", checks::tool_arguments);
}

#[test]
fn json_grammar() {
    smoke("json_grammar", checks::json_grammar);
}

#[test]
fn sse_frame() {
    smoke("sse_frame", checks::sse_frame);
}

#[test]
fn provider_reply() {
    smoke("provider_reply", checks::provider_reply);
}

#[test]
fn provider_stream() {
    smoke("provider_stream", checks::provider_stream);
}

#[test]
fn address_guard() {
    smoke("address_guard", checks::address_guard);
}

#[test]
fn gguf_header() {
    smoke("gguf_header", checks::gguf_header);
}

/// Only with the embedded model's feature, which CI's release run of the
/// embedded model's tests turns on.
#[cfg(feature = "embedded")]
#[test]
fn gguf_tokenizer() {
    smoke("gguf_tokenizer", checks::gguf_tokenizer);
}

#[test]
fn uuid_text() {
    smoke("uuid_text", checks::uuid_text);
}

#[test]
fn retry_after() {
    smoke("retry_after", checks::retry_after);
}

#[test]
fn structured_reply() {
    smoke("structured_reply", checks::structured_reply);
}
