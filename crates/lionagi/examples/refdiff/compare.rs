//! Comparing the two sides of a scenario, and the report.
//!
//! Values are compared as the conformance tests compare them: ids through a
//! one-to-one mapping kept across the whole scenario (request bodies,
//! return values, `to_dict`), times and durations masked, the scripted
//! server's port masked. A first, strict pass decides "same"; a second pass
//! applies the normalisations of documented departures (each names its
//! `docs/compat.md` section), and a scenario may declare the departure it
//! meets (`expect_deviation`); anything else "differs".

use std::collections::{BTreeSet, HashMap};

use serde_json::{Map, Value, json};

/// The four documents of one scenario.
pub struct Sides {
    pub reference: Value,
    pub ours: Value,
    /// The reference's `from_dict` of our `to_dict` outputs (`other`) and of
    /// its own (`self`).
    pub reference_loads_ours: Value,
    /// Ours of the reference's outputs (`other`) and of our own (`self`).
    pub ours_loads_reference: Value,
}

/// A scenario's outcome.
pub enum Outcome {
    Same,
    Documented(Vec<String>),
    Differs(Vec<String>),
}

/// A normalisation of a documented departure, applied to every string of
/// both sides in the second pass.
struct Normaliser {
    section: &'static str,
    apply: fn(&str) -> Option<String>,
}

const NORMALISERS: &[Normaliser] = &[
    Normaliser {
        section: "§15 M1",
        apply: banner_example,
    },
    Normaliser {
        section: "§18 O6",
        apply: token_note,
    },
    Normaliser {
        section: "§21 H1",
        apply: repair_guidance,
    },
];

/// A parse repair's guidance quotes the validation error, in pydantic's
/// words there and jsonschema's here; the YAML quoting of the line
/// follows its text.
fn repair_guidance(s: &str) -> Option<String> {
    let start = s.find("Guidance: ")? + "Guidance: ".len();
    let end = start + s[start..].find("\nInstruction: reformat text into specified model")?;
    if !s[start..end].contains("The previous attempt did not validate") {
        return None;
    }
    let mut out = s.to_owned();
    out.replace_range(start..end, "<repair guidance>");
    Some(out)
}

/// The example inside the `ResponseFormat:` banner (a Python type repr in
/// the reference, a JSON field map here).
fn banner_example(s: &str) -> Option<String> {
    let a = s.find("ResponseFormat: \"")?;
    let head = "\\n```json\\n";
    let from = a + s[a..].find(head)? + head.len();
    let e = s[from..].find("\\n```No triple")?;
    let mut out = s.to_owned();
    out.replace_range(from..from + e, "<example>");
    (out != s).then_some(out)
}

/// ReAct's token-usage note counts the request text, which differs by the
/// banner example.
fn token_note(s: &str) -> Option<String> {
    let key = "Estimated Current Token Usage: ";
    let from = s.find(key)? + key.len();
    let e = s[from..].find('/').map_or(s.len(), |e| from + e);
    let mut out = s.to_owned();
    out.replace_range(from..e, "<n>");
    (out != s).then_some(out)
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| {
            if [8, 13, 18, 23].contains(&i) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}

/// The UUIDs inside a text, and the text with each replaced by `<id>`.
fn split_ids(s: &str) -> (Vec<String>, String) {
    let mut ids = Vec::new();
    let mut rest = String::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s.is_char_boundary(i) && s.len() - i >= 36 && is_uuid(s.get(i..i + 36).unwrap_or("")) {
            ids.push(s[i..i + 36].to_owned());
            rest.push_str("<id>");
            i += 36;
        } else {
            let c = s[i..].chars().next().unwrap_or(' ');
            rest.push(c);
            i += c.len_utf8();
        }
    }
    (ids, rest)
}

/// The loopback server's port differs per side.
fn mask_port(s: &str) -> String {
    let key = "http://127.0.0.1:";
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find(key) {
        out.push_str(&rest[..at + key.len()]);
        rest = rest[at + key.len()..].trim_start_matches(|c: char| c.is_ascii_digit());
        out.push_str("<port>");
    }
    out.push_str(rest);
    out
}

/// An ISO-8601 date-time (`2025-01-01T00:00...`).
fn is_datetime(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 16
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[..4].iter().all(u8::is_ascii_digit)
}

const TIME_KEYS: &[&str] = &[
    "created_at",
    "timestamp",
    "updated_at",
    "duration",
    "last_updated",
];

struct Comparer {
    forward: HashMap<String, String>,
    backward: HashMap<String, String>,
    /// Ids must be equal rather than mapped (a document compared with its
    /// own reload).
    identity: bool,
    normalise: bool,
    /// Comparing a `to_dict` with its reload by the reference, by us, or
    /// neither: the documented differences of loading apply.
    reload: Reload,
    diffs: Vec<String>,
    used: BTreeSet<&'static str>,
}

#[derive(Clone, Copy, PartialEq)]
enum Reload {
    No,
    ByReference,
    ByUs,
}

fn short(v: &Value) -> String {
    let mut s = v.to_string();
    if s.len() > 160 {
        let mut cut = 160;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

impl Comparer {
    fn new(identity: bool, normalise: bool) -> Self {
        Self {
            forward: HashMap::new(),
            backward: HashMap::new(),
            identity,
            normalise,
            reload: Reload::No,
            diffs: Vec::new(),
            used: BTreeSet::new(),
        }
    }

    fn diff(&mut self, path: &str, what: String) {
        self.diffs.push(format!("{path}: {what}"));
    }

    fn id(&mut self, path: &str, r: &str, o: &str) {
        if self.identity {
            if r != o {
                self.diff(path, format!("id {r} became {o}"));
            }
            return;
        }
        match (self.forward.get(r), self.backward.get(o)) {
            (None, None) => {
                self.forward.insert(r.to_owned(), o.to_owned());
                self.backward.insert(o.to_owned(), r.to_owned());
            }
            (Some(x), _) if x == o => {}
            _ => self.diff(path, format!("id {r} / {o} does not map one-to-one")),
        }
    }

    fn normalised(&mut self, s: &str) -> String {
        let mut s = mask_port(s);
        if self.normalise {
            for n in NORMALISERS {
                if let Some(t) = (n.apply)(&s) {
                    self.used.insert(n.section);
                    s = t;
                }
            }
        }
        s
    }

    fn string(&mut self, path: &str, r: &str, o: &str) {
        // A failed tool call's error kind is a Python exception class in
        // the reference, a lionagi-rs kind here.
        if self.normalise && path.ends_with("/execution/error/error") {
            self.used.insert("§16 A4");
            return;
        }
        if is_uuid(r) && is_uuid(o) {
            return self.id(path, r, o);
        }
        if is_datetime(r) && is_datetime(o) {
            return;
        }
        let (rids, rt) = split_ids(r);
        let (oids, ot) = split_ids(o);
        let (rt, ot) = (self.normalised(&rt), self.normalised(&ot));
        if rt != ot || rids.len() != oids.len() {
            let at = rt
                .chars()
                .zip(ot.chars())
                .take_while(|(a, b)| a == b)
                .count();
            let window =
                |t: &str| -> String { t.chars().skip(at.saturating_sub(30)).take(120).collect() };
            self.diff(
                path,
                format!(
                    "text differs at char {at}: ref …{:?} ours …{:?}",
                    window(&rt),
                    window(&ot)
                ),
            );
            return;
        }
        for (a, b) in rids.iter().zip(&oids) {
            self.id(path, a, b);
        }
    }

    fn value(&mut self, path: &str, r: &Value, o: &Value) {
        let key = path.rsplit('/').next().unwrap_or_default();
        match (r, o) {
            (Value::Object(a), Value::Object(b)) => self.object(path, a, b),
            (Value::Array(a), Value::Array(b)) => {
                if a.len() != b.len() {
                    self.diff(
                        path,
                        format!("{} items in ref, {} in ours", a.len(), b.len()),
                    );
                }
                for (i, (x, y)) in a.iter().zip(b).enumerate() {
                    self.value(&format!("{path}/{i}"), x, y);
                }
            }
            (Value::String(a), Value::String(b)) => self.string(path, a, b),
            (Value::Number(a), Value::Number(b)) => {
                if TIME_KEYS.contains(&key) {
                    return;
                }
                if a.as_f64() != b.as_f64() {
                    self.diff(path, format!("ref {a} ours {b}"));
                }
            }
            (Value::Number(_) | Value::Null, Value::Number(_) | Value::Null)
                if TIME_KEYS.contains(&key) => {}
            (a, b) if a == b => {}
            (a, b) => self.diff(path, format!("ref {} ours {}", short(a), short(b))),
        }
    }

    /// A documented difference of loading, for key `k` of an object at
    /// `depth` (0 = the branch document), original `x`, reloaded `y`.
    fn reload_departure(
        &self,
        depth: usize,
        k: &str,
        x: Option<&Value>,
        y: Option<&Value>,
    ) -> Option<&'static str> {
        if !self.normalise || self.reload == Reload::No {
            return None;
        }
        match (k, x, y) {
            // `allow_local_network` is never restored from data.
            ("allow_local_network", Some(Value::Bool(true)), Some(Value::Bool(false))) => {
                Some("§13")
            }
            // The reference forgets the system message on load ...
            ("system", Some(_), None) if depth == 0 && self.reload == Reload::ByReference => {
                Some("§1")
            }
            // ... and duplicates an aliased parse model.
            ("parse_model", None, Some(_)) if depth == 0 && self.reload == Reload::ByReference => {
                Some("§2")
            }
            // The reference rebuilds a stored request-options schema from
            // a dynamic model on load, and writes a different one back.
            ("request_options", Some(_), Some(_)) if self.reload == Reload::ByReference => {
                Some("§21 H2")
            }
            _ => None,
        }
    }

    fn object(&mut self, path: &str, a: &Map<String, Value>, b: &Map<String, Value>) {
        let depth = path.matches('/').count().saturating_sub(2);
        let drop_null_description = |m: &Map<String, Value>, k: &str| {
            k == "description" && m.get(k).is_some_and(Value::is_null)
        };
        for (k, x) in a {
            let p = format!("{path}/{k}");
            if let Some(section) = self.reload_departure(depth, k, Some(x), b.get(k)) {
                self.used.insert(section);
                continue;
            }
            match b.get(k) {
                Some(y) => self.value(&p, x, y),
                None if self.normalise && drop_null_description(a, k) => {
                    self.used.insert("§16 A1");
                }
                None => self.diff(&p, format!("only in ref: {}", short(x))),
            }
        }
        for (k, y) in b {
            if !a.contains_key(k) {
                // The model keeps the last served model through a failed
                // call; the reference forgets it.
                if self.normalise && k == "served_model" && path.ends_with("/provider_metadata") {
                    self.used.insert("§21 H3");
                    continue;
                }
                if let Some(section) = self.reload_departure(depth, k, None, Some(y)) {
                    self.used.insert(section);
                    continue;
                }
                self.diff(
                    &format!("{path}/{k}"),
                    format!("only in ours: {}", short(y)),
                );
            }
        }
    }
}

/// What each start of the scripted agent was asked, as both sides say it
/// their own way: the prompt (ours on stdin, the reference's as `-p`'s
/// value), the model and the session resumed (`--flag=VALUE` here,
/// `--flag VALUE` in the reference).
fn agent_calls(calls: &Value) -> Value {
    let one = |call: &Value| {
        let args: Vec<&str> = call["args"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let flag = |name: &str| {
            let eq = format!("{name}=");
            args.iter()
                .enumerate()
                .find_map(|(i, a)| match a.strip_prefix(&eq) {
                    Some(v) => Some(v.to_owned()),
                    None if *a == name => args.get(i + 1).map(|v| (*v).to_owned()),
                    None => None,
                })
        };
        let prompt = match call["stdin"].as_str() {
            Some(s) if !s.is_empty() => Some(s.to_owned()),
            _ => flag("-p"),
        };
        json!({"prompt": prompt, "model": flag("--model"), "resume": flag("--resume")})
    };
    Value::Array(calls.as_array().into_iter().flatten().map(one).collect())
}

/// A `to_dict` without what each side records of a CLI agent's call its
/// own way (compat.md §18 O5): the calls' `api_call_meta.payload` (the
/// reference's CLI request object, our request body), the agent's answer as
/// a reply's `model_response` and a log's response (the reference's dump
/// of the agent's session, with its `chunks`; ours the usage, with the
/// `session_id`) with the log's payload, and the stored agent session
/// (`cli_session_id`, which the reference does not store). `None` when
/// there is none.
fn without_cli_records(v: &Value) -> Option<Value> {
    fn agent_answer(v: Option<&Value>) -> bool {
        v.is_some_and(|r| r.get("chunks").is_some() || r.get("session_id").is_some())
    }
    fn strip(v: &mut Value, changed: &mut bool) {
        match v {
            Value::Object(m) => {
                *changed |= m.shift_remove("cli_session_id").is_some();
                if let Some(Value::Object(meta)) = m.get_mut("api_call_meta") {
                    *changed |= meta.shift_remove("payload").is_some();
                }
                if agent_answer(m.get("model_response")) {
                    *changed |= m.shift_remove("model_response").is_some();
                }
                if agent_answer(m.get("execution").and_then(|e| e.get("response"))) {
                    m.shift_remove("payload");
                    if let Some(Value::Object(e)) = m.get_mut("execution") {
                        *changed |= e.shift_remove("response").is_some();
                    }
                }
                m.values_mut().for_each(|x| strip(x, changed));
            }
            Value::Array(a) => a.iter_mut().for_each(|x| strip(x, changed)),
            _ => {}
        }
    }
    let mut out = v.clone();
    let mut changed = false;
    strip(&mut out, &mut changed);
    changed.then_some(out)
}

/// The reference's Anthropic Messages bodies as ours sends them
/// (compat.md §25): consecutive messages of one role merged into one turn
/// of text blocks, which the API requires and the reference leaves as
/// they are. A body is one with `max_tokens` whose model is a Claude;
/// `None` when no body changed.
fn merged_anthropic_turns(v: &Value) -> Option<Value> {
    fn blocks(content: &Value) -> Vec<Value> {
        match content {
            Value::String(s) if s.is_empty() => Vec::new(),
            Value::String(s) => vec![json!({"type": "text", "text": s})],
            Value::Array(a) => a.clone(),
            other => vec![other.clone()],
        }
    }
    fn merge(messages: &[Value]) -> Vec<Value> {
        let mut out: Vec<Value> = Vec::with_capacity(messages.len());
        for m in messages {
            match out.last_mut() {
                Some(last) if last["role"] == m["role"] => {
                    let mut b = blocks(&last["content"]);
                    b.extend(blocks(&m["content"]));
                    last["content"] = Value::Array(b);
                }
                _ => out.push(m.clone()),
            }
        }
        out
    }
    fn walk(v: &mut Value, changed: &mut bool) {
        match v {
            Value::Object(m) => {
                let claude = m.contains_key("max_tokens")
                    && m.get("model")
                        .and_then(Value::as_str)
                        .is_some_and(|n| n.starts_with("claude-"));
                if let (true, Some(Value::Array(msgs))) = (claude, m.get_mut("messages")) {
                    let merged = merge(msgs);
                    if merged.len() != msgs.len() {
                        *msgs = merged;
                        *changed = true;
                    }
                }
                m.values_mut().for_each(|x| walk(x, changed));
            }
            Value::Array(a) => a.iter_mut().for_each(|x| walk(x, changed)),
            _ => {}
        }
    }
    let mut out = v.clone();
    let mut changed = false;
    walk(&mut out, &mut changed);
    changed.then_some(out)
}

fn ok_value(v: &Value) -> Option<&Value> {
    (v["ok"] == Value::Bool(true)).then(|| &v["value"])
}

/// Every comparison of a scenario, into one comparer.
fn compare_all(sc: &Value, s: &Sides, normalise: bool) -> Comparer {
    let mut c = Comparer::new(false, normalise);
    for side in [&s.reference, &s.ours] {
        if let Some(e) = side.get("driver_error") {
            c.diff("driver", e.to_string());
        }
    }
    if !c.diffs.is_empty() {
        return c;
    }
    // The reference's Anthropic bodies, in the requests and in its logs,
    // merged as ours are (§25).
    let merged = normalise
        .then(|| merged_anthropic_turns(&s.reference))
        .flatten();
    if merged.is_some() {
        c.used.insert("§25");
    }
    let reference = merged.as_ref().unwrap_or(&s.reference);
    c.value("/requests", &reference["requests"], &s.ours["requests"]);
    c.value(
        "/agent_calls",
        &agent_calls(&s.reference["agent_calls"]),
        &agent_calls(&s.ours["agent_calls"]),
    );
    let rs = s.reference["steps"].as_array().cloned().unwrap_or_default();
    let os = s.ours["steps"].as_array().cloned().unwrap_or_default();
    for (i, (r, o)) in rs.iter().zip(&os).enumerate() {
        let p = format!("/steps/{i}({})", r["op"].as_str().unwrap_or_default());
        match (ok_value(r), ok_value(o)) {
            (Some(a), Some(b)) => c.value(&p, a, b),
            (None, None) => {}
            _ => c.diff(&p, format!("ref {} ours {}", short(r), short(o))),
        }
    }
    if rs.len() != os.len() {
        c.diff(
            "/steps",
            format!("{} in ref, {} in ours", rs.len(), os.len()),
        );
    }
    let keys: Vec<String> = s.reference["to_dict"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    for k in &keys {
        let (r, o) = (&reference["to_dict"][k], &s.ours["to_dict"][k]);
        match (ok_value(r), ok_value(o)) {
            (Some(a), Some(b)) if normalise && sc.get("cli").is_some() => {
                let (a2, b2) = (without_cli_records(a), without_cli_records(b));
                if a2.is_some() || b2.is_some() {
                    c.used.insert("§18 O5");
                }
                let (a, b) = (a2.as_ref().unwrap_or(a), b2.as_ref().unwrap_or(b));
                c.value(&format!("/to_dict/{k}"), a, b)
            }
            (Some(a), Some(b)) => c.value(&format!("/to_dict/{k}"), a, b),
            (None, None) => {}
            _ => c.diff(
                &format!("/to_dict/{k}"),
                format!("ref {} ours {}", short(r), short(o)),
            ),
        }
    }
    // from_dict across: each loader must give back what it was given, or
    // fail on the other's output exactly when it fails on its own.
    let cross = [
        (
            "ours loads ref",
            &s.ours_loads_reference,
            &s.reference,
            Reload::ByUs,
        ),
        (
            "ref loads ours",
            &s.reference_loads_ours,
            &s.ours,
            Reload::ByReference,
        ),
    ];
    for (label, loads, produced, by) in cross {
        for k in &keys {
            let Some(original) = ok_value(&produced["to_dict"][k]) else {
                continue;
            };
            let other = &loads["other"][k];
            let own = &loads["self"][k];
            let p = format!("/{label}/{k}");
            match ok_value(other) {
                Some(v) => {
                    let mut ident = Comparer::new(true, normalise);
                    ident.reload = by;
                    ident.value(&p, original, v);
                    c.used.extend(ident.used.iter().copied());
                    c.diffs.extend(ident.diffs);
                }
                None if ok_value(own).is_none() => {}
                None => c.diff(&p, format!("fails: {}", short(&other["error"]))),
            }
        }
    }
    // The turn a loaded branch takes next: from the reference's output and
    // from ours, whichever side loaded it, the same request and outcome.
    let continued = [
        (
            "continued from ref",
            &s.reference_loads_ours["continued"]["self"],
            &s.ours_loads_reference["continued"]["other"],
        ),
        (
            "continued from ours",
            &s.reference_loads_ours["continued"]["other"],
            &s.ours_loads_reference["continued"]["self"],
        ),
    ];
    for (label, by_reference, by_us) in continued {
        let merged = normalise
            .then(|| merged_anthropic_turns(by_reference))
            .flatten();
        if merged.is_some() {
            c.used.insert("§25");
        }
        let by_reference = merged.as_ref().unwrap_or(by_reference);
        c.value(
            &format!("/{label}/requests"),
            &by_reference["requests"],
            &by_us["requests"],
        );
        if by_reference["ok"] != by_us["ok"] {
            c.diff(
                &format!("/{label}"),
                format!("ref {} ours {}", short(by_reference), short(by_us)),
            );
        }
    }
    // Our own outputs load back, in every mode (compat.md §9).
    for k in &keys {
        if let Some(original) = ok_value(&s.ours["to_dict"][k]) {
            let own = &s.ours_loads_reference["self"][k];
            let p = format!("/ours loads ours/{k}");
            match ok_value(own) {
                Some(v) => {
                    let mut ident = Comparer::new(true, normalise);
                    ident.reload = Reload::ByUs;
                    ident.value(&p, original, v);
                    c.used.extend(ident.used.iter().copied());
                    c.diffs.extend(ident.diffs);
                }
                None => c.diff(&p, format!("fails: {}", short(&own["error"]))),
            }
        }
    }
    let _ = sc;
    c
}

/// The outcome of one scenario.
pub fn scenario(sc: &Value, sides: &Sides) -> Outcome {
    let strict = compare_all(sc, sides, false);
    if strict.diffs.is_empty() {
        return Outcome::Same;
    }
    let lenient = compare_all(sc, sides, true);
    let mut sections: Vec<String> = lenient.used.iter().map(|s| (*s).to_owned()).collect();
    if lenient.diffs.is_empty() {
        return Outcome::Documented(sections);
    }
    // A declared departure covers the differences under its paths.
    if let Some(dev) = sc.get("expect_deviation") {
        let section = dev["section"].as_str().unwrap_or("?");
        let paths: Vec<&str> = dev["paths"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let uncovered: Vec<String> = lenient
            .diffs
            .iter()
            .filter(|d| !paths.is_empty() && !paths.iter().any(|p| d.starts_with(p)))
            .cloned()
            .collect();
        if uncovered.is_empty() {
            if !sections.iter().any(|s| s == section) {
                sections.push(section.to_owned());
            }
            return Outcome::Documented(sections);
        }
        return Outcome::Differs(uncovered);
    }
    Outcome::Differs(lenient.diffs)
}

#[derive(Default)]
pub struct Report {
    same: usize,
    documented: usize,
    differs: usize,
    lines: Vec<String>,
}

impl Report {
    pub fn add(&mut self, name: &str, o: Outcome) {
        match o {
            Outcome::Same => {
                self.same += 1;
                self.lines.push(format!("same        {name}"));
            }
            Outcome::Documented(s) => {
                self.documented += 1;
                self.lines.push(format!(
                    "documented  {name} (docs/compat.md {})",
                    s.join(", ")
                ));
            }
            Outcome::Differs(d) => {
                self.differs += 1;
                self.lines.push(format!("DIFFERS     {name}"));
                for line in d.iter().take(6) {
                    self.lines.push(format!("    {line}"));
                }
                if d.len() > 6 {
                    self.lines.push(format!("    … {} more", d.len() - 6));
                }
            }
        }
    }

    pub fn print(&self) {
        for l in &self.lines {
            println!("{l}");
        }
        println!(
            "refdiff: {} scenarios: {} same, {} documented, {} differ",
            self.same + self.documented + self.differs,
            self.same,
            self.documented,
            self.differs
        );
    }

    pub fn passed(&self) -> bool {
        self.differs == 0
    }
}
