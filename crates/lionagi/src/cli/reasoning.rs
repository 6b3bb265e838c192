//! The model's reasoning in `lionagi chat`: shown before the answer,
//! dimmed on a terminal (plain text into a file or a pipe), and carried
//! apart from the reply in `--json`; the reason the model stopped, in one
//! vocabulary for every protocol.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use branch_core::model::{FinishReason, REASONING_METADATA_KEY, ReasoningBlock};
use branch_core::{Message, MessageContent};
use serde_json::Value;

use super::shown::printable;
use super::turn::say;

/// ANSI "faint" on, and every attribute off.
const DIM_ON: &str = "\x1b[2m";
const DIM_OFF: &str = "\x1b[0m";

/// Prints streamed reasoning: a run of thinking pieces is opened (dimmed
/// when `dim`) at its first piece and closed, followed by a blank line,
/// before the answer's text or at the end. Cheap to clone: clones share
/// the state, so the text and thinking callbacks see the same run.
#[derive(Debug, Clone)]
pub(crate) struct ReasoningPrinter {
    dim: bool,
    open: Arc<AtomicBool>,
    shown: Arc<AtomicBool>,
}

impl ReasoningPrinter {
    pub(crate) fn new(dim: bool) -> Self {
        Self {
            dim,
            open: Arc::new(AtomicBool::new(false)),
            shown: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Writes the run's opening, then `piece`, returning what was written.
    pub(crate) fn thinking(&self, piece: &str) -> String {
        let mut out = String::new();
        if !self.open.swap(true, Ordering::Relaxed) && self.dim {
            out.push_str(DIM_ON);
        }
        // Model output: an escape sequence could also end the dimming.
        out.push_str(&printable(piece));
        self.shown.store(true, Ordering::Relaxed);
        out
    }

    /// Closes an open run (before answer text, or at the end).
    pub(crate) fn close(&self) -> String {
        if !self.open.swap(false, Ordering::Relaxed) {
            return String::new();
        }
        if self.dim {
            format!("{DIM_OFF}\n\n")
        } else {
            "\n\n".to_owned()
        }
    }

    /// Whether any reasoning was printed.
    pub(crate) fn shown(&self) -> bool {
        self.shown.load(Ordering::Relaxed)
    }

    /// Prints `reasoning` whole (a reply that was not streamed).
    pub(crate) fn print_whole(&self, reasoning: &str) {
        let mut out = self.thinking(reasoning);
        out.push_str(&self.close());
        say(&out);
    }
}

/// The readable reasoning of an assistant message (its stored
/// `metadata.reasoning` blocks, their texts in order, blank-line
/// separated); `None` when it has none or none readable.
pub(crate) fn reasoning_of(message: &Message) -> Option<String> {
    if !matches!(message.content, MessageContent::AssistantResponse(_)) {
        return None;
    }
    let stored = message.element.metadata.get(REASONING_METADATA_KEY)?;
    let blocks = ReasoningBlock::list_from_value(stored).ok()?;
    let texts: Vec<String> = blocks
        .iter()
        .map(ReasoningBlock::display_text)
        .filter(|t| !t.is_empty())
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n\n"))
}

/// Why the model stopped, normalised (`stop`, `length`, `tool_calls`,
/// `content_filter`, `refusal`, `other`), read from the stored provider
/// reply of any protocol: chat completions' `finish_reason`, Anthropic's
/// `stop_reason`, Responses' `incomplete_details.reason` or `status`.
pub(crate) fn finish_of(model_response: &Value) -> Option<&'static str> {
    let word = model_response
        .pointer("/choices/0/finish_reason")
        .or_else(|| model_response.get("stop_reason"))
        .or_else(|| model_response.pointer("/incomplete_details/reason"))
        .or_else(|| model_response.get("status"))
        .and_then(Value::as_str)?;
    Some(FinishReason::from_provider(word).as_str())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn runs_open_dimmed_and_close_before_the_answer() {
        let p = ReasoningPrinter::new(true);
        assert_eq!(p.close(), "");
        let a = p.thinking("Let me");
        let b = p.thinking(" think\x1b]0;pwned\x07 ok\n");
        assert_eq!(format!("{a}{b}"), "\x1b[2mLet me think]0;pwned ok\n");
        assert_eq!(p.close(), "\x1b[0m\n\n");
        assert!(p.shown());
        let plain = ReasoningPrinter::new(false);
        assert_eq!(plain.thinking("hm"), "hm");
        assert_eq!(plain.close(), "\n\n");
        assert!(!ReasoningPrinter::new(true).shown());
    }

    #[test]
    fn finish_reasons_of_each_protocol() {
        for (raw, want) in [
            (
                json!({"choices": [{"finish_reason": "tool_calls"}]}),
                "tool_calls",
            ),
            (json!({"stop_reason": "max_tokens"}), "length"),
            (json!({"stop_reason": "refusal"}), "refusal"),
            (
                json!({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}),
                "length",
            ),
            (json!({"status": "completed"}), "stop"),
            (
                json!({"choices": [{"finish_reason": "content_filter"}]}),
                "content_filter",
            ),
        ] {
            assert_eq!(finish_of(&raw), Some(want), "{raw}");
        }
        assert_eq!(finish_of(&json!({"choices": []})), None);
    }
}
