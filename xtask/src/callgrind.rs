//! `cargo xtask bench turns|model --callgrind`: client instructions per
//! request, ours and raw reqwest, each side of each workload run alone
//! under callgrind, minus a run of the setup only (`--side none`), so the
//! figure counts the turns and nothing of startup. The server (nginx or
//! our responder) is a child process that callgrind does not trace.
//!
//! The profiles stay in `target/callgrind/` for
//! `callgrind_annotate --inclusive=yes FILE`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Variables set for every run (the responder to start when there is no
/// nginx).
type Env = [(OsString, OsString)];

/// Which sides and workloads each benchmark offers to callgrind.
fn plan(name: &str) -> Option<(&'static [&'static str], &'static [&'static str])> {
    match name {
        "turns" => Some((&["ours", "raw"], &["c64", "all"])),
        "model" => Some((&["imodel", "raw"], &[""])),
        _ => None,
    }
}

pub fn callgrind(name: &str, binary: &Path, args: &[String], env: &Env) -> Result<(), String> {
    let (sides, workloads) =
        plan(name).ok_or_else(|| format!("`{name}` has no --callgrind mode (turns, model)"))?;
    let out_dir = target_dir().join("callgrind");
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    println!("| benchmark | metric | ours | baseline (same run) | ratio |");
    println!("|---|---|---|---|---|");
    for workload in workloads.iter().copied() {
        let none = run_one(binary, args, env, "none", workload, &out_dir)?.0;
        let mut per = Vec::new();
        for side in sides {
            let (ir, requests) = run_one(binary, args, env, side, workload, &out_dir)?;
            if requests == 0 {
                return Err(format!("{side} {workload}: no requests reported"));
            }
            per.push(ir.saturating_sub(none) as f64 / requests as f64);
        }
        let metric = if workload.is_empty() {
            "instructions_per_call".to_owned()
        } else {
            format!("{workload}_instructions_per_turn")
        };
        println!(
            "{{\"bench\": \"{name}\", \"metric\": \"{metric}\", \"ours\": {:.0}, \"baseline\": {:.0}, \"unit\": \"instr\", \"ratio\": {:.3}}}",
            per[0],
            per[1],
            per[0] / per[1]
        );
        println!(
            "| {name} | {metric} (callgrind, startup subtracted) | {:.0} | {:.0} | {:.2}× |",
            per[0],
            per[1],
            per[0] / per[1]
        );
    }
    eprintln!(
        "xtask: profiles in {} (callgrind_annotate --inclusive=yes FILE)",
        out_dir.display()
    );
    Ok(())
}

/// Runs one side under callgrind; returns (total instructions, requests).
fn run_one(
    binary: &Path,
    args: &[String],
    env: &Env,
    side: &str,
    workload: &str,
    out_dir: &Path,
) -> Result<(u64, u64), String> {
    let file = out_dir.join(format!(
        "{}.{side}.{}.out",
        binary
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("bench"),
        if workload.is_empty() { "all" } else { workload }
    ));
    let mut cmd = Command::new("valgrind");
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    cmd.arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", file.display()))
        .arg(binary)
        .args(args)
        .args(["--side", side]);
    if !workload.is_empty() {
        cmd.args(["--workload", workload]);
    }
    eprintln!("xtask: running {cmd:?}");
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run valgrind (apt-get install -y valgrind): {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let requests = text
        .lines()
        .find_map(|l| crate::json_field(l, "requests"))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    let profile = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let total = profile
        .lines()
        .find_map(|l| {
            l.strip_prefix("totals:")
                .or_else(|| l.strip_prefix("summary:"))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("no totals in {}", file.display()))?;
    Ok((total, requests))
}

/// The cargo target directory the release binaries are built in.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"))
}
