//! The lionagi-rs side of `cargo xtask refdiff` (tests/refdiff/README.md).
//!
//! ```text
//! refdiff SCENARIO_DIR LIBRARY OUT_DIR REF_DIR [NAME...]
//! ```
//!
//! Runs every scenario through the public API against a scripted loopback
//! server and writes `OUT_DIR/<name>.json`; loads each of the reference's
//! `to_dict` outputs (`REF_DIR/<name>.json`) with `from_dict` and writes
//! `OUT_DIR/<name>.cross.json`; prints `READY`. Then, on the line
//! `COMPARE` from stdin (sent once the reference has loaded our outputs
//! in turn), compares both sides, prints the report and exits 1 when a
//! difference is neither fixed nor documented.

mod agent;
mod compare;
mod scenario;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::Value;

fn read_json(path: &Path) -> Result<Value, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

fn write_json(path: &Path, v: &Value) -> Result<(), String> {
    let text = serde_json::to_string_pretty(v).map_err(|e| e.to_string())?;
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The scenario files, by name (file stem), sorted.
fn scenario_names(dir: &Path, only: &[String]) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_some_and(|e| e == "json") {
            if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
                if only.is_empty() || only.iter().any(|o| o == stem) {
                    names.push(stem.to_owned());
                }
            }
        }
    }
    names.sort();
    Ok(names)
}

async fn run_all(
    scen_dir: &Path,
    library: &scenario::Library,
    out_dir: &Path,
    ref_dir: &Path,
    names: &[String],
) -> Result<(), String> {
    std::fs::create_dir_all(out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    for name in names {
        let sc = read_json(&scen_dir.join(format!("{name}.json")))?;
        let result = scenario::run(&sc, library).await;
        write_json(&out_dir.join(format!("{name}.json")), &result)?;
        let theirs = ref_dir.join(format!("{name}.json"));
        let theirs = if theirs.exists() {
            read_json(&theirs)?
        } else {
            Value::Null
        };
        let cross = scenario::cross_load(&theirs, &result, &sc, library).await;
        write_json(&out_dir.join(format!("{name}.cross.json")), &cross)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 4 {
        eprintln!("usage: refdiff SCENARIO_DIR LIBRARY OUT_DIR REF_DIR [NAME...]");
        return ExitCode::from(2);
    }
    let scen_dir = PathBuf::from(&args[0]);
    let out_dir = PathBuf::from(&args[2]);
    let ref_dir = PathBuf::from(&args[3]);
    let only = &args[4..];
    let result = (|| -> Result<bool, String> {
        let library = scenario::Library::load(&read_json(Path::new(&args[1]))?)?;
        let names = scenario_names(&scen_dir, only)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(run_all(&scen_dir, &library, &out_dir, &ref_dir, &names))?;
        println!("READY");
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        if line.trim() != "COMPARE" {
            return Err(format!("expected COMPARE on stdin, got {line:?}"));
        }
        let mut report = compare::Report::default();
        for name in &names {
            let sc = read_json(&scen_dir.join(format!("{name}.json")))?;
            let load = |dir: &Path, suffix: &str| {
                let p = dir.join(format!("{name}{suffix}.json"));
                if p.exists() {
                    read_json(&p)
                } else {
                    Ok(Value::Null)
                }
            };
            let sides = compare::Sides {
                reference: load(&ref_dir, "")?,
                ours: load(&out_dir, "")?,
                reference_loads_ours: load(&ref_dir, ".cross")?,
                ours_loads_reference: load(&out_dir, ".cross")?,
            };
            report.add(name, compare::scenario(&sc, &sides));
        }
        report.print();
        Ok(report.passed())
    })();
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("refdiff: {e}");
            ExitCode::from(2)
        }
    }
}
