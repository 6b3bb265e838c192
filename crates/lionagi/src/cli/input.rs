//! Where the turns of an interactive `lionagi chat` come from: a line
//! editor with persistent history on a terminal, the lines of stdin
//! otherwise.

use std::path::PathBuf;

use rustyline::error::ReadlineError;
use tokio::runtime::Runtime;
use tokio::sync::mpsc;

use super::bounded_read::read_line;
use super::chat_error::ChatError;

/// Lines kept in the history file.
const HISTORY_SIZE: usize = 1000;

/// What the user did at the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Line {
    /// A line (without its newline).
    Text(String),
    /// Ctrl-C.
    Interrupted,
    /// Ctrl-D, or the end of stdin.
    Eof,
}

/// A source of lines.
pub(crate) enum Input {
    /// A terminal: rustyline, history in a file.
    Editor {
        /// The editor.
        editor: Box<rustyline::DefaultEditor>,
        /// The history file, when a home directory is known.
        history: Option<PathBuf>,
    },
    /// Anything else: each line of stdin (at most `max_line_bytes` long),
    /// read on a thread of its own so that Ctrl-C can still be noticed
    /// while waiting. The thread reads one line ahead at most.
    Piped(mpsc::Receiver<std::io::Result<String>>),
}

/// The history file: `$LIONAGI_HOME/chat_history`, else
/// `~/.lionagi/chat_history`.
pub(crate) fn history_path() -> Option<PathBuf> {
    let home = std::env::var_os("LIONAGI_HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".lionagi"))
        })?;
    Some(home.join("chat_history"))
}

impl Input {
    /// The line editor, with the saved history loaded.
    pub(crate) fn terminal() -> Result<Self, ChatError> {
        let config = rustyline::Config::builder()
            .max_history_size(HISTORY_SIZE)
            .map_err(|e| editor_error(&e))?
            .auto_add_history(false)
            .build();
        let mut editor =
            rustyline::DefaultEditor::with_config(config).map_err(|e| editor_error(&e))?;
        let history = history_path();
        if let Some(path) = &history {
            // No file yet is the usual first run.
            let _ = editor.load_history(path);
        }
        Ok(Self::Editor {
            editor: Box::new(editor),
            history,
        })
    }

    /// The lines of stdin, each at most `max_line_bytes` long (a longer
    /// line is an error that ends the conversation). A failed read fails
    /// again at the next one, so a failure met while a server's question
    /// was being answered (which only dismisses the question) still ends
    /// the conversation with its error at the next prompt.
    pub(crate) fn piped(max_line_bytes: usize) -> Self {
        let (tx, rx) = mpsc::channel(1);
        std::thread::spawn(move || {
            let mut stdin = std::io::stdin().lock();
            loop {
                match read_line(&mut stdin, max_line_bytes) {
                    Ok(Some(l)) => {
                        if tx.blocking_send(Ok(l)).is_err() {
                            return;
                        }
                    }
                    Ok(None) => return,
                    Err(e) => {
                        let again = std::io::Error::new(e.kind(), e.to_string());
                        // The second send waits until the first is read,
                        // and fails once the input is dropped.
                        if tx.blocking_send(Err(e)).is_ok() {
                            let _ = tx.blocking_send(Err(again));
                        }
                        return;
                    }
                }
            }
        });
        Self::Piped(rx)
    }

    /// Whether lines come from a person at a terminal.
    pub(crate) fn is_terminal(&self) -> bool {
        matches!(self, Self::Editor { .. })
    }

    /// The next line, kept in the editor's history. The editor blocks this
    /// thread (outside the runtime); stdin is awaited on `rt` together
    /// with Ctrl-C.
    pub(crate) fn next(&mut self, rt: &Runtime, prompt: &str) -> Result<Line, ChatError> {
        self.read(rt, prompt, true)
    }

    /// The answer to a question (an approval, a server's form), read as
    /// [`Input::next`] reads but not kept in the history file: it may be
    /// personal, and it is no question to ask again. Piped, the prompt is
    /// still written on stderr, so a script's log shows what was asked.
    pub(crate) fn answer(&mut self, rt: &Runtime, prompt: &str) -> Result<Line, ChatError> {
        if let Self::Piped(_) = self {
            eprint!("{prompt}");
        }
        self.read(rt, prompt, false)
    }

    fn read(&mut self, rt: &Runtime, prompt: &str, remember: bool) -> Result<Line, ChatError> {
        match self {
            Self::Editor { editor, .. } => match editor.readline(prompt) {
                Ok(line) => {
                    if remember && !line.trim().is_empty() {
                        let _ = editor.add_history_entry(line.as_str());
                    }
                    Ok(Line::Text(line))
                }
                Err(ReadlineError::Interrupted) => Ok(Line::Interrupted),
                Err(ReadlineError::Eof) => Ok(Line::Eof),
                Err(e) => Err(editor_error(&e)),
            },
            Self::Piped(rx) => rt.block_on(async {
                tokio::select! {
                    biased;
                    _ = tokio::signal::ctrl_c() => Ok(Line::Interrupted),
                    line = rx.recv() => match line {
                        Some(Ok(l)) => Ok(Line::Text(l)),
                        Some(Err(source)) => Err(ChatError::Io { what: "stdin".into(), source }),
                        None => Ok(Line::Eof),
                    },
                }
            }),
        }
    }

    /// Writes the editor's history to its file (best effort: a read-only
    /// home must not spoil the conversation).
    pub(crate) fn save_history(&mut self) {
        if let Self::Editor {
            editor,
            history: Some(path),
        } = self
        {
            if let Some(dir) = path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            let _ = editor.save_history(path);
        }
    }
}

fn editor_error(e: &dyn std::fmt::Display) -> ChatError {
    ChatError::Io {
        what: "terminal".into(),
        source: std::io::Error::other(e.to_string()),
    }
}
