//! `lionagi chat`: a conversation with a model from the terminal, one
//! question at a time or interactively, streamed, optionally kept in a
//! conversation store and resumed later.
//!
//! Exit status: 0 done, 1 a model, store or I/O failure, 2 a bad command
//! line, 130 cancelled by Ctrl-C. With `--json`, each turn is one JSON
//! object on stdout and each error one JSON object on stderr
//! (`{"error": {"kind", "message"}}`).

use std::io::IsTerminal;

use serde_json::json;
use tokio::runtime::Runtime;

use super::chat_args::{CHAT_USAGE, ChatArgs, shell_word};
use super::chat_error::{ChatError, ModelInfo};
use super::conversation::Conversation;
use super::input::{Input, Line};
use super::model_choice;
use super::turn::{self, Display};

/// The commands of an interactive conversation.
const SLASH_HELP: &str = "/help   this text
/clear  start a new conversation (a stored one stays in the store)
/id     the conversation's id (and its store)
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
    match session(&parsed, &runtime) {
        Ok(()) => 0,
        Err(e) => report(&e, parsed.json),
    }
}

/// Prints `e` (one line, or one JSON object) on stderr; its exit status.
fn report(e: &ChatError, json: bool) -> i32 {
    if json {
        eprintln!("{}", e.to_json());
    } else {
        eprintln!("lionagi: {e}");
    }
    e.exit_code()
}

fn session(args: &ChatArgs, rt: &Runtime) -> Result<(), ChatError> {
    let (model, info) = model_choice::choose(args)?;
    let mut conv = rt.block_on(Conversation::open(args, model))?;
    let display = Display {
        stream: !args.json,
        // Only for a person watching: never into a file or a pipe.
        spinner: !args.json && std::io::stdout().is_terminal() && std::io::stderr().is_terminal(),
    };
    if let Some(question) = &args.question {
        let result = one_turn(rt, &mut conv, question, &info, display, args);
        resume_hint(&conv, args);
        return result;
    }
    let mut input = if std::io::stdin().is_terminal() {
        Input::terminal()?
    } else {
        let limits = crate::limits::InputLimits::from_env().map_err(ChatError::Usage)?;
        Input::piped(limits.max_line_bytes)
    };
    if input.is_terminal() {
        let resumed = if conv.is_stored() {
            format!(", resuming {} ({} messages)", conv.id(), conv.len())
        } else {
            String::new()
        };
        eprintln!(
            "lionagi chat with {}{resumed}. /help for commands, Ctrl-D to leave.",
            info.label
        );
    }
    let result = converse(rt, &mut conv, &mut input, &info, display, args);
    input.save_history();
    resume_hint(&conv, args);
    result
}

/// The interactive loop: one turn per line until Ctrl-D, `/exit`, the end
/// of stdin, or two Ctrl-C in a row at the prompt.
fn converse(
    rt: &Runtime,
    conv: &mut Conversation,
    input: &mut Input,
    info: &ModelInfo,
    display: Display,
    args: &ChatArgs,
) -> Result<(), ChatError> {
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
                    conv.restart()?;
                    eprintln!("new conversation {}", conv.id());
                }
                other => eprintln!("unknown command /{other}; /help lists them"),
            }
            continue;
        }
        match one_turn(rt, conv, line, info, display, args) {
            Ok(()) => {}
            // A person goes on: the conversation is as before the turn.
            Err(e) if person => {
                report(&e, args.json);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Asks `question`, then writes the turn to the store and (with
/// `--json`) prints it.
fn one_turn(
    rt: &Runtime,
    conv: &mut Conversation,
    question: &str,
    info: &ModelInfo,
    display: Display,
    args: &ChatArgs,
) -> Result<(), ChatError> {
    let before = conv.len();
    let answer = rt.block_on(turn::ask(conv.branch_mut(), question, info, display))?;
    rt.block_on(conv.record_turn(before))?;
    if args.json {
        let line = json!({
            "branch_id": conv.id().to_string(),
            "reply": answer.text,
            "model": info.label,
            "served_model": answer.served_model,
            "usage": answer.usage,
        });
        turn::say(&format!("{line}\n"));
    }
    Ok(())
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
