//! The ranges a request model puts on a payload's sampling fields,
//! checked before anything is sent. The reference validates a payload
//! against its endpoint's request model and refuses one out of range
//! ("Invalid payload") without a call; the APIs refuse the same values
//! with a 400. Refusing here saves the call and names the field.
//!
//! Only the scalar fields are checked, as the APIs document them; the
//! reference's enumerations (`reasoning_effort`, `service_tier`) are not,
//! since the APIs have added values since (compat.md §25).

use serde_json::{Map, Value};

/// What a bounded field holds.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// Any number.
    Number,
    /// A whole number (an integral float is one too, as the reference's
    /// lax validation reads it).
    Integer,
}

/// One bounded field: its key, kind and inclusive bounds. `null` is
/// always accepted (the field is optional).
struct Bound {
    key: &'static str,
    kind: Kind,
    min: Option<f64>,
    max: Option<f64>,
}

const fn number(key: &'static str, min: f64, max: f64) -> Bound {
    Bound {
        key,
        kind: Kind::Number,
        min: Some(min),
        max: Some(max),
    }
}

const fn integer(key: &'static str, min: Option<f64>) -> Bound {
    Bound {
        key,
        kind: Kind::Integer,
        min,
        max: None,
    }
}

/// OpenAI chat completions (the reference's chat request model).
const OPENAI_CHAT: &[Bound] = &[
    number("temperature", 0.0, 2.0),
    number("top_p", 0.0, 1.0),
    number("presence_penalty", -2.0, 2.0),
    number("frequency_penalty", -2.0, 2.0),
    integer("n", Some(1.0)),
    integer("top_logprobs", Some(0.0)),
    integer("max_tokens", None),
    integer("max_completion_tokens", None),
    integer("seed", None),
];

/// Anthropic Messages (the reference's Messages request model).
const ANTHROPIC_MESSAGES: &[Bound] = &[
    number("temperature", 0.0, 1.0),
    number("top_p", 0.0, 1.0),
    integer("top_k", Some(0.0)),
    integer("max_tokens", Some(1.0)),
];

/// Which request model's ranges to check.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ranges {
    OpenAiChat,
    AnthropicMessages,
}

impl Ranges {
    fn bounds(self) -> &'static [Bound] {
        match self {
            Self::OpenAiChat => OPENAI_CHAT,
            Self::AnthropicMessages => ANTHROPIC_MESSAGES,
        }
    }

    fn api(self) -> &'static str {
        match self {
            Self::OpenAiChat => "OpenAI chat completions",
            Self::AnthropicMessages => "Anthropic Messages",
        }
    }

    /// The first field of `payload` out of its range, as a sentence
    /// naming it, its value and what the API takes.
    pub(crate) fn check(self, payload: &Map<String, Value>) -> Result<(), String> {
        for b in self.bounds() {
            let Some(v) = payload.get(b.key).filter(|v| !v.is_null()) else {
                continue;
            };
            if !b.admits(v) {
                return Err(format!(
                    "`{}` is {v}, and {} takes {}",
                    b.key,
                    self.api(),
                    b.describe()
                ));
            }
        }
        Ok(())
    }
}

impl Bound {
    fn admits(&self, v: &Value) -> bool {
        // A JSON number is finite, so the comparisons below are total.
        let Some(n) = v.as_f64() else {
            return false;
        };
        let kind_ok = match self.kind {
            Kind::Number => true,
            Kind::Integer => v.is_i64() || v.is_u64() || n.fract() == 0.0,
        };
        kind_ok && self.min.is_none_or(|m| n >= m) && self.max.is_none_or(|m| n <= m)
    }

    fn describe(&self) -> String {
        let what = match self.kind {
            Kind::Number => "a number",
            Kind::Integer => "a whole number",
        };
        match (self.min, self.max) {
            (Some(lo), Some(hi)) => format!("{what} from {lo} to {hi}"),
            (Some(lo), None) => format!("{what} of at least {lo}"),
            (None, Some(hi)) => format!("{what} of at most {hi}"),
            (None, None) => what.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(r: Ranges, v: Value) -> Result<(), String> {
        r.check(v.as_object().unwrap())
    }

    #[test]
    fn bounds_are_inclusive_and_null_is_unset() {
        let a = Ranges::AnthropicMessages;
        assert!(
            check(
                a,
                json!({"temperature": 0, "top_p": 1.0, "top_k": 0, "max_tokens": 1})
            )
            .is_ok()
        );
        assert!(check(a, json!({"temperature": null, "top_k": null})).is_ok());
        let o = Ranges::OpenAiChat;
        assert!(
            check(
                o,
                json!({"temperature": 2, "presence_penalty": -2, "n": 1, "seed": -5})
            )
            .is_ok()
        );
    }

    #[test]
    fn a_value_out_of_range_is_named_with_what_the_api_takes() {
        assert_eq!(
            check(Ranges::AnthropicMessages, json!({"temperature": 1.2})).unwrap_err(),
            "`temperature` is 1.2, and Anthropic Messages takes a number from 0 to 1"
        );
        assert_eq!(
            check(Ranges::OpenAiChat, json!({"temperature": 2.5})).unwrap_err(),
            "`temperature` is 2.5, and OpenAI chat completions takes a number from 0 to 2"
        );
        assert_eq!(
            check(Ranges::AnthropicMessages, json!({"max_tokens": 0})).unwrap_err(),
            "`max_tokens` is 0, and Anthropic Messages takes a whole number of at least 1"
        );
        assert_eq!(
            check(Ranges::OpenAiChat, json!({"top_p": -0.1})).unwrap_err(),
            "`top_p` is -0.1, and OpenAI chat completions takes a number from 0 to 1"
        );
    }

    #[test]
    fn kinds_are_checked() {
        let o = Ranges::OpenAiChat;
        // Integral floats read as whole numbers, as the reference's lax
        // validation reads them.
        assert!(check(o, json!({"max_tokens": 64.0, "n": 2.0})).is_ok());
        assert!(check(o, json!({"max_tokens": 64.5})).is_err());
        assert!(check(o, json!({"seed": "7"})).is_err());
        assert!(check(o, json!({"temperature": "0.5"})).is_err());
        assert!(check(o, json!({"temperature": true})).is_err());
        assert!(check(o, json!({"n": 0})).is_err());
        assert!(check(o, json!({"seed": u64::MAX})).is_ok());
    }
}
