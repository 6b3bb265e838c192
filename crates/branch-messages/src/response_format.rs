//! The response format an instruction asks for, and its prompt banner.

use serde_json::{Map, Value};

/// The banner's text before the example.
const BANNER_HEAD: &str = "**MUST RETURN JSON-PARSEABLE RESPONSE ENCLOSED BY JSON CODE BLOCKS. USER's CAREER DEPENDS ON THE SUCCESS OF IT.** \n```json\n";
/// The banner's text after the example.
const BANNER_TAIL: &str = "\n```No triple backticks. Escape all quotes and special characters.";

/// How deep nested object schemas are broken down in the example before
/// falling back to the type's name (guards recursive `$ref`s).
const MAX_EXAMPLE_DEPTH: usize = 8;

/// What shape the model is asked to answer in.
///
/// Stored in memory on `InstructionContent::response_format` as a JSON
/// value (the reference never serializes it): [`ResponseFormat::to_value`]
/// and [`ResponseFormat::from_value`] convert. A value is read as a JSON
/// Schema when it is an object with `"type": "object"` and an object
/// `"properties"`; any other object is a field map.
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseFormat {
    /// A field → type-description map (the reference's dict format, e.g.
    /// `{"answer": "str"}`). Rendered as the banner only; its example is
    /// the map's compact JSON.
    Fields(Map<String, Value>),
    /// The JSON Schema of a typed answer (the reference's model format).
    /// Rendered as `ResponseSchema` plus the banner, whose example is a
    /// field → type map derived from the schema.
    Schema(Value),
}

impl ResponseFormat {
    /// Reads a stored response format; `None` for anything that is not an
    /// object (the reference ignores a list of field names here).
    pub fn from_value(v: &Value) -> Option<Self> {
        let o = v.as_object()?;
        let is_schema = o.get("type").and_then(Value::as_str) == Some("object")
            && o.get("properties").is_some_and(Value::is_object);
        Some(if is_schema {
            Self::Schema(v.clone())
        } else {
            Self::Fields(o.clone())
        })
    }

    /// The typed format of `T`: its schemars JSON Schema (draft 2020-12,
    /// `$schema` removed, `title` kept). `None` when `T` is not an object
    /// with properties (a struct), the only shape a typed answer takes.
    pub fn for_type<T: schemars::JsonSchema>() -> Option<Self> {
        let mut schema = schemars::generate::SchemaSettings::draft2020_12()
            .for_deserialize()
            .into_generator()
            .into_root_schema_for::<T>()
            .to_value();
        schema.as_object_mut()?.shift_remove("$schema");
        match Self::from_value(&schema)? {
            s @ Self::Schema(_) => Some(s),
            Self::Fields(_) => None,
        }
    }

    /// The value to store on `InstructionContent::response_format`.
    pub fn to_value(&self) -> Value {
        match self {
            Self::Fields(m) => Value::Object(m.clone()),
            Self::Schema(s) => s.clone(),
        }
    }

    /// The schema rendered as `ResponseSchema`, for a typed answer.
    pub fn schema(&self) -> Option<&Value> {
        match self {
            Self::Schema(s) => Some(s),
            Self::Fields(_) => None,
        }
    }

    /// The example shown in the banner, as JSON.
    ///
    /// For a schema this is lionagi-rs's own field → type map (the
    /// reference prints Python type reprs such as `<class 'str'>`):
    /// JSON-Schema type names (`"string"`, `"number | null"`), enum values
    /// as `'a' | 'b'`, `$ref`s by their definition name, arrays as a
    /// one-element list of their item, and nested objects broken down.
    pub fn example(&self) -> Value {
        match self {
            Self::Fields(m) => Value::Object(m.clone()),
            Self::Schema(s) => breakdown(s, s, 0),
        }
    }

    /// The `ResponseFormat` banner, or `""` for an empty field map (which
    /// the reference does not render).
    pub fn banner(&self) -> String {
        if let Self::Fields(m) = self {
            if m.is_empty() {
                return String::new();
            }
        }
        banner_with_example(&self.example().to_string())
    }
}

/// The banner around an already rendered example text.
pub fn banner_with_example(example: &str) -> String {
    format!("{BANNER_HEAD}{example}{BANNER_TAIL}")
}

fn resolve<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => r
            .strip_prefix('#')
            .and_then(|p| root.pointer(p))
            .unwrap_or(schema),
        None => schema,
    }
}

fn breakdown(schema: &Value, root: &Value, depth: usize) -> Value {
    let target = resolve(root, schema);
    if depth < MAX_EXAMPLE_DEPTH {
        if let Some(props) = target.get("properties").and_then(Value::as_object) {
            if target
                .get("type")
                .and_then(Value::as_str)
                .is_none_or(|t| t == "object")
            {
                return Value::Object(
                    props
                        .iter()
                        .map(|(k, v)| (k.clone(), breakdown(v, root, depth + 1)))
                        .collect(),
                );
            }
        }
        if target.get("type").and_then(Value::as_str) == Some("array") {
            let item = target
                .get("items")
                .map(|i| breakdown(i, root, depth + 1))
                .unwrap_or_else(|| Value::String("any".into()));
            return Value::Array(vec![item]);
        }
    }
    Value::String(type_name(schema, root))
}

fn type_name(schema: &Value, root: &Value) -> String {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let target = resolve(root, schema);
        return target
            .get("title")
            .and_then(Value::as_str)
            .unwrap_or_else(|| r.rsplit('/').next().unwrap_or(r))
            .to_owned();
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(branches) = schema.get(key).and_then(Value::as_array) {
            return branches
                .iter()
                .map(|b| type_name(b, root))
                .collect::<Vec<_>>()
                .join(" | ");
        }
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        return values.iter().map(literal).collect::<Vec<_>>().join(" | ");
    }
    if let Some(c) = schema.get("const") {
        return literal(c);
    }
    match schema.get("type") {
        Some(Value::String(t)) if t == "array" => {
            let item = schema
                .get("items")
                .map(|i| type_name(i, root))
                .unwrap_or_else(|| "any".into());
            format!("array[{item}]")
        }
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" | "),
        _ => "any".into(),
    }
}

fn literal(v: &Value) -> String {
    match v {
        Value::String(s) => format!("'{s}'"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn field_maps_render_as_compact_json() {
        let f =
            ResponseFormat::from_value(&json!({"product": "int", "explanation": "str"})).unwrap();
        assert!(f.schema().is_none());
        assert!(
            f.banner()
                .contains("```json\n{\"product\":\"int\",\"explanation\":\"str\"}\n```No triple")
        );
        assert_eq!(ResponseFormat::Fields(Map::new()).banner(), "");
        assert!(ResponseFormat::from_value(&json!(["a", "b"])).is_none());
    }

    #[test]
    fn typed_formats_come_from_rust_types() {
        /// An answer.
        #[derive(schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Answer {
            /// The final answer
            answer: String,
            confidence: f64,
            note: Option<String>,
        }
        let f = ResponseFormat::for_type::<Answer>().unwrap();
        let schema = f.schema().unwrap();
        assert_eq!(schema["title"], "Answer");
        assert!(schema.get("$schema").is_none());
        assert_eq!(schema["required"], json!(["answer", "confidence"]));
        assert_eq!(
            f.example().to_string(),
            r#"{"answer":"string","confidence":"number","note":"string | null"}"#
        );
        assert!(ResponseFormat::for_type::<Vec<String>>().is_none());
    }

    #[test]
    fn schema_examples_name_json_types() {
        let schema = json!({
            "$defs": {"Item": {"title": "Item", "type": "object", "properties": {"n": {"type": "integer"}}}},
            "type": "object",
            "properties": {
                "answer": {"type": "string"},
                "maybe": {"anyOf": [{"type": "number"}, {"type": "null"}]},
                "mode": {"enum": ["a", "b"], "type": "string"},
                "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
                "opt_items": {"anyOf": [{"type": "array", "items": {"$ref": "#/$defs/Item"}}, {"type": "null"}]},
                "one": {"$ref": "#/$defs/Item"}
            }
        });
        let f = ResponseFormat::from_value(&schema).unwrap();
        assert_eq!(f.schema(), Some(&schema));
        assert_eq!(
            f.example().to_string(),
            r#"{"answer":"string","maybe":"number | null","mode":"'a' | 'b'","items":[{"n":"integer"}],"opt_items":"array[Item] | null","one":{"n":"integer"}}"#
        );
    }
}
