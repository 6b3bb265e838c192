//! Token counts in tiktoken's `o200k_base` encoding, as the reference
//! measures provider blocks. The encoding ships inside `tiktoken-rs`, so
//! nothing is downloaded at run time.

use std::sync::OnceLock;

use tiktoken_rs::CoreBPE;

/// Texts of `o200k_base` special tokens. The reference's tokenizer refuses
/// text containing them, and a refused count is 0.
const SPECIAL: [&str; 2] = ["<|endoftext|>", "<|endofprompt|>"];

/// Texts longer than this are counted on the blocking pool rather than on
/// an async worker.
const INLINE_LIMIT: usize = 16 * 1024;

static ENCODER: OnceLock<Option<CoreBPE>> = OnceLock::new();

fn encoder() -> Option<&'static CoreBPE> {
    ENCODER
        .get_or_init(|| match tiktoken_rs::o200k_base() {
            Ok(e) => Some(e),
            Err(e) => {
                tracing::error!(error = %e, "o200k_base encoding failed to load; counting 0 tokens");
                None
            }
        })
        .as_ref()
}

/// The number of `o200k_base` tokens in `text`; 0 where the reference's
/// count fails (special-token text). Blocking: the first call loads the
/// encoding (tens of milliseconds).
pub fn count_tokens(text: &str) -> u64 {
    if SPECIAL.iter().any(|s| text.contains(s)) {
        return 0;
    }
    encoder().map_or(0, |e| e.encode_ordinary(text).len() as u64)
}

/// [`count_tokens`] for async code: loading the encoding and counting long
/// texts happen on Tokio's blocking pool, so an async worker never stalls.
pub async fn count_tokens_async(text: &str) -> u64 {
    if ENCODER.get().is_some() && text.len() <= INLINE_LIMIT {
        return count_tokens(text);
    }
    // Outside a Tokio runtime there is no blocking pool to move to.
    if tokio::runtime::Handle::try_current().is_err() {
        return count_tokens(text);
    }
    let owned = text.to_owned();
    match tokio::task::spawn_blocking(move || count_tokens(&owned)).await {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, "token count task failed; counting 0 tokens");
            0
        }
    }
}

/// Loads the encoding now (on the blocking pool), so the first turn does
/// not pay for it.
pub async fn warm_up() {
    if tokio::runtime::Handle::try_current().is_err() {
        encoder();
        return;
    }
    let _ = tokio::task::spawn_blocking(|| encoder().is_some()).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_match_the_reference_fixtures() {
        // context_providers/registry_report_mixed: token_counts.
        assert_eq!(count_tokens("ALPHA: the user prefers metric units."), 9);
        assert_eq!(
            count_tokens(&format!("BETA: {}", "very long reference text ".repeat(4))),
            20
        );
        let zeta = format!(
            "ZETA: {}",
            "background material that is fairly long and costs many tokens ".repeat(3)
        );
        assert_eq!(count_tokens(&zeta), 34);
        assert_eq!(count_tokens("ETA: project codename is Bluebird."), 9);
        // non_string_and_degraded and gather_writeback_after_operate.
        assert_eq!(count_tokens("DEGRADED-BUT-USEFUL note."), 11);
        assert_eq!(count_tokens("ECHO block."), 4);
        assert_eq!(count_tokens("plain"), 1);
        assert_eq!(count_tokens("wb1 text"), 3);
        assert_eq!(count_tokens("none-wb"), 3);
        // extensions.md §2.3 examples.
        assert_eq!(count_tokens("one two three four"), 4);
        assert_eq!(count_tokens("alpha beta gamma"), 3);
    }

    #[test]
    fn special_token_text_counts_zero() {
        assert_eq!(count_tokens("before <|endoftext|> after"), 0);
        assert_eq!(count_tokens(""), 0);
    }
}
