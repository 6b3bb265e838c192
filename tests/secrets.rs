//! No API key or other secret reaches `to_dict`, `Debug`, errors or logs.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};

use branch_core::model::ModelConfig;
use branch_core::{Branch, ToDictOptions};
use serde_json::json;

const SECRET: &str = "sk-secret-123-do-not-leak";

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn stored_model_with_secrets() -> serde_json::Value {
    let mut m = ModelConfig::new("openai", "gpt-4.1-mini")
        .unwrap()
        .to_dict(true, true);
    let cfg = m.pointer_mut("/endpoint/config").unwrap();
    cfg["api_key"] = json!(SECRET);
    cfg["default_headers"] =
        json!({"Authorization": format!("Bearer {SECRET}"), "X-Api-Key": SECRET});
    cfg["base_url"] = json!(format!("https://user:{SECRET}@api.openai.com/v1"));
    cfg["kwargs"]["api_key"] = json!(SECRET);
    m["provider_metadata"] = json!({"api_key": SECRET, "served_model": "gpt-4.1-mini"});
    m
}

#[test]
fn secrets_never_leave_through_any_door() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let stored = json!({
            "id": "6e215c90-0fc7-4af0-8fc0-c5dc415c1108",
            "created_at": 1.0,
            "metadata": {"lion_class": "lionagi.session.branch.Branch"},
            "messages": {"collections": [], "progression": {"order": []}},
            "chat_model": stored_model_with_secrets(),
            "parse_model": stored_model_with_secrets(),
        });
        let b = Branch::from_dict(&stored).expect("loads with credentials stripped");
        for opts in [
            ToDictOptions::default(),
            ToDictOptions {
                include_request_options: true,
                include_processor_config: true,
                include_log_config: true,
                ..ToDictOptions::default()
            },
        ] {
            let out = serde_json::to_string(&b.to_dict(&opts).unwrap()).unwrap();
            assert!(!out.contains(SECRET), "to_dict leaked: {out}");
            let bytes = b.to_json_vec(&opts).unwrap();
            assert!(!String::from_utf8(bytes).unwrap().contains(SECRET));
        }
        assert!(!format!("{b:?}").contains(SECRET));
        assert!(!format!("{:?}", b.chat_model()).contains(SECRET));
        assert!(!lionagi::cli::listing(&b).contains(SECRET));
        // A config that fails validation names fields, never values.
        let mut bad = stored_model_with_secrets();
        bad["endpoint"]["config"]["timeout"] = json!(SECRET);
        let e = ModelConfig::from_dict(&bad).unwrap_err();
        assert!(!e.to_string().contains(SECRET), "{e}");
        assert!(!format!("{e:?}").contains(SECRET));
        let e = Branch::from_dict(&json!({
            "id": "6e215c90-0fc7-4af0-8fc0-c5dc415c1108",
            "created_at": 1.0,
            "chat_model": bad,
        }))
        .unwrap_err();
        assert!(e.to_string().contains("chat_model"), "{e}");
        assert!(!e.to_string().contains(SECRET), "{e}");
        // A connected model holding a key: Debug, to_dict and a branch's
        // to_dict never show it.
        let live = branch_models::IModel::with_api_key(
            ModelConfig::new("openai", "gpt-4.1-mini").unwrap(),
            SECRET,
        )
        .unwrap();
        assert!(live.has_api_key());
        assert!(!format!("{live:?}").contains(SECRET));
        let live: std::sync::Arc<dyn branch_core::model::ChatModel> = std::sync::Arc::new(live);
        let with_key = Branch::builder().chat_model(live).build().unwrap();
        let out =
            serde_json::to_string(&with_key.to_dict(&ToDictOptions::default()).unwrap()).unwrap();
        assert!(!out.contains(SECRET), "to_dict leaked: {out}");
        assert!(!format!("{with_key:?}").contains(SECRET));
        // Deprecation warnings and other log lines go through tracing.
        Branch::builder()
            .system_template(Some(json!(SECRET)))
            .build()
            .unwrap();
    });
    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("deprecated"), "the capture works: {logs}");
    assert!(!logs.contains(SECRET), "a log line leaked: {logs}");
}
