//! Response formats: the schema a turn asks for (typed with schemars, or a
//! raw JSON Schema, or a field map), the operative schema `operate` builds
//! around it (reason and action fields), and validating a parsed object
//! against it.

use std::sync::OnceLock;

use branch_messages::ResponseFormat;
use schemars::JsonSchema;
use serde_json::{Map, Value, json};

/// The reference's field definitions (Reason, ActionRequestModel,
/// ActionResponseModel, ReActAnalysis, Analysis): their JSON Schemas are
/// part of the prompt, so they are kept verbatim.
fn fields() -> &'static Value {
    static FIELDS: OnceLock<Value> = OnceLock::new();
    FIELDS.get_or_init(|| {
        serde_json::from_str(include_str!("fields.json")).unwrap_or_else(|_| json!({}))
    })
}

fn field(name: &str) -> Value {
    fields().get(name).cloned().unwrap_or(Value::Null)
}

/// The JSON Schema of `T` as a response format: schemars' schema without
/// the `$schema` key, titled with the type name.
pub fn schema_of<T: JsonSchema>() -> Value {
    let mut v = schemars::schema_for!(T).to_value();
    if let Some(o) = v.as_object_mut() {
        o.shift_remove("$schema");
        if !o.contains_key("type") {
            o.insert("type".into(), "object".into());
        }
    }
    v
}

/// A typed response format for `T`.
pub fn format_of<T: JsonSchema>() -> ResponseFormat {
    ResponseFormat::Schema(schema_of::<T>())
}

/// The ReAct analysis model (`analysis`, `extension_needed`,
/// `action_strategy`, extra keys forbidden).
pub fn react_analysis_schema() -> Value {
    field("react_analysis")
}

/// The default final-answer model of ReAct (`{answer: str | null}`).
pub fn analysis_schema() -> Value {
    field("analysis")
}

/// The provider's structured-output field for `format`: OpenAI's
/// `response_format` of type `json_schema` (also read by llama.cpp's server
/// and the embedded model). The name is the format's title reduced to the
/// characters OpenAI accepts.
pub fn native_response_format(format: &ResponseFormat) -> Value {
    let schema = match format {
        ResponseFormat::Schema(s) => s.clone(),
        ResponseFormat::Fields(m) => fields_schema(m),
    };
    let name: String = format_title(format)
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
        .take(64)
        .collect();
    let name = if name.is_empty() {
        "response".to_owned()
    } else {
        name
    };
    serde_json::json!({"type": "json_schema", "json_schema": {"name": name, "schema": schema}})
}

/// The format's title (`title` of a schema; `dict` for a field map).
pub fn format_title(format: &ResponseFormat) -> String {
    match format {
        ResponseFormat::Schema(s) => s
            .get("title")
            .and_then(Value::as_str)
            .unwrap_or("ResponseModel")
            .to_owned(),
        ResponseFormat::Fields(_) => "dict".to_owned(),
    }
}

/// A schema with `suffix` appended to its title (the reference names the
/// request model of `Answer` `AnswerRequest`).
pub fn retitled(format: &ResponseFormat, suffix: &str) -> ResponseFormat {
    match format {
        ResponseFormat::Schema(s) => {
            let mut s = s.clone();
            let title = format!("{}{suffix}", format_title(format));
            if let Some(o) = s.as_object_mut() {
                o.insert("title".into(), title.into());
            }
            ResponseFormat::Schema(sorted(s))
        }
        other => other.clone(),
    }
}

/// The operative schema of `operate`: the user's schema (or an empty one)
/// plus `reason` and the action fields, titled
/// `<Title>ResponseRequest`, keys ordered as pydantic writes them.
pub fn operative_schema(base: Option<&ResponseFormat>, reason: bool, actions: bool) -> Value {
    let mut schema = match base {
        Some(ResponseFormat::Schema(s)) => s.clone(),
        Some(ResponseFormat::Fields(m)) => fields_schema(m),
        None => json!({"properties": {}, "title": "Operative", "type": "object"}),
    };
    let title = schema
        .get("title")
        .and_then(Value::as_str)
        .unwrap_or("Operative")
        .to_owned();
    let Some(o) = schema.as_object_mut() else {
        return schema;
    };
    let mut defs = o
        .get("$defs")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut props = o
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let all_defs = field("defs");
    let mut add_def = |name: &str| {
        if let Some(d) = all_defs.get(name) {
            defs.insert(name.to_owned(), d.clone());
        }
    };
    if reason {
        add_def("Reason");
        props.insert("reason".into(), field("reason"));
    }
    if actions {
        add_def("ActionRequestModel");
        add_def("ActionResponseModel");
        for k in ["action_required", "action_requests", "action_responses"] {
            props.insert(k.into(), field(k));
        }
    }
    if !defs.is_empty() {
        o.insert("$defs".into(), Value::Object(defs));
    }
    o.insert("properties".into(), Value::Object(props));
    o.insert("title".into(), format!("{title}ResponseRequest").into());
    sorted(schema)
}

/// A schema for a field map (`{"name": "type description"}`): every field
/// accepts any value.
pub(crate) fn fields_schema(m: &Map<String, Value>) -> Value {
    let props: Map<String, Value> = m.keys().map(|k| (k.clone(), json!({}))).collect();
    json!({"properties": props, "title": "Fields", "type": "object"})
}

/// Keys sorted as pydantic's schema generator does (recursively), except
/// the order of `properties` entries, which is the field order.
pub(crate) fn sorted(v: Value) -> Value {
    sort_inner(v, false)
}

fn sort_inner(v: Value, keep_order: bool) -> Value {
    match v {
        Value::Object(o) => {
            let mut entries: Vec<(String, Value)> = o.into_iter().collect();
            if !keep_order {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| {
                        let keep = k == "properties";
                        let v = if k == "default" || k == "examples" || k == "enum" {
                            v
                        } else {
                            sort_inner(v, keep)
                        };
                        (k, v)
                    })
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.into_iter().map(|x| sort_inner(x, false)).collect()),
        other => other,
    }
}

/// The field names a format expects.
pub fn expected_keys(format: &ResponseFormat) -> Vec<String> {
    match format {
        ResponseFormat::Schema(s) => s
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default(),
        ResponseFormat::Fields(m) => m.keys().cloned().collect(),
    }
}

/// Validates `obj` against a schema; the error names the path and the
/// problem of each violation.
pub fn validate(obj: &Value, schema: &Value) -> Result<(), String> {
    let validator =
        jsonschema::validator_for(schema).map_err(|e| format!("invalid schema: {e}"))?;
    let errors: Vec<String> = validator
        .iter_errors(obj)
        .map(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() {
                e.to_string()
            } else {
                format!("{path}: {e}")
            }
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} validation error(s): {}",
            errors.len(),
            errors.join("; ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operative_schema_extends_and_retitles() {
        let answer = ResponseFormat::Schema(json!({
            "properties": {"answer": {"type": "string", "title": "Answer"}},
            "required": ["answer"], "title": "Answer", "type": "object"}));
        let s = operative_schema(Some(&answer), false, true);
        assert_eq!(s["title"], "AnswerResponseRequest");
        let keys: Vec<_> = s["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(
            keys,
            [
                "answer",
                "action_required",
                "action_requests",
                "action_responses"
            ]
        );
        let top: Vec<_> = s.as_object().unwrap().keys().cloned().collect();
        assert_eq!(top, ["$defs", "properties", "required", "title", "type"]);
        let plain = operative_schema(None, true, false);
        // The reference's operative schema without a base format does not
        // forbid extra keys (refdiff scenarios operate_reason_only,
        // operate_actions_no_format).
        assert!(plain.get("additionalProperties").is_none());
        assert!(plain["$defs"]["Reason"].is_object());
    }
}
