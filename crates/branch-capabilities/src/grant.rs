//! A capability grant: the ordered, uniquely named fields an assistant may
//! emit as fenced JSON, with a JSON schema each (the reference's
//! `Operable` of `Spec`s).

use jsonschema::Validator;
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use crate::error::CapabilityError;

/// One capability: a top-level key of an emitted block and the schema its
/// value must satisfy.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldSpec {
    pub(crate) name: String,
    pub(crate) schema: Value,
    pub(crate) description: Option<String>,
    pub(crate) defs: Map<String, Value>,
}

impl FieldSpec {
    /// A field whose value must satisfy `schema` (a JSON Schema; `$ref`s
    /// point into `#/$defs/...`, supplied with [`FieldSpec::with_defs`]).
    pub fn new(name: impl Into<String>, schema: Value) -> Self {
        Self {
            name: name.into(),
            schema,
            description: None,
            defs: Map::new(),
        }
    }

    /// A string field (Python `str`).
    pub fn string(name: impl Into<String>) -> Self {
        Self::new(name, json!({"type": "string"}))
    }

    /// An integer field (Python `int`).
    pub fn integer(name: impl Into<String>) -> Self {
        Self::new(name, json!({"type": "integer"}))
    }

    /// A number field (Python `float`).
    pub fn number(name: impl Into<String>) -> Self {
        Self::new(name, json!({"type": "number"}))
    }

    /// A boolean field (Python `bool`).
    pub fn boolean(name: impl Into<String>) -> Self {
        Self::new(name, json!({"type": "boolean"}))
    }

    /// A list field whose items satisfy `items` (Python `list[...]`).
    pub fn array(name: impl Into<String>, items: Value) -> Self {
        Self::new(name, json!({"items": items, "type": "array"}))
    }

    /// A field typed by a Rust type through its `schemars` schema. A
    /// struct or enum becomes a `$ref` to a `$defs` entry named by its
    /// title, as a Pydantic model field does; a primitive is used inline.
    pub fn of<T: JsonSchema>(name: impl Into<String>) -> Self {
        let (mut root, mut defs) = root_schema::<T>();
        let is_definition = root.get("properties").is_some()
            || root.get("oneOf").is_some()
            || root.get("enum").is_some()
            || root.get("anyOf").is_some();
        let schema = match root.get("title").and_then(Value::as_str).map(str::to_owned) {
            Some(title) if is_definition => {
                titled_properties(&mut root);
                defs.insert(title.clone(), Value::Object(root));
                json!({"$ref": format!("#/$defs/{title}")})
            }
            _ => {
                root.remove("title");
                Value::Object(root)
            }
        };
        Self {
            name: name.into(),
            schema,
            description: None,
            defs,
        }
    }

    /// Sets the description shown to the model.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Adds `$defs` entries the schema refers to.
    pub fn with_defs(mut self, defs: Map<String, Value>) -> Self {
        self.defs.extend(defs);
        self
    }

    /// The key.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The value's schema.
    pub fn schema(&self) -> &Value {
        &self.schema
    }
}

/// The root schema of `T` without `$schema`, and its `$defs` taken out.
fn root_schema<T: JsonSchema>() -> (Map<String, Value>, Map<String, Value>) {
    let schema = SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<T>();
    let mut root = match schema.to_value() {
        Value::Object(m) => m,
        // `true` / `false` schemas: anything / nothing.
        Value::Bool(true) => Map::new(),
        other => {
            let mut m = Map::new();
            m.insert("not".into(), json!({}));
            m.insert("x-schema".into(), other);
            m
        }
    };
    root.remove("$schema");
    let mut defs = match root.remove("$defs") {
        Some(Value::Object(d)) => d,
        _ => Map::new(),
    };
    for def in defs.values_mut() {
        if let Value::Object(d) = def {
            titled_properties(d);
        }
    }
    (root, defs)
}

/// Gives every property of an object schema a Pydantic-style title, so a
/// definition from `schemars` renders like a Pydantic model's.
fn titled_properties(schema: &mut Map<String, Value>) {
    if let Some(Value::Object(props)) = schema.get_mut("properties") {
        for (name, prop) in props.iter_mut() {
            if let Value::Object(p) = prop {
                if !p.contains_key("$ref") && !p.contains_key("title") {
                    p.insert("title".into(), Value::String(field_title(name)));
                }
            }
        }
    }
}

/// Pydantic's default field title: underscores to spaces, then Python's
/// `str.title()` (a letter is upper-cased after a non-letter).
pub(crate) fn field_title(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut prev_letter = false;
    for c in name.chars().map(|c| if c == '_' { ' ' } else { c }) {
        if c.is_alphabetic() {
            if prev_letter {
                out.extend(c.to_lowercase());
            } else {
                out.extend(c.to_uppercase());
            }
            prev_letter = true;
        } else {
            out.push(c);
            prev_letter = false;
        }
    }
    out
}

/// A capability grant. Build it with [`Grant::new`], [`Grant::builder`] or
/// [`Grant::from_type`]; it is immutable afterwards and cheap to share.
pub struct Grant {
    name: Option<String>,
    fields: Vec<FieldSpec>,
    defs: Map<String, Value>,
    validators: Vec<Validator>,
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grant")
            .field("name", &self.name)
            .field(
                "fields",
                &self.fields.iter().map(|s| &s.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Grant {
    /// A grant of `fields`, in order. Names must be non-empty and unique,
    /// every schema must compile, and `$defs` entries of the same name
    /// must agree.
    pub fn new(name: Option<String>, fields: Vec<FieldSpec>) -> Result<Self, CapabilityError> {
        let mut defs = Map::new();
        for (index, f) in fields.iter().enumerate() {
            if f.name.is_empty() {
                return Err(CapabilityError::EmptyFieldName { index });
            }
            if fields[..index].iter().any(|g| g.name == f.name) {
                return Err(CapabilityError::DuplicateField {
                    name: f.name.clone(),
                });
            }
            for (k, v) in &f.defs {
                match defs.get(k) {
                    Some(existing) if existing != v => {
                        return Err(CapabilityError::ConflictingDefinition { name: k.clone() });
                    }
                    Some(_) => {}
                    None => {
                        defs.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        let validators = fields
            .iter()
            .map(|f| {
                let mut schema = match &f.schema {
                    Value::Object(m) => m.clone(),
                    Value::Bool(b) => {
                        let mut m = Map::new();
                        if !b {
                            m.insert("not".into(), json!({}));
                        }
                        m
                    }
                    other => {
                        return Err(CapabilityError::InvalidSchema {
                            field: f.name.clone(),
                            message: format!(
                                "a schema must be an object or a boolean, not {other}"
                            ),
                        });
                    }
                };
                if !defs.is_empty() {
                    schema.insert("$defs".into(), Value::Object(defs.clone()));
                }
                jsonschema::validator_for(&Value::Object(schema)).map_err(|e| {
                    CapabilityError::InvalidSchema {
                        field: f.name.clone(),
                        message: e.to_string(),
                    }
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            name,
            fields,
            defs,
            validators,
        })
    }

    /// A builder.
    pub fn builder() -> GrantBuilder {
        GrantBuilder::default()
    }

    /// A grant whose fields are the properties of `T` (a struct deriving
    /// `JsonSchema`), named by `T`'s schema title. Doc comments become the
    /// fields' descriptions.
    pub fn from_type<T: JsonSchema>() -> Result<Self, CapabilityError> {
        let (mut root, defs) = root_schema::<T>();
        let name = root.get("title").and_then(Value::as_str).map(str::to_owned);
        let props = match root.remove("properties") {
            Some(Value::Object(p)) => p,
            _ => Map::new(),
        };
        let fields = props
            .into_iter()
            .map(|(key, schema)| {
                let mut schema = schema;
                let description = schema
                    .as_object_mut()
                    .and_then(|m| m.remove("description"))
                    .and_then(|d| d.as_str().map(str::to_owned));
                let mut f = FieldSpec::new(key, schema).with_defs(defs.clone());
                f.description = description;
                f
            })
            .collect();
        Self::new(name, fields)
    }

    /// The grant's name.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The name of the model bundles are reported as (`"Capabilities"`
    /// for an unnamed grant).
    pub fn model_name(&self) -> &str {
        self.name.as_deref().unwrap_or("Capabilities")
    }

    /// The fields, in order.
    pub fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }

    /// The granted keys, sorted.
    pub fn allowed(&self) -> Vec<String> {
        let mut names: Vec<String> = self.fields.iter().map(|f| f.name.clone()).collect();
        names.sort();
        names
    }

    /// The position of the field named `key`.
    pub(crate) fn index_of(&self, key: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == key)
    }

    pub(crate) fn validator(&self, index: usize) -> &Validator {
        &self.validators[index]
    }

    pub(crate) fn defs(&self) -> &Map<String, Value> {
        &self.defs
    }
}

/// Builds a [`Grant`].
#[derive(Debug, Default)]
pub struct GrantBuilder {
    name: Option<String>,
    fields: Vec<FieldSpec>,
}

impl GrantBuilder {
    /// Names the grant (the emitter role of its structured outputs).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Adds a field.
    pub fn field(mut self, field: FieldSpec) -> Self {
        self.fields.push(field);
        self
    }

    /// Checks and builds the grant.
    pub fn build(self) -> Result<Grant, CapabilityError> {
        Grant::new(self.name, self.fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_follow_python_title_case() {
        assert_eq!(field_title("note"), "Note");
        assert_eq!(field_title("action_required"), "Action Required");
        assert_eq!(field_title("todo2x"), "Todo2X");
        assert_eq!(field_title("camelCase"), "Camelcase");
    }

    #[test]
    fn bad_grants_are_typed_errors() {
        let dup = Grant::builder()
            .field(FieldSpec::string("a"))
            .field(FieldSpec::integer("a"))
            .build();
        assert_eq!(
            dup.unwrap_err(),
            CapabilityError::DuplicateField { name: "a".into() }
        );
        let empty = Grant::builder().field(FieldSpec::string("")).build();
        assert_eq!(
            empty.unwrap_err(),
            CapabilityError::EmptyFieldName { index: 0 }
        );
        let bad = Grant::builder()
            .field(FieldSpec::new("x", json!({"type": 12})))
            .build();
        assert!(
            matches!(bad.unwrap_err(), CapabilityError::InvalidSchema { field, .. } if field == "x")
        );
        let not_schema = Grant::builder()
            .field(FieldSpec::new("x", json!("str")))
            .build();
        assert!(matches!(
            not_schema.unwrap_err(),
            CapabilityError::InvalidSchema { .. }
        ));
    }
}
