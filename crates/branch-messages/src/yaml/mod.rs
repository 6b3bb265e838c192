//! "Minimal YAML": the block-style YAML the reference renders prompts with
//! (PyYAML `safe_dump` semantics: insertion order, no aliases, Unicode kept,
//! indent 2, unlimited width, multi-line strings as literal blocks, empty
//! values pruned recursively). Byte-identical output matters because it is
//! what the model is sent.

mod number;
mod resolve;
mod scalar;

use serde_json::{Map, Value};

use scalar::Style;

pub use number::python_float_repr;

/// Whether a value counts as empty for pruning: null, a blank string, an
/// empty list or object. `0` and `false` are kept.
pub fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.trim().is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// Removes empty values recursively, and containers left empty by that.
pub fn prune(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(_, v)| !is_empty(v))
                .map(|(k, v)| (k.clone(), prune(v)))
                .filter(|(_, v)| !is_empty(v))
                .collect(),
        ),
        Value::Array(a) => Value::Array(
            a.iter()
                .filter(|v| !is_empty(v))
                .map(prune)
                .filter(|v| !is_empty(v))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Serializes `value` as minimal YAML after pruning empty values. The text
/// ends with a newline, as PyYAML's does; callers strip it where the
/// reference strips.
pub fn minimal_yaml(value: &Value) -> String {
    let mut e = Emitter {
        out: String::new(),
        open_ended: false,
    };
    e.document(&prune(value));
    if e.open_ended {
        e.out.push_str("...\n");
    }
    e.out
}

/// Minimal YAML with surrounding whitespace removed: the form every
/// rendering uses.
pub fn minimal_yaml_stripped(value: &Value) -> String {
    minimal_yaml(value).trim().to_owned()
}

struct Emitter {
    out: String,
    /// PyYAML ends a document whose last scalar is a root plain scalar or a
    /// keep-chomped literal with an explicit `...` marker.
    open_ended: bool,
}

impl Emitter {
    fn document(&mut self, v: &Value) {
        match v {
            Value::Object(o) if !o.is_empty() => self.mapping(o, 0),
            Value::Array(a) if !a.is_empty() => self.sequence(a, 0),
            Value::Object(_) => self.out.push_str("{}\n"),
            Value::Array(_) => self.out.push_str("[]\n"),
            scalar => {
                let plain = self.scalar(scalar, 2);
                if !self.out.ends_with('\n') {
                    self.out.push('\n');
                }
                if plain {
                    self.open_ended = true;
                }
            }
        }
    }

    /// A block mapping whose keys sit at `indent`. The caller has already
    /// positioned the cursor for the first key (after `- ` or at a fresh
    /// line with the indentation written by us).
    fn mapping(&mut self, o: &Map<String, Value>, indent: usize) {
        for (i, (k, v)) in o.iter().enumerate() {
            if i > 0 || !self.inline_start() {
                self.pad(indent);
            }
            if is_simple_key(k) {
                self.key(k);
                self.out.push(':');
                self.value_after_indicator(v, indent, true);
            } else {
                // PyYAML's explicit entry: `? key` then `: value`, the
                // value starting inline like a sequence item's.
                self.out.push_str("? ");
                self.scalar(&Value::String(k.clone()), indent + 2);
                if !self.out.ends_with('\n') {
                    self.out.push('\n');
                }
                self.pad(indent);
                self.out.push(':');
                self.value_after_indicator(v, indent, false);
            }
        }
    }

    /// A block sequence whose dashes sit at `indent`.
    fn sequence(&mut self, a: &[Value], indent: usize) {
        for (i, v) in a.iter().enumerate() {
            if i > 0 || !self.inline_start() {
                self.pad(indent);
            }
            self.out.push('-');
            self.value_after_indicator(v, indent, false);
        }
    }

    /// Writes a node that follows `key:` (in a mapping at `indent`) or `-`
    /// (in a sequence at `indent`).
    fn value_after_indicator(&mut self, v: &Value, indent: usize, in_mapping: bool) {
        match v {
            Value::Object(o) if !o.is_empty() => {
                if in_mapping {
                    self.out.push('\n');
                } else {
                    self.out.push(' ');
                }
                self.mapping(o, indent + 2);
            }
            Value::Array(a) if !a.is_empty() => {
                if in_mapping {
                    // Sequences inside mappings are not indented (PyYAML's
                    // indentless sequences).
                    self.out.push('\n');
                    self.sequence(a, indent);
                } else {
                    self.out.push(' ');
                    self.sequence(a, indent + 2);
                }
            }
            Value::Object(_) => {
                self.out.push_str(" {}\n");
                self.open_ended = false;
            }
            Value::Array(_) => {
                self.out.push_str(" []\n");
                self.open_ended = false;
            }
            scalar => {
                self.out.push(' ');
                self.scalar(scalar, indent + 2);
                if !self.out.ends_with('\n') {
                    self.out.push('\n');
                }
            }
        }
    }

    /// Whether the cursor sits right after `- ` or an explicit entry's
    /// `: ` (so the next node starts inline instead of on a fresh line).
    /// Scalars always end their line, so only an indicator can precede.
    fn inline_start(&self) -> bool {
        self.out.ends_with("- ") || self.out.ends_with(": ")
    }

    fn pad(&mut self, indent: usize) {
        for _ in 0..indent {
            self.out.push(' ');
        }
    }

    fn key(&mut self, k: &str) {
        self.open_ended = false;
        let text = match scalar::choose_style(k, true) {
            Style::Plain => k.to_owned(),
            Style::Single => scalar::single_quoted(k),
            Style::Double | Style::Literal => scalar::double_quoted(k),
        };
        self.out.push_str(&text);
    }

    /// Writes a scalar; a literal block's body is indented to `indent`.
    /// Returns whether it was written plain.
    fn scalar(&mut self, v: &Value, indent: usize) -> bool {
        self.open_ended = false;
        match v {
            Value::Null => {
                self.out.push_str("null");
                true
            }
            Value::Bool(b) => {
                self.out.push_str(if *b { "true" } else { "false" });
                true
            }
            Value::Number(n) => {
                let text = if n.is_i64() || n.is_u64() {
                    n.to_string()
                } else {
                    yaml_float(n.as_f64().unwrap_or(0.0))
                };
                self.out.push_str(&text);
                true
            }
            Value::String(s) => match scalar::choose_style(s, false) {
                Style::Plain => {
                    self.out.push_str(s);
                    true
                }
                Style::Single => {
                    self.out.push_str(&scalar::single_quoted(s));
                    false
                }
                Style::Double => {
                    self.out.push_str(&scalar::double_quoted(s));
                    false
                }
                Style::Literal => {
                    let header = scalar::literal_header(s, 2);
                    self.out.push_str(&header);
                    self.out.push('\n');
                    scalar::literal_body(s, indent, &mut self.out);
                    self.open_ended = scalar::literal_keeps(&header);
                    false
                }
            },
            // Containers are handled by the callers.
            Value::Array(_) | Value::Object(_) => false,
        }
    }
}

/// Whether PyYAML writes `k` as a simple `key: value` entry: shorter than
/// 128 characters, not empty, without line breaks.
fn is_simple_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars().count() < 128
        && !k
            .chars()
            .any(|c| matches!(c, '\n' | '\u{85}' | '\u{2028}' | '\u{2029}'))
}

/// A float as PyYAML represents it: Python's `repr`, lower-cased, with
/// `.0` inserted into an exponent form that has no point (`1.0e-05`).
fn yaml_float(f: f64) -> String {
    if f.is_nan() {
        return ".nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            ".inf".into()
        } else {
            "-.inf".into()
        };
    }
    let r = python_float_repr(f).to_lowercase();
    if !r.contains('.') && r.contains('e') {
        r.replacen('e', ".0e", 1)
    } else {
        r
    }
}

#[cfg(test)]
mod tests;
