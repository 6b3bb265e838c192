//! OTLP export of a tool-using turn (feature `otel`): a loopback OTLP
//! receiver decodes what the exporter sends (HTTP/protobuf) and the test
//! checks the GenAI spans — names, parent/child links, semantic-convention
//! attributes, the usage the fake provider reported — and that neither the
//! API key nor any message content is in the exported bytes unless content
//! capture is on.
#![cfg(feature = "otel")]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use branch_actions::DynamicTool;
use branch_core::Branch;
use branch_core::model::ModelConfig;
use branch_models::IModel;
use branch_models::mock::{MockReply, MockServer};
use lionagi::prelude::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tracing_subscriber::layer::SubscriberExt;

/// A recognizable fake key: it must never reach the collector.
const FAKE_KEY: &str = "sk-otel-test-KEY-7f3a9c";
/// Words of the conversation that are content, not telemetry.
const QUESTION: &str = "What is seventeen plus twenty-five, dear oracle?";
const SYSTEM: &str = "You are the arithmetic oracle of Otelville.";
const TOOL_RESULT_MARK: i64 = 4_242_424;

/// The content capture switch is process-wide: the two tests take turns.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Request bodies POSTed to `/v1/traces`.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<Vec<u8>>>>);

/// A minimal OTLP/HTTP receiver on 127.0.0.1: answers 200 to each POST
/// and keeps its body. It runs on a runtime of its own, so the test's
/// thread may block in a flush while the exporter talks to it.
fn receiver() -> (String, Received) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
    let received = Received::default();
    let store = received.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(serve(stream, store.clone()));
            }
        });
    });
    (url, received)
}

async fn serve(stream: tokio::net::TcpStream, store: Received) {
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        assert!(line.starts_with("POST /v1/traces "), "{line}");
        let mut length = 0usize;
        loop {
            let mut h = String::new();
            reader.read_line(&mut h).await.unwrap();
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let lower = h.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
            if lower.starts_with("content-type:") {
                assert!(lower.contains("application/x-protobuf"), "{h}");
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).await.unwrap();
        store.0.lock().unwrap().push(body);
        let ok =
            b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        reader.get_mut().write_all(ok).await.unwrap();
    }
}

fn raw_completion(id: &str, message: Value, finish: &str, usage: Value) -> MockReply {
    let body = json!({
        "id": id,
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-4.1-mini-2025-04-14",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    });
    MockReply::raw(200, &body.to_string())
}

fn branch(server: &MockServer) -> Branch {
    let config = ModelConfig::builder()
        .provider("openai")
        .model("gpt-4.1-mini")
        .base_url(&server.base_url())
        .allow_local_network(true)
        .build()
        .unwrap();
    let model = IModel::with_api_key(config, FAKE_KEY).unwrap();
    let mut b = Branch::builder()
        .system(SYSTEM)
        .chat_model(Arc::new(model) as Arc<dyn ChatModel>)
        .build()
        .unwrap();
    let add = DynamicTool::new(
        "add",
        Some("Adds two numbers.".into()),
        json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}),
        |args: Value| async move {
            let sum = args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0);
            Ok::<_, String>(json!({"sum": sum, "mark": TOOL_RESULT_MARK}))
        },
    )
    .unwrap()
    .into_tool();
    b.acts_mut().register(add, false).unwrap();
    b
}

fn script(server: &MockServer) {
    server.script([raw_completion(
        "chatcmpl-otel-1",
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_otel_1", "type": "function",
             "function": {"name": "add", "arguments": "{\"a\": 17, \"b\": 25}"}}
        ]}),
        "tool_calls",
        json!({"prompt_tokens": 321, "completion_tokens": 45, "total_tokens": 366,
                   "cache_read_input_tokens": 100}),
    )]);
}

/// Runs the tool-using `operate` turn under an OTLP layer sending to a
/// fresh receiver; returns the exported spans and the raw bytes.
async fn export_turn(capture: bool) -> (Vec<Span>, Vec<u8>, Vec<(String, Any)>, String) {
    branch_core::telemetry::set_capture_content(capture);
    let (url, received) = receiver();
    let server = MockServer::start().await;
    script(&server);
    let mut b = branch(&server);
    let (layer, guard) = lionagi::telemetry::otlp_layer_for(&url).unwrap();
    let subscriber = tracing_subscriber::registry().with(layer);
    {
        let _default = tracing::subscriber::set_default(subscriber);
        let reply = b
            .operate(
                OperateOptions::new(QUESTION)
                    .actions(true)
                    .native_tools(true),
            )
            .await
            .unwrap();
        assert_eq!(reply.action_responses.len(), 1);
    }
    // The batch processor sends from a thread of its own; the flush waits
    // for it.
    guard.flush();
    drop(guard);
    let bodies = received.0.lock().unwrap().clone();
    assert!(!bodies.is_empty(), "nothing was exported");
    let mut spans = Vec::new();
    let mut resource = Vec::new();
    for body in &bodies {
        let req = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
        for rs in req.resource_spans {
            if let Some(r) = rs.resource {
                for kv in r.attributes {
                    resource.push((kv.key, kv.value.and_then(|v| v.value).unwrap()));
                }
            }
            for ss in rs.scope_spans {
                spans.extend(ss.spans);
            }
        }
    }
    (spans, bodies.concat(), resource, b.id().to_string())
}

fn attrs(span: &Span) -> HashMap<String, Any> {
    span.attributes
        .iter()
        .map(|kv| {
            let v = kv.value.clone().and_then(|v| v.value).unwrap();
            (kv.key.clone(), v)
        })
        .collect()
}

fn s(v: &str) -> Any {
    Any::StringValue(v.into())
}

fn one<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let found: Vec<&Span> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "spans named {name:?}: {:?}", names(spans));
    found[0]
}

fn names(spans: &[Span]) -> Vec<&str> {
    spans.iter().map(|s| s.name.as_str()).collect()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test]
async fn a_tool_using_turn_exports_genai_spans_without_key_or_content() {
    let _turn = SERIAL.lock().await;
    let (spans, bytes, resource, branch_id) = export_turn(false).await;

    // service.name
    assert!(
        resource.contains(&("service.name".into(), s("lionagi"))),
        "{resource:?}"
    );

    // Names: the verb, its model call, the tool call it asked for.
    assert_eq!(spans.len(), 3, "{:?}", names(&spans));
    let verb = one(&spans, "invoke_agent");
    let chat = one(&spans, "chat gpt-4.1-mini");
    let tool = one(&spans, "execute_tool add");

    // Parent/child: verb → chat, verb → execute_tool; one trace.
    assert!(verb.parent_span_id.is_empty(), "the verb span is a root");
    assert_eq!(chat.parent_span_id, verb.span_id);
    assert_eq!(chat.trace_id, verb.trace_id);
    assert_eq!(tool.parent_span_id, verb.span_id);
    assert_eq!(tool.trace_id, verb.trace_id);

    // Kinds (OTLP enum: 1 internal, 3 client).
    assert_eq!(verb.kind, 1);
    assert_eq!(tool.kind, 1);
    assert_eq!(chat.kind, 3);
    // The tool ran after the model asked for it, inside the verb.
    assert!(tool.start_time_unix_nano >= chat.end_time_unix_nano);
    assert!(tool.end_time_unix_nano <= verb.end_time_unix_nano);

    // The verb's attributes.
    let v = attrs(verb);
    assert_eq!(v["gen_ai.operation.name"], s("invoke_agent"));
    assert_eq!(v["lionagi.operation"], s("operate"));
    assert_eq!(v["gen_ai.provider.name"], s("openai"));
    assert_eq!(v["gen_ai.request.model"], s("gpt-4.1-mini"));
    assert_eq!(v["gen_ai.conversation.id"], s(&branch_id));
    assert!(!v.contains_key("error.type"));

    // The model call.
    let first = attrs(chat);
    assert_eq!(first["gen_ai.operation.name"], s("chat"));
    assert_eq!(first["gen_ai.provider.name"], s("openai"));
    assert_eq!(first["gen_ai.request.model"], s("gpt-4.1-mini"));
    assert_eq!(first["gen_ai.response.model"], s("gpt-4.1-mini-2025-04-14"));
    assert_eq!(first["gen_ai.response.id"], s("chatcmpl-otel-1"));
    assert_eq!(
        first["gen_ai.response.finish_reasons"],
        s("[\"tool_calls\"]")
    );
    assert_eq!(first["gen_ai.conversation.id"], s(&branch_id));
    assert_eq!(first["server.address"], s("127.0.0.1"));
    // Input tokens include the cache reads (the conventions' rule).
    assert_eq!(first["gen_ai.usage.input_tokens"], Any::IntValue(421));
    assert_eq!(first["gen_ai.usage.output_tokens"], Any::IntValue(45));
    assert_eq!(
        first["gen_ai.usage.cache_read.input_tokens"],
        Any::IntValue(100)
    );
    assert!(!first.contains_key("gen_ai.usage.cache_write.input_tokens"));
    assert_eq!(first["http.response.status_code"], Any::IntValue(200));
    assert!(!first.contains_key("error.type"));

    // The tool call.
    let t = attrs(tool);
    assert_eq!(t["gen_ai.operation.name"], s("execute_tool"));
    assert_eq!(t["gen_ai.tool.name"], s("add"));
    assert_eq!(t["gen_ai.tool.call.id"], s("call_otel_1"));
    assert_eq!(t["gen_ai.tool.type"], s("function"));
    assert_eq!(t["gen_ai.conversation.id"], s(&branch_id));
    assert!(!t.contains_key("error.type"));

    // Nothing secret, nothing said.
    assert!(!contains(&bytes, FAKE_KEY), "the API key was exported");
    assert!(!contains(&bytes, "Bearer"), "an auth header was exported");
    for content in [QUESTION, SYSTEM, "seventeen", &TOOL_RESULT_MARK.to_string()] {
        assert!(!contains(&bytes, content), "content exported: {content}");
    }
    for key in [
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
    ] {
        assert!(!contains(&bytes, key), "{key} exported without opt-in");
    }
}

#[tokio::test]
async fn with_content_capture_on_the_spans_carry_the_conversation() {
    let _turn = SERIAL.lock().await;
    let (spans, bytes, _, _) = export_turn(true).await;
    branch_core::telemetry::set_capture_content(false);

    let text = |a: &HashMap<String, Any>, k: &str| match &a[k] {
        Any::StringValue(s) => serde_json::from_str::<Value>(s).unwrap(),
        other => panic!("{k}: {other:?}"),
    };
    let first = attrs(one(&spans, "chat gpt-4.1-mini"));
    let input = text(&first, "gen_ai.input.messages");
    let last = &input[input.as_array().unwrap().len() - 1];
    assert_eq!(last["role"], "user");
    assert!(
        last["parts"][0]["content"]
            .as_str()
            .unwrap()
            .contains(QUESTION)
    );
    assert!(input.to_string().contains(SYSTEM), "{input}");
    let output = text(&first, "gen_ai.output.messages");
    assert_eq!(output[0]["parts"][0]["type"], "tool_call");
    assert_eq!(output[0]["parts"][0]["id"], "call_otel_1");
    assert_eq!(
        output[0]["parts"][0]["arguments"],
        json!({"a": 17, "b": 25})
    );
    assert_eq!(output[0]["finish_reason"], "tool_calls");

    let tool = attrs(one(&spans, "execute_tool add"));
    assert_eq!(
        text(&tool, "gen_ai.tool.call.arguments"),
        json!({"a": 17, "b": 25})
    );
    assert_eq!(
        text(&tool, "gen_ai.tool.call.result"),
        json!({"sum": 42, "mark": TOOL_RESULT_MARK})
    );
    // Content, yes; the key, still never.
    assert!(!contains(&bytes, FAKE_KEY), "the API key was exported");
}
