//! `lionagi chat`: a conversation with a model from the terminal, one
//! question at a time or interactively, streamed, optionally kept in a
//! conversation store and resumed later.
//!
//! Exit status: 0 done, 1 a model, store or I/O failure, 2 a bad command
//! line, 130 cancelled by Ctrl-C. With `--json`, each turn is one JSON
//! object on stdout and each error one JSON object on stderr
//! (`{"error": {"kind", "message"}}`).

use std::io::IsTerminal;

use branch_core::model::add_counts;
use branch_core::{Message, MessageKind};
use serde_json::{Value, json};
use tokio::runtime::Runtime;

use super::approve;
use super::chat_args::{CHAT_USAGE, ChatArgs, shell_word};
use super::chat_error::{ChatError, ModelInfo};
use super::conversation::Conversation;
use super::elicitation::{self, Questions};
use super::input::{Input, Line};
use super::mcp_tools::{self, ToolHooks};
use super::model_choice;
use super::runtime_exit;
use super::shown::{one_line, printable};
use super::tool_turn;
use super::turn::{self, Display};
use branch_mcp::McpServers;

/// The commands of an interactive conversation.
const SLASH_HELP: &str = "/help   this text
/clear  start a new conversation (a stored one stays in the store)
/id     the conversation's id (and its store)
/tools  the tools of the MCP servers (--mcp FILE)
/exit   leave (also Ctrl-D); Ctrl-C cancels the turn being answered";

/// Runs `lionagi chat` with the words after `chat`; returns the exit
/// status.
pub fn main(args: &[String]) -> i32 {
    let json = args.iter().any(|a| a == "--json");
    let parsed = match ChatArgs::parse(args) {
        Ok(a) => a,
        Err(e) => return report(&e, json),
    };
    if parsed.help {
        println!("{CHAT_USAGE}");
        return 0;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(source) => {
            let e = ChatError::Io {
                what: "the async runtime".into(),
                source,
            };
            return report(&e, parsed.json);
        }
    };
    let status = match session(&parsed, &runtime) {
        Ok(()) => 0,
        Err(e) => report(&e, parsed.json),
    };
    runtime_exit::shut_down(runtime);
    status
}

/// Prints `e` (one line, or one JSON object) on stderr; its exit status.
fn report(e: &ChatError, json: bool) -> i32 {
    if json {
        eprintln!("{}", e.to_json());
    } else {
        // Its words may be a provider's or an MCP server's.
        eprintln!("lionagi: {}", printable(&e.to_string()));
    }
    e.exit_code()
}

fn session(args: &ChatArgs, rt: &Runtime) -> Result<(), ChatError> {
    let (model, info) = model_choice::for_conversation(args, rt)?;
    let mut conv = rt.block_on(Conversation::open(args, model))?;
    // `--json` keeps stdout to one line and stderr to errors.
    let mut hooks = if args.json {
        ToolHooks::default()
    } else {
        ToolHooks::on_stderr()
    };
    // The servers may ask the person only where lines are read: in a
    // conversation, or a question asked with `--approve`.
    let reads_lines = args.question.is_none() || args.approve;
    let questions = elicitation::may_ask(args.json, reads_lines).then(|| {
        let (hook, questions) = elicitation::channel();
        hooks.elicit = Some(hook);
        questions
    });
    let servers = rt.block_on(mcp_tools::connect(&args.mcp, conv.branch_mut(), hooks))?;
    let result = converse_or_ask(
        args,
        rt,
        &mut conv,
        &info,
        servers.as_ref(),
        questions.as_ref(),
    );
    rt.block_on(conv.dumps_written());
    if let Some(s) = &servers {
        // Every server ends with the session: children reaped, HTTP
        // sessions closed.
        rt.block_on(s.shutdown());
    }
    result
}

fn converse_or_ask(
    args: &ChatArgs,
    rt: &Runtime,
    conv: &mut Conversation,
    info: &ModelInfo,
    servers: Option<&McpServers>,
    questions: Option<&Questions>,
) -> Result<(), ChatError> {
    let display = Display {
        stream: !args.json,
        // Only for a person watching: never into a file or a pipe.
        spinner: !args.json && std::io::stdout().is_terminal() && std::io::stderr().is_terminal(),
        // Escape codes only for a terminal, and never when the person
        // asked for none (no-color.org).
        dim: std::io::stdout().is_terminal()
            && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        narrator: None,
    };
    if let Some(question) = &args.question {
        let mut answers = if args.approve {
            Some(open_input()?)
        } else {
            None
        };
        let setup = TurnSetup {
            info,
            display: &display,
            args,
            servers,
            questions,
        };
        let result = one_turn(rt, conv, question, &setup, answers.as_mut());
        resume_hint(conv, args);
        // A read that failed while a server's question was answered only
        // dismissed the question: the turn went on and is recorded, and
        // the command still fails with the error.
        let failed = answers.as_ref().and_then(Input::failure);
        return result.and_then(|()| failed.map_or(Ok(()), Err));
    }
    let mut input = open_input()?;
    approve::settle(rt, conv, Some(&mut input), questions)?;
    if input.is_terminal() {
        let resumed = if conv.is_stored() {
            format!(", resuming {} ({} messages)", conv.id(), conv.len())
        } else {
            String::new()
        };
        eprintln!(
            "lionagi chat with {}{resumed}. /help for commands, Ctrl-D to leave.",
            one_line(&info.label)
        );
    }
    let setup = TurnSetup {
        info,
        display: &display,
        args,
        servers,
        questions,
    };
    let result = converse(rt, conv, &mut input, &setup);
    input.save_history();
    resume_hint(conv, args);
    result
}

/// The terminal's line editor, else the lines of stdin.
fn open_input() -> Result<Input, ChatError> {
    if std::io::stdin().is_terminal() {
        Input::terminal()
    } else {
        let limits = crate::limits::InputLimits::from_env().map_err(ChatError::Usage)?;
        Ok(Input::piped(limits.max_line_bytes))
    }
}

/// The interactive loop: one turn per line until Ctrl-D, `/exit`, the end
/// of stdin, or two Ctrl-C in a row at the prompt.
fn converse(
    rt: &Runtime,
    conv: &mut Conversation,
    input: &mut Input,
    setup: &TurnSetup<'_>,
) -> Result<(), ChatError> {
    let TurnSetup { args, servers, .. } = *setup;
    let person = input.is_terminal();
    let mut interrupts = 0;
    loop {
        let line = match input.next(rt, "> ")? {
            Line::Eof => return Ok(()),
            Line::Interrupted if !person => return Err(ChatError::Interrupted),
            Line::Interrupted => {
                interrupts += 1;
                if interrupts >= 2 {
                    return Ok(());
                }
                eprintln!("(Ctrl-C again or Ctrl-D to leave)");
                continue;
            }
            Line::Text(t) => t,
        };
        interrupts = 0;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(command) = line.strip_prefix('/') {
            match command.trim() {
                "exit" | "quit" => return Ok(()),
                "help" => eprintln!("{SLASH_HELP}"),
                "id" => match conv.store_path() {
                    Some(path) if conv.is_stored() => eprintln!("{} in {path}", conv.id()),
                    _ => eprintln!("{} (not stored)", conv.id()),
                },
                "clear" => {
                    resume_hint(conv, args);
                    rt.block_on(conv.dumps_written());
                    conv.restart()?;
                    eprintln!("new conversation {}", conv.id());
                    if let Some(s) = servers {
                        let branch = conv.branch_mut();
                        let registered = interruptible(rt, async {
                            s.register(branch).await.map_err(mcp_error)
                        });
                        // The next turn's refresh reads the tools again.
                        if let Err(e) = registered {
                            report(&e, args.json);
                        }
                    }
                }
                "tools" => eprintln!(
                    "{}",
                    mcp_tools::listing(&servers.map(McpServers::registered).unwrap_or_default())
                ),
                other => eprintln!("unknown command /{other}; /help lists them"),
            }
            continue;
        }
        match one_turn(rt, conv, line, setup, Some(input)) {
            Ok(()) => {}
            // A person goes on: the conversation is as before the turn.
            Err(e) if person => {
                report(&e, args.json);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Runs `work` unless Ctrl-C comes first (`Interrupted`). For the MCP
/// listings between turns, which have a deadline but may take it, and
/// which leave the branch as it was when dropped.
fn interruptible<T>(
    rt: &Runtime,
    work: impl Future<Output = Result<T, ChatError>>,
) -> Result<T, ChatError> {
    rt.block_on(async {
        tokio::select! {
            biased;
            _ = tokio::signal::ctrl_c() => Err(ChatError::Interrupted),
            done = work => done,
        }
    })
}

fn mcp_error(e: branch_mcp::McpError) -> ChatError {
    ChatError::Mcp(e.to_string())
}

/// What every turn of a session is asked with.
#[derive(Clone, Copy)]
struct TurnSetup<'a> {
    info: &'a ModelInfo,
    display: &'a Display,
    args: &'a ChatArgs,
    /// The MCP servers whose tools the turns offer.
    servers: Option<&'a McpServers>,
    /// Their questions to the person, asked on the turn's input.
    questions: Option<&'a Questions>,
}

/// Asks `question`, then writes the turn to the store and (with
/// `--json`) prints it. With `input`, tool calls awaiting approval are
/// asked about there.
fn one_turn(
    rt: &Runtime,
    conv: &mut Conversation,
    question: &str,
    setup: &TurnSetup<'_>,
    mut input: Option<&mut Input>,
) -> Result<(), ChatError> {
    let TurnSetup {
        info,
        display,
        args,
        servers,
        questions,
    } = *setup;
    // Another writer's turns since the last one come first (a paused one
    // is settled below).
    if let Some(more) = rt.block_on(conv.catch_up())? {
        if !args.json {
            eprintln!(
                "lionagi: the stored conversation was changed elsewhere; continuing from it ({more} messages more)"
            );
        }
        if let Some(s) = servers {
            let branch = conv.branch_mut();
            interruptible(rt, async { s.register(branch).await.map_err(mcp_error) })?;
        }
    }
    // A turn left paused (in the store, or by Ctrl-C while its approved
    // calls ran) is settled before a new one: the branch takes no turn
    // while one awaits approval.
    approve::settle(rt, conv, input.as_deref_mut(), questions)?;
    let before = conv.len();
    let mut answer = match servers {
        Some(s) => {
            // A server may have announced new tools since the last turn.
            let branch = conv.branch_mut();
            interruptible(rt, async { s.refresh(branch).await.map_err(mcp_error) })?;
            let asking = questions.zip(input.as_deref_mut());
            let turn = tool_turn::ask(conv.branch_mut(), question, info, display);
            elicitation::drive(rt, asking, turn)?
        }
        None => rt.block_on(turn::ask(conv.branch_mut(), question, info, display))?,
    };
    while answer.paused {
        // Written whole before the question, and again once settled.
        approve::settle(rt, conv, input.as_deref_mut(), questions)?;
        match servers {
            // The approved calls ran: the model answers with their results.
            Some(_) => {
                let asking = questions.zip(input.as_deref_mut());
                let turn = tool_turn::follow_up(conv.branch_mut(), info, display);
                answer = elicitation::drive(rt, asking, turn)?;
            }
            None => break,
        }
    }
    rt.block_on(conv.record_turn())?;
    if args.json {
        let branch = conv.branch_mut();
        let turn: Vec<&Message> = branch
            .progression()
            .iter()
            .skip(before)
            .filter_map(|id| branch.messages().get(id))
            .collect();
        let calls = mcp_tools::calls_of(turn.iter().copied());
        let (usage, replies) = turn_usage(&turn);
        let line = json!({
            "branch_id": conv.id().to_string(),
            "reply": answer.text,
            "model": info.label,
            "served_model": answer.served_model,
            "usage": usage,
            "replies": replies,
            "reasoning": answer.reasoning,
            "finish_reason": answer.finish_reason,
            "tool_calls": calls,
        });
        turn::say(&format!("{line}\n"));
    }
    Ok(())
}

/// What the turn's replies reported using, in the provider's shape: one
/// reply's usage as it came, those of several (a tool turn's rounds, a CLI
/// agent's replies, each with the usage read since the one before) summed
/// key by key, so a script that adds up `usage` counts them all; `None`
/// when none reported any. With the number of replies the turn recorded.
fn turn_usage(turn: &[&Message]) -> (Option<Value>, usize) {
    let replies: Vec<&Message> = turn
        .iter()
        .copied()
        .filter(|m| m.kind() == MessageKind::AssistantResponse)
        .collect();
    let mut total: Option<Value> = None;
    for reply in &replies {
        let Some(response) = reply.element.metadata.peek("model_response") else {
            continue;
        };
        let Some(usage) = response.get("usage").filter(|u| !u.is_null()) else {
            continue;
        };
        match &mut total {
            Some(t) => add_counts(t, usage.clone()),
            None => total = Some(usage.clone()),
        }
    }
    (total, replies.len())
}

/// Says how to continue a stored conversation (not with `--json`: the
/// objects carry the id).
fn resume_hint(conv: &Conversation, args: &ChatArgs) {
    let Some(path) = conv.store_path() else {
        return;
    };
    if args.json || !conv.is_stored() {
        return;
    }
    eprintln!(
        "lionagi: conversation {} is in {path}; continue it with: lionagi chat --store {} --resume {}{}",
        conv.id(),
        shell_word(path),
        shell_word(&conv.resume_key()),
        args.model_flags()
    );
}
