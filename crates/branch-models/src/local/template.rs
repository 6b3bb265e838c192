//! The chat template of the model, recognised from the GGUF's Jinja source.
//!
//! Only the template the default model uses is implemented — ChatML, with an
//! optional default system prompt inserted when the conversation has none —
//! not a Jinja engine. Any other template is refused with a typed error
//! rather than rendered wrongly.

use std::borrow::Borrow;

use branch_core::model::ChatMessage;
use serde_json::Value;

use super::error::LocalModelError;

/// Start of a ChatML turn.
pub const IM_START: &str = "<|im_start|>";
/// End of a ChatML turn.
pub const IM_END: &str = "<|im_end|>";

/// One piece of a rendered prompt: control tokens stay apart from text, so
/// text that merely spells `<|im_end|>` is never a control token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// A control token, by spelling.
    Control(&'static str),
    /// Ordinary text.
    Text(String),
}

/// A recognised chat template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatTemplate {
    default_system: Option<String>,
}

/// The Jinja source with whitespace outside string literals removed, string
/// literals unescaped (`\n` → newline) and single-quoted, so templates that
/// differ only in layout or quoting compare equal.
fn normalize(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut quote: Option<char> = None;
    let mut chars = source.chars();
    while let Some(c) = chars.next() {
        match quote {
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                out.push('\'');
            }
            None if c.is_whitespace() => {}
            None => out.push(c),
            Some(q) if c == q => {
                quote = None;
                out.push('\'');
            }
            Some(_) if c == '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(other) => out.push(other),
                None => {}
            },
            Some(_) => out.push(c),
        }
    }
    out
}

impl ChatTemplate {
    /// ChatML without a default system prompt.
    pub fn chatml() -> Self {
        Self {
            default_system: None,
        }
    }

    /// The default system prompt, if the template inserts one.
    pub fn default_system(&self) -> Option<&str> {
        self.default_system.as_deref()
    }

    /// Recognises `tokenizer.chat_template`.
    pub fn from_jinja(source: &str) -> Result<Self, LocalModelError> {
        let s = normalize(source);
        let turns = [
            "{{'<|im_start|>'+message['role']+'\n'+message['content']+'<|im_end|>'+'\n'}}",
            "{{'<|im_start|>'+message['role']+'\n'+message['content']+'<|im_end|>\n'}}",
        ];
        let generation = "{%ifadd_generation_prompt%}{{'<|im_start|>assistant\n'}}{%endif%}";
        let default_open =
            "{%ifloop.firstandmessages[0]['role']!='system'%}{{'<|im_start|>system\n";
        let default_close = "<|im_end|>\n'}}{%endif%}";
        let body = s.strip_prefix("{%formessageinmessages%}").ok_or(
            LocalModelError::UnsupportedTemplate {
                reason: "it does not start with a loop over messages",
            },
        )?;
        let (body, rest) =
            body.split_once("{%endfor%}")
                .ok_or(LocalModelError::UnsupportedTemplate {
                    reason: "the loop over messages is not closed",
                })?;
        if rest != generation {
            return Err(LocalModelError::UnsupportedTemplate {
                reason: "no ChatML generation prompt `<|im_start|>assistant\\n` after the loop",
            });
        }
        let (default_system, turn) = match body.strip_prefix(default_open) {
            Some(after) => {
                let (system, turn) = after.split_once(default_close).ok_or(
                    LocalModelError::UnsupportedTemplate {
                        reason: "the default system prompt is not a ChatML system turn",
                    },
                )?;
                (Some(system.to_owned()), turn)
            }
            None => (None, body),
        };
        if !turns.contains(&turn) {
            return Err(LocalModelError::UnsupportedTemplate {
                reason: "turns are not ChatML `<|im_start|>role\\ncontent<|im_end|>\\n`",
            });
        }
        Ok(Self { default_system })
    }

    /// Renders a conversation, ending with the assistant's generation prompt.
    pub fn render<M: Borrow<ChatMessage>>(
        &self,
        messages: &[M],
    ) -> Result<Vec<Piece>, LocalModelError> {
        let mut pieces = Vec::new();
        let has_system = messages
            .first()
            .is_some_and(|m| m.borrow().role == "system");
        if let (Some(system), false) = (&self.default_system, has_system) {
            // The reference template inserts it only inside the loop, so an
            // empty conversation gets none.
            if !messages.is_empty() {
                turn(&mut pieces, "system", system.clone());
            }
        }
        for (index, m) in messages.iter().map(Borrow::borrow).enumerate() {
            turn(&mut pieces, &m.role, content_text(index, &m.content)?);
        }
        pieces.push(Piece::Control(IM_START));
        pieces.push(Piece::Text("assistant\n".into()));
        Ok(pieces)
    }

    /// The rendered prompt as one string (what the Jinja template prints).
    pub fn render_string<M: Borrow<ChatMessage>>(
        &self,
        messages: &[M],
    ) -> Result<String, LocalModelError> {
        Ok(self
            .render(messages)?
            .into_iter()
            .map(|p| match p {
                Piece::Control(c) => c.to_owned(),
                Piece::Text(t) => t,
            })
            .collect())
    }
}

fn turn(pieces: &mut Vec<Piece>, role: &str, content: String) {
    pieces.push(Piece::Control(IM_START));
    pieces.push(Piece::Text(format!("{role}\n{content}")));
    pieces.push(Piece::Control(IM_END));
    pieces.push(Piece::Text("\n".into()));
}

/// A message's content as text: a string, or the text parts of a list.
fn content_text(index: usize, content: &Value) -> Result<String, LocalModelError> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Array(parts) => parts
            .iter()
            .map(|p| match p {
                Value::String(s) => Ok(s.as_str()),
                Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("text") => o
                    .get("text")
                    .and_then(Value::as_str)
                    .ok_or(LocalModelError::BadMessage {
                        index,
                        reason: "a text part has no string `text`",
                    }),
                _ => Err(LocalModelError::BadMessage {
                    index,
                    reason: "only text content parts are supported by the embedded model",
                }),
            })
            .collect(),
        _ => Err(LocalModelError::BadMessage {
            index,
            reason: "content must be a string or a list of text parts",
        }),
    }
}
