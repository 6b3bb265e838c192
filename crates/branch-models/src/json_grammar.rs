//! JSON restricted by a JSON schema, recognised one byte at a time: the
//! grammar behind the embedded model's constrained decoding of
//! `response_format` (a model that may only emit tokens that keep its
//! output a prefix of a valid document always ends with one).
//!
//! The schema subset is the one `schemars` and OpenAI's structured outputs
//! use: `type` (one or a list), `properties` (every property is emitted,
//! in declaration order), `items`, `enum`, `const`, `anyOf` / `oneOf`,
//! a one-element `allOf`, and `$ref` into `$defs` / `definitions` (also
//! recursive). Keywords that only narrow values (`format`, `minimum`,
//! `pattern`, ...) are not enforced; a schema without a recognised keyword
//! admits any JSON value. Output is compact (no whitespace between tokens)
//! and numbers are bounded (16 digits before and after the point, 3 in
//! the exponent), as are the keys of schema-less objects (64 characters),
//! so a model cannot spin on one digit forever; `maxLength` bounds a
//! string.
//!
//! ```
//! use branch_models::json_grammar::Grammar;
//! use serde_json::json;
//!
//! let g = Grammar::compile(&json!({
//!     "type": "object",
//!     "properties": {"city": {"type": "string"}, "rank": {"type": "integer"}}
//! }))?;
//! let mut state = g.start();
//! assert!(state.feed(&g, br#"{"city":"Paris","rank":1"#));
//! assert!(!state.can_end());
//! assert!(state.feed(&g, b"}"));
//! assert!(state.is_complete());
//! assert!(!g.start().accepts(&g, br#"{"town""#));
//! # Ok::<(), branch_models::json_grammar::SchemaError>(())
//! ```

use std::collections::HashMap;

use serde_json::Value;

/// Nesting allowed inside a schema-less ("any") value.
const ANY_DEPTH: u8 = 16;

/// A schema the grammar cannot be built from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("response schema at `{path}`: {reason}")]
pub struct SchemaError {
    /// JSON pointer of the offending keyword.
    pub path: String,
    /// What is wrong there.
    pub reason: String,
}

type NodeId = u32;

#[derive(Debug, Clone)]
enum Node {
    /// Any JSON value.
    Any,
    /// A string of at most this many characters (`maxLength`).
    String { max_chars: Option<u32> },
    /// A number (`integer`: no fraction or exponent).
    Number { integer: bool },
    /// One of these exact JSON texts (`enum`, `const`, booleans, null).
    Literals(Vec<Vec<u8>>),
    /// An object with these properties, all emitted in this order; each
    /// key is stored as its JSON text followed by `:`.
    Object(Vec<(Vec<u8>, NodeId)>),
    /// An array of these items.
    Array(NodeId),
    /// A value of any of these.
    Union(Vec<NodeId>),
    /// Any object (`{"type": "object"}` without properties).
    FreeObject,
}

/// A compiled grammar.
#[derive(Debug, Clone)]
pub struct Grammar {
    nodes: Vec<Node>,
    root: NodeId,
    /// `true`, `false`, `null` for schema-less values.
    scalars: NodeId,
    /// A plain number for schema-less values.
    number: NodeId,
}

/// Longest key of a schema-less object: keys are names, and a small
/// model left free in a key can spin until its budget runs out.
const MAX_FREE_KEY_CHARS: u32 = 64;

/// A string frame just after the opening quote.
fn string(left: u32) -> Frame {
    Frame::Str {
        phase: StrPhase::Chars,
        left,
    }
}

/// Union expansions followed before a byte is consumed: a bound against
/// schemas whose references lead back to themselves without any text.
const UNION_DEPTH: u8 = 32;

/// Where a string is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StrPhase {
    Chars,
    Escape,
    Hex(u8),
    /// Inside a multi-byte UTF-8 character: `left` continuation bytes to
    /// come, the next one within `lo..=hi` (tighter than 0x80..=0xBF
    /// after the leads that could spell an overlong form or a surrogate).
    Utf8 {
        left: u8,
        lo: u8,
        hi: u8,
    },
}

/// The UTF-8 character a lead byte opens: continuation bytes to come and
/// the range of the first one; `None` for a byte that cannot start one.
fn utf8_lead(b: u8) -> Option<StrPhase> {
    let (left, lo, hi) = match b {
        0xC2..=0xDF => (1, 0x80, 0xBF),
        0xE0 => (2, 0xA0, 0xBF),
        0xE1..=0xEC | 0xEE..=0xEF => (2, 0x80, 0xBF),
        0xED => (2, 0x80, 0x9F),
        0xF0 => (3, 0x90, 0xBF),
        0xF1..=0xF3 => (3, 0x80, 0xBF),
        0xF4 => (3, 0x80, 0x8F),
        _ => return None,
    };
    Some(StrPhase::Utf8 { left, lo, hi })
}

/// Where a number is; digit phases count their digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NumPhase {
    Minus,
    Zero,
    Int(u8),
    Dot,
    Frac(u8),
    E,
    ESign,
    Exp(u8),
}

/// Most digits before the point: beyond 2^53 a JSON number loses
/// precision in most readers, and a small model left free to extend a
/// number tends to repeat a digit until its budget runs out.
const MAX_INT_DIGITS: u8 = 16;
/// Most digits after the point.
const MAX_FRAC_DIGITS: u8 = 16;
/// Most exponent digits.
const MAX_EXP_DIGITS: u8 = 3;

impl NumPhase {
    fn can_end(self) -> bool {
        matches!(
            self,
            NumPhase::Zero | NumPhase::Int(_) | NumPhase::Frac(_) | NumPhase::Exp(_)
        )
    }

    fn next(self, b: u8, integer: bool) -> Option<NumPhase> {
        use NumPhase::*;
        let digit = b.is_ascii_digit();
        match (self, b) {
            (Minus, b'0') => Some(Zero),
            (Minus, _) if digit => Some(Int(1)),
            (Int(n), _) if digit && n < MAX_INT_DIGITS => Some(Int(n + 1)),
            (Zero | Int(_), b'.') if !integer => Some(Dot),
            (Zero | Int(_) | Frac(_), b'e' | b'E') if !integer => Some(E),
            (Dot, _) if digit => Some(Frac(1)),
            (Frac(n), _) if digit && n < MAX_FRAC_DIGITS => Some(Frac(n + 1)),
            (E, b'+' | b'-') => Some(ESign),
            (E | ESign, _) if digit => Some(Exp(1)),
            (Exp(n), _) if digit && n < MAX_EXP_DIGITS => Some(Exp(n + 1)),
            _ => None,
        }
    }
}

/// One pending expectation; a parse is a stack of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    /// A value of this node, not begun.
    Value(NodeId),
    /// A schema-less value, not begun, at this nesting depth.
    AnyValue(u8),
    /// Inside a string, after its opening quote, with room for `left`
    /// more characters (`u32::MAX`: unbounded).
    Str { phase: StrPhase, left: u32 },
    /// Inside a number.
    Num { phase: NumPhase, integer: bool },
    /// Inside literal `opt` of a `Literals` node, `pos` bytes matched.
    Lit { node: NodeId, opt: u16, pos: u16 },
    /// Inside an object of node `node`: matching key `key` (`pos` bytes of
    /// it matched), or after the value of property `after`.
    ObjKey { node: NodeId, key: u16, pos: u16 },
    /// After the value of property `index` of an object node.
    ObjNext { node: NodeId, index: u16 },
    /// An object node without properties, after its `{`.
    ObjClose,
    /// Inside an array of node `node`, after `[` (`first`) or an item.
    Arr { node: NodeId, first: bool },
    /// Inside a schema-less object: `Open` after `{`, `Key` after `,`,
    /// `Colon` after a key, `Next` after a value.
    AnyObj { depth: u8, phase: AnyObjPhase },
    /// Inside a schema-less array, after `[` (`first`) or an item.
    AnyArr { depth: u8, first: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AnyObjPhase {
    Open,
    Key,
    Colon,
    Next,
}

/// A parse in progress: every stack of expectations still alive (more
/// than one where a union or an enum has not been decided yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrammarState {
    alive: Vec<Vec<Frame>>,
}

impl Grammar {
    /// Compiles `schema`.
    pub fn compile(schema: &Value) -> Result<Self, SchemaError> {
        let mut c = Compiler {
            root: schema,
            nodes: Vec::new(),
            refs: HashMap::new(),
        };
        let root = c.node(schema, "#")?;
        Ok(c.finish(root))
    }

    /// A grammar of any JSON object (`response_format` `json_object`).
    pub fn any_object() -> Self {
        let mut c = Compiler {
            root: &Value::Null,
            nodes: Vec::new(),
            refs: HashMap::new(),
        };
        let root = c.push(Node::FreeObject);
        c.finish(root)
    }

    /// The state before the first byte.
    pub fn start(&self) -> GrammarState {
        GrammarState {
            alive: vec![vec![Frame::Value(self.root)]],
        }
    }
}

impl GrammarState {
    /// Feeds `bytes`; `false` (and the state left dead) when they cannot
    /// continue any valid document.
    pub fn feed(&mut self, g: &Grammar, bytes: &[u8]) -> bool {
        for &b in bytes {
            let mut next = Vec::with_capacity(self.alive.len());
            for stack in self.alive.drain(..) {
                step(g, stack, b, &mut next, UNION_DEPTH);
            }
            next.dedup();
            self.alive = next;
            if self.alive.is_empty() {
                return false;
            }
        }
        true
    }

    /// Whether `bytes` would be accepted, without changing the state.
    pub fn accepts(&self, g: &Grammar, bytes: &[u8]) -> bool {
        let mut probe = self.clone();
        probe.feed(g, bytes)
    }

    /// Whether the text so far is a whole document (it may still be
    /// extended, as a number can).
    pub fn can_end(&self) -> bool {
        self.alive.iter().any(|s| match s.as_slice() {
            [] => true,
            [Frame::Num { phase, .. }] => phase.can_end(),
            _ => false,
        })
    }

    /// Whether the text so far is a whole document that no byte can extend.
    pub fn is_complete(&self) -> bool {
        !self.alive.is_empty() && self.alive.iter().all(Vec::is_empty)
    }

    /// Whether no continuation is possible any more (a rejected byte).
    pub fn is_dead(&self) -> bool {
        self.alive.is_empty()
    }
}

/// Advances one stack by byte `b`, pushing every surviving stack on `out`.
fn step(g: &Grammar, mut stack: Vec<Frame>, b: u8, out: &mut Vec<Vec<Frame>>, fuel: u8) {
    let Some(&top) = stack.last() else {
        return; // complete: nothing may follow
    };
    if fuel == 0 {
        return;
    }
    let step =
        |stack: Vec<Frame>, b: u8, out: &mut Vec<Vec<Frame>>| step(g, stack, b, out, fuel - 1);
    let replace = |mut s: Vec<Frame>, f: Frame| {
        if let Some(t) = s.last_mut() {
            *t = f;
        }
        s
    };
    match top {
        Frame::Value(id) => match &g.nodes[id as usize] {
            Node::FreeObject => {
                if b == b'{' {
                    out.push(replace(
                        stack,
                        Frame::AnyObj {
                            depth: ANY_DEPTH,
                            phase: AnyObjPhase::Open,
                        },
                    ));
                }
            }
            Node::Union(alts) => {
                for &a in alts {
                    step(replace(stack.clone(), Frame::Value(a)), b, out);
                }
            }
            Node::Literals(opts) => {
                for (i, o) in opts.iter().enumerate() {
                    if o.first() == Some(&b) {
                        let mut s = replace(
                            stack.clone(),
                            Frame::Lit {
                                node: id,
                                opt: i as u16,
                                pos: 1,
                            },
                        );
                        if o.len() == 1 {
                            s.pop();
                        }
                        out.push(s);
                    }
                }
            }
            Node::String { max_chars } => {
                if b == b'"' {
                    out.push(replace(stack, string(max_chars.unwrap_or(u32::MAX))));
                }
            }
            Node::Number { integer } => {
                let phase = match b {
                    b'-' => Some(NumPhase::Minus),
                    _ => NumPhase::Minus.next(b, *integer),
                };
                if let Some(phase) = phase {
                    out.push(replace(
                        stack,
                        Frame::Num {
                            phase,
                            integer: *integer,
                        },
                    ));
                }
            }
            Node::Object(props) => {
                if b == b'{' {
                    let f = if props.is_empty() {
                        Frame::ObjClose
                    } else {
                        Frame::ObjKey {
                            node: id,
                            key: 0,
                            pos: 0,
                        }
                    };
                    out.push(replace(stack, f));
                }
            }
            Node::Array(_) => {
                if b == b'[' {
                    out.push(replace(
                        stack,
                        Frame::Arr {
                            node: id,
                            first: true,
                        },
                    ));
                }
            }
            Node::Any => step(replace(stack, Frame::AnyValue(ANY_DEPTH)), b, out),
        },
        Frame::AnyValue(depth) => match b {
            b'"' => out.push(replace(stack, string(u32::MAX))),
            b'-' | b'0'..=b'9' => step(replace(stack, Frame::Value(g.number)), b, out),
            b't' | b'f' | b'n' => step(replace(stack, Frame::Value(g.scalars)), b, out),
            b'{' if depth > 0 => out.push(replace(
                stack,
                Frame::AnyObj {
                    depth: depth - 1,
                    phase: AnyObjPhase::Open,
                },
            )),
            b'[' if depth > 0 => out.push(replace(
                stack,
                Frame::AnyArr {
                    depth: depth - 1,
                    first: true,
                },
            )),
            _ => {}
        },
        Frame::Str { phase, left } => {
            // A character starts at a byte that is not a UTF-8 continuation
            // byte; an escape is one character, counted at its backslash.
            let starts_char = phase == StrPhase::Chars && b & 0xC0 != 0x80;
            if starts_char && b != b'"' && left == 0 {
                return;
            }
            let left = if starts_char && left != u32::MAX && b != b'"' {
                left - 1
            } else {
                left
            };
            let next = match (phase, b) {
                (StrPhase::Chars, b'"') => {
                    stack.pop();
                    out.push(stack);
                    return;
                }
                (StrPhase::Chars, b'\\') => StrPhase::Escape,
                (StrPhase::Chars, 0x00..=0x1f) => return,
                (StrPhase::Chars, 0x20..=0x7f) => StrPhase::Chars,
                // Only well-formed UTF-8: the document must be text.
                (StrPhase::Chars, _) => match utf8_lead(b) {
                    Some(p) => p,
                    None => return,
                },
                (StrPhase::Utf8 { left, lo, hi }, _) if (lo..=hi).contains(&b) => {
                    if left == 1 {
                        StrPhase::Chars
                    } else {
                        StrPhase::Utf8 {
                            left: left - 1,
                            lo: 0x80,
                            hi: 0xBF,
                        }
                    }
                }
                (StrPhase::Escape, b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                    StrPhase::Chars
                }
                (StrPhase::Escape, b'u') => StrPhase::Hex(4),
                (StrPhase::Hex(n), _) if b.is_ascii_hexdigit() => {
                    if n == 1 {
                        StrPhase::Chars
                    } else {
                        StrPhase::Hex(n - 1)
                    }
                }
                _ => return,
            };
            out.push(replace(stack, Frame::Str { phase: next, left }));
        }
        Frame::Num { phase, integer } => match phase.next(b, integer) {
            Some(p) => out.push(replace(stack, Frame::Num { phase: p, integer })),
            None if phase.can_end() => {
                // The number ended before `b`: `b` belongs to the parent.
                stack.pop();
                step(stack, b, out);
            }
            None => {}
        },
        Frame::Lit { node, opt, pos } => {
            let Node::Literals(opts) = &g.nodes[node as usize] else {
                return;
            };
            let text = &opts[opt as usize];
            if text.get(pos as usize) == Some(&b) {
                if pos as usize + 1 == text.len() {
                    stack.pop();
                    out.push(stack);
                } else {
                    out.push(replace(
                        stack,
                        Frame::Lit {
                            node,
                            opt,
                            pos: pos + 1,
                        },
                    ));
                }
            }
        }
        Frame::ObjKey { node, key, pos } => {
            let Node::Object(props) = &g.nodes[node as usize] else {
                return;
            };
            let (text, value) = &props[key as usize];
            if text.get(pos as usize) != Some(&b) {
                return;
            }
            if pos as usize + 1 < text.len() {
                out.push(replace(
                    stack,
                    Frame::ObjKey {
                        node,
                        key,
                        pos: pos + 1,
                    },
                ));
            } else {
                let mut s = replace(stack, Frame::ObjNext { node, index: key });
                s.push(Frame::Value(*value));
                out.push(s);
            }
        }
        Frame::ObjNext { node, index } => {
            let Node::Object(props) = &g.nodes[node as usize] else {
                return;
            };
            let last = index as usize + 1 == props.len();
            match b {
                b',' if !last => out.push(replace(
                    stack,
                    Frame::ObjKey {
                        node,
                        key: index + 1,
                        pos: 0,
                    },
                )),
                b'}' if last => {
                    stack.pop();
                    out.push(stack);
                }
                _ => {}
            }
        }
        Frame::ObjClose => {
            if b == b'}' {
                stack.pop();
                out.push(stack);
            }
        }
        Frame::Arr { node, first } => {
            let Node::Array(item) = g.nodes[node as usize] else {
                return;
            };
            let next_item = |stack| {
                let mut s = replace(stack, Frame::Arr { node, first: false });
                s.push(Frame::Value(item));
                s
            };
            match b {
                b']' => {
                    stack.pop();
                    out.push(stack);
                }
                b',' if !first => out.push(next_item(stack)),
                _ if first => step(next_item(stack), b, out),
                _ => {}
            }
        }
        Frame::AnyObj { depth, phase } => {
            let set = |s: Vec<Frame>, phase| replace(s, Frame::AnyObj { depth, phase });
            match (phase, b) {
                (AnyObjPhase::Open, b'}') | (AnyObjPhase::Next, b'}') => {
                    stack.pop();
                    out.push(stack);
                }
                (AnyObjPhase::Open | AnyObjPhase::Key, b'"') => {
                    let mut s = set(stack, AnyObjPhase::Colon);
                    s.push(string(MAX_FREE_KEY_CHARS));
                    out.push(s);
                }
                (AnyObjPhase::Colon, b':') => {
                    let mut s = set(stack, AnyObjPhase::Next);
                    s.push(Frame::AnyValue(depth));
                    out.push(s);
                }
                (AnyObjPhase::Next, b',') => out.push(set(stack, AnyObjPhase::Key)),
                _ => {}
            }
        }
        Frame::AnyArr { depth, first } => {
            let next_item = |stack| {
                let mut s = replace(
                    stack,
                    Frame::AnyArr {
                        depth,
                        first: false,
                    },
                );
                s.push(Frame::AnyValue(depth));
                s
            };
            match b {
                b']' => {
                    stack.pop();
                    out.push(stack);
                }
                b',' if !first => out.push(next_item(stack)),
                _ if first => step(next_item(stack), b, out),
                _ => {}
            }
        }
    }
}

struct Compiler<'a> {
    root: &'a Value,
    nodes: Vec<Node>,
    refs: HashMap<String, NodeId>,
}

impl<'a> Compiler<'a> {
    fn finish(mut self, root: NodeId) -> Grammar {
        let scalars = self.push(Node::Literals(vec![
            b"true".to_vec(),
            b"false".to_vec(),
            b"null".to_vec(),
        ]));
        let number = self.push(Node::Number { integer: false });
        Grammar {
            nodes: self.nodes,
            root,
            scalars,
            number,
        }
    }

    fn push(&mut self, n: Node) -> NodeId {
        self.nodes.push(n);
        (self.nodes.len() - 1) as NodeId
    }

    fn err(path: &str, reason: impl Into<String>) -> SchemaError {
        SchemaError {
            path: path.to_owned(),
            reason: reason.into(),
        }
    }

    /// Compiles `schema` (found at `path`) into a new node.
    fn node(&mut self, schema: &'a Value, path: &str) -> Result<NodeId, SchemaError> {
        let id = self.push(Node::Any);
        let node = self.build(schema, path)?;
        self.nodes[id as usize] = node;
        Ok(id)
    }

    fn build(&mut self, schema: &'a Value, path: &str) -> Result<Node, SchemaError> {
        let obj = match schema {
            Value::Bool(true) => return Ok(Node::Any),
            Value::Bool(false) => return Err(Self::err(path, "`false` admits no value")),
            Value::Object(o) => o,
            _ => return Err(Self::err(path, "a schema must be an object or a boolean")),
        };
        if let Some(r) = obj.get("$ref") {
            let r = r
                .as_str()
                .ok_or_else(|| Self::err(path, "`$ref` must be a string"))?;
            return Ok(Node::Union(vec![self.reference(r, path)?]));
        }
        if let Some(v) = obj.get("const") {
            return Ok(Node::Literals(vec![json_text(v)]));
        }
        if let Some(e) = obj.get("enum") {
            let items = e
                .as_array()
                .filter(|a| !a.is_empty())
                .ok_or_else(|| Self::err(&format!("{path}/enum"), "must be a non-empty array"))?;
            return Ok(Node::Literals(items.iter().map(json_text).collect()));
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(alts) = obj.get(key) {
                let alts = alts.as_array().filter(|a| !a.is_empty()).ok_or_else(|| {
                    Self::err(&format!("{path}/{key}"), "must be a non-empty array")
                })?;
                let mut ids = Vec::with_capacity(alts.len());
                for (i, a) in alts.iter().enumerate() {
                    ids.push(self.node(a, &format!("{path}/{key}/{i}"))?);
                }
                return Ok(Node::Union(ids));
            }
        }
        if let Some(all) = obj.get("allOf") {
            return match all.as_array().map(Vec::as_slice) {
                Some([one]) => self.build(one, &format!("{path}/allOf/0")),
                _ => Err(Self::err(
                    &format!("{path}/allOf"),
                    "only a one-element `allOf` is supported",
                )),
            };
        }
        match obj.get("type") {
            None => {
                if obj.contains_key("properties") {
                    self.typed("object", obj, path)
                } else if obj.contains_key("items") {
                    self.typed("array", obj, path)
                } else {
                    Ok(Node::Any)
                }
            }
            Some(Value::String(t)) => self.typed(t, obj, path),
            Some(Value::Array(types)) => {
                let mut ids = Vec::with_capacity(types.len());
                for (i, t) in types.iter().enumerate() {
                    let t = t.as_str().ok_or_else(|| {
                        Self::err(&format!("{path}/type/{i}"), "a type name must be a string")
                    })?;
                    let id = self.push(Node::Any);
                    let n = self.typed(t, obj, path)?;
                    self.nodes[id as usize] = n;
                    ids.push(id);
                }
                Ok(Node::Union(ids))
            }
            Some(_) => Err(Self::err(
                &format!("{path}/type"),
                "must be a string or an array",
            )),
        }
    }

    fn typed(
        &mut self,
        t: &str,
        obj: &'a serde_json::Map<String, Value>,
        path: &str,
    ) -> Result<Node, SchemaError> {
        Ok(match t {
            "string" => Node::String {
                max_chars: match obj.get("maxLength") {
                    None => None,
                    Some(n) => Some(n.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(
                        || {
                            Self::err(
                                &format!("{path}/maxLength"),
                                "must be a non-negative integer",
                            )
                        },
                    )?),
                },
            },
            "number" => Node::Number { integer: false },
            "integer" => Node::Number { integer: true },
            "boolean" => Node::Literals(vec![b"true".to_vec(), b"false".to_vec()]),
            "null" => Node::Literals(vec![b"null".to_vec()]),
            "array" => {
                let item = match obj.get("items") {
                    Some(items) => self.node(items, &format!("{path}/items"))?,
                    None => self.push(Node::Any),
                };
                Node::Array(item)
            }
            "object" => match obj.get("properties") {
                None => Node::FreeObject,
                Some(Value::Object(props)) => {
                    let mut out = Vec::with_capacity(props.len());
                    for (k, v) in props {
                        let mut key = json_text(&Value::String(k.clone()));
                        key.push(b':');
                        let id = self.node(v, &format!("{path}/properties/{k}"))?;
                        out.push((key, id));
                    }
                    Node::Object(out)
                }
                Some(_) => {
                    return Err(Self::err(
                        &format!("{path}/properties"),
                        "must be an object",
                    ));
                }
            },
            other => {
                return Err(Self::err(
                    &format!("{path}/type"),
                    format!("unknown type `{other}`"),
                ));
            }
        })
    }

    fn reference(&mut self, r: &str, path: &str) -> Result<NodeId, SchemaError> {
        if let Some(&id) = self.refs.get(r) {
            return Ok(id);
        }
        let target = if r == "#" {
            Some(self.root)
        } else {
            r.strip_prefix('#').and_then(|p| self.root.pointer(p))
        }
        .ok_or_else(|| Self::err(path, format!("`$ref` {r} points nowhere in this schema")))?;
        let id = self.push(Node::Any);
        self.refs.insert(r.to_owned(), id);
        let node = self.build(target, r)?;
        self.nodes[id as usize] = node;
        Ok(id)
    }
}

/// The compact JSON text of a value.
fn json_text(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

#[cfg(test)]
#[path = "json_grammar_tests.rs"]
mod tests;
