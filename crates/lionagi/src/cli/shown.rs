//! Text from outside shown by the command: model replies and reasoning, a
//! provider's error message, an MCP server's tool results, descriptions and
//! progress notes, a stored conversation's names and messages.
//!
//! A terminal acts on control characters. An escape sequence in a reply
//! could retitle the window, write the clipboard (OSC 52), make a link say
//! one thing and open another, hide text, or clear the screen and fake a
//! prompt; a lone carriage return overwrites what was just shown. So what
//! the command shows keeps line breaks and tabs and drops every other
//! control character (C0, DEL and C1, which some terminals read as the
//! escape sequences' introducers), and the bidirectional embeddings,
//! overrides and isolates, with which text shows in another order than it
//! reads in a terminal that lays out right-to-left text ("Trojan Source",
//! CVE-2021-42574). This is display only: the branch, the store and
//! `--json` keep the text as it came.

use std::borrow::Cow;

/// Whether `c` is left out of what is shown (line breaks and tabs aside).
fn hidden(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Whether `text` shows as it is on one line (nothing of it would be
/// dropped or changed by [`one_line`]).
pub(crate) fn shows_as_is(text: &str) -> bool {
    !text.chars().any(hidden)
}

/// `text` with every control character dropped but line breaks and tabs.
pub(crate) fn printable(text: &str) -> Cow<'_, str> {
    let kept = |c: &char| !hidden(*c) || matches!(c, '\n' | '\t');
    if text.chars().all(|c| kept(&c)) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(text.chars().filter(kept).collect())
}

/// `text` on one line: line breaks and tabs become spaces, every other
/// control character is dropped.
pub(crate) fn one_line(text: &str) -> Cow<'_, str> {
    if shows_as_is(text) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .filter_map(|c| match c {
                '\n' | '\r' | '\t' => Some(' '),
                c if hidden(c) => None,
                c => Some(c),
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What terminals act on: ESC sequences (CSI, OSC with BEL or ST
    /// ending), the C1 introducers, a bare carriage return, backspace.
    const HOSTILE: &str = "a\x1b[2J\x1b]52;c;cHduZWQ=\x07b\u{9b}31mc\u{9d}0;t\u{9c}d\re\x08f\x7f";

    #[test]
    fn control_characters_are_dropped_and_line_breaks_kept() {
        assert_eq!(printable(HOSTILE), "a[2J]52;c;cHduZWQ=b31mc0;tdef");
        assert_eq!(printable("one\n\ttwo\r\n"), "one\n\ttwo\n");
        assert!(matches!(
            printable("plain — ünïcode 漢字\n"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn bidirectional_overrides_are_dropped_and_marks_kept() {
        // An override that would show "exe.txt" as "txt.exe".
        assert_eq!(printable("file\u{202E}txt.exe\u{202C}"), "filetxt.exe");
        assert_eq!(one_line("a\u{2066}b\u{2069}c"), "abc");
        let marks = "שלום\u{200F} world\u{200E}";
        assert!(matches!(printable(marks), Cow::Borrowed(_)), "marks stay");
    }

    #[test]
    fn one_line_turns_breaks_into_spaces() {
        assert_eq!(one_line("a\nb\tc\r\nd"), "a b c  d");
        assert_eq!(one_line(HOSTILE), "a[2J]52;c;cHduZWQ=b31mc0;td ef");
        assert!(matches!(one_line("plain"), Cow::Borrowed(_)));
    }
}
