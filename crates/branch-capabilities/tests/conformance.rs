//! Conformance with every scenario of `capabilities/`.
//!
//! Grant and revoke are reproduced exactly. Extraction is checked twice:
//! the pure `extract_emissions` against the fixtures' `attempt_extract`,
//! and the signals an observer receives when assistant messages are added
//! to a granted branch (the fixtures' session observer). The scenario that
//! runs a turn is also driven through `communicate` in a `Session` against
//! the loopback mock (request body, return value, signals, `to_dict`).
//!
//! Deliberate deviation (docs/compat.md): validation is JSON Schema, so a
//! rejection's text has the reference's Pydantic header and location but
//! the validator's own message.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use branch_capabilities::{
    CAP_BEGIN, CAP_END, CapabilitiesExt, FieldSpec, Grant, extract_emissions,
    observe_assistant_message, render_capabilities_prompt,
};
use branch_core::message::SystemContent;
use branch_core::{Branch, Message, Observer, Participant, Signal, ToDictOptions};
use serde_json::{Value, json};

mod support;

fn fixtures_dir() -> PathBuf {
    match std::env::var_os("LIONAGI_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/lionagi-0.36.0"),
    }
}

fn read(scenario: &str, file: &str) -> String {
    let path = fixtures_dir()
        .join("capabilities")
        .join(scenario)
        .join(file);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("fixture {} unreadable: {e}", path.display()))
}

fn output(scenario: &str) -> Value {
    serde_json::from_str(&read(scenario, "output.json")).expect("fixture is JSON")
}

/// `make_operable()` of the fixtures.
fn reviewer() -> Grant {
    Grant::builder()
        .name("Reviewer")
        .field(FieldSpec::string("note").description("A short progress note"))
        .field(FieldSpec::integer("score").description("Quality score from 0 to 10"))
        .build()
        .expect("valid grant")
}

/// `make_operable_v2()` of the fixtures.
fn planner() -> Grant {
    Grant::builder()
        .name("Planner")
        .field(FieldSpec::array("todo", json!({"type": "string"})).description("Open items"))
        .build()
        .expect("valid grant")
}

fn branch(system: Option<&str>, name: Option<&str>) -> Branch {
    let mut b = Branch::builder();
    if let Some(s) = system {
        b = b.system(s);
    }
    if let Some(n) = name {
        b = b.name(n);
    }
    b.build().expect("branch builds")
}

fn system_text(b: &Branch) -> String {
    b.system()
        .and_then(|m| m.as_system())
        .and_then(SystemContent::text)
        .expect("text system")
        .to_owned()
}

#[derive(Default)]
struct Recorder(Mutex<Vec<Signal>>);

impl Observer for Recorder {
    fn observe(&self, signal: Signal) {
        self.0.lock().unwrap().push(signal);
    }
}

/// The fixtures' `observe_assistant_messages`: a branch named "worker"
/// with an observer and a prompt-less grant; each text added as an
/// assistant response; every signal the observer got.
fn observe_texts(texts: &[&str], grant: Grant) -> Vec<Signal> {
    let mut b = branch(Some("S"), Some("worker"));
    let rec = Arc::new(Recorder::default());
    b.set_observer(Some(rec.clone()));
    b.grant_capabilities(grant, false);
    for t in texts {
        let m = Message::assistant(*t)
            .with_sender(Participant::from(b.id()))
            .with_recipient(Participant::from("user"));
        b.msgs_mut().add_message(m);
    }
    rec.0.lock().unwrap().clone()
}

/// Compares an observed signal list with the fixture's `signals`: a
/// MessageAdded by class and content (ids and times are generated), an
/// EmissionRejected by everything but the validator's message, the rest
/// exactly.
fn assert_signals(got: &[Signal], expected: &Value) {
    let expected = expected.as_array().unwrap();
    assert_eq!(got.len(), expected.len(), "signal count: {got:#?}");
    for (g, e) in got.iter().zip(expected) {
        let v = g.view();
        match g {
            Signal::MessageAdded { .. } => {
                assert_eq!(v["signal_class"], e["signal_class"]);
                assert_eq!(v["data_class"], e["data_class"]);
                assert_eq!(v["data"]["content"], e["data"]["content"]);
            }
            Signal::EmissionRejected { rejection, .. } => {
                assert_eq!(v["signal_class"], e["signal_class"]);
                assert_eq!(v["data_class"], e["data_class"]);
                assert_eq!(json!(rejection.block), e["data"]["block"]);
                assert_eq!(json!(rejection.branch_name), e["data"]["branch_name"]);
                assert_same_error_head(&rejection.error, e["data"]["error"].as_str().unwrap());
            }
            _ => assert_eq!(&v, e),
        }
    }
}

/// Pydantic's header and error locations: every line that is not an
/// indented message.
fn assert_same_error_head(got: &str, expected: &str) {
    let head = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| !l.starts_with(' '))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(head(got), head(expected), "got error text {got:?}");
}

fn check_attempt_extract(scenario: &str) {
    let out = output(scenario);
    let grant = reviewer();
    for case in out["attempt_extract"].as_array().unwrap() {
        let ex = extract_emissions(case["text"].as_str().unwrap(), &grant, "");
        assert_eq!(
            json!(ex.bundles),
            case["bundles"],
            "bundles of {}",
            case["text"]
        );
        assert_eq!(json!(ex.violations), case["violations"]);
        let rejects = case["rejects"].as_array().unwrap();
        assert_eq!(ex.rejections.len(), rejects.len());
        for (r, e) in ex.rejections.iter().zip(rejects) {
            assert_eq!(json!(r.block), e["block"]);
            assert_eq!(json!(r.branch_name), e["branch_name"]);
            assert_same_error_head(&r.error, e["error"].as_str().unwrap());
        }
        if let Some(fields) = case.get("bundle_fields") {
            let got: Vec<Vec<&String>> = ex
                .bundles
                .iter()
                .map(|b| {
                    let mut k: Vec<&String> = b.keys().collect();
                    k.sort();
                    k
                })
                .collect();
            assert_eq!(json!(got), *fields);
        }
    }
}

#[test]
fn grant_then_system_prompt() {
    let out = output("grant_then_system_prompt");
    let mut b = branch(Some("Base prompt."), None);
    let old_id = b.system().unwrap().id();
    let grant = Arc::new(reviewer());
    b.grant_capabilities(grant.clone(), true);
    assert_eq!(json!(system_text(&b)), out["system_text"]);
    assert_eq!(
        json!(render_capabilities_prompt(&grant)),
        out["rendered_block_only"]
    );
    let system = b.system().unwrap();
    let facts = json!({
        "capabilities_is_grant": Arc::ptr_eq(&b.capabilities().unwrap(), &grant),
        "system_id_changed": system.id() != old_id,
        "system_sender": system.sender,
        "system_recipient": system.recipient,
        "message_count": b.messages().len(),
        "allowed": grant.allowed(),
        "markers": [CAP_BEGIN, CAP_END],
    });
    assert_eq!(facts, out["facts"]);
    // to_dict shows the new system text; the grant itself is not serialized.
    let d = b.to_dict(&ToDictOptions::default()).unwrap();
    let sys = &d["messages"]["collections"][0];
    let exp = &out["to_dict"]["messages"]["collections"][0];
    for key in [
        "content",
        "sender",
        "recipient",
        "role",
        "channel",
        "embedding",
    ] {
        assert_eq!(sys[key], exp[key], "system {key}");
    }
    assert!(
        !d.to_string().contains("Reviewer\""),
        "the grant is not serialized"
    );
}

#[test]
fn regrant_replaces_block() {
    let out = output("regrant_replaces_block");
    let mut b = branch(Some("Base prompt."), None);
    b.grant_capabilities(reviewer(), true);
    assert_eq!(json!(system_text(&b)), out["after_first"]);
    b.grant_capabilities(planner(), true);
    let second = system_text(&b);
    assert_eq!(json!(second), out["after_second"]);
    assert_eq!(
        json!(second.matches(CAP_BEGIN).count()),
        out["begin_marker_count"]
    );
    assert_eq!(
        json!(b.capabilities().unwrap().name()),
        out["capabilities_name"]
    );
    assert_eq!(b.messages().len(), 1);
}

#[test]
fn revoke_removes_block() {
    let out = output("revoke_removes_block");
    let mut b = branch(Some("Base prompt."), None);
    b.grant_capabilities(reviewer(), true);
    let revoked = b.revoke_capabilities();
    assert_eq!(revoked.unwrap().name(), Some("Reviewer"));
    assert_eq!(json!(system_text(&b)), out["after_revoke"]);
    assert_eq!(
        json!(b.capabilities().map(|g| g.name().map(str::to_owned))),
        out["capabilities_after_revoke"]
    );

    let mut b2 = branch(Some("Untouched."), None);
    let sid = b2.system().unwrap().id();
    b2.grant_capabilities(reviewer(), false);
    let unchanged = system_text(&b2) == "Untouched." && b2.system().unwrap().id() == sid;
    assert_eq!(json!(unchanged), out["prompt_false_system_unchanged"]);
    assert_eq!(
        json!(b2.capabilities().is_some()),
        out["prompt_false_capabilities_set"]
    );
}

#[test]
fn extract_valid_structured_output() {
    check_attempt_extract("extract_valid_structured_output");
    let out = output("extract_valid_structured_output");
    let text = out["attempt_extract"][0]["text"].as_str().unwrap();
    assert_signals(&observe_texts(&[text], reviewer()), &out["signals"]);
}

#[test]
fn extract_mixed_keys_violation() {
    check_attempt_extract("extract_mixed_keys_violation");
    let out = output("extract_mixed_keys_violation");
    let text = out["attempt_extract"][0]["text"].as_str().unwrap();
    assert_signals(&observe_texts(&[text], reviewer()), &out["signals"]);
}

#[test]
fn extract_no_granted_key() {
    check_attempt_extract("extract_no_granted_key");
    let out = output("extract_no_granted_key");
    let texts: Vec<&str> = out["attempt_extract"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap())
        .collect();
    assert_signals(&observe_texts(&texts, reviewer()), &out["signals"]);
}

#[test]
fn extract_invalid_rejected() {
    check_attempt_extract("extract_invalid_rejected");
    let out = output("extract_invalid_rejected");
    let text = out["attempt_extract"][0]["text"].as_str().unwrap();
    let signals = observe_texts(&[text], reviewer());
    assert_signals(&signals, &out["signals"]);
    // Through the observer the branch's name is filled in.
    let Signal::EmissionRejected { rejection, .. } = &signals[1] else {
        panic!("not a rejection")
    };
    assert_eq!(rejection.branch_name, "worker");
}

#[test]
fn capability_block_in_provider_request() {
    let out = output("capability_block_in_provider_request");
    let mut b = branch(Some("You review code."), Some("reviewer"));
    let rec = Arc::new(Recorder::default());
    b.set_observer(Some(rec.clone()));
    b.grant_capabilities(reviewer(), true);
    let expected_system =
        &out["to_dict"]["messages"]["collections"][0]["content"]["system_message"];
    assert_eq!(json!(system_text(&b)), *expected_system);

    // The request folds the system text (with its block) into the first
    // instruction's guidance.
    let req: Value = serde_json::from_str(
        read("capability_block_in_provider_request", "requests.jsonl")
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let content = req["messages"][0]["content"].as_str().unwrap();
    let block = content.strip_prefix("Guidance: |-\n").unwrap();
    let guidance: Vec<&str> = block
        .split('\n')
        .take_while(|l| l.is_empty() || l.starts_with("  "))
        .map(|l| l.strip_prefix("  ").unwrap_or(l))
        .collect();
    assert_eq!(
        guidance.join("\n"),
        branch_providers::fold_guidance(Some(&system_text(&b)), "", "")
    );

    // The reply is observed: MessageAdded, then the StructuredOutput.
    let reply = out["return_value"]["value"].as_str().unwrap();
    rec.0.lock().unwrap().clear();
    b.msgs_mut().add_message(Message::assistant(reply));
    let got = rec.0.lock().unwrap().clone();
    let expected: Vec<Value> = out["signals"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| {
            s["data_class"] == "AssistantResponse" || s["signal_class"] == "StructuredOutput"
        })
        .cloned()
        .collect();
    assert_signals(&got, &Value::Array(expected));
    // The pure function gives the same capability signals.
    let reply_msg = b.messages().iter().last().unwrap().clone();
    assert_eq!(observe_assistant_message(&b, &reply_msg), got[1..].to_vec());
}

#[tokio::test]
async fn capability_block_in_provider_request_through_communicate() {
    use branch_operations::{BranchOperations, CommunicateOptions, Reply};
    use branch_session::{Session, share};
    use support::compare::{Comparer, fixture};
    use support::verbs::{assert_requests, model, scripted, to_dict};

    let name = "capabilities/capability_block_in_provider_request";
    let fx = fixture(name);
    let server = scripted(name).await;
    // The reference's `include_branches` makes the session id the branch's
    // user; branch-session deliberately does not (its compat note), so the
    // branch is given that user here to reproduce the reference's state.
    let session_id = uuid::Uuid::new_v4();
    let handle = share(
        Branch::builder()
            .name("reviewer")
            .user(Participant::from(session_id))
            .system("You review code.")
            .chat_model(model(&server, "gpt-4.1-mini"))
            .build()
            .unwrap(),
    );
    let rec = Arc::new(Recorder::default());
    let session = Session::builder()
        .id(session_id)
        .observer(rec.clone())
        .branch(handle.clone())
        .build()
        .await
        .unwrap();
    let mut b = handle.lock().await;
    assert_eq!(b.owning_session(), Some(session.id()));
    b.grant_capabilities(reviewer(), true);
    let r = b
        .communicate(CommunicateOptions::new("Review this: def f(): return 1"))
        .await
        .unwrap();
    assert_eq!(
        r,
        Reply::Text(fx.output["return_value"]["value"].as_str().unwrap().into())
    );
    // The capability block travels in the folded guidance of the request.
    assert_requests(&server, &fx.requests);

    // The reference's session observer also stores the APICalling event
    // (`{"event_class": "APICalling", "status": "completed"}`); branch-core's
    // `Signal` has no variant for it (the call is in the branch's logs,
    // checked through to_dict below), so every other signal is compared,
    // in order.
    let expected: Vec<Value> = fx.output["signals"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s.get("event_class").is_none())
        .cloned()
        .collect();
    assert_eq!(
        fx.output["signals"].as_array().unwrap().len(),
        expected.len() + 1,
        "exactly one non-signal event is left out"
    );
    let got: Vec<Value> = rec
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|s| {
            let mut v = s.view();
            // Wall-clock time, normalised by the fixture generator too.
            if let Some(d) = v.pointer_mut("/fields/duration_ms") {
                assert!(d.as_f64().is_some_and(|ms| ms >= 0.0));
                *d = json!(0.0);
            }
            v
        })
        .collect();
    let mut cmp = Comparer::new(&fx);
    // Labelled without the pointer: the fixture's masks index the unfiltered
    // list; ids and fake-clock times are matched by the comparer anyway.
    cmp.check_value("signals", &Value::Array(expected), &Value::Array(got));
    cmp.check(&fx, "/to_dict", &to_dict(&b, &server));
    cmp.finish();
}

// ---- beyond the fixtures ------------------------------------------------

#[test]
fn a_lone_begin_marker_is_left_alone_and_regrant_keeps_user_text() {
    let prompt = format!("Keep {CAP_BEGIN} this text.");
    let mut b = branch(Some(&prompt), None);
    b.grant_capabilities(reviewer(), true);
    let first = system_text(&b);
    assert!(first.starts_with(&prompt));
    assert_eq!(first.matches(CAP_BEGIN).count(), 2);
    // The reference's second grant pairs the lone BEGIN with the block's
    // END and deletes " this text."; here only the balanced block goes.
    b.grant_capabilities(planner(), true);
    let second = system_text(&b);
    assert!(second.starts_with(&prompt), "{second}");
    assert!(second.contains("Allowed capability keys (emitting any other key is rejected): todo."));
    assert_eq!(second.matches(CAP_END).count(), 1);
    b.revoke_capabilities();
    assert_eq!(system_text(&b), prompt);
}

#[test]
fn an_unbalanced_end_marker_is_left_alone_by_revoke() {
    let prompt = format!("Only an end {CAP_END} here.");
    let mut b = branch(Some(&prompt), None);
    let id = b.system().unwrap().id();
    b.revoke_capabilities();
    assert_eq!(system_text(&b), prompt);
    assert_eq!(
        b.system().unwrap().id(),
        id,
        "nothing to strip: the system is kept"
    );
}

#[test]
fn grant_creates_a_system_and_revoke_restores_the_default_text() {
    let mut b = branch(None, None);
    b.grant_capabilities(reviewer(), true);
    assert!(system_text(&b).starts_with(CAP_BEGIN));
    b.revoke_capabilities();
    assert_eq!(
        system_text(&b),
        "You are a helpful AI assistant. Let's think step by step."
    );
    assert!(b.capabilities().is_none());
}

#[test]
fn revoke_stops_observation_and_no_observer_means_no_scan() {
    let mut b = branch(Some("S"), None);
    let rec = Arc::new(Recorder::default());
    b.grant_capabilities(reviewer(), false);
    b.msgs_mut()
        .add_message(Message::assistant("```json\n{\"score\": 1}\n```"));
    b.set_observer(Some(rec.clone()));
    b.revoke_capabilities();
    b.msgs_mut()
        .add_message(Message::assistant("```json\n{\"score\": 2}\n```"));
    let got = rec.0.lock().unwrap();
    assert_eq!(got.len(), 1);
    assert!(matches!(got[0], Signal::MessageAdded { .. }));
}

#[test]
fn schemars_typed_grant_renders_like_the_reference() {
    /// A note.
    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Note {
        text: String,
    }
    let grant = Grant::builder()
        .field(FieldSpec::of::<Note>("note"))
        .field(FieldSpec::integer("score"))
        .build()
        .unwrap();
    // extensions.md §3.3, verified output for `note: Note{text: str}`,
    // `score: int` (the struct's doc comment adds its description).
    let rendered = render_capabilities_prompt(&grant);
    let schema_text = rendered
        .split("```json\n")
        .nth(1)
        .unwrap()
        .trim_end_matches("\n```");
    let schema: Value = serde_json::from_str(schema_text).unwrap();
    assert_eq!(
        schema,
        json!({
            "properties": {
                "note": {"$ref": "#/$defs/Note", "name": "note"},
                "score": {"name": "score", "title": "Score", "type": "integer"}
            },
            "$defs": {"Note": {
                "description": "A note.",
                "properties": {"text": {"title": "Text", "type": "string"}},
                "required": ["text"], "title": "Note", "type": "object"
            }}
        })
    );
    let keys: Vec<&String> = schema.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["properties", "$defs"]);
    let ex = extract_emissions(
        "```json {\"note\": {\"text\": \"a\"}, \"score\": 3} ```",
        &grant,
        "",
    );
    assert_eq!(
        json!(ex.bundles),
        json!([{"note": {"text": "a"}, "score": 3}])
    );
    let bad = extract_emissions("```json {\"note\": {\"txt\": 1}} ```", &grant, "b");
    assert_eq!(bad.rejections.len(), 1);
    assert!(
        bad.rejections[0]
            .error
            .starts_with("1 validation error for Capabilities\nnote\n")
    );
}

#[test]
fn whole_struct_grant_from_type() {
    /// What a reviewer may emit.
    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Reviewer {
        /// A short progress note
        note: String,
        /// Quality score from 0 to 10
        score: i64,
    }
    let grant = Grant::from_type::<Reviewer>().unwrap();
    assert_eq!(grant.name(), Some("Reviewer"));
    assert_eq!(grant.allowed(), ["note", "score"]);
    let ex = extract_emissions("```json {\"score\": 7, \"note\": \"x\"} ```", &grant, "");
    assert_eq!(
        serde_json::to_string(&ex.bundles[0]).unwrap(),
        r#"{"note":"x","score":7}"#
    );
}

#[test]
fn the_verified_mixed_text_of_the_reference() {
    // extensions.md §3.4.
    let note = Grant::builder()
        .name("Grant")
        .field(FieldSpec::new("note", json!({"$ref": "#/$defs/Note"})).with_defs(
            json!({"Note": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}})
                .as_object()
                .unwrap()
                .clone(),
        ))
        .field(FieldSpec::integer("score"))
        .build()
        .unwrap();
    let text = "hi ```json {\"note\": {\"text\": \"a\"}, \"score\": 3} ``` and ```json {\"note\": {\"text\": \"b\"}, \"evil\": 1} ``` and ```json {\"other\": 1} ``` and ```json {\"score\": \"notint\"} ```";
    let ex = extract_emissions(text, &note, "");
    assert_eq!(
        json!(ex.bundles),
        json!([{"note": {"text": "a"}, "score": 3}])
    );
    assert_eq!(
        json!(ex.violations),
        json!([{"offending": ["evil"], "allowed": ["note", "score"], "block": {"note": {"text": "b"}, "evil": 1}}])
    );
    assert_eq!(ex.rejections.len(), 1);
    assert!(
        ex.rejections[0]
            .error
            .starts_with("1 validation error for Grant\nscore\n  ")
    );
    assert_eq!(json!(ex.rejections[0].block), json!({"score": "notint"}));
}
