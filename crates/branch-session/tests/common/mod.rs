//! Helpers shared by the integration tests: temporary directories, the
//! reference fixtures, and the masked comparison their README describes.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use branch_core::message::InstructionContent;
use branch_core::{Branch, Message, Participant};
use serde_json::Value;
use uuid::Uuid;

/// A directory removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let p =
            std::env::temp_dir().join(format!("branch-session-{tag}-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&p).expect("create temp dir");
        Self(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The reference fixtures vendored in the repository (`$LIONAGI_FIXTURES`
/// overrides).
pub fn fixtures_dir() -> PathBuf {
    match std::env::var_os("LIONAGI_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/lionagi-0.36.0"),
    }
}

pub fn fixture(rel: &str) -> Value {
    let path = fixtures_dir().join(rel);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("fixture {} unreadable: {e}", path.display()));
    serde_json::from_str(&text).expect("fixture is JSON")
}

/// The masks of a scenario's output.json: pointer → kind.
pub fn masks(scenario: &str) -> HashMap<String, String> {
    let nd = fixture(&format!("{scenario}/nondeterministic.json"));
    nd["output.json"]
        .as_array()
        .expect("mask list")
        .iter()
        .map(|m| {
            (
                m["pointer"].as_str().unwrap().to_owned(),
                m["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Compares `actual` with `expected` (which sits at `base` in output.json):
/// masked uuids must map one-to-one and consistently through `ids`,
/// timestamps must be numbers, mock URLs are skipped, the rest is equal.
pub struct Comparer<'a> {
    pub masks: &'a HashMap<String, String>,
    pub ids: HashMap<String, String>,
    pub reverse: HashMap<String, String>,
    /// Pointers (relative to output.json) not compared: documented deviations.
    pub skip: Vec<String>,
}

impl<'a> Comparer<'a> {
    pub fn new(masks: &'a HashMap<String, String>) -> Self {
        Self {
            masks,
            ids: HashMap::new(),
            reverse: HashMap::new(),
            skip: Vec::new(),
        }
    }

    pub fn compare(&mut self, base: &str, expected: &Value, actual: &Value) {
        if self.skip.iter().any(|s| s == base) {
            return;
        }
        if let Some(kind) = self.masks.get(base) {
            match kind.as_str() {
                "uuid" => {
                    let (e, a) = (
                        expected.as_str().expect("uuid"),
                        actual
                            .as_str()
                            .unwrap_or_else(|| panic!("{base}: not a string: {actual}")),
                    );
                    self.map_id(base, e, a);
                }
                "timestamp" | "duration" => {
                    assert!(actual.is_number(), "{base}: not a number: {actual}")
                }
                "mock_base_url" | "datetime" | "text" => {
                    assert!(actual.is_string(), "{base}: not a string")
                }
                other => panic!("unknown mask kind {other}"),
            }
            return;
        }
        match (expected, actual) {
            (Value::Object(e), Value::Object(a)) => {
                let mut ek: Vec<_> = e.keys().collect();
                let mut ak: Vec<_> = a.keys().collect();
                ek.sort();
                ak.sort();
                assert_eq!(ek, ak, "{base}: keys differ");
                for (k, ev) in e {
                    self.compare(&format!("{base}/{k}"), ev, &a[k]);
                }
            }
            (Value::Array(e), Value::Array(a)) => {
                assert_eq!(e.len(), a.len(), "{base}: lengths differ");
                for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                    self.compare(&format!("{base}/{i}"), ev, av);
                }
            }
            (Value::String(e), Value::String(a)) if self.ids.contains_key(e) => {
                assert_eq!(&self.ids[e], a, "{base}: id reference differs");
            }
            _ => assert_eq!(expected, actual, "{base} differs"),
        }
    }

    fn map_id(&mut self, at: &str, e: &str, a: &str) {
        if let Some(prev) = self.ids.get(e) {
            assert_eq!(prev, a, "{at}: {e} mapped to {prev} and {a}");
        } else {
            if let Some(prev) = self.reverse.get(a) {
                panic!("{at}: {a} is already the image of {prev}, not of {e}");
            }
            self.ids.insert(e.to_owned(), a.to_owned());
            self.reverse.insert(a.to_owned(), e.to_owned());
        }
    }
}

/// An instruction from `sender` to `recipient`.
pub fn instruction(text: &str, sender: &str, recipient: Uuid) -> Message {
    let content = InstructionContent {
        instruction: Some(text.into()),
        ..Default::default()
    };
    Message::instruction(content)
        .with_sender(Participant::from(sender))
        .with_recipient(Participant::Id(recipient))
}

/// A branch with a system message and `turns` instruction/reply pairs.
pub fn conversation(turns: usize) -> Branch {
    let mut b = Branch::builder()
        .system("You are terse.")
        .name("conv")
        .build()
        .expect("branch");
    let id = b.id();
    for i in 0..turns {
        b.msgs_mut()
            .add_message(instruction(&format!("question {i}"), "user", id));
        b.msgs_mut()
            .add_message(Message::assistant(format!("answer {i} with some text")));
    }
    b
}
pub mod stores;
