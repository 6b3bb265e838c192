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

/// A source of lines. A read that failed fails again at every later one:
/// a failure met while a server's question was answered only dismisses the
/// question, and must still end the conversation (at its next prompt) or
/// the one-shot command (once its turn is recorded) with the error.
pub(crate) struct Input {
    source: Source,
    failed: Option<ReadFailure>,
}

enum Source {
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

/// A failed read, kept to be reported again.
struct ReadFailure {
    what: String,
    kind: std::io::ErrorKind,
    message: String,
}

impl ReadFailure {
    fn error(&self) -> ChatError {
        ChatError::Io {
            what: self.what.clone(),
            source: std::io::Error::new(self.kind, self.message.clone()),
        }
    }
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
        Ok(Self::of(Source::Editor {
            editor: Box::new(editor),
            history,
        }))
    }

    fn of(source: Source) -> Self {
        Self {
            source,
            failed: None,
        }
    }

    /// The lines of stdin, each at most `max_line_bytes` long (a longer
    /// line is an error that ends the conversation).
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
                        let _ = tx.blocking_send(Err(e));
                        return;
                    }
                }
            }
        });
        Self::of(Source::Piped(rx))
    }

    /// Lines given beforehand, as if piped (tests).
    #[cfg(test)]
    pub(crate) fn scripted(lines: Vec<std::io::Result<String>>) -> Self {
        let (tx, rx) = mpsc::channel(lines.len().max(1));
        for l in lines {
            let _ = tx.try_send(l);
        }
        Self::of(Source::Piped(rx))
    }

    /// The error of a read that failed, if one did.
    pub(crate) fn failure(&self) -> Option<ChatError> {
        self.failed.as_ref().map(ReadFailure::error)
    }

    /// Whether lines come from a person at a terminal.
    pub(crate) fn is_terminal(&self) -> bool {
        matches!(self.source, Source::Editor { .. })
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
        if let Source::Piped(_) = self.source {
            eprint!("{prompt}");
        }
        self.read(rt, prompt, false)
    }

    fn read(&mut self, rt: &Runtime, prompt: &str, remember: bool) -> Result<Line, ChatError> {
        if let Some(f) = &self.failed {
            return Err(f.error());
        }
        let read = self.read_source(rt, prompt, remember);
        if let Err(ChatError::Io { what, source }) = &read {
            self.failed = Some(ReadFailure {
                what: what.clone(),
                kind: source.kind(),
                message: source.to_string(),
            });
        }
        read
    }

    fn read_source(
        &mut self,
        rt: &Runtime,
        prompt: &str,
        remember: bool,
    ) -> Result<Line, ChatError> {
        match &mut self.source {
            Source::Editor { editor, .. } => match editor.readline(prompt) {
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
            Source::Piped(rx) => rt.block_on(async {
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
        if let Source::Editor {
            editor,
            history: Some(path),
        } = &mut self.source
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_read_fails_every_later_one() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut input = Input::scripted(vec![
            Ok("first".into()),
            Err(std::io::Error::other("line too long")),
            Ok("never read".into()),
        ]);
        assert!(input.failure().is_none());
        assert_eq!(input.answer(&rt, "? ").unwrap(), Line::Text("first".into()));
        for _ in 0..2 {
            let e = input.next(&rt, "> ").unwrap_err();
            assert!(e.to_string().contains("line too long"), "{e}");
        }
        let kept = input.failure().unwrap();
        assert!(kept.to_string().contains("line too long"), "{kept}");
    }
}
