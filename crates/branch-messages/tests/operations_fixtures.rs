//! Request compilation against every `operations` fixture that recorded
//! provider requests: the branch state each request was compiled from is
//! rebuilt, compiled, and compared with the request's `messages`.
//!
//! `stream_sse_imodel` passed its `messages` straight to the model; its
//! test shows the equivalent compiled turn (plain content). The scenarios
//! whose requests.jsonl is empty (`act_direct`, `parse_direct`,
//! `run_api_model_rejected`) send nothing to compile.

mod support;

use branch_core::message::{InstructionContent, Message, MessageManager, SystemContent};
use branch_messages::{
    CompileOptions, RenderedContent, RequestMessage, ResponseFormat, compile_request,
};
use serde_json::{Map, Value, json};
use support::*;

fn ins(text: &str) -> InstructionContent {
    InstructionContent {
        instruction: Some(text.into()),
        ..Default::default()
    }
}

fn with_system(text: &str) -> MessageManager {
    let mut mm = MessageManager::new();
    mm.set_system(Message::system(SystemContent::new(text)));
    mm
}

fn compile(mm: &MessageManager, current: &InstructionContent) -> Vec<RequestMessage> {
    compile_request(mm, current, &CompileOptions::default()).expect("compiles")
}

fn as_json(msgs: &[RequestMessage]) -> Value {
    Value::Array(msgs.iter().map(RequestMessage::to_value).collect())
}

/// The request's messages with the banner example swapped for ours
/// (see `with_our_example`).
fn expected_with_format(request: &Value, format: &ResponseFormat) -> Value {
    let mut msgs = request["messages"].clone();
    for m in msgs.as_array_mut().expect("messages") {
        let text = m["content"].as_str().expect("text content").to_owned();
        if text.contains("ResponseFormat: \"") {
            m["content"] = Value::String(with_our_example(&text, format));
        }
    }
    msgs
}

fn args(pairs: &[(&str, i64)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect()
}

#[test]
fn chat_and_record() {
    let reqs = requests("chat_and_record");
    let mm = with_system("S");
    let current = InstructionContent {
        guidance: Some("short".into()),
        ..ins("Please record this")
    };
    assert_eq!(as_json(&compile(&mm, &current)), reqs[0]["messages"]);
}

#[test]
fn chat_not_recorded() {
    let reqs = requests("chat_not_recorded");
    let mm = with_system("You are terse.");
    let first = InstructionContent {
        guidance: Some("One sentence.".into()),
        prompt_context: vec![json!({"mood": "cheerful"})],
        ..ins("Say hello")
    };
    assert_eq!(as_json(&compile(&mm, &first)), reqs[0]["messages"]);
    // chat() records nothing, so the second call sees the same history.
    assert_eq!(as_json(&compile(&mm, &ins("Again"))), reqs[1]["messages"]);
}

#[test]
fn chat_with_history() {
    let reqs = requests("chat_with_history");
    let mut mm = with_system("History test.");
    mm.add_message(Message::instruction(InstructionContent {
        guidance: Some("g1".into()),
        ..ins("First question")
    }));
    mm.add_message(Message::assistant("First answer"));
    mm.add_message(Message::instruction(InstructionContent {
        prompt_context: vec!["ctx-2".into()],
        response_format: Some(json!({"x": "int"})),
        ..ins("Second question")
    }));
    mm.add_message(Message::assistant("Second answer"));
    assert_eq!(
        as_json(&compile(&mm, &ins("Third question"))),
        reqs[0]["messages"]
    );
}

#[test]
fn communicate_provider_error() {
    let reqs = requests("communicate_provider_error");
    assert_eq!(
        as_json(&compile(&with_system("S"), &ins("Hello?"))),
        reqs[0]["messages"]
    );
}

#[test]
fn communicate_recorded() {
    let reqs = requests("communicate_recorded");
    let mm = with_system("You answer geography questions.");
    let current = InstructionContent {
        guidance: Some("Answer in one sentence.".into()),
        prompt_context: vec!["Europe".into()],
        ..ins("What is the capital of France?")
    };
    assert_eq!(as_json(&compile(&mm, &current)), reqs[0]["messages"]);
}

#[test]
fn communicate_request_fields() {
    // request_fields shape parsing only; they are not rendered.
    let reqs = requests("communicate_request_fields");
    assert_eq!(
        as_json(&compile(
            &with_system("Librarian."),
            &ins("Name a classic novel")
        )),
        reqs[0]["messages"]
    );
}

#[test]
fn communicate_response_format() {
    let reqs = requests("communicate_response_format");
    let format = ResponseFormat::Schema(reference_schema("AnswerRequest"));
    let asked = |text: &str| InstructionContent {
        response_format: Some(format.to_value()),
        ..ins(text)
    };
    let mut mm = with_system("Math helper.");

    let first = asked("What is 2+2?");
    assert_eq!(
        as_json(&compile(&mm, &first)),
        expected_with_format(&reqs[0], &format)
    );
    mm.add_message(Message::instruction(first));
    mm.add_message(Message::assistant(
        "```json\n{\"answer\": \"4\", \"confidence\": 0.99}\n```",
    ));

    let second = asked("And in words?");
    assert_eq!(
        as_json(&compile(&mm, &second)),
        expected_with_format(&reqs[1], &format)
    );
    mm.add_message(Message::instruction(second));
    mm.add_message(Message::assistant("The answer is four, I am fairly sure."));

    // The parse-repair request, compiled over the whole conversation.
    let repair = InstructionContent {
        guidance: Some(
            "follow the required response format, using the model schema as a guide The previous \
             attempt did not validate: Failed to parse text: Input cannot be None. Correct exactly \
             what that error names — every field it reports must carry a value of the required type."
                .into(),
        ),
        prompt_context: vec![json!({"text_to_format": "The answer is four, I am fairly sure."})],
        response_format: Some(format.to_value()),
        ..ins("reformat text into specified model or structure")
    };
    assert_eq!(
        as_json(&compile(&mm, &repair)),
        expected_with_format(&reqs[2], &format)
    );
}

#[test]
fn interpret() {
    let reqs = requests("interpret");
    let current = InstructionContent {
        guidance: Some("Domain hint: math. Desired style: precise.".into()),
        prompt_context: vec!["User input: gimme some primes >10".into()],
        ..ins(
            "You are given a user's raw instruction or question. Your task is to rewrite it into a \
             clearer, more structured prompt for an LLM or system, making any implicit or missing \
             details explicit. Return only the re-written prompt. Do not assume any details not \
             mentioned in the input, nor give additional instruction than what is explicitly stated.",
        )
    };
    assert_eq!(
        as_json(&compile(&with_system("S"), &current)),
        reqs[0]["messages"]
    );
}

#[test]
fn operate_invoke_actions_false() {
    // invoke_actions=false: no tools offered, the plain typed schema.
    let reqs = requests("operate_invoke_actions_false");
    let format = ResponseFormat::Schema(reference_schema("AnswerResponseRequest"));
    let current = InstructionContent {
        response_format: Some(format.to_value()),
        ..ins("Do not call tools.")
    };
    assert_eq!(
        as_json(&compile(&with_system("S"), &current)),
        expected_with_format(&reqs[0], &format)
    );
}

#[test]
fn operate_pydantic_response_format() {
    let reqs = requests("operate_pydantic_response_format");
    let format = ResponseFormat::Schema(reference_schema("AnswerResponseRequest"));
    let current = InstructionContent {
        response_format: Some(format.to_value()),
        ..ins("What is 2+2?")
    };
    assert_eq!(
        as_json(&compile(&with_system("You are precise."), &current)),
        expected_with_format(&reqs[0], &format)
    );
}

#[test]
fn operate_with_actions() {
    let reqs = requests("operate_with_actions");
    let format = ResponseFormat::Schema(reference_schema("AnswerWithActions"));
    let current = InstructionContent {
        tool_schemas: reference_tools("tools_multiply_lookup_capital"),
        response_format: Some(format.to_value()),
        ..ins("Compute 6*7 and find the capital of France.")
    };
    assert_eq!(
        as_json(&compile(&with_system("Use tools when helpful."), &current)),
        expected_with_format(&reqs[0], &format)
    );
}

/// ReAct's requests end with a token-usage note; the count comes from the
/// model's tokenizer, so the note is checked for format and re-attached.
fn compile_react(
    mm: &MessageManager,
    current: &InstructionContent,
    request: &Value,
    format: &ResponseFormat,
) {
    let mut expected = expected_with_format(request, format);
    let last = expected
        .as_array_mut()
        .and_then(|a| a.last_mut())
        .expect("a last message");
    let text = last["content"].as_str().expect("text").to_owned();
    let (body, note) = split_token_note(&text);
    last["content"] = Value::String(body.to_owned());
    let mut got = compile(mm, current);
    assert_eq!(as_json(&got), expected);
    got.last_mut().expect("a message").content.push_text(&note);
    assert_eq!(
        got.last().map(|m| m.content.clone()),
        Some(RenderedContent::Text(text))
    );
}

#[test]
fn react_two_rounds() {
    let reqs = requests("react_two_rounds");
    let analysis = ResponseFormat::Schema(reference_schema("ReActAnalysisResponseRequest"));
    let answer = ResponseFormat::Schema(reference_schema("AnalysisResponseRequest"));
    let first_ext = "This is a multi-step task. You have room for up to 2 reason-act rounds — that is headroom to do the job well, not a target to fill or a clock to race. Plan across rounds, and within each round batch every independent tool call together (concurrent actions) so you move fast without wasting rounds. Set extension_needed=True while the task is unfinished — the normal state as you work. Set it to False ONLY once you have done the work and verified it succeeded; never for a plan or an interim summary. Stopping before the task is complete and verified is the only failure.";
    let round = |text: &str| InstructionContent {
        tool_schemas: reference_tools("tools_multiply"),
        response_format: Some(analysis.to_value()),
        ..ins(text)
    };
    let mut mm = with_system("You reason step by step.");

    let r1 = round(&format!("What is 6 times 7?\n\n{first_ext}"));
    compile_react(&mm, &r1, &reqs[0], &analysis);
    mm.add_message(Message::instruction(r1));
    mm.add_message(Message::assistant(
        reqs[1]["messages"][1]["content"]
            .as_str()
            .expect("round 1 reply"),
    ));
    let req = mm.add_message(Message::action_request(
        "multiply",
        args(&[("a", 6), ("b", 7)]),
    ));
    mm.add_action_response(req, Some(42.into()), None, None)
        .expect("request exists");

    let r2 = round(first_ext);
    compile_react(&mm, &r2, &reqs[1], &analysis);
    mm.add_message(Message::instruction(r2));
    mm.add_message(Message::assistant(
        reqs[2]["messages"][3]["content"]
            .as_str()
            .expect("round 2 reply"),
    ));

    let last = InstructionContent {
        response_format: Some(answer.to_value()),
        ..ins(
            "Given your reasoning and actions, please now provide the final answer to the user's \
             request:\n\nWhat is 6 times 7?",
        )
    };
    compile_react(&mm, &last, &reqs[2], &answer);
}

#[test]
fn run_scripted_cli_stream() {
    let reqs = requests("run_scripted_cli_stream");
    assert_eq!(
        as_json(&compile(&with_system("Streamer."), &ins("say hello"))),
        reqs[0]["messages"]
    );
}

#[test]
fn stream_sse_imodel() {
    // The scenario called the model directly with one raw user message;
    // a branch without history sends the same for plain content.
    let reqs = requests("stream_sse_imodel");
    let current = InstructionContent {
        plain_content: Some("stream please".into()),
        ..Default::default()
    };
    assert_eq!(
        as_json(&compile(&MessageManager::new(), &current)),
        reqs[0]["messages"]
    );
}
