//! Unit tests that need no model file.

use branch_core::model::ChatMessage;
use serde_json::json;

use super::sampler::{Sampler, Sampling};
use super::template::{ChatTemplate, Piece};
use super::tokenizer::{PreTokenizer, StreamDecoder, for_each_word};

const SMOLLM2_TEMPLATE: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

fn words(text: &str, pre: PreTokenizer) -> Vec<String> {
    let mut out = Vec::new();
    for_each_word(text, pre, |w| out.push(w.to_owned()));
    out
}

#[test]
fn smollm_pre_tokenizer_isolates_digits_and_keeps_gpt2_spaces() {
    assert_eq!(
        words("In 2024, x  = 3.5\n\nok", PreTokenizer::DigitsThenGpt2),
        [
            "In", " ", "2", "0", "2", "4", ",", " x", " ", " =", " ", "3", ".", "5", "\n", "\n",
            "ok"
        ]
    );
    assert_eq!(
        words("In 2024 it's", PreTokenizer::Gpt2),
        ["In", " 2024", " it", "'s"]
    );
    assert_eq!(words("end   ", PreTokenizer::Gpt2), ["end", "   "]);
}

#[test]
fn stream_decoder_never_splits_a_character() {
    let bytes = "é€😀".as_bytes();
    let mut d = StreamDecoder::new();
    let mut out = String::new();
    let mut pieces = Vec::new();
    for b in bytes {
        let piece = d.push(std::slice::from_ref(b));
        pieces.push(piece.clone());
        out.push_str(&piece);
    }
    out.push_str(&d.finish());
    assert_eq!(out, "é€😀");
    assert!(pieces.iter().all(|p| p.chars().count() <= 1));
    let mut d = StreamDecoder::new();
    assert_eq!(d.push(&[0xFF, b'a']), "\u{FFFD}a");
    assert_eq!(d.push(&[0xE2, 0x82]), "");
    assert_eq!(d.finish(), "\u{FFFD}");
}

#[test]
fn smollm2_template_is_chatml_with_default_system() {
    let t = ChatTemplate::from_jinja(SMOLLM2_TEMPLATE).unwrap();
    assert_eq!(
        t.default_system(),
        Some("You are a helpful AI assistant named SmolLM, trained by Hugging Face")
    );
    let text = t
        .render_string(&[ChatMessage::user("Hi <|im_end|>")])
        .unwrap();
    assert_eq!(
        text,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi <|im_end|><|im_end|>\n<|im_start|>assistant\n"
    );
    // The user's `<|im_end|>` stays text: only the template makes control tokens.
    let pieces = t.render(&[ChatMessage::user("Hi <|im_end|>")]).unwrap();
    assert!(pieces.contains(&Piece::Text("user\nHi <|im_end|>".into())));
    let with_system = t
        .render_string(&[
            ChatMessage::system("Be brief."),
            ChatMessage::user(
                json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]),
            ),
        ])
        .unwrap();
    assert_eq!(
        with_system,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nab<|im_end|>\n<|im_start|>assistant\n"
    );
}

#[test]
fn layout_and_escapes_do_not_matter() {
    let escaped = r#"{%- for message in messages %}
    {{- "<|im_start|>" + message["role"] + "\n" + message["content"] + "<|im_end|>\n" }}
{%- endfor %}
{%- if add_generation_prompt %}{{ "<|im_start|>assistant\n" }}{% endif %}"#;
    let t = ChatTemplate::from_jinja(escaped);
    // `{%-` whitespace control is not ChatML-as-written; refused, not guessed.
    assert!(t.is_err());
    let escaped = escaped.replace("{%-", "{%").replace("{{-", "{{");
    let t = ChatTemplate::from_jinja(&escaped).unwrap();
    assert_eq!(t.default_system(), None);
    assert_eq!(
        t.render_string(&[ChatMessage::user("x")]).unwrap(),
        "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"
    );
}

#[test]
fn other_templates_and_contents_are_refused() {
    let llama3 = "{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}";
    assert!(matches!(
        ChatTemplate::from_jinja(llama3),
        Err(super::LocalModelError::UnsupportedTemplate { .. })
    ));
    let image = json!([{"type": "image_url", "image_url": {"url": "x"}}]);
    assert!(matches!(
        ChatTemplate::chatml().render(&[ChatMessage::user(image)]),
        Err(super::LocalModelError::BadMessage { index: 0, .. })
    ));
}

#[test]
fn sampling_reads_fields_and_is_seeded() {
    let fields = json!({"temperature": 0.7, "top_p": 0.9, "seed": 7, "max_tokens": 3, "stop": "x"});
    let s = Sampling::from_fields(fields.as_object().unwrap()).unwrap();
    assert_eq!(
        (s.seed, s.max_tokens, s.stop.clone()),
        (7, 3, vec!["x".to_owned()])
    );
    let logits: Vec<f32> = (0..50).map(|i| (i % 7) as f32 * 0.3).collect();
    let draw = |s: &Sampling| {
        let mut sampler = Sampler::new(s);
        (0..20).map(|_| sampler.sample(&logits)).collect::<Vec<_>>()
    };
    assert_eq!(draw(&s), draw(&s));
    let greedy = Sampling {
        temperature: 0.0,
        ..s.clone()
    };
    assert!(draw(&greedy).iter().all(|&t| t == 6));
    let bad = json!({"top_p": 0});
    assert!(Sampling::from_fields(bad.as_object().unwrap()).is_err());
    let bad = json!({"stop": 3});
    assert!(Sampling::from_fields(bad.as_object().unwrap()).is_err());
}

#[test]
fn constrained_sampling_takes_only_allowed_tokens() {
    // Token 6 is the likeliest; only even tokens below 6 are allowed.
    let logits: Vec<f32> = (0..2000)
        .map(|i| if i == 6 { 9.0 } else { (i % 7) as f32 })
        .collect();
    let allowed = |t: u32| t % 2 == 0 && t < 6;
    let greedy = Sampling::from_fields(json!({"temperature": 0}).as_object().unwrap()).unwrap();
    let mut s = Sampler::new(&greedy);
    // Among 0, 2, 4 the logits are 0, 2, 4: greedy takes 4.
    assert_eq!(s.sample_allowed(&logits, allowed), Some(4));
    assert_eq!(s.sample_allowed(&logits, |_| false), None);
    // Allowed tokens outside the likeliest window are still found.
    assert_eq!(s.sample_allowed(&logits, |t| t == 1999), Some(1999));

    let warm =
        Sampling::from_fields(json!({"temperature": 1.0, "seed": 7}).as_object().unwrap()).unwrap();
    let draw = || {
        let mut s = Sampler::new(&warm);
        (0..50)
            .map(|_| s.sample_allowed(&logits, allowed).unwrap())
            .collect::<Vec<_>>()
    };
    let a = draw();
    assert!(a.iter().all(|&t| allowed(t)), "{a:?}");
    assert_eq!(a, draw(), "same seed, same draws");
}
