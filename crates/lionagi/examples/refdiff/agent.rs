//! The scripted CLI agent's directory on our side (tests/refdiff/fake_agent.sh):
//! the scenario's agent runs written before it, the agent's calls read after.

use std::path::PathBuf;

use serde_json::{Value, json};

/// The directory the xtask gave this side (`REFDIFF_AGENT`); `run` starts
/// the agent in it through `LIONAGI_CLAUDE_BIN`.
fn dir() -> Option<PathBuf> {
    std::env::var_os("REFDIFF_AGENT").map(PathBuf::from)
}

/// Writes `runs` (a list of agent runs, each a list of stream-json events)
/// as `run_N.ndjson`, after removing the scenario before's files.
pub fn reset(runs: &Value) -> Result<(), String> {
    let Some(dir) = dir() else { return Ok(()) };
    for entry in std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.file_name().is_some_and(|n| n != "claude") {
            std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    for (i, events) in runs.as_array().into_iter().flatten().enumerate() {
        let mut text = String::new();
        for e in events.as_array().into_iter().flatten() {
            text.push_str(&e.to_string());
            text.push('\n');
        }
        let path = dir.join(format!("run_{i}.ndjson"));
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// Each start of the agent: its arguments and its stdin.
pub fn calls() -> Value {
    let Some(dir) = dir() else {
        return json!([]);
    };
    let mut out = Vec::new();
    for n in 0.. {
        let Ok(args) = std::fs::read(dir.join(format!("call_{n}.args"))) else {
            break;
        };
        let stdin = std::fs::read(dir.join(format!("call_{n}.stdin"))).unwrap_or_default();
        let mut args: Vec<String> = args
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        // Each argument ends with a NUL: the last piece is empty.
        args.pop();
        out.push(json!({"args": args, "stdin": String::from_utf8_lossy(&stdin)}));
    }
    Value::Array(out)
}
