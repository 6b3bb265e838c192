//! The canonical id form, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, read
//! without the general parser's detour.
//!
//! Every id a branch writes is in this form, and restoring a history parses
//! three of them a message (its id, its place in the order, a participant).
//! `uuid`'s parser gathers the 32 digits one byte at a time, which was
//! about half of its cost; here the five groups are copied whole and the
//! digits decoded in one branch-free pass the compiler vectorizes. It
//! accepts exactly what `Uuid::parse_str` accepts in this form (hex digits
//! of either case, hyphens at 8, 13, 18 and 23) and gives the same value;
//! any other text is `None`, for the caller's general parser to judge.

use uuid::Uuid;

/// Reads `s` if it is a hyphenated id of 36 bytes.
pub(crate) fn parse_hyphenated(s: &[u8]) -> Option<Uuid> {
    decode(&digits(s)?).map(Uuid::from_bytes)
}

/// The 32 digit bytes of a hyphenated id, in order, once its length and
/// its four hyphens are checked (the digits are checked by [`decode`]).
fn digits(s: &[u8]) -> Option<[u8; 32]> {
    let s: &[u8; 36] = s.try_into().ok()?;
    // Every index and range below is a constant within a fixed-size
    // array: none can fail, and none is checked at run time.
    if [s[8], s[13], s[18], s[23]] != [b'-'; 4] {
        return None;
    }
    let mut hex = [0u8; 32];
    hex[..8].copy_from_slice(&s[..8]);
    hex[8..12].copy_from_slice(&s[9..13]);
    hex[12..16].copy_from_slice(&s[14..18]);
    hex[16..20].copy_from_slice(&s[19..23]);
    hex[20..].copy_from_slice(&s[24..]);
    Some(hex)
}

/// Sixteen bytes from 32 hex digits of either case, or `None` if any byte
/// is no hex digit. Every byte is decoded whether or not an earlier one
/// failed: without a branch a byte, the loop is vectorized.
fn decode(hex: &[u8; 32]) -> Option<[u8; 16]> {
    let mut nibbles = [0u8; 32];
    let mut bad = 0u8;
    for (nibble, &c) in nibbles.iter_mut().zip(hex) {
        let digit = c.wrapping_sub(b'0');
        // Setting bit 5 folds `A`..=`F` onto `a`..=`f`; no other byte
        // lands there.
        let letter = (c | 0x20).wrapping_sub(b'a');
        let is_digit = digit < 10;
        let is_letter = letter < 6;
        *nibble = if is_digit {
            digit
        } else {
            letter.wrapping_add(10)
        };
        bad |= u8::from(!(is_digit | is_letter));
    }
    if bad != 0 {
        return None;
    }
    let mut bytes = [0u8; 16];
    for (byte, pair) in bytes.iter_mut().zip(nibbles.chunks_exact(2)) {
        if let [high, low] = *pair {
            // Both are below 16: the shift loses nothing.
            *byte = (high << 4) | low;
        }
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "6e215c90-0fc7-4af0-8fc0-c5dc415c1108";

    /// The reference: what `Uuid::parse_str` reads in the hyphenated form.
    fn reference(s: &[u8]) -> Option<Uuid> {
        let s = std::str::from_utf8(s).ok()?;
        (s.len() == 36).then(|| Uuid::parse_str(s).ok()).flatten()
    }

    fn agrees(s: &[u8]) {
        assert_eq!(parse_hyphenated(s), reference(s), "{:?}", s.escape_ascii());
    }

    #[test]
    fn the_canonical_form_reads_as_uuid_reads_it() {
        assert_eq!(parse_hyphenated(ID.as_bytes()), Uuid::parse_str(ID).ok());
        assert!(parse_hyphenated(ID.as_bytes()).is_some());
        let upper = ID.to_ascii_uppercase();
        assert_eq!(parse_hyphenated(upper.as_bytes()), Uuid::parse_str(ID).ok());
        for id in [
            "00000000-0000-0000-0000-000000000000",
            "ffffffff-ffff-ffff-ffff-ffffffffffff",
            "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF",
            "01234567-89ab-cdef-ABCD-EF0123456789",
        ] {
            assert!(parse_hyphenated(id.as_bytes()).is_some(), "{id}");
            agrees(id.as_bytes());
        }
    }

    /// Every byte value at every position: read or refused as `uuid` does.
    #[test]
    fn every_byte_at_every_position_agrees_with_uuid() {
        for at in 0..36 {
            for b in 0..=u8::MAX {
                let mut s = ID.as_bytes().to_vec();
                s[at] = b;
                agrees(&s);
            }
        }
    }

    /// Each digit in either case, one position at a time and all at once.
    #[test]
    fn every_case_mix_agrees_with_uuid() {
        let lower = "abcdefab-cdef-abcd-efab-cdefabcdefab";
        let letters: Vec<usize> = (0..36)
            .filter(|&i| i != 8 && i != 13 && i != 18 && i != 23)
            .collect();
        for mask in 0..1u32 << 16 {
            // Sixteen positions from the 32, spread over every group.
            let s: Vec<u8> = lower
                .bytes()
                .enumerate()
                .map(|(i, c)| {
                    let bit = letters.iter().position(|&l| l == i).map(|p| p / 2);
                    match bit {
                        Some(bit) if mask >> bit & 1 == 1 => c.to_ascii_uppercase(),
                        _ => c,
                    }
                })
                .collect();
            assert_eq!(parse_hyphenated(&s), Uuid::parse_str(lower).ok());
        }
    }

    /// The other forms `uuid` reads are left to it: never read here.
    #[test]
    fn the_other_forms_are_not_read_here() {
        let simple = ID.replace('-', "");
        let braced = format!("{{{ID}}}");
        let urn = format!("urn:uuid:{ID}");
        for s in [
            simple,
            braced,
            urn,
            format!(" {ID}"),
            format!("{ID} "),
            format!(" {ID} "),
        ] {
            assert!(Uuid::parse_str(s.trim()).is_ok(), "{s}");
            assert_eq!(parse_hyphenated(s.as_bytes()), None, "{s}");
        }
        for s in ["", "-", &ID[..35], &format!("{ID}0"), &ID.replace('-', "0")] {
            agrees(s.as_bytes());
        }
    }

    /// An index below `n` from a random word.
    fn pick(r: u64, n: usize) -> usize {
        usize::try_from(r % u64::try_from(n).unwrap()).unwrap()
    }

    /// Random texts of a hyphenated id's shape, and of any bytes.
    #[test]
    fn random_texts_agree_with_uuid() {
        // A fixed xorshift: the same cases each run.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let alphabet = b"0123456789abcdefABCDEFgG-xX{} \0\xff";
        for _ in 0..200_000 {
            let r = next();
            let mut s: Vec<u8> = ID.bytes().collect();
            // Mostly hex digits with a few bytes from the alphabet.
            for _ in 0..r % 3 {
                let v = next();
                s[pick(v, 36)] = alphabet[pick(v >> 8, alphabet.len())];
            }
            agrees(&s);
            // Fresh digits of any case, where the hyphens are not.
            let digits: Vec<u8> = ID
                .bytes()
                .map(|c| match c {
                    b'-' => c,
                    _ => alphabet[pick(next(), 22)],
                })
                .collect();
            assert!(parse_hyphenated(&digits).is_some());
            agrees(&digits);
            let any: Vec<u8> = (0..pick(next(), 40))
                .map(|_| alphabet[pick(next(), alphabet.len())])
                .collect();
            agrees(&any);
        }
    }
}
