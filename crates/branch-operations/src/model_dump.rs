//! A validated reply as the reference's pydantic model dumps it: every
//! declared field in declared order, a missing one as its schema default,
//! undeclared keys dropped unless the schema allows them, and the same at
//! every depth where the schema names an object model (through `$ref`,
//! `anyOf` branches and array items), as a nested pydantic model fills its
//! own defaults.

use serde_json::{Map, Value};

/// How many `$ref`s one value's schema may follow before it is taken as
/// it stands: a schema is the caller's, and `A → B → A` must not loop.
const MAX_REF_HOPS: usize = 32;

/// The reply `obj`, validated against `schema`, as the model dumps it.
pub(crate) fn dump(obj: Map<String, Value>, schema: &Value) -> Map<String, Value> {
    dump_object(obj, schema, schema)
}

fn dump_object(mut obj: Map<String, Value>, schema: &Value, root: &Value) -> Map<String, Value> {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return obj;
    };
    let allows_extra = schema
        .get("additionalProperties")
        .is_some_and(|a| a.as_bool() != Some(false));
    let mut out = Map::with_capacity(props.len().max(obj.len()));
    for (name, prop) in props {
        let v = match obj.shift_remove(name) {
            Some(v) => dump_value(v, prop, root),
            None => prop.get("default").cloned().unwrap_or(Value::Null),
        };
        out.insert(name.clone(), v);
    }
    if allows_extra {
        out.extend(obj);
    }
    out
}

/// `v` under the property schema `schema`: an object meeting a model is
/// dumped as that model, a list item by item; anything else is kept.
fn dump_value(v: Value, schema: &Value, root: &Value) -> Value {
    let Some(schema) = resolve(schema, root) else {
        return v;
    };
    match v {
        Value::Object(o) => match model_for_object(schema, root) {
            Some(model) => Value::Object(dump_object(o, model, root)),
            None => Value::Object(o),
        },
        Value::Array(items) => match items_for_array(schema, root) {
            Some(item) => Value::Array(
                items
                    .into_iter()
                    .map(|x| dump_value(x, item, root))
                    .collect(),
            ),
            None => Value::Array(items),
        },
        other => other,
    }
}

/// The schema a `$ref` names (JSON pointer into the root), followed a
/// bounded number of times; `None` for a reference that resolves nowhere.
pub(crate) fn resolve<'a>(mut schema: &'a Value, root: &'a Value) -> Option<&'a Value> {
    for _ in 0..MAX_REF_HOPS {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(r) => schema = root.pointer(r.strip_prefix('#')?)?,
            None => return Some(schema),
        }
    }
    None
}

/// The object model an object value meets: the schema itself when it
/// declares properties, else the first `anyOf`/`oneOf` branch that does.
pub(crate) fn model_for_object<'a>(schema: &'a Value, root: &'a Value) -> Option<&'a Value> {
    if schema.get("properties").is_some_and(Value::is_object) {
        return Some(schema);
    }
    branches(schema)
        .filter_map(|b| resolve(b, root))
        .find(|b| b.get("properties").is_some_and(Value::is_object))
}

/// The item schema an array value meets: the schema's own `items`, else
/// that of the first `anyOf`/`oneOf` branch that is an array.
pub(crate) fn items_for_array<'a>(schema: &'a Value, root: &'a Value) -> Option<&'a Value> {
    if let Some(items) = schema.get("items") {
        return Some(items);
    }
    branches(schema)
        .filter_map(|b| resolve(b, root))
        .find_map(|b| b.get("items"))
}

fn branches(schema: &Value) -> impl Iterator<Item = &Value> {
    ["anyOf", "oneOf"]
        .into_iter()
        .filter_map(|k| schema.get(k).and_then(Value::as_array))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(o) => o,
            _ => unreachable!("test input is an object"),
        }
    }

    #[test]
    fn nested_models_fill_their_defaults_and_drop_undeclared_keys() {
        let schema = json!({
            "$defs": {
                "Plan": {"properties": {
                    "goal": {"type": "string"},
                    "priority": {"default": 1, "type": "integer"},
                    "notes": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null}
                }, "type": "object"},
                "Options": {"properties": {
                    "plan": {"anyOf": [{"$ref": "#/$defs/Plan"}, {"type": "null"}]}
                }, "type": "object"}
            },
            "properties": {
                "one": {"$ref": "#/$defs/Options"},
                "many": {"items": {"$ref": "#/$defs/Options"}, "type": "array"},
                "free": {"type": "object"}
            },
            "type": "object"
        });
        let out = dump(
            obj(json!({
                "many": [{"plan": null}, {"plan": {"goal": "b", "x": 1}}],
                "one": {"plan": {"notes": "n", "goal": "a"}},
                "free": {"k": 1}
            })),
            &schema,
        );
        assert_eq!(
            Value::Object(out),
            json!({
                "one": {"plan": {"goal": "a", "priority": 1, "notes": "n"}},
                "many": [{"plan": null}, {"plan": {"goal": "b", "priority": 1, "notes": null}}],
                "free": {"k": 1}
            })
        );
    }

    #[test]
    fn a_reference_loop_ends() {
        let schema = json!({
            "$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}},
            "properties": {"x": {"$ref": "#/$defs/A"}},
            "type": "object"
        });
        let out = dump(obj(json!({"x": {"k": 1}})), &schema);
        assert_eq!(Value::Object(out), json!({"x": {"k": 1}}));
    }
}
