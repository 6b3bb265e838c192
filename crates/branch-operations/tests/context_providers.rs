//! Conformance with every scenario of `context_providers/`.
//!
//! Each scenario is checked twice. At the seam the verbs call: `gather`
//! with the instruction the verb would build, the folded guidance compared
//! with the request the reference sent, and `gather_writeback` with the
//! action responses `operate` would pass. And through the verbs themselves
//! (`communicate`, `operate` from branch-operations) against the real
//! loopback mock: request bodies equal requests.jsonl (normalised only for
//! the documented deviations), return values, message summaries and
//! `to_dict` compared with an id mapping.

#[path = "providers_support/mod.rs"]
mod support;

use std::sync::Arc;

use branch_core::Branch;
use branch_operations::{BranchOperations, CommunicateOptions, OperateOptions, Parsed, Reply};
use branch_providers::{
    ContextProviderRegistry, DEFAULT_BUDGET, ProviderOptions, ProvidersExt, fold_guidance, gather,
    gather_writeback,
};
use serde_json::{Value, json};
use support::compare::{Comparer, fixture};
use support::verbs::{answer_format, assert_requests, model, msg_summary, scripted, to_dict};
use support::*;

fn opts() -> ProviderOptions {
    ProviderOptions::default()
}

fn system_text(b: &branch_core::Branch) -> String {
    b.system()
        .and_then(|m| m.as_system())
        .map(|c| c.rendered())
        .expect("system")
}

/// The seven providers of `registry_report_mixed`, registered on `b`, in
/// the fixture's order of `provider_calls`.
fn register_mixed(b: &mut Branch) -> Vec<(&'static str, Arc<TestProvider>)> {
    let alpha = Arc::new(TestProvider::text("ALPHA: the user prefers metric units."));
    let beta = Arc::new(TestProvider::text(format!(
        "BETA: {}",
        "very long reference text ".repeat(4)
    )));
    let zeta = Arc::new(TestProvider::text(format!(
        "ZETA: {}",
        "background material that is fairly long and costs many tokens ".repeat(3)
    )));
    let eta = Arc::new(TestProvider::text("ETA: project codename is Bluebird."));
    let failing =
        Arc::new(TestProvider::new(Provide::Fail("provider exploded".into())).named("failing"));
    let none_p = Arc::new(TestProvider::new(Provide::Nothing).named("none_provider"));
    let empty_p = Arc::new(TestProvider::text("").named("empty_provider"));
    let reg = b.providers();
    reg.set_budget(40);
    reg.register_shared(alpha.clone(), opts().priority(1).name("alpha"))
        .register_shared(beta.clone(), opts().priority(5).max_tokens(5).name("beta"))
        .register_shared(failing.clone(), opts().priority(3))
        .register_shared(none_p.clone(), opts())
        .register_shared(empty_p.clone(), opts())
        .register_shared(zeta.clone(), opts().priority(0).name("zeta"))
        .register_shared(eta.clone(), opts().priority(10).name("eta"));
    vec![
        ("alpha", alpha),
        ("beta", beta),
        ("failing", failing),
        ("none_provider", none_p),
        ("empty_provider", empty_p),
        ("zeta", zeta),
        ("eta", eta),
    ]
}

fn calls_of(providers: &[(&str, Arc<TestProvider>)]) -> Value {
    Value::Object(
        providers
            .iter()
            .map(|(n, p)| ((*n).to_owned(), json!(p.calls())))
            .collect(),
    )
}

#[tokio::test]
async fn registry_report_mixed() {
    let out = output("context_providers/registry_report_mixed");
    let mut b = branch_with_system(Some("Base system."));
    let providers = register_mixed(&mut b);

    let instr = instruction("How tall is the tower?", Some("Be exact."));
    let pass = gather(&mut b, &instr)
        .await
        .expect("a registry with providers runs");

    assert_eq!(json!(*pass.report), out["report"]);
    let last = b.last_context_report().expect("report kept");
    assert!(
        Arc::ptr_eq(&last, &pass.report),
        "last_context_report is the pass's report"
    );
    let reg = b.try_providers().unwrap();
    assert_eq!(json!(reg.names()), out["registry_names"]);
    assert_eq!(json!(reg.stats()), out["registry_stats"]);
    assert_eq!(calls_of(&providers), out["provider_calls"]);

    // The request: system + blocks + guidance folded into the guidance.
    let req = &requests("context_providers/registry_report_mixed")[0];
    let sent = guidance_of(req["messages"][0]["content"].as_str().unwrap()).unwrap();
    assert_eq!(
        fold_guidance(Some(&system_text(&b)), &pass.blocks_text, "Be exact."),
        sent
    );

    // The blocks are never stored: the branch still holds only its system.
    assert_eq!(b.messages().len(), 1);
}

#[tokio::test]
async fn no_system_all_skipped() {
    let out = output("context_providers/no_system_all_skipped");
    let mut b = branch_with_system(None);
    let a = Arc::new(TestProvider::text("A block."));
    let f = Arc::new(TestProvider::new(Provide::Fail("provider exploded".into())).named("failing"));
    b.providers()
        .register_shared(a.clone(), opts().name("a").priority(2))
        .register_shared(f.clone(), opts());
    let pass = gather(&mut b, &instruction("Hi", None))
        .await
        .expect("registry present");
    assert_eq!(json!(*pass.report), out["report"]);
    assert_eq!(pass.blocks_text, "");
    assert_eq!(
        json!({"a": a.calls(), "failing": f.calls()}),
        out["provider_calls"]
    );
    assert_eq!(json!(b.providers().stats()), out["registry_stats"]);
    assert_eq!(b.last_context_report().as_deref(), Some(&*pass.report));
}

#[tokio::test]
async fn non_string_and_degraded() {
    let out = output("context_providers/non_string_and_degraded");
    let mut b = branch_with_system(Some("S"));
    // A Rust provider cannot return a non-string: the reference's `123`
    // result is the error case, reported under `failed` the same way.
    let non_string = TestProvider::new(Provide::Fail("provide returned int, not str".into()))
        .named("non_string");
    let degraded = TestProvider::text("DEGRADED-BUT-USEFUL note.")
        .named("degraded")
        .degraded("index is stale");
    let echo = Arc::new(TestProvider::text("ECHO block.").named("echo"));
    b.providers()
        .register(non_string)
        .register(degraded)
        .register_shared(echo.clone(), opts());
    let instr = instruction("Check providers", None);
    let pass = gather(&mut b, &instr).await.unwrap();
    assert_eq!(json!(*pass.report), out["report"]);
    assert_eq!(json!(b.providers().stats()), out["registry_stats"]);
    assert_eq!(json!(*echo.seen.lock().unwrap()), out["echo_seen"]);

    let req = &requests("context_providers/non_string_and_degraded")[0];
    let sent = guidance_of(req["messages"][0]["content"].as_str().unwrap()).unwrap();
    assert_eq!(
        fold_guidance(Some(&system_text(&b)), &pass.blocks_text, ""),
        sent
    );
}

#[tokio::test]
async fn untouched_or_empty_registry() {
    let out = output("context_providers/untouched_or_empty_registry");
    let mut b = branch_with_system(Some("S"));
    let before = json!({
        "registry_created": b.try_providers().is_some(),
        "last_context_report": b.last_context_report().map(|r| json!(*r)),
    });
    assert_eq!(before, out["before_access"]);

    // A turn on an untouched branch creates nothing and reports nothing.
    assert!(gather(&mut b, &instruction("first", None)).await.is_none());
    let after = json!({
        "registry_created": b.try_providers().is_some(),
        "last_context_report": b.last_context_report().map(|r| json!(*r)),
    });
    assert_eq!(after, out["after_turn_untouched"]);
    assert!(
        b.extensions().is_empty(),
        "an untouched registry costs nothing"
    );

    let reg = b.providers();
    let empty = json!({
        "bool": !reg.is_empty(), "len": reg.len(), "budget": reg.budget(),
        "names": reg.names(), "stats": reg.stats(),
    });
    assert_eq!(empty, out["empty_registry"]);
    assert_eq!(reg.budget(), DEFAULT_BUDGET);
    assert!(gather(&mut b, &instruction("second", None)).await.is_none());
    assert_eq!(
        json!({"last_context_report": b.last_context_report().map(|r| json!(*r))}),
        out["after_turn_empty"]
    );

    // Both requests fold only the system text ("Guidance: S").
    let reqs = requests("context_providers/untouched_or_empty_registry");
    for (req, _) in reqs.iter().zip(0..) {
        let sent = guidance_of(req["messages"][0]["content"].as_str().unwrap()).unwrap();
        assert_eq!(fold_guidance(Some(&system_text(&b)), "", ""), sent);
    }
}

#[tokio::test]
async fn an_empty_pass_clears_the_previous_report() {
    // ADR-0018's intended fix: the report is turn-scoped.
    let mut b = branch_with_system(Some("S"));
    b.providers().register(TestProvider::text("x").named("x"));
    assert!(gather(&mut b, &instruction("one", None)).await.is_some());
    assert!(b.last_context_report().is_some());
    b.providers().clear();
    assert!(gather(&mut b, &instruction("two", None)).await.is_none());
    assert!(b.last_context_report().is_none());
    assert_eq!(b.providers().stats().recall_turns, 1);
}

#[tokio::test]
async fn gather_writeback_after_operate() {
    let out = output("context_providers/gather_writeback_after_operate");
    let mut b = branch_with_system(Some("S"));
    let log: CallLog = Default::default();
    let plain = TestProvider::text("plain").named("plain").logging(&log);
    let none_wb = TestProvider::text("none-wb").named("none-wb").logging(&log);
    let sync_wb = Arc::new(
        TestProvider::text("sync-wb")
            .named("sync-wb")
            .with_writeback(Writeback::Fails)
            .logging(&log),
    );
    let noncall = TestProvider::text("noncallable")
        .named("noncallable")
        .with_writeback(Writeback::Fails)
        .logging(&log);
    let wb1 = Arc::new(
        TestProvider::text("wb1 text")
            .named("wb1")
            .with_writeback(Writeback::Records)
            .logging(&log),
    );
    let wb2 = Arc::new(
        TestProvider::text("wb2 text")
            .named("wb2")
            .with_writeback(Writeback::Records)
            .logging(&log),
    );
    b.providers()
        .register_with(plain, opts().name("plain"))
        .register_with(none_wb, opts().name("none_wb"))
        .register_shared(sync_wb.clone(), opts().name("sync_wb"))
        .register_with(noncall, opts().name("noncallable"))
        .register_shared(wb1.clone(), opts().name("wb1"))
        .register_shared(wb2.clone(), opts().name("wb2"));

    let pass = gather(&mut b, &instruction("Compute both products.", None))
        .await
        .unwrap();
    assert_eq!(json!(*pass.report), out["report"]);
    let req = &requests("context_providers/gather_writeback_after_operate")[0];
    let sent = guidance_of(req["messages"][0]["content"].as_str().unwrap()).unwrap();
    assert_eq!(
        fold_guidance(Some(&system_text(&b)), &pass.blocks_text, ""),
        sent
    );

    // operate ran multiply(2, 21) and multiply(5, 5).
    let responses = [
        action_response("multiply", json!({"a": 2, "b": 21}), json!(42)),
        action_response("multiply", json!({"a": 5, "b": 5}), json!(25)),
    ];
    let summary = gather_writeback(&mut b, &responses).await;
    assert_eq!((summary.called, summary.records, summary.failed), (4, 4, 2));

    let expected_wb = |name: &str| -> Value {
        let calls = out["writebacks"][name].as_array().unwrap();
        Value::Array(
            calls
                .iter()
                .map(|call| {
                    Value::Array(
                        call.as_array()
                            .unwrap()
                            .iter()
                            .map(|r| r["value"].clone())
                            .collect(),
                    )
                })
                .collect(),
        )
    };
    assert_eq!(json!(*wb1.writebacks.lock().unwrap()), expected_wb("wb1"));
    assert_eq!(json!(*wb2.writebacks.lock().unwrap()), expected_wb("wb2"));
    assert_eq!(
        json!(
            sync_wb
                .writeback_calls
                .load(std::sync::atomic::Ordering::SeqCst)
        ),
        out["sync_calls"]
    );
    assert_eq!(json!(b.providers().stats()), out["registry_stats"]);
    assert_eq!(json!(*b.last_context_report().unwrap()), out["report"]);

    // Sequential and in registration order; hooks without writeback are
    // skipped, failures contained.
    let log = log.lock().unwrap();
    let writebacks: Vec<&str> = log
        .iter()
        .filter(|l| l.starts_with("writeback:"))
        .map(String::as_str)
        .collect();
    assert_eq!(
        writebacks,
        [
            "writeback:sync-wb",
            "writeback:noncallable",
            "writeback:wb1",
            "writeback:wb2"
        ]
    );
}

#[tokio::test]
async fn no_writeback_without_actions() {
    let out = output("context_providers/no_writeback_without_actions");
    let mut b = branch_with_system(Some("S"));
    let wb = Arc::new(
        TestProvider::text("wb")
            .named("wb")
            .with_writeback(Writeback::Records),
    );
    b.providers().register_shared(wb.clone(), opts().name("wb"));
    let reqs = requests("context_providers/no_writeback_without_actions");
    for (turn, text) in ["one", "two", "three"].into_iter().enumerate() {
        let pass = gather(&mut b, &instruction(text, None)).await.unwrap();
        // Every request folds the new blocks into its oldest instruction
        // ("one"), never into the current turn.
        let sent = guidance_of(reqs[turn]["messages"][0]["content"].as_str().unwrap()).unwrap();
        assert_eq!(
            fold_guidance(Some(&system_text(&b)), &pass.blocks_text, ""),
            sent
        );
        // None of the three operate calls produced action responses, so
        // the verb passes none and nothing is written back.
        let s = gather_writeback(&mut b, &[]).await;
        assert_eq!(s.called, 0);
    }
    assert_eq!(json!(*wb.writebacks.lock().unwrap()), out["writebacks"]);
    assert_eq!(json!(b.providers().stats()), out["registry_stats"]);
    assert_eq!(json!(wb.calls()), out["provide_calls"]);
}

// ---- the same scenarios through the verbs, against the loopback mock ----

#[tokio::test]
async fn registry_report_mixed_through_communicate() {
    let name = "context_providers/registry_report_mixed";
    let mut fx = fixture(name);
    support::verbs::normalise_all(&mut fx.output);
    let server = scripted(name).await;
    let mut b = Branch::builder()
        .system("Base system.")
        .chat_model(model(&server, "gpt-4.1-mini"))
        .build()
        .unwrap();
    let providers = register_mixed(&mut b);
    let r = b
        .communicate(CommunicateOptions::new("How tall is the tower?").guidance("Be exact."))
        .await
        .unwrap();
    assert_eq!(
        r,
        Reply::Text(fx.output["return_value"]["value"].as_str().unwrap().into())
    );
    assert_requests(&server, &fx.requests);
    assert_eq!(calls_of(&providers), fx.output["provider_calls"]);
    let reg = b.try_providers().unwrap();
    assert_eq!(json!(reg.names()), fx.output["registry_names"]);
    assert_eq!(json!(reg.stats()), fx.output["registry_stats"]);
    let report = b.last_context_report().expect("the turn's report is kept");
    assert_eq!(json!(*report), fx.output["report"]);
    // Instruction and reply are recorded; no block is ever stored.
    assert_eq!(b.messages().len(), 3);
    let mut cmp = Comparer::new(&fx);
    cmp.check(&fx, "/messages", &msg_summary(&b));
    cmp.check(&fx, "/to_dict", &to_dict(&b, &server));
    cmp.finish();
}

#[tokio::test]
async fn no_system_all_skipped_through_communicate() {
    let name = "context_providers/no_system_all_skipped";
    let fx = fixture(name);
    let server = scripted(name).await;
    let mut b = Branch::builder()
        .chat_model(model(&server, "gpt-4.1-mini"))
        .build()
        .unwrap();
    let a = Arc::new(TestProvider::text("A block."));
    let f = Arc::new(TestProvider::new(Provide::Fail("provider exploded".into())).named("failing"));
    b.providers()
        .register_shared(a.clone(), opts().name("a").priority(2))
        .register_shared(f.clone(), opts());
    let r = b.communicate(CommunicateOptions::new("Hi")).await.unwrap();
    assert_eq!(r, Reply::Text("ok".into()));
    // Without a system message nothing is folded: "Instruction: Hi".
    assert_requests(&server, &fx.requests);
    let report = b.last_context_report().expect("report kept");
    assert_eq!(json!(*report), fx.output["report"]);
    assert_eq!(
        json!({"a": a.calls(), "failing": f.calls()}),
        fx.output["provider_calls"]
    );
    assert_eq!(json!(b.providers().stats()), fx.output["registry_stats"]);
}

#[tokio::test]
async fn non_string_and_degraded_through_communicate() {
    let name = "context_providers/non_string_and_degraded";
    let fx = fixture(name);
    let server = scripted(name).await;
    let mut b = Branch::builder()
        .system("S")
        .chat_model(model(&server, "gpt-4.1-mini"))
        .build()
        .unwrap();
    let echo = Arc::new(TestProvider::text("ECHO block.").named("echo"));
    b.providers()
        .register(
            TestProvider::new(Provide::Fail("provide returned int, not str".into()))
                .named("non_string"),
        )
        .register(
            TestProvider::text("DEGRADED-BUT-USEFUL note.")
                .named("degraded")
                .degraded("index is stale"),
        )
        .register_shared(echo.clone(), opts());
    b.communicate(CommunicateOptions::new("Check providers"))
        .await
        .unwrap();
    assert_requests(&server, &fx.requests);
    assert_eq!(
        json!(*b.last_context_report().unwrap()),
        fx.output["report"]
    );
    assert_eq!(json!(b.providers().stats()), fx.output["registry_stats"]);
    // Providers see the instruction before it is added to the branch.
    assert_eq!(json!(*echo.seen.lock().unwrap()), fx.output["echo_seen"]);
}

#[tokio::test]
async fn untouched_or_empty_registry_through_communicate() {
    let name = "context_providers/untouched_or_empty_registry";
    let fx = fixture(name);
    let server = scripted(name).await;
    let mut b = Branch::builder()
        .system("S")
        .chat_model(model(&server, "gpt-4.1-mini"))
        .build()
        .unwrap();
    b.communicate(CommunicateOptions::new("first"))
        .await
        .unwrap();
    let after = json!({
        "registry_created": b.try_providers().is_some(),
        "last_context_report": b.last_context_report().map(|r| json!(*r)),
    });
    assert_eq!(after, fx.output["after_turn_untouched"]);
    assert!(
        b.extensions()
            .get::<branch_providers::ContextProviderRegistry>()
            .is_none(),
        "a turn creates no registry"
    );
    let _ = b.providers();
    b.communicate(CommunicateOptions::new("second"))
        .await
        .unwrap();
    assert_eq!(
        json!({"last_context_report": b.last_context_report().map(|r| json!(*r))}),
        fx.output["after_turn_empty"]
    );
    assert_requests(&server, &fx.requests);
}

#[tokio::test]
async fn gather_writeback_after_operate_through_operate() {
    let name = "context_providers/gather_writeback_after_operate";
    let mut fx = fixture(name);
    support::verbs::normalise_all(&mut fx.output);
    let server = scripted(name).await;
    let mut b = Branch::builder()
        .system("S")
        .chat_model(model(&server, "gpt-4.1-mini"))
        .tool(support::verbs::multiply())
        .build()
        .unwrap();
    let log: CallLog = Default::default();
    let sync_wb = Arc::new(
        TestProvider::text("sync-wb")
            .named("sync-wb")
            .with_writeback(Writeback::Fails)
            .logging(&log),
    );
    let wb1 = Arc::new(
        TestProvider::text("wb1 text")
            .with_writeback(Writeback::Records)
            .logging(&log)
            .named("wb1"),
    );
    let wb2 = Arc::new(
        TestProvider::text("wb2 text")
            .with_writeback(Writeback::Records)
            .logging(&log)
            .named("wb2"),
    );
    b.providers()
        .register_with(TestProvider::text("plain"), opts().name("plain"))
        .register_with(TestProvider::text("none-wb"), opts().name("none_wb"))
        .register_shared(sync_wb.clone(), opts().name("sync_wb"))
        .register_with(
            TestProvider::text("noncallable")
                .named("noncallable")
                .with_writeback(Writeback::Fails)
                .logging(&log),
            opts().name("noncallable"),
        )
        .register_shared(wb1.clone(), opts().name("wb1"))
        .register_shared(wb2.clone(), opts().name("wb2"));
    let r = b
        .operate(
            OperateOptions::new("Compute both products.")
                .actions(true)
                .response_format(answer_format()),
        )
        .await
        .unwrap();
    assert_eq!(
        r.parsed,
        Parsed::Value(fx.output["return_value"]["value"].clone())
    );
    assert_eq!(r.action_responses.len(), 2);
    assert_requests(&server, &fx.requests);

    let expected_wb = |name: &str| -> Value {
        let calls = fx.output["writebacks"][name].as_array().unwrap();
        Value::Array(
            calls
                .iter()
                .map(|call| {
                    Value::Array(
                        call.as_array()
                            .unwrap()
                            .iter()
                            .map(|r| r["value"].clone())
                            .collect(),
                    )
                })
                .collect(),
        )
    };
    assert_eq!(json!(*wb1.writebacks.lock().unwrap()), expected_wb("wb1"));
    assert_eq!(json!(*wb2.writebacks.lock().unwrap()), expected_wb("wb2"));
    assert_eq!(
        json!(
            sync_wb
                .writeback_calls
                .load(std::sync::atomic::Ordering::SeqCst)
        ),
        fx.output["sync_calls"]
    );
    let writebacks: Vec<String> = log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.starts_with("writeback:"))
        .cloned()
        .collect();
    assert_eq!(
        writebacks,
        [
            "writeback:sync-wb",
            "writeback:noncallable",
            "writeback:wb1",
            "writeback:wb2"
        ]
    );
    assert_eq!(json!(b.providers().stats()), fx.output["registry_stats"]);
    assert_eq!(
        json!(*b.last_context_report().unwrap()),
        fx.output["report"]
    );
    let mut cmp = Comparer::new(&fx);
    cmp.check(&fx, "/messages", &msg_summary(&b));
    cmp.finish();
}

/// `invoke_actions=False`, an empty `action_requests` and no actions at
/// all: three operate calls, none writes back.
#[tokio::test]
async fn no_writeback_without_actions_through_operate() {
    let name = "context_providers/no_writeback_without_actions";
    let mut fx = fixture(name);
    support::verbs::normalise_all(&mut fx.output);
    let server = scripted(name).await;
    let mut b = Branch::builder()
        .system("S")
        .chat_model(model(&server, "gpt-4.1-mini"))
        .tool(support::verbs::multiply())
        .build()
        .unwrap();
    let wb = Arc::new(
        TestProvider::text("wb")
            .named("wb")
            .with_writeback(Writeback::Records),
    );
    b.providers().register_shared(wb.clone(), opts().name("wb"));
    let turns = [
        OperateOptions::new("one")
            .actions(true)
            .invoke_actions(false),
        OperateOptions::new("two").actions(true),
        OperateOptions::new("three"),
    ];
    for (opts, answer) in turns.into_iter().zip(["a", "b", "c"]) {
        let r = b
            .operate(opts.response_format(answer_format()))
            .await
            .unwrap();
        assert!(r.action_responses.is_empty());
        let Parsed::Value(v) = &r.parsed else {
            panic!("structured answer expected, got {:?}", r.parsed)
        };
        assert_eq!(v["answer"], answer);
    }
    assert_requests(&server, &fx.requests);
    assert_eq!(
        json!(*wb.writebacks.lock().unwrap()),
        fx.output["writebacks"]
    );
    assert_eq!(
        wb.writeback_calls.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
    assert_eq!(json!(b.providers().stats()), fx.output["registry_stats"]);
    assert_eq!(json!(wb.calls()), fx.output["provide_calls"]);
}

// ---- the verified examples of extensions.md §2.3 and edge rules ---------

#[tokio::test]
async fn budget_admission_is_greedy_by_priority_and_reported_in_registration_order() {
    let mut b = branch_with_system(Some("S"));
    let reg = b.providers();
    reg.set_budget(5);
    reg.register_with(
        TestProvider::text("one two three four"),
        opts().name("a").priority(1),
    )
    .register_with(
        TestProvider::text("alpha beta gamma"),
        opts().name("b").priority(2),
    )
    .register_with(TestProvider::text("x"), opts().name("c").priority(0));
    let pass = gather(&mut b, &instruction("q", None)).await.unwrap();
    assert_eq!(pass.report.blocks, ["alpha beta gamma", "x"]);
    assert_eq!(
        json!(pass.report.fired),
        json!([{"provider_name": "b", "tokens": 3}, {"provider_name": "c", "tokens": 1}])
    );
    assert_eq!(pass.report.skipped, ["a"]);
}

#[tokio::test]
async fn verified_mixed_example_with_truthiness_rules() {
    let mut b = branch_with_system(Some("S"));
    let big = "word ".repeat(250);
    let reg = b.providers();
    reg.register_with(TestProvider::text("LOW BLOCK"), opts().name("low"))
        .register_with(
            TestProvider::text("HIGH BLOCK"),
            opts().name("high").priority(5),
        )
        .register_with(TestProvider::new(Provide::Nothing), opts().name("none"))
        .register_with(TestProvider::text(""), opts().name("empty"))
        .register_with(
            TestProvider::new(Provide::Fail("boom".into())),
            opts().name("err"),
        )
        .register_with(TestProvider::text(big), opts().name("big").max_tokens(10))
        .register_with(TestProvider::new(Provide::Panic), opts().name("bad"))
        .register_with(TestProvider::text("z"), opts().name("zero").max_tokens(0));
    let pass = gather(&mut b, &instruction("q", None)).await.unwrap();
    assert_eq!(pass.report.blocks, ["LOW BLOCK", "HIGH BLOCK", "z"]);
    assert_eq!(pass.report.skipped, ["big"]);
    assert_eq!(pass.report.failed, ["err", "bad"]);
    assert_eq!(
        fold_guidance(Some("SYS"), &pass.blocks_text, "G"),
        "SYSLOW BLOCK\nHIGH BLOCK\nzG"
    );
}

#[tokio::test]
async fn negative_limit_and_non_positive_budget() {
    let mut b = branch_with_system(Some("S"));
    b.providers()
        .register_with(TestProvider::text("a"), opts().name("neg").max_tokens(-1))
        .register_with(TestProvider::text("b"), opts().name("ok"));
    let pass = gather(&mut b, &instruction("q", None)).await.unwrap();
    assert_eq!(pass.report.skipped, ["neg"]);
    assert_eq!(pass.report.blocks, ["b"]);

    let mut b = branch_with_system(Some("S"));
    b.providers().set_budget(0);
    b.providers()
        .register_with(TestProvider::text("costs tokens"), opts().name("pos"))
        // Special-token text cannot be counted by the reference: it costs
        // 0 and therefore fits even a zero budget.
        .register_with(TestProvider::text("<|endoftext|>"), opts().name("special"));
    let pass = gather(&mut b, &instruction("q", None)).await.unwrap();
    assert_eq!(pass.report.skipped, ["pos"]);
    assert_eq!(
        json!(pass.report.fired),
        json!([{"provider_name": "special", "tokens": 0}])
    );
}

#[tokio::test]
async fn names_fall_back_to_the_provider_then_its_type() {
    let mut reg = ContextProviderRegistry::default();
    reg.register(TestProvider::text("x").named("own"))
        .register(Anonymous)
        .register_with(TestProvider::text("y").named("own"), opts().name("given"));
    assert_eq!(reg.names(), ["own", "Anonymous", "given"]);
}

#[tokio::test]
async fn writeback_panics_are_contained_and_later_hooks_run() {
    let mut b = branch_with_system(Some("S"));
    let after = Arc::new(
        TestProvider::text("a")
            .named("after")
            .with_writeback(Writeback::Records),
    );
    b.providers()
        .register(
            TestProvider::text("p")
                .named("panics")
                .with_writeback(Writeback::Panics),
        )
        .register_shared(after.clone(), opts());
    let r = [action_response("f", json!({}), json!(1))];
    let s = gather_writeback(&mut b, &r).await;
    assert_eq!((s.called, s.records, s.failed), (2, 1, 1));
    assert_eq!(after.writebacks.lock().unwrap().len(), 1);
    let stats = b.providers().stats();
    assert_eq!((stats.writeback_records, stats.writeback_failed), (1, 1));
}

#[tokio::test]
async fn writeback_without_a_registry_does_nothing() {
    let mut b = branch_with_system(Some("S"));
    let r = [action_response("f", json!({}), json!(1))];
    assert_eq!(gather_writeback(&mut b, &r).await.called, 0);
    assert!(
        b.try_providers().is_none(),
        "writeback does not create the registry"
    );
}

#[test]
fn guidance_reader_handles_both_yaml_forms() {
    assert_eq!(
        guidance_of("Guidance: S\nInstruction: x").as_deref(),
        Some("S")
    );
    assert_eq!(
        guidance_of("Guidance: |-\n  A\n\n  B\nInstruction: x").as_deref(),
        Some("A\n\nB")
    );
    assert_eq!(guidance_of("Instruction: x"), None);
    let _ = obj(json!({}));
}

#[test]
fn gather_runs_outside_a_tokio_runtime() {
    // A caller on another executor: counting falls back to the caller's
    // thread instead of Tokio's blocking pool.
    let mut b = branch_with_system(Some("S"));
    b.providers()
        .register(TestProvider::text("alpha beta gamma").named("p"));
    let instr = instruction("q", None);
    let pass = futures_executor_block_on(gather(&mut b, &instr)).unwrap();
    assert_eq!(
        json!(pass.report.fired),
        json!([{"provider_name": "p", "tokens": 3}])
    );
}

/// A minimal single-future executor (no Tokio context).
fn futures_executor_block_on<F: std::future::Future>(f: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        match f.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => std::thread::park(),
        }
    }
}

/// Providers given for one call run after the branch's own, fold into that
/// request's guidance, count in the turn's report, and are not kept: the
/// next call sees only the registered ones.
#[tokio::test]
async fn per_call_providers_join_one_request_only() {
    let server = branch_models::mock::MockServer::start().await;
    server.script([
        branch_models::mock::MockReply::text("one"),
        branch_models::mock::MockReply::text("two"),
    ]);
    let mut b = Branch::builder()
        .system("S")
        .chat_model(model(&server, "gpt-4.1-mini"))
        .build()
        .unwrap();
    b.providers()
        .register_with(TestProvider::text("REGISTERED"), opts().name("kept"));
    b.communicate(
        CommunicateOptions::new("first")
            .context_provider(TestProvider::text("ONCE"), opts().name("once")),
    )
    .await
    .unwrap();
    let report = b.last_context_report().unwrap();
    let fired: Vec<&str> = report
        .fired
        .iter()
        .map(|f| f.provider_name.as_str())
        .collect();
    assert_eq!(fired, ["kept", "once"]);
    b.communicate(CommunicateOptions::new("second"))
        .await
        .unwrap();
    let bodies = server.bodies();
    let first = bodies[0]["messages"][0]["content"].as_str().unwrap();
    let second = bodies[1]["messages"][0]["content"].as_str().unwrap();
    assert!(
        first.contains("REGISTERED") && first.contains("ONCE"),
        "{first}"
    );
    assert!(
        second.contains("REGISTERED") && !second.contains("ONCE"),
        "{second}"
    );
    assert_eq!(b.try_providers().unwrap().len(), 1);
}
