//! Property test: mutated reference fixtures never make loading panic. Every
//! refusal is a typed error that names the JSON path at fault, and anything
//! accepted serializes and loads again.

mod support;

use branch_core::{Branch, BranchError, ToDictOptions};
use serde_json::{Map, Value, json};

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn branch_dicts(v: &Value, out: &mut Vec<Value>) {
    match v {
        Value::Object(m) => {
            if m.get("metadata").and_then(|md| md.get("lion_class"))
                == Some(&json!("lionagi.session.branch.Branch"))
            {
                out.push(v.clone());
            }
            m.values().for_each(|x| branch_dicts(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| branch_dicts(x, out)),
        _ => {}
    }
}

fn corpus() -> Vec<Value> {
    let mut out = Vec::new();
    for cat in ["serialization", "clone"] {
        for e in std::fs::read_dir(support::fixtures_root().join(cat)).unwrap() {
            let p = e.unwrap().path().join("output.json");
            branch_dicts(
                &serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap(),
                &mut out,
            );
        }
    }
    out
}

fn count_nodes(v: &Value) -> usize {
    1 + match v {
        Value::Object(m) => m.values().map(count_nodes).sum(),
        Value::Array(a) => a.iter().map(count_nodes).sum(),
        _ => 0,
    }
}

fn nth_node(v: &mut Value, mut n: usize) -> &mut Value {
    fn go<'a>(v: &'a mut Value, n: &mut usize) -> Option<&'a mut Value> {
        if *n == 0 {
            return Some(v);
        }
        *n -= 1;
        match v {
            Value::Object(m) => m.values_mut().find_map(|x| go(x, n)),
            Value::Array(a) => a.iter_mut().find_map(|x| go(x, n)),
            _ => None,
        }
    }
    // The borrow checker cannot see that the probe and the final walk agree,
    // so count first, then walk.
    let total = count_nodes(v);
    n %= total;
    go(v, &mut n).expect("node index within count")
}

fn random_value(rng: &mut Rng) -> Value {
    match rng.below(12) {
        0 => Value::Null,
        1 => json!(rng.below(2) == 0),
        2 => json!(-1),
        3 => json!(1e308),
        4 => json!("not-a-uuid"),
        5 => json!(""),
        6 => json!([]),
        7 => json!({}),
        8 => json!({"lion_class": "lionagi.protocols.messages.system.System"}),
        9 => json!("6e215c90-0fc7-4af0-8fc0-c5dc415c1108"),
        10 => {
            let mut v = json!(1);
            for _ in 0..100 {
                v = json!([v]);
            }
            v
        }
        _ => json!("2025-13-45T99:99"),
    }
}

fn mutate(v: &mut Value, rng: &mut Rng) {
    let n = rng.below(count_nodes(v));
    let node = nth_node(v, n);
    match rng.below(4) {
        0 => *node = random_value(rng),
        1 => {
            if let Value::Object(m) = node {
                if let Some(k) = m.keys().nth(rng.below(m.len())).cloned() {
                    m.shift_remove(&k);
                }
            }
        }
        2 => {
            if let Value::Object(m) = node {
                m.insert("unexpected_key".into(), random_value(rng));
            } else {
                *node = random_value(rng);
            }
        }
        _ => {
            if let Value::Array(a) = node {
                if !a.is_empty() {
                    let i = rng.below(a.len());
                    let dup = a[i].clone();
                    a.push(dup);
                }
            } else {
                *node = random_value(rng);
            }
        }
    }
}

fn check_error(e: &BranchError, what: &str) {
    let text = e.to_string();
    assert!(!text.is_empty(), "{what}: empty error");
    match e {
        BranchError::InvalidData { path, reason } => {
            assert!(!path.is_empty() && !reason.is_empty(), "{what}: {text}");
        }
        BranchError::InvalidLogConfig { .. } | BranchError::ModelConfig(_) => {}
        other => panic!("{what}: unexpected error kind {other:?}"),
    }
}

fn accept_or_refuse(v: &Value, what: &str) {
    match Branch::from_dict(v) {
        Err(e) => check_error(&e, what),
        Ok(b) => {
            let d = b
                .to_dict(&ToDictOptions::default())
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            Branch::from_dict(&d)
                .unwrap_or_else(|e| panic!("{what}: accepted data did not reload: {e}"));
        }
    }
    let bytes = serde_json::to_vec(v).unwrap();
    if let Err(e) = Branch::from_json_slice(&bytes) {
        check_error(&e, what);
    }
}

#[test]
fn mutated_fixtures_never_panic() {
    let corpus = corpus();
    assert!(corpus.len() > 20);
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    for round in 0..3000 {
        let mut v = corpus[rng.below(corpus.len())].clone();
        for _ in 0..=rng.below(3) {
            mutate(&mut v, &mut rng);
        }
        accept_or_refuse(&v, &format!("round {round}"));
    }
}

#[test]
fn damaged_bytes_never_panic() {
    let corpus = corpus();
    let mut rng = Rng(0x0bad_f00d_0000_0002);
    for round in 0..1500 {
        let text = serde_json::to_string(&corpus[rng.below(corpus.len())]).unwrap();
        let cut = rng.below(text.len());
        let damaged = match rng.below(3) {
            0 => text[..text.floor_char_boundary(cut)].to_owned(),
            1 => format!(
                "{}NaN{}",
                &text[..text.floor_char_boundary(cut)],
                &text[text.floor_char_boundary(cut)..]
            ),
            _ => format!(
                "{}\u{0}{}",
                &text[..text.floor_char_boundary(cut)],
                &text[text.floor_char_boundary(cut)..]
            ),
        };
        if let Err(e) = Branch::from_json_slice(damaged.as_bytes()) {
            assert!(
                matches!(e, BranchError::InvalidData { .. }),
                "round {round}: {e:?}"
            );
        }
    }
}

#[test]
fn deep_nesting_is_refused_not_overflowed() {
    let deep = format!(
        "{{\"metadata\": {{\"x\": {}1{}}}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let e = Branch::from_json_slice(deep.as_bytes()).unwrap_err();
    assert!(e.to_string().contains("recursion limit"), "{e}");
    // Within the parser's limit, deep metadata is plain data and survives.
    let mut v = json!("leaf");
    for _ in 0..100 {
        v = json!({"k": v});
    }
    let mut meta = Map::new();
    meta.insert("deep".into(), v);
    let d =
        json!({"id": "6e215c90-0fc7-4af0-8fc0-c5dc415c1108", "created_at": 1.0, "metadata": meta});
    let b = Branch::from_dict(&d).unwrap();
    assert_eq!(b.metadata()["deep"], d["metadata"]["deep"]);
}

#[test]
fn non_finite_floats_fail_to_serialize() {
    let mut b = Branch::new().unwrap();
    b.msgs_mut()
        .add_message(branch_core::Message::assistant("x"));
    let id = b.messages().at(0).unwrap().id();
    b.msgs_mut().get_mut(&id).unwrap().embedding = Some(vec![1.0, f64::NAN]);
    let e = b.to_dict(&ToDictOptions::default()).unwrap_err();
    match e {
        BranchError::Serialize { path, reason } => {
            assert!(path.contains("embedding"), "{path}");
            assert!(reason.contains("non-finite"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(b.to_json_vec(&ToDictOptions::default()).is_err());
}
