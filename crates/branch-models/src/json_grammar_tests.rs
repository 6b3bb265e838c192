use serde_json::{Value, json};

use super::{Grammar, SchemaError};

fn whole(g: &Grammar, text: &str) -> bool {
    let mut s = g.start();
    s.feed(g, text.as_bytes()) && s.can_end()
}

/// What a `schemars` derive of `struct Fact { country: String, capital:
/// Option<City>, tags: Vec<Tag> }` looks like.
fn fact_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Fact",
        "type": "object",
        "properties": {
            "country": {"type": "string"},
            "capital": {"anyOf": [{"$ref": "#/$defs/City"}, {"type": "null"}]},
            "tags": {"type": "array", "items": {"$ref": "#/$defs/Tag"}},
            "score": {"type": ["number", "null"], "format": "double"}
        },
        "required": ["country", "tags"],
        "$defs": {
            "City": {"type": "object", "properties": {
                "name": {"type": "string"}, "population": {"type": "integer", "minimum": 0}}},
            "Tag": {"type": "string", "enum": ["big", "old", "coastal"]}
        }
    })
}

#[test]
fn a_schema_derived_document_is_accepted_and_complete() {
    let g = Grammar::compile(&fact_schema()).unwrap();
    for doc in [
        r#"{"country":"France","capital":{"name":"Paris","population":2100000},"tags":["big","old"],"score":0.5}"#,
        r#"{"country":"Nowhere","capital":null,"tags":[],"score":null}"#,
        r#"{"country":"Ch\u00e9 \"q\" \\ \/","capital":null,"tags":["coastal"],"score":-1.5e+3}"#,
    ] {
        let mut s = g.start();
        assert!(s.feed(&g, doc.as_bytes()), "{doc}");
        assert!(s.is_complete() && s.can_end(), "{doc}");
        assert!(!s.accepts(&g, b" "), "nothing may follow a whole document");
        serde_json::from_str::<Value>(doc).unwrap();
    }
}

#[test]
fn what_breaks_the_schema_is_refused_at_the_first_wrong_byte() {
    let g = Grammar::compile(&fact_schema()).unwrap();
    let s = g.start();
    for (bad, why) in [
        (r#"{"capital""#, "properties come in declaration order"),
        (r#"{ "country""#, "no whitespace"),
        (r#"{"country":1"#, "a string is required"),
        (
            r#"{"country":"a","capital":{"name":"P","population":1.5"#,
            "integer",
        ),
        (r#"{"country":"a","capital":null,"tags":["small""#, "enum"),
        (r#"{"country":"a","capital":null,"tags":[,"#, "array item"),
        (
            r#"{"country":"a","capital":null,"tags":[],"score":01"#,
            "leading zero",
        ),
        ("{\"country\":\"a\nb", "raw control character in a string"),
        (r#"{"country":"\x"#, "unknown escape"),
        (r#"{"country":"\u12g"#, "bad hex escape"),
        (r#"{"country":"a","extra""#, "undeclared property"),
        ("[", "the root is an object"),
    ] {
        assert!(!s.accepts(&g, bad.as_bytes()), "{why}: {bad}");
    }
    // Prefixes of a valid document are fine but not complete.
    let mut p = g.start();
    assert!(p.feed(&g, br#"{"country":"Fra"#));
    assert!(!p.can_end() && !p.is_complete() && !p.is_dead());
}

#[test]
fn numbers_end_where_their_parent_continues() {
    let g = Grammar::compile(&json!({"type": "array", "items": {"type": "number"}})).unwrap();
    assert!(whole(&g, "[0,-1,2.25,3e7,4E-2,10]"));
    assert!(!g.start().accepts(&g, b"[1.]"));
    assert!(!g.start().accepts(&g, b"[-]"));
    assert!(!g.start().accepts(&g, b"[1,]"));
    assert!(whole(&g, "[]"));

    let root = Grammar::compile(&json!({"type": "integer"})).unwrap();
    let mut s = root.start();
    assert!(s.feed(&root, b"12"));
    assert!(s.can_end(), "a root number may end here");
    assert!(!s.is_complete(), "and may also go on");
    assert!(s.feed(&root, b"3"));
    assert!(!root.start().accepts(&root, b"1.5"));
    // Digits are bounded, so a number always comes to an end.
    assert!(root.start().accepts(&root, b"1234567890123456"));
    assert!(!root.start().accepts(&root, b"12345678901234567"));
    let float = Grammar::compile(&json!({"type": "number"})).unwrap();
    assert!(float.start().accepts(&float, b"1.0000000000000000e-100"));
    assert!(!float.start().accepts(&float, b"1.00000000000000000"));
    assert!(!float.start().accepts(&float, b"1e1000"));
    let mut minus = root.start();
    assert!(minus.feed(&root, b"-"));
    assert!(!minus.can_end());
}

#[test]
fn enums_that_share_a_prefix_stay_apart() {
    let g = Grammar::compile(&json!({"enum": ["a", "ab", 1, 12, true, null]})).unwrap();
    for ok in [r#""a""#, r#""ab""#, "1", "12", "true", "null"] {
        assert!(whole(&g, ok), "{ok}");
    }
    for bad in [r#""abc""#, "123", "tru", "false", r#""b""#] {
        assert!(!whole(&g, bad), "{bad}");
    }
    let c = Grammar::compile(&json!({"const": {"k": [1, "x"]}})).unwrap();
    assert!(whole(&c, r#"{"k":[1,"x"]}"#));
    assert!(!whole(&c, r#"{"k":[1]}"#));
}

#[test]
fn schema_less_values_and_free_objects_take_any_json() {
    let any = Grammar::compile(&json!({})).unwrap();
    for doc in [
        r#"{"a":[1,{"b":null}],"c":"x","d":-0.5}"#,
        "[true,false,[]]",
        r#""s""#,
        "{}",
    ] {
        assert!(whole(&any, doc), "{doc}");
    }
    assert!(!any.start().accepts(&any, b"{\"a\"1"));
    assert!(!any.start().accepts(&any, b"{1"));
    assert!(!any.start().accepts(&any, b"nul1"));

    let long_key = format!("{{\"{}\"", "k".repeat(65));
    assert!(!any.start().accepts(&any, long_key.as_bytes()));
    let bounded = Grammar::compile(&json!({"type": "string", "maxLength": 3})).unwrap();
    assert!(
        whole(&bounded, r#""a\"é""#),
        "an escape and a two-byte character count once"
    );
    assert!(!bounded.start().accepts(&bounded, br#""abcd"#));
    assert!(Grammar::compile(&json!({"type": "string", "maxLength": -1})).is_err());

    let obj = Grammar::any_object();
    assert!(whole(&obj, r#"{"a":{"b":[1,2]},"c":true}"#));
    assert!(whole(&obj, "{}"));
    assert!(!obj.start().accepts(&obj, b"[1]"));
    assert!(!obj.start().accepts(&obj, b"\"x\""));

    let free = Grammar::compile(&json!({"type": "object", "properties": {
        "meta": {"type": "object"}}}))
    .unwrap();
    assert!(whole(&free, r#"{"meta":{"anything":[1]}}"#));
    assert!(!free.start().accepts(&free, br#"{"meta":[]"#));
}

#[test]
fn recursive_references_nest_and_self_references_end() {
    let tree = json!({
        "$ref": "#/$defs/Node",
        "$defs": {"Node": {"type": "object", "properties": {
            "name": {"type": "string"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}}
    });
    let g = Grammar::compile(&tree).unwrap();
    assert!(whole(
        &g,
        r#"{"name":"a","children":[{"name":"b","children":[]},{"name":"c","children":[{"name":"d","children":[]}]}]}"#
    ));

    // A reference to itself that never reaches a text: refused, not a hang.
    let looped = json!({"$ref": "#/$defs/A", "$defs": {"A": {"$ref": "#/$defs/A"}}});
    let g = Grammar::compile(&looped).unwrap();
    assert!(!g.start().accepts(&g, b"{"));
}

#[test]
fn bad_schemas_name_the_keyword_at_fault() {
    let cases = [
        (json!({"type": "text"}), "#/type"),
        (
            json!({"properties": {"a": {"enum": []}}}),
            "#/properties/a/enum",
        ),
        (json!({"$ref": "#/$defs/Missing"}), "#"),
        (json!({"anyOf": "x"}), "#/anyOf"),
        (json!({"allOf": [{}, {}]}), "#/allOf"),
        (
            json!({"type": "object", "properties": {"a": 3}}),
            "#/properties/a",
        ),
        (json!(false), "#"),
    ];
    for (schema, path) in cases {
        let err: SchemaError = Grammar::compile(&schema).unwrap_err();
        assert_eq!(err.path, path, "{schema}: {err}");
        assert!(err.to_string().contains(path));
    }
}

#[test]
fn feeding_a_token_at_once_equals_feeding_its_bytes() {
    let g = Grammar::compile(&fact_schema()).unwrap();
    let doc = br#"{"country":"Peru","capital":null,"tags":["old"],"score":7}"#;
    for cut in 0..doc.len() {
        let mut whole_token = g.start();
        assert!(whole_token.feed(&g, &doc[..cut]));
        let mut bytes = g.start();
        for b in &doc[..cut] {
            assert!(bytes.feed(&g, std::slice::from_ref(b)));
        }
        assert_eq!(whole_token, bytes);
        assert!(whole_token.accepts(&g, &doc[cut..]));
    }
}

#[test]
fn strings_accept_only_well_formed_utf8() {
    // Found by fuzzing (fuzz/seeds/json_grammar/regression-invalid-utf8-in-string.bin):
    // a byte that cannot start a UTF-8 character was accepted inside a string.
    let g = Grammar::compile(&json!({"type": "string"})).unwrap();
    let accepts = |bytes: &[u8]| {
        let mut s = g.start();
        s.feed(&g, bytes) && s.can_end()
    };
    assert!(accepts("\"é😀€\"".as_bytes()));
    for bad in [
        &b"\"\xfd\""[..],
        b"\"\x80\"",
        b"\"\xc0\xaf\"",
        b"\"\xe0\x80\xaf\"",
        b"\"\xed\xa0\x80\"",
        b"\"\xf4\x90\x80\x80\"",
        b"\"\xc3\"",
    ] {
        assert!(!accepts(bad), "{bad:?}");
    }
}
