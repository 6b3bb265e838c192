//! One way to read what any verb returned: its text, its parsed
//! structure and the tool calls it ran, whatever the verb's own reply type.

use serde_json::Value;

use crate::act::ActionResponseModel;
use crate::communicate::Reply;
use crate::operate::Operated;
use crate::parse::Parsed;
use crate::react::{ReActOutcome, ReActRound};

/// The common accessors of verb replies (`communicate`'s [`Reply`],
/// `operate`'s [`Operated`], `parse`'s [`Parsed`], `ReAct`'s
/// [`ReActOutcome`] and `ReActStream`'s [`ReActRound`]).
///
/// ```
/// use branch_operations::{Parsed, Reply, VerbReply};
/// use serde_json::json;
///
/// fn show(r: &impl VerbReply) -> String {
///     match (r.structured(), r.text()) {
///         (Some(v), _) => v.to_string(),
///         (None, Some(t)) => t.to_owned(),
///         (None, None) => String::new(),
///     }
/// }
/// assert_eq!(show(&Reply::Text("Paris".into())), "Paris");
/// assert_eq!(show(&Parsed::Value(json!({"answer": "4"}))), r#"{"answer":"4"}"#);
/// assert!(Reply::Text("x".into()).action_responses().is_empty());
/// ```
pub trait VerbReply {
    /// The reply text, when the reply is text (or was not parsed).
    fn text(&self) -> Option<&str>;
    /// The parsed structure, when one was requested and parsed.
    fn structured(&self) -> Option<&Value>;
    /// The tool calls the verb ran, in request order.
    fn action_responses(&self) -> &[ActionResponseModel] {
        &[]
    }
}

impl VerbReply for Reply {
    fn text(&self) -> Option<&str> {
        match self {
            Reply::Text(t) => Some(t),
            Reply::Unparsed(u) => Some(&u.text),
            _ => None,
        }
    }

    fn structured(&self) -> Option<&Value> {
        match self {
            Reply::Structured(v) => Some(v),
            _ => None,
        }
    }
}

impl VerbReply for Parsed {
    fn text(&self) -> Option<&str> {
        Parsed::text(self)
    }

    fn structured(&self) -> Option<&Value> {
        match self {
            Parsed::Value(v) => Some(v),
            _ => None,
        }
    }
}

impl VerbReply for Operated {
    fn text(&self) -> Option<&str> {
        Some(&self.text)
    }

    fn structured(&self) -> Option<&Value> {
        self.structured.as_ref().or(match &self.parsed {
            Parsed::Value(v) => Some(v),
            _ => None,
        })
    }

    fn action_responses(&self) -> &[ActionResponseModel] {
        &self.action_responses
    }
}

impl VerbReply for ReActRound {
    fn text(&self) -> Option<&str> {
        Some(&self.text)
    }

    fn structured(&self) -> Option<&Value> {
        VerbReply::structured(&self.result)
    }
}

impl VerbReply for ReActOutcome {
    fn text(&self) -> Option<&str> {
        match &self.answer {
            Value::String(s) => Some(s),
            _ => self.rounds.last().map(|r| r.text.as_str()),
        }
    }

    fn structured(&self) -> Option<&Value> {
        self.rounds
            .last()
            .and_then(|r| VerbReply::structured(&r.result))
    }
}
