//! Sums of a provider's reported counts (token usage, cost) over several
//! replies of one provider: a CLI agent's `result` events, the rounds of a
//! tool turn. The shape stays the provider's, so a reader of one reply's
//! `usage` reads the sum the same way.

use serde_json::{Number, Value};

/// Adds `later` to `kept`: numbers are summed (integers stay integers),
/// objects key by key, and anything else is replaced by the later value
/// (a `service_tier`, a session id).
pub fn add_counts(kept: &mut Value, later: Value) {
    match (kept, later) {
        (Value::Number(a), Value::Number(b)) => match sum(a, &b) {
            Some(s) => *a = s,
            None => tracing::warn!("a usage sum overflows; the earlier figure kept"),
        },
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(old) => add_counts(old, v),
                    None => {
                        a.insert(k, v);
                    }
                }
            }
        }
        (kept, later) => *kept = later,
    }
}

/// `a + b`, exact while both are integers that fit; `None` when the sum
/// is not a finite JSON number.
fn sum(a: &Number, b: &Number) -> Option<Number> {
    if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
        if let Some(s) = x.checked_add(y) {
            return Some(s.into());
        }
    }
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        if let Some(s) = x.checked_add(y) {
            return Some(s.into());
        }
    }
    Number::from_f64(a.as_f64()? + b.as_f64()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn usage_is_summed_key_by_key_and_integers_stay_integers() {
        let mut kept = json!({"input_tokens": 3, "output_tokens": 4, "cost": 0.5});
        add_counts(
            &mut kept,
            json!({"input_tokens": 2, "cost": 0.25, "service_tier": "standard"}),
        );
        assert_eq!(
            kept,
            json!({"input_tokens": 5, "output_tokens": 4, "cost": 0.75, "service_tier": "standard"})
        );
        assert_eq!(serde_json::to_string(&kept["input_tokens"]).unwrap(), "5");
        let mut big = json!(u64::MAX);
        add_counts(&mut big, json!(1));
        assert_eq!(big, json!(u64::MAX as f64 + 1.0));
        let mut neg = json!(-3);
        add_counts(&mut neg, json!(1));
        assert_eq!(neg, json!(-2));
        let mut huge = json!(f64::MAX);
        add_counts(&mut huge, json!(f64::MAX));
        assert_eq!(
            huge,
            json!(f64::MAX),
            "an overflowing sum keeps the earlier"
        );
    }
}
