//! Bounds on the numbers of a model configuration. A configuration may come
//! from a file or a stored row written by someone else: numbers beyond these
//! bounds are refused on load (the error names the field), and any that reach
//! the runtime another way are saturated, never turned into a panic.

use std::time::Duration;

/// Longest timeout, delay, period or recovery time a model configuration may
/// hold, in seconds: thirty days. Far beyond any sensible setting (the
/// registered defaults are minutes), far below what would overflow a clock
/// when added to `Instant::now()`.
pub const MAX_CONFIG_SECONDS: f64 = 30.0 * 24.0 * 60.0 * 60.0;

/// [`MAX_CONFIG_SECONDS`] as a duration.
pub const MAX_CONFIG_DURATION: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// A seconds value as a duration: `None` when not a positive finite number,
/// saturated at [`MAX_CONFIG_DURATION`]. Never panics (unlike
/// `Duration::from_secs_f64`).
pub fn saturating_duration(secs: f64) -> Option<Duration> {
    if !(secs.is_finite() && secs > 0.0) {
        return None;
    }
    Some(
        Duration::try_from_secs_f64(secs)
            .map_or(MAX_CONFIG_DURATION, |d| d.min(MAX_CONFIG_DURATION)),
    )
}
