//! Questions a connected server puts to our person during a call (MCP
//! elicitation): the server's form read into a bounded [`Form`] of the
//! field kinds the specification allows (or, in URL mode, its address
//! checked, `elicit_url.rs`), handed to the caller's [`ElicitHook`], and
//! the answer checked against the form before it goes back. The server is
//! hostile like any input: its texts are cut, its fields and choices
//! counted, and a form we cannot read is declined without asking anyone.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value};

use crate::elicit_url::Address;

/// Most fields a form may have; a larger one is declined unasked.
pub const MAX_FORM_FIELDS: usize = 32;
/// Most choices one field may offer.
pub const MAX_FORM_CHOICES: usize = 64;
/// Longest message, title or description shown, in bytes; longer text is
/// cut at a character boundary and marked.
pub const MAX_FORM_TEXT_BYTES: usize = 8 * 1024;
/// Longest answer to one text field, in bytes, unless the form allows
/// less.
pub const MAX_FORM_ANSWER_BYTES: usize = 64 * 1024;

/// A server's question: its message, and a form to fill in or an address
/// to open.
#[derive(Debug, Clone, PartialEq)]
pub struct Elicitation {
    /// The server's name.
    pub server: String,
    /// What the server asks (cut at [`MAX_FORM_TEXT_BYTES`]).
    pub message: String,
    /// What answering means.
    pub asks: Asks,
}

impl Elicitation {
    /// The form to fill in, when the question is one.
    pub fn form(&self) -> Option<&Form> {
        match &self.asks {
            Asks::Form { form, .. } => Some(form),
            Asks::Url(_) => None,
        }
    }
}

/// What a question asks of the person.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Asks {
    /// Fill in a form (form mode).
    Form {
        /// The fields, in the server's order.
        form: Form,
        /// The form as the server wrote it (as `rmcp` read it), to pass
        /// the question on as it came.
        schema: Value,
    },
    /// Open an address, where what is asked is answered out of the
    /// client's sight (URL mode; only with
    /// [`crate::McpPolicy::allow_url_elicitation`]). Accepting means the
    /// person agreed to go there, and carries no content.
    Url(Address),
}

/// The fields of a form.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Form {
    /// The fields, in the order the server wrote them.
    pub fields: Vec<Field>,
}

/// One field.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// The key its answer goes under.
    pub name: String,
    /// What the person reads (the title, else the name).
    pub title: String,
    /// The server's description, if any.
    pub description: Option<String>,
    /// Whether an answer is required.
    pub required: bool,
    /// What the answer may be.
    pub kind: FieldKind,
    /// The value an empty answer takes, already checked against `kind`.
    pub default: Option<Value>,
}

/// What an answer may be.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldKind {
    /// Text, with its length bounds (in characters) and format.
    Text {
        /// Fewest characters.
        min: Option<u64>,
        /// Most characters.
        max: Option<u64>,
        /// `email`, `uri`, `date` or `date-time`.
        format: Option<TextFormat>,
    },
    /// A number (a whole one when `integer`), within bounds.
    Number {
        /// Only whole numbers.
        integer: bool,
        /// Smallest value.
        min: Option<f64>,
        /// Largest value.
        max: Option<f64>,
    },
    /// Yes or no.
    Boolean,
    /// One of the choices.
    Choice(Vec<FormChoice>),
    /// Some of the choices, between `min` and `max` of them.
    Choices {
        /// The choices.
        options: Vec<FormChoice>,
        /// Fewest chosen.
        min: Option<u64>,
        /// Most chosen.
        max: Option<u64>,
    },
}

/// The formats a text field may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextFormat {
    /// An email address.
    Email,
    /// A URI.
    Uri,
    /// A calendar date (`2026-12-07`).
    Date,
    /// A date and time (RFC 3339).
    DateTime,
}

/// One choice: the value the answer carries and its label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormChoice {
    /// The value.
    pub value: String,
    /// What the person reads.
    pub title: String,
}

/// What the person did with the question.
#[derive(Debug, Clone, PartialEq)]
pub enum ElicitAnswer {
    /// Filled in the form: each answered field by name (for an address:
    /// agreed to open it, with nothing filled in).
    Accept(Map<String, Value>),
    /// Declined to answer; the server's call goes on without it.
    Decline,
    /// Dismissed the question (left, Ctrl-C, no answer in time).
    Cancel,
}

impl ElicitAnswer {
    /// The protocol's word for it (`accept`, `decline`, `cancel`).
    pub(crate) fn action(&self) -> &'static str {
        match self {
            Self::Accept(_) => "accept",
            Self::Decline => "decline",
            Self::Cancel => "cancel",
        }
    }
}

/// Puts a server's question to the person; called during a call of that
/// server, which waits for the answer (at most
/// [`crate::limits::CONFIRM_DEADLINE`], then it is cancelled). With a
/// hook, our client declares that it shows forms, and addresses to open
/// when the policy allows them ([`crate::McpPolicy::allow_url_elicitation`]).
pub type ElicitHook = Arc<dyn Fn(Elicitation) -> BoxFuture<'static, ElicitAnswer> + Send + Sync>;

/// What marks a text cut short.
pub(crate) const CUT_MARK: &str = " …(cut)";

/// `text` cut at `cap` bytes on a character boundary, and marked.
pub(crate) fn cut(text: &str, cap: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= cap {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut end = cap;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!("{}{CUT_MARK}", &text[..end]))
}

/// `text` cut at [`MAX_FORM_TEXT_BYTES`].
pub(crate) fn bounded(text: &str) -> String {
    cut(text, MAX_FORM_TEXT_BYTES).into_owned()
}

impl Form {
    /// Reads a `requestedSchema`: an object schema whose properties are
    /// strings (optionally with a format or length bounds), numbers,
    /// integers, booleans, single-choice enums (`enum`, `oneOf` with
    /// titles) and multi-choice arrays of them. An error says what could
    /// not be read; the question is then declined.
    pub fn from_schema(schema: &Value) -> Result<Self, String> {
        let props = match schema.get("properties") {
            Some(Value::Object(p)) => p,
            None => return Ok(Self::default()),
            Some(_) => return Err("`properties` is not an object".into()),
        };
        if props.len() > MAX_FORM_FIELDS {
            return Err(format!(
                "{} fields, more than {MAX_FORM_FIELDS}",
                props.len()
            ));
        }
        let required: Vec<&str> = match schema.get("required") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(r)) => r.iter().filter_map(Value::as_str).collect(),
            Some(_) => return Err("`required` is not a list".into()),
        };
        let mut fields = Vec::with_capacity(props.len());
        for (name, prop) in props {
            let field = Field::from_schema(name, prop, required.contains(&name.as_str()))
                .map_err(|e| format!("field `{}`: {e}", bounded(name)))?;
            fields.push(field);
        }
        Ok(Self { fields })
    }

    /// Checks an answer against the form: every required field answered,
    /// each value of its field's kind, no field the form lacks.
    pub fn check(&self, answer: &Map<String, Value>) -> Result<(), String> {
        for key in answer.keys() {
            if !self.fields.iter().any(|f| &f.name == key) {
                return Err(format!("`{}` is not a field of the form", bounded(key)));
            }
        }
        for f in &self.fields {
            match answer.get(&f.name) {
                Some(v) => f.check(v).map_err(|e| format!("`{}`: {e}", f.title))?,
                None if f.required => return Err(format!("`{}` is required", f.title)),
                None => {}
            }
        }
        Ok(())
    }
}

fn text_of(v: &Value, key: &str) -> Result<Option<String>, String> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(bounded(s))),
        Some(_) => Err(format!("`{key}` is not text")),
    }
}

fn count_of(v: &Value, key: &str) -> Result<Option<u64>, String> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(n) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{key}` is not a whole number")),
    }
}

fn bound_of(v: &Value, key: &str) -> Result<Option<f64>, String> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(n) => n
            .as_f64()
            .filter(|f| f.is_finite())
            .map(Some)
            .ok_or_else(|| format!("`{key}` is not a number")),
    }
}

/// The choices of `enum` (with `enumNames` as labels) or of `oneOf`/
/// `anyOf` (`const` and `title`).
fn choices_of(v: &Value) -> Result<Option<Vec<FormChoice>>, String> {
    let list = |items: &Vec<Value>| -> Result<(), String> {
        if items.is_empty() || items.len() > MAX_FORM_CHOICES {
            return Err(format!(
                "{} choices, not between 1 and {MAX_FORM_CHOICES}",
                items.len()
            ));
        }
        Ok(())
    };
    if let Some(e) = v.get("enum") {
        let Value::Array(items) = e else {
            return Err("`enum` is not a list".into());
        };
        list(items)?;
        let names = match v.get("enumNames") {
            Some(Value::Array(n)) if n.len() == items.len() => Some(n),
            None | Some(Value::Null) => None,
            Some(_) => return Err("`enumNames` does not match `enum`".into()),
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let value = item.as_str().ok_or("a choice is not text")?;
            let title = names
                .and_then(|n| n.get(i))
                .and_then(Value::as_str)
                .unwrap_or(value);
            out.push(FormChoice {
                value: bounded(value),
                title: bounded(title),
            });
        }
        return Ok(Some(out));
    }
    let Some(one_of) = v.get("oneOf").or_else(|| v.get("anyOf")) else {
        return Ok(None);
    };
    let Value::Array(items) = one_of else {
        return Err("`oneOf` is not a list".into());
    };
    list(items)?;
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let value = item
            .get("const")
            .and_then(Value::as_str)
            .ok_or("a choice has no text `const`")?;
        let title = item.get("title").and_then(Value::as_str).unwrap_or(value);
        out.push(FormChoice {
            value: bounded(value),
            title: bounded(title),
        });
    }
    Ok(Some(out))
}

impl Field {
    fn from_schema(name: &str, prop: &Value, required: bool) -> Result<Self, String> {
        if !prop.is_object() {
            return Err("not a schema".into());
        }
        let kind = match (prop.get("type").and_then(Value::as_str), choices_of(prop)?) {
            (Some("string") | None, Some(options)) => FieldKind::Choice(options),
            (Some("array"), None) => {
                let items = prop.get("items").ok_or("a list without `items`")?;
                let options = choices_of(items)?.ok_or("a list of anything but choices")?;
                FieldKind::Choices {
                    options,
                    min: count_of(prop, "minItems")?,
                    max: count_of(prop, "maxItems")?,
                }
            }
            (Some("string"), None) => FieldKind::Text {
                min: count_of(prop, "minLength")?,
                max: count_of(prop, "maxLength")?,
                format: match prop.get("format").and_then(Value::as_str) {
                    None => None,
                    Some("email") => Some(TextFormat::Email),
                    Some("uri") => Some(TextFormat::Uri),
                    Some("date") => Some(TextFormat::Date),
                    Some("date-time") => Some(TextFormat::DateTime),
                    Some(other) => return Err(format!("unknown format `{}`", bounded(other))),
                },
            },
            (Some(t @ ("number" | "integer")), None) => FieldKind::Number {
                integer: t == "integer",
                min: bound_of(prop, "minimum")?,
                max: bound_of(prop, "maximum")?,
            },
            (Some("boolean"), None) => FieldKind::Boolean,
            (Some(other), _) => return Err(format!("a field of type `{}`", bounded(other))),
            (None, None) => return Err("a field without a type".into()),
        };
        let mut field = Self {
            name: name.to_owned(),
            title: text_of(prop, "title")?.unwrap_or_else(|| bounded(name)),
            description: text_of(prop, "description")?,
            required,
            kind,
            default: None,
        };
        // A default the field itself would refuse is not offered.
        field.default = prop
            .get("default")
            .filter(|d| !d.is_null() && field.check(d).is_ok())
            .cloned();
        Ok(field)
    }

    /// Whether `v` is an answer of this field's kind.
    pub fn check(&self, v: &Value) -> Result<(), String> {
        match &self.kind {
            FieldKind::Text { min, max, format } => {
                let s = v.as_str().ok_or("not text")?;
                let n = u64::try_from(s.chars().count()).unwrap_or(u64::MAX);
                if s.len() > MAX_FORM_ANSWER_BYTES {
                    return Err(format!("longer than {MAX_FORM_ANSWER_BYTES} bytes"));
                }
                if min.is_some_and(|m| n < m) || max.is_some_and(|m| n > m) {
                    return Err(within(*min, *max, " characters"));
                }
                match format {
                    Some(f) if !f.accepts(s) => Err(format!("not {}", f.describe())),
                    _ => Ok(()),
                }
            }
            FieldKind::Number { integer, min, max } => {
                let x = v.as_f64().ok_or("not a number")?;
                if *integer && !(v.is_i64() || v.is_u64()) {
                    return Err("not a whole number".into());
                }
                if min.is_some_and(|m| x < m) || max.is_some_and(|m| x > m) {
                    return Err(within(*min, *max, ""));
                }
                Ok(())
            }
            FieldKind::Boolean => v.as_bool().map(drop).ok_or_else(|| "not yes or no".into()),
            FieldKind::Choice(options) => {
                let s = v.as_str().ok_or("not text")?;
                options
                    .iter()
                    .any(|c| c.value == s)
                    .then_some(())
                    .ok_or_else(|| "not one of the choices".into())
            }
            FieldKind::Choices { options, min, max } => {
                let items = v.as_array().ok_or("not a list")?;
                for item in items {
                    let s = item.as_str().ok_or("a choice is not text")?;
                    if !options.iter().any(|c| c.value == s) {
                        return Err("not one of the choices".into());
                    }
                }
                let n = u64::try_from(items.len()).unwrap_or(u64::MAX);
                if min.is_some_and(|m| n < m) || max.is_some_and(|m| n > m) {
                    return Err(within(*min, *max, " choices"));
                }
                Ok(())
            }
        }
    }
}

/// What an answer outside `min` and `max` should have been.
fn within<T: std::fmt::Display>(min: Option<T>, max: Option<T>, unit: &str) -> String {
    match (min, max) {
        (Some(a), Some(b)) => format!("must be between {a} and {b}{unit}"),
        (Some(a), None) => format!("must be at least {a}{unit}"),
        (None, Some(b)) => format!("must be at most {b}{unit}"),
        (None, None) => "out of bounds".into(),
    }
}

impl TextFormat {
    /// Whether `s` looks like this format: enough to catch a typing
    /// mistake; the server checks again.
    pub fn accepts(self, s: &str) -> bool {
        match self {
            TextFormat::Email => s.split_once('@').is_some_and(|(user, host)| {
                !user.is_empty() && host.contains('.') && !s.contains(char::is_whitespace)
            }),
            TextFormat::Uri => s.split_once(':').is_some_and(|(scheme, rest)| {
                !rest.is_empty()
                    && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                    && scheme
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
                    && !s.contains(char::is_whitespace)
            }),
            TextFormat::Date => {
                let f = time::macros::format_description!("[year]-[month]-[day]");
                time::Date::parse(s, &f).is_ok()
            }
            TextFormat::DateTime => {
                time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
                    .is_ok()
            }
        }
    }

    /// The format in words.
    pub fn describe(self) -> &'static str {
        match self {
            TextFormat::Email => "an email address",
            TextFormat::Uri => "a URI",
            TextFormat::Date => "a date (YYYY-MM-DD)",
            TextFormat::DateTime => "a date and time (RFC 3339)",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn booking() -> Value {
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "title": "Name", "minLength": 2, "maxLength": 5},
                "guests": {"type": "integer", "minimum": 1, "maximum": 12, "default": 2},
                "terrace": {"type": "boolean", "default": "yes"},
                "time": {"type": "string", "enum": ["18", "20"], "enumNames": ["6 pm", "8 pm"]},
                "extras": {"type": "array", "items": {"anyOf": [
                    {"const": "cake", "title": "A cake"}, {"const": "wine"}
                ]}, "maxItems": 1},
                "email": {"type": "string", "format": "email"},
                "day": {"type": "string", "format": "date"}
            },
            "required": ["name", "guests"]
        })
    }

    #[test]
    fn a_form_is_read_in_its_order_with_checked_defaults() {
        let form = Form::from_schema(&booking()).unwrap();
        let names: Vec<&str> = form.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names.len(), 7);
        let by = |n: &str| form.fields.iter().find(|f| f.name == n).unwrap();
        assert_eq!(by("name").title, "Name");
        assert!(by("name").required && !by("time").required);
        assert_eq!(by("guests").default, Some(json!(2)));
        // A default of the wrong kind is not offered.
        assert_eq!(by("terrace").default, None);
        assert_eq!(
            by("time").kind,
            FieldKind::Choice(vec![
                FormChoice {
                    value: "18".into(),
                    title: "6 pm".into()
                },
                FormChoice {
                    value: "20".into(),
                    title: "8 pm".into()
                },
            ])
        );
        assert!(
            matches!(&by("extras").kind, FieldKind::Choices { options, max: Some(1), .. } if options[0].title == "A cake")
        );
    }

    #[test]
    fn answers_are_checked_against_the_form() {
        let form = Form::from_schema(&booking()).unwrap();
        let ok = |v: Value| form.check(v.as_object().unwrap());
        assert!(ok(json!({"name": "Ada", "guests": 3})).is_ok());
        assert!(
            ok(
                json!({"name": "Ada", "guests": 3, "time": "20", "extras": ["cake"],
            "terrace": false, "email": "a@b.io", "day": "2026-12-07"})
            )
            .is_ok()
        );
        for bad in [
            json!({"guests": 3}),
            json!({"name": "A", "guests": 3}),
            json!({"name": "Ada", "guests": 2.5}),
            json!({"name": "Ada", "guests": 13}),
            json!({"name": "Ada", "guests": 3, "time": "19"}),
            json!({"name": "Ada", "guests": 3, "extras": ["cake", "wine"]}),
            json!({"name": "Ada", "guests": 3, "email": "nobody"}),
            json!({"name": "Ada", "guests": 3, "day": "2026-13-01"}),
            json!({"name": "Ada", "guests": 3, "other": 1}),
        ] {
            assert!(ok(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn forms_we_cannot_read_are_refused() {
        let many: Map<String, Value> = (0..=MAX_FORM_FIELDS)
            .map(|i| (format!("f{i}"), json!({"type": "boolean"})))
            .collect();
        for bad in [
            json!({"properties": []}),
            json!({"properties": {"a": {"type": "object"}}}),
            json!({"properties": {"a": {}}}),
            json!({"properties": {"a": {"type": "string", "format": "ipv4"}}}),
            json!({"properties": {"a": {"type": "string", "enum": []}}}),
            json!({"properties": {"a": {"type": "array", "items": {"type": "string"}}}}),
            json!({"properties": {"a": {"type": "integer", "minimum": "x"}}}),
            json!({"properties": many}),
        ] {
            assert!(Form::from_schema(&bad).is_err(), "{bad}");
        }
        assert_eq!(Form::from_schema(&json!({})).unwrap(), Form::default());
    }

    #[test]
    fn long_texts_are_cut_on_a_character_boundary() {
        let long = "é".repeat(MAX_FORM_TEXT_BYTES);
        let shown = bounded(&long);
        assert!(shown.len() <= MAX_FORM_TEXT_BYTES + CUT_MARK.len());
        assert!(shown.ends_with(CUT_MARK));
        assert_eq!(cut("short", 8), "short");
    }
}
