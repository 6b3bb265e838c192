//! Fuzzes the SSE framer (`branch_models::sse_frame`): any bytes, cut into
//! chunks anywhere, give the same events (or the same error) as the whole
//! body at once; no event is larger than the cap; nothing panics. Small
//! caps so the cap paths are reached.

#![no_main]

use branch_models::sse_frame::{SseError, SseEvent, SseFramer};
use libfuzzer_sys::fuzz_target;

const LINE: usize = 256;
const EVENT: usize = 512;

fn frame(chunks: &[&[u8]]) -> Result<Vec<SseEvent>, SseError> {
    let mut f = SseFramer::with_limits(LINE, EVENT);
    let mut out = Vec::new();
    for c in chunks {
        f.push(c, &mut out)?;
    }
    f.finish()?;
    Ok(out)
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, body)) = data.split_first() else {
        return;
    };
    let whole = frame(&[body]);
    if let Ok(events) = &whole {
        for e in events {
            assert!(e.data.len() <= EVENT);
        }
    }
    // One cut point, and a chunking into pieces of `cut % 7 + 1` bytes.
    let at = usize::from(cut).min(body.len());
    let split = frame(&[&body[..at], &body[at..]]);
    assert_eq!(whole, split, "cut at {at}");
    let pieces: Vec<&[u8]> = body.chunks(usize::from(cut % 7) + 1).collect();
    assert_eq!(whole, frame(&pieces), "pieces of {}", cut % 7 + 1);
});
