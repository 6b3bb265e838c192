//! `lionagi chat --approve`: the question before each tool call. Every
//! tool is asked about (y / n / always) until answered "always". The turn
//! pauses first and, with `--store`, the pause is written to the store
//! before the question is asked, so a conversation killed at the prompt,
//! or interrupted while the approved calls run, loses nothing:
//! `--resume NAME --approve` asks again and continues it.

use std::collections::BTreeSet;

use branch_operations::{
    ApprovalPolicy, BranchApproval, Decision, PendingApproval, ProposedCall, ToolPolicy,
};
use tokio::runtime::Runtime;
use uuid::Uuid;

use super::chat_error::ChatError;
use super::conversation::Conversation;
use super::elicitation::Questions;
use super::input::{Input, Line};
use super::shown::one_line;

/// Longest display of a call's arguments, in characters: they are model
/// output, shown to decide, not to be read in full.
const MAX_SHOWN_ARGUMENTS: usize = 2_000;

/// Unclear answers accepted before the call is left undecided (and the
/// conversation stays paused).
const MAX_UNCLEAR_ANSWERS: usize = 5;

/// The tools answered "always" in this session.
#[derive(Debug, Default)]
pub(crate) struct Approvals {
    always: BTreeSet<String>,
}

/// What one answer means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Yes,
    No,
    Always,
}

fn parse_answer(text: &str) -> Option<Answer> {
    match text.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Some(Answer::Yes),
        "n" | "no" => Some(Answer::No),
        "a" | "always" => Some(Answer::Always),
        _ => None,
    }
}

/// How a proposed call is shown: its name and its arguments as JSON (so
/// control characters arrive escaped), cut at [`MAX_SHOWN_ARGUMENTS`].
pub(crate) fn describe(call: &ProposedCall) -> String {
    // JSON escapes C0 controls, not DEL or C1 ones.
    let json = serde_json::to_string(&call.arguments).unwrap_or_default();
    let args = one_line(&json);
    let shown: String = args.chars().take(MAX_SHOWN_ARGUMENTS).collect();
    let cut = if shown.len() < args.len() {
        " …(cut)"
    } else {
        ""
    };
    let name: String = call
        .function
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect();
    format!("tool call: {name} {shown}{cut}")
}

impl Approvals {
    /// Whether `tool` was answered "always".
    pub(crate) fn is_always(&self, tool: &str) -> bool {
        self.always.contains(tool)
    }

    /// `tool` runs without asking from now on.
    pub(crate) fn approve_always(&mut self, tool: &str) {
        self.always.insert(tool.to_owned());
    }

    /// The policy the chat's branch runs with.
    pub(crate) fn policy(&self) -> ApprovalPolicy {
        self.always.iter().fold(
            ApprovalPolicy::new().default_policy(ToolPolicy::Ask),
            |p, t| p.tool(t.clone(), ToolPolicy::Always),
        )
    }

    /// Asks about each call awaiting a decision, reading answers from
    /// `answer` (given the prompt). `None` when the person left (end of
    /// input, Ctrl-C) or gave no clear answer: the turn stays paused.
    pub(crate) fn ask(
        &mut self,
        pending: &PendingApproval,
        mut answer: impl FnMut(&str) -> Result<Line, ChatError>,
    ) -> Result<Option<Vec<(Uuid, Decision)>>, ChatError> {
        let mut decisions = Vec::new();
        for call in pending.waiting() {
            if self.always.contains(&call.function) {
                decisions.push((call.call_id, Decision::Approve));
                continue;
            }
            eprintln!("{}", describe(call));
            let prompt = "run it? [y]es / [n]o / [a]lways for this tool: ";
            let mut decided = None;
            for _ in 0..MAX_UNCLEAR_ANSWERS {
                let text = match answer(prompt)? {
                    Line::Text(t) => t,
                    Line::Eof | Line::Interrupted => return Ok(None),
                };
                match parse_answer(&text) {
                    Some(a) => {
                        decided = Some(a);
                        break;
                    }
                    None => eprintln!("answer y, n or always"),
                }
            }
            let Some(a) = decided else {
                return Ok(None);
            };
            let d = match a {
                Answer::Yes => Decision::Approve,
                Answer::No => Decision::Deny(None),
                Answer::Always => {
                    self.always.insert(call.function.clone());
                    Decision::Approve
                }
            };
            decisions.push((call.call_id, d));
        }
        Ok(Some(decisions))
    }
}

/// Settles the conversation's paused turn, if it has one: writes it to the
/// store (before asking), asks, resumes, writes the result. A person who
/// leaves at the question leaves the pause in the store:
/// [`ChatError::Interrupted`].
pub(crate) fn settle(
    rt: &Runtime,
    conv: &mut Conversation,
    input: Option<&mut Input>,
    questions: Option<&Questions>,
) -> Result<(), ChatError> {
    let pending = conv
        .branch_mut()
        .pending_approval()
        .map_err(|e| ChatError::Turn(e.to_string()))?;
    let Some(pending) = pending else {
        return Ok(());
    };
    let (Some(mut approvals), Some(input)) = (conv.approvals.take(), input) else {
        return Err(ChatError::Usage(format!(
            "conversation {} has {} tool call(s) awaiting approval; continue it with --approve",
            conv.resume_key(),
            pending.waiting().count()
        )));
    };
    let settled = ask_and_resume(rt, conv, &mut approvals, input, &pending, questions);
    conv.approvals = Some(approvals);
    settled
}

fn ask_and_resume(
    rt: &Runtime,
    conv: &mut Conversation,
    approvals: &mut Approvals,
    input: &mut Input,
    pending: &PendingApproval,
    questions: Option<&Questions>,
) -> Result<(), ChatError> {
    rt.block_on(conv.save_all())?;
    let answers = approvals.ask(pending, |prompt| input.answer(rt, prompt))?;
    let Some(decisions) = answers else {
        return Err(ChatError::Interrupted);
    };
    let branch = conv.branch_mut();
    branch.set_approval_policy(Some(approvals.policy()));
    // The approved calls may ask the person (MCP elicitation).
    let asking = questions.map(|q| (q, &mut *input));
    super::elicitation::drive(rt, asking, async {
        // The approved calls may take long: Ctrl-C drops them, and the
        // turn stays paused as stored (`resume` changes the branch only
        // once the batch is done).
        let ctrl_c = tokio::signal::ctrl_c();
        tokio::select! {
            biased;
            _ = ctrl_c => Err(ChatError::Interrupted),
            resumed = branch.resume(decisions) => {
                resumed.map_err(|e| ChatError::Turn(e.to_string())).map(drop)
            }
        }
    })?;
    rt.block_on(conv.save_all())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pending(names: &[&str]) -> PendingApproval {
        let calls = names
            .iter()
            .map(|n| {
                serde_json::from_value::<ProposedCall>(json!({
                    "call_id": Uuid::new_v4(), "function": n,
                    "arguments": {"path": "/tmp/x\u{1b}[2J\u{9b}0m\u{7f}"}, "status": "pending"
                }))
                .unwrap()
            })
            .collect::<Vec<_>>();
        serde_json::from_value(json!({
            "version": 1, "verb": "run", "created_at": 0.0, "expires_at": null,
            "strategy": "concurrent", "suppress_errors": true, "timeout_ms": null,
            "max_concurrency": null, "calls": calls, "structured": null
        }))
        .unwrap()
    }

    fn script(lines: &[&str]) -> impl FnMut(&str) -> Result<Line, ChatError> {
        let mut lines: Vec<Line> = lines
            .iter()
            .rev()
            .map(|l| Line::Text((*l).to_owned()))
            .collect();
        move |_| Ok(lines.pop().unwrap_or(Line::Eof))
    }

    #[test]
    fn yes_no_and_always_for_the_rest_of_the_session() {
        let mut a = Approvals::default();
        let p = pending(&["read", "write"]);
        let d = a.ask(&p, script(&["maybe", "y", "no"])).unwrap().unwrap();
        assert_eq!(d[0].1, Decision::Approve);
        assert_eq!(d[1].1, Decision::Deny(None));
        assert!(
            a.ask(&pending(&["x", "y"]), script(&["y"]))
                .unwrap()
                .is_none(),
            "the end of input leaves the turn paused"
        );
        let d = a
            .ask(&pending(&["read", "read"]), script(&["always"]))
            .unwrap()
            .unwrap();
        assert_eq!(d.len(), 2, "always covers the second call unasked");
        assert!(a.always.contains("read"));
        let p = a.policy();
        assert_eq!(p.evaluate("read", &Default::default()), ToolPolicy::Always);
        assert_eq!(p.evaluate("write", &Default::default()), ToolPolicy::Ask);
    }

    #[test]
    fn arguments_are_shown_escaped_and_bounded() {
        let p = pending(&["read"]);
        let shown = describe(p.waiting().next().unwrap());
        assert!(shown.starts_with("tool call: read {\"path\":"));
        // JSON escapes the C0 ones; DEL and C1 ones are dropped.
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        let mut long = p.calls[0].clone();
        long.arguments
            .insert("blob".into(), json!("x".repeat(10 * MAX_SHOWN_ARGUMENTS)));
        assert!(describe(&long).chars().count() < MAX_SHOWN_ARGUMENTS + 100);
    }

    /// A loopback model server and what a turn against it needs.
    struct Loopback {
        rt: Runtime,
        server: branch_models::mock::MockServer,
        model: std::sync::Arc<dyn branch_core::model::ChatModel>,
        info: super::super::chat_error::ModelInfo,
        display: super::super::turn::Display,
    }

    impl Loopback {
        fn start() -> Self {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let server = rt.block_on(branch_models::mock::MockServer::start());
            let config = branch_core::model::ModelConfig::builder()
                .provider("openai")
                .model("m")
                .base_url(&server.base_url())
                .allow_local_network(true)
                .build()
                .unwrap();
            let model =
                std::sync::Arc::new(branch_models::IModel::with_api_key(config, "k").unwrap());
            Self {
                rt,
                server,
                model,
                info: super::super::chat_error::ModelInfo {
                    label: "openai/m".into(),
                    provider: "openai".into(),
                    base_url: None,
                    key_var: None,
                },
                display: super::super::turn::Display::default(),
            }
        }

        /// The model's next reply: a call of `erase` on `/data`.
        fn calls_erase(&self) {
            self.server
                .push(branch_models::mock::MockReply::tool_calls(vec![
                    branch_models::mock::MockToolCall {
                        id: "call_1".into(),
                        name: "erase".into(),
                        arguments: json!("{\"path\": \"/data\"}"),
                    },
                ]));
        }

        /// A conversation opened with these `chat` arguments, `erase`
        /// registered.
        fn open(&self, args: &[&str]) -> Conversation {
            use super::super::chat_args::ChatArgs;
            let args = ChatArgs::parse(&words(args)).unwrap();
            let mut conv = self
                .rt
                .block_on(Conversation::open(&args, self.model.clone()))
                .unwrap();
            conv.branch_mut()
                .acts_mut()
                .register(erase(), false)
                .unwrap();
            conv
        }
    }

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| (*s).to_owned()).collect()
    }

    fn erase() -> std::sync::Arc<dyn branch_core::Tool> {
        branch_actions::DynamicTool::new(
            "erase",
            None,
            json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            |_| async { Ok::<_, String>(json!("erased")) },
        )
        .unwrap()
        .into_tool()
    }

    fn piped(lines: &[&str]) -> Input {
        Input::scripted(lines.iter().map(|l| Ok((*l).to_owned())).collect())
    }

    /// The whole `--approve` path with a real store and a loopback model:
    /// the pause is in the store before the question; a person who leaves
    /// at the question leaves it there (`branch pending` lists it); a new
    /// process resumes the conversation, asks again, and records the
    /// answer.
    #[test]
    fn a_pause_survives_leaving_at_the_question() {
        use super::super::turn;

        let lo = Loopback::start();
        let dir = std::env::temp_dir().join(format!("lionagi-approve-{}", Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("chat.db").to_string_lossy().into_owned();
        lo.calls_erase();
        let rt = &lo.rt;

        let mut conv = lo.open(&["--store", &db, "--name", "ops", "--approve"]);
        let answer = rt
            .block_on(turn::ask(
                conv.branch_mut(),
                "clean up",
                &lo.info,
                &lo.display,
            ))
            .unwrap();
        assert!(answer.paused);
        // Nobody answers: the pause stays, in the store.
        let mut gone = piped(&[]);
        let e = settle(rt, &mut conv, Some(&mut gone), None).unwrap_err();
        assert!(matches!(e, ChatError::Interrupted));
        drop(conv);
        let mut listing = Vec::new();
        super::super::run(&words(&["branch", "pending", "--store", &db]), &mut listing).unwrap();
        let listing = String::from_utf8(listing).unwrap();
        assert!(
            listing.contains("ops") && listing.contains("1 call(s) awaiting approval"),
            "{listing}"
        );

        // Without --approve the paused conversation is not continued.
        let mut conv = lo.open(&["--store", &db, "--resume", "ops"]);
        let e = settle(rt, &mut conv, None, None).unwrap_err();
        assert!(e.to_string().contains("--approve"), "{e}");

        // Another process: --resume ops --approve asks again.
        let mut conv = lo.open(&["--store", &db, "--resume", "ops", "--approve"]);
        let mut person = piped(&["n"]);
        settle(rt, &mut conv, Some(&mut person), None).unwrap();
        drop(conv);
        let mut listing = Vec::new();
        super::super::run(&words(&["branch", "pending", "--store", &db]), &mut listing).unwrap();
        assert_eq!(
            String::from_utf8(listing).unwrap(),
            "no conversation is awaiting approval\n"
        );
        let mut shown = Vec::new();
        super::super::run(
            &words(&["branch", "export", "ops", "--store", &db]),
            &mut shown,
        )
        .unwrap();
        let stored: serde_json::Value = serde_json::from_slice(&shown).unwrap();
        let msgs = stored["messages"]["collections"].as_array().unwrap();
        let last = msgs.last().unwrap();
        assert_eq!(last["content"]["output"]["error"], "denied by approval");
        assert_eq!(last["metadata"]["approval"]["decision"], "denied");
        assert!(stored["metadata"].get("pending_approval").is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A tool turn pauses at an offered tool's call, the person approves
    /// it, and the streamed follow-up answers the call natively under the
    /// provider's id.
    #[test]
    fn an_approved_call_is_answered_under_its_id_in_the_follow_up() {
        use super::super::tool_turn;

        let lo = Loopback::start();
        lo.calls_erase();
        lo.server
            .push(branch_models::mock::MockReply::text("Erased /data."));
        let rt = &lo.rt;
        let mut conv = lo.open(&["--approve"]);
        let answer = rt
            .block_on(tool_turn::ask(
                conv.branch_mut(),
                "clean up",
                &lo.info,
                &lo.display,
            ))
            .unwrap();
        assert!(answer.paused);
        let mut person = piped(&["y"]);
        settle(rt, &mut conv, Some(&mut person), None).unwrap();
        let answer = rt
            .block_on(tool_turn::follow_up(
                conv.branch_mut(),
                &lo.info,
                &lo.display,
            ))
            .unwrap();
        assert!(!answer.paused);
        assert_eq!(answer.text, "Erased /data.");
        let bodies = lo.server.bodies();
        assert_eq!(bodies.len(), 2);
        assert!(bodies.iter().all(|b| b["stream"] == true));
        assert_eq!(bodies[0]["tools"][0]["function"]["name"], "erase");
        let messages = bodies[1]["messages"].as_array().unwrap();
        assert_eq!(messages[1]["tool_calls"][0]["id"], "call_1");
        assert_eq!(
            messages[2],
            json!({"role": "tool", "tool_call_id": "call_1", "content": "erased"})
        );
    }

    #[test]
    fn unclear_answers_are_bounded() {
        let mut a = Approvals::default();
        let many = ["hm"; MAX_UNCLEAR_ANSWERS + 1];
        assert!(a.ask(&pending(&["x"]), script(&many)).unwrap().is_none());
    }
}
