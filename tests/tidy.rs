//! Checks of the repository's own conventions.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            if !p.ends_with("target") && !p.ends_with("fixtures") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn workspace_crates() -> Vec<String> {
    let toml = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    toml.lines()
        .filter_map(|l| l.trim().strip_prefix("\"crates/"))
        .map(|l| l.trim_end_matches("\",").trim_end_matches('"').to_owned())
        .collect()
}

#[test]
fn every_crate_states_its_charter() {
    for krate in workspace_crates() {
        let lib = root().join("crates").join(&krate).join("src/lib.rs");
        let text = std::fs::read_to_string(&lib).unwrap();
        assert!(
            text.starts_with("//!"),
            "{krate}: lib.rs must open with its charter"
        );
        assert!(
            text.contains("Charter") || krate == "lionagi",
            "{krate}: the crate doc must say what the crate owns and must not know"
        );
    }
}

/// Every crate reads something from outside (replies, rows, files,
/// stdin, model output), and an `unwrap` on it is a panic a hostile input
/// can cause: each crate root, the CLI's included, refuses them outside
/// tests, so that an exception is an `allow` with its reason beside it.
#[test]
fn every_crate_root_denies_unwrap_outside_tests() {
    const DENY: &str = "#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]";
    let mut roots: Vec<PathBuf> = workspace_crates()
        .iter()
        .map(|k| root().join("crates").join(k).join("src/lib.rs"))
        .collect();
    roots.push(root().join("crates/lionagi/src/main.rs"));
    for f in roots {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(
            text.contains(DENY)
                || text.contains("#![deny(clippy::unwrap_used, clippy::expect_used)]"),
            "{}: add `{DENY}`",
            f.display()
        );
    }
}

#[test]
fn the_code_map_names_every_crate() {
    let arch = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    for krate in workspace_crates() {
        assert!(
            arch.contains(&format!("### `{krate}`")),
            "docs/architecture.md lacks {krate}"
        );
    }
}

#[test]
fn no_placeholders_and_no_unsafe() {
    let mut files = Vec::new();
    for d in ["crates", "xtask", "tests"] {
        rust_files(&root().join(d), &mut files);
    }
    let allowed_unsafe = root().join("crates/lionagi/examples/bench_serialize.rs");
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        if f.ends_with("tidy.rs") {
            continue;
        }
        // Tests must run on a clone that has nothing beside it.
        assert!(
            !text.contains("shared/fixtures"),
            "{}: use the vendored fixtures",
            f.display()
        );
        for bad in ["todo!(", "unimplemented!(", "dbg!("] {
            assert!(!text.contains(bad), "{}: contains {bad}", f.display());
        }
        if f != allowed_unsafe {
            assert!(
                !text.contains("unsafe "),
                "{}: unsafe outside the benchmark allocator",
                f.display()
            );
        }
    }
}

#[test]
fn crates_take_versions_from_the_workspace() {
    for krate in workspace_crates()
        .into_iter()
        .chain(["../xtask".to_owned()])
    {
        let toml =
            std::fs::read_to_string(root().join("crates").join(&krate).join("Cargo.toml")).unwrap();
        let mut section = String::new();
        for line in toml.lines() {
            let l = line.trim();
            if l.starts_with('[') {
                section = l.to_owned();
                continue;
            }
            if section.ends_with("dependencies]") && !l.is_empty() && !l.starts_with('#') {
                assert!(
                    l.contains("workspace = true"),
                    "{krate}: `{l}` must use a workspace version"
                );
            }
        }
    }
}

#[test]
fn compat_references_exist() {
    let compat = std::fs::read_to_string(root().join("docs/compat.md")).unwrap();
    let mut files = Vec::new();
    rust_files(&root().join("tests"), &mut files);
    rust_files(&root().join("crates"), &mut files);
    for f in files.into_iter().filter(|f| !f.ends_with("tidy.rs")) {
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, _) in text.match_indices("compat.md §") {
            let n: String = text[i + "compat.md §".len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            assert!(
                compat.contains(&format!("## {n}. ")),
                "{}: compat.md §{n} does not exist",
                f.display()
            );
        }
    }
}

/// A document a comment points to exists: a path from the repository's
/// root, or a bare name of one of its documents, of the reference's
/// (../shared/reference, not in this repository) or a fixture's.
#[test]
fn documents_named_in_code_exist() {
    const ELSEWHERE: [&str; 7] = [
        "ADR-0016.md",
        "branch.md",
        "operations.md",
        "providers.md",
        "extensions.md",
        "serialization.md",
        "scenario.md",
    ];
    let root = root();
    let mut files = Vec::new();
    for dir in ["tests", "crates", "xtask", "fuzz"] {
        rust_files(&root.join(dir), &mut files);
    }
    for f in files.into_iter().filter(|f| !f.ends_with("tidy.rs")) {
        let text = std::fs::read_to_string(&f).unwrap();
        for line in text.lines() {
            let words = line.split(|c: char| !(c.is_ascii_alphanumeric() || "_./-".contains(c)));
            for name in words.filter(|w| w.ends_with(".md")) {
                let ok = if name.contains('/') {
                    // Another project's document, named as theirs.
                    root.join(name).exists() || line.contains("ggml's")
                } else {
                    ELSEWHERE.contains(&name)
                        || root.join(name).exists()
                        || root.join("docs").join(name).exists()
                };
                assert!(ok, "{}: `{name}` does not exist: {line}", f.display());
            }
        }
    }
}

#[test]
fn readme_opens_with_the_two_commands() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let block: Vec<&str> = readme
        .split("```")
        .nth(1)
        .unwrap()
        .lines()
        .skip(1)
        .take(2)
        .collect();
    assert!(block[0].starts_with("cargo xtask demo"), "{block:?}");
    // The demo task builds the embedded model's example as the test command
    // builds the workspace, so that the two share one build.
    let xtask = std::fs::read_to_string(root().join("xtask/src/main.rs")).unwrap();
    for needle in [
        "Some(\"demo\")",
        "build_example(\"demo\"",
        "const WHOLE_WORKSPACE: [&str; 2] = [\"--workspace\", \"--all-features\"];",
    ] {
        assert!(xtask.contains(needle), "xtask demo lacks {needle}");
    }
    let build_example = xtask.split("pub fn build_example").nth(1).unwrap();
    let build_example = build_example.split("\n}\n").next().unwrap();
    assert!(build_example.contains(".args(WHOLE_WORKSPACE)"));
    assert!(root().join("crates/lionagi/examples/demo.rs").is_file());
    let test_command = block[1].split('#').next().unwrap().trim();
    assert_eq!(test_command, "cargo test --workspace --all-features");
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(
        ci.contains(&format!("{test_command} --locked")),
        ".ci/run must run the README's test command"
    );
}

/// Workspace crates a crate depends on, dev-dependencies included.
fn workspace_deps(krate: &str, all: &[String]) -> Vec<String> {
    let toml =
        std::fs::read_to_string(root().join("crates").join(krate).join("Cargo.toml")).unwrap();
    let mut section = String::new();
    let mut out = Vec::new();
    for line in toml.lines() {
        let l = line.trim();
        if l.starts_with('[') {
            section = l.to_owned();
            continue;
        }
        if section.ends_with("dependencies]") {
            if let Some(name) = l.split(['.', ' ', '=']).next() {
                if all.iter().any(|c| c == name) && name != krate {
                    out.push(name.to_owned());
                }
            }
        }
    }
    out
}

#[test]
fn arrows_point_inward_without_cycles() {
    let all = workspace_crates();
    assert!(
        workspace_deps("branch-core", &all).is_empty(),
        "branch-core depends on no other workspace crate"
    );
    for krate in all.iter().filter(|k| *k != "branch-core") {
        assert!(
            workspace_deps(krate, &all).contains(&"branch-core".to_owned()),
            "{krate} must depend on branch-core"
        );
    }
    // branch-mcp composes the tool, model (client and guard) and provider
    // crates, and nothing above them: not the verbs, not storage.
    let allowed = [
        "branch-core",
        "branch-actions",
        "branch-models",
        "branch-providers",
    ];
    for d in workspace_deps("branch-mcp", &all) {
        assert!(
            allowed.contains(&d.as_str()),
            "branch-mcp must not depend on {d}"
        );
    }
    for krate in all.iter().filter(|k| *k != "lionagi") {
        assert!(
            !workspace_deps(krate, &all).contains(&"branch-mcp".to_owned()),
            "only the umbrella depends on branch-mcp, not {krate}"
        );
    }
    // Depth-first search for a cycle, dev-dependencies included.
    fn visit(k: &str, all: &[String], stack: &mut Vec<String>, done: &mut Vec<String>) {
        if done.iter().any(|d| d == k) {
            return;
        }
        assert!(
            !stack.iter().any(|s| s == k),
            "dependency cycle: {} -> {k}",
            stack.join(" -> ")
        );
        stack.push(k.to_owned());
        for d in workspace_deps(k, all) {
            visit(&d, all, stack, done);
        }
        stack.pop();
        done.push(k.to_owned());
    }
    let mut done = Vec::new();
    for k in &all {
        visit(k, &all, &mut Vec::new(), &mut done);
    }
}

/// The library crates emit `tracing` spans only; an OpenTelemetry exporter
/// (and anything else of `opentelemetry*`) belongs to the umbrella crate's
/// `otel` feature.
#[test]
fn only_the_umbrella_knows_opentelemetry() {
    for krate in workspace_crates().into_iter().filter(|k| k != "lionagi") {
        let toml =
            std::fs::read_to_string(root().join("crates").join(&krate).join("Cargo.toml")).unwrap();
        assert!(
            !toml.contains("opentelemetry"),
            "{krate} must not depend on OpenTelemetry (emit tracing spans instead)"
        );
    }
    let umbrella = std::fs::read_to_string(root().join("crates/lionagi/Cargo.toml")).unwrap();
    let mut section = "";
    for line in umbrella.lines() {
        if line.starts_with('[') {
            section = line.trim();
        } else if section == "[dependencies]" && line.contains("opentelemetry") {
            assert!(
                line.contains("optional = true"),
                "not behind `otel`: {line}"
            );
        }
    }
}

/// pulp compiles what `vectorize` runs for the instruction set it checked
/// only when that code is inlined into it; a closure may not be (the
/// embedded model's AVX2 kernel once ran its intrinsics out of line, and
/// decoded at 15 tokens/s instead of 52, because of one). Kernels go to
/// `vectorize` as types whose `call` or `with_simd` is `#[inline(always)]`.
#[test]
fn simd_kernels_are_not_closures() {
    let mut files = Vec::new();
    rust_files(&root().join("crates"), &mut files);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for (at, _) in text.match_indices(".vectorize(") {
            let arg = text[at + ".vectorize(".len()..].trim_start();
            assert!(
                !arg.starts_with('|') && !arg.starts_with("move"),
                "{}: a closure handed to `vectorize`",
                f.display()
            );
        }
    }
}

/// Every cargo-fuzz target runs on stable too: it has seeds, a smoke test
/// replaying them through the same check (`tests/fuzz_smoke.rs`, which CI
/// runs; the long runs are nightly-only), and a row in `fuzz/README.md`
/// recording its last long run.
#[test]
fn every_fuzz_target_has_seeds_a_smoke_test_and_a_recorded_run() {
    let fuzz = root().join("fuzz");
    let manifest = std::fs::read_to_string(fuzz.join("Cargo.toml")).unwrap();
    let smoke = std::fs::read_to_string(root().join("tests/fuzz_smoke.rs")).unwrap();
    let readme = std::fs::read_to_string(fuzz.join("README.md")).unwrap();
    let targets: Vec<&str> = manifest
        .lines()
        .filter_map(|l| l.trim().strip_prefix("name = \""))
        .filter_map(|l| l.strip_suffix('"'))
        .filter(|&name| name != "lionagi-fuzz")
        .collect();
    assert!(targets.len() >= 10, "{targets:?}");
    for t in targets {
        assert!(
            fuzz.join("fuzz_targets").join(format!("{t}.rs")).is_file(),
            "fuzz target {t} has no source"
        );
        let seeds = std::fs::read_dir(fuzz.join("seeds").join(t)).map_or(0, |d| d.count());
        assert!(seeds > 0, "fuzz target {t} has no seeds in fuzz/seeds/{t}");
        assert!(
            smoke.contains(&format!("smoke(\"{t}\", checks::{t})")),
            "fuzz target {t} has no smoke test in tests/fuzz_smoke.rs"
        );
        assert!(
            readme.contains(&format!("| `{t}` |")),
            "fuzz target {t} has no row in fuzz/README.md"
        );
    }
}
