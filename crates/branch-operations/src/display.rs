//! How ReAct shows a round's result when `verbose` is on: YAML-like (the
//! reference's default) or pretty JSON, cut to `verbose_length` chars.

use serde_json::Value;

/// How a verbose round is rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DisplayAs {
    /// Indented `key: value` lines.
    #[default]
    Yaml,
    /// Pretty-printed JSON.
    Json,
}

impl std::str::FromStr for DisplayAs {
    type Err = crate::error::OperationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "yaml" => Ok(Self::Yaml),
            "json" => Ok(Self::Json),
            other => Err(crate::error::OperationError::InvalidArgument {
                what: "display_as",
                message: format!("expected \"yaml\" or \"json\", got {other:?}"),
            }),
        }
    }
}

/// `v` rendered as `how`, cut to `max` characters (an ellipsis marks a cut).
pub(crate) fn render(v: &Value, how: DisplayAs, max: Option<usize>) -> String {
    let full = match how {
        DisplayAs::Json => serde_json::to_string_pretty(v).unwrap_or_default(),
        DisplayAs::Yaml => {
            let mut out = String::new();
            yaml(v, 0, &mut out);
            out.trim_end().to_owned()
        }
    };
    match max {
        Some(n) if full.chars().count() > n => {
            let mut cut: String = full.chars().take(n).collect();
            cut.push('…');
            cut
        }
        _ => full,
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) if s.contains('\n') => {
            format!(
                "|\n{}",
                s.lines()
                    .map(|l| format!("  {l}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        }
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn yaml(v: &Value, indent: usize, out: &mut String) {
    let pad = "  ".repeat(indent);
    match v {
        Value::Object(o) if !o.is_empty() => {
            for (k, x) in o {
                match x {
                    Value::Object(m) if !m.is_empty() => {
                        out.push_str(&format!("{pad}{k}:\n"));
                        yaml(x, indent + 1, out);
                    }
                    Value::Array(a) if !a.is_empty() => {
                        out.push_str(&format!("{pad}{k}:\n"));
                        yaml(x, indent + 1, out);
                    }
                    _ => out.push_str(&format!("{pad}{k}: {}\n", scalar(x))),
                }
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for x in a {
                match x {
                    Value::Object(m) if !m.is_empty() => {
                        let mut inner = String::new();
                        yaml(x, indent + 1, &mut inner);
                        // The first key sits on the dash line.
                        let body = inner.trim_start();
                        out.push_str(&format!("{pad}- {body}"));
                    }
                    Value::Array(b) if !b.is_empty() => {
                        out.push_str(&format!("{pad}-\n"));
                        yaml(x, indent + 1, out);
                    }
                    _ => out.push_str(&format!("{pad}- {}\n", scalar(x))),
                }
            }
        }
        other => out.push_str(&format!("{pad}{}\n", scalar(other))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn yaml_json_and_truncation() {
        let v = json!({"analysis": "ok", "reason": {"title": "t", "confidence_score": 0.5},
            "action_requests": [{"function": "f", "arguments": {"a": 1}}], "extension_needed": false});
        let y = render(&v, DisplayAs::Yaml, None);
        assert_eq!(
            y,
            "analysis: ok\nreason:\n  title: t\n  confidence_score: 0.5\naction_requests:\n  - function: f\n    arguments:\n      a: 1\nextension_needed: false"
        );
        let j = render(&v, DisplayAs::Json, None);
        assert_eq!(serde_json::from_str::<Value>(&j).unwrap(), v);
        assert_eq!(render(&v, DisplayAs::Yaml, Some(8)), "analysis…");
        assert!("xml".parse::<DisplayAs>().is_err());
        assert_eq!("json".parse::<DisplayAs>().unwrap(), DisplayAs::Json);
    }
}
