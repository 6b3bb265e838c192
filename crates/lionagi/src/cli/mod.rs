//! The `lionagi` command: argument parsing, the `branch` subcommands and
//! `lionagi chat`.
//!
//! One file per idea: `branch` (files and the store), [`chat`] (the
//! conversation loop) and the pieces it is built from.

use std::io::Write;

use branch_core::BranchError;

mod approve;
mod bounded_read;
mod branch;
pub mod chat;
mod chat_args;
mod chat_error;
mod conversation;
mod elicitation;
mod input;
mod mcp_approve;
pub mod mcp_serve;
mod mcp_tools;
mod model_choice;
mod reasoning;
mod runtime_exit;
mod shown;
mod spinner;
mod store;
mod tool_turn;
mod turn;

pub use branch::{listing, load_branch};
use branch::{roundtrip, show, store_command};

/// A failure of the command: the message printed, the exit status.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line is wrong.
    #[error("{0}\n\n{USAGE}")]
    Usage(String),
    /// The input could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why it could not be read or written.
        source: std::io::Error,
    },
    /// The input is larger than its cap or did not end by its deadline.
    #[error("{path}: {reason}")]
    Limit {
        /// The file.
        path: String,
        /// Which limit, and how to change it.
        reason: String,
    },
    /// The input is not JSON.
    #[error("{path}: not JSON at line {line}, column {column}: {reason}")]
    Syntax {
        /// The file.
        path: String,
        /// Where.
        line: usize,
        /// Where.
        column: usize,
        /// What.
        reason: String,
    },
    /// The conversation store failed.
    #[error("{path}: {source}")]
    Store {
        /// The store file, or its URL without the password.
        path: String,
        /// What failed.
        source: Box<branch_session::store::StoreError>,
    },
    /// No stored branch has this id or name, or several share the name.
    #[error("{path}: {reason}")]
    NotFound {
        /// The store file.
        path: String,
        /// What was looked for.
        reason: String,
    },
    /// The command would overwrite or duplicate a stored conversation.
    #[error("{path}: {reason}")]
    Refused {
        /// The store file, or its URL without the password.
        path: String,
        /// What is in the way, and how to go ahead anyway.
        reason: String,
    },
    /// The JSON does not describe a branch.
    #[error("{path}: {source}")]
    Branch {
        /// The file.
        path: String,
        /// What is wrong and where.
        source: BranchError,
    },
}

impl CliError {
    /// The process exit status: 2 for every usage or data error.
    pub fn exit_code(&self) -> i32 {
        2
    }

    /// Whether this is a write to stdout whose reader has gone (a pipe into
    /// `head`), which a command-line tool ends on quietly.
    pub fn is_closed_stdout(&self) -> bool {
        matches!(self, Self::Io { path, source }
            if path == "<stdout>" && source.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

/// The help text.
pub const USAGE: &str = "usage:
  lionagi chat [QUESTION] [OPTIONS]      (lionagi chat --help for the options)
  lionagi mcp serve --store DB --branch ID|NAME   (lionagi mcp serve --help)
  lionagi branch show FILE
  lionagi branch roundtrip FILE [--mode python|json|db] [--db-meta-key KEY]
  lionagi branch list --store DB
  lionagi branch pending --store DB     conversations paused on tool calls awaiting approval
  lionagi branch show ID|NAME --store DB
  lionagi branch import FILE --store DB [--replace]
  lionagi branch export ID|NAME [FILE] --store DB
  lionagi branch delete ID|NAME --store DB

FILE is a branch saved with to_dict (by Python lionagi or lionagi-rs); - is stdin/stdout.
DB is a SQLite conversation store (created when missing), or a PostgreSQL
database as postgres://USER@HOST:PORT/NAME (the password from the URL,
PGPASSWORD or ~/.pgpass; never printed).
import refuses to overwrite a stored conversation with the same id, or to
add a second one with the same name, unless --replace is given.";

/// Runs the command line `args` (without the program name), writing to `out`.
pub fn run(args: &[String], out: &mut dyn Write) -> Result<(), CliError> {
    let mut words: Vec<&str> = args.iter().map(String::as_str).collect();
    if let Some(i) = words.iter().position(|w| *w == "--store") {
        let path = words
            .get(i + 1)
            .copied()
            .ok_or_else(|| CliError::Usage("`--store` needs a path or URL".into()))?;
        words.drain(i..i + 2);
        return store_command(path, &words, out);
    }
    if words.first() == Some(&"chat") {
        return Err(CliError::Usage(
            "`chat` runs through lionagi::cli::chat::main".into(),
        ));
    }
    match words.as_slice() {
        [] | ["help"] | ["--help"] | ["-h"] => {
            writeln!(out, "{USAGE}").ok();
            Ok(())
        }
        ["branch", "show", file] => show(file, out),
        ["branch", "roundtrip", file, rest @ ..] => roundtrip(file, rest, out),
        ["branch", ..] => Err(CliError::Usage(
            "unknown or incomplete `branch` command".into(),
        )),
        [other, ..] => Err(CliError::Usage(format!("unknown command `{other}`"))),
    }
}
