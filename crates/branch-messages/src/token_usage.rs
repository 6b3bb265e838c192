//! The token-usage note ReAct appends to the last message of a request.

/// `"\n\nEstimated Current Token Usage: {tokens}/{window}"`, the window
/// written with thousands separators (`1,000,000`); without a known model
/// the `/{window}` part is omitted. Counting the tokens is the caller's
/// business (it depends on the model's tokenizer).
pub fn token_usage_note(tokens: u64, window: Option<u64>) -> String {
    match window {
        Some(w) => format!(
            "\n\nEstimated Current Token Usage: {tokens}/{}",
            thousands(w)
        ),
        None => format!("\n\nEstimated Current Token Usage: {tokens}"),
    }
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_the_reference() {
        assert_eq!(
            token_usage_note(1281, Some(1_000_000)),
            "\n\nEstimated Current Token Usage: 1281/1,000,000"
        );
        assert_eq!(
            token_usage_note(5, Some(999)),
            "\n\nEstimated Current Token Usage: 5/999"
        );
        assert_eq!(
            token_usage_note(5, None),
            "\n\nEstimated Current Token Usage: 5"
        );
    }
}
