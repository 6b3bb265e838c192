//! Extra fields in a requested structure: `operate`'s `field_models` and
//! ReAct's intermediate deliverables (`intermediate_response_options`).

use branch_messages::ResponseFormat;
use serde_json::{Map, Value, json};

use crate::format::{fields_schema, format_title, sorted};

/// The property under which ReAct asks for intermediate deliverables.
pub const INTERMEDIATE_FIELD: &str = "intermediate_response_options";

/// The definition name of the deliverables' object.
const INTERMEDIATE_MODEL: &str = "IntermediateResponseOptions";

/// The property the verb fills with its tools' results, which stays last.
const ACTION_RESPONSES: &str = "action_responses";

/// Adds the field `name` (a property schema) to an option's field models,
/// which the `field_model` setters of operate, ReAct and its answer share.
pub(crate) fn add_to(models: &mut Option<Map<String, Value>>, name: String, schema: Value) {
    models.get_or_insert_with(Map::new).insert(name, schema);
}

/// `schema` with `fields` (name → property schema) added, as pydantic adds
/// a model's extra fields: after the fields the model asks of the reply and
/// before the `action_responses` it fills itself, required unless the
/// field's schema has a `default`. `$defs` inside a field's schema move to
/// the top level so their `$ref`s still resolve once the field is nested.
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
    let responses = props.shift_remove_entry(ACTION_RESPONSES);
    let mut required: Vec<Value> = match o.get("required") {
        Some(Value::Array(r)) => r.clone(),
        _ => Vec::new(),
    };
    for (name, field) in fields {
        let mut field = field.clone();
        hoist_defs(&mut field, &mut defs);
        let name_value = Value::String(name.clone());
        let optional = field.get("default").is_some();
        if !optional && !required.contains(&name_value) {
            required.push(name_value);
        } else if optional {
            required.retain(|r| r != &name_value);
        }
        props.insert(name.clone(), field);
    }
    if let Some((k, v)) = responses {
        props.insert(k, v);
    }
    if !defs.is_empty() {
        o.insert("$defs".into(), Value::Object(defs));
    }
    o.insert("properties".into(), Value::Object(props));
    if required.is_empty() {
        o.remove("required");
    } else {
        o.insert("required".into(), Value::Array(required));
    }
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

/// What the reference tells the model the deliverables are for.
const INTERMEDIATE_DESCRIPTION: &str = "Intermediate deliverable outputs. fill as needed ";

/// Refuses deliverables that would share a field (their titles equal but
/// for case) or take the deliverables' own definition name: each
/// deliverable is read back under its own field, and the reference's model
/// builder refuses a field it already has.
pub(crate) fn check_deliverables(options: &[ResponseFormat]) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for f in options {
        let title = format_title(f);
        if title == INTERMEDIATE_MODEL {
            return Err(format!("a deliverable may not be titled {title}"));
        }
        if !seen.insert(title.to_lowercase()) {
            return Err(format!(
                "two deliverables are titled {title} (case aside): each needs a field of its own"
            ));
        }
    }
    Ok(())
}

/// The `intermediate_response_options` property, shaped as the reference's
/// pydantic model writes it: a required object (a list of them when
/// `listable`) defined as `$defs/IntermediateResponseOptions`, with one
/// required, nullable field per deliverable named after the deliverable's
/// title in lower case and referring to the deliverable's own definition.
/// The definitions ride in the property's `$defs`, which
/// [`add_field_models`] hoists to the top.
pub(crate) fn intermediate_field(options: &[ResponseFormat], listable: bool) -> Value {
    let mut defs = Map::new();
    let mut props = Map::new();
    let mut required = Vec::new();
    for f in options {
        let mut schema = match f {
            ResponseFormat::Schema(s) => s.clone(),
            ResponseFormat::Fields(m) => fields_schema(m),
        };
        if let Some(o) = schema.as_object_mut() {
            o.remove("$schema");
        }
        let title = format_title(f);
        let name = title.to_lowercase();
        props.insert(
            name.clone(),
            json!({"anyOf": [{"$ref": def_ref(&title)}, {"type": "null"}]}),
        );
        required.push(Value::String(name));
        defs.insert(title, schema);
    }
    defs.insert(
        INTERMEDIATE_MODEL.into(),
        json!({
            "properties": props,
            "required": required,
            "title": INTERMEDIATE_MODEL,
            "type": "object"
        }),
    );
    let model = json!({"$ref": def_ref(INTERMEDIATE_MODEL)});
    let mut field = if listable {
        json!({
            "description": INTERMEDIATE_DESCRIPTION,
            "items": model,
            "name": INTERMEDIATE_FIELD,
            "title": "Intermediate Response Options",
            "type": "array"
        })
    } else {
        json!({
            "$ref": def_ref(INTERMEDIATE_MODEL),
            "description": INTERMEDIATE_DESCRIPTION,
            "name": INTERMEDIATE_FIELD
        })
    };
    if let Some(o) = field.as_object_mut() {
        o.insert("$defs".into(), Value::Object(defs));
    }
    field
}

/// A JSON pointer to a definition; a title is the caller's text, so `~` and
/// `/` are escaped as RFC 6901 requires.
fn def_ref(name: &str) -> String {
    format!("#/$defs/{}", name.replace('~', "~0").replace('/', "~1"))
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
    fn a_field_model_without_a_default_is_required_and_comes_before_action_responses() {
        let base = json!({
            "properties": {"a": {"type": "string"}, "action_responses": {"type": "array"}},
            "title": "T", "type": "object"});
        let mut fields = Map::new();
        fields.insert("must".into(), json!({"type": "string"}));
        fields.insert("may".into(), json!({"type": "string", "default": "x"}));
        let s = add_field_models(base, &fields);
        let keys: Vec<&String> = s["properties"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["a", "must", "may", "action_responses"]);
        assert_eq!(s["required"], json!(["must"]));
    }

    #[test]
    fn intermediate_options_are_defined_once_and_named_by_title() {
        let plan = ResponseFormat::Schema(json!({
            "$defs": {"Step": {"type": "string"}},
            "properties": {"steps": {"items": {"$ref": "#/$defs/Step"}, "type": "array"}},
            "title": "Plan", "type": "object"}));
        let mut fields = Map::new();
        fields.insert(
            INTERMEDIATE_FIELD.into(),
            intermediate_field(std::slice::from_ref(&plan), false),
        );
        let s = add_field_models(json!({"properties": {}, "type": "object"}), &fields);
        assert_eq!(
            s["properties"][INTERMEDIATE_FIELD]["$ref"],
            "#/$defs/IntermediateResponseOptions"
        );
        assert_eq!(s["required"], json!([INTERMEDIATE_FIELD]));
        let model = &s["$defs"]["IntermediateResponseOptions"];
        assert_eq!(
            model["properties"]["plan"]["anyOf"][0]["$ref"],
            "#/$defs/Plan"
        );
        assert_eq!(model["required"], json!(["plan"]));
        assert_eq!(s["$defs"]["Plan"]["title"], "Plan");
        assert_eq!(s["$defs"]["Step"], json!({"type": "string"}));

        let many = intermediate_field(&[plan], true);
        assert_eq!(many["type"], "array");
        assert_eq!(many["items"]["$ref"], "#/$defs/IntermediateResponseOptions");
        assert_eq!(many["title"], "Intermediate Response Options");
    }

    #[test]
    fn a_title_is_escaped_in_a_definition_pointer() {
        assert_eq!(def_ref("a/b~c"), "#/$defs/a~1b~0c");
    }
}
