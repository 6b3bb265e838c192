//! The GGUF's own tokenizer: GPT-2 style byte-level BPE read from
//! `tokenizer.ggml.{tokens,token_type,merges}`, with the pre-tokenizer the
//! GGUF names in `tokenizer.ggml.pre`.
//!
//! SmolLM2's pre-tokenizer (`smollm`) isolates every number character before
//! the GPT-2 split, so `2024` is four tokens; a plain GPT-2 split would
//! produce different ids than the model was trained on.

use std::collections::HashMap;
use std::sync::OnceLock;

use super::error::LocalModelError;

/// GGUF token type of control tokens (`<|im_start|>` ...).
const TOKEN_TYPE_CONTROL: i64 = 3;

/// How text is split into words before BPE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreTokenizer {
    /// GPT-2's split (`tokenizer.ggml.pre` = `gpt2` or `default`).
    Gpt2,
    /// Every number character alone, then GPT-2's split (`smollm`).
    DigitsThenGpt2,
}

impl PreTokenizer {
    /// The pre-tokenizer named by `tokenizer.ggml.pre`.
    pub fn from_gguf_name(name: &str) -> Result<Self, LocalModelError> {
        match name {
            "smollm" => Ok(Self::DigitsThenGpt2),
            "gpt2" | "default" => Ok(Self::Gpt2),
            other => Err(LocalModelError::UnsupportedTokenizer {
                what: format!("pre-tokenizer `{other}`"),
            }),
        }
    }
}

/// A byte-level BPE tokenizer.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    /// Bytes of each token (control tokens: their literal text).
    token_bytes: Vec<Vec<u8>>,
    /// Whether each token is a control token.
    control: Vec<bool>,
    /// Token id of each of the 256 byte symbols; `None` for the few a
    /// vocabulary lacks (bytes that never occur in its training text), which
    /// are dropped, as Hugging Face's BPE without an unknown token does.
    byte_ids: [Option<u32>; 256],
    /// `(left, right)` → `(rank, merged id)`.
    merges: super::bpe::Merges,
    /// Control tokens by text, longest first (for [`Tokenizer::encode_with_special`]).
    specials: Vec<(String, u32)>,
    /// Control tokens by text (the lowest id of a repeated spelling): the
    /// chat template's are looked up on every turn, and a vocabulary may
    /// hold millions.
    control_ids: HashMap<String, u32>,
    pre: PreTokenizer,
}

/// GPT-2's reversible byte ↔ printable character table.
fn byte_chars() -> &'static [char; 256] {
    static TABLE: OnceLock<[char; 256]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = ['\0'; 256];
        let mut extra = 0u32;
        for b in 0..=255u8 {
            let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
            table[usize::from(b)] = if printable {
                char::from(b)
            } else {
                extra += 1;
                char::from_u32(255 + extra).unwrap_or('\0')
            };
        }
        table
    })
}

fn char_to_byte() -> &'static HashMap<char, u8> {
    static MAP: OnceLock<HashMap<char, u8>> = OnceLock::new();
    MAP.get_or_init(|| {
        byte_chars()
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, u8::try_from(b).unwrap_or(0)))
            .collect()
    })
}

impl Tokenizer {
    /// Builds the tokenizer from the GGUF vocabulary (`tokens`), token types
    /// and merges (`"left right"` in rank order).
    pub fn new(
        tokens: Vec<String>,
        token_types: &[i64],
        merges: &[String],
        pre: PreTokenizer,
    ) -> Result<Self, LocalModelError> {
        if token_types.len() != tokens.len() {
            return Err(LocalModelError::bad_metadata(
                "tokenizer.ggml.token_type",
                "length differs from tokenizer.ggml.tokens",
            ));
        }
        let n = u32::try_from(tokens.len()).map_err(|_| {
            LocalModelError::bad_metadata("tokenizer.ggml.tokens", "too many tokens")
        })?;
        let ids: HashMap<&str, u32> = tokens
            .iter()
            .zip(0..n)
            .map(|(t, i)| (t.as_str(), i))
            .collect();
        let to_bytes = char_to_byte();
        let mut control = Vec::with_capacity(tokens.len());
        let mut token_bytes = Vec::with_capacity(tokens.len());
        let mut specials = Vec::new();
        for ((text, &ty), id) in tokens.iter().zip(token_types).zip(0..n) {
            let is_control = ty == TOKEN_TYPE_CONTROL;
            control.push(is_control);
            if is_control {
                token_bytes.push(text.as_bytes().to_vec());
                // An empty spelling would match at every position of a
                // text without consuming any of it.
                if !text.is_empty() {
                    specials.push((text.clone(), id));
                }
            } else {
                // Byte-level tokens are spelled in GPT-2's printable alphabet;
                // a character outside it stands for itself.
                let mut bytes = Vec::with_capacity(text.len());
                for c in text.chars() {
                    match to_bytes.get(&c) {
                        Some(&b) => bytes.push(b),
                        None => bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                    }
                }
                token_bytes.push(bytes);
            }
        }
        let mut control_ids = HashMap::with_capacity(specials.len());
        for (text, id) in &specials {
            control_ids.entry(text.clone()).or_insert(*id);
        }
        specials.sort_by_key(|s| std::cmp::Reverse(s.0.len()));
        let is_control = |id: u32| slot(&control, id).copied().unwrap_or(false);
        let mut byte_ids = [None; 256];
        for (b, c) in byte_chars().iter().enumerate() {
            byte_ids[b] = ids.get(c.to_string().as_str()).copied();
            // Plain text is made of these: one that is a control token
            // would let any text spell it.
            if byte_ids[b].is_some_and(is_control) {
                return Err(LocalModelError::bad_metadata(
                    "tokenizer.ggml.token_type",
                    "a byte symbol is a control token",
                ));
            }
        }
        if byte_ids.iter().filter(|i| i.is_some()).count() < 128 {
            return Err(LocalModelError::UnsupportedTokenizer {
                what: "vocabulary without GPT-2 byte symbols (not byte-level BPE)".into(),
            });
        }
        let mut merge_map = HashMap::with_capacity(merges.len());
        for (rank, merge) in merges.iter().enumerate() {
            let (left, right) = merge.split_once(' ').ok_or_else(|| {
                LocalModelError::bad_metadata(
                    "tokenizer.ggml.merges",
                    "an entry is not `left right`",
                )
            })?;
            let lookup = |s: &str| ids.get(s).copied();
            let merged = format!("{left}{right}");
            let (Some(l), Some(r), Some(m)) = (lookup(left), lookup(right), lookup(&merged)) else {
                return Err(LocalModelError::bad_metadata(
                    "tokenizer.ggml.merges",
                    "a merge names a token missing from the vocabulary",
                ));
            };
            // Merges build plain text's tokens: one making a control
            // token would turn text that spells it into the token itself.
            if is_control(m) {
                return Err(LocalModelError::bad_metadata(
                    "tokenizer.ggml.merges",
                    "a merge makes a control token",
                ));
            }
            let rank = u32::try_from(rank).unwrap_or(u32::MAX);
            merge_map.entry((l, r)).or_insert((rank, m));
        }
        Ok(Self {
            token_bytes,
            control,
            byte_ids,
            merges: merge_map,
            specials,
            control_ids,
            pre,
        })
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.token_bytes.len()
    }

    /// The id of a control token spelled `text` (`<|im_end|>` ...).
    pub fn control_id(&self, text: &str) -> Option<u32> {
        self.control_ids.get(text).copied()
    }

    /// Whether `id` is a control token.
    pub fn is_control(&self, id: u32) -> bool {
        slot(&self.control, id).copied().unwrap_or(false)
    }

    /// Encodes plain text: control-token spellings in it are ordinary text
    /// (a user typing `<|im_end|>` cannot end their turn early).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        self.encode_into(text, &mut out);
        out
    }

    /// Encodes text in which control-token spellings are the control tokens
    /// (what llama.cpp does with a rendered prompt), the longest spelling
    /// at the leftmost place first. Each place is compared with every
    /// spelling: for tests and tools. The prompt path never searches text
    /// for control tokens; the chat template places them.
    pub fn encode_with_special(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        let mut rest = text;
        'outer: while !rest.is_empty() {
            for (pos, _) in rest.char_indices() {
                let tail = &rest[pos..];
                if let Some((s, id)) = self
                    .specials
                    .iter()
                    .find(|(s, _)| tail.starts_with(s.as_str()))
                {
                    self.encode_into(&rest[..pos], &mut out);
                    out.push(*id);
                    rest = &tail[s.len()..];
                    continue 'outer;
                }
            }
            self.encode_into(rest, &mut out);
            break;
        }
        out
    }

    fn encode_into(&self, text: &str, out: &mut Vec<u32>) {
        for_each_word(text, self.pre, |word| self.bpe(word, out));
    }

    /// Byte-level BPE of one pre-tokenized word (see [`super::bpe`]).
    fn bpe(&self, word: &str, out: &mut Vec<u32>) {
        let symbols: Vec<u32> = word
            .bytes()
            .filter_map(|b| self.byte_ids[usize::from(b)])
            .collect();
        out.extend(super::bpe::merge(symbols, &self.merges));
    }

    /// The bytes of one token (control tokens: their spelling); empty for an
    /// id outside the vocabulary.
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        slot(&self.token_bytes, id).map_or(&[], Vec::as_slice)
    }

    /// Decodes ids to text, skipping control tokens; invalid UTF-8 becomes U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> String {
        let bytes: Vec<u8> = ids
            .iter()
            .filter(|&&id| !self.is_control(id))
            .flat_map(|&id| self.token_bytes(id).iter().copied())
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// The entry of token `id`, if the vocabulary has one.
fn slot<T>(per_token: &[T], id: u32) -> Option<&T> {
    per_token.get(usize::try_from(id).ok()?)
}

/// The GPT-2 split without its `\s+(?!\S)` look-ahead, which the `regex`
/// crate lacks; [`for_each_word`] restores it.
fn gpt2_regex() -> &'static regex::Regex {
    static RE: OnceLock<regex::Regex> = OnceLock::new();
    RE.get_or_init(|| {
        regex::Regex::new(r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+")
            .unwrap_or_else(|e| unreachable!("constant pattern: {e}"))
    })
}

/// Calls `f` with each pre-tokenized word of `text`.
pub fn for_each_word(text: &str, pre: PreTokenizer, mut f: impl FnMut(&str)) {
    match pre {
        PreTokenizer::Gpt2 => gpt2_split(text, &mut f),
        PreTokenizer::DigitsThenGpt2 => {
            let mut start = 0;
            for (pos, c) in text.char_indices() {
                if c.is_numeric() {
                    gpt2_split(&text[start..pos], &mut f);
                    let end = pos + c.len_utf8();
                    f(&text[pos..end]);
                    start = end;
                }
            }
            gpt2_split(&text[start..], &mut f);
        }
    }
}

fn gpt2_split(text: &str, f: &mut impl FnMut(&str)) {
    let re = gpt2_regex();
    let mut pos = 0;
    while pos < text.len() {
        let Some(m) = re.find_at(text, pos) else {
            f(&text[pos..]);
            return;
        };
        let mut end = m.end();
        let piece = m.as_str();
        // `\s+(?!\S)`: a whitespace run followed by a word leaves its last
        // character to that word (which takes it if it is a space).
        if end < text.len() && piece.chars().all(char::is_whitespace) {
            if let Some((last, _)) = piece.char_indices().next_back().filter(|(i, _)| *i > 0) {
                end = m.start() + last;
            }
        }
        if m.start() > pos {
            f(&text[pos..m.start()]);
        }
        f(&text[m.start()..end]);
        pos = end;
    }
}

/// Decodes a stream of tokens to text without splitting a UTF-8 character
/// across two deltas.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
}

impl StreamDecoder {
    /// A decoder with nothing pending.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a token's bytes; returns the text now complete (possibly empty).
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(std::str::from_utf8(&self.pending[..valid]).unwrap_or_default());
                    match e.error_len() {
                        // An incomplete character at the end: wait for more.
                        None => {
                            self.pending.drain(..valid);
                            return out;
                        }
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + bad);
                        }
                    }
                }
            }
        }
    }

    /// Whatever is left at the end (an incomplete character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 256 byte symbols, then `extra` (`!` first: a control token).
    fn vocab(extra: &[&str]) -> (Vec<String>, Vec<i64>) {
        let mut tokens: Vec<String> = byte_chars().iter().map(char::to_string).collect();
        let mut types = vec![1; tokens.len()];
        for t in extra {
            match t.strip_prefix('!') {
                Some(control) => {
                    tokens.push(control.to_owned());
                    types.push(TOKEN_TYPE_CONTROL);
                }
                None => {
                    tokens.push((*t).to_owned());
                    types.push(1);
                }
            }
        }
        (tokens, types)
    }

    fn tokenizer(extra: &[&str], merges: &[&str]) -> Result<Tokenizer, LocalModelError> {
        let (tokens, types) = vocab(extra);
        let merges: Vec<String> = merges.iter().map(|m| (*m).to_owned()).collect();
        Tokenizer::new(tokens, &types, &merges, PreTokenizer::Gpt2)
    }

    #[test]
    fn an_empty_control_token_is_never_found_in_text() {
        let tok = tokenizer(&["!", "!<c>", "!<c>"], &[]).unwrap();
        // A repeated spelling is its first token.
        let c = tok.control_id("<c>").unwrap();
        assert_eq!(c, 257);
        assert_eq!(tok.control_id(""), None);
        // Looped for ever, pushing the empty token's id, before it was
        // left out of the spellings searched for.
        let ids = tok.encode_with_special("a<c>b");
        assert_eq!(ids, [u32::from(b'a'), c, u32::from(b'b')]);
        assert_eq!(tok.decode(&ids), "ab");
    }

    #[test]
    fn plain_text_never_becomes_a_control_token() {
        // A merge making one: text spelling `ab` would be the control
        // token `ab`.
        let err = tokenizer(&["!ab"], &["a b"]).unwrap_err();
        assert!(
            err.to_string().contains("a merge makes a control token"),
            "{err}"
        );
        // A byte symbol that is one (the vocabulary spells `a` twice, the
        // second time as a control token, which the lookup by text finds).
        let err = tokenizer(&["!a"], &[]).unwrap_err();
        assert!(
            err.to_string().contains("a byte symbol is a control token"),
            "{err}"
        );
        // The same merge to an ordinary token is taken.
        let tok = tokenizer(&["ab"], &["a b"]).unwrap();
        assert_eq!(tok.encode("ab"), [256]);
        assert!(!tok.is_control(256));
    }
}
