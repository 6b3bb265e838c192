//! String similarities for matching a reply's keys to the expected field
//! names (the reference's `similarity_algo`): each scores two strings in
//! `0..=1`, 1 for equal ones. Keys come from model output, so each runs
//! in time proportional to the product of the two lengths at most, and the
//! expected name is one the program declared.

use std::collections::{HashMap, HashSet};

/// A similarity measure (the reference's `similarity_algo` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Similarity {
    /// Jaro-Winkler, prefix scale 0.1 over up to 4 characters (default).
    #[default]
    JaroWinkler,
    /// 1 − edit distance / the longer length.
    Levenshtein,
    /// Python's `difflib.SequenceMatcher(None, a, b).ratio()`.
    SequenceMatcher,
    /// Share of equal positions; strings of different lengths score 0.
    Hamming,
    /// Shared distinct characters / √(product of the distinct counts).
    Cosine,
}

impl Similarity {
    /// Parses the reference's name (`jaro_winkler`, `levenshtein`,
    /// `sequence_matcher`, `hamming`, `cosine`).
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "jaro_winkler" => Self::JaroWinkler,
            "levenshtein" => Self::Levenshtein,
            "sequence_matcher" => Self::SequenceMatcher,
            "hamming" => Self::Hamming,
            "cosine" => Self::Cosine,
            _ => return None,
        })
    }

    /// The similarity of `a` and `b`, compared as given (callers lower
    /// the case first).
    pub fn score(self, a: &str, b: &str) -> f64 {
        let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
        match self {
            Self::JaroWinkler => jaro_winkler_chars(&a, &b),
            Self::Levenshtein => levenshtein(&a, &b),
            Self::SequenceMatcher => sequence_matcher(&a, &b),
            Self::Hamming => hamming(&a, &b),
            Self::Cosine => cosine(&a, &b),
        }
    }
}

/// `n / d` for counts (each far below 2^53, so exact as floats).
#[allow(clippy::cast_precision_loss, reason = "counts of characters")]
fn ratio(n: usize, d: usize) -> f64 {
    n as f64 / d as f64
}

/// Jaro-Winkler similarity of two strings (prefix scale 0.1, up to 4).
pub fn jaro_winkler(a: &str, b: &str) -> f64 {
    Similarity::JaroWinkler.score(a, b)
}

fn jaro_winkler_chars(a: &[char], b: &[char]) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let window = (a.len().max(b.len()) / 2).saturating_sub(1);
    let mut a_match = vec![false; a.len()];
    let mut b_match = vec![false; b.len()];
    let mut matches = 0usize;
    for (i, ca) in a.iter().enumerate() {
        let lo = i.saturating_sub(window);
        let hi = i.saturating_add(window).saturating_add(1).min(b.len());
        for j in lo..hi {
            if !b_match[j] && b[j] == *ca {
                a_match[i] = true;
                b_match[j] = true;
                matches += 1;
                break;
            }
        }
    }
    if matches == 0 {
        return 0.0;
    }
    let a_seq = a.iter().zip(&a_match).filter(|(_, m)| **m).map(|(c, _)| c);
    let b_seq = b.iter().zip(&b_match).filter(|(_, m)| **m).map(|(c, _)| c);
    let transpositions = a_seq.zip(b_seq).filter(|(x, y)| x != y).count() / 2;
    let jaro = (ratio(matches, a.len())
        + ratio(matches, b.len())
        + ratio(matches - transpositions, matches))
        / 3.0;
    let prefix = a.iter().zip(b).take(4).take_while(|(x, y)| x == y).count();
    jaro + ratio(prefix, 10) * (1.0 - jaro)
}

fn levenshtein(a: &[char], b: &[char]) -> f64 {
    let longer = a.len().max(b.len());
    if longer == 0 {
        return 1.0;
    }
    // One row of the edit-distance table at a time.
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    1.0 - ratio(row[b.len()], longer)
}

fn hamming(a: &[char], b: &[char]) -> f64 {
    if a.is_empty() || a.len() != b.len() {
        return 0.0;
    }
    ratio(a.iter().zip(b).filter(|(x, y)| x == y).count(), a.len())
}

fn cosine(a: &[char], b: &[char]) -> f64 {
    let (sa, sb): (HashSet<&char>, HashSet<&char>) = (a.iter().collect(), b.iter().collect());
    if sa.is_empty() || sb.is_empty() {
        return 0.0;
    }
    let shared = sa.intersection(&sb).count();
    #[allow(clippy::cast_precision_loss, reason = "counts of characters")]
    let norm = ((sa.len() as f64) * (sb.len() as f64)).sqrt();
    shared as f64 / norm
}

/// `difflib.SequenceMatcher(None, a, b).ratio()`: 2·M / (|a| + |b|), M the
/// characters of the matching blocks (the longest common run, then the
/// same on each side of it), with difflib's automatic junk heuristic (in a
/// `b` of 200 or more characters, one occurring more than 1% + 1 times is
/// not used to start a match).
fn sequence_matcher(a: &[char], b: &[char]) -> f64 {
    let total = a.len() + b.len();
    if total == 0 {
        return 1.0;
    }
    let mut b2j: HashMap<char, Vec<usize>> = HashMap::new();
    for (j, c) in b.iter().enumerate() {
        b2j.entry(*c).or_default().push(j);
    }
    if b.len() >= 200 {
        let most = b.len() / 100 + 1;
        b2j.retain(|_, js| js.len() <= most);
    }
    let mut matched = 0;
    let mut queue = vec![(0, a.len(), 0, b.len())];
    while let Some((alo, ahi, blo, bhi)) = queue.pop() {
        let (i, j, k) = longest_match(a, b, &b2j, alo, ahi, blo, bhi);
        if k > 0 {
            matched += k;
            if alo < i && blo < j {
                queue.push((alo, i, blo, j));
            }
            if i + k < ahi && j + k < bhi {
                queue.push((i + k, ahi, j + k, bhi));
            }
        }
    }
    ratio(2 * matched, total)
}

/// difflib's `find_longest_match` without a junk function: the longest
/// run of `a[alo..ahi]` equal to one of `b[blo..bhi]` (the earliest in
/// `a`, then in `b`), started from characters `b2j` indexes and then
/// extended over the ones it leaves out.
#[allow(clippy::too_many_arguments, reason = "difflib's own signature")]
fn longest_match(
    a: &[char],
    b: &[char],
    b2j: &HashMap<char, Vec<usize>>,
    alo: usize,
    ahi: usize,
    blo: usize,
    bhi: usize,
) -> (usize, usize, usize) {
    let (mut besti, mut bestj, mut best) = (alo, blo, 0);
    // Length of the run ending at a[i - 1], b[j], by j.
    let mut runs: HashMap<usize, usize> = HashMap::new();
    for (i, c) in a.iter().enumerate().take(ahi).skip(alo) {
        let mut next = HashMap::new();
        for &j in b2j.get(c).map_or(&[][..], Vec::as_slice) {
            if j < blo {
                continue;
            }
            if j >= bhi {
                break;
            }
            let k = j
                .checked_sub(1)
                .and_then(|p| runs.get(&p))
                .map_or(0, |k| *k)
                + 1;
            next.insert(j, k);
            if k > best {
                (besti, bestj, best) = (i + 1 - k, j + 1 - k, k);
            }
        }
        runs = next;
    }
    while besti > alo && bestj > blo && a[besti - 1] == b[bestj - 1] {
        (besti, bestj, best) = (besti - 1, bestj - 1, best + 1);
    }
    while besti + best < ahi && bestj + best < bhi && a[besti + best] == b[bestj + best] {
        best += 1;
    }
    (besti, bestj, best)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scores Python gives (`lionagi.ln.fuzzy._string_similarity`, which
    /// is difflib for `sequence_matcher`), to the last digit shown.
    #[test]
    fn scores_match_the_references() {
        let cases = [
            (Similarity::Levenshtein, "confidnce", "confidence", 0.9),
            (Similarity::Levenshtein, "", "", 1.0),
            (Similarity::Levenshtein, "abc", "", 0.0),
            (
                Similarity::SequenceMatcher,
                "confidnce",
                "confidence",
                0.947_368_421_052_631_5,
            ),
            (Similarity::SequenceMatcher, "abcd", "bcde", 0.75),
            (Similarity::SequenceMatcher, "", "", 1.0),
            (Similarity::Hamming, "answr", "answe", 0.8),
            (Similarity::Hamming, "answr", "answer", 0.0),
            (Similarity::Cosine, "name", "nmae", 1.0),
            (Similarity::Cosine, "abc", "abd", 2.0 / 3.0),
            (
                Similarity::JaroWinkler,
                "martha",
                "marhta",
                0.961_111_111_111_111_1,
            ),
        ];
        for (s, a, b, expected) in cases {
            let got = s.score(a, b);
            assert!(
                (got - expected).abs() < 1e-12,
                "{s:?}({a}, {b}) = {got}, not {expected}"
            );
        }
    }

    /// 320 pairs scored by the reference (tests/data: random strings over
    /// a small alphabet, so that runs, repeats and ties are common, then
    /// long ones past difflib's automatic junk length).
    #[test]
    fn every_measure_scores_as_the_reference_on_random_pairs() {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!("../tests/data/similarity_reference.json")).unwrap();
        let measures = [
            Similarity::Levenshtein,
            Similarity::SequenceMatcher,
            Similarity::Hamming,
            Similarity::Cosine,
            Similarity::JaroWinkler,
        ];
        for row in doc["rows"].as_array().unwrap() {
            let (a, b) = (row[0].as_str().unwrap(), row[1].as_str().unwrap());
            for (k, s) in measures.iter().enumerate() {
                let expected = row[k + 2].as_f64().unwrap();
                let got = s.score(a, b);
                assert!(
                    (got - expected).abs() < 1e-12,
                    "{s:?}({a:?}, {b:?}) = {got}, not {expected}"
                );
            }
        }
    }
}
