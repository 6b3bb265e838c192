//! `cargo xtask bench turns|model --callgrind`: client instructions per
//! request, ours and raw reqwest, each side of each workload run alone
//! under callgrind, minus a run of the setup only (`--side none`), so the
//! figure counts the turns and nothing of startup. The server (nginx or
//! our responder) is a child process that callgrind does not trace.
//!
//! With `--cache-sim`, callgrind also simulates the caches and the table
//! gains a turn's instruction-fetch and data misses in the first level and
//! its data misses in a last level the size of one core's L2: the timed rows
//! pay for a large code and data footprint that the instruction count does
//! not show, and these counts show it without timing noise.
//!
//! The profiles stay in `target/callgrind/` for
//! `callgrind_annotate --inclusive=yes FILE`.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::Path;
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

/// The counts reported per request: (metric name, callgrind events summed,
/// unit). Only `Ir` without the cache simulation.
const COUNTS: &[(&str, &[&str], &str)] = &[
    ("instructions", &["Ir"], "instr"),
    ("l1_instruction_misses", &["I1mr"], "misses"),
    ("l1_data_misses", &["D1mr", "D1mw"], "misses"),
    ("l2_data_misses", &["DLmr", "DLmw"], "misses"),
];

pub fn callgrind(
    name: &str,
    binary: &Path,
    args: &[String],
    env: &Env,
    cache_sim: bool,
) -> Result<(), String> {
    let (sides, workloads) =
        plan(name).ok_or_else(|| format!("`{name}` has no --callgrind mode (turns, model)"))?;
    let out_dir = crate::target_dir().join("callgrind");
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let cache = cache_sim.then(|| {
        let (l2, whose) = match CacheLevel::l2_of_this_machine() {
            Some(l2) => (l2, "one core's L2"),
            None => (CacheLevel::FALLBACK_L2, "this machine's L2 unread"),
        };
        eprintln!(
            "xtask: simulating a {} KiB, {}-way last level ({whose})",
            l2.size / 1024,
            l2.ways
        );
        l2
    });
    let counts = if cache_sim { COUNTS } else { &COUNTS[..1] };
    println!("| benchmark | metric | ours | baseline (same run) | ratio |");
    println!("|---|---|---|---|---|");
    for workload in workloads.iter().copied() {
        let run = |side| run_one(binary, args, env, side, workload, &out_dir, cache);
        let none = run("none")?.0;
        let mut per = Vec::new();
        for side in sides {
            let (totals, requests) = run(side)?;
            if requests == 0 {
                return Err(format!("{side} {workload}: no requests reported"));
            }
            per.push((totals, requests));
        }
        for (count, events, unit) in counts {
            let per_request = |(totals, requests): &(Totals, u64)| {
                let total = |t: &Totals| {
                    events
                        .iter()
                        .map(|e| t.get(*e).copied().unwrap_or(0))
                        .sum::<u64>()
                };
                total(totals).saturating_sub(total(&none)) as f64 / *requests as f64
            };
            let (ours, raw) = (per_request(&per[0]), per_request(&per[1]));
            // No misses on raw's side would make the ratio infinite.
            let ratio = (raw > 0.0).then(|| ours / raw);
            let json_ratio = ratio.map_or("null".to_owned(), |r| format!("{r:.3}"));
            let table_ratio = ratio.map_or("-".to_owned(), |r| format!("{r:.2}×"));
            let metric = if workload.is_empty() {
                format!("{count}_per_call")
            } else {
                format!("{workload}_{count}_per_turn")
            };
            println!(
                "{{\"bench\": \"{name}\", \"metric\": \"{metric}\", \"ours\": {ours:.0}, \"baseline\": {raw:.0}, \"unit\": \"{unit}\", \"ratio\": {json_ratio}}}"
            );
            println!(
                "| {name} | {metric} (callgrind, startup subtracted) | {ours:.0} | {raw:.0} | {table_ratio} |"
            );
        }
    }
    eprintln!(
        "xtask: profiles in {} (callgrind_annotate --inclusive=yes FILE)",
        out_dir.display()
    );
    Ok(())
}

/// A profile's totals by callgrind event name (`Ir`, `D1mr`, ...).
type Totals = HashMap<String, u64>;

/// Runs one side under callgrind; returns (its totals, requests).
fn run_one(
    binary: &Path,
    args: &[String],
    env: &Env,
    side: &str,
    workload: &str,
    out_dir: &Path,
    cache: Option<CacheLevel>,
) -> Result<(Totals, u64), String> {
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
        .arg(format!("--callgrind-out-file={}", file.display()));
    if let Some(l2) = cache {
        cmd.arg("--cache-sim=yes")
            .arg(format!("--LL={},{},{}", l2.size, l2.ways, l2.line));
    }
    cmd.arg(binary).args(args).args(["--side", side]);
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
    let totals = totals(&profile).ok_or_else(|| format!("no totals in {}", file.display()))?;
    Ok((totals, requests))
}

/// The `events:` line's names paired with the `totals:` (or `summary:`)
/// line's counts.
fn totals(profile: &str) -> Option<Totals> {
    let line = |prefix: &str| profile.lines().find_map(|l| l.strip_prefix(prefix));
    let names = line("events:")?.split_whitespace();
    let counts = line("totals:").or_else(|| line("summary:"))?;
    let counts = counts.split_whitespace().map(|c| c.parse::<u64>().ok());
    // A count callgrind left off at the end of the line is zero.
    let counts = counts.chain(std::iter::repeat(Some(0)));
    names
        .zip(counts)
        .map(|(n, c)| Some((n.to_owned(), c?)))
        .collect()
}

/// The geometry of one simulated cache level.
#[derive(Clone, Copy, Debug, PartialEq)]
struct CacheLevel {
    size: u64,
    ways: u64,
    line: u64,
}

impl CacheLevel {
    /// Simulated when this machine's L2 cannot be read or simulated: 1 MiB,
    /// 16 ways, 64-byte lines.
    const FALLBACK_L2: CacheLevel = CacheLevel {
        size: 1 << 20,
        ways: 16,
        line: 64,
    };

    /// The L2 of the first CPU as Linux describes it, when callgrind can
    /// simulate it (its number of sets a power of two).
    fn l2_of_this_machine() -> Option<CacheLevel> {
        let dir = Path::new("/sys/devices/system/cpu/cpu0/cache");
        (0..8).find_map(|i| {
            let read = |f: &str| std::fs::read_to_string(dir.join(format!("index{i}/{f}"))).ok();
            if read("level")?.trim() != "2" {
                return None;
            }
            CacheLevel::parse(
                &read("size")?,
                &read("ways_of_associativity")?,
                &read("coherency_line_size")?,
            )
        })
    }

    /// From sysfs's text (`1024K`, `8`, `64`); `None` when a value is
    /// malformed or callgrind could not simulate the geometry.
    fn parse(size: &str, ways: &str, line: &str) -> Option<CacheLevel> {
        let size = size.trim();
        let (digits, unit) = match size.strip_suffix(['K', 'M']) {
            Some(d) if size.ends_with('K') => (d, 1 << 10),
            Some(d) => (d, 1 << 20),
            None => (size, 1),
        };
        let level = CacheLevel {
            size: digits.parse::<u64>().ok()?.checked_mul(unit)?,
            ways: ways.trim().parse().ok()?,
            line: line.trim().parse().ok()?,
        };
        let sets = level
            .size
            .checked_div(level.ways.checked_mul(level.line)?)?;
        let exact = sets.checked_mul(level.ways)?.checked_mul(level.line)? == level.size;
        (exact && sets.is_power_of_two()).then_some(level)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_pair_event_names_with_counts() {
        let profile = "version: 1\nevents: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw\n\
                       fn=x\n1 2\ntotals: 100 40 30 7 5 3 1 2\n";
        let t = totals(profile).unwrap();
        assert_eq!(t["Ir"], 100);
        assert_eq!(t["D1mw"], 3);
        assert_eq!(t["DLmr"], 2);
        // Trailing zeros may be left off.
        assert_eq!(t["DLmw"], 0);
        let plain = totals("events: Ir\nsummary: 42\n").unwrap();
        assert_eq!(plain["Ir"], 42);
        assert!(totals("events: Ir\ntotals: x\n").is_none());
        assert!(totals("events: Ir\n").is_none());
    }

    #[test]
    fn cache_levels_are_read_from_sysfs_text_and_checked() {
        let l2 = CacheLevel::parse("1024K\n", "16\n", "64\n").unwrap();
        assert_eq!(l2, CacheLevel::FALLBACK_L2);
        assert_eq!(CacheLevel::parse("2M", "8", "64").unwrap().size, 2 << 20);
        // 1.25 MiB, 10 ways: 2,048 sets; 12 ways: not a power of two.
        assert!(CacheLevel::parse("1280K", "10", "64").is_some());
        assert!(CacheLevel::parse("1280K", "12", "64").is_none());
        for (size, ways, line) in [
            ("", "8", "64"),
            ("1024K", "0", "64"),
            ("9999999999999999M", "8", "64"),
            ("1024X", "8", "64"),
            ("1024K", "8", "-1"),
        ] {
            assert!(
                CacheLevel::parse(size, ways, line).is_none(),
                "{size} {ways} {line}"
            );
        }
    }
}
