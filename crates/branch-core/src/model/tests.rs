//! Model-configuration tests against the reference fixtures.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use super::*;

/// The vendored reference fixtures (`tests/fixtures/lionagi-0.36.0` at the
/// repository root), or `$LIONAGI_FIXTURES`.
fn fixtures_dir() -> PathBuf {
    match std::env::var_os("LIONAGI_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/lionagi-0.36.0"),
    }
}

fn load(rel: &str) -> Value {
    let path = fixtures_dir().join(rel);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("fixture {} unreadable: {e}", path.display()));
    serde_json::from_str(&text).expect("fixture is JSON")
}

fn ptr<'a>(v: &'a Value, pointer: &str) -> &'a Value {
    v.pointer(pointer)
        .unwrap_or_else(|| panic!("missing {pointer}"))
}

fn mask_identity(mut v: Value) -> Value {
    v["id"] = json!("<id>");
    v["created_at"] = json!("<ts>");
    v
}

/// Exact comparison including object key order.
fn assert_same(actual: &Value, expected: &Value, what: &str) {
    assert_eq!(
        serde_json::to_string(actual).unwrap(),
        serde_json::to_string(expected).unwrap(),
        "{what}"
    );
}

fn is_model_object(v: &Value) -> bool {
    v.get("endpoint").is_some_and(|e| e.get("config").is_some())
        && v.get("provider_metadata").is_some()
}

fn collect_models(v: &Value, path: &str, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) if is_model_object(v) => {
            let _ = m;
            out.push((path.to_owned(), v.clone()));
        }
        Value::Object(m) => {
            for (k, x) in m {
                collect_models(x, &format!("{path}/{k}"), out);
            }
        }
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                collect_models(x, &format!("{path}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn all_fixture_models() -> Vec<(String, Value)> {
    let root = fixtures_dir();
    let mut out = Vec::new();
    let mut categories: Vec<_> = std::fs::read_dir(&root)
        .expect("fixtures directory present")
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .collect();
    categories.sort_by_key(|e| e.path());
    for cat in categories {
        let mut scenarios: Vec<_> = std::fs::read_dir(cat.path())
            .unwrap()
            .filter_map(Result::ok)
            .collect();
        scenarios.sort_by_key(|e| e.path());
        for sc in scenarios {
            for file in ["input.json", "output.json"] {
                let p = sc.path().join(file);
                if let Ok(text) = std::fs::read_to_string(&p) {
                    let v: Value = serde_json::from_str(&text).unwrap();
                    collect_models(&v, &p.display().to_string(), &mut out);
                }
            }
        }
    }
    out
}

/// Every chat_model / parse_model object of the fixtures: from_dict then
/// to_dict gives the object back, except that the local-network opt-in is
/// never restored (serialization.md §7.1).
#[test]
fn every_fixture_model_round_trips() {
    let models = all_fixture_models();
    assert!(
        models.len() > 90,
        "found only {} model objects",
        models.len()
    );
    for (path, stored) in models {
        let config = ModelConfig::from_dict(&stored).unwrap_or_else(|e| panic!("{path}: {e}"));
        let cfg = &stored["endpoint"]["config"];
        let with_ro = cfg.get("request_options").is_some();
        let with_pc = stored.get("processor_config").is_some();
        let mut expected = stored.clone();
        expected["endpoint"]["config"]["allow_local_network"] = json!(false);
        assert_same(&config.to_dict(with_ro, with_pc), &expected, &path);
        assert_eq!(
            config.model_name(),
            cfg["kwargs"]["model"].as_str(),
            "{path}"
        );
    }
}

/// The reference's own round-trip outputs, ids and timestamps included.
#[test]
fn fixture_round_trip_pairs() {
    let pairs: &[(&str, &str, &str)] = &[
        (
            "serialization/system_message/output.json",
            "/to_dict/chat_model",
            "/roundtrip/chat_model",
        ),
        (
            "serialization/system_message/output.json",
            "/to_dict/chat_model",
            "/roundtrip/parse_model",
        ),
        (
            "serialization/parse_model_distinct_vs_aliased/output.json",
            "/distinct/parse_model",
            "/roundtrip_distinct/parse_model",
        ),
        (
            "serialization/parse_model_distinct_vs_aliased/output.json",
            "/distinct/chat_model",
            "/roundtrip_distinct/chat_model",
        ),
        (
            "serialization/to_dict_modes/output.json",
            "/python/chat_model",
            "/roundtrip_python/chat_model",
        ),
        (
            "serialization/empty_branch_default_model/output.json",
            "/to_dict/chat_model",
            "/roundtrip/chat_model",
        ),
    ];
    for (file, from, to) in pairs {
        let out = load(file);
        let config = ModelConfig::from_dict(ptr(&out, from)).unwrap();
        assert_same(
            &config.to_dict(false, false),
            ptr(&out, to),
            &format!("{file} {from} -> {to}"),
        );
    }
}

#[test]
fn request_options_and_processor_config_flags() {
    let out = load("serialization/include_request_options_and_processor_config/output.json");
    let chat = ModelConfig::from_dict(&out["default_chat_model"]).unwrap();
    // Build the "full" dict the scenario fed to from_dict.
    let mut full = chat.to_dict(true, true);
    assert_same(
        &full["endpoint"]["config"]["request_options"],
        &out["request_options"],
        "schema",
    );
    let keys: Vec<&str> = full["endpoint"]["config"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let expected_keys: Vec<&str> = out["with_request_options_keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert_eq!(keys, expected_keys);
    // The live model had allow_local_network = true.
    full["endpoint"]["config"]["allow_local_network"] = json!(true);
    let restored = ModelConfig::from_dict(&full).unwrap();
    assert_eq!(
        restored.endpoint().request_options,
        RequestOptions::OpenAiChat
    );
    assert_same(
        &restored.to_dict(false, true),
        &out["roundtrip_full_then_processor_config"]["chat_model"],
        "roundtrip_full_then_processor_config",
    );
    // Without the flag no processor_config; with it the defaults.
    let mut live = ModelConfig::builder()
        .provider("openai")
        .model("gpt-4.1-mini")
        .base_url("http://127.0.0.1:47611/v1")
        .allow_local_network(true)
        .build()
        .unwrap();
    assert_same(
        &mask_identity(live.to_dict(false, true)),
        &mask_identity(out["with_processor_config_chat_model"].clone()),
        "with_processor_config_chat_model",
    );
    live.set_allow_local_network(false);
    assert!(live.to_dict(false, false).get("processor_config").is_none());
    assert_eq!(
        RequestOptions::OpenAiChat.field_names().unwrap()[..2],
        ["model", "messages"],
        "request model fields"
    );
}

/// An Anthropic model writes the reference's Messages request model as its
/// `request_options` (refdiff's `anthropic_request_options` compares it
/// with the reference's own), and a stored one reads back as that model,
/// not as a schema of its own: the body keeps the fields ours sends
/// natively (`thinking`, `output_config`).
#[test]
fn anthropic_models_write_and_restore_the_messages_request_model() {
    let c = ModelConfig::new("anthropic", "claude-sonnet-4-5").unwrap();
    assert_eq!(
        c.endpoint().request_options,
        RequestOptions::AnthropicMessages
    );
    let d = c.to_dict(true, false);
    let ro = &d["endpoint"]["config"]["request_options"];
    assert_eq!(ro["title"], "CreateMessageRequest");
    assert_eq!(
        RequestOptions::AnthropicMessages.field_names().unwrap(),
        [
            "model",
            "messages",
            "max_tokens",
            "system",
            "temperature",
            "top_p",
            "top_k",
            "stop_sequences",
            "stream",
            "metadata",
            "tools",
            "tool_choice"
        ]
    );
    assert_eq!(
        ro["properties"]["temperature"]["anyOf"][0]["maximum"],
        json!(1)
    );
    let restored = ModelConfig::from_dict(&d).unwrap();
    assert_eq!(
        restored.endpoint().request_options,
        RequestOptions::AnthropicMessages
    );
    assert!(
        c.to_dict(false, false)["endpoint"]["config"]
            .get("request_options")
            .is_none()
    );
}

#[test]
fn default_openai_model_matches_empty_branch_fixture() {
    let out = load("serialization/empty_branch_default_model/output.json");
    let config = ModelConfig::new("openai", "gpt-4.1-mini").unwrap();
    assert_same(
        &mask_identity(config.to_dict(false, false)),
        &mask_identity(out["to_dict"]["chat_model"].clone()),
        "empty_branch_default_model",
    );
    assert_eq!(config.provider(), "openai");
    assert_eq!(config.model_name(), Some("gpt-4.1-mini"));
    assert_eq!(
        config.url().as_deref(),
        Some("https://api.openai.com/v1/chat/completions")
    );
    assert!(config.base_url_is_registered());
    assert_eq!(config.key_env(), Some("OPENAI_API_KEY"));
    assert!(!ChatModel::is_cli(&config));
    let parse = ModelConfig::from_model_string("openai/gpt-4o-mini").unwrap();
    let expected = load("serialization/parse_model_distinct_vs_aliased/output.json");
    assert_same(
        &mask_identity(parse.to_dict(false, false)),
        &mask_identity(expected["string"]["parse_model"].clone()),
        "string parse model",
    );
}

const ANTHROPIC_EXAMPLE: &str = r#"{"id": "4996e9b1-883e-4c8b-ab94-fc5569ebb554", "created_at": 1796215470.620789,
 "provider_metadata": {},
 "endpoint": {"retry_config": null, "circuit_breaker": null,
   "config": {"name": "anthropic_messages", "provider": "anthropic",
     "base_url": "https://api.anthropic.com/v1", "endpoint": "messages", "method": "POST",
     "params": {}, "content_type": "application/json", "auth_type": "x-api-key",
     "default_headers": {"anthropic-version": "2023-06-01"}, "timeout": 600, "max_retries": 3,
     "idempotent_retries": false, "openai_compatible": false, "requires_tokens": false,
     "kwargs": {"model": "claude-sonnet-4-5", "max_tokens": 1024},
     "client_kwargs": {}, "allow_local_network": false, "serialize_by_alias": false}},
 "processor_config": {"queue_capacity": 100, "capacity_refresh_time": 60, "interval": null,
   "limit_requests": null, "limit_tokens": null, "concurrency_limit": null},
 "max_input_tokens": 150000}"#;

#[test]
fn anthropic_example_of_the_reference() {
    let expected: Value = serde_json::from_str(ANTHROPIC_EXAMPLE).unwrap();
    let built = ModelConfig::builder()
        .provider("anthropic")
        .model("claude-sonnet-4-5")
        .kwarg("max_tokens", 1024)
        .max_input_tokens(150_000)
        .build()
        .unwrap();
    assert_same(
        &mask_identity(built.to_dict(false, true)),
        &mask_identity(expected.clone()),
        "built",
    );
    let restored = ModelConfig::from_dict(&expected).unwrap();
    assert_same(&restored.to_dict(false, true), &expected, "restored");
    assert_eq!(
        restored.created_at().to_bits(),
        1796215470.620789_f64.to_bits()
    );
    assert_eq!(restored.key_env(), Some("ANTHROPIC_API_KEY"));
    // Serialized text keeps 600 an integer and the timestamp exact.
    let text = serde_json::to_string(&restored.to_dict(false, false)).unwrap();
    assert!(text.contains("\"timeout\":600,"), "{text}");
    assert!(text.contains("\"created_at\":1796215470.620789,"), "{text}");
}

#[test]
fn credentials_never_come_back_out() {
    let input = json!({
        "id": "4996e9b1-883e-4c8b-ab94-fc5569ebb554",
        "created_at": 1.5,
        "provider_metadata": {"served_model": "m", "api_key": "SECRET-1", "nested": {"token": "SECRET-2", "ok": 1}},
        "endpoint": {"retry_config": null, "circuit_breaker": null, "config": {
            "name": "openai_chat/completions", "provider": "openai",
            "base_url": "https://user:SECRET-3@api.openai.com/v1?key=SECRET-4",
            "endpoint": "chat/completions",
            "api_key": "SECRET-5",
            "params": {"access_token": "SECRET-6"},
            "default_headers": {"Authorization": "Bearer SECRET-7", "X-Api-Key": "SECRET-8",
                                "Proxy-Authorization": "SECRET-9", "Cookie": "SECRET-10",
                                "OpenAI-Beta": "assistants=v2"},
            "kwargs": {"model": "gpt-4.1-mini", "api_key": "SECRET-11", "temperature": 0.2,
                       "max_tokens": 10, "env": {"A": "SECRET-12"}},
            "client_kwargs": {"proxies": "http://SECRET-13", "verify": false, "headers": {"a": "SECRET-14"}, "timeout": 5},
            "allow_local_network": true
        }}
    });
    let config = ModelConfig::from_dict(&input).unwrap();
    let text = serde_json::to_string(&config.to_dict(true, true)).unwrap();
    assert!(!text.contains("SECRET"), "{text}");
    let cfg = &config.to_dict(false, false)["endpoint"]["config"];
    assert_eq!(cfg["base_url"], "https://api.openai.com/v1");
    assert_eq!(
        cfg["default_headers"],
        json!({"OpenAI-Beta": "assistants=v2"})
    );
    assert_eq!(
        cfg["kwargs"],
        json!({"model": "gpt-4.1-mini", "temperature": 0.2, "max_tokens": 10})
    );
    assert_eq!(cfg["client_kwargs"], json!({"timeout": 5}));
    assert_eq!(cfg["allow_local_network"], json!(false));
    assert_eq!(config.provider_metadata()["nested"], json!({"ok": 1}));
    // The stored URL is the registered one once the credentials are stripped.
    assert!(config.base_url_is_registered());

    // Builders and setters refuse credentials outright.
    assert!(
        ModelConfig::builder()
            .provider("openai")
            .model("m")
            .kwarg("api_key", "x")
            .build()
            .is_err()
    );
    assert!(
        ModelConfig::builder()
            .provider("openai")
            .model("m")
            .default_header("Authorization", "x")
            .build()
            .is_err()
    );
    let mut c = ModelConfig::new("openai", "m").unwrap();
    let err = c.set_base_url("https://u:SECRET@host/v1").unwrap_err();
    assert!(!err.to_string().contains("SECRET"));
    assert!(c.set_kwarg("openai_api_key", json!("SECRET")).is_err());
    c.set_provider_metadata("session_token", json!("SECRET"));
    assert!(c.provider_metadata().is_empty());
}

/// Loading data never grants local-network access, for any provider: a
/// file naming `ollama` or `lattice` (registered at a local address) with
/// no `base_url`, or with `allow_local_network: true`, used to regain it.
#[test]
fn local_network_is_never_restored_from_data() {
    for provider in ["ollama", "lattice", "openai", "anthropic", "groq"] {
        let Ok(live) = ModelConfig::new(provider, "m") else {
            continue;
        };
        let mut stored = live.to_dict(false, false);
        stored["endpoint"]["config"]["allow_local_network"] = json!(true);
        assert!(
            !ModelConfig::from_dict(&stored)
                .unwrap()
                .allow_local_network(),
            "{provider}"
        );
        // No base_url at all: the registered (local) one is used, still
        // without local access.
        if let Some(cfg) = stored["endpoint"]["config"].as_object_mut() {
            cfg.remove("base_url");
        }
        let restored = ModelConfig::from_dict(&stored).unwrap();
        assert!(!restored.allow_local_network(), "{provider}");
    }
    let ollama = ModelConfig::new("ollama", "llama3").unwrap();
    assert!(ollama.allow_local_network(), "the program's own choice");
    let mut v = ollama.to_dict(false, false);
    v["endpoint"]["config"]["allow_local_network"] = json!("yes");
    assert!(ModelConfig::from_dict(&v).is_err(), "still type-checked");
}

/// A stored timeout, delay or recovery time of 1e300 s loaded fine and
/// panicked on first use; now the load fails naming the field.
#[test]
fn absurd_stored_waits_are_refused_naming_the_field() {
    let good = ModelConfig::new("openai", "m")
        .unwrap()
        .to_dict(false, true);
    let cases: [(&str, &str); 6] = [
        ("/endpoint/config/timeout", "endpoint.config.timeout"),
        (
            "/processor_config/capacity_refresh_time",
            "processor_config.capacity_refresh_time",
        ),
        ("/processor_config/interval", "processor_config.interval"),
        (
            "/endpoint/retry_config/max_delay",
            "endpoint.retry_config.max_delay",
        ),
        (
            "/endpoint/retry_config/base_delay",
            "endpoint.retry_config.base_delay",
        ),
        (
            "/endpoint/circuit_breaker/recovery_time",
            "endpoint.circuit_breaker.recovery_time",
        ),
    ];
    for (pointer, field) in cases {
        let mut v = good.clone();
        v["endpoint"]["retry_config"] = json!({"base_delay": 1, "max_delay": 60});
        v["endpoint"]["circuit_breaker"] = json!({"recovery_time": 30});
        *v.pointer_mut(pointer).unwrap() = json!(1e300);
        let err = ModelConfig::from_dict(&v).unwrap_err().to_string();
        assert!(
            err.contains(field) && err.contains("at most"),
            "{pointer}: {err}"
        );
        *v.pointer_mut(pointer).unwrap() = json!(-1e300);
        if pointer.contains("retry_config") || pointer.contains("circuit_breaker") {
            assert!(ModelConfig::from_dict(&v).is_err(), "{pointer} negative");
        }
    }
    // A negative timeout keeps its meaning ("none"); the largest allowed
    // value saturates rather than overflowing anything.
    let mut v = good.clone();
    v["endpoint"]["config"]["timeout"] = json!(-1e300);
    let c = ModelConfig::from_dict(&v).unwrap();
    assert_eq!(c.endpoint().timeout.as_duration(), None);
    v["endpoint"]["config"]["timeout"] = json!(2_592_000);
    let c = ModelConfig::from_dict(&v).unwrap();
    assert_eq!(
        c.endpoint().timeout.as_duration(),
        Some(crate::model::limits::MAX_CONFIG_DURATION)
    );
    // Programmatic values beyond the bound saturate.
    assert_eq!(
        Seconds::from_secs_f64(1e300).unwrap().as_duration(),
        Some(crate::model::limits::MAX_CONFIG_DURATION)
    );
}

#[test]
fn malformed_input_gives_typed_errors_without_values() {
    let good = ModelConfig::new("openai", "gpt-4.1-mini")
        .unwrap()
        .to_dict(false, true);
    let cases: Vec<(Value, &str)> = vec![
        (json!("SECRET"), "<model>"),
        (json!({"id": "x"}), "endpoint"),
        (json!({"endpoint": {"config": "SECRET"}}), "endpoint.config"),
        (
            json!({"endpoint": {"config": {}}}),
            "endpoint.config.provider",
        ),
        (
            {
                let mut v = good.clone();
                v["id"] = json!("SECRET-not-a-uuid");
                v
            },
            "id",
        ),
        (
            {
                let mut v = good.clone();
                v["created_at"] = json!("SECRET");
                v
            },
            "created_at",
        ),
        (
            {
                let mut v = good.clone();
                v["endpoint"]["config"]["timeout"] = json!("SECRET");
                v
            },
            "endpoint.config.timeout",
        ),
        (
            {
                let mut v = good.clone();
                v["endpoint"]["config"]["auth_type"] = json!("SECRET");
                v
            },
            "endpoint.config.auth_type",
        ),
        (
            {
                let mut v = good.clone();
                v["endpoint"]["config"]["kwargs"] = json!(["SECRET"]);
                v
            },
            "endpoint.config.kwargs",
        ),
        (
            {
                let mut v = good.clone();
                v["endpoint"]["config"]["max_retries"] = json!(-1);
                v
            },
            "endpoint.config.max_retries",
        ),
        (
            {
                let mut v = good.clone();
                v["endpoint"]["config"]["default_headers"] = json!({"a": 1});
                v
            },
            "endpoint.config.default_headers",
        ),
        (
            {
                let mut v = good.clone();
                v["endpoint"]["retry_config"] = json!({"base_delay": -1.0});
                v
            },
            "endpoint.retry_config.base_delay",
        ),
        (
            {
                let mut v = good.clone();
                v["processor_config"]["capacity_refresh_time"] = json!(0);
                v
            },
            "processor_config.capacity_refresh_time",
        ),
        (
            {
                let mut v = good.clone();
                v["processor_config"]["limit_requests"] = json!(1.5);
                v
            },
            "processor_config.limit_requests",
        ),
        (
            {
                let mut v = good.clone();
                v["max_input_tokens"] = json!(0);
                v
            },
            "max_input_tokens",
        ),
    ];
    for (input, field) in cases {
        let err = ModelConfig::from_dict(&input).expect_err(field);
        let msg = err.to_string();
        assert!(msg.contains(field), "{msg} should name {field}");
        assert!(!msg.contains("SECRET"), "{msg} leaks a value");
    }
}

#[test]
fn from_dict_restores_limits_and_scales() {
    let mut c = ModelConfig::builder()
        .provider("openai")
        .model("gpt-4.1-mini")
        .limit_requests(5)
        .limit_tokens(1000)
        .concurrency_limit(2)
        .interval(Duration::from_millis(1500))
        .queue_capacity(7)
        .build()
        .unwrap();
    c.raise_input_token_scale(1.25);
    c.raise_input_token_scale(1.1);
    c.set_retry_config(Some(RetryConfig {
        base_delay: 0.001,
        ..RetryConfig::default()
    }));
    c.set_circuit_breaker(Some(CircuitBreakerConfig::default()));
    c.record_served_model("gpt-4.1-mini-2025");
    let full = c.to_dict(false, true);
    assert_eq!(full["processor_config"]["interval"], json!(1.5));
    assert_eq!(full["input_token_scale"], json!(1.25));
    assert_eq!(full["endpoint"]["retry_config"]["base_delay"], json!(0.001));
    assert_eq!(full["endpoint"]["circuit_breaker"]["name"], Value::Null);
    let restored = ModelConfig::from_dict(&full).unwrap();
    assert_eq!(restored, c);
    // Serialized with the branch defaults: the limits are lost (as in the reference).
    let lossy = ModelConfig::from_dict(&c.to_dict(false, false)).unwrap();
    assert_eq!(lossy.processor_config(), &ProcessorConfig::api());
    // A scale <= 1 is not restored.
    let mut v = full.clone();
    v["input_token_scale"] = json!(0.5);
    assert_eq!(ModelConfig::from_dict(&v).unwrap().input_token_scale(), 1.0);
}

#[test]
fn provider_resolution_rules() {
    // Unknown provider: error without base_url, generic endpoint with one.
    assert_eq!(
        ModelConfig::new("acme", "m").unwrap_err(),
        ModelConfigError::UnknownProvider
    );
    let generic = ModelConfig::builder()
        .provider("ACME")
        .model("m")
        .base_url("https://llm.acme.example/v1")
        .build()
        .unwrap();
    let cfg = &generic.to_dict(true, false)["endpoint"]["config"];
    assert_eq!(cfg["name"], "openai_compatible_chat");
    assert_eq!(cfg["provider"], "acme");
    assert_eq!(cfg["endpoint"], "chat");
    assert_eq!(cfg["timeout"], json!(300));
    assert_eq!(cfg["openai_compatible"], json!(true));
    assert_eq!(cfg["requires_tokens"], json!(true));
    assert!(cfg.get("request_options").is_none());
    assert_eq!(
        generic.url().as_deref(),
        Some("https://llm.acme.example/v1/chat")
    );
    // Unknown provider from data: generic endpoint, not an error.
    let restored = ModelConfig::from_dict(&generic.to_dict(false, false)).unwrap();
    assert_same(
        &restored.to_dict(false, false),
        &generic.to_dict(false, false),
        "generic rt",
    );
    // Known provider, unknown endpoint: generic without base URL.
    let foo = ModelConfig::builder()
        .provider("openai")
        .model("m")
        .endpoint("foo")
        .build()
        .unwrap();
    assert!(foo.base_url().is_none());
    assert!(
        foo.to_dict(false, false)["endpoint"]["config"]
            .get("base_url")
            .is_none()
    );
    // Aliases, endpoint names, CLI defaults.
    let or = ModelConfig::new("open-router", "anthropic/claude-3.5").unwrap();
    assert_eq!(or.endpoint().name, "openrouter_chat/completions");
    assert_eq!(or.model_name(), Some("anthropic/claude-3.5"));
    let s = ModelConfig::from_model_string("anthropic/claude-sonnet-4-5").unwrap();
    assert_eq!(s.provider(), "anthropic");
    assert_eq!(s.model_name(), Some("claude-sonnet-4-5"));
    let cli = ModelConfig::new("claude_code", "sonnet").unwrap();
    assert!(ChatModel::is_cli(&cli));
    assert_eq!(cli.processor_config(), &ProcessorConfig::cli());
    assert_eq!(cli.endpoint().timeout, Seconds::from_secs(3600));
    assert!(cli.duplicate().is_cli());
    let embed = ModelConfig::builder()
        .provider("openai")
        .model("e")
        .endpoint("embed")
        .build()
        .unwrap();
    assert_eq!(embed.endpoint().name, "openai_embeddings");
    // Extra kwargs keep their order after the model.
    let t = ModelConfig::builder()
        .provider("openai")
        .kwarg("temperature", 0.5)
        .model("gpt-4o")
        .kwarg("max_tokens", 5)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let keys: Vec<_> = t.kwargs().keys().cloned().collect();
    assert_eq!(keys, ["model", "temperature", "max_tokens"]);
    assert_eq!(
        t.to_dict(false, false)["endpoint"]["config"]["timeout"],
        json!(30)
    );
}

#[test]
fn scripted_fixture_model_is_cli() {
    let out = load("operations/run_scripted_cli_stream/output.json");
    let c = ModelConfig::from_dict(&out["to_dict"]["chat_model"]).unwrap();
    assert!(ChatModel::is_cli(&c));
    let fresh = ModelConfig::new("scripted", "scripted-1").unwrap();
    assert_same(
        &mask_identity(fresh.to_dict(false, false)),
        &mask_identity(out["to_dict"]["chat_model"].clone()),
        "scripted",
    );
}

#[test]
fn ids_are_v4_and_created_at_is_now() {
    let c = ModelConfig::new("openai", "m").unwrap();
    assert_eq!(c.id().get_version_num(), 4);
    assert!((c.created_at() - now_timestamp()).abs() < 60.0);
    let mut d = c.clone();
    d.renew_identity();
    assert_ne!(c.id(), d.id());
}

#[tokio::test]
async fn configuration_only_model_is_not_connected() {
    let c = ModelConfig::new("openai", "gpt-4.1-mini").unwrap();
    let model: std::sync::Arc<dyn ChatModel> = std::sync::Arc::new(c.clone());
    let err = model
        .chat(ChatRequest::new(vec![ChatMessage::user("hi")]))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::NotConnected);
    assert_eq!(err.provider, "openai");
    assert_eq!(err.model.as_deref(), Some("gpt-4.1-mini"));
    assert!(err.to_string().contains("openai/gpt-4.1-mini"));
    assert!(model.stream(ChatRequest::default()).await.is_err());
    assert_eq!(model.to_dict(false, false), c.to_dict(false, false));
    assert_eq!(model.snapshot(), c);
}

#[test]
fn azure_needs_its_resource_url_and_round_trips_its_api_key_auth() {
    let err = ModelConfig::new("azure", "my-deployment").unwrap_err();
    assert!(err.to_string().contains("base_url"), "{err}");
    let config = ModelConfig::builder()
        .provider("azure")
        .model("my-deployment")
        .base_url("https://contoso.openai.azure.com/openai/v1/")
        .build()
        .unwrap();
    assert_eq!(config.endpoint().auth_type, AuthType::ApiKeyHeader);
    assert_eq!(
        config.url().as_deref(),
        Some("https://contoso.openai.azure.com/openai/v1/chat/completions")
    );
    assert!(config.base_url_is_registered());
    let dict = config.to_dict(false, false);
    assert_eq!(dict["endpoint"]["config"]["auth_type"], "api-key");
    let text = dict.to_string();
    assert!(!text.contains("AZURE_OPENAI_API_KEY"), "{text}");
    let back = ModelConfig::from_dict(&dict).unwrap();
    assert_eq!(back.endpoint().auth_type, AuthType::ApiKeyHeader);
    assert_eq!(back.to_dict(false, false), dict);
    assert!(back.base_url_is_registered());

    let legacy = ModelConfig::builder()
        .provider("azure-openai")
        .model("dep")
        .base_url("https://contoso.openai.azure.com/openai/deployments/dep?api-version=2024-10-21")
        .build()
        .unwrap();
    assert_eq!(
        legacy.url().as_deref(),
        Some(
            "https://contoso.openai.azure.com/openai/deployments/dep/chat/completions?api-version=2024-10-21"
        )
    );
    assert!(legacy.base_url_is_registered());
    // Another host is not Azure: the environment key is never sent there.
    for other in [
        "https://contoso.example/openai/v1",
        "https://a.contoso.openai.azure.com/openai/v1",
        "http://127.0.0.1:9/v1",
    ] {
        let c = ModelConfig::builder()
            .provider("azure")
            .model("d")
            .base_url(other)
            .build()
            .unwrap();
        assert!(!c.base_url_is_registered(), "{other}");
    }
}

#[test]
fn compatible_providers_send_env_keys_only_to_their_registered_urls() {
    for (provider, url) in [
        ("mistral", "https://api.mistral.ai/v1/chat/completions"),
        ("xai", "https://api.x.ai/v1/chat/completions"),
        (
            "cohere",
            "https://api.cohere.ai/compatibility/v1/chat/completions",
        ),
    ] {
        let mut c = ModelConfig::new(provider, "m").unwrap();
        assert_eq!(c.url().as_deref(), Some(url));
        assert!(c.base_url_is_registered(), "{provider}");
        c.set_base_url("https://elsewhere.example/v1").unwrap();
        assert!(!c.base_url_is_registered(), "{provider}");
    }
    let mut bad = ModelConfig::builder()
        .provider("azure")
        .model("d")
        .base_url("https://contoso.openai.azure.com/openai/v1")
        .build()
        .unwrap()
        .to_dict(false, false);
    bad["endpoint"]["config"]["auth_type"] = json!("api_key");
    assert!(ModelConfig::from_dict(&bad).is_err());
}
