//! The properties the fuzz targets check, one function per parser of
//! untrusted bytes. Shared by the cargo-fuzz targets (nightly, libFuzzer)
//! and the stable smoke test `tests/fuzz_smoke.rs`, which replays the
//! seeds in `fuzz/seeds/` and mutations of them through the same
//! functions. Each function panics only when a property is broken.

#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::OnceLock;

use branch_actions::ArgSchema;
use branch_capabilities::{FieldSpec, Grant, extract_emissions, fenced_json_blocks};
use branch_core::json_repair::{parse_lenient, parse_truncated};
use branch_core::log::ApiCallHead;
use branch_core::message::{InstructionContent, MessageContent};
use branch_core::model::{ChatMessage, ChatModel, ChatRequest, ModelConfig, RequestBody};
use branch_core::model::{ChatResponse, ChunkKind, StreamAccumulator, api_call_execution};
use branch_core::{Branch, Message, Participant, Role, ToDictOptions};
use branch_core::{DataLogger, DataLoggerConfig, KeptJson, Log, ParsedJson};
use branch_mcp::{
    Address, AddressWarning, FieldKind, Form, MAX_ELICITATION_ID_BYTES, MAX_FORM_CHOICES,
    MAX_FORM_FIELDS, MAX_FORM_TEXT_BYTES, MAX_URL_BYTES, map_result, sanitize_name,
};
use branch_messages::{
    CompileOptions, RenderCache, ToolMode, compile_request, compile_request_cached,
};
use branch_models::IModel;
use branch_models::address_rules::classify;
use branch_models::dialect::Dialect;
use branch_models::dialect::openai_chat::plain_reply;
use branch_models::gguf::{GgufError, GgufHeader, parse_header, read_header};
use branch_models::guard::{check_host, check_ip};
use branch_models::json_grammar::Grammar;
use branch_models::sse_frame::{SseError, SseEvent, SseFramer};
use branch_operations::cli_stream::CliTurnReader;
use branch_session::{BranchStore, SqliteStore};
use serde_json::Value;
use uuid::Uuid;

/// Conversation documents: neither entry point panics on any bytes, both
/// take and refuse the same documents and read them alike, and a document
/// that loads is a fixed point after one normalisation:
/// `to_dict(from_dict(to_dict(b))) == to_dict(b)`.
pub fn branch_document(data: &[u8]) {
    let direct = Branch::from_json_slice(data);
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        assert!(direct.is_err(), "bytes that are not one JSON value loaded");
        return;
    };
    let (branch, direct) = match (Branch::from_dict(&value), direct) {
        (Ok(branch), Ok(direct)) => (branch, direct),
        (Err(_), Err(_)) => return,
        (a, b) => panic!(
            "one entry point refuses: from_dict {:?}, from_json_slice {:?}",
            a.err(),
            b.err()
        ),
    };
    let opts = ToDictOptions::default();
    let first = branch.to_dict(&opts).expect("a loaded branch serializes");
    // Alike but for what each reading gives where the document names
    // nothing (a fresh id, the current time).
    let read = direct.to_dict(&opts).expect("serializes");
    assert!(
        alike_but_minted(&read, &first, &String::from_utf8_lossy(data)),
        "the bytes and the parsed value read apart:\n{read}\n{first}"
    );
    let again = Branch::from_dict(&first).expect("a written branch loads");
    let second = again.to_dict(&opts).expect("a reloaded branch serializes");
    assert_eq!(first, second, "to_dict / from_dict is not a fixed point");
    let bytes = branch
        .to_json_vec(&opts)
        .expect("a loaded branch writes bytes");
    let from_bytes = Branch::from_json_slice(&bytes).expect("written bytes load");
    assert_eq!(
        from_bytes.to_dict(&opts).expect("serializes"),
        first,
        "the bytes entry point disagrees with from_dict"
    );
}

/// `a` and `b` are equal, but for what each reading of a document gives
/// where the document names nothing: a fresh id (one `input` does not
/// hold) or a `created_at` of the current time.
fn alike_but_minted(a: &Value, b: &Value, input: &str) -> bool {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let minted_time = |v: &Value| v.as_f64().is_some_and(|t| (now - t).abs() < 600.0);
    match (a, b) {
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| alike_but_minted(a, b, input))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter().zip(b).all(|((ka, a), (kb, b))| {
                    ka == kb
                        && (alike_but_minted(a, b, input)
                            || ka == "created_at" && minted_time(a) && minted_time(b))
                })
        }
        (Value::String(a), Value::String(b)) if a != b => [a, b]
            .iter()
            .all(|s| Uuid::parse_str(s).is_ok() && !input.contains(s.as_str())),
        (a, b) => a == b,
    }
}

/// A stored history, however hostile, is compiled by the render cache as
/// it is without one. For the document's history and a new instruction,
/// then after a turn is added, then after an edit of one message, with a
/// context block that changes each time (or none) and either way of
/// calling tools: the cached compilation (first, and again resumed from
/// the settled history it keeps) and the uncached one give the same
/// messages or the same error, and each wire protocol's body of the cached
/// request (chat completions' copies the kept and settled JSON) is, byte
/// for byte and in its token estimate, the body written afresh from the
/// uncached messages, and one JSON value.
pub fn branch_request(data: &[u8]) {
    let Ok(mut branch) = Branch::from_json_slice(data) else {
        return;
    };
    let mut cache = RenderCache::default();
    // The document's length picks the way tools are called and whether a
    // context provider's block goes with the system text; the block
    // changes from step to step.
    let native = data.len() % 5 == 0;
    let with_context = data.len() % 2 == 0;
    for step in 0..3 {
        let blocks = [format!("context {}", (data.len() + step) % 3)];
        let opts = CompileOptions {
            context_blocks: if with_context { &blocks } else { &[] },
            tool_mode: if native {
                ToolMode::Native
            } else {
                ToolMode::Prompt
            },
            ..CompileOptions::default()
        };
        let current = InstructionContent {
            instruction: Some(Value::String(format!("question {step}"))),
            ..Default::default()
        };
        let cold = compile_request(branch.msgs(), &current, &opts);
        for _resumed in 0..2 {
            let cached = compile_request_cached(branch.msgs(), &current, &opts, &mut cache);
            let (cold, cached) = match (&cold, cached) {
                (Ok(cold), Ok(cached)) => (cold, cached),
                (Err(a), Err(b)) => {
                    assert_eq!(
                        a.to_string(),
                        b.to_string(),
                        "the two compilations fail apart"
                    );
                    continue;
                }
                (a, b) => panic!("one compilation fails: {a:?} against {b:?}"),
            };
            let afresh: Vec<ChatMessage> = cold.iter().cloned().map(ChatMessage::from).collect();
            let kept: Vec<&ChatMessage> = cached.messages.iter().map(|m| &**m).collect();
            assert_eq!(kept, afresh.iter().collect::<Vec<_>>(), "step {step}");
            let plain = ChatRequest::new(afresh);
            for model in request_models() {
                match (model.request_body(&cached), model.request_body(&plain)) {
                    (Ok(copied), Ok(written)) => {
                        assert_eq!(copied.bytes(), written.bytes(), "step {step}");
                        assert_eq!(copied.counted(), written.counted(), "step {step}");
                        serde_json::from_slice::<Value>(copied.bytes())
                            .expect("a body is one JSON value");
                    }
                    (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                    (a, b) => panic!("one body fails: {a:?} against {b:?}"),
                }
            }
        }
        match step {
            // The turn is recorded: its instruction and a reply.
            0 => {
                branch.msgs_mut().add_message(Message::instruction(current));
                branch
                    .msgs_mut()
                    .add_message(Message::assistant(format!("reply {step} \"é\"")));
            }
            // One message, chosen by the document's length, is edited.
            1 => {
                let order = &branch.msgs().progression().order;
                let Some(&id) = order.get(data.len() % order.len().max(1)) else {
                    return;
                };
                if let Some(m) = branch.msgs_mut().get_mut(&id) {
                    match &mut m.content {
                        MessageContent::Instruction(c) => c.instruction = Some("edited".into()),
                        MessageContent::AssistantResponse(c) => c.assistant_response.push('!'),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
}

/// A model of each wire protocol (chat completions, whose bodies copy
/// kept JSON; Anthropic Messages; OpenAI Responses), whose bodies
/// `branch_request` compares, made once (each holds an HTTP client;
/// nothing is sent).
fn request_models() -> &'static [IModel] {
    static MODELS: OnceLock<Vec<IModel>> = OnceLock::new();
    MODELS.get_or_init(|| {
        let responses = ModelConfig::builder()
            .provider("openai")
            .endpoint("responses")
            .model("gpt-4.1-mini")
            .build();
        [
            ModelConfig::new("openai", "gpt-4.1-mini"),
            ModelConfig::new("anthropic", "claude-sonnet-4-5"),
            responses,
        ]
        .into_iter()
        .map(|config| {
            let config = config.expect("a known model");
            IModel::with_api_key(config, "fuzz").expect("a model without a network")
        })
        .collect()
    })
}

/// Fenced JSON in a model's reply, which capability grants read: any text
/// is handled, the fast scanner finds exactly the blocks the obvious one
/// does, and what is extracted holds only the grant's fields.
pub fn extract(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let fast: Vec<&str> = fenced_json_blocks(text).collect();
    assert_eq!(fast, naive_fenced_blocks(text));
    let _ = branch_capabilities::parse_lenient(text);
    let grant = extract_grant();
    let ex = extract_emissions(text, grant, "fuzz");
    for b in &ex.bundles {
        assert!(b.keys().all(|k| k == "note" || k == "score" || k == "todo"));
    }
}

/// The blocks between a "```json" fence and the next "```", trimmed,
/// found the obvious way.
fn naive_fenced_blocks(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("```json") {
        let after = &rest[i + 7..];
        match after.find("```") {
            Some(j) => {
                out.push(after[..j].trim());
                rest = &after[j + 3..];
            }
            None => break,
        }
    }
    out
}

/// The grant `extract` reads for, made once.
fn extract_grant() -> &'static Grant {
    static GRANT: OnceLock<Grant> = OnceLock::new();
    GRANT.get_or_init(|| {
        Grant::builder()
            .name("Fuzz")
            .field(FieldSpec::string("note"))
            .field(FieldSpec::integer("score"))
            .field(FieldSpec::array(
                "todo",
                serde_json::json!({"type": "string"}),
            ))
            .build()
            .expect("static grant is valid")
    })
}

/// A hostile MCP server's tool definition and call result (a `tools/list`
/// entry, a `tools/call` result, or an object holding both as `tool` and
/// `result`): the tool's exposed name has the shape providers accept, its
/// schemas compile or are refused without a panic, and the result maps to
/// what the conversation keeps within the result cap, a failure's text
/// included (cut where the cap falls, on a character boundary).
pub fn mcp_tool(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let mut output = None;
    let tool = value.get("tool").unwrap_or(&value);
    if let Ok(tool) = serde_json::from_value::<rmcp::model::Tool>(tool.clone()) {
        let name = sanitize_name(&tool.name);
        assert!(
            (1..=64).contains(&name.len())
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
            "{name:?}"
        );
        let _ = ArgSchema::from_value(Value::Object((*tool.input_schema).clone()));
        output = tool
            .output_schema
            .and_then(|s| ArgSchema::from_value(Value::Object((*s).clone())).ok());
    }
    let result = value.get("result").unwrap_or(&value);
    let Ok(result) = serde_json::from_value::<rmcp::model::CallToolResult>(result.clone()) else {
        return;
    };
    for cap in [0, 24, 4096] {
        match map_result(&result, output.as_ref(), cap) {
            Ok(kept) => {
                let size = serde_json::to_vec(&kept).map_or(usize::MAX, |v| v.len());
                assert!(
                    size <= cap,
                    "a result of {size} bytes kept under a cap of {cap}"
                );
            }
            Err(text) => assert!(
                text.len() <= cap.max(MCP_FAILURE_ROOM) + MCP_CUT.len(),
                "a failure of {} bytes under a cap of {cap}: {text:?}",
                text.len()
            ),
        }
    }
}

/// A hostile MCP server's question to our person (an elicitation's
/// `requestedSchema`, read by `rmcp` as our client reads it, or an object
/// holding it as `schema` beside an `answer`): a form that is read stays
/// within the caps (fields, choices, texts), each default it offers fits
/// its field, an answer of the defaults fits the form exactly when every
/// required field has one, and an answer the form takes holds only its
/// fields, each of its kind.
pub fn mcp_elicitation(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    if let Some(Value::String(url)) = value.get("url") {
        let id = value.get("id").and_then(Value::as_str).unwrap_or("");
        mcp_address(url, id);
        return;
    }
    let schema = value.get("schema").unwrap_or(&value);
    let Ok(schema) = serde_json::from_value::<rmcp::model::ElicitationSchema>(schema.clone())
    else {
        return;
    };
    let Ok(schema) = serde_json::to_value(&schema) else {
        return;
    };
    let Ok(form) = Form::from_schema(&schema) else {
        return;
    };
    // A cut text ends with its mark.
    let text_cap = MAX_FORM_TEXT_BYTES + "… (cut)".len();
    assert!(form.fields.len() <= MAX_FORM_FIELDS);
    let mut defaults = serde_json::Map::new();
    for f in &form.fields {
        assert!(
            f.title.len() <= text_cap,
            "a title of {} bytes",
            f.title.len()
        );
        assert!(f.description.as_ref().is_none_or(|d| d.len() <= text_cap));
        if let FieldKind::Choice(options) | FieldKind::Choices { options, .. } = &f.kind {
            assert!((1..=MAX_FORM_CHOICES).contains(&options.len()));
            assert!(options.iter().all(|c| c.title.len() <= text_cap));
        }
        if let Some(d) = &f.default {
            assert!(f.check(d).is_ok(), "a default the field refuses: {d}");
            defaults.insert(f.name.clone(), d.clone());
        }
    }
    let complete = form
        .fields
        .iter()
        .all(|f| !f.required || f.default.is_some());
    assert_eq!(form.check(&defaults).is_ok(), complete, "{defaults:?}");
    if let Some(Value::Object(answer)) = value.get("answer") {
        if form.check(answer).is_ok() {
            for (k, v) in answer {
                let field = form.fields.iter().find(|f| &f.name == k);
                assert!(field.is_some_and(|f| f.check(v).is_ok()), "{k}: {v}");
            }
        }
    }
}

/// An address a server asks the person to open (URL mode), read by
/// `Address::parse`: one it takes is shown as plain ASCII without controls
/// or spaces, on https or http (http named as unencrypted), with its host
/// inside it and no user name; a longer one than the cap is declined.
fn mcp_address(url: &str, id: &str) {
    let Ok(a) = Address::parse(url, id) else {
        return;
    };
    assert!(url.len() <= MAX_URL_BYTES);
    assert!(
        a.url.bytes().all(|b| b.is_ascii_graphic()),
        "shown with a control, a space or a non-ASCII byte: {:?}",
        a.url
    );
    let http = a.url.starts_with("http://");
    assert!(http || a.url.starts_with("https://"), "{}", a.url);
    assert_eq!(http, a.warnings.contains(&AddressWarning::Unencrypted));
    assert!(!a.host.is_empty());
    let authority = a.url.split('/').nth(2).unwrap_or("");
    assert!(!authority.contains('@'), "a user name in {}", a.url);
    assert!(
        authority.starts_with(&a.host),
        "{} not the host of {}",
        a.host,
        a.url
    );
    assert!(a.id.len() <= MAX_ELICITATION_ID_BYTES + "… (cut)".len());
}

/// Room a tool's failure text may take below a smaller result cap: the
/// fixed explanations `map_result` gives (the cap's own, a missing
/// structure's) fit in it; any text from the server is cut at the cap.
const MCP_FAILURE_ROOM: usize = 512;

/// What `map_result` appends where it cuts a failure's text.
const MCP_CUT: &str = " [cut at the result cap]";

/// Stored conversations: a branch read from any document is saved to the
/// SQLite store and loads back as itself (its `to_dict`), and a save under
/// an id already stored replaces what was there: the same branch without
/// its last message, saved next, loads without it. One store (a file of
/// this process) serves every input, so inputs that share an id also
/// replace each other's rows.
pub fn store_roundtrip(data: &[u8]) {
    let Ok(branch) = Branch::from_json_slice(data) else {
        return;
    };
    let Ok(want) = branch.to_dict(&ToDictOptions::default()) else {
        return;
    };
    let (runtime, store) = sqlite_store();
    runtime.block_on(async {
        saved_loads_as(
            store,
            &branch,
            &want,
            "the store did not give back what was saved",
        )
        .await;
        // A turn appended to the stored branch without it loads as the
        // whole, where the turn's messages end the order too.
        if let Some((head_doc, turn)) = split_last_turn(&want, 2) {
            if let Ok(head) = Branch::from_dict(&head_doc) {
                store
                    .save(&head)
                    .await
                    .expect("a branch that loads is saved");
                store
                    .append_turn(branch.id(), &turn)
                    .await
                    .expect("a turn of messages that load is appended");
                loads_as(
                    store,
                    branch.id(),
                    &want,
                    "a head and a turn did not load as the whole",
                )
                .await;
                let seq = u64::try_from(head.messages().len()).expect("a count");
                let since = store
                    .load_since(branch.id(), seq)
                    .await
                    .expect("load_since");
                let since: Vec<Value> = since.messages.iter().map(|m| stored(&m.message)).collect();
                let stored_turn: Vec<Value> = turn.iter().map(stored).collect();
                assert_eq!(
                    since, stored_turn,
                    "load_since did not give the appended turn"
                );
                // The same turn recorded with the whole branch's head
                // (every skeleton entry but the piles replaced in place)
                // and logs (those the stored head lacks appended or
                // replaced) loads as the whole; the stored head lacks the
                // last log too, if there is one, and has another name and
                // user.
                let mut head = without_last(&head_doc, "logs")
                    .and_then(|d| Branch::from_dict(&d).ok())
                    .unwrap_or(head);
                head.set_name(Some("a name the whole branch replaces".into()));
                head.set_user(Some("a user the whole branch replaces".into()));
                store
                    .save(&head)
                    .await
                    .expect("a branch that loads is saved");
                let (_, version) = store
                    .load_versioned(branch.id())
                    .await
                    .expect("a saved branch loads");
                store
                    .record_turn_at(&branch, version, &turn)
                    .await
                    .expect("a turn, its metadata and its logs are recorded");
                loads_as(
                    store,
                    branch.id(),
                    &want,
                    "a head and a recorded turn did not load as the whole",
                )
                .await;
            }
        }
        let Some(shorter) = without_last_message(&want) else {
            return;
        };
        let Ok(shorter) = Branch::from_dict(&shorter) else {
            return;
        };
        let Ok(want) = shorter.to_dict(&ToDictOptions::default()) else {
            return;
        };
        saved_loads_as(
            store,
            &shorter,
            &want,
            "a save left rows of the one it replaced",
        )
        .await;
    });
}

/// Saves `branch`, then checks that its id loads as `want`.
async fn saved_loads_as(store: &SqliteStore, branch: &Branch, want: &Value, why: &str) {
    store
        .save(branch)
        .await
        .expect("a branch that loads is saved");
    loads_as(store, branch.id(), want, why).await;
}

/// Checks that the branch stored under `id` loads as `want`.
async fn loads_as(store: &SqliteStore, id: Uuid, want: &Value, why: &str) {
    let back = store.load(id).await.expect("a saved branch loads");
    let got = back.to_dict(&ToDictOptions::default()).expect("to_dict");
    assert_eq!(&got, want, "{why}");
}

/// The `to_dict` document without its last `n` messages, and those
/// messages: `None` unless it has more than `n`, its order is its
/// messages' own and they all read.
fn split_last_turn(doc: &Value, n: usize) -> Option<(Value, Vec<Message>)> {
    let mut head = doc.clone();
    let pile = head.get_mut("messages")?;
    let ids: Vec<Value> = pile
        .get("collections")?
        .as_array()?
        .iter()
        .map(|m| m.get("id").cloned())
        .collect::<Option<_>>()?;
    if ids.len() <= n || pile.pointer("/progression/order")?.as_array()? != &ids {
        return None;
    }
    let items = pile.get_mut("collections")?.as_array_mut()?;
    let turn = items.split_off(items.len() - n);
    let order = pile.pointer_mut("/progression/order")?.as_array_mut()?;
    order.truncate(order.len() - n);
    let turn = turn
        .iter()
        .map(|m| Message::from_value(m).ok())
        .collect::<Option<Vec<_>>>()?;
    Some((head, turn))
}

/// The `to_dict` document without the last message of its pile (and
/// without its id in the pile's order); `None` when it has none.
fn without_last_message(doc: &Value) -> Option<Value> {
    without_last(doc, "messages")
}

/// `doc` without the last item of its pile `key` (`messages` or `logs`).
fn without_last(doc: &Value, key: &str) -> Option<Value> {
    let mut doc = doc.clone();
    let pile = doc.get_mut(key)?;
    let last = pile.get_mut("collections")?.as_array_mut()?.pop()?;
    let id = last.get("id")?.clone();
    if let Some(order) = pile
        .pointer_mut("/progression/order")
        .and_then(Value::as_array_mut)
    {
        order.retain(|o| *o != id);
    }
    Some(doc)
}

/// This process's runtime and store, opened once in the temporary
/// directory (in memory where `/dev/shm` exists).
fn sqlite_store() -> &'static (tokio::runtime::Runtime, SqliteStore) {
    static STORE: OnceLock<(tokio::runtime::Runtime, SqliteStore)> = OnceLock::new();
    STORE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let store = runtime
            .block_on(SqliteStore::open(sqlite_store_path()))
            .expect("the store opens");
        (runtime, store)
    })
}

/// Where this process keeps its store.
fn sqlite_store_path() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    };
    dir.join(format!("lionagi-fuzz-store-{}.sqlite", std::process::id()))
}

/// Removes this process's store files (the smoke test's end, passed or
/// not).
pub fn remove_sqlite_store() {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut file = sqlite_store_path().into_os_string();
        file.push(suffix);
        let _ = std::fs::remove_file(file);
    }
}

/// A CLI agent's `stream-json` output, one event a line: no line panics
/// the reader; every response answers a request made earlier in the turn,
/// which names it back, and no request is answered twice; a line only
/// appends messages or links a request to its new response; the replies'
/// text is no longer than the output it came from; and every message of a
/// finished turn reads back from its stored form as itself.
pub fn cli_stream(data: &[u8]) {
    let branch = Uuid::from_u128(7);
    let mut reader = CliTurnReader::new(branch, Participant::Role(Role::User));
    let mut before: Vec<Value> = Vec::new();
    for line in data.split(|&b| b == b'\n') {
        let Ok(line) = std::str::from_utf8(line) else {
            continue;
        };
        if let Err(e) = reader.read_line(line) {
            let room = branch_operations::limits::MAX_CLI_ERROR_BYTES + 64;
            assert!(
                e.to_string().len() <= room,
                "an error of {} bytes",
                e.to_string().len()
            );
            return;
        }
        let now: Vec<Value> = reader.messages().iter().map(stored).collect();
        assert!(now.len() >= before.len(), "a line removed a message");
        for (old, new) in before.iter().zip(&now) {
            if old != new {
                let mut linked = old.clone();
                linked["content"]["action_response_id"] =
                    new["content"]["action_response_id"].clone();
                assert!(
                    old["content"]["action_response_id"].is_null() && &linked == new,
                    "a line changed an earlier message: {old} -> {new}"
                );
            }
        }
        cli_links_are_mutual(&now);
        before = now;
    }
    // The result's text is kept trimmed (an agent call's reply compares it
    // with its last text block).
    if let Some(r) = reader.result_text() {
        assert_eq!(r, r.trim(), "a result text kept untrimmed");
    }
    let Ok(turn) = reader.finish(Value::Null) else {
        // Only the message cap refuses a finish, and no input of a fuzz
        // run's size reaches it.
        panic!("a turn under the message cap did not finish");
    };
    let all: Vec<Value> = turn.messages.iter().map(stored).collect();
    cli_links_are_mutual(&all);
    let text: usize = turn
        .messages
        .iter()
        .filter_map(Message::as_assistant_text)
        .map(str::len)
        .sum();
    assert!(
        text <= data.len(),
        "{text} bytes of reply from {} of output",
        data.len()
    );
    for (m, v) in turn.messages.iter().zip(&all) {
        let back = Message::from_value(v).expect("a recorded message reads back");
        assert_eq!(&stored(&back), v, "{:?}", m.kind());
    }
}

fn stored(m: &Message) -> Value {
    m.to_value().expect("a message the reader built is stored")
}

fn cli_links_are_mutual(messages: &[Value]) {
    let at = |id: &Value| messages.iter().position(|m| &m["id"] == id);
    let mut answered = std::collections::HashSet::new();
    for (i, m) in messages.iter().enumerate() {
        let content = &m["content"];
        if let Some(req) = content.get("action_request_id").filter(|v| !v.is_null()) {
            let r = at(req).expect("a response answers a request of the turn");
            assert!(r < i, "a response before its request");
            assert_eq!(messages[r]["content"]["action_response_id"], m["id"]);
            assert!(answered.insert(r), "a request answered twice");
        }
        if let Some(res) = content.get("action_response_id").filter(|v| !v.is_null()) {
            let r = at(res).expect("a request names a response of the turn");
            assert_eq!(&messages[r]["content"]["action_request_id"], &m["id"]);
        }
    }
}

/// The JSON repair: a result is always an object or an array, and text
/// that already is one is returned unchanged.
pub fn json_repair(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for parsed in [parse_lenient(text), parse_truncated(text)]
        .into_iter()
        .flatten()
    {
        assert!(parsed.is_object() || parsed.is_array(), "{parsed}");
    }
    if let Ok(strict @ (Value::Object(_) | Value::Array(_))) = serde_json::from_str::<Value>(text) {
        assert_eq!(parse_lenient(text).as_ref(), Some(&strict));
        assert_eq!(parse_truncated(text).as_ref(), Some(&strict));
    }
}

/// Tool-call arguments: accepted exactly when the text is a JSON object
/// (or blank, or `null`) within the cap, never repaired into something
/// the model did not send; a refusal is a bounded message; the verbs'
/// readers agree with it.
pub fn tool_arguments(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = branch_actions::parse_arguments(text);
    let strict = serde_json::from_str::<Value>(text);
    match &parsed {
        Ok(args) => {
            if !text.trim().is_empty() {
                match strict.as_ref().expect("accepted text is JSON") {
                    Value::Object(m) => assert_eq!(m, args),
                    Value::Null => assert!(args.is_empty()),
                    other => panic!("accepted a non-object: {other}"),
                }
            }
        }
        Err(reason) => {
            assert!(reason.len() < 2048, "an unbounded refusal");
            let oversized = text.len() > branch_actions::limits::MAX_ARGUMENTS_BYTES;
            assert!(
                oversized || !matches!(strict, Ok(Value::Object(_)) | Ok(Value::Null)),
                "refused a JSON object: {reason}"
            );
        }
    }
    if let Ok(args) = &parsed {
        // Checked against alternatives, as pydantic's optional fields are
        // written: a refusal names a place in the arguments.
        static SCHEMA: OnceLock<ArgSchema> = OnceLock::new();
        let schema = SCHEMA.get_or_init(|| {
            ArgSchema::from_value(serde_json::json!({"type": "object", "properties": {
                "n": {"anyOf": [{"type": "number", "maximum": 1}, {"type": "null"}]},
                "items": {"type": "array", "items": {"oneOf": [
                    {"type": "object", "required": ["role"],
                     "properties": {"role": {"anyOf": [{"type": "string"}, {"type": "null"}]}}},
                    {"type": "string"}]}}}}))
            .expect("the schema compiles")
        });
        if let Err(branch_core::ToolError::InvalidArguments { path, .. }) =
            schema.validate(&Value::Object(args.clone()))
        {
            assert!(path.starts_with('$'), "{path}");
        }
    }
    let call = branch_actions::ToolCall::from_text("f", text);
    assert_eq!(call.malformed.is_some(), parsed.is_err());
    if call.malformed.is_some() {
        assert!(call.arguments.is_empty(), "invented arguments");
    }
    let request = serde_json::json!({"function": "f", "arguments": text});
    let from_request = branch_operations::tool_call_from_value(&request).expect("a string is read");
    assert_eq!(from_request, call);
    // Free text a model wrote (the structured path's extraction).
    let _ = branch_operations::fuzzy::extract_json(text);
}

/// The constrained-decoding grammar: the input is a schema, a zero byte,
/// then a document. Compiling never panics; feeding the document whole
/// or byte by byte gives the same state; `accepts` agrees with `feed`;
/// and a document the grammar says is complete is JSON. With no zero
/// byte the whole input is a document for the any-object grammar.
pub fn json_grammar(data: &[u8]) {
    let (grammar, doc) = match data.iter().position(|&b| b == 0) {
        Some(i) => {
            let Ok(schema) = serde_json::from_slice::<Value>(&data[..i]) else {
                return;
            };
            let Ok(g) = Grammar::compile(&schema) else {
                return;
            };
            (g, &data[i + 1..])
        }
        None => (Grammar::any_object(), data),
    };
    let start = grammar.start();
    let mut whole = start.clone();
    let whole_ok = whole.feed(&grammar, doc);
    assert_eq!(start.accepts(&grammar, doc), whole_ok);
    let mut stepwise = start.clone();
    let mut step_ok = true;
    for b in doc {
        if !stepwise.feed(&grammar, std::slice::from_ref(b)) {
            step_ok = false;
            break;
        }
    }
    assert_eq!(whole_ok, step_ok, "whole and byte-wise feeding disagree");
    if !whole_ok {
        assert!(whole.is_dead());
        return;
    }
    assert_eq!(whole, stepwise);
    assert!(!whole.is_dead());
    if whole.is_complete() {
        assert!(whole.can_end());
    }
    if whole.can_end() {
        if let Err(e) = serde_json::from_slice::<Value>(doc) {
            // serde_json refuses numbers beyond f64 and lone surrogate
            // escapes; the JSON grammar (RFC 8259) allows both.
            let why = e.to_string();
            assert!(
                why.contains("number out of range") || why.contains("surrogate"),
                "the grammar accepted text that is not JSON: {e}: {:?}",
                String::from_utf8_lossy(doc)
            );
        }
    }
}

/// Small caps for the SSE framer, so the cap paths are reached.
const SSE_FRAME_LINE: usize = 256;
const SSE_FRAME_EVENT: usize = 512;

/// Frames `chunks` in order, as a stream delivers them.
fn frame_in_chunks(chunks: &[&[u8]]) -> Result<Vec<SseEvent>, SseError> {
    let mut f = SseFramer::with_limits(SSE_FRAME_LINE, SSE_FRAME_EVENT);
    let mut out = Vec::new();
    for c in chunks {
        f.push(c, &mut out)?;
    }
    f.finish()?;
    Ok(out)
}
/// Fuzzes the SSE framer (`branch_models::sse_frame`): any bytes, cut into
/// chunks anywhere, give the same events (or the same error) as the whole
/// body at once; no event is larger than the cap; nothing panics. Small
/// caps so the cap paths are reached.
pub fn sse_frame(data: &[u8]) {
    let Some((&cut, body)) = data.split_first() else {
        return;
    };
    let whole = frame_in_chunks(&[body]);
    if let Ok(events) = &whole {
        for e in events {
            assert!(e.data.len() <= SSE_FRAME_EVENT);
        }
    }
    // One cut point, and a chunking into pieces of `cut % 7 + 1` bytes.
    let at = usize::from(cut).min(body.len());
    let split = frame_in_chunks(&[&body[..at], &body[at..]]);
    assert_eq!(whole, split, "cut at {at}");
    let pieces: Vec<&[u8]> = body.chunks(usize::from(cut % 7) + 1).collect();
    assert_eq!(whole, frame_in_chunks(&pieces), "pieces of {}", cut % 7 + 1);
}

/// Fuzzes the decoding of unstreamed provider replies of every dialect
/// (OpenAI chat completions, Anthropic Messages, OpenAI Responses, Gemini
/// and Ollama through their OpenAI-compatible shape): any bytes that parse
/// as JSON are mapped to a `ChatResponse` (text, tool calls, usage, finish
/// reason) and an API-call log record without a panic.
pub fn provider_reply(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        // A text checked without building its value parses, to that value.
        if let Ok(kept) = ParsedJson::check(text.to_owned()) {
            let parsed = serde_json::from_str::<Value>(text);
            assert_eq!(
                parsed.ok(),
                Some(kept.value()),
                "checked but not parsed: {text:?}"
            );
        }
        reply_log_dumps(text);
        // The plain reader of chat completions takes a reply only as the
        // general reading reads it.
        if let Ok(plain) = plain_reply::read(text.to_owned()) {
            let raw = serde_json::from_str::<Value>(text);
            let general = raw.map(ChatResponse::from_raw);
            assert_eq!(general.ok().as_ref(), Some(&plain), "{text:?}");
        }
    }
    let Ok(raw) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    for dialect in DIALECTS {
        let _ = dialect.reply_error_status(&raw, 200);
        let r = dialect.decode_reply(raw.clone());
        let _ = r.finish();
        let _ = r.tool_calls.len();
        let _ = r.usage.as_ref().map(|u| u.input_tokens());
        let _ = api_call_execution(Ok(&r), 0.0);
    }
}

/// A reply's API-call log, keeping the reply's text as received and the
/// same text as a request body (checked, not written, by us), dumps as one
/// line of JSON, and as one CSV row, that reads back as the log's content.
fn reply_log_dumps(text: &str) {
    let Ok(kept) = ParsedJson::check(text.to_owned()) else {
        return;
    };
    let response = ChatResponse::from_raw(kept.value());
    let Some(reply) = KeptJson::parsed(&["execution", "response"], &kept) else {
        return;
    };
    let body = RequestBody::from_json_bytes(text.as_bytes().to_vec(), 0);
    let log = Log::api_call(
        ApiCallHead::of(Ok(&response), 0.0, 0.0),
        vec![KeptJson::body(&["payload"], &body), reply],
    );
    let content = Value::Object(log.content().clone());
    let mut logger = DataLogger::new(DataLoggerConfig::default());
    logger.log(log);
    let dir = std::env::temp_dir();
    let name = format!("lionagi-fuzz-{}", std::process::id());
    for path in [
        dir.join(format!("{name}.jsonl")),
        dir.join(format!("{name}.csv")),
    ] {
        logger.dump_to(&path, false).expect("a log dumps");
        let written = std::fs::read_to_string(&path).expect("a dump is UTF-8");
        let _ = std::fs::remove_file(&path);
        let read = match written.split_once('\n') {
            // The header, then the row's content cell.
            Some(("id,created_at,content", row)) => {
                let (_, cell) = row.split_once(",\"").expect("a quoted content cell");
                let cell = cell.strip_suffix("\"\n").expect("one row");
                assert!(!cell.contains('\n'), "a row spans lines");
                serde_json::from_str::<Value>(&cell.replace("\"\"", "\""))
            }
            Some((line, "")) => serde_json::from_str::<Value>(line)
                .map(|v| v.get("content").cloned().unwrap_or_default()),
            _ => panic!("a dump of one log is not one line: {written:?}"),
        };
        assert_eq!(read.ok().as_ref(), Some(&content), "{path:?}: {written}");
    }
}

/// Every wire protocol's decoder.
const DIALECTS: [Dialect; 3] = [Dialect::OpenAiChat, Dialect::Anthropic, Dialect::Responses];

/// Fuzzes the decoding of streamed provider replies of every dialect
/// (OpenAI chat-completion chunks, Anthropic Messages events, OpenAI
/// Responses events): bytes are framed as SSE, each event normalised into
/// a chunk by each dialect's decoder (`Dialect::normalize_event`) and
/// folded into the whole reply (`StreamAccumulator`), as a streaming call
/// does. Nothing panics, and the accumulated text is exactly the text
/// chunks' content.
pub fn provider_stream(data: &[u8]) {
    let mut framer = SseFramer::new();
    let mut events = Vec::new();
    if framer.push(data, &mut events).is_err() {
        return;
    }
    for dialect in DIALECTS {
        let mut acc = StreamAccumulator::new();
        let mut text = String::new();
        for ev in &events {
            let name = if ev.event.is_empty() {
                "message"
            } else {
                ev.event.as_str()
            };
            let Ok(n) = dialect.normalize_event(name, &ev.data) else {
                continue;
            };
            if n.chunk.kind == ChunkKind::Text {
                text.push_str(n.chunk.content.as_deref().unwrap_or_default());
            }
            acc.push(&n.chunk);
            let _ = n.chunk.to_value();
        }
        let reply = acc.finish();
        assert_eq!(reply.text, text, "{dialect:?}");
    }
}

/// Fuzzes the local-network guard's decision: any host string is checked
/// without a panic; an IPv6 address embedding an IPv4 one through NAT64
/// (64:ff9b::/96) or 6to4 (2002::/16) is judged exactly like that IPv4
/// address; with the opt-in, only loopback addresses pass.
pub fn address_guard(data: &[u8]) {
    if let Ok(host) = std::str::from_utf8(data) {
        let _ = check_host(host, false);
        let _ = check_host(host, true);
    }
    if data.len() >= 4 {
        let v4 = Ipv4Addr::new(data[0], data[1], data[2], data[3]);
        let bits = u128::from(v4.to_bits());
        let nat64 = Ipv6Addr::from_bits(0x0064_ff9b_0000_0000_0000_0000_0000_0000 | bits);
        let six_to_four =
            Ipv6Addr::from_bits(0x2002_0000_0000_0000_0000_0000_0000_0000 | (bits << 80));
        let want = classify(IpAddr::V4(v4)).is_err();
        assert_eq!(classify(IpAddr::V6(nat64)).is_err(), want, "{nat64}");
        assert_eq!(
            classify(IpAddr::V6(six_to_four)).is_err(),
            want,
            "{six_to_four}"
        );
    }
    if data.len() >= 16 {
        let mut b = [0u8; 16];
        b.copy_from_slice(&data[..16]);
        let ip = IpAddr::V6(Ipv6Addr::from(b));
        let _ = classify(ip);
        assert_eq!(check_ip("h", ip, true).is_ok(), ip.is_loopback());
    }
}

/// GGUF headers (`branch_models::gguf`): no panic on any bytes; read as a
/// stream or as a slice they give the same header or both fail; an
/// accepted header has unique tensor names, each tensor's data on the
/// alignment, inside the file and of its type's size; the bytes cut short
/// anywhere give the same header or `Truncated`, never another header.
pub fn gguf_header(data: &[u8]) {
    let len = u64::try_from(data.len()).unwrap_or(u64::MAX);
    let parsed = parse_header(data, len);
    // Compared as text: a NaN value is not equal to itself.
    let same = |a: &GgufHeader, b: &GgufHeader| format!("{a:?}") == format!("{b:?}");
    match (&parsed, read_header(data, len)) {
        (Ok(a), Ok(b)) => assert!(same(a, &b), "the streamed header differs"),
        (Err(_), Err(_)) => {}
        (a, b) => panic!("slice {a:?}, stream {b:?}"),
    }
    let Ok(h) = parsed else {
        return;
    };
    assert!(h.alignment.is_power_of_two());
    assert_eq!(h.data_offset % h.alignment, 0);
    let mut names = std::collections::HashSet::new();
    for t in &h.tensors {
        assert!(names.insert(&t.name), "tensor {} twice", t.name);
        assert_eq!(t.offset % h.alignment, 0, "{}", t.name);
        let elems = t.dims.iter().product::<u64>();
        let ty = t.ggml_type;
        assert_eq!(elems % ty.block_elems(), 0, "{}", t.name);
        assert_eq!(t.byte_len, elems / ty.block_elems() * ty.block_bytes());
        let end = h.data_offset + t.offset + t.byte_len;
        assert!(end <= len, "{} ends at {end}, past {len}", t.name);
    }
    for cut in [0, data.len() / 2, data.len().saturating_sub(1)] {
        match parse_header(&data[..cut], len) {
            Ok(again) => assert!(same(&again, &h), "cut at {cut}"),
            Err(GgufError::Truncated) => {}
            Err(e) => panic!("cut at {cut}: {e}"),
        }
    }
}

/// A GGUF's tokenizer (`branch_models::local::tokenizer`), built from any
/// vocabulary, token types and merges, then fed any text and any token ids.
/// The input is a flag byte, then lines up to a NUL (`!x` a control token
/// `x`, `+a b` a merge, any other line an ordinary token, added after the
/// 256 byte symbols, some of which the flags leave out), then the text.
/// Nothing panics or loops; plain text never becomes a control token or an
/// id outside the vocabulary, and decodes back to itself less the bytes
/// the vocabulary lacks; text spelling no control token reads the same
/// with them recognised; a stream of any ids decodes, piece by piece,
/// to what they decode to at once.
#[cfg(feature = "embedded")]
pub fn gguf_tokenizer(data: &[u8]) {
    use branch_models::local::tokenizer::{PreTokenizer, StreamDecoder, Tokenizer};

    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let (spec, text) = match rest.iter().position(|&b| b == 0) {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (rest, &[][..]),
    };
    // GPT-2's byte symbols, written out here rather than taken from the
    // tokenizer: printable bytes stand for themselves, the others for
    // U+0100 onwards in byte order.
    let mut next = 0x100u32;
    let symbol = |b: u8, next: &mut u32| {
        if matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF) {
            char::from(b)
        } else {
            let c = char::from_u32(*next).unwrap_or('\0');
            *next += 1;
            c
        }
    };
    let symbols: Vec<String> = (0..=255u8)
        .map(|b| symbol(b, &mut next).to_string())
        .collect();
    // Every fourth byte, from one the flags pick, left out when bit 1 says.
    let left_out = |b: u8| flags & 2 != 0 && b % 4 == (flags >> 2) % 4;
    let (mut tokens, mut types) = (Vec::new(), Vec::new());
    for (b, s) in (0..=255u8).zip(&symbols) {
        if !left_out(b) {
            tokens.push(s.clone());
            types.push(1);
        }
    }
    let mut merges = Vec::new();
    for line in String::from_utf8_lossy(spec).split('\n') {
        if let Some(control) = line.strip_prefix('!') {
            tokens.push(control.to_owned());
            types.push(3);
        } else if let Some(merge) = line.strip_prefix('+') {
            merges.push(merge.to_owned());
        } else {
            tokens.push(line.to_owned());
            types.push(1);
        }
    }
    let pre = if flags & 1 == 0 {
        PreTokenizer::Gpt2
    } else {
        PreTokenizer::DigitsThenGpt2
    };
    let specials: Vec<String> = tokens
        .iter()
        .zip(&types)
        .filter(|(t, ty)| **ty == 3 && !t.is_empty())
        .map(|(t, _)| t.clone())
        .collect();
    // A line may spell a left-out symbol: the vocabulary has it then.
    let spelled: std::collections::HashSet<&str> = tokens.iter().map(String::as_str).collect();
    let has: Vec<bool> = symbols
        .iter()
        .map(|s| spelled.contains(s.as_str()))
        .collect();
    drop(spelled);
    let Ok(tok) = Tokenizer::new(tokens, &types, &merges, pre) else {
        return;
    };
    let vocab = tok.vocab_size();
    let text = String::from_utf8_lossy(text);
    let ids = tok.encode(&text);
    for &id in &ids {
        assert!(
            usize::try_from(id).is_ok_and(|i| i < vocab),
            "id {id} of {vocab}"
        );
        assert!(!tok.is_control(id), "plain text became control token {id}");
    }
    let kept: Vec<u8> = text.bytes().filter(|&b| has[usize::from(b)]).collect();
    assert_eq!(tok.decode(&ids), String::from_utf8_lossy(&kept), "{text:?}");
    let with_special = tok.encode_with_special(&text);
    for &id in &with_special {
        assert!(
            usize::try_from(id).is_ok_and(|i| i < vocab),
            "id {id} of {vocab}"
        );
    }
    if !specials.iter().any(|s| text.contains(s.as_str())) {
        assert_eq!(with_special, ids, "{text:?}");
    }
    // Any ids, as a model's output may be: two bytes each.
    let any: Vec<u32> = text
        .as_bytes()
        .chunks(2)
        .map(|p| u32::from(p[0]) | p.get(1).map_or(0, |&b| u32::from(b) << 8))
        .collect();
    let mut stream = StreamDecoder::new();
    let mut pieces = String::new();
    for &id in &any {
        if !tok.is_control(id) {
            pieces.push_str(&stream.push(tok.token_bytes(id)));
        }
    }
    pieces.push_str(&stream.finish());
    assert_eq!(pieces, tok.decode(&any));
}

/// Ids (`branch_core::element::parse_uuid`): any text reads as
/// `Uuid::parse_str` reads it once trimmed, the same id or refused alike,
/// whichever path (the canonical form's or the general one) reads it.
pub fn uuid_text(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let want = Uuid::parse_str(text.trim()).ok();
    assert_eq!(branch_core::element::parse_uuid(text), want, "{text:?}");
}

/// A paused turn read back from a store (`pending_approval` in a branch's
/// metadata, any JSON), every waiting call approved and the turn resumed:
/// nothing panics, and the resume ends within a deadline (the tools answer
/// at once; a stored timeout or concurrency bound may be anything). A
/// state `pending_approval` refuses is refused by `resume` too, and a
/// refused resume leaves the branch as it was; a resumed turn answers
/// every call and clears the pause.
pub fn pending_approval(data: &[u8]) {
    use branch_operations::{Decision, OperationError, PENDING_KEY};
    let Ok(stored) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let runtime = pending_runtime();
    let mut branch = Branch::builder()
        .system("Use tools.")
        .tools([echo_tool(), failing_tool()])
        .build()
        .expect("a branch");
    branch.metadata_mut().insert(PENDING_KEY.into(), stored);
    let opts = ToDictOptions::default();
    let before = branch.to_dict(&opts).expect("a branch serializes");
    let read = branch_operations::pending_approval(&branch);
    let decisions: Vec<(Uuid, Decision)> = match &read {
        Ok(Some(p)) => p
            .waiting()
            .map(|c| (c.call_id, Decision::Approve))
            .collect(),
        Ok(None) => unreachable!("the pause was just stored"),
        Err(_) => Vec::new(),
    };
    let resumed = runtime
        .block_on(async {
            tokio::time::timeout(
                std::time::Duration::from_secs(10),
                branch_operations::resume(&mut branch, decisions),
            )
            .await
        })
        .expect("a resume of instant tools ends within 10 s");
    let after = branch.to_dict(&opts).expect("a branch serializes");
    match (read, resumed) {
        (Err(_), Ok(_)) => panic!("a pause pending_approval refuses was resumed"),
        (Ok(Some(p)), Ok(r)) => {
            assert_eq!(
                r.action_responses.len(),
                p.calls.len(),
                "a resumed turn answers every call"
            );
            assert!(
                branch.metadata().get(PENDING_KEY).is_none(),
                "a resumed turn leaves its pause"
            );
        }
        // A tool that failed, with errors not suppressed: the calls that
        // reached their tool are recorded, as `act` records them, and the
        // batch has run, so the pause is gone.
        (Ok(Some(_)), Err(OperationError::Action { .. })) => assert!(
            branch.metadata().get(PENDING_KEY).is_none(),
            "a batch that ran left its pause"
        ),
        (_, Err(e)) => assert_eq!(after, before, "a refused resume ({e}) changed the branch"),
        (Ok(None), Ok(_)) => unreachable!(),
    }
}

/// One runtime for the process: timers on, one thread.
fn pending_runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    })
}

/// `echo(**kwargs)`: its arguments back.
fn echo_tool() -> std::sync::Arc<dyn branch_core::Tool> {
    branch_actions::DynamicTool::new(
        "echo",
        None,
        serde_json::json!({"type": "object"}),
        |args: Value| async move { Ok::<_, String>(args) },
    )
    .expect("a tool")
    .into_tool()
}

/// `fail()`: always an error.
fn failing_tool() -> std::sync::Arc<dyn branch_core::Tool> {
    branch_actions::DynamicTool::new(
        "fail",
        None,
        serde_json::json!({"type": "object"}),
        |_: Value| async move { Err::<Value, _>("it fails".to_owned()) },
    )
    .expect("a tool")
    .into_tool()
}

/// A failed reply's wait headers (`branch_models::retry_after`): the
/// input is up to three header values, split at `\n` (`retry-after-ms`,
/// `Retry-After`, `Date`; a value a header cannot hold is left out).
/// Nothing panics and no wait passes the cap; a number of seconds reads as
/// that many, as `str::parse` reads it; text that is neither a number nor
/// a date asks for no wait; and a date is read against the reply's `Date`
/// (the time from one to the other, none when past), so it depends only on
/// the two instants' distance: both moved by the same amount and written
/// afresh, the wait is the same.
pub fn retry_after(data: &[u8]) {
    use branch_models::limits::MAX_RETRY_AFTER;
    use branch_models::retry_after::requested_wait;
    use reqwest::header::{HeaderMap, HeaderValue};
    use std::time::{Duration, SystemTime, UNIX_EPOCH};
    let mut parts = data.splitn(3, |&b| b == b'\n');
    let (ms, ra, date) = (parts.next(), parts.next(), parts.next());
    let build = |ms: Option<&[u8]>, ra: Option<&[u8]>, date: Option<&[u8]>| {
        let mut h = HeaderMap::new();
        for (name, v) in [("retry-after-ms", ms), ("retry-after", ra), ("date", date)] {
            if let Some(v) = v.and_then(|v| HeaderValue::from_bytes(v).ok()) {
                h.insert(name, v);
            }
        }
        h
    };
    let headers = build(ms, ra, date);
    let wait = requested_wait(&headers);
    assert!(wait.is_none_or(|w| w <= MAX_RETRY_AFTER), "{wait:?}");
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let counts = |v: f64| v.is_finite() && v >= 0.0;
    if text("retry-after-ms")
        .and_then(|v| v.parse::<f64>().ok())
        .is_some_and(counts)
    {
        return;
    }
    let Some(ra_text) = text("retry-after") else {
        assert_eq!(wait, None, "no header asks for a wait");
        return;
    };
    if let Ok(secs) = ra_text.parse::<f64>() {
        let want = counts(secs).then(|| {
            Duration::try_from_secs_f64(secs).map_or(MAX_RETRY_AFTER, |d| d.min(MAX_RETRY_AFTER))
        });
        assert_eq!(wait, want, "{ra_text:?}");
        return;
    }
    let Ok(at) = httpdate::parse_http_date(ra_text) else {
        assert_eq!(wait, None, "{ra_text:?} is neither a number nor a date");
        return;
    };
    assert!(wait.is_some(), "{ra_text:?} is a date");
    let Some(Ok(now)) = text("date").map(httpdate::parse_http_date) else {
        // Read against this machine's clock, which the check cannot hold.
        return;
    };
    let want = at
        .duration_since(now)
        .map_or(Duration::ZERO, |d| d.min(MAX_RETRY_AFTER));
    assert_eq!(wait, Some(want), "{ra_text:?} against {:?}", text("date"));
    // Both instants moved by the same whole number of days, while the
    // later one stays within the four-digit years a date can write.
    let last = UNIX_EPOCH + Duration::from_secs(253_402_300_799);
    let days = u64::try_from(data.len() % 1_000).unwrap_or(0) + 1;
    let shift = Duration::from_secs(days * 86_400);
    let moved = |t: SystemTime| {
        let later = t + shift;
        (later <= last).then(|| httpdate::fmt_http_date(later))
    };
    let (Some(at2), Some(now2)) = (moved(at), moved(now)) else {
        return;
    };
    let moved_wait = requested_wait(&build(None, Some(at2.as_bytes()), Some(now2.as_bytes())));
    assert_eq!(wait, moved_wait, "{ra_text:?} against {:?}", text("date"));
}

/// A model's structured reply read locally
/// (`branch_operations::ParseOptions::parse_local`), under the options the
/// first two bytes pick (key policy, fuzzy matching, strict, fill value;
/// similarity measure and threshold): no text panics it; an accepted
/// reading holds only the format's fields, every required one, each of its
/// declared type (the lax conversions done), and reads back as itself from
/// its own JSON.
pub fn structured_reply(data: &[u8]) {
    use branch_operations::fuzzy::Unmatched;
    use branch_operations::similarity::Similarity;
    use branch_operations::{ParseOptions, ResponseFormat};

    let [knobs, measure, rest @ ..] = data else {
        return;
    };
    let (knobs, measure) = (*knobs, *measure);
    let measures = [
        Similarity::JaroWinkler,
        Similarity::Levenshtein,
        Similarity::SequenceMatcher,
        Similarity::Hamming,
        Similarity::Cosine,
    ];
    let thresholds = [0.85, 0.0, 0.5, 1.0];
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let policies = [
        Unmatched::Ignore,
        Unmatched::Raise,
        Unmatched::Remove,
        Unmatched::Fill,
        Unmatched::Force,
    ];
    let fills = [
        Value::Null,
        Value::from(0),
        Value::from("n/a"),
        Value::from(true),
    ];
    let schema = serde_json::json!({
        "type": "object",
        "title": "Reply",
        "properties": {
            "name": {"type": "string"},
            "count": {"type": "integer"},
            "score": {"type": "number"},
            "ok": {"type": "boolean", "default": false},
            "maybe": {"anyOf": [{"type": "boolean"}, {"type": "null"}], "default": null},
            "tags": {"type": "array", "items": {"type": "string"}, "default": []},
            "plan": {"anyOf": [{"$ref": "#/$defs/Plan"}, {"type": "null"}], "default": null},
            "plans": {"type": "array", "items": {"$ref": "#/$defs/Plan"}, "default": []},
        },
        "required": ["name", "count", "score"],
        "$defs": {"Plan": {
            "type": "object",
            "properties": {
                "steps": {"type": "array", "items": {"type": "string"}},
                "priority": {"type": "integer", "default": 1},
            },
            "required": ["steps"],
        }},
    });
    let mut mapping = serde_json::Map::new();
    mapping.insert("count".into(), Value::from(1));
    let opts = ParseOptions::new(ResponseFormat::Schema(schema))
        .unmatched(policies[usize::from(knobs % 5)])
        .fuzzy_match(knobs & 0x08 == 0)
        .strict(knobs & 0x10 != 0)
        .fill_value(fills[usize::from((knobs >> 5) & 3)].clone())
        .fill_mapping(mapping)
        .similarity(measures[usize::from(measure % 5)])
        .similarity_threshold(thresholds[usize::from((measure >> 4) & 3)]);
    let Ok(got) = opts.parse_local(text) else {
        return;
    };
    let fields = [
        "name", "count", "score", "ok", "maybe", "tags", "plan", "plans",
    ];
    assert!(got.keys().all(|k| fields.contains(&k.as_str())), "{got:?}");
    let whole = |v: &Value| v.as_f64().is_some_and(|f| f.fract() == 0.0);
    assert!(got["name"].is_string(), "{got:?}");
    assert!(
        got["count"].is_i64() || got["count"].is_u64() || whole(&got["count"]),
        "{got:?}"
    );
    assert!(got["score"].is_number(), "{got:?}");
    assert!(got.get("ok").is_none_or(Value::is_boolean), "{got:?}");
    assert!(
        got.get("maybe")
            .is_none_or(|v| v.is_boolean() || v.is_null()),
        "{got:?}"
    );
    assert!(
        got.get("tags")
            .is_none_or(|v| v.as_array().is_some_and(|a| a.iter().all(Value::is_string))),
        "{got:?}"
    );
    // A nested plan is dumped as its model: its two fields in order, the
    // default filled.
    let plan_ok = |p: &Value| {
        p.as_object().is_some_and(|o| {
            o.keys().map(String::as_str).eq(["steps", "priority"])
                && (o["priority"].is_i64() || o["priority"].is_u64() || whole(&o["priority"]))
                && o["steps"]
                    .as_array()
                    .is_some_and(|a| a.iter().all(Value::is_string))
        })
    };
    assert!(
        got.get("plan").is_none_or(|p| p.is_null() || plan_ok(p)),
        "{got:?}"
    );
    assert!(
        got.get("plans")
            .is_none_or(|v| v.as_array().is_some_and(|a| a.iter().all(plan_ok))),
        "{got:?}"
    );
    let written = serde_json::to_string(&got).expect("a map of JSON values writes");
    assert_eq!(opts.parse_local(&written).as_ref(), Ok(&got), "{written}");
}
