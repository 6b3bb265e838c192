//! `lionagi branch roundtrip` and `lionagi branch show` on every reference
//! `to_dict` value found in the serialization fixtures.

mod support;

use std::process::Command;

use serde_json::{Value, json};

fn branch_dicts(v: &Value, at: String, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) => {
            if m.get("metadata").and_then(|md| md.get("lion_class"))
                == Some(&json!("lionagi.session.branch.Branch"))
            {
                out.push((at.clone(), v.clone()));
            }
            for (k, x) in m {
                branch_dicts(x, format!("{at}/{k}"), out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                branch_dicts(x, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn local_network_off(v: &Value) -> Value {
    let mut v = v.clone();
    for k in ["chat_model", "parse_model"] {
        if let Some(c) = v.get_mut(k).and_then(|m| m.pointer_mut("/endpoint/config")) {
            c["allow_local_network"] = json!(false);
        }
    }
    v
}

fn lionagi(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_lionagi"))
        .args(args)
        .output()
        .expect("run lionagi")
}

#[test]
fn roundtrip_of_every_reference_to_dict_gives_it_back() {
    let root = support::fixtures_root().join("serialization");
    let dir = std::env::temp_dir().join(format!("lionagi-cli-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut checked = 0;
    for entry in std::fs::read_dir(&root).unwrap() {
        let scenario = entry.unwrap().path();
        for file in ["output.json", "input.json"] {
            let Ok(text) = std::fs::read_to_string(scenario.join(file)) else {
                continue;
            };
            let mut found = Vec::new();
            branch_dicts(
                &serde_json::from_str(&text).unwrap(),
                String::new(),
                &mut found,
            );
            for (pointer, stored) in found {
                let label = format!(
                    "{}:{file}{pointer}",
                    scenario.file_name().unwrap().to_string_lossy()
                );
                let path = dir.join(format!("{checked}.json"));
                std::fs::write(&path, serde_json::to_vec(&stored).unwrap()).unwrap();
                let path = path.to_str().unwrap();
                for mode in ["python", "json"] {
                    let out = lionagi(&["branch", "roundtrip", path, "--mode", mode]);
                    assert!(
                        out.status.success(),
                        "{label}: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                    let back: Value = serde_json::from_slice(&out.stdout).unwrap();
                    let mut expected = local_network_off(&stored);
                    // `log_config` is written only on request; a stored one
                    // is restored (checked in the conformance tests).
                    expected.as_object_mut().unwrap().shift_remove("log_config");
                    // compat.md §1: a value the reference wrote after its own
                    // lossy restore lacks `system`; ours restores it.
                    if expected.get("system").is_none() {
                        let first = expected["messages"]["progression"]["order"][0].clone();
                        let sys = expected["messages"]["collections"]
                            .as_array()
                            .and_then(|c| {
                                c.iter().find(|m| m["id"] == first && m["role"] == "system")
                            })
                            .cloned();
                        if let Some(sys) = sys {
                            expected
                                .as_object_mut()
                                .unwrap()
                                .insert("system".into(), sys);
                        }
                    }
                    assert_eq!(back, expected, "{label} ({mode} mode)");
                }
                let out = lionagi(&["branch", "show", path]);
                assert!(out.status.success(), "{label}: show failed");
                let listing = String::from_utf8(out.stdout).unwrap();
                let n = stored["messages"]["collections"]
                    .as_array()
                    .map_or(0, Vec::len);
                assert_eq!(
                    listing.lines().count(),
                    1 + n,
                    "{label}: one line per message"
                );
                checked += 1;
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    assert!(checked >= 30, "only {checked} reference branches found");
}

#[test]
fn db_mode_and_meta_key() {
    let stored =
        std::fs::read(support::fixtures_root().join("serialization/to_dict_modes/output.json"))
            .unwrap();
    let v: Value = serde_json::from_slice(&stored).unwrap();
    let path = std::env::temp_dir().join(format!("lionagi-db-{}.json", uuid::Uuid::new_v4()));
    std::fs::write(&path, serde_json::to_vec(&v["python"]).unwrap()).unwrap();
    let out = lionagi(&[
        "branch",
        "roundtrip",
        path.to_str().unwrap(),
        "--mode",
        "db",
        "--db-meta-key",
        "meta",
    ]);
    assert!(out.status.success());
    let back: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(back, local_network_off(&v["db_meta_key"]));
    std::fs::remove_file(path).ok();
}

#[test]
fn bad_input_is_one_line_with_a_path_and_status_2() {
    let dir = std::env::temp_dir().join(format!("lionagi-bad-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases: [(&str, &str, &str); 5] = [
        (
            "truncated",
            r#"{"id": "6e215c90-0fc7-4af0-8fc0-c5dc415c1108", "messages": {"collec"#,
            "line 1",
        ),
        ("bad_uuid", r#"{"id": "not-a-uuid"}"#, "`id`"),
        (
            "wrong_type",
            r#"{"messages": {"collections": [{"metadata": {"lion_class": "Instruction"}, "created_at": []}]}}"#,
            "messages.collections[0].created_at",
        ),
        ("unknown_key", r#"{"colour": "red"}"#, "colour"),
        ("nan", r#"{"created_at": NaN}"#, "line 1"),
    ];
    for (name, text, needle) in cases {
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, text).unwrap();
        for cmd in ["show", "roundtrip"] {
            let out = lionagi(&["branch", cmd, path.to_str().unwrap()]);
            assert_eq!(out.status.code(), Some(2), "{name}");
            let err = String::from_utf8(out.stderr).unwrap();
            assert_eq!(err.lines().count(), 1, "{name}: {err}");
            assert!(err.contains(needle), "{name}: {err}");
            assert!(!err.contains("panicked"), "{name}: {err}");
        }
    }
    let out = lionagi(&["branch", "show", dir.join("missing.json").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let out = lionagi(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn store_commands_import_list_show_export_delete() {
    let dir = std::env::temp_dir().join(format!("lionagi-store-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("store.db");
    let db = db.to_str().unwrap();
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/conversation.json"
    );
    let original: Value = serde_json::from_slice(&std::fs::read(example).unwrap()).unwrap();
    let out = lionagi(&["branch", "import", example, "--store", db]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert_eq!(id, original["id"]);
    let list = String::from_utf8(lionagi(&["branch", "list", "--store", db]).stdout).unwrap();
    assert!(list.contains(&id) && list.contains("calculator"), "{list}");
    let show = lionagi(&["branch", "show", "calculator", "--store", db]);
    assert_eq!(String::from_utf8(show.stdout).unwrap().lines().count(), 6);
    let exported = dir.join("out.json");
    let out = lionagi(&[
        "--store",
        db,
        "branch",
        "export",
        &id,
        exported.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let back: Value = serde_json::from_slice(&std::fs::read(&exported).unwrap()).unwrap();
    assert_eq!(back, local_network_off(&original));
    assert!(
        lionagi(&["branch", "delete", "calculator", "--store", db])
            .status
            .success()
    );
    let gone = lionagi(&["branch", "show", &id, "--store", db]);
    assert_eq!(gone.status.code(), Some(2));
    assert_eq!(String::from_utf8(gone.stderr).unwrap().lines().count(), 1);
    std::fs::remove_dir_all(&dir).ok();
}

/// A reader that stops early (`| head -1`) ends the command quietly, as
/// it ends any command-line tool: no "Broken pipe" message, status 0.
#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let branch = branch_core::Branch::new().unwrap();
    let mut v = branch
        .to_dict(&branch_core::ToDictOptions::default())
        .unwrap();
    // Large enough that its writes outlast the pipe's buffer.
    v["metadata"]["padding"] = json!("x".repeat(1 << 20));
    let dir = std::env::temp_dir().join(format!("lionagi-pipe-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let big = dir.join("big.json");
    std::fs::write(&big, serde_json::to_vec(&v).unwrap()).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_lionagi"))
        .args(["branch", "roundtrip", big.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert_eq!(first, "{\n");
    // The reader goes away with most of the output unread.
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    assert!(out.status.success(), "{:?}", out.status);
}
