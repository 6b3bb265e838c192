//! The system-message rules of construction.

use serde_json::Value;

use crate::element;
use crate::message::{DEFAULT_SYSTEM_MESSAGE, Message, SystemContent, truthy};

/// The built-in Lion system prompt, stripped (3,108 characters).
pub const LION_SYSTEM_MESSAGE: &str = include_str!("lion_system_message.txt");

/// What the builder's `system` argument was given as.
#[derive(Debug, Clone)]
pub enum SystemSpec {
    /// A prompt: normally a string, any JSON value is kept verbatim.
    Text(Value),
    /// A ready System message; its sender, recipient and datetime are set
    /// by the builder.
    Message(Box<Message>),
}

impl From<&str> for SystemSpec {
    fn from(s: &str) -> Self {
        SystemSpec::Text(Value::String(s.to_owned()))
    }
}

impl From<String> for SystemSpec {
    fn from(s: String) -> Self {
        SystemSpec::Text(Value::String(s))
    }
}

impl From<Value> for SystemSpec {
    fn from(v: Value) -> Self {
        SystemSpec::Text(v)
    }
}

impl From<Message> for SystemSpec {
    fn from(m: Message) -> Self {
        SystemSpec::Message(Box::new(m))
    }
}

impl SystemSpec {
    fn is_truthy(&self) -> bool {
        match self {
            SystemSpec::Text(v) => truthy(v),
            SystemSpec::Message(_) => true,
        }
    }
}

/// The `system_datetime` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SystemDatetime {
    /// The current UTC time, minute precision.
    Now,
    /// A string kept verbatim.
    At(String),
}

impl SystemDatetime {
    fn resolve(&self) -> Option<String> {
        match self {
            SystemDatetime::Now => Some(element::format_minute_utc(element::now())),
            SystemDatetime::At(s) if s.is_empty() => None,
            SystemDatetime::At(s) => Some(s.clone()),
        }
    }
}

/// Applies the construction rules: a System is made only when `system` is
/// truthy, a datetime is given, or the Lion message is requested. With a
/// datetime alone the prompt is the default text (the ADR's rule; the
/// reference makes an empty Instruction instead, see docs/compat.md).
pub(crate) fn build_system(
    system: Option<SystemSpec>,
    datetime: Option<&SystemDatetime>,
    use_lion: bool,
) -> Option<Message> {
    let datetime = datetime.and_then(SystemDatetime::resolve);
    let system = system.filter(SystemSpec::is_truthy);
    if system.is_none() && datetime.is_none() && !use_lion {
        return None;
    }
    let mut message = match system {
        Some(SystemSpec::Message(m)) if !use_lion => *m,
        other => {
            let prompt = match other {
                Some(SystemSpec::Text(v)) => Some(v),
                Some(SystemSpec::Message(m)) => m.as_system().map(|c| c.system_message.clone()),
                None => None,
            };
            let text = if use_lion {
                let developer = match &prompt {
                    Some(Value::String(s)) => format!("\n\n\nDeveloper Prompt: {s}"),
                    Some(v) => format!("\n\n\nDeveloper Prompt: {v}"),
                    None => String::new(),
                };
                Value::String(
                    format!("{LION_SYSTEM_MESSAGE}{developer}")
                        .trim()
                        .to_owned(),
                )
            } else {
                prompt.unwrap_or_else(|| DEFAULT_SYSTEM_MESSAGE.into())
            };
            Message::system(SystemContent::new(text))
        }
    };
    if let crate::message::MessageContent::System(c) = &mut message.content {
        if datetime.is_some() {
            c.system_datetime = datetime;
        }
    }
    Some(message)
}
