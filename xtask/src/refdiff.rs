//! `cargo xtask refdiff [--random N [--seed S]] [NAME...]`: the
//! differential harness (tests/refdiff/README.md). Runs every scenario of
//! tests/refdiff/scenarios, or with `--random` N scenarios that
//! tests/refdiff/randomized.py makes from the seed, in Python lionagi 0.36.0
//! (a venv created on first use under the target dir) and in lionagi-rs
//! (`crates/lionagi/examples/refdiff`), and prints the comparison; fails
//! when a difference is neither fixed nor documented. The reference's
//! scenarios are dealt out among [`REFERENCE_DRIVERS`] Python processes.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

use crate::{build_example, cargo, run, target_dir, workspace_root};

/// Reference drivers run side by side. The reference's scenarios mostly
/// wait (its repair backoffs: one scenario sleeps 25 s), so they overlap
/// well beyond the cores; each driver pays lionagi's import (a few seconds
/// of CPU). Measured on 2 cores, the 295 scenarios' whole run: one driver
/// 227 s, two 184 s (the reference's part 67 s), four 166 s (50 s).
const REFERENCE_DRIVERS: usize = 4;

/// The reference, pinned: the fixtures and docs/compat.md are about it.
const REFERENCE: &str = "lionagi==0.36.0";

/// The venv with the reference, created once; a marker file says the
/// install finished (an interrupted one is redone).
fn venv(work: &Path) -> Result<PathBuf, String> {
    let venv = work.join("venv");
    let python = venv.join("bin/python");
    let marker = venv.join(format!(".{REFERENCE}"));
    if !marker.exists() {
        run(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
        run(Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            REFERENCE,
        ]))?;
        std::fs::write(&marker, "").map_err(|e| format!("{}: {e}", marker.display()))?;
    }
    Ok(python)
}

/// tiktoken-rs's copy of the `o200k_base` encoding: the reference counts
/// request tokens with it and would download it otherwise. Found through
/// `cargo metadata` (the crate is a dependency of branch-providers).
fn o200k_file() -> Result<PathBuf, String> {
    let out = cargo()
        .args(["metadata", "--format-version", "1", "--locked"])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cargo metadata: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let key = "\"manifest_path\":\"";
    for part in text.split(key).skip(1) {
        let path = part.split('"').next().unwrap_or_default();
        if path.contains("/tiktoken-rs-") {
            let file = Path::new(path).with_file_name("assets/o200k_base.tiktoken");
            if file.exists() {
                return Ok(file);
            }
        }
    }
    Err("cargo metadata lists no tiktoken-rs with assets/o200k_base.tiktoken".into())
}

/// Reads `child`'s stdout until the line `want`, echoing nothing else.
fn wait_for(out: &mut BufReader<ChildStdout>, want: &str, who: &str) -> Result<(), String> {
    let mut line = String::new();
    loop {
        line.clear();
        let n = out
            .read_line(&mut line)
            .map_err(|e| format!("{who}: {e}"))?;
        if n == 0 {
            return Err(format!("{who} ended before saying {want}"));
        }
        if line.trim() == want {
            return Ok(());
        }
        print!("{line}");
    }
}

fn spawn(cmd: &mut Command, who: &str) -> Result<(Child, BufReader<ChildStdout>), String> {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start {who}: {e}"))?;
    let out = child.stdout.take().ok_or(format!("{who}: no stdout"))?;
    Ok((child, BufReader::new(out)))
}

fn send(child: &mut Child, line: &str, who: &str) -> Result<(), String> {
    let stdin = child.stdin.as_mut().ok_or(format!("{who}: no stdin"))?;
    writeln!(stdin, "{line}").map_err(|e| format!("{who}: {e}"))?;
    stdin.flush().map_err(|e| format!("{who}: {e}"))
}

/// A directory per driver (each reference driver's, then ours) holding the
/// scripted agent (`fake_agent.sh`) as `claude`, where the driver writes a
/// scenario's agent runs and the agent records its calls.
fn agent_dirs(work: &Path, suite: &Path, references: usize) -> Result<Vec<PathBuf>, String> {
    let root = work.join("agent");
    let _ = std::fs::remove_dir_all(&root);
    let mut dirs: Vec<PathBuf> = (0..references)
        .map(|i| root.join(format!("reference_{i}")))
        .collect();
    dirs.push(root.join("ours"));
    for dir in &dirs {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let bin = dir.join("claude");
        std::fs::copy(suite.join("fake_agent.sh"), &bin)
            .map_err(|e| format!("{}: {e}", bin.display()))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| format!("{}: {e}", bin.display()))?;
        }
    }
    Ok(dirs)
}

/// The scenarios of `dir` (its `*.json` files), sorted; only those of
/// `only` when it names any, each of which must be there.
fn scenario_names(dir: &Path, only: &[String]) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_some_and(|e| e == "json") {
            if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
                names.push(stem.to_owned());
            }
        }
    }
    names.sort();
    if let Some(missing) = only.iter().find(|o| !names.contains(o)) {
        return Err(format!("no scenario {missing} in {}", dir.display()));
    }
    if !only.is_empty() {
        names.retain(|n| only.contains(n));
    }
    Ok(names)
}

/// `names` dealt out to `drivers` lists in turn, so that neighbours (often
/// alike in cost) go to different drivers.
fn deal(names: &[String], drivers: usize) -> Vec<Vec<String>> {
    let drivers = drivers.max(1);
    let mut hands = vec![Vec::new(); drivers];
    for (i, name) in names.iter().enumerate() {
        hands[i % drivers].push(name.clone());
    }
    hands.retain(|h| !h.is_empty());
    hands
}

/// What to run: the committed scenarios, or random ones.
struct Plan {
    random: Option<(u32, u64)>,
    names: Vec<String>,
}

fn plan(args: &[String]) -> Result<Plan, String> {
    let mut count = None;
    let mut seed = None;
    let mut names = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |what: &str| {
            it.next()
                .ok_or_else(|| format!("{a} needs {what}"))
                .cloned()
        };
        match a.as_str() {
            "--random" => {
                let n = value("a count")?;
                count = Some(
                    n.parse()
                        .map_err(|_| format!("--random {n}: not a count"))?,
                );
            }
            "--seed" => {
                let s = value("a number")?;
                seed = Some(s.parse().map_err(|_| format!("--seed {s}: not a number"))?);
            }
            _ => names.push(a.clone()),
        }
    }
    let random = match (count, seed) {
        (Some(n), seed) => Some((n, seed.unwrap_or_else(clock_seed))),
        (None, Some(_)) => return Err("--seed is given with --random".into()),
        (None, None) => None,
    };
    Ok(Plan { random, names })
}

/// A seed when none is given: the clock's nanoseconds, printed with the
/// report so that the run can be made again.
fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()) ^ d.as_secs())
}

pub fn refdiff(args: &[String]) -> Result<(), String> {
    let Plan { random, names } = plan(args)?;
    let names = &names[..];
    let suite = workspace_root().join("tests/refdiff");
    // A relative CARGO_TARGET_DIR is cargo's from the working directory.
    let target = std::path::absolute(target_dir()).map_err(|e| e.to_string())?;
    let work = target.join("refdiff");
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let python = venv(&work)?;
    let o200k = o200k_file()?;

    let driver = build_example("refdiff", true)?;

    let out = work.join("out");
    let _ = std::fs::remove_dir_all(&out);
    let (py_out, rs_out) = (out.join("reference"), out.join("ours"));
    let scenarios = match random {
        None => suite.join("scenarios"),
        Some((count, seed)) => {
            let dir = work.join("random");
            run(Command::new(&python)
                .arg(suite.join("randomized.py"))
                .args(["--count", &count.to_string(), "--seed", &seed.to_string()])
                .arg("--out")
                .arg(&dir))?;
            println!(
                "refdiff: {count} random scenarios of seed {seed} in {} \
                 (again: cargo xtask refdiff --random {count} --seed {seed})",
                dir.display()
            );
            dir
        }
    };

    let all = scenario_names(&scenarios, names)?;
    if all.is_empty() {
        return Err(format!("no scenarios in {}", scenarios.display()));
    }
    let hands = deal(&all, REFERENCE_DRIVERS);
    let agents = agent_dirs(&work, &suite, hands.len())?;
    let started = std::time::Instant::now();
    let mut references = Vec::new();
    for (i, hand) in hands.iter().enumerate() {
        // Each reference driver works in a scratch dir of its own, so
        // nothing it might write lands in the repository or meets the
        // other's; tiktoken's cache is written on first use, so each has
        // its own.
        let scratch = work.join("scratch").join(i.to_string());
        std::fs::create_dir_all(&scratch).map_err(|e| e.to_string())?;
        let who = format!("the reference driver {}", i + 1);
        let (child, stdout) = spawn(
            Command::new(&python)
                .arg(suite.join("driver.py"))
                .arg(&scenarios)
                .arg(&py_out)
                .args(hand)
                .current_dir(&scratch)
                .env("LOG_AUTO_SAVE_ON_EXIT", "false")
                .env(
                    "TIKTOKEN_CACHE_DIR",
                    work.join("tiktoken").join(i.to_string()),
                )
                .env("REFDIFF_O200K", &o200k)
                .env("REFDIFF_AGENT", &agents[i])
                .env_remove("OPENAI_API_KEY")
                .env_remove("LIONAGI_CHAT_PROVIDER")
                .env_remove("LIONAGI_CHAT_MODEL"),
            &who,
        )?;
        references.push((child, stdout, who));
    }
    for (_, stdout, who) in &mut references {
        wait_for(stdout, "READY", who)?;
    }
    let reference_ran = started.elapsed();

    let ours = agents.last().ok_or("no agent directory for our driver")?;
    let (mut rs, mut rs_stdout) = spawn(
        Command::new(&driver)
            .arg(&scenarios)
            .arg(suite.join("library.json"))
            .arg(&rs_out)
            .arg(&py_out)
            .args(&all)
            .env("LOG_AUTO_SAVE_ON_EXIT", "false")
            .env("REFDIFF_AGENT", ours)
            .env("LIONAGI_CLAUDE_BIN", ours.join("claude"))
            .env_remove("OPENAI_API_KEY"),
        "the lionagi-rs driver",
    )?;
    wait_for(&mut rs_stdout, "READY", "the lionagi-rs driver")?;
    println!(
        "refdiff: the reference ran {} scenarios in {:.1} s ({} drivers), ours in {:.1} s",
        all.len(),
        reference_ran.as_secs_f64(),
        hands.len(),
        (started.elapsed() - reference_ran).as_secs_f64()
    );

    let cross = format!("CROSS {}", rs_out.display());
    for (child, _, who) in &mut references {
        send(child, &cross, who)?;
    }
    for (mut child, mut stdout, who) in references {
        wait_for(&mut stdout, "CROSSED", &who)?;
        drop(child.stdin.take());
        let status = child.wait().map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("{who} failed with {status}"));
        }
    }

    send(&mut rs, "COMPARE", "the lionagi-rs driver")?;
    let mut line = String::new();
    while rs_stdout.read_line(&mut line).map_err(|e| e.to_string())? > 0 {
        print!("{line}");
        line.clear();
    }
    let status = rs.wait().map_err(|e| e.to_string())?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "differences neither fixed nor documented (outputs under {})",
            out.display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn scenarios_are_dealt_out_in_turn() {
        let names: Vec<String> = (0..5).map(|i| i.to_string()).collect();
        assert_eq!(deal(&names, 2), [args(&["0", "2", "4"]), args(&["1", "3"])]);
        assert_eq!(deal(&names[..1], 4), [args(&["0"])]);
        assert_eq!(deal(&names[..2], 0), [args(&["0", "1"])]);
        assert!(deal(&[], 2).is_empty());
    }

    #[test]
    fn the_command_line_names_random_runs_and_scenarios() {
        let p = plan(&args(&["--random", "5", "--seed", "3", "act_single"])).unwrap();
        assert_eq!(p.random, Some((5, 3)));
        assert_eq!(p.names, ["act_single"]);
        let p = plan(&args(&["chat_plain"])).unwrap();
        assert_eq!(p.random, None);
        // Without a seed the clock gives one; the count is kept.
        assert_eq!(
            plan(&args(&["--random", "2"])).unwrap().random.map(|r| r.0),
            Some(2)
        );
        for bad in [
            &["--seed", "3"][..],
            &["--random", "x"],
            &["--random"],
            &["--random", "1", "--seed", "-1"],
        ] {
            assert!(plan(&args(bad)).is_err(), "{bad:?}");
        }
    }
}
