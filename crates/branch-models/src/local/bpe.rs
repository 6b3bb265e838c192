//! Byte-level BPE merging of one pre-tokenized word, in O(n log n).
//!
//! The rule is the one BPE is defined by: merge every non-overlapping
//! occurrence (leftmost first) of the adjacent pair of lowest rank, then
//! look again. Done literally, each round rescans the word, and a word of
//! n symbols can take n rounds: 64,000 random letters (one word to GPT-2's
//! split) took 2.1 s to encode, and prompt text is not ours to choose. Here
//! the symbols form a linked list and the candidate pairs a heap ordered by
//! (rank, position); a round pops the lowest rank's occurrences of one
//! pair in position order, skips those a merge of the same round has
//! touched (the non-overlap), and only then offers the pairs its merges
//! made, so the rounds are the literal rule's rounds, whatever the merge
//! table holds.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// `(left, right)` → `(rank, merged)`.
pub(crate) type Merges = HashMap<(u32, u32), (u32, u32)>;

const NONE: usize = usize::MAX;

struct Symbol {
    id: u32,
    prev: usize,
    next: usize,
    /// The round that last merged into or removed this symbol.
    touched: u64,
    gone: bool,
}

/// A candidate: (rank, left position, left id, right id, merged id).
type Candidate = Reverse<(u32, usize, u32, u32, u32)>;

/// Merges `symbols` (the word's byte-symbol ids) by `merges`.
pub(crate) fn merge(symbols: Vec<u32>, merges: &Merges) -> Vec<u32> {
    if symbols.len() < 2 || merges.is_empty() {
        return symbols;
    }
    let last = symbols.len() - 1;
    let mut list: Vec<Symbol> = symbols
        .iter()
        .enumerate()
        .map(|(i, &id)| Symbol {
            id,
            prev: i.checked_sub(1).unwrap_or(NONE),
            next: if i < last { i + 1 } else { NONE },
            touched: 0,
            gone: false,
        })
        .collect();
    let mut heap: BinaryHeap<Candidate> = BinaryHeap::new();
    for left in 0..last {
        offer(&list, left, merges, &mut heap);
    }
    let mut round = 0u64;
    let mut merged_at = Vec::new();
    let mut deferred = Vec::new();
    while let Some(&Reverse((rank, ..))) = heap.peek() {
        round += 1;
        merged_at.clear();
        // A round merges one pair: the leftmost of the lowest rank. (A
        // table read from a file may give two pairs one rank; no trained
        // table does, and such a table costs more, each round offering
        // the rank's other pairs again.)
        let mut pair = None;
        while let Some(&Reverse((r, left, left_id, right_id, merged))) = heap.peek() {
            if r != rank {
                break;
            }
            let Some(candidate) = heap.pop() else {
                break;
            };
            let right = list[left].next;
            // Still the pair it was offered as, and untouched this round.
            let current = !list[left].gone
                && right != NONE
                && list[left].id == left_id
                && list[right].id == right_id
                && list[left].touched != round
                && list[right].touched != round;
            if !current {
                continue;
            }
            match pair {
                None => pair = Some((left_id, right_id)),
                Some(p) if p != (left_id, right_id) => {
                    deferred.push(candidate);
                    continue;
                }
                Some(_) => {}
            }
            let after = list[right].next;
            list[left].id = merged;
            list[left].next = after;
            list[left].touched = round;
            list[right].gone = true;
            list[right].touched = round;
            if after != NONE {
                list[after].prev = left;
            }
            merged_at.push(left);
        }
        heap.extend(deferred.drain(..));
        // The pairs this round's merges made, for the rounds after it.
        for &left in &merged_at {
            let prev = list[left].prev;
            if prev != NONE {
                offer(&list, prev, merges, &mut heap);
            }
            offer(&list, left, merges, &mut heap);
        }
    }
    let mut out = Vec::with_capacity(symbols.len());
    // The first symbol is never a pair's right side, so it is never removed.
    let mut at = 0;
    while at != NONE {
        out.push(list[at].id);
        at = list[at].next;
    }
    out
}

/// Offers the pair starting at `left`, when the table merges it.
fn offer(list: &[Symbol], left: usize, merges: &Merges, heap: &mut BinaryHeap<Candidate>) {
    let right = list[left].next;
    if right == NONE {
        return;
    }
    let pair = (list[left].id, list[right].id);
    if let Some(&(rank, merged)) = merges.get(&pair) {
        heap.push(Reverse((rank, left, pair.0, pair.1, merged)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule done literally: one rescan of the word per round.
    fn merge_by_rounds(mut symbols: Vec<u32>, merges: &Merges) -> Vec<u32> {
        loop {
            let best = symbols
                .windows(2)
                .filter_map(|w| {
                    merges
                        .get(&(w[0], w[1]))
                        .map(|&(rank, _)| (rank, (w[0], w[1])))
                })
                .min_by_key(|&(rank, _)| rank);
            let Some((_, pair)) = best else {
                return symbols;
            };
            let merged = merges[&pair].1;
            let mut next = Vec::with_capacity(symbols.len());
            let mut i = 0;
            while i < symbols.len() {
                if i + 1 < symbols.len() && (symbols[i], symbols[i + 1]) == pair {
                    next.push(merged);
                    i += 2;
                } else {
                    next.push(symbols[i]);
                    i += 1;
                }
            }
            symbols = next;
        }
    }

    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// A table of `n` merges over a small alphabet: trained-like tables
    /// (each merge makes a new id) and hostile ones (a merge makes an id
    /// that already exists, even one of its own sides; ranks in any
    /// order).
    fn table(rng: &mut Rng, alphabet: u32, n: u32, hostile: bool) -> Merges {
        let mut merges = Merges::new();
        let mut next_id = alphabet;
        for rank in 0..n {
            let known = next_id;
            let l = u32::try_from(rng.below(u64::from(known))).unwrap();
            let r = u32::try_from(rng.below(u64::from(known))).unwrap();
            let merged = if hostile && rng.below(3) == 0 {
                u32::try_from(rng.below(u64::from(known))).unwrap()
            } else {
                next_id += 1;
                next_id - 1
            };
            // Hostile ranks come in any order, and a few are shared.
            let rank = if hostile {
                u32::try_from(rng.below(u64::from(n) + 3)).unwrap()
            } else {
                rank
            };
            merges.entry((l, r)).or_insert((rank, merged));
        }
        merges
    }

    #[test]
    fn the_heap_merges_as_the_rounds_do() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for case in 0..20_000 {
            let alphabet = 1 + u32::try_from(rng.below(6)).unwrap();
            let hostile = case % 2 == 1;
            let n = 1 + u32::try_from(rng.below(40)).unwrap();
            let merges = table(&mut rng, alphabet, n, hostile);
            let len = usize::try_from(rng.below(40)).unwrap();
            let word: Vec<u32> = (0..len)
                .map(|_| u32::try_from(rng.below(u64::from(alphabet))).unwrap())
                .collect();
            assert_eq!(
                merge(word.clone(), &merges),
                merge_by_rounds(word.clone(), &merges),
                "case {case}: {word:?} with {merges:?}"
            );
        }
    }

    #[test]
    fn a_long_word_is_merged_as_the_rounds_merge_it() {
        let mut rng = Rng(7);
        let merges = table(&mut rng, 26, 2000, false);
        let word: Vec<u32> = (0..20_000)
            .map(|_| u32::try_from(rng.below(26)).unwrap())
            .collect();
        assert_eq!(merge(word.clone(), &merges), merge_by_rounds(word, &merges));
    }
}
