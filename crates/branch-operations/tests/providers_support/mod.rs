//! Test providers shaped like the fixtures' Python definitions, fixture
//! loading, and the reading of a request's `Guidance:` text.

#![allow(dead_code)]

#[path = "../../../../tests/support/mod.rs"]
pub mod compare;
#[path = "../common/mod.rs"]
pub mod verbs;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use branch_core::message::{ActionResponseContent, InstructionContent};
use branch_core::{Branch, ContextProvider, Message, MessageContent, ProviderError};
use serde_json::{Map, Value, json};

pub fn fixtures_dir() -> PathBuf {
    match std::env::var_os("LIONAGI_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/lionagi-0.36.0"),
    }
}

pub fn output(scenario: &str) -> Value {
    let path = fixtures_dir().join(scenario).join("output.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("fixture {} unreadable: {e}", path.display()));
    serde_json::from_str(&text).expect("fixture is JSON")
}

pub fn requests(scenario: &str) -> Vec<Value> {
    let path = fixtures_dir().join(scenario).join("requests.jsonl");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("fixture {} unreadable: {e}", path.display()));
    text.lines()
        .map(|l| serde_json::from_str(l).expect("request line is JSON"))
        .collect()
}

/// The `Guidance:` value of a rendered user message (the YAML-ish
/// rendering of an instruction): a plain scalar, or a `|-` block whose
/// lines are indented by two spaces. `None` when there is no guidance.
pub fn guidance_of(content: &str) -> Option<String> {
    let rest = content.strip_prefix("Guidance: ")?;
    if let Some(block) = rest.strip_prefix("|-\n") {
        let mut lines = Vec::new();
        for line in block.split('\n') {
            if line.is_empty() {
                lines.push("");
            } else if let Some(l) = line.strip_prefix("  ") {
                lines.push(l);
            } else {
                break;
            }
        }
        while lines.last() == Some(&"") {
            lines.pop();
        }
        Some(lines.join("\n"))
    } else {
        Some(rest.split('\n').next().unwrap_or("").to_owned())
    }
}

pub fn branch_with_system(system: Option<&str>) -> Branch {
    let mut b = Branch::builder();
    if let Some(s) = system {
        b = b.system(s);
    }
    b.build().expect("branch builds")
}

pub fn instruction(text: &str, guidance: Option<&str>) -> Message {
    Message::instruction(InstructionContent {
        instruction: Some(json!(text)),
        guidance: guidance.map(|g| json!(g)),
        ..InstructionContent::default()
    })
}

pub fn action_response(function: &str, arguments: Value, output: Value) -> Message {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object")
    };
    Message::new(MessageContent::ActionResponse(Box::new(
        ActionResponseContent {
            function: function.into(),
            arguments,
            output: Some(output),
            action_request_id: None,
            error: None,
        },
    )))
}

/// The `{function, arguments, output}` view a writeback receives.
pub fn response_model(m: &Message) -> Value {
    match &m.content {
        MessageContent::ActionResponse(c) => json!({
            "function": c.function,
            "arguments": Value::Object(c.arguments.clone()),
            "output": c.output.clone().unwrap_or(Value::Null),
        }),
        _ => panic!("not an action response"),
    }
}

/// What `provide` does.
#[derive(Clone)]
pub enum Provide {
    Text(String),
    Nothing,
    Fail(String),
    Panic,
}

/// What `writeback` does.
#[derive(Clone, PartialEq)]
pub enum Writeback {
    /// No hook (the reference's missing or `None` attribute).
    Absent,
    /// Records the responses and reports their count.
    Records,
    /// Has a side effect, then fails (the reference's synchronous hook,
    /// called and then failing at the await; or a non-callable one).
    Fails,
    /// Panics.
    Panics,
}

/// A shared log of hook calls across providers, to check ordering.
pub type CallLog = Arc<Mutex<Vec<String>>>;

pub struct TestProvider {
    pub own_name: Option<String>,
    pub provide: Provide,
    pub degradation: Option<String>,
    pub writeback: Writeback,
    pub calls: AtomicUsize,
    pub writeback_calls: AtomicUsize,
    pub writebacks: Mutex<Vec<Vec<Value>>>,
    pub seen: Mutex<Vec<Value>>,
    pub log: Option<CallLog>,
}

impl TestProvider {
    pub fn new(provide: Provide) -> Self {
        Self {
            own_name: None,
            provide,
            degradation: None,
            writeback: Writeback::Absent,
            calls: AtomicUsize::new(0),
            writeback_calls: AtomicUsize::new(0),
            writebacks: Mutex::new(Vec::new()),
            seen: Mutex::new(Vec::new()),
            log: None,
        }
    }

    pub fn text(t: impl Into<String>) -> Self {
        Self::new(Provide::Text(t.into()))
    }

    pub fn named(mut self, n: &str) -> Self {
        self.own_name = Some(n.into());
        self
    }

    pub fn degraded(mut self, reason: &str) -> Self {
        self.degradation = Some(reason.into());
        self
    }

    pub fn with_writeback(mut self, w: Writeback) -> Self {
        self.writeback = w;
        self
    }

    pub fn logging(mut self, log: &CallLog) -> Self {
        self.log = Some(log.clone());
        self
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn note(&self, what: &str) {
        if let Some(l) = &self.log {
            let who = self.own_name.clone().unwrap_or_else(|| "?".into());
            l.lock().unwrap().push(format!("{what}:{who}"));
        }
    }
}

#[async_trait]
impl ContextProvider for TestProvider {
    async fn provide(
        &self,
        branch: &Branch,
        instruction: &Message,
    ) -> Result<Option<String>, ProviderError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.note("provide");
        let text = instruction
            .as_instruction()
            .and_then(|c| c.instruction.clone())
            .unwrap_or(Value::Null);
        self.seen.lock().unwrap().push(json!({
            "instruction_class": instruction.kind().class_name(),
            "instruction": text,
            "in_branch_messages": branch.messages().contains(&instruction.id()),
        }));
        match &self.provide {
            Provide::Text(t) => Ok(Some(t.clone())),
            Provide::Nothing => Ok(None),
            Provide::Fail(e) => Err(ProviderError(e.clone())),
            Provide::Panic => panic!("provider panicked"),
        }
    }

    fn name(&self) -> Option<String> {
        self.own_name.clone()
    }

    fn degradation_reason(&self) -> Option<String> {
        self.degradation.clone()
    }

    fn has_writeback(&self) -> bool {
        self.writeback != Writeback::Absent
    }

    async fn writeback(
        &self,
        _branch: &Branch,
        action_responses: &[Message],
    ) -> Result<Option<u64>, ProviderError> {
        self.writeback_calls.fetch_add(1, Ordering::SeqCst);
        self.note("writeback");
        match self.writeback {
            Writeback::Absent => Ok(None),
            Writeback::Records => {
                self.writebacks
                    .lock()
                    .unwrap()
                    .push(action_responses.iter().map(response_model).collect());
                Ok(Some(action_responses.len() as u64))
            }
            Writeback::Fails => Err(ProviderError("writeback is not awaitable".into())),
            Writeback::Panics => panic!("writeback panicked"),
        }
    }
}

/// A provider registered without any name of its own: the type name is
/// used.
pub struct Anonymous;

#[async_trait]
impl ContextProvider for Anonymous {
    async fn provide(&self, _: &Branch, _: &Message) -> Result<Option<String>, ProviderError> {
        Ok(Some("anon".into()))
    }
}

pub fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => panic!("not an object"),
    }
}
