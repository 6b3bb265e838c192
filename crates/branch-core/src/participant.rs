//! Sender and recipient of a message: a role, an id, a name, or nobody.

// Parsing of stored data: nothing read from outside may panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use serde::de::{self, Deserializer};
use serde::{Serialize, Serializer};
use std::fmt;
use uuid::Uuid;

use crate::element::parse_uuid;

/// The role vocabulary of messages (`MessageRole`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The system prompt.
    System,
    /// The human side.
    User,
    /// The model.
    Assistant,
    /// Not set.
    Unset,
    /// A tool call or result.
    Action,
}

impl Role {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Unset => "unset",
            Role::Action => "action",
        }
    }

    /// Exact, case-sensitive match of a role string.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "system" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "unset" => Role::Unset,
            "action" => Role::Action,
            _ => return None,
        })
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who sends or receives a message.
///
/// Normalised like the reference: a role string becomes a [`Role`], any
/// other string that parses as a UUID becomes an id, anything else stays a
/// name. An empty string means nobody (`None` at the use site).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Participant {
    /// One of the role strings.
    Role(Role),
    /// An element id (a branch, a tool, a session).
    Id(Uuid),
    /// Any other name, kept verbatim.
    Name(String),
}

impl Participant {
    /// Normalises a string; `None` for the empty string.
    pub fn parse(s: &str) -> Option<Self> {
        if s.is_empty() {
            return None;
        }
        if let Some(r) = Role::parse(s) {
            return Some(Participant::Role(r));
        }
        if let Some(u) = parse_uuid(s) {
            return Some(Participant::Id(u));
        }
        Some(Participant::Name(s.to_owned()))
    }

    /// The id, if this participant is one.
    pub fn as_id(&self) -> Option<Uuid> {
        match self {
            Participant::Id(u) => Some(*u),
            _ => None,
        }
    }
}

impl fmt::Display for Participant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Participant::Role(r) => f.write_str(r.as_str()),
            Participant::Id(u) => write!(f, "{u}"),
            Participant::Name(n) => f.write_str(n),
        }
    }
}

impl From<Role> for Participant {
    fn from(r: Role) -> Self {
        Participant::Role(r)
    }
}

impl From<Uuid> for Participant {
    fn from(u: Uuid) -> Self {
        Participant::Id(u)
    }
}

impl From<&str> for Participant {
    /// Normalises like [`Participant::parse`]; the empty string becomes the
    /// name `""`, which is written as `null`.
    fn from(s: &str) -> Self {
        Participant::parse(s).unwrap_or(Participant::Name(String::new()))
    }
}

impl From<String> for Participant {
    fn from(s: String) -> Self {
        Participant::from(s.as_str())
    }
}

impl Serialize for Participant {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Participant::Role(r) => s.serialize_str(r.as_str()),
            Participant::Id(u) => s.collect_str(u),
            Participant::Name(n) if n.is_empty() => s.serialize_none(),
            Participant::Name(n) => s.serialize_str(n),
        }
    }
}

/// Serde helper for `Option<Participant>`: a string, `null`, or an object
/// with an `id` (an element reference).
///
/// A string is read where it lies when the input allows: every message
/// names two participants, and a copy of each was read only to be parsed.
pub(crate) fn de_participant<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Participant>, D::Error> {
    crate::str_or_value::str_or_value(
        d,
        |s| Ok(Participant::parse(s)),
        |v| participant_from_value(&v),
    )?
    .map_err(de::Error::custom)
}

pub(crate) fn participant_from_value(v: &serde_json::Value) -> Result<Option<Participant>, String> {
    use serde_json::Value;
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Participant::parse(s)),
        Value::Object(m) => match m.get("id").and_then(Value::as_str).and_then(parse_uuid) {
            Some(u) => Ok(Some(Participant::Id(u))),
            None => Err("an object given as a participant must carry a valid `id`".into()),
        },
        other => Err(format!(
            "a participant must be a string or null, not {}",
            json_type(other)
        )),
    }
}

pub(crate) fn json_type(v: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_matches_the_reference() {
        assert_eq!(
            Participant::parse("user"),
            Some(Participant::Role(Role::User))
        );
        assert_eq!(
            Participant::parse("ASSISTANT"),
            Some(Participant::Name("ASSISTANT".into()))
        );
        let id = "12345678-1234-5678-1234-567812345678";
        assert_eq!(Participant::parse(id).unwrap().to_string(), id);
        assert_eq!(Participant::parse(""), None);
        assert_eq!(Participant::parse("alice").unwrap().to_string(), "alice");
    }
}
