//! The embedded local model (`--features embedded`; the README's test
//! command, `cargo test --workspace --all-features`, runs it in the dev
//! profile, which keeps the model's hot crates at opt-level 3).
//!
//! The tokenizer parity test runs on a committed fixture; the tests that run
//! the model skip, saying why, when the model file is absent (`cargo xtask
//! fetch-model` puts it in place). With `LIONAGI_E2E_REQUIRED=1` (as in CI)
//! an absent model is a failure instead.
#![cfg(feature = "embedded")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use branch_core::model::{ChatMessage, ChatModel, ChatRequest, ChunkKind, ModelConfig};
use branch_models::local::tokenizer::{PreTokenizer, Tokenizer};
use branch_models::local::{self, LocalModel};
use futures_util::StreamExt;
use serde_json::{Value, json};

fn fixture() -> Value {
    let text = include_str!("data/tokenizer_fixture.json");
    serde_json::from_str(text).expect("fixture is JSON")
}

/// The fixture's slice of the GGUF vocabulary at its real ids; ids outside
/// the slice get unique names no merge can produce.
fn fixture_tokenizer(f: &Value) -> Tokenizer {
    let size = f["vocab_size"].as_u64().unwrap() as usize;
    let mut tokens: Vec<String> = (0..size).map(|i| format!("<unused {i}>")).collect();
    let mut types = vec![1i64; size];
    for t in f["tokens"].as_array().unwrap() {
        let id = t[0].as_u64().unwrap() as usize;
        tokens[id] = t[1].as_str().unwrap().to_owned();
        types[id] = t[2].as_i64().unwrap();
    }
    let merges: Vec<String> = f["merges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_owned())
        .collect();
    let pre = PreTokenizer::from_gguf_name(f["pre"].as_str().unwrap()).unwrap();
    Tokenizer::new(tokens, &types, &merges, pre).unwrap()
}

#[test]
fn tokenizer_matches_hugging_face_ids() {
    let f = fixture();
    let tok = fixture_tokenizer(&f);
    let cases = f["cases"].as_array().unwrap();
    assert!(cases.len() >= 10);
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let expected: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(tok.encode_with_special(text), expected, "ids of {text:?}");
        let plain_decoded: String = expected
            .iter()
            .map(|&id| String::from_utf8_lossy(tok.token_bytes(id)).into_owned())
            .collect::<String>();
        if text.is_ascii() {
            assert_eq!(plain_decoded, text);
        }
    }
    // Plain encoding never produces control tokens from their spelling.
    let plain = tok.encode("<|im_end|>");
    assert!(plain.len() > 1 && plain.iter().all(|&id| !tok.is_control(id)));
    assert_eq!(tok.decode(&plain), "<|im_end|>");
}

/// Reports a test skipped for want of the model, or fails it when the
/// environment requires the model.
fn skip(reason: &dyn std::fmt::Display) {
    let required = std::env::var("LIONAGI_E2E_REQUIRED").is_ok_and(|v| v == "1");
    assert!(!required, "LIONAGI_E2E_REQUIRED=1 but {reason}");
    eprintln!("skipped: {reason}");
}

#[test]
fn the_gguf_tokenizer_gives_the_fixture_ids() {
    let path = match local::resolve_model_path(local::DEFAULT_MODEL) {
        Ok(p) => p,
        Err(e) => {
            skip(&e);
            return;
        }
    };
    let tok = local::tokenizer_from_file(&path).unwrap();
    assert_eq!(tok.vocab_size(), 49152);
    for case in fixture()["cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let ids: Vec<u64> = tok
            .encode_with_special(text)
            .into_iter()
            .map(u64::from)
            .collect();
        let expected: Vec<u64> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_u64().unwrap())
            .collect();
        assert_eq!(ids, expected, "ids of {text:?}");
    }
}

/// The checked header reader (`branch_models::gguf`, what the loader uses)
/// reads the shipped model as candle's own reader does: the same metadata,
/// tensors, types, shapes and offsets.
#[test]
fn the_checked_header_of_the_model_is_candles_reading() {
    use candle_core::quantized::gguf_file;
    let path = match local::resolve_model_path(local::DEFAULT_MODEL) {
        Ok(p) => p,
        Err(e) => {
            skip(&e);
            return;
        }
    };
    let mut file = std::fs::File::open(&path).unwrap();
    let len = file.metadata().unwrap().len();
    let ours = branch_models::gguf::read_header(std::io::BufReader::new(&file), len).unwrap();
    std::io::Seek::rewind(&mut file).unwrap();
    let theirs = gguf_file::Content::read(&mut file).unwrap();
    assert!(ours.get("tokenizer.ggml.tokens").is_some());
    assert_eq!(ours.metadata.len(), theirs.metadata.len());
    for (key, value) in &ours.metadata {
        assert_eq!(
            format!("{value:?}"),
            format!("{:?}", theirs.metadata[key]),
            "{key}"
        );
    }
    assert_eq!(ours.data_offset, theirs.tensor_data_offset);
    assert_eq!(ours.tensors.len(), theirs.tensor_infos.len());
    for t in &ours.tensors {
        let c = &theirs.tensor_infos[&t.name];
        let dims: Vec<usize> = t.dims.iter().rev().map(|&d| d as usize).collect();
        assert_eq!(c.shape.dims(), dims.as_slice(), "{}", t.name);
        assert_eq!(c.offset, t.offset, "{}", t.name);
        assert_eq!(format!("{:?}", c.ggml_dtype), format!("{:?}", t.ggml_type));
    }
}

/// Held by every test that runs the model. The tests share one engine
/// (and its token counter), and the engine runs one generation at a time
/// anyway; running them one after another keeps each test's counts its own.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The default model with this test's turn on it, or `None` (with the
/// reason printed) when it is absent.
async fn model() -> Option<(tokio::sync::MutexGuard<'static, ()>, LocalModel)> {
    match local::resolve_model_path(local::DEFAULT_MODEL) {
        Ok(_) => {}
        Err(e) => {
            skip(&e);
            return None;
        }
    }
    let turn = SERIAL.lock().await;
    let config = local::local_config(local::DEFAULT_MODEL).expect("local provider registered");
    Some((turn, LocalModel::new(config).expect("model file present")))
}

fn ask(question: &str) -> ChatRequest {
    ChatRequest::new(vec![ChatMessage::user(question)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greedy_answer_names_paris_and_stops_at_im_end() {
    let Some((_turn, model)) = model().await else {
        return;
    };
    // With the template's default system prompt this Q4_1 135M model's
    // greedy reply wanders off into French (llama.cpp's is the same, token
    // for token); with a plain system prompt it answers.
    let request = ChatRequest::new(vec![
        ChatMessage::system("You are a helpful assistant."),
        ChatMessage::user("What is the capital of France?"),
    ])
    .with_field("temperature", 0)
    .with_field("max_tokens", 64);
    let reply = model.chat(request).await.unwrap();
    assert!(reply.text.contains("Paris"), "reply: {:?}", reply.text);
    // Stopped by <|im_end|>, not by the budget, and the marker is not text.
    assert_eq!(reply.finish_reason.as_deref(), Some("stop"));
    assert!(!reply.text.contains("<|im_end|>") && !reply.text.contains("<|im_start|>"));
    let usage = reply.usage.unwrap();
    // llama.cpp's server counts 27 prompt tokens for this conversation.
    assert_eq!(usage.prompt_tokens, 27);
    assert!(usage.completion_tokens > 0);
    assert_eq!(reply.served_model.as_deref(), Some(local::DEFAULT_MODEL));
    let prompt = model.render_prompt(&ask("Hi")).unwrap();
    assert!(prompt.starts_with("<|im_start|>system\nYou are a helpful AI assistant named SmolLM"));
    assert!(prompt.ends_with("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_format_makes_the_reply_follow_the_schema() {
    let Some((_turn, model)) = model().await else {
        return;
    };
    let schema = json!({
        "type": "object",
        "properties": {
            "country": {"type": "string"},
            "capital": {"type": "string"},
            "population_millions": {"type": "integer"},
            "coastal": {"type": "boolean"}
        },
        "required": ["country", "capital"]
    });
    let request = |format: Value, temperature: f64| {
        ChatRequest::new(vec![
            ChatMessage::system("You are a helpful assistant."),
            ChatMessage::user("Describe France's capital as JSON."),
        ])
        .with_field("temperature", temperature)
        .with_field("seed", 3)
        .with_field("max_tokens", 80)
        .with_field("response_format", format)
    };
    let format =
        json!({"type": "json_schema", "json_schema": {"name": "Capital", "schema": schema}});
    for temperature in [0.0, 0.9] {
        let reply = model
            .chat(request(format.clone(), temperature))
            .await
            .unwrap();
        let v: Value = serde_json::from_str(&reply.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", reply.text));
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["country", "capital", "population_millions", "coastal"]
        );
        assert!(v["country"].is_string() && v["capital"].is_string());
        assert!(v["population_millions"].is_i64() && v["coastal"].is_boolean());
        assert_eq!(
            reply.finish_reason.as_deref(),
            Some("stop"),
            "{:?}",
            reply.text
        );
    }
    // Free-form: any object, within the token budget.
    let any = model
        .chat(request(json!({"type": "json_object"}), 0.0).with_field("max_tokens", 200))
        .await
        .unwrap();
    match any.finish_reason.as_deref() {
        Some("stop") => assert!(
            serde_json::from_str::<Value>(&any.text).is_ok_and(|v| v.is_object()),
            "{:?}",
            any.text
        ),
        _ => assert!(any.text.starts_with('{'), "{:?}", any.text),
    }
    let err = model
        .chat(request(
            json!({"type": "json_schema", "json_schema": {"schema": {"type": "text"}}}),
            0.0,
        ))
        .await
        .unwrap_err();
    assert_eq!(err.kind, branch_core::model::ModelErrorKind::BadRequest);
    assert!(err.to_string().contains("#/type"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_seed_same_text() {
    let Some((_turn, model)) = model().await else {
        return;
    };
    let request = |seed: u64| {
        ask("Write one sentence about the sea.")
            .with_field("temperature", 1.0)
            .with_field("seed", seed)
            .with_field("max_tokens", 24)
    };
    let a = model.chat(request(42)).await.unwrap().text;
    let b = model.chat(request(42)).await.unwrap().text;
    assert_eq!(a, b);
    assert!(!a.is_empty());
    let mut differs = false;
    for seed in 1..4 {
        differs |= model.chat(request(seed)).await.unwrap().text != a;
    }
    assert!(differs, "three other seeds all gave {a:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_chunks_concatenate_to_the_full_text() {
    let Some((_turn, model)) = model().await else {
        return;
    };
    let request = ask("List three colours.")
        .with_field("temperature", 0)
        .with_field("max_tokens", 40);
    let full = model.chat(request.clone()).await.unwrap();
    let mut stream = model.stream(request).await.unwrap();
    let mut text = String::new();
    let mut deltas = 0;
    let mut done = None;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        match chunk.kind {
            ChunkKind::Text => {
                assert!(chunk.is_delta);
                text.push_str(chunk.content.as_deref().unwrap());
                deltas += 1;
            }
            ChunkKind::Result => done = Some(chunk),
            other => panic!("unexpected chunk {other:?}"),
        }
    }
    assert_eq!(text, full.text);
    assert!(deltas > 3);
    let done = done.expect("a final result chunk");
    assert_eq!(done.metadata["done"], json!(true));
    assert_eq!(
        done.metadata["usage"]["completion_tokens"].as_u64(),
        full.usage.map(|u| u.completion_tokens)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_strings_and_budget_end_the_reply() {
    let Some((_turn, model)) = model().await else {
        return;
    };
    let base = ask("Count from 1 to 20, separated by commas.").with_field("temperature", 0);
    let full = model
        .chat(base.clone().with_field("max_tokens", 80))
        .await
        .unwrap();
    let stop = full.text.chars().skip(6).take(2).collect::<String>();
    let cut = model
        .chat(
            base.clone()
                .with_field("max_tokens", 80)
                .with_field("stop", json!([stop.clone()])),
        )
        .await
        .unwrap();
    assert_eq!(cut.finish_reason.as_deref(), Some("stop"));
    assert_eq!(cut.text, full.text[..full.text.find(&stop).unwrap()]);
    let short = model.chat(base.with_field("max_tokens", 3)).await.unwrap();
    assert_eq!(short.finish_reason.as_deref(), Some("length"));
    assert_eq!(short.usage.unwrap().completion_tokens, 3);
}

/// A greedy reply to `messages` and the prompt tokens it reused, with the
/// prompt cache on (`cache_prompt` true, the default) or off.
async fn greedy_turn(model: &LocalModel, messages: &[ChatMessage], cache: bool) -> (String, u64) {
    let request = ChatRequest::new(messages.to_vec())
        .with_field("temperature", 0)
        .with_field("max_tokens", 12)
        .with_field("cache_prompt", cache);
    let reply = model.chat(request).await.unwrap();
    let cached = reply.raw["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    (reply.text, cached)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_cache_gives_the_cold_reply_across_turns_divergence_and_cancellation() {
    let Some((_turn, model)) = model().await else {
        return;
    };
    let questions = [
        "Name a colour.",
        "Why is the sky that colour?",
        "Say it in five words.",
        "Thanks. One more fact?",
    ];
    let mut history = Vec::new();
    let mut reused = Vec::new();
    for q in questions {
        history.push(ChatMessage::user(q));
        let (warm, cached) = greedy_turn(&model, &history, true).await;
        let (cold, none) = greedy_turn(&model, &history, false).await;
        assert_eq!(warm, cold, "turn {}", history.len());
        assert_eq!(none, 0, "cache_prompt false evaluates the whole prompt");
        reused.push(cached);
        history.push(ChatMessage::assistant(warm));
    }
    // Every later turn starts from the one before: at least the previous
    // prompt is reused, so the reuse grows with the conversation.
    assert!(
        reused.windows(2).all(|w| w[1] > w[0]) && reused[1] > 20,
        "cached tokens per turn: {reused:?}"
    );

    // An edited first question diverges right after the system prompt.
    let mut edited = history.clone();
    edited[0] = ChatMessage::user("Name an animal.");
    let (warm, cached) = greedy_turn(&model, &edited, true).await;
    let (cold, _) = greedy_turn(&model, &edited, false).await;
    assert_eq!(warm, cold, "diverging prefix");
    assert!(
        cached > 0 && cached < reused[1],
        "diverged after {cached} tokens"
    );

    // Back to the original conversation (the other cached sequence), then
    // a turn whose stream is dropped after its first chunk: whatever it
    // left cached, the next call still gives the cold reply.
    history.push(ChatMessage::user("Tell me a long story about it."));
    let mut stream = model
        .stream(
            ChatRequest::new(history.clone())
                .with_field("max_tokens", 400)
                .with_field("ignore_eos", true)
                .with_field("temperature", 0),
        )
        .await
        .unwrap();
    assert_eq!(stream.next().await.unwrap().unwrap().kind, ChunkKind::Text);
    drop(stream);
    let deadline = Instant::now() + Duration::from_secs(120);
    while model.is_generating() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (warm, cached) = greedy_turn(&model, &history, true).await;
    let (cold, _) = greedy_turn(&model, &history, false).await;
    assert_eq!(warm, cold, "after a dropped stream");
    assert!(cached > *reused.last().unwrap(), "reused {cached}");

    // Two conversations at once: each gets its own cold reply.
    let other = vec![ChatMessage::user("Count to three.")];
    let (a, b) = tokio::join!(
        greedy_turn(&model, &history, true),
        greedy_turn(&model, &other, true)
    );
    assert_eq!(a.0, warm);
    assert_eq!(b.0, greedy_turn(&model, &other, false).await.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_stream_stops_generation() {
    let Some((_turn, model)) = model().await else {
        return;
    };
    let before = model.tokens_generated();
    let mut stream = model
        .stream(
            ask("Tell me a long story.")
                .with_field("max_tokens", 1500)
                .with_field("ignore_eos", true)
                .with_field("seed", 1),
        )
        .await
        .unwrap();
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first.kind, ChunkKind::Text);
    drop(stream);
    // Generation notices the closed channel after at most a few tokens;
    // the deadline only bounds a broken implementation.
    let deadline = Instant::now() + Duration::from_secs(120);
    while model.is_generating() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!model.is_generating());
    let made = model.tokens_generated() - before;
    assert!(
        made < 100,
        "{made} tokens generated after the stream was dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_round_trips_and_connects() {
    let config = local::local_config(local::DEFAULT_MODEL).unwrap();
    let dict = config.to_dict(false, false);
    assert_eq!(dict["endpoint"]["config"]["provider"], "local");
    assert_eq!(
        dict["endpoint"]["config"]["kwargs"]["model"],
        local::DEFAULT_MODEL
    );
    assert!(dict["endpoint"]["config"].get("base_url").is_none());
    assert_eq!(dict["endpoint"]["config"]["allow_local_network"], false);
    let back = ModelConfig::from_dict(&dict).unwrap();
    assert_eq!(back, config);
    assert_eq!(
        ModelConfig::new("embedded", "x.gguf").unwrap().provider(),
        "embedded"
    );
    let Some((_turn, _)) = model().await else {
        return;
    };
    let held: Arc<dyn ChatModel> = Arc::new(back);
    let connected = branch_models::connect(&held).unwrap();
    assert!(connected.is_connected());
    let reply = connected
        .chat(
            ask("Say hello.")
                .with_field("max_tokens", 8)
                .with_field("seed", 3),
        )
        .await
        .unwrap();
    assert!(!reply.text.is_empty());
}

#[test]
fn missing_model_names_the_fetch_command() {
    let err = local::resolve_model_path("/nonexistent/dir/model.gguf").unwrap_err();
    let message = err.to_string();
    assert!(message.contains("cargo xtask fetch-model"), "{message}");
    assert!(message.contains("/nonexistent/dir/model.gguf"));
}

/// The greedy reply of this build's forward pass: a change that moves any
/// logit enough to flip one argmax fails here. One recording per weight
/// format, the prompt being `bench_local`'s. Recorded again when the
/// prompt's attention became our own (`local/attend.rs`, fused
/// multiply-adds, a position's output the same bits whether a prompt or a
/// decode step evaluates it). Before, the stored format's reply (the
/// default) was also llama.cpp's greedy reply token for token; it now
/// leaves it after "As the last light" ("of" where llama.cpp takes "in", a
/// near tie: llama.cpp's own attention reads its cache in f16). Recorded
/// again when the softmax's exponential became our own (`exp_nonpositive`,
/// within an ulp of libm's): the stored format's reply left the previous
/// recording after "last words: \"", and the Q8_0 reply now opens as
/// llama.cpp's does ("As the last light in the island").
const RECORDED_GREEDY_Q8_0: &str = "As the last light in the island's crumbling lighthouse crept across the horizon, the sound of the lapping waves against the weathered stone seemed to whisper a message: \"Lost in the depths.\" The words seemed to dance across the";
const RECORDED_GREEDY_AS_STORED: &str = "As the last light of the day extinguished, the creaking of the old wooden lighthouse creaked in the gentle breeze, and the sound of the wind carried the message: \"Lighthouse keeper's last words: \"The sea is the only";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greedy_replies_equal_the_recorded_ones_in_both_weight_formats() {
    let Some((_turn, model)) = model().await else {
        return;
    };
    let request = || {
        ChatRequest::new(vec![ChatMessage::user(
            "Write a short story about a lighthouse keeper who finds a message in a bottle.",
        )])
        .with_field("temperature", 0)
        .with_field("max_tokens", 48)
        .with_field("ignore_eos", true)
        .with_field("cache_prompt", false)
    };
    let stored = model.chat(request()).await.unwrap();
    let q8 = model
        .clone()
        .with_weight_format(local::WeightFormat::Q8_0)
        .chat(request())
        .await
        .unwrap();
    assert_eq!(q8.text, RECORDED_GREEDY_Q8_0, "Q8_0 reply");
    assert_eq!(stored.text, RECORDED_GREEDY_AS_STORED, "as-stored reply");
}

/// A span's name and its recorded fields, in the order they were recorded.
type SpanRecord = (String, Vec<(String, String)>);

/// The names and recorded fields of every span opened on this thread.
#[derive(Clone, Default)]
struct Spans(Arc<std::sync::Mutex<Vec<SpanRecord>>>);

struct Fields<'a>(&'a mut Vec<(String, String)>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
}

impl<S> tracing_subscriber::Layer<S> for Spans
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut fields = vec![("span.id".to_owned(), id.into_u64().to_string())];
        attrs.record(&mut Fields(&mut fields));
        let name = attrs.metadata().name().to_owned();
        self.0.lock().unwrap().push((name, fields));
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let key = id.into_u64().to_string();
        let mut spans = self.0.lock().unwrap();
        if let Some((_, fields)) = spans
            .iter_mut()
            .find(|(_, f)| f.iter().any(|(k, v)| k == "span.id" && *v == key))
        {
            values.record(&mut Fields(fields));
        }
    }
}

impl Spans {
    /// The last value of `field` on the `n`th `chat` span.
    fn chat_field(&self, n: usize, field: &str) -> Option<String> {
        let spans = self.0.lock().unwrap();
        let (_, fields) = spans.iter().filter(|(name, _)| name == "chat").nth(n)?;
        fields
            .iter()
            .rev()
            .find(|(k, _)| k == field)
            .map(|(_, v)| v.clone())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_call_opens_a_genai_chat_span_with_its_usage() {
    use tracing_subscriber::layer::SubscriberExt;
    let Some((_turn, model)) = model().await else {
        return;
    };
    let spans = Spans::default();
    let _default =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));
    let request = ask("Say hello.")
        .with_field("temperature", 0)
        .with_field("max_tokens", 8);
    let reply = model.chat(request.clone()).await.unwrap();
    let mut stream = model.stream(request).await.unwrap();
    while let Some(chunk) = stream.next().await {
        chunk.unwrap();
    }
    drop(stream);
    let usage = reply.usage.expect("the reply counts its tokens");
    for n in 0..2 {
        assert_eq!(
            spans.chat_field(n, "gen_ai.provider.name").as_deref(),
            Some("\"local\""),
            "span {n}"
        );
        assert_eq!(
            spans.chat_field(n, "gen_ai.usage.input_tokens"),
            Some(usage.prompt_tokens.to_string()),
            "span {n}"
        );
        assert_eq!(
            spans.chat_field(n, "gen_ai.usage.output_tokens"),
            Some(usage.completion_tokens.to_string()),
            "span {n}"
        );
    }
    assert_eq!(spans.chat_field(0, "gen_ai.request.stream"), None);
    assert_eq!(
        spans.chat_field(1, "gen_ai.request.stream").as_deref(),
        Some("true")
    );
    assert_eq!(spans.chat_field(2, "otel.name"), None, "one span per call");
}
