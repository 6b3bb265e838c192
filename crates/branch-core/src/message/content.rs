//! The content of each message kind, with the reference's input rules and
//! omission rules.

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::{Map, Value};
use uuid::Uuid;

use super::content_fields::ContentFields;
use crate::element::{self, parse_uuid};
use crate::participant::json_type;

/// The system prompt text used when a stored System has none.
pub const DEFAULT_SYSTEM_MESSAGE: &str =
    "You are a helpful AI assistant. Let's think step by step.";

/// The keys each kind's content takes; any other is refused. A wrapper
/// key a kind unwraps first (`action_request`, `action_response`) is not
/// listed: it is gone by the time the keys are checked.
pub(super) const SYSTEM_KEYS: &[&str] = &["system_message", "system_datetime"];
pub(super) const INSTRUCTION_KEYS: &[&str] = &[
    "instruction",
    "guidance",
    "prompt_context",
    "context",
    "handle_context",
    "plain_content",
    "tool_schemas",
    "images",
    "image_detail",
    "response_format",
    "structure",
];
pub(super) const ASSISTANT_RESPONSE_KEYS: &[&str] = &["assistant_response"];
pub(super) const ACTION_REQUEST_KEYS: &[&str] = &["function", "arguments", "action_response_id"];
pub(super) const ACTION_RESPONSE_KEYS: &[&str] = &[
    "function",
    "arguments",
    "output",
    "action_request_id",
    "error",
];
/// The wrappers the two action kinds unwrap.
pub(super) const WRAPPER_KEYS: &[&str] = &["action_request", "action_response"];
/// Every key some kind's content takes, by kind (a key may be listed twice).
pub(super) const KEYS_BY_KIND: [&[&str]; 6] = [
    SYSTEM_KEYS,
    INSTRUCTION_KEYS,
    ASSISTANT_RESPONSE_KEYS,
    ACTION_REQUEST_KEYS,
    ACTION_RESPONSE_KEYS,
    WRAPPER_KEYS,
];

/// Content of the system message.
#[derive(Debug, Clone, PartialEq)]
pub struct SystemContent {
    /// The prompt. Normally a string; any JSON value is kept verbatim.
    pub system_message: Value,
    /// The time the prompt announces, verbatim.
    pub system_datetime: Option<String>,
}

impl SystemContent {
    /// A system prompt with no datetime.
    pub fn new(text: impl Into<Value>) -> Self {
        Self {
            system_message: text.into(),
            system_datetime: None,
        }
    }

    /// The text a provider sees: `System Time: {datetime}\n\n{prompt}` when
    /// a datetime is set. A non-string prompt is rendered as compact JSON
    /// (the reference fails on it).
    pub fn rendered(&self) -> String {
        let text = match &self.system_message {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        match &self.system_datetime {
            Some(dt) => format!("System Time: {dt}\n\n{text}"),
            None => text,
        }
    }

    /// The prompt as text, if it is text.
    pub fn text(&self) -> Option<&str> {
        self.system_message.as_str()
    }

    pub(crate) fn from_fields(mut m: ContentFields) -> Result<Self, String> {
        m.check_keys(SYSTEM_KEYS)?;
        let system_message = m
            .take("system_message")
            .unwrap_or_else(|| DEFAULT_SYSTEM_MESSAGE.into());
        let system_datetime = match m.take("system_datetime") {
            None | Some(Value::Null) | Some(Value::Bool(false)) => None,
            Some(Value::Bool(true)) => Some(element::format_minute_utc(element::now())),
            Some(Value::String(s)) => Some(s),
            Some(other) => {
                return Err(format!(
                    "`system_datetime` must be a string or a boolean, not {}",
                    json_type(&other)
                ));
            }
        };
        Ok(Self {
            system_message,
            system_datetime,
        })
    }
}

impl Serialize for SystemContent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        if !self.system_message.is_null() {
            m.serialize_entry("system_message", &self.system_message)?;
        }
        if let Some(dt) = &self.system_datetime {
            m.serialize_entry("system_datetime", dt)?;
        }
        m.end()
    }
}

/// How much detail an image gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageDetail {
    /// Low detail.
    Low,
    /// High detail.
    High,
    /// Provider's choice.
    Auto,
}

impl ImageDetail {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageDetail::Low => "low",
            ImageDetail::High => "high",
            ImageDetail::Auto => "auto",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "low" => ImageDetail::Low,
            "high" => ImageDetail::High,
            "auto" => ImageDetail::Auto,
            _ => return None,
        })
    }
}

/// Content of a user instruction.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InstructionContent {
    /// The instruction (normally a string).
    pub instruction: Option<Value>,
    /// Guidance (normally a string).
    pub guidance: Option<Value>,
    /// The context items.
    pub prompt_context: Vec<Value>,
    /// When set, replaces the whole rendering.
    pub plain_content: Option<String>,
    /// Tool schemas offered with this instruction.
    pub tool_schemas: Vec<Value>,
    /// Image URLs, data URIs or raw base64.
    pub images: Vec<String>,
    /// Image detail level.
    pub image_detail: Option<ImageDetail>,
    /// The requested response format. Held in memory only: the reference
    /// never serializes it, so a restored instruction has none.
    pub response_format: Option<Value>,
}

/// Python truthiness of a JSON value.
pub(crate) fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

impl InstructionContent {
    /// Boxed from the start, as a message holds it: built on the stack,
    /// its couple of hundred bytes were copied into the result and again
    /// into the box, for each of a history's instructions.
    pub(crate) fn from_fields(mut m: ContentFields) -> Result<Box<Self>, String> {
        m.check_keys(INSTRUCTION_KEYS)?;
        let mut c = Box::new(InstructionContent {
            // Kept unless empty, exactly as written: the reference keeps
            // only truthy values and so loses a written `0`, `false` or
            // `{}` (compat.md).
            instruction: m.take("instruction").filter(|v| !is_empty_value(v)),
            guidance: m.take("guidance").filter(|v| !is_empty_value(v)),
            ..Default::default()
        });
        // Most instructions hold nothing else: every other field keeps its
        // default when its key is absent.
        if m.is_empty() {
            return Ok(c);
        }
        match m.take("handle_context") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s == "extend" || s == "replace" => {}
            Some(_) => return Err("`handle_context` must be \"extend\" or \"replace\"".into()),
        }
        let ctx = match m.take("context") {
            Some(v) => Some(v),
            None => m.take("prompt_context"),
        };
        c.prompt_context = match ctx {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a,
            Some(other) => vec![other],
        };
        c.plain_content = match m.take("plain_content") {
            Some(Value::String(s)) if !s.is_empty() => Some(s),
            None | Some(Value::Null) | Some(Value::String(_)) => None,
            Some(other) => {
                return Err(format!(
                    "`plain_content` must be a string, not {}",
                    json_type(&other)
                ));
            }
        };
        c.tool_schemas = match m.take("tool_schemas") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a,
            Some(Value::Object(mut o)) => match o.shift_remove("tools") {
                Some(Value::Array(a)) if o.is_empty() => a,
                Some(other) if o.is_empty() => vec![other],
                Some(t) => {
                    o.insert("tools".into(), t);
                    vec![Value::Object(o)]
                }
                None => vec![Value::Object(o)],
            },
            Some(other) => {
                return Err(format!(
                    "`tool_schemas` must be a list or an object, not {}",
                    json_type(&other)
                ));
            }
        };
        let images_given = m.contains_key("images");
        c.images = match m.take("images") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => vec![s],
            Some(Value::Array(a)) => a
                .into_iter()
                .map(|i| match i {
                    Value::String(s) => Ok(s),
                    other => Err(format!(
                        "an image must be a string, not {}",
                        json_type(&other)
                    )),
                })
                .collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(format!(
                    "`images` must be a list of strings, not {}",
                    json_type(&other)
                ));
            }
        };
        c.image_detail = match m.take("image_detail") {
            Some(Value::String(s)) if !s.is_empty() => {
                Some(ImageDetail::parse(&s).ok_or_else(|| {
                    format!("`image_detail` must be low, high or auto, not `{s}`")
                })?)
            }
            None | Some(Value::Null) | Some(Value::String(_)) => None,
            Some(other) => {
                return Err(format!(
                    "`image_detail` must be a string, not {}",
                    json_type(&other)
                ));
            }
        };
        if images_given && c.image_detail.is_none() {
            c.image_detail = Some(ImageDetail::Auto);
        }
        c.response_format = m.take("response_format").filter(|v| !v.is_null());
        Ok(c)
    }
}

impl Serialize for InstructionContent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        let present = |v: &Option<Value>| v.as_ref().is_some_and(|v| !is_empty_value(v));
        if present(&self.instruction) {
            m.serialize_entry("instruction", &self.instruction)?;
        }
        if present(&self.guidance) {
            m.serialize_entry("guidance", &self.guidance)?;
        }
        if !self.prompt_context.is_empty() {
            m.serialize_entry("prompt_context", &self.prompt_context)?;
        }
        if let Some(p) = self.plain_content.as_deref().filter(|p| !p.is_empty()) {
            m.serialize_entry("plain_content", p)?;
        }
        if !self.tool_schemas.is_empty() {
            m.serialize_entry("tool_schemas", &self.tool_schemas)?;
        }
        if !self.images.is_empty() {
            m.serialize_entry("images", &self.images)?;
        }
        if let Some(d) = self.image_detail {
            m.serialize_entry("image_detail", d.as_str())?;
        }
        m.end()
    }
}

fn is_empty_value(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// Content of a model reply.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AssistantResponseContent {
    /// The reply text, possibly empty.
    pub assistant_response: String,
}

impl AssistantResponseContent {
    pub(crate) fn from_fields(mut m: ContentFields) -> Result<Self, String> {
        m.check_keys(ASSISTANT_RESPONSE_KEYS)?;
        let assistant_response = match m.take("assistant_response") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s,
            Some(other) => {
                return Err(format!(
                    "`assistant_response` must be a string, not {}",
                    json_type(&other)
                ));
            }
        };
        Ok(Self { assistant_response })
    }
}

impl Serialize for AssistantResponseContent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(1))?;
        m.serialize_entry("assistant_response", &self.assistant_response)?;
        m.end()
    }
}

/// Content of a tool call requested by the model.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ActionRequestContent {
    /// The tool name.
    pub function: String,
    /// The call's arguments.
    pub arguments: Map<String, Value>,
    /// The response answering this request, once linked.
    pub action_response_id: Option<Uuid>,
}

impl ActionRequestContent {
    pub(crate) fn from_fields(mut m: ContentFields) -> Result<Self, String> {
        if let Some(Value::Object(inner)) = m.take("action_request") {
            for (k, v) in inner {
                m.insert_if_absent(k, v);
            }
        }
        m.check_keys(ACTION_REQUEST_KEYS)?;
        Ok(Self {
            function: function_name(m.take("function"))?,
            arguments: arguments_object(m.take("arguments"))?,
            action_response_id: opt_id(m.take("action_response_id"), "action_response_id")?,
        })
    }
}

impl Serialize for ActionRequestContent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("function", &self.function)?;
        m.serialize_entry("arguments", &self.arguments)?;
        if let Some(id) = &self.action_response_id {
            m.serialize_entry("action_response_id", id)?;
        }
        m.end()
    }
}

/// Content of a tool result.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ActionResponseContent {
    /// The tool name, copied from the request.
    pub function: String,
    /// The arguments, copied from the request.
    pub arguments: Map<String, Value>,
    /// What the tool returned; `None` (or JSON null) is not written.
    pub output: Option<Value>,
    /// The request this answers.
    pub action_request_id: Option<Uuid>,
    /// An error text (Branch operations put errors into `output` instead).
    pub error: Option<String>,
}

impl ActionResponseContent {
    pub(crate) fn from_fields(mut m: ContentFields) -> Result<Self, String> {
        if let Some(Value::Object(inner)) = m.take("action_response") {
            for (k, v) in inner {
                if k != "action_request_id" {
                    m.insert(k, v);
                }
            }
        }
        m.check_keys(ACTION_RESPONSE_KEYS)?;
        Ok(Self {
            function: function_name(m.take("function"))?,
            arguments: arguments_object(m.take("arguments"))?,
            output: m.take("output").filter(|v| !v.is_null()),
            action_request_id: opt_id(m.take("action_request_id"), "action_request_id")?,
            error: match m.take("error") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s),
                Some(other) => Some(other.to_string()),
            },
        })
    }
}

impl Serialize for ActionResponseContent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("function", &self.function)?;
        m.serialize_entry("arguments", &self.arguments)?;
        if let Some(o) = self.output.as_ref().filter(|o| !o.is_null()) {
            m.serialize_entry("output", o)?;
        }
        if let Some(id) = &self.action_request_id {
            m.serialize_entry("action_request_id", id)?;
        }
        if let Some(e) = &self.error {
            m.serialize_entry("error", e)?;
        }
        m.end()
    }
}

fn function_name(v: Option<Value>) -> Result<String, String> {
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(format!(
            "`function` must be a string, not {}",
            json_type(&other)
        )),
    }
}

/// Arguments: an object; a JSON string is parsed; a list takes its first
/// element.
fn arguments_object(v: Option<Value>) -> Result<Map<String, Value>, String> {
    match v {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m),
        Some(Value::String(s)) => {
            let parsed: Value = serde_json::from_str(&s)
                .map_err(|e| format!("`arguments` is a string that is not JSON: {e}"))?;
            arguments_object(Some(parsed))
        }
        Some(Value::Array(mut a)) if !a.is_empty() => arguments_object(Some(a.swap_remove(0))),
        Some(Value::Array(_)) => Ok(Map::new()),
        Some(other) => Err(format!(
            "`arguments` must be an object, not {}",
            json_type(&other)
        )),
    }
}

fn opt_id(v: Option<Value>, field: &str) -> Result<Option<Uuid>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => parse_uuid(&s)
            .map(Some)
            .ok_or_else(|| format!("`{field}` is not a valid UUID")),
        Some(other) => Err(format!(
            "`{field}` must be a UUID string, not {}",
            json_type(&other)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What a kind reads from `v`, as a message's reading hands it over.
    fn read<T>(kind: fn(ContentFields) -> Result<T, String>, v: Value) -> Result<T, String> {
        kind(ContentFields::from_value(v)?)
    }

    #[test]
    fn empty_contents_match_the_reference() {
        let i = read(InstructionContent::from_fields, json!({})).unwrap();
        assert_eq!(serde_json::to_value(&i).unwrap(), json!({}));
        let a = read(AssistantResponseContent::from_fields, json!({})).unwrap();
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            json!({"assistant_response": ""})
        );
        let r = read(ActionRequestContent::from_fields, json!({})).unwrap();
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"function": "", "arguments": {}})
        );
        let r = read(ActionResponseContent::from_fields, json!({})).unwrap();
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"function": "", "arguments": {}})
        );
    }

    #[test]
    fn instruction_input_rules() {
        let i = read(InstructionContent::from_fields, json!({
            "instruction": "", "context": {"k": 1}, "images": "u", "tool_schemas": {"tools": [{"a": 1}]}
        }))
        .unwrap();
        assert!(i.instruction.is_none());
        assert_eq!(i.prompt_context, vec![json!({"k": 1})]);
        assert_eq!(i.images, vec!["u".to_string()]);
        assert_eq!(i.image_detail, Some(ImageDetail::Auto));
        assert_eq!(i.tool_schemas, vec![json!({"a": 1})]);
        assert!(
            read(
                InstructionContent::from_fields,
                json!({"handle_context": "merge"})
            )
            .is_err()
        );
        assert!(read(InstructionContent::from_fields, json!({"bogus": 1})).is_err());
    }

    #[test]
    fn legacy_wrappers_and_string_arguments() {
        let r = read(
            ActionRequestContent::from_fields,
            json!({"action_request": {"function": "f", "arguments": "{\"a\": 1}"}}),
        )
        .unwrap();
        assert_eq!(r.function, "f");
        assert_eq!(r.arguments["a"], 1);
        let id = "2a5ff888-f368-4fd5-acc4-a6e15bb4a8a7";
        let r = read(
            ActionResponseContent::from_fields,
            json!({
                "action_response": {"function": "f", "output": 3}, "action_request_id": id
            }),
        )
        .unwrap();
        assert_eq!(r.output, Some(json!(3)));
        assert_eq!(r.action_request_id.unwrap().to_string(), id);
    }

    #[test]
    fn rendering() {
        let mut s = SystemContent::new("S");
        assert_eq!(s.rendered(), "S");
        s.system_datetime = Some("2024-01-01 09:00".into());
        assert_eq!(s.rendered(), "System Time: 2024-01-01 09:00\n\nS");
    }
}
