//! Scalar style selection and writing, following PyYAML's emitter: which
//! strings may stay plain, which are single- or double-quoted, and which
//! multi-line strings become literal blocks.

use super::resolve::resolves_to_non_string;

/// How a scalar is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    Plain,
    Single,
    Double,
    Literal,
}

/// What the emitter learns about a string before choosing its style.
struct Analysis {
    empty: bool,
    multiline: bool,
    allow_block_plain: bool,
    allow_single_quoted: bool,
    allow_block: bool,
}

fn is_break(c: char) -> bool {
    matches!(c, '\n' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

fn is_space_or_break(c: char) -> bool {
    matches!(c, '\0' | ' ' | '\t' | '\r') || is_break(c)
}

/// Printable with `allow_unicode` on: what may appear unescaped.
fn is_printable_unicode(c: char) -> bool {
    matches!(c, '\u{85}' | '\u{A0}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..='\u{10FFFE}')
        && c != '\u{FEFF}'
}

fn analyze(s: &str) -> Analysis {
    if s.is_empty() {
        return Analysis {
            empty: true,
            multiline: false,
            allow_block_plain: true,
            allow_single_quoted: true,
            allow_block: false,
        };
    }
    let n = s.chars().count();
    // `ahead` runs two characters in front of the loop: it yields the
    // character after the next one (no collected copy of the text).
    let mut ahead = s.chars();
    ahead.next();
    let second = ahead.next();
    let mut block_indicators = s.starts_with("---") || s.starts_with("...");
    let mut line_breaks = false;
    let mut special = false;
    let (mut leading_space, mut leading_break) = (false, false);
    let (mut trailing_space, mut trailing_break) = (false, false);
    let (mut break_space, mut space_break) = (false, false);
    let mut preceded_by_ws = true;
    let mut followed_by_ws = second.is_none_or(is_space_or_break);
    let (mut prev_space, mut prev_break) = (false, false);
    for (i, c) in s.chars().enumerate() {
        if i == 0 {
            if "#,[]{}&*!|>'\"%@`".contains(c) {
                block_indicators = true;
            }
            if (c == '?' || c == ':') && followed_by_ws {
                block_indicators = true;
            }
            if c == '-' && followed_by_ws {
                block_indicators = true;
            }
        } else {
            if c == ':' && followed_by_ws {
                block_indicators = true;
            }
            if c == '#' && preceded_by_ws {
                block_indicators = true;
            }
        }
        if is_break(c) {
            line_breaks = true;
        }
        if !(c == '\n' || (' '..='~').contains(&c) || is_printable_unicode(c)) {
            special = true;
        }
        if c == ' ' {
            if i == 0 {
                leading_space = true;
            }
            if i == n - 1 {
                trailing_space = true;
            }
            if prev_break {
                break_space = true;
            }
            prev_space = true;
            prev_break = false;
        } else if is_break(c) {
            if i == 0 {
                leading_break = true;
            }
            if i == n - 1 {
                trailing_break = true;
            }
            if prev_space {
                space_break = true;
            }
            prev_space = false;
            prev_break = true;
        } else {
            prev_space = false;
            prev_break = false;
        }
        preceded_by_ws = is_space_or_break(c);
        followed_by_ws = ahead.next().is_none_or(is_space_or_break);
    }
    let mut a = Analysis {
        empty: false,
        multiline: line_breaks,
        allow_block_plain: true,
        allow_single_quoted: true,
        allow_block: true,
    };
    if leading_space || leading_break || trailing_space || trailing_break {
        a.allow_block_plain = false;
    }
    if trailing_space {
        a.allow_block = false;
    }
    if break_space {
        a.allow_block_plain = false;
        a.allow_single_quoted = false;
    }
    if space_break || special {
        a.allow_block_plain = false;
        a.allow_single_quoted = false;
        a.allow_block = false;
    }
    if line_breaks {
        a.allow_block_plain = false;
        // A single-quoted scalar may span lines in PyYAML; lionagi-rs
        // double-quotes instead (only reachable with U+0085/U+2028/U+2029,
        // since strings holding `\n` ask for a literal block).
        a.allow_single_quoted = false;
    }
    if block_indicators {
        a.allow_block_plain = false;
    }
    a
}

/// Chooses the style of a string scalar in block context. `simple_key` is
/// true when the string is a mapping key.
pub(crate) fn choose_style(s: &str, simple_key: bool) -> Style {
    if is_plain_text(s) && !resolves_to_non_string(s) {
        return Style::Plain;
    }
    choose_style_analyzed(s, simple_key)
}

/// Text that [`analyze`] would find free of indicators, breaks, special
/// characters and leading or trailing spaces (so only the implicit
/// resolvers can stop it from being plain), recognised without the full
/// analysis: it starts with an ASCII letter, does not end with a space,
/// and holds only ASCII letters, digits, spaces and `_.,!?-()'/`.
fn is_plain_text(s: &str) -> bool {
    let b = s.as_bytes();
    b.first().is_some_and(u8::is_ascii_alphabetic)
        && b.last() != Some(&b' ')
        && b.iter().all(|&c| PLAIN_BYTES[usize::from(c)])
}

/// The bytes [`is_plain_text`] lets through, as a table: one load a byte
/// instead of a chain of compares (every rendered instruction's keys and
/// most of its words pass here).
static PLAIN_BYTES: [bool; 256] = {
    let mut t = [false; 256];
    let mut c: u8 = 0;
    loop {
        // Widening: every `u8` indexes the table.
        t[c as usize] = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b' ' | b'_' | b'.' | b',' | b'!' | b'?' | b'-' | b'(' | b')' | b'\'' | b'/'
            );
        if c == u8::MAX {
            break t;
        }
        c += 1;
    }
};

/// [`choose_style`] by the full analysis.
fn choose_style_analyzed(s: &str, simple_key: bool) -> Style {
    let a = analyze(s);
    let wants_literal = s.contains('\n');
    if !wants_literal
        && !resolves_to_non_string(s)
        && !(simple_key && (a.empty || a.multiline))
        && a.allow_block_plain
    {
        return Style::Plain;
    }
    if wants_literal {
        if !simple_key && a.allow_block {
            return Style::Literal;
        }
        return Style::Double;
    }
    if a.allow_single_quoted && !(simple_key && a.multiline) {
        return Style::Single;
    }
    Style::Double
}

/// A single-quoted scalar: quotes doubled.
pub(crate) fn single_quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// A double-quoted scalar with PyYAML's escapes (`allow_unicode` on).
pub(crate) fn double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        let plain = (' '..='~').contains(&c)
            || matches!(c, '\u{A0}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}');
        if plain && c != '"' && c != '\\' && c != '\u{FEFF}' {
            out.push(c);
            continue;
        }
        let named = match c {
            '\0' => Some('0'),
            '\u{07}' => Some('a'),
            '\u{08}' => Some('b'),
            '\t' => Some('t'),
            '\n' => Some('n'),
            '\u{0B}' => Some('v'),
            '\u{0C}' => Some('f'),
            '\r' => Some('r'),
            '\u{1B}' => Some('e'),
            '"' => Some('"'),
            '\\' => Some('\\'),
            '\u{85}' => Some('N'),
            '\u{A0}' => Some('_'),
            '\u{2028}' => Some('L'),
            '\u{2029}' => Some('P'),
            _ => None,
        };
        match named {
            Some(e) => {
                out.push('\\');
                out.push(e);
            }
            None => {
                let cp = c as u32;
                if cp <= 0xFF {
                    out.push_str(&format!("\\x{cp:02X}"));
                } else if cp <= 0xFFFF {
                    out.push_str(&format!("\\u{cp:04X}"));
                } else {
                    out.push_str(&format!("\\U{cp:08X}"));
                }
            }
        }
    }
    out.push('"');
    out
}

/// The block header of a literal scalar: `|`, plus an indentation hint
/// when the text starts with a space or break, plus the chomping hint
/// (`-` without a final break, `+` with more than one).
pub(crate) fn literal_header(s: &str, indent: usize) -> String {
    let mut h = String::from("|");
    let first = s.chars().next();
    if first.is_some_and(|c| c == ' ' || is_break(c)) {
        h.push_str(&indent.to_string());
    }
    let mut rev = s.chars().rev();
    match (rev.next(), rev.next()) {
        (Some(last), _) if !is_break(last) => h.push('-'),
        (Some(_), None) => h.push('+'),
        (Some(_), Some(prev)) if is_break(prev) => h.push('+'),
        _ => {}
    }
    h
}

/// Whether a literal header keeps trailing breaks (`+`), which leaves the
/// document open-ended.
pub(crate) fn literal_keeps(header: &str) -> bool {
    header.ends_with('+')
}

/// The body lines of a literal block at `indent`: each content line is
/// indented, empty lines stay empty, the text's final break ends the block.
pub(crate) fn literal_body(s: &str, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    let mut at_line_start = true;
    for c in s.chars() {
        if is_break(c) {
            out.push(if c == '\n' { '\n' } else { c });
            at_line_start = true;
        } else {
            if at_line_start {
                out.push_str(&pad);
                at_line_start = false;
            }
            out.push(c);
        }
    }
    if !at_line_start {
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn styles_match_the_verified_samples() {
        assert_eq!(choose_style("a: b", false), Style::Single);
        assert_eq!(choose_style("plain text", false), Style::Plain);
        assert_eq!(choose_style("- dash", false), Style::Single);
        assert_eq!(choose_style("#hash", false), Style::Single);
        assert_eq!(choose_style("x'y", false), Style::Plain);
        assert_eq!(choose_style("héllo", false), Style::Plain);
        assert_eq!(choose_style("multi\nline", false), Style::Literal);
        assert_eq!(choose_style("trailing \nspace", false), Style::Double);
        assert_eq!(choose_style("tab\there", false), Style::Double);
        assert_eq!(choose_style("$defs", true), Style::Plain);
        assert_eq!(choose_style("null", false), Style::Single);
        assert_eq!(choose_style(" lead", false), Style::Single);
        assert_eq!(choose_style("a #b", false), Style::Single);
        assert_eq!(choose_style("a#b", false), Style::Plain);
        assert_eq!(choose_style("ends:", false), Style::Single);
        assert_eq!(choose_style("http://x", false), Style::Plain);
    }

    #[test]
    fn the_plain_text_shortcut_agrees_with_the_analysis() {
        let samples = [
            "Guidance",
            "Instruction",
            "You are a benchmark.",
            "Question 0",
            "a - b",
            "x'y",
            "ends.",
            "yes",
            "No",
            "null",
            "true",
            "e1",
            "a (b) c/d",
            "Wait, what?",
            "tail ",
            "a  b",
            "a_b",
            "x-",
            "a.b.c",
            "It's fine!",
        ];
        for s in samples {
            for key in [false, true] {
                if is_plain_text(s) {
                    assert_eq!(
                        choose_style(s, key),
                        choose_style_analyzed(s, key),
                        "{s:?} key={key}"
                    );
                }
            }
        }
        // Every ASCII byte inside and at the end of a word: whatever the
        // table lets through, the full analysis also writes plain.
        for c in (0..=0x7F_u8).map(char::from) {
            for s in [format!("a{c}b"), format!("a{c}"), format!("Ab{c}{c}9")] {
                for key in [false, true] {
                    if is_plain_text(&s) {
                        assert_eq!(
                            choose_style(&s, key),
                            choose_style_analyzed(&s, key),
                            "{s:?} key={key}"
                        );
                    }
                }
            }
        }
        assert!(is_plain_text("Question 0") && !is_plain_text("tail "));
        assert!(!is_plain_text("a: b") && !is_plain_text("#x") && !is_plain_text("-x"));
    }

    #[test]
    fn escapes_and_headers() {
        assert_eq!(
            double_quoted("a\"b\\\n\t😀"),
            "\"a\\\"b\\\\\\n\\t\\U0001F600\""
        );
        assert_eq!(literal_header("a\nb", 2), "|-");
        assert_eq!(literal_header("a\nb\n", 2), "|");
        assert_eq!(literal_header("a\n\n", 2), "|+");
        assert_eq!(literal_header(" a\nb", 2), "|2-");
    }
}
