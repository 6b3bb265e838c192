//! Argument schemas: generated once per argument type with schemars,
//! compiled once into a jsonschema validator, and used to check arguments
//! before they are decoded.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use branch_core::ToolError;
use jsonschema::ValidationError;
use jsonschema::error::ValidationErrorKind;
use jsonschema::paths::LocationSegment;
use schemars::JsonSchema;
use serde_json::{Map, Value};

use crate::error::ToolBuildError;
use crate::limits::QUOTED_VALUE_BYTES;

/// A tool's parameter schema with its compiled validator.
pub struct ArgSchema {
    parameters: Value,
    description: Option<String>,
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for ArgSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArgSchema")
            .field("parameters", &self.parameters)
            .finish_non_exhaustive()
    }
}

impl ArgSchema {
    /// Compiles a raw JSON Schema (a dynamic tool's `parameters`). It must
    /// be an object schema.
    pub fn from_value(parameters: Value) -> Result<Self, ToolBuildError> {
        if !parameters.is_object() {
            return Err(ToolBuildError::InvalidSchema(
                "the parameters schema must be a JSON object".into(),
            ));
        }
        let validator = jsonschema::validator_for(&parameters)
            .map_err(|e| ToolBuildError::InvalidSchema(e.to_string()))?;
        Ok(Self {
            parameters,
            description: None,
            validator,
        })
    }

    /// The schema of `A`, generated and compiled on first use and shared
    /// by every tool taking `A` afterwards.
    pub fn of<A: JsonSchema + 'static>() -> Result<Arc<Self>, ToolBuildError> {
        static CACHE: OnceLock<Mutex<HashMap<TypeId, Arc<ArgSchema>>>> = OnceLock::new();
        let cache = CACHE.get_or_init(Default::default);
        let id = TypeId::of::<A>();
        if let Some(hit) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&id) {
            return Ok(hit.clone());
        }
        // Generated outside the lock: schema generation may be slow and a
        // racing thread at worst builds an identical schema once more.
        let built = Arc::new(Self::generate::<A>()?);
        let mut guard = cache.lock().unwrap_or_else(|e| e.into_inner());
        Ok(guard.entry(id).or_insert(built).clone())
    }

    fn generate<A: JsonSchema>() -> Result<Self, ToolBuildError> {
        let schema = schemars::generate::SchemaSettings::draft2020_12()
            .for_deserialize()
            .into_generator()
            .into_root_schema_for::<A>();
        let mut value = schema.to_value();
        let obj = value
            .as_object_mut()
            .filter(|o| o.get("type").and_then(Value::as_str) == Some("object"))
            .ok_or_else(|| {
                ToolBuildError::InvalidSchema(format!(
                    "the arguments of a tool must be a struct (a JSON object), `{}` is not",
                    A::schema_name()
                ))
            })?;
        // The meta-schema URI and the Rust type's name are noise in a
        // prompt; the type's doc comment becomes the tool description.
        obj.shift_remove("$schema");
        obj.shift_remove("title");
        let description = match obj.shift_remove("description") {
            Some(Value::String(d)) => Some(d),
            _ => None,
        };
        let mut s = Self::from_value(value)?;
        s.description = description;
        Ok(s)
    }

    /// The JSON Schema of the arguments (the function schema's
    /// `parameters`).
    pub fn parameters(&self) -> &Value {
        &self.parameters
    }

    /// The argument type's doc comment, when it has one.
    pub fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }

    /// Checks arguments against the schema. The first error names the
    /// offending field as a path (`$.items[0].name`; `$` is the arguments
    /// object itself).
    pub fn validate(&self, arguments: &Value) -> Result<(), ToolError> {
        let Some(first) = self.validator.iter_errors(arguments).next() else {
            return Ok(());
        };
        let err = explaining(&first);
        let mut path = String::from("$");
        for seg in err.instance_path().iter() {
            match seg {
                LocationSegment::Index(i) => path.push_str(&format!("[{i}]")),
                LocationSegment::Property(p) => push_property(&mut path, &p),
            }
        }
        if let ValidationErrorKind::Required {
            property: Value::String(p),
        } = err.kind()
        {
            push_property(&mut path, p);
        }
        let reason = if longer_than(err.instance(), QUOTED_VALUE_BYTES) {
            err.masked_with("the value").to_string()
        } else {
            err.to_string()
        };
        Err(ToolError::InvalidArguments { path, reason })
    }
}

/// Whether `v`'s JSON text is longer than `max` bytes, found without
/// writing more than that.
fn longer_than(v: &Value, max: usize) -> bool {
    struct Budget(usize);
    impl std::fmt::Write for Budget {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0 = self.0.checked_sub(s.len()).ok_or(std::fmt::Error)?;
            Ok(())
        }
    }
    std::fmt::write(&mut Budget(max), format_args!("{v}")).is_err()
}

/// Most `anyOf` / `oneOf` levels a report descends: schemas nest them
/// (an `Option` inside an `Option`), but never this deep in practice.
const MAX_ALTERNATIVE_DEPTH: usize = 16;

/// The error that says what is wrong with a value no alternative of an
/// `anyOf` / `oneOf` accepts: the alternative that got furthest, where one
/// did. pydantic writes an optional field as `anyOf: [T, null]` (so MCP
/// servers' and connected models' schemas read), so `-1` for an optional
/// non-negative integer fails both; of those the `null` alternative's
/// failure is only a type mismatch, while `T`'s says "less than the minimum
/// of 0", which is what a model can correct. An alternative got further when its
/// first error lies deeper in the value, or at the same place is not a type
/// mismatch. When every alternative fails on the value's type alone, the
/// combinator's own error stands.
fn explaining<'e, 'a>(err: &'e ValidationError<'a>) -> &'e ValidationError<'a> {
    let mut err = err;
    for _ in 0..MAX_ALTERNATIVE_DEPTH {
        let (ValidationErrorKind::AnyOf { context }
        | ValidationErrorKind::OneOfNotValid { context }) = err.kind()
        else {
            break;
        };
        let depth = |e: &ValidationError<'_>| e.instance_path().iter().count();
        let reach = |e: &ValidationError<'_>| {
            let mismatch = matches!(e.kind(), ValidationErrorKind::Type { .. });
            (depth(e), !mismatch)
        };
        let here = (depth(err), false);
        // The first alternative of the furthest reach: `max_by_key` would
        // take the last.
        let mut best: Option<&'e ValidationError<'a>> = None;
        for e in context.iter().filter_map(|alternative| alternative.first()) {
            if best.is_none_or(|b| reach(e) > reach(b)) {
                best = Some(e);
            }
        }
        match best {
            Some(b) if reach(b) > here => err = b,
            _ => break,
        }
    }
    err
}

fn push_property(path: &mut String, p: &str) {
    let simple = !p.is_empty()
        && p.chars().all(|c| c.is_alphanumeric() || c == '_')
        && !p.starts_with(|c: char| c.is_ascii_digit());
    if simple {
        path.push('.');
        path.push_str(p);
    } else {
        path.push_str(&format!("[{}]", Value::String(p.to_owned())));
    }
}

/// The OpenAI function schema:
/// `{"type": "function", "function": {"name", "description", "parameters", "strict": null}}`.
pub fn function_schema(name: &str, description: Option<&str>, parameters: &Value) -> Value {
    let mut f = Map::new();
    f.insert("name".into(), name.into());
    f.insert(
        "description".into(),
        description.map_or(Value::Null, Value::from),
    );
    f.insert("parameters".into(), parameters.clone());
    f.insert("strict".into(), Value::Null);
    let mut o = Map::new();
    o.insert("type".into(), "function".into());
    o.insert("function".into(), Value::Object(f));
    Value::Object(o)
}
