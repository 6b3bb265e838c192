//! Extra fields in a requested structure: `operate`'s `field_models` and
//! ReAct's intermediate deliverables (`intermediate_response_options`).

use branch_messages::ResponseFormat;
use serde_json::{Map, Value, json};

use crate::format::{fields_schema, format_title, sorted};

/// The property under which ReAct asks for intermediate deliverables.
pub const INTERMEDIATE_FIELD: &str = "intermediate_response_options";

/// `schema` with `fields` (name → property schema) added as optional
/// properties. `$defs` inside a field's schema move to the top level so
/// their `$ref`s still resolve once the field is nested.
pub(crate) fn add_field_models(mut schema: Value, fields: &Map<String, Value>) -> Value {
    if fields.is_empty() {
        return schema;
    }
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
    for (name, field) in fields {
        let mut field = field.clone();
        hoist_defs(&mut field, &mut defs);
        props.insert(name.clone(), field);
    }
    if !defs.is_empty() {
        o.insert("$defs".into(), Value::Object(defs));
    }
    o.insert("properties".into(), Value::Object(props));
    sorted(schema)
}

fn hoist_defs(v: &mut Value, defs: &mut Map<String, Value>) {
    match v {
        Value::Object(o) => {
            if let Some(Value::Object(inner)) = o.remove("$defs") {
                for (k, mut d) in inner {
                    hoist_defs(&mut d, defs);
                    defs.entry(k).or_insert(d);
                }
            }
            o.values_mut().for_each(|x| hoist_defs(x, defs));
        }
        Value::Array(a) => a.iter_mut().for_each(|x| hoist_defs(x, defs)),
        _ => {}
    }
}

/// The `intermediate_response_options` property: an optional object with
/// one optional field per deliverable, named after the deliverable's title
/// in lower case (a list of them when `listable`).
pub(crate) fn intermediate_field(options: &[ResponseFormat], listable: bool) -> Value {
    let mut props = Map::new();
    for f in options {
        let mut schema = match f {
            ResponseFormat::Schema(s) => s.clone(),
            ResponseFormat::Fields(m) => fields_schema(m),
        };
        let name = format_title(f).to_lowercase();
        if let Some(o) = schema.as_object_mut() {
            o.remove("$schema");
        }
        let item = if listable {
            json!({"type": "array", "items": schema})
        } else {
            schema
        };
        props.insert(
            name,
            json!({"anyOf": [item, {"type": "null"}], "default": null}),
        );
    }
    json!({
        "anyOf": [
            {"properties": props, "title": "IntermediateResponseOptions", "type": "object"},
            {"type": "null"}
        ],
        "default": null
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_models_are_added_with_their_defs_hoisted() {
        let base = json!({"properties": {"a": {"type": "string"}}, "title": "T", "type": "object"});
        let mut fields = Map::new();
        fields.insert(
            "extra".into(),
            json!({"$defs": {"Inner": {"type": "integer"}}, "$ref": "#/$defs/Inner"}),
        );
        let s = add_field_models(base, &fields);
        assert_eq!(s["properties"]["extra"], json!({"$ref": "#/$defs/Inner"}));
        assert_eq!(s["$defs"]["Inner"], json!({"type": "integer"}));
        assert_eq!(s["properties"]["a"], json!({"type": "string"}));
    }

    #[test]
    fn intermediate_options_are_named_by_title_and_listable() {
        let plan = ResponseFormat::Schema(json!({
            "properties": {"steps": {"type": "array"}}, "title": "Plan", "type": "object"}));
        let one = intermediate_field(std::slice::from_ref(&plan), false);
        let inner = &one["anyOf"][0]["properties"]["plan"]["anyOf"][0];
        assert_eq!(inner["title"], "Plan");
        let many = intermediate_field(&[plan], true);
        let inner = &many["anyOf"][0]["properties"]["plan"]["anyOf"][0];
        assert_eq!(inner["type"], "array");
        assert_eq!(inner["items"]["title"], "Plan");
    }
}
