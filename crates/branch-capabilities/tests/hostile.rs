//! Hostile input to extraction: unterminated fences, a 10 MB message,
//! 10,000 blocks, deep nesting, and a seeded random generator mixing
//! them. Extraction must never panic, must agree with a naive reference
//! scanner on which fenced blocks exist, and must keep its output bounded
//! by its input. (No timing here: speed is the benchmark's business.)

use branch_capabilities::{
    FieldSpec, Grant, MAX_INPUT, extract_emissions, fenced_json_blocks, json_blocks,
};
use serde_json::json;

fn grant() -> Grant {
    Grant::builder()
        .name("Reviewer")
        .field(FieldSpec::string("note"))
        .field(FieldSpec::integer("score"))
        .build()
        .unwrap()
}

/// xorshift64*: a small deterministic generator, so a failure names its
/// seed and replays exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const PIECES: &[&str] = &[
    "```json",
    "```",
    "``",
    "`",
    "```JSON",
    "json",
    "{",
    "}",
    "[",
    "]",
    "\"",
    "'",
    "\\",
    ",",
    ":",
    " ",
    "\n",
    "\t",
    "\u{3000}",
    "é",
    "😀",
    "note",
    "score",
    "\"note\"",
    "\"score\"",
    "1",
    "-2.5e3",
    "true",
    "null",
    "{\"note\": \"x\"}",
    "{\"score\": 3}",
    "{'note': 'y',}",
    "{note: 1}",
    "[{\"score\": 1}, 2]",
    "<!-- lionagi:capabilities -->",
    "{\"evil\": 1, \"note\": \"z\"}",
];

fn random_text(rng: &mut Rng) -> String {
    let len = rng.below(60);
    let mut s = String::new();
    for _ in 0..len {
        if rng.below(20) == 0 {
            // A run of nesting.
            let depth = rng.below(400);
            let open = if rng.below(2) == 0 { "[" } else { "{\"a\":" };
            s.push_str(&open.repeat(depth));
        } else {
            s.push_str(PIECES[rng.below(PIECES.len())]);
        }
    }
    s
}

/// The reference regex `` ```json\s*(.*?)\s*``` `` (DOTALL), written the
/// slow, obvious way.
fn naive_blocks(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("```json") {
        let after = &rest[i + 7..];
        match after.find("```") {
            Some(j) => {
                out.push(after[..j].trim().to_owned());
                rest = &after[j + 3..];
            }
            None => break,
        }
    }
    out
}

#[test]
fn random_hostile_texts_never_panic_and_match_the_naive_scanner() {
    let g = grant();
    for seed in 1..=3000u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let text = random_text(&mut rng);
        let fast: Vec<&str> = fenced_json_blocks(&text).collect();
        assert_eq!(fast, naive_blocks(&text), "seed {seed}: {text:?}");
        let ex = extract_emissions(&text, &g, "b");
        let found = ex.bundles.len() + ex.violations.len() + ex.rejections.len();
        // Each emission comes from a distinct JSON value; values cannot
        // outnumber the characters that delimit them.
        assert!(found <= text.len(), "seed {seed}");
        for b in &ex.bundles {
            assert!(
                b.keys().all(|k| k == "note" || k == "score"),
                "seed {seed}: {b:?}"
            );
        }
    }
}

#[test]
fn unterminated_fences_yield_the_closed_blocks_only() {
    let text = "```json {\"note\": \"a\"} ``` then ```json {\"note\": \"b\"";
    let ex = extract_emissions(text, &grant(), "");
    assert_eq!(json!(ex.bundles), json!([{"note": "a"}]));
    let many_open = "```json {".repeat(50_000);
    // Each block is closed by the next opening fence's backticks, which
    // that fence therefore loses: half of the fences open a block.
    assert_eq!(fenced_json_blocks(&many_open).count(), 25_000);
    assert_eq!(
        fenced_json_blocks(&many_open).count(),
        naive_blocks(&many_open).len()
    );
    assert!(extract_emissions(&many_open, &grant(), "").is_empty());
}

#[test]
fn ten_thousand_blocks() {
    let mut text = String::new();
    for i in 0..10_000 {
        match i % 4 {
            0 => text.push_str(&format!(
                "step {i}\n```json\n{{\"note\": \"n{i}\", \"score\": {i}}}\n```\n"
            )),
            1 => text.push_str("```json\n{\"note\": \"x\", \"evil\": true}\n```\n"),
            2 => text.push_str("```json\n{\"score\": \"high\"}\n```\n"),
            _ => text.push_str("```json\n{\"unrelated\": 1}\n```\n"),
        }
    }
    let ex = extract_emissions(&text, &grant(), "w");
    assert_eq!(
        (ex.bundles.len(), ex.violations.len(), ex.rejections.len()),
        (2500, 2500, 2500)
    );
    assert_eq!(ex.bundles[1]["score"], json!(4));
}

#[test]
fn deep_nesting_is_refused_without_overflowing_the_stack() {
    for depth in [1_000usize, 100_000, 1_000_000] {
        let arrays = format!("```json\n{}\n```", "[".repeat(depth));
        assert!(json_blocks(&arrays).is_empty());
        let closed = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert!(json_blocks(&closed).is_empty());
        let objects = format!(
            "```json {}1{} ```",
            "{\"note\":".repeat(depth),
            "}".repeat(depth)
        );
        assert!(extract_emissions(&objects, &grant(), "").is_empty());
    }
    // Shallow enough for serde_json's limit: parsed, then rejected.
    let ok = format!(
        "```json {{\"note\": {}1{} }} ```",
        "[".repeat(100),
        "]".repeat(100)
    );
    assert_eq!(extract_emissions(&ok, &grant(), "").rejections.len(), 1);
}

#[test]
fn a_ten_megabyte_message() {
    // ~10 MB of prose with a block every ~4 KB.
    let para = "lorem ipsum dolor sit amet, consectetur adipiscing elit. ".repeat(70);
    let mut text = String::with_capacity(10_000_000);
    let mut n = 0;
    while text.len() < 10_000_000 - 8_192 {
        text.push_str(&para);
        text.push_str("\n```json\n{\"score\": 1}\n```\n");
        n += 1;
    }
    assert!(text.len() <= MAX_INPUT);
    let ex = extract_emissions(&text, &grant(), "");
    assert_eq!(ex.bundles.len(), n);

    // Over the 10 MiB cap: refused as a whole, as the reference does.
    let big = format!("```json {{\"score\": 1}} ```{}", " ".repeat(MAX_INPUT));
    assert!(json_blocks(&big).is_empty());

    // One unterminated fence at the start of 10 MB.
    let open = format!("```json {}", "x".repeat(10_000_000));
    assert!(json_blocks(&open).is_empty());
    // A whole-text object that never closes.
    let unclosed = format!("{{\"note\": \"{}", "y".repeat(10_000_000));
    assert!(json_blocks(&unclosed).is_empty());
}
