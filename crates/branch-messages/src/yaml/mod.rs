//! "Minimal YAML": the block-style YAML the reference renders prompts with
//! (PyYAML `safe_dump` semantics: insertion order, no aliases, Unicode kept,
//! indent 2, unlimited width, multi-line strings as literal blocks, empty
//! values pruned recursively). Byte-identical output matters because it is
//! what the model is sent.

mod number;
mod resolve;
mod scalar;

use std::borrow::Cow;

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

/// Whether [`prune`] would change `v` (an empty value somewhere inside).
fn needs_prune(v: &Value) -> bool {
    match v {
        Value::Object(o) => o.values().any(|v| is_empty(v) || needs_prune(v)),
        Value::Array(a) => a.iter().any(|v| is_empty(v) || needs_prune(v)),
        _ => false,
    }
}

/// `v` pruned, copied only when pruning changes it.
fn pruned(v: &Value) -> Cow<'_, Value> {
    if needs_prune(v) {
        Cow::Owned(prune(v))
    } else {
        Cow::Borrowed(v)
    }
}

/// Serializes `value` as minimal YAML after pruning empty values. The text
/// ends with a newline, as PyYAML's does; callers strip it where the
/// reference strips.
pub fn minimal_yaml(value: &Value) -> String {
    let mut e = Emitter::new();
    e.document(&pruned(value));
    e.finish()
}

/// Minimal YAML with surrounding whitespace removed: the form every
/// rendering uses.
pub fn minimal_yaml_stripped(value: &Value) -> String {
    strip(minimal_yaml(value))
}

/// `text` without surrounding whitespace, reusing its buffer.
fn strip(mut text: String) -> String {
    let end = text.trim_end().len();
    text.truncate(end);
    let start = text.len() - text.trim_start().len();
    text.drain(..start);
    text
}

/// One entry of a top-level mapping written by [`mapping_stripped`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Entry<'a> {
    /// A value.
    Value(&'a Value),
    /// A list, given as its items.
    List(&'a [Value]),
}

/// The stripped minimal YAML of the mapping of `entries` (in order),
/// exactly as [`minimal_yaml_stripped`] renders the same mapping built as
/// a value, without building it: empty entries are pruned and an empty
/// mapping renders `""` (not `{}`).
///
/// The keys are labels of our own, each one PyYAML writes plain as a
/// simple key (checked in debug builds): they are written as they are,
/// without the analysis a key from data needs.
pub(crate) fn mapping_stripped(entries: &[(&'static str, Entry<'_>)]) -> String {
    let mut e = Emitter::new();
    let mut written = 0;
    for (k, v) in entries {
        match *v {
            Entry::Value(v) => {
                if is_empty(v) {
                    continue;
                }
                let v = pruned(v);
                if is_empty(&v) {
                    continue;
                }
                e.label(k);
                e.value_after_indicator(&v, 0, true);
            }
            Entry::List(items) => {
                let items: Cow<'_, [Value]> = if items.iter().any(|v| is_empty(v) || needs_prune(v))
                {
                    match prune(&Value::Array(items.to_vec())) {
                        Value::Array(a) => Cow::Owned(a),
                        _ => Cow::Owned(Vec::new()),
                    }
                } else {
                    Cow::Borrowed(items)
                };
                if items.is_empty() {
                    continue;
                }
                e.label(k);
                e.list_after_indicator(&items, 0, true);
            }
        }
        written += 1;
    }
    if written == 0 {
        return String::new();
    }
    // A rendered instruction is kept as history for the conversation's
    // life: without its spare room (most are far shorter than the 128
    // bytes they are written in).
    let mut text = strip(e.finish());
    text.shrink_to_fit();
    text
}

struct Emitter {
    out: String,
    /// PyYAML ends a document whose last scalar is a root plain scalar or a
    /// keep-chomped literal with an explicit `...` marker.
    open_ended: bool,
}

impl Emitter {
    fn new() -> Self {
        Self {
            out: String::with_capacity(128),
            open_ended: false,
        }
    }

    /// The text, with the end marker of an open-ended document.
    fn finish(mut self) -> String {
        if self.open_ended {
            self.out.push_str("...\n");
        }
        self.out
    }

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
            self.entry(i, k, v, indent);
        }
    }

    /// Entry number `i` of a block mapping at `indent`.
    fn entry(&mut self, i: usize, k: &str, v: &Value, indent: usize) {
        let simple = self.entry_key(i, k, indent);
        self.value_after_indicator(v, indent, simple);
    }

    /// A top-level entry's key that is a label of our own, up to its `:`
    /// (the cursor is at the start of a line: every value ends its line).
    fn label(&mut self, k: &'static str) {
        debug_assert!(
            is_simple_key(k) && scalar::choose_style(k, true) == Style::Plain,
            "{k:?} is not a plain simple key"
        );
        self.open_ended = false;
        self.out.push_str(k);
        self.out.push(':');
    }

    /// Writes an entry's key up to its `:`; returns whether it is a simple
    /// key (else the value starts inline like a sequence item's).
    fn entry_key(&mut self, i: usize, k: &str, indent: usize) -> bool {
        if i > 0 || !self.inline_start() {
            self.pad(indent);
        }
        if is_simple_key(k) {
            self.key(k);
            self.out.push(':');
            true
        } else {
            // PyYAML's explicit entry: `? key` then `: value`.
            self.out.push_str("? ");
            self.scalar(&Value::String(k.to_owned()), indent + 2);
            if !self.out.ends_with('\n') {
                self.out.push('\n');
            }
            self.pad(indent);
            self.out.push(':');
            false
        }
    }

    /// A non-empty list after `key:` or `-`.
    fn list_after_indicator(&mut self, a: &[Value], indent: usize, in_mapping: bool) {
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
            Value::Array(a) if !a.is_empty() => self.list_after_indicator(a, indent, in_mapping),
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
        match scalar::choose_style(k, true) {
            Style::Plain => self.out.push_str(k),
            Style::Single => self.out.push_str(&scalar::single_quoted(k)),
            Style::Double | Style::Literal => self.out.push_str(&scalar::double_quoted(k)),
        }
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
                if n.is_i64() || n.is_u64() {
                    use std::fmt::Write as _;
                    let _ = write!(self.out, "{n}");
                } else {
                    self.out.push_str(&yaml_float(n.as_f64().unwrap_or(0.0)));
                }
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
