//! Repository tasks, run as `cargo xtask <task>`.
//!
//! - `cargo xtask ci`: format check, clippy with `-D warnings`, the fuzz
//!   targets' smoke run on stable, every test.
//! - `cargo xtask bench <name> [args]`: runs a benchmark program in release
//!   mode and prints its figures as a table (`serialize`, `model`, `turns`,
//!   `extensions`, `store`, `local`). `turns` and `model` start a fixed-reply
//!   server in another process (nginx, else our `static_responder`);
//!   `--callgrind` counts their client instructions per request instead,
//!   and `--callgrind --cache-sim` their cache misses too.
//! - `cargo xtask fetch-model`: puts the default embedded model into the
//!   model cache and prints its path.
//! - `cargo xtask refdiff [--random N [--seed S]] [NAME...]`: the
//!   differential harness against Python lionagi 0.36.0
//!   (tests/refdiff/README.md), on the committed scenarios or on N random
//!   ones.
//! - `cargo xtask demo [STORE.db]`: the README's first command. Fetches the
//!   embedded model when absent, builds the example with the README's test
//!   command's build (see [`build_example`]) and runs a short conversation
//!   with it (`crates/lionagi/examples/demo.rs`).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

mod callgrind;
mod fetch_model;
mod refdiff;

/// Benchmarks: name → (package, example program, features).
const BENCHES: &[(&str, &str, &str, &str)] = &[
    ("serialize", "lionagi", "bench_serialize", ""),
    ("model", "branch-models", "bench_model", "test-support"),
    ("turns", "branch-operations", "bench_turns", ""),
    ("extensions", "branch-capabilities", "bench_extensions", ""),
    ("store", "branch-session", "bench_store", "postgres"),
    ("local", "branch-models", "bench_local", "embedded"),
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("bench") => bench(&args[1..]),
        Some("fetch-model") => fetch_model::fetch_model(),
        Some("demo") => demo(&args[1..]),
        Some("refdiff") => refdiff::refdiff(&args[1..]),
        _ => Err(format!(
            "usage: cargo xtask ci | cargo xtask demo [STORE.db] | cargo xtask fetch-model | \
             cargo xtask refdiff [--random N [--seed S]] [NAME...] | \
             cargo xtask bench <{}> [args]",
            BENCHES.iter().map(|b| b.0).collect::<Vec<_>>().join("|")
        )),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    // `cargo xtask` runs us with our own package's variables set; build
    // scripts that watch them (ring's watches `CARGO_PKG_NAME` and
    // `CARGO_MANIFEST_DIR`) would see them differ from a plain `cargo build`
    // and rebuild, so a build started from here would not reuse one made
    // by hand or by CI.
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(is_package_variable) {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// A variable `cargo run` sets for the package it runs.
fn is_package_variable(key: &str) -> bool {
    key.starts_with("CARGO_PKG_")
        || key.starts_with("CARGO_MANIFEST_")
        || matches!(
            key,
            "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE" | "OUT_DIR"
        )
}

fn run(cmd: &mut Command) -> Result<(), String> {
    eprintln!("xtask: running {cmd:?}");
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed with {status}"))
    }
}

/// How every build here selects: the README's test command's selection
/// (`cargo test --workspace --all-features`), as in .ci/run. One package
/// selection and feature set resolve every dependency alike, so these builds
/// and the test command's share their units.
const WHOLE_WORKSPACE: [&str; 2] = ["--workspace", "--all-features"];

fn ci() -> Result<(), String> {
    run(cargo().args(["fmt", "--all", "--check"]))?;
    run(cargo().arg("clippy").args(WHOLE_WORKSPACE).args([
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    run(cargo()
        .arg("doc")
        .args(WHOLE_WORKSPACE)
        .arg("--no-deps")
        .env("RUSTDOCFLAGS", "-D warnings"))?;
    // The fuzz targets' smoke run on stable: seeds and 20,000 mutations per
    // target through the same property checks (tests/fuzz_smoke.rs); the
    // million-execution runs are nightly-only (fuzz/README.md).
    run(cargo()
        .arg("test")
        .args(WHOLE_WORKSPACE)
        .args(["--test", "fuzz_smoke"])
        .env("LIONAGI_FUZZ_SMOKE_ITERS", "20000"))?;
    run(cargo()
        .arg("test")
        .args(WHOLE_WORKSPACE)
        .arg("--no-fail-fast"))
}

fn demo(args: &[String]) -> Result<(), String> {
    fetch_model::fetch_model()?;
    // Not quiet: a first build takes minutes, and its progress is what a
    // newcomer watches meanwhile.
    let demo = build_example("demo", false)?;
    run(Command::new(demo).args(args))
}

/// Builds one of the workspace's examples as the README's test command
/// builds it ([`WHOLE_WORKSPACE`]), and returns its path. Either build
/// reuses all of the other's units; a `--package` build would resolve
/// other features and compile most of the dependency graph a second time.
/// The dev profile keeps the embedded model's hot crates at opt-level 3
/// (Cargo.toml), so the demo takes seconds.
pub fn build_example(example: &str, quiet: bool) -> Result<PathBuf, String> {
    let mut build = cargo();
    build
        .arg("build")
        .args(WHOLE_WORKSPACE)
        .args(["--example", example]);
    if quiet {
        build.arg("--quiet");
    }
    if std::env::var_os("CI").is_some() {
        build.arg("--locked");
    }
    run(&mut build)?;
    let binary = target_dir().join("debug/examples").join(example);
    // Absolute: the programs may work in a directory of their own.
    std::path::absolute(&binary).map_err(|e| format!("{}: {e}", binary.display()))
}

/// Cargo's target dir, as the builds started here see it:
/// `CARGO_TARGET_DIR`, else the workspace root's `target`. The root is
/// xtask's parent, not the working directory: `cargo xtask` may be started
/// from any directory of the workspace, and cargo still builds into the
/// root's. (A target dir set in a cargo config file is not looked up.)
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// The workspace's root directory: xtask's parent, whatever directory
/// `cargo xtask` was started from.
pub fn workspace_root() -> PathBuf {
    let xtask = Path::new(env!("CARGO_MANIFEST_DIR"));
    xtask.parent().unwrap_or(xtask).to_path_buf()
}

fn bench(args: &[String]) -> Result<(), String> {
    let name = args.first().ok_or("bench needs a name")?;
    let (_, package, example, features) = BENCHES
        .iter()
        .find(|b| b.0 == name)
        .ok_or_else(|| format!("unknown benchmark `{name}`"))?;
    let callgrind = args.iter().any(|a| a == "--callgrind");
    let cache_sim = args.iter().any(|a| a == "--cache-sim");
    if cache_sim && !callgrind {
        return Err("--cache-sim goes with --callgrind".into());
    }
    let rest: Vec<String> = args[1..]
        .iter()
        .filter(|a| *a != "--callgrind" && *a != "--cache-sim")
        .cloned()
        .collect();
    let mut build = cargo();
    build.args(["build", "--release", "--quiet", "--package", package]);
    build.args(["--example", example]);
    if !features.is_empty() {
        build.args(["--features", features]);
    }
    run(&mut build)?;
    let binary = target_dir().join("release").join("examples").join(example);
    let mut cmd = std::process::Command::new(&binary);
    if matches!(name.as_str(), "turns" | "model") && find_nginx().is_none() {
        // No nginx: our own static responder serves in its place. The
        // timed rows of `docs/benchmarks.md` were taken against nginx, and
        // the same code reads higher against the responder: say so.
        eprintln!(
            "xtask: nginx not found; serving with our static responder (timed turns read \
             higher against it; `apt-get install -y nginx` for the figures of docs/benchmarks.md)"
        );
        run(cargo()
            .args([
                "build",
                "--release",
                "--quiet",
                "--package",
                "branch-models",
            ])
            .args(["--example", "static_responder"]))?;
        // Absolute: the benchmarks work in a scratch directory of their own.
        let responder = target_dir().join("release/examples/static_responder");
        let responder =
            std::path::absolute(&responder).map_err(|e| format!("{}: {e}", responder.display()))?;
        cmd.env("LIONAGI_BENCH_RESPONDER", responder);
    }
    if callgrind {
        // The runs under callgrind get the same server as a timed run.
        let env = cmd
            .get_envs()
            .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
            .collect::<Vec<_>>();
        return callgrind::callgrind(name, &binary, &rest, &env, cache_sim);
    }
    cmd.args(&rest);
    // The program's notes (which server, the load average) go straight to
    // the terminal; its figures are read from stdout.
    cmd.stderr(std::process::Stdio::inherit());
    eprintln!("xtask: running {cmd:?}");
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("benchmark `{name}` failed ({})", out.status));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    println!("| benchmark | metric | ours | baseline (same run) | ratio |");
    println!("|---|---|---|---|---|");
    for line in text.lines().filter(|l| l.trim_start().starts_with('{')) {
        // Programs print either {metric, ours, baseline, unit, ratio} or,
        // for many cases of one kind, {case, median_ms}.
        let field = |k: &str| {
            json_field(line, k).or_else(|| match k {
                "metric" => json_field(line, "case"),
                "ours" => json_field(line, "median_ms"),
                "unit" => json_field(line, "median_ms").map(|_| "ms".to_owned()),
                _ => None,
            })
        };
        let unit = field("unit").unwrap_or_default();
        let fmt = |v: Option<String>| match v.as_deref() {
            None | Some("null") => "-".to_owned(),
            Some(n) => format!("{} {unit}", round(n)),
        };
        let ratio = match field("ratio").as_deref() {
            None | Some("null") => "-".to_owned(),
            Some(r) => format!("{}×", round(r)),
        };
        println!(
            "| {} | {} | {} | {} | {} |",
            field("bench").unwrap_or_default(),
            field("metric").unwrap_or_default(),
            fmt(field("ours")),
            fmt(field("baseline")),
            ratio
        );
    }
    Ok(())
}

/// nginx on PATH or in /usr/sbin (Debian's package puts it there).
fn find_nginx() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join("nginx"))
        .find(|p| p.is_file())
        .filter(|_| std::env::var_os("LIONAGI_BENCH_NO_NGINX").is_none())
}

fn round(n: &str) -> String {
    match n.parse::<f64>() {
        Ok(f) if f.abs() >= 100.0 => format!("{f:.0}"),
        Ok(f) if f.abs() >= 1.0 => format!("{f:.2}"),
        Ok(f) => format!("{f:.3}"),
        Err(_) => n.to_owned(),
    }
}

/// Reads one scalar field of a flat JSON object line. The benchmark
/// programs print flat objects; a full JSON parser is not worth a
/// dependency here.
fn json_field(line: &str, key: &str) -> Option<String> {
    let pat = format!("\"{key}\":");
    let start = line.find(&pat)? + pat.len();
    let rest = line[start..].trim_start();
    if let Some(s) = rest.strip_prefix('"') {
        return Some(s[..s.find('"')?].to_owned());
    }
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Under `cargo test`, as under `cargo xtask`, cargo has set this
    /// package's variables; the cargo we start must not see them.
    #[test]
    fn cargo_started_from_here_does_not_inherit_package_variables() {
        assert!(std::env::var_os("CARGO_PKG_NAME").is_some(), "run by cargo");
        let cmd = cargo();
        let removed: Vec<String> = cmd
            .get_envs()
            .filter(|(_, v)| v.is_none())
            .filter_map(|(k, _)| k.to_str().map(str::to_owned))
            .collect();
        for key in ["CARGO_PKG_NAME", "CARGO_PKG_VERSION", "CARGO_MANIFEST_DIR"] {
            assert!(removed.iter().any(|k| k == key), "{key} in {removed:?}");
        }
        assert!(
            !removed
                .iter()
                .any(|k| k == "CARGO_TARGET_DIR" || k == "PATH")
        );
        assert!(is_package_variable("CARGO_PKG_VERSION_MAJOR"));
        assert!(!is_package_variable("CARGO_HOME"));
    }
}
