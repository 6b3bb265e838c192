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

/// `f` as the `i64` it equals, when there is one.
fn exact_i64(f: f64) -> Option<i64> {
    // 2^63: every whole float of smaller magnitude (and -2^63 itself)
    // converts exactly.
    const BOUND: f64 = 9_223_372_036_854_775_808.0;
    #[allow(clippy::cast_possible_truncation, reason = "whole and within range")]
    (f.fract() == 0.0 && (-BOUND..BOUND).contains(&f)).then_some(f as i64)
}

/// Lax coercion before validation, as pydantic's lax mode does for the
/// common cases: numeric strings to numbers, `"true"`/`"false"` to
/// booleans, for top-level fields whose schema asks for them.
pub fn coerce(obj: &mut Map<String, Value>, schema: &Value) {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (k, v) in obj.iter_mut() {
        let Some(p) = props.get(k) else { continue };
        let types = accepted_types(p);
        if let Value::String(s) = v {
            if types.iter().any(|t| t == "string") {
                continue;
            }
            let t = s.trim();
            if types.iter().any(|t| t == "integer") {
                if let Ok(i) = t.parse::<i64>() {
                    *v = i.into();
                    continue;
                }
            }
            if types.iter().any(|t| t == "number") {
                if let Some(n) = t.parse::<f64>().ok().and_then(serde_json::Number::from_f64) {
                    *v = Value::Number(n);
                    continue;
                }
            }
            if types.iter().any(|t| t == "boolean") {
                match t.to_ascii_lowercase().as_str() {
                    "true" | "yes" | "1" => *v = true.into(),
                    "false" | "no" | "0" => *v = false.into(),
                    _ => {}
                }
            }
        } else if let Value::Number(n) = v {
            if types.iter().any(|t| t == "integer") && !types.iter().any(|t| t == "number") {
                // Only a float is rewritten, and only to the integer it
                // equals: a whole integer too large for i64 (an unsigned
                // one, or 1e30) stays as written, which JSON Schema's
                // `integer` accepts, instead of being clamped to i64::MAX.
                if let Some(i) = n.as_f64().filter(|_| n.is_f64()).and_then(exact_i64) {
                    *v = i.into();
                }
            }
        }
    }
}

fn accepted_types(p: &Value) -> Vec<String> {
    let mut out = Vec::new();
    match p.get("type") {
        Some(Value::String(t)) => out.push(t.clone()),
        Some(Value::Array(ts)) => {
            out.extend(ts.iter().filter_map(Value::as_str).map(str::to_owned))
        }
        _ => {}
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(bs) = p.get(key).and_then(Value::as_array) {
            for b in bs {
                out.extend(accepted_types(b));
            }
        }
    }
    out
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

    #[test]
    fn coercion_and_validation() {
        let schema = json!({"type": "object", "properties": {"v": {"type": "integer"}, "s": {"type": "string"}}, "required": ["v"]});
        let mut o = json!({"v": "12", "s": "7"}).as_object().unwrap().clone();
        coerce(&mut o, &schema);
        assert_eq!(Value::Object(o.clone()), json!({"v": 12, "s": "7"}));
        assert!(validate(&Value::Object(o), &schema).is_ok());
        let err = validate(&json!({"v": "x"}), &schema).unwrap_err();
        assert!(err.contains("/v"), "{err}");
    }

    /// A model's number for an integer field: a whole float becomes the
    /// integer it equals; nothing else changes value (a large whole number
    /// was clamped to i64::MAX before).
    #[test]
    fn integers_are_never_clamped() {
        let schema = json!({"type": "object", "properties": {"v": {"type": "integer"}}});
        let big: Value = serde_json::from_str("18446744073709551615").unwrap();
        let two_63 = 2f64.powi(63);
        for (given, expected) in [
            (json!(3.0), json!(3)),
            (json!(-0.0), json!(0)),
            (json!(-two_63), json!(i64::MIN)),
            (json!(two_63), json!(two_63)),
            (json!(1e30), json!(1e30)),
            (big.clone(), big),
            (json!(2.5), json!(2.5)),
            (json!(i64::MAX), json!(i64::MAX)),
        ] {
            let mut o = Map::new();
            o.insert("v".into(), given.clone());
            coerce(&mut o, &schema);
            assert_eq!(o["v"], expected, "{given}");
            let whole = expected.as_f64().is_some_and(|f| f.fract() == 0.0);
            assert_eq!(
                validate(&Value::Object(o), &schema).is_ok(),
                whole,
                "{given}"
            );
        }
    }
}
