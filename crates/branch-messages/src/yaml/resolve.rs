//! Which plain strings a YAML 1.1 reader would take for something other
//! than a string (PyYAML's implicit resolvers). Such strings must be quoted
//! so they read back as text: `'123'`, `'yes'`, `'null'`, `'2024-01-01'`.

/// Whether `s`, written plain, would resolve to a non-string tag.
pub(crate) fn resolves_to_non_string(s: &str) -> bool {
    let Some(&first) = s.as_bytes().first() else {
        return true;
    };
    // Most text (every rendered key, most words) is told apart by its first
    // byte, before the ten patterns below are tried one by one.
    if !may_start_non_string(first) {
        return false;
    }
    is_null(s) || is_bool(s) || is_int(s) || is_float(s) || is_timestamp(s) || s == "<<" || s == "="
}

fn is_null(s: &str) -> bool {
    matches!(s, "~" | "null" | "Null" | "NULL")
}

fn is_bool(s: &str) -> bool {
    matches!(
        s,
        "yes"
            | "Yes"
            | "YES"
            | "no"
            | "No"
            | "NO"
            | "true"
            | "True"
            | "TRUE"
            | "false"
            | "False"
            | "FALSE"
            | "on"
            | "On"
            | "ON"
            | "off"
            | "Off"
            | "OFF"
    )
}

/// Whether a string starting with `b` can match any pattern of
/// [`resolves_to_non_string`]: numbers and timestamps start with a sign, a
/// dot or a digit; nulls and booleans with `~` or one of their letters;
/// the merge and value keys with `<` and `=`.
fn may_start_non_string(b: u8) -> bool {
    matches!(b, b'0'..=b'9' | b'+' | b'-' | b'.' | b'~' | b'<' | b'=') || b"nNyYtTfFoO".contains(&b)
}

/// A byte cursor for the small hand-written patterns below.
struct Cur<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cur<'a> {
    fn new(s: &'a str) -> Self {
        Self {
            b: s.as_bytes(),
            i: 0,
        }
    }
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }
    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn eat_if(&mut self, f: impl Fn(u8) -> bool) -> bool {
        match self.peek() {
            Some(c) if f(c) => {
                self.i += 1;
                true
            }
            _ => false,
        }
    }
    /// Consumes as many matching bytes as possible; returns how many.
    fn eat_while(&mut self, f: impl Fn(u8) -> bool) -> usize {
        let start = self.i;
        while self.eat_if(&f) {}
        self.i - start
    }
    fn eat_str(&mut self, s: &str) -> bool {
        if self.b[self.i..].starts_with(s.as_bytes()) {
            self.i += s.len();
            true
        } else {
            false
        }
    }
    fn done(&self) -> bool {
        self.i == self.b.len()
    }
    fn sign(&mut self) {
        let _ = self.eat(b'+') || self.eat(b'-');
    }
}

fn digit(c: u8) -> bool {
    c.is_ascii_digit()
}
fn digit_(c: u8) -> bool {
    c.is_ascii_digit() || c == b'_'
}

/// `(:[0-5]?[0-9])+` — the sexagesimal tail of YAML 1.1 numbers.
fn sexagesimal_tail(c: &mut Cur<'_>) -> bool {
    let mut any = false;
    loop {
        let save = c.i;
        if !c.eat(b':') {
            break;
        }
        let a = c.eat_if(|x| (b'0'..=b'5').contains(&x));
        let b = c.eat_if(digit);
        if !b {
            // `[0-5]?` then `[0-9]`: a single digit may be the mandatory one.
            if a {
                any = true;
                continue;
            }
            c.i = save;
            break;
        }
        any = true;
    }
    any
}

fn is_int(s: &str) -> bool {
    let alternatives: [fn(&mut Cur<'_>) -> bool; 5] = [
        |c| {
            c.sign();
            c.eat_str("0b") && c.eat_while(|x| x == b'0' || x == b'1' || x == b'_') > 0
        },
        |c| {
            c.sign();
            c.eat(b'0') && c.eat_while(|x| (b'0'..=b'7').contains(&x) || x == b'_') > 0
        },
        |c| {
            c.sign();
            if c.eat(b'0') {
                return true;
            }
            c.eat_if(|x| (b'1'..=b'9').contains(&x)) && {
                c.eat_while(digit_);
                true
            }
        },
        |c| {
            c.sign();
            c.eat_str("0x") && c.eat_while(|x| x.is_ascii_hexdigit() || x == b'_') > 0
        },
        |c| {
            c.sign();
            c.eat_if(|x| (b'1'..=b'9').contains(&x)) && {
                c.eat_while(digit_);
                sexagesimal_tail(c)
            }
        },
    ];
    alternatives.iter().any(|f| {
        let mut c = Cur::new(s);
        f(&mut c) && c.done()
    })
}

fn exponent(c: &mut Cur<'_>) {
    let save = c.i;
    if c.eat_if(|x| x == b'e' || x == b'E')
        && c.eat_if(|x| x == b'+' || x == b'-')
        && c.eat_while(digit) > 0
    {
        return;
    }
    c.i = save;
}

fn is_float(s: &str) -> bool {
    let alternatives: [fn(&mut Cur<'_>) -> bool; 5] = [
        |c| {
            c.sign();
            c.eat_if(digit)
                && {
                    c.eat_while(digit_);
                    c.eat(b'.')
                }
                && {
                    c.eat_while(digit_);
                    exponent(c);
                    true
                }
        },
        |c| {
            c.eat(b'.') && c.eat_if(digit) && {
                c.eat_while(digit_);
                exponent(c);
                true
            }
        },
        |c| {
            c.sign();
            c.eat_if(digit)
                && {
                    c.eat_while(digit_);
                    sexagesimal_tail(c)
                }
                && c.eat(b'.')
                && {
                    c.eat_while(digit_);
                    true
                }
        },
        |c| {
            c.sign();
            c.eat(b'.') && (c.eat_str("inf") || c.eat_str("Inf") || c.eat_str("INF"))
        },
        |c| c.eat(b'.') && (c.eat_str("nan") || c.eat_str("NaN") || c.eat_str("NAN")),
    ];
    alternatives.iter().any(|f| {
        let mut c = Cur::new(s);
        f(&mut c) && c.done()
    })
}

fn is_timestamp(s: &str) -> bool {
    let mut c = Cur::new(s);
    let n = |c: &mut Cur<'_>, min: usize, max: usize| {
        let k = c.eat_while(digit);
        (min..=max).contains(&k)
    };
    // `YYYY-MM-DD` exactly.
    {
        let mut d = Cur::new(s);
        if n(&mut d, 4, 4)
            && d.eat(b'-')
            && n(&mut d, 2, 2)
            && d.eat(b'-')
            && n(&mut d, 2, 2)
            && d.done()
        {
            return true;
        }
    }
    if !(n(&mut c, 4, 4) && c.eat(b'-') && n(&mut c, 1, 2) && c.eat(b'-') && n(&mut c, 1, 2)) {
        return false;
    }
    if !(c.eat(b'T') || c.eat(b't') || c.eat_while(|x| x == b' ' || x == b'\t') > 0) {
        return false;
    }
    if !(n(&mut c, 1, 2) && c.eat(b':') && n(&mut c, 2, 2) && c.eat(b':') && n(&mut c, 2, 2)) {
        return false;
    }
    if c.eat(b'.') {
        c.eat_while(digit);
    }
    if c.done() {
        return true;
    }
    c.eat_while(|x| x == b' ' || x == b'\t');
    if c.eat(b'Z') {
        return c.done();
    }
    if !(c.eat(b'+') || c.eat(b'-')) || !n(&mut c, 1, 2) {
        return false;
    }
    if c.eat(b':') && !n(&mut c, 2, 2) {
        return false;
    }
    c.done()
}

#[cfg(test)]
mod tests {
    use super::resolves_to_non_string as r;
    use super::*;

    /// The first-byte shortcut turns away only strings that no pattern
    /// matches: every other first byte, followed by each tail that makes a
    /// pattern match after one of the allowed bytes.
    #[test]
    fn the_first_byte_shortcut_loses_no_match() {
        let tails = [
            "",
            "1",
            "0",
            "_0",
            "inf",
            "nan",
            "NaN",
            "INF",
            "ull",
            "ULL",
            "es",
            "ES",
            "o",
            "O",
            "rue",
            "RUE",
            "alse",
            "ALSE",
            "n",
            "N",
            "ff",
            "FF",
            "<",
            "b1",
            "x1",
            "1:30",
            "1.5",
            "024-01-01",
            "e+5",
            ".5",
        ];
        let patterns = |s: &str| {
            is_null(s)
                || is_bool(s)
                || is_int(s)
                || is_float(s)
                || is_timestamp(s)
                || s == "<<"
                || s == "="
        };
        for first in 0..=u8::MAX {
            if may_start_non_string(first) || !first.is_ascii() {
                continue;
            }
            for tail in tails {
                let s = format!("{}{tail}", char::from(first));
                assert!(!patterns(&s), "{s:?}");
                assert!(!r(&s), "{s:?}");
            }
        }
        // And each allowed first byte is needed by some string.
        for s in [
            "+1", "-1", ".5", "1", "~", "<<", "=", "no", "No", "yes", "Yes", "true",
        ] {
            assert!(r(s), "{s:?}");
        }
        for s in ["True", "false", "False", "on", "On", "OFF", "NULL"] {
            assert!(r(s), "{s:?}");
        }
    }

    #[test]
    fn quoted_like_pyyaml() {
        for s in [
            "",
            "yes",
            "No",
            "OFF",
            "null",
            "~",
            "123",
            "-1_000",
            "0o7",
            "0x1F",
            "0b101",
            "017",
            "1:30",
            "1.5",
            "-.inf",
            ".NaN",
            "1.0e+5",
            "2024-01-01",
            "2001-12-14t21:59:43.10-05:00",
            "2001-12-14 21:59:43.10",
            "1_0.5",
            "<<",
            "=",
        ] {
            // "0o7" is not YAML 1.1 octal; it is a string.
            assert_eq!(r(s), s != "0o7", "{s:?}");
        }
        for s in [
            "1e5", "abc", "- dash", "x'y", "1.2.3", "12:", "2024-1-1", "nulls", "0x",
        ] {
            assert!(!r(s), "{s:?}");
        }
    }
}
