//! The inline sizes of what a conversation keeps once per message, log or
//! branch. A pile stores its items inline, and a program holding many
//! branches holds them inline too: a field that grows one of these grows
//! every conversation (docs/benchmarks.md, the 1,000 × 3 memory row).
//! Moving a rarely used part behind a `Box` keeps them where they are.

#![cfg(target_pointer_width = "64")]

use std::mem::size_of;

use branch_core::log::Log;
use branch_core::message::{Message, MessageContent};
use branch_core::{Branch, Element, LazyJson, Metadata};

#[test]
fn what_every_message_and_log_carries_stays_small() {
    // Empty metadata is three words and allocates nothing.
    assert_eq!(size_of::<Metadata>(), 24);
    assert_eq!(size_of::<Element>(), 48);
    // Three words: a reply's text inline, every other kind boxed.
    assert_eq!(size_of::<MessageContent>(), 24);
    assert!(size_of::<Message>() <= 168, "{}", size_of::<Message>());
    assert!(size_of::<Log>() <= 216, "{}", size_of::<Log>());
    assert!(size_of::<Branch>() <= 952, "{}", size_of::<Branch>());
    // A metadata value is no larger than a `Value`: an entry with its key
    // stays within the chunks glibc frees without merging (a reply keeps
    // one, freed with its conversation).
    assert_eq!(size_of::<LazyJson>(), size_of::<serde_json::Value>());
    assert!(size_of::<(String, LazyJson)>() <= 120);
}
