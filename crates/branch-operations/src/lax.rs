//! Lax coercion of a parsed structure's scalars before it is validated, by
//! the rules of pydantic's lax mode, which the reference validates with:
//! what it accepts for a field's type becomes that type; anything else is
//! left for the validator to refuse. Nested models (through `$ref`, `anyOf`
//! branches and list items) are converted alike, as pydantic validates a
//! nested model in the same mode.

use serde_json::{Map, Number, Value};

use crate::model_dump::{items_for_array, model_for_object, resolve};

/// Rewrites each field of `obj` whose value the field's schema does not
/// take as it is, but pydantic's lax mode converts:
/// - to an integer: a whole float (`3.0`), a boolean, a decimal text
///   (surrounding whitespace, a sign, `_` between digits, a zero fraction:
///   `" 2 "`, `"1_000"`, `"1.0"`);
/// - to a number: a boolean, a decimal text (`"1e3"`, `".5"`; not
///   `inf` or `nan`, which JSON cannot hold);
/// - to a boolean: `0` and `1` (`0.0`, `1.0`), and, in any case but
///   without surrounding whitespace, `true`/`false`, `yes`/`no`,
///   `on`/`off`, `t`/`f`, `y`/`n`, `1`/`0`.
pub fn coerce(obj: &mut Map<String, Value>, schema: &Value) {
    coerce_object(obj, schema, schema);
}

fn coerce_object(obj: &mut Map<String, Value>, schema: &Value, root: &Value) {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (k, v) in obj.iter_mut() {
        if let Some(p) = props.get(k) {
            coerce_value(v, p, root);
        }
    }
}

/// `v` under the property schema `p`: a scalar converted, an object meeting
/// a model and a list's items walked into.
fn coerce_value(v: &mut Value, p: &Value, root: &Value) {
    let Some(p) = resolve(p, root) else { return };
    match v {
        Value::Object(o) => {
            if let Some(model) = model_for_object(p, root) {
                coerce_object(o, model, root);
            }
        }
        Value::Array(items) => {
            if let Some(item) = items_for_array(p, root) {
                items.iter_mut().for_each(|x| coerce_value(x, item, root));
            }
        }
        scalar => {
            if let Some(c) = coerced(scalar, &Types(accepted_types(p, root, 0))) {
                *scalar = c;
            }
        }
    }
}

/// The JSON Schema types a property accepts (its `type`, and those of its
/// `anyOf` / `oneOf` branches).
struct Types(Vec<String>);

impl Types {
    fn has(&self, t: &str) -> bool {
        self.0.iter().any(|x| x == t)
    }
}

fn coerced(v: &Value, types: &Types) -> Option<Value> {
    let (integer, number, boolean) = (
        types.has("integer"),
        types.has("number"),
        types.has("boolean"),
    );
    match v {
        Value::String(s) if !types.has("string") => {
            if integer {
                if let Some(i) = integer_text(s) {
                    return Some(i.into());
                }
            }
            if number {
                if let Some(n) = number_text(s) {
                    return Some(Value::Number(n));
                }
            }
            if boolean {
                return bool_text(s).map(Value::Bool);
            }
            None
        }
        // Only a float is rewritten, and only to the integer it equals:
        // a whole integer too large for i64 (an unsigned one, or 1e30)
        // stays as written, which JSON Schema's `integer` accepts, instead
        // of being clamped to i64::MAX.
        Value::Number(n) if integer && !number => n
            .as_f64()
            .filter(|_| n.is_f64())
            .and_then(exact_i64)
            .map(Value::from),
        Value::Number(n) if boolean && !integer && !number => match n.as_f64() {
            Some(0.0) => Some(Value::Bool(false)),
            Some(1.0) => Some(Value::Bool(true)),
            _ => None,
        },
        Value::Bool(b) if !boolean && integer => Some(i64::from(*b).into()),
        Value::Bool(b) if !boolean && number => {
            Number::from_f64(f64::from(u8::from(*b))).map(Value::Number)
        }
        _ => None,
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

/// `s` without the `_` that Python allows between two digits; `None` when
/// an underscore stands anywhere else.
fn without_underscores(s: &str) -> Option<String> {
    let b = s.as_bytes();
    for (i, _) in s.match_indices('_') {
        let digit = |j: Option<usize>| j.and_then(|j| b.get(j)).is_some_and(u8::is_ascii_digit);
        if !digit(i.checked_sub(1)) || !digit(i.checked_add(1)) {
            return None;
        }
    }
    Some(s.replace('_', ""))
}

/// A decimal integer text: optional sign, digits, and optionally a
/// fraction of zeros (`"1.0"`), with whitespace around.
fn integer_text(s: &str) -> Option<i64> {
    let t = s.trim();
    let whole = match t.split_once('.') {
        Some((w, frac)) if !frac.is_empty() && frac.bytes().all(|c| c == b'0') => w,
        Some(_) => return None,
        None => t,
    };
    without_underscores(whole)?.parse().ok()
}

/// A decimal number text, finite, with whitespace around.
fn number_text(s: &str) -> Option<Number> {
    let t = without_underscores(s.trim())?;
    // Rust's float syntax also reads `inf`, `nan` and `infinity`, which
    // JSON has no number for.
    if !t.bytes().any(|c| c.is_ascii_digit()) {
        return None;
    }
    t.parse::<f64>().ok().and_then(Number::from_f64)
}

fn bool_text(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "t" | "y" | "1" => Some(true),
        "false" | "no" | "off" | "f" | "n" | "0" => Some(false),
        _ => None,
    }
}

/// How deep `anyOf` / `oneOf` branches are followed for the types they
/// accept: a schema is the caller's, and one that names itself in its own
/// branches (`A = anyOf[A, null]`) must not recurse without end.
const MAX_BRANCH_DEPTH: usize = 16;

fn accepted_types(p: &Value, root: &Value, depth: usize) -> Vec<String> {
    let mut out = Vec::new();
    let Some(p) = resolve(p, root).filter(|_| depth <= MAX_BRANCH_DEPTH) else {
        return out;
    };
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
                out.extend(accepted_types(b, root, depth + 1));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::format::validate;

    #[test]
    fn nested_models_and_their_lists_are_converted_too() {
        let schema = json!({
            "$defs": {"Plan": {"properties": {
                "priority": {"type": "integer"},
                "done": {"anyOf": [{"type": "boolean"}, {"type": "null"}]}
            }, "type": "object"}},
            "properties": {
                "plan": {"anyOf": [{"$ref": "#/$defs/Plan"}, {"type": "null"}]},
                "plans": {"items": {"$ref": "#/$defs/Plan"}, "type": "array"},
                "counts": {"items": {"type": "integer"}, "type": "array"}
            },
            "type": "object"
        });
        let mut o = match json!({
            "plan": {"priority": "2", "done": "yes"},
            "plans": [{"priority": 3.0}, {"priority": true}],
            "counts": ["1_000", 2.0]
        }) {
            Value::Object(o) => o,
            _ => unreachable!("an object"),
        };
        coerce(&mut o, &schema);
        assert_eq!(
            Value::Object(o),
            json!({
                "plan": {"priority": 2, "done": true},
                "plans": [{"priority": 3}, {"priority": 1}],
                "counts": [1000, 2]
            })
        );
    }

    #[test]
    fn a_schema_that_names_itself_in_its_branches_ends() {
        let schema = json!({
            "$defs": {"A": {"anyOf": [{"$ref": "#/$defs/A"}, {"type": "integer"}]}},
            "properties": {"v": {"$ref": "#/$defs/A"}},
            "type": "object"
        });
        let mut o = Map::new();
        o.insert("v".into(), json!("7"));
        coerce(&mut o, &schema);
        // It ends, and the integer branch is still found.
        assert_eq!(o["v"], json!(7));
    }

    fn one(ty: &str, given: Value) -> Value {
        let schema = json!({"type": "object", "properties": {"v": {"type": ty}}});
        let mut o = Map::new();
        o.insert("v".into(), given);
        coerce(&mut o, &schema);
        o["v"].clone()
    }

    /// The table pydantic 2 (the reference's) gives for these inputs; an
    /// input it refuses stays as it is here, for the validator to refuse.
    #[test]
    fn scalars_convert_as_pydantic_lax_mode_does() {
        let cases = [
            ("boolean", json!(0), json!(false)),
            ("boolean", json!(1), json!(true)),
            ("boolean", json!(2), json!(2)),
            ("boolean", json!(0.0), json!(false)),
            ("boolean", json!(1.0), json!(true)),
            ("boolean", json!(0.5), json!(0.5)),
            ("boolean", json!("on"), json!(true)),
            ("boolean", json!("OFF"), json!(false)),
            ("boolean", json!("t"), json!(true)),
            ("boolean", json!("N"), json!(false)),
            ("boolean", json!("TRUE"), json!(true)),
            ("boolean", json!(" true"), json!(" true")),
            ("boolean", json!("1.0"), json!("1.0")),
            ("integer", json!(true), json!(1)),
            ("integer", json!(" 2 "), json!(2)),
            ("integer", json!("1.0"), json!(1)),
            ("integer", json!("1.5"), json!("1.5")),
            ("integer", json!("1e3"), json!("1e3")),
            ("integer", json!("1_000"), json!(1000)),
            ("integer", json!("1__0"), json!("1__0")),
            ("integer", json!(" +1_0.0 "), json!(10)),
            ("integer", json!("1_0.0_0"), json!("1_0.0_0")),
            ("integer", json!("1."), json!("1.")),
            ("integer", json!("-1.00"), json!(-1)),
            ("integer", json!("_1"), json!("_1")),
            ("integer", json!("+3"), json!(3)),
            ("integer", json!("0x10"), json!("0x10")),
            ("number", json!(true), json!(1.0)),
            ("number", json!(" 2.5 "), json!(2.5)),
            ("number", json!("1e3"), json!(1000.0)),
            ("number", json!("1_000.5"), json!(1000.5)),
            ("number", json!(".5"), json!(0.5)),
            ("number", json!("5."), json!(5.0)),
            ("number", json!("inf"), json!("inf")),
            ("number", json!("nan"), json!("nan")),
            ("string", json!(1), json!(1)),
            ("string", json!(true), json!(true)),
        ];
        for (ty, given, expected) in cases {
            assert_eq!(one(ty, given.clone()), expected, "{ty} from {given}");
        }
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

    /// An optional field (`anyOf` with `null`) converts as its type does.
    #[test]
    fn an_optional_field_converts_too() {
        let schema = json!({"type": "object", "properties": {
            "v": {"anyOf": [{"type": "boolean"}, {"type": "null"}]}}});
        let mut o = json!({"v": "yes"}).as_object().unwrap().clone();
        coerce(&mut o, &schema);
        assert_eq!(o["v"], json!(true));
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
