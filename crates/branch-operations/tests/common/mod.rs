//! Helpers of the verb tests: the loopback mock, reference tools, request
//! normalisation for the documented deviations.
#![allow(dead_code)]

use std::sync::Arc;

use branch_actions::DynamicTool;
use branch_core::Branch;
use branch_core::model::{ChatModel, ModelConfig};
use branch_models::IModel;
use branch_models::mock::{MockReply, MockServer};
use serde_json::{Value, json};

/// A fresh directory under the system's temp dir, named after `label`.
pub fn temp_dir(label: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("lionagi-{label}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `body` as an executable shell script at `path`: a scripted CLI
/// agent for `run`.
#[cfg(unix)]
pub fn executable(path: &std::path::Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The fixtures' mock URL.
pub const REFERENCE_URL: &str = "http://127.0.0.1:47611/v1";

/// A connected model at the mock (`ctx.model(NAME)`).
pub fn model(server: &MockServer, name: &str) -> Arc<dyn ChatModel> {
    Arc::new(IModel::with_api_key(config(server, name), "test").expect("model"))
}

/// A connected model at the mock speaking OpenAI's Responses protocol.
pub fn responses_model(server: &MockServer, name: &str) -> Arc<dyn ChatModel> {
    let config = ModelConfig::builder()
        .provider("openai")
        .endpoint("responses")
        .model(name)
        .base_url(&server.base_url())
        .allow_local_network(true)
        .build()
        .expect("config");
    Arc::new(IModel::with_api_key(config, "test").expect("model"))
}

/// A configuration-only model at the mock.
pub fn config(server: &MockServer, name: &str) -> ModelConfig {
    ModelConfig::builder()
        .provider("openai")
        .model(name)
        .base_url(&server.base_url())
        .allow_local_network(true)
        .build()
        .expect("config")
}

/// The vendored reference fixtures (`$LIONAGI_FIXTURES` overrides).
fn fixtures_root() -> std::path::PathBuf {
    match std::env::var_os("LIONAGI_FIXTURES") {
        Some(dir) => dir.into(),
        None => std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/lionagi-0.36.0"),
    }
}

/// The reference's `Answer` model as pydantic writes its schema.
pub fn answer_format() -> branch_operations::ResponseFormat {
    branch_operations::ResponseFormat::Schema(json!({
        "properties": {
            "answer": {"description": "The final answer", "title": "Answer", "type": "string"},
            "confidence": {"description": "Confidence between 0 and 1", "title": "Confidence", "type": "number"}
        },
        "required": ["answer", "confidence"],
        "title": "Answer",
        "type": "object"
    }))
}

/// A mock server with the scenario's scripted replies queued.
pub async fn scripted(scenario: &str) -> MockServer {
    let server = MockServer::start().await;
    server.script(scripted_replies(scenario));
    server
}

/// The scripted replies listed in a scenario.md.
pub fn scripted_replies(scenario: &str) -> Vec<MockReply> {
    let path = fixtures_root().join(scenario).join("scenario.md");
    let md = std::fs::read_to_string(path).expect("scenario.md");
    let Some(at) = md.find("## Mock replies (in order)") else {
        return Vec::new();
    };
    let rest = &md[at..];
    let start = rest.find("```json\n").expect("reply block") + 8;
    let end = rest[start..].find("\n```").expect("block end") + start;
    let v: Value = serde_json::from_str(&rest[start..end]).expect("replies json");
    v.as_array()
        .unwrap()
        .iter()
        .map(|e| MockReply::from_script(e).expect("reply"))
        .collect()
}

/// `multiply(a: int, b: int)` with the reference's schema.
pub fn multiply() -> Arc<dyn branch_core::Tool> {
    DynamicTool::new(
        "multiply",
        Some("Multiply two integers and return the product.".into()),
        json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}),
        |args: Value| async move {
            let a = &args["a"];
            let b = &args["b"];
            Ok::<_, String>(match (a.as_i64(), b.as_i64()) {
                (Some(x), Some(y)) => json!(x * y),
                _ => json!(a.as_f64().unwrap_or(0.0) * b.as_f64().unwrap_or(0.0)),
            })
        },
    )
    .expect("tool")
    .into_tool()
}

/// `lookup_capital(country: str)` with the reference's schema.
pub fn lookup_capital() -> Arc<dyn branch_core::Tool> {
    DynamicTool::new(
        "lookup_capital",
        Some("Return the capital city of a country.".into()),
        json!({"type": "object", "properties": {"country": {"type": "string"}}, "required": ["country"]}),
        |args: Value| async move {
            let c = args["country"].as_str().unwrap_or_default();
            Ok::<_, String>(json!(match c {
                "France" => "Paris",
                "Japan" => "Tokyo",
                _ => "unknown",
            }))
        },
    )
    .expect("tool")
    .into_tool()
}

/// The response-format banner example (a Python type repr in the
/// reference, a JSON field map here: branch-messages' compat note M1) is
/// replaced by a placeholder; so is the token count of ReAct's usage note,
/// which counts that text (the counting itself is checked against the
/// reference's own texts in `react_token_note_counts_like_the_reference`).
pub fn normalise_text(s: &str) -> String {
    let mut out = s.to_owned();
    let head = "\\n```json\\n";
    if let Some(a) = out.find("ResponseFormat: \"") {
        if let Some(h) = out[a..].find(head) {
            let from = a + h + head.len();
            if let Some(e) = out[from..].find("\\n```No triple") {
                out.replace_range(from..from + e, "<example>");
            }
        }
    }
    if let Some(a) = out.find("Estimated Current Token Usage: ") {
        let from = a + "Estimated Current Token Usage: ".len();
        let e = out[from..].find('/').map_or(out.len(), |e| from + e);
        out.replace_range(from..e, "<n>");
    }
    out
}

/// Applies [`normalise_text`] to every string of a value.
pub fn normalise_all(v: &mut Value) {
    match v {
        Value::String(s) => *s = normalise_text(s),
        Value::Array(a) => a.iter_mut().for_each(normalise_all),
        Value::Object(o) => {
            // The reference writes `"description": null` for undocumented
            // tool parameters; branch-actions omits it (docs/compat.md A1).
            if o.get("description").is_some_and(Value::is_null) {
                o.shift_remove("description");
            }
            o.values_mut().for_each(normalise_all)
        }
        _ => {}
    }
}

/// A request body with [`normalise_text`] applied to every message text.
pub fn normalise_request(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(ms) = v.get_mut("messages").and_then(Value::as_array_mut) {
        for m in ms {
            if let Some(Value::String(s)) = m.get_mut("content") {
                *s = normalise_text(s);
            }
        }
    }
    v
}

/// Compares the captured request bodies with requests.jsonl.
pub fn assert_requests(server: &MockServer, expected: &[Value]) {
    let got = server.bodies();
    assert_eq!(got.len(), expected.len(), "request count");
    for (i, (g, e)) in got.iter().zip(expected).enumerate() {
        let (g, e) = (normalise_request(g), normalise_request(e));
        if g != e {
            panic!(
                "request {i} differs:\n ours: {}\n ref:  {}",
                serde_json::to_string_pretty(&g).unwrap(),
                serde_json::to_string_pretty(&e).unwrap()
            );
        }
    }
}

/// `to_dict` with the mock URL replaced by the reference's.
pub fn to_dict(branch: &Branch, server: &MockServer) -> Value {
    let d = branch
        .to_dict(&branch_core::ToDictOptions::default())
        .expect("to_dict");
    let text = serde_json::to_string(&d)
        .unwrap()
        .replace(&server.base_url(), REFERENCE_URL);
    let mut v: Value = serde_json::from_str(&text).unwrap();
    normalise_all(&mut v);
    v
}

/// The reference's `msg_summary`.
pub fn msg_summary(branch: &Branch) -> Value {
    Value::Array(
        branch
            .messages()
            .iter()
            .map(|m| {
                let v = m.to_value().unwrap();
                json!({"class": m.kind().class_name(), "role": v["role"], "id": v["id"],
                    "sender": v["sender"], "recipient": v["recipient"]})
            })
            .collect(),
    )
}
