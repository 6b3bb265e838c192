//! Function schemas generated from argument types, compared with the
//! reference's where the fixtures show one.

use std::sync::Arc;

use branch_actions::{ArgSchema, DynamicTool, FunctionTool, ToolBuildError};
use branch_core::Tool;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// Return the capital city of a country.
#[derive(Deserialize, JsonSchema)]
struct LookupCapital {
    country: String,
}

/// Multiply two integers and return the product.
#[derive(Deserialize, JsonSchema)]
struct Multiply {
    a: i64,
    b: i64,
}

#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct Search {
    /// What to look for.
    query: String,
    /// How many hits at most.
    limit: Option<u32>,
    #[serde(default)]
    exact: bool,
    filters: Vec<Filter>,
}

#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
enum Mode {
    Fast,
    Thorough,
}

#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct Filter {
    field: String,
    mode: Mode,
}

fn lookup_tool() -> FunctionTool {
    FunctionTool::infallible("lookup_capital", |a: LookupCapital| async move {
        if a.country == "France" {
            "Paris".to_owned()
        } else {
            "unknown".to_owned()
        }
    })
    .expect("builds")
}

/// The reference's schema for `lookup_capital` (operate_with_actions), with
/// the `description: null` of undocumented parameters that rendering
/// prunes removed.
#[test]
fn a_string_tool_matches_the_reference_schema() {
    let reference = json!({"type": "function", "function": {
        "name": "lookup_capital",
        "description": "Return the capital city of a country.",
        "parameters": {"type": "object", "properties": {"country": {"type": "string"}}, "required": ["country"]},
        "strict": null}});
    assert_eq!(lookup_tool().schema(), &reference);
}

/// The reference maps `int` to `"number"`; a schemars schema says
/// `"integer"` (with its format), which is what the tool accepts.
#[test]
fn integers_stay_integers() {
    let tool =
        FunctionTool::infallible("multiply", |m: Multiply| async move { m.a * m.b }).unwrap();
    let f = &tool.schema()["function"];
    assert_eq!(f["name"], "multiply");
    assert_eq!(
        f["description"],
        "Multiply two integers and return the product."
    );
    assert_eq!(f["parameters"]["required"], json!(["a", "b"]));
    assert_eq!(f["parameters"]["properties"]["a"]["type"], "integer");
    assert_eq!(f["strict"], Value::Null);
    assert!(f["parameters"].get("$schema").is_none() && f["parameters"].get("title").is_none());
}

/// Unlike the reference (every parameter required), optional and defaulted
/// fields are not required; field docs become descriptions; nested types
/// go to `$defs`.
#[test]
fn optional_defaulted_and_nested_fields() {
    let tool = FunctionTool::infallible("search", |_: Search| async move { 0 }).unwrap();
    let p = &tool.schema()["function"]["parameters"];
    assert_eq!(p["required"], json!(["query", "filters"]));
    assert_eq!(p["properties"]["query"]["description"], "What to look for.");
    assert_eq!(
        p["properties"]["filters"]["items"]["$ref"],
        "#/$defs/Filter"
    );
    assert_eq!(p["$defs"]["Mode"]["enum"], json!(["Fast", "Thorough"]));
    assert_eq!(tool.schema()["function"]["description"], Value::Null);
}

#[test]
fn a_given_description_wins() {
    let tool = lookup_tool().with_description("Capitals.");
    assert_eq!(tool.schema()["function"]["description"], "Capitals.");
}

#[test]
fn the_schema_is_generated_once_per_type() {
    let a = ArgSchema::of::<Multiply>().unwrap();
    let b = ArgSchema::of::<Multiply>().unwrap();
    assert!(Arc::ptr_eq(&a, &b));
}

#[test]
fn bad_names_and_non_object_arguments_are_refused() {
    let bad = FunctionTool::infallible("no spaces", |m: Multiply| async move { m.a });
    assert!(matches!(bad, Err(ToolBuildError::InvalidName(_))));
    let scalar = FunctionTool::infallible("scalar", |n: i64| async move { n });
    assert!(matches!(scalar, Err(ToolBuildError::InvalidSchema(_))));
    let dynamic = DynamicTool::new("d", None, json!({"type": 5}), |v: Value| async move {
        Ok::<_, String>(v)
    });
    assert!(matches!(dynamic, Err(ToolBuildError::InvalidSchema(_))));
}
