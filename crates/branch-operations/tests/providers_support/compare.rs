//! Shared helpers of the conformance tests: loading the reference fixtures
//! and comparing values under their masks with a one-to-one id mapping.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use serde_json::Value;

/// The vendored reference fixtures (`tests/fixtures/lionagi-0.36.0`).
pub fn fixtures_root() -> PathBuf {
    if let Ok(p) = std::env::var("LIONAGI_FIXTURES") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/lionagi-0.36.0")
}

/// One scenario's files.
pub struct Fixture {
    pub name: String,
    pub output: Value,
    pub input: Option<Value>,
    /// Pointers into output.json whose values are generated times.
    pub volatile: HashSet<String>,
    /// Pointers into output.json of text values embedding ids or times.
    pub text: HashSet<String>,
    pub requests: Vec<Value>,
}

fn read_json(path: &std::path::Path) -> Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Loads `category/scenario`.
pub fn fixture(path: &str) -> Fixture {
    let dir = fixtures_root().join(path);
    let output = read_json(&dir.join("output.json"));
    let input = dir
        .join("input.json")
        .exists()
        .then(|| read_json(&dir.join("input.json")));
    let nd = read_json(&dir.join("nondeterministic.json"));
    let mut volatile = HashSet::new();
    let mut text = HashSet::new();
    for m in nd["output.json"].as_array().into_iter().flatten() {
        let p = m["pointer"].as_str().unwrap().to_owned();
        match m["kind"].as_str().unwrap() {
            "timestamp" | "duration" | "datetime" => {
                volatile.insert(p);
            }
            "text" => {
                text.insert(p);
            }
            _ => {}
        }
    }
    let requests = std::fs::read_to_string(dir.join("requests.jsonl"))
        .map(|t| {
            t.lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        })
        .unwrap_or_default();
    Fixture {
        name: path.to_owned(),
        output,
        input,
        volatile,
        text,
        requests,
    }
}

/// Whether `s` is a UUID in canonical hyphenated form.
pub fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| {
            if [8, 13, 18, 23].contains(&i) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}

/// Compares expected (reference) and actual (ours) values. Ids are matched
/// through a mapping that must stay one-to-one across every comparison made
/// with the same comparer; ids found in input.json must map to themselves.
pub struct Comparer {
    forward: HashMap<String, String>,
    backward: HashMap<String, String>,
    times: HashMap<u64, u64>,
    times_back: HashMap<u64, u64>,
    volatile: HashSet<String>,
    text: HashSet<String>,
    errors: Vec<String>,
}

impl Comparer {
    pub fn new(fx: &Fixture) -> Self {
        let mut c = Comparer {
            forward: HashMap::new(),
            backward: HashMap::new(),
            times: HashMap::new(),
            times_back: HashMap::new(),
            volatile: fx.volatile.clone(),
            text: fx.text.clone(),
            errors: Vec::new(),
        };
        if let Some(input) = &fx.input {
            let mut ids = Vec::new();
            collect_ids(input, &mut ids);
            for id in ids {
                c.forward.insert(id.clone(), id.clone());
                c.backward.insert(id.clone(), id);
            }
            let mut times = Vec::new();
            collect_times(input, &mut times);
            for t in times {
                c.times.insert(t, t);
                c.times_back.insert(t, t);
            }
        }
        c
    }

    /// Compares `actual` with the fixture value at `pointer` of output.json.
    pub fn check(&mut self, fx: &Fixture, pointer: &str, actual: &Value) -> &mut Self {
        let expected = fx
            .output
            .pointer(pointer)
            .unwrap_or_else(|| panic!("{}: no {pointer} in output.json", fx.name))
            .clone();
        self.walk(pointer, &expected, actual);
        self
    }

    /// Compares two values directly (no masks apply below `label`).
    pub fn check_value(&mut self, label: &str, expected: &Value, actual: &Value) -> &mut Self {
        self.walk(label, expected, actual);
        self
    }

    fn map_id(&mut self, at: &str, e: &str, a: &str) {
        match (self.forward.get(e), self.backward.get(a)) {
            (Some(x), _) if x != a => self
                .errors
                .push(format!("{at}: id {e} already maps to {x}, now {a}")),
            (_, Some(y)) if y != e => self
                .errors
                .push(format!("{at}: id {a} already stands for {y}, now {e}")),
            _ => {
                self.forward.insert(e.to_owned(), a.to_owned());
                self.backward.insert(a.to_owned(), e.to_owned());
            }
        }
    }

    fn walk(&mut self, at: &str, e: &Value, a: &Value) {
        if self.volatile.contains(at) {
            let ok = match e {
                Value::Number(_) => a.is_number(),
                Value::String(_) => a.is_string(),
                _ => true,
            };
            if !ok {
                self.errors
                    .push(format!("{at}: expected a generated {e}, got {a}"));
            }
            return;
        }
        match (e, a) {
            (Value::String(es), Value::String(as_)) if is_uuid(es) => {
                if is_uuid(as_) {
                    self.map_id(at, es, as_);
                } else {
                    self.errors
                        .push(format!("{at}: expected an id, got {as_:?}"));
                }
            }
            (Value::String(es), Value::String(as_)) if self.text.contains(at) => {
                if scrub(es) != scrub(as_) {
                    self.errors.push(format!(
                        "{at}: text differs\n  expected {es:?}\n  actual   {as_:?}"
                    ));
                }
            }
            (Value::Object(em), Value::Object(am)) => {
                for k in em.keys() {
                    if !am.contains_key(k) {
                        self.errors.push(format!("{at}: missing key {k:?}"));
                    }
                }
                for k in am.keys() {
                    if !em.contains_key(k) {
                        self.errors.push(format!("{at}: unexpected key {k:?}"));
                    }
                }
                for (k, ev) in em {
                    if let Some(av) = am.get(k) {
                        self.walk(&format!("{at}/{}", escape(k)), ev, av);
                    }
                }
            }
            (Value::Array(ea), Value::Array(aa)) => {
                if ea.len() != aa.len() {
                    self.errors.push(format!(
                        "{at}: expected {} items, got {}",
                        ea.len(),
                        aa.len()
                    ));
                }
                for (i, (ev, av)) in ea.iter().zip(aa).enumerate() {
                    self.walk(&format!("{at}/{i}"), ev, av);
                }
            }
            (Value::Number(en), Value::Number(an)) if en.as_f64().is_some_and(is_fake_clock) => {
                let (e, a) = (
                    en.as_f64().unwrap().to_bits(),
                    an.as_f64().unwrap_or(f64::NAN).to_bits(),
                );
                // Only expected -> actual must be consistent: two readings of a
                // real clock may fall in the same microsecond.
                match (self.times.get(&e), None::<&u64>) {
                    (Some(x), _) if *x != a => self.errors.push(format!(
                        "{at}: time {en} already maps to {}, now {an}",
                        f64::from_bits(*x)
                    )),
                    _ => {
                        self.times.insert(e, a);
                        self.times_back.insert(a, e);
                    }
                }
            }
            (Value::String(es), Value::String(as_))
                if es.starts_with("2025-01-01")
                    && datetime_len(es.as_bytes()) == Some(es.len()) =>
            {
                if datetime_len(as_.as_bytes()) != Some(as_.len()) {
                    self.errors
                        .push(format!("{at}: expected a generated date-time, got {as_:?}"));
                }
            }
            (Value::Number(en), Value::Number(an)) => {
                if en.as_f64() != an.as_f64() {
                    self.errors.push(format!("{at}: expected {en}, got {an}"));
                }
            }
            _ => {
                if e != a {
                    self.errors.push(format!("{at}: expected {e}, got {a}"));
                }
            }
        }
    }

    /// Panics with every difference found so far.
    pub fn finish(&mut self) {
        if !self.errors.is_empty() {
            panic!(
                "{} difference(s):\n{}",
                self.errors.len(),
                self.errors.join("\n")
            );
        }
    }
}

/// The reference's fixtures ran on a fake clock starting at 2025-01-01
/// and advancing a second per reading: such values are generated times.
fn is_fake_clock(t: f64) -> bool {
    (1_735_689_600.0..1_735_689_600.0 + 100_000.0).contains(&t)
}

fn collect_times(v: &Value, out: &mut Vec<u64>) {
    match v {
        Value::Number(n) if n.as_f64().is_some_and(is_fake_clock) => {
            out.push(n.as_f64().unwrap().to_bits())
        }
        Value::Array(a) => a.iter().for_each(|x| collect_times(x, out)),
        Value::Object(m) => m.values().for_each(|x| collect_times(x, out)),
        _ => {}
    }
}

fn escape(k: &str) -> String {
    k.replace('~', "~0").replace('/', "~1")
}

fn collect_ids(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) if is_uuid(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| collect_ids(x, out)),
        Value::Object(m) => m.values().for_each(|x| collect_ids(x, out)),
        _ => {}
    }
}

/// Replaces ids and ISO date-times inside a text by placeholders.
pub fn scrub(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        if i + 36 <= b.len() && s.is_char_boundary(i + 36) && is_uuid(&s[i..i + 36]) {
            out.push_str("<uuid>");
            i += 36;
            continue;
        }
        if let Some(n) = datetime_len(&b[i..]) {
            out.push_str("<datetime>");
            i += n;
            continue;
        }
        let c = s[i..].chars().next().unwrap();
        out.push(c);
        i += c.len_utf8();
    }
    out
}

fn datetime_len(b: &[u8]) -> Option<usize> {
    let d = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    let is = |i: usize, c: u8| b.get(i) == Some(&c);
    if !((0..4).all(d) && is(4, b'-') && d(5) && d(6) && is(7, b'-') && d(8) && d(9)) {
        return None;
    }
    if !(is(10, b'T') || is(10, b' ')) || !(d(11) && d(12) && is(13, b':') && d(14) && d(15)) {
        return None;
    }
    let mut n = 16;
    if is(n, b':') && d(n + 1) && d(n + 2) {
        n += 3;
        if is(n, b'.') && d(n + 1) {
            n += 1;
            while d(n) {
                n += 1;
            }
        }
    }
    if is(n, b'Z') {
        n += 1;
    } else if (is(n, b'+') || is(n, b'-'))
        && d(n + 1)
        && d(n + 2)
        && is(n + 3, b':')
        && d(n + 4)
        && d(n + 5)
    {
        n += 6;
    }
    Some(n)
}

/// Removes a key from an object value (for documented deviations).
pub fn without(v: &Value, key: &str) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        m.shift_remove(key);
    }
    v
}

/// The keys of an object value, in order.
pub fn keys(v: &Value) -> Vec<String> {
    v.as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// `iModel(provider="openai", model=NAME, base_url=<mock>, api_key=..., allow_local_network=True)`
/// as the scenarios build it (`ctx.model(NAME)`).
pub fn mock_model(name: &str) -> branch_core::model::ModelConfig {
    branch_core::model::ModelConfig::builder()
        .provider("openai")
        .model(name)
        .base_url("http://127.0.0.1:47611/v1")
        .allow_local_network(true)
        .build()
        .expect("valid mock model")
}
