//! The wait a failed reply asks for, read from its headers.
//!
//! `retry-after-ms` (OpenAI's, milliseconds) comes first, then
//! `Retry-After` in either form RFC 9110 §10.2.3 gives it: a number of
//! seconds, or an HTTP-date. A date is read against the reply's own `Date`
//! header when that parses, so that a client whose clock is off by minutes
//! still waits what the server meant; else against this machine's clock.
//! A date already past asks for no wait.
//!
//! Every value is the server's and hostile: one that does not parse, a
//! negative, NaN or infinite number are no request at all (the retry
//! policy's own backoff applies), and a wait past
//! [`limits::MAX_RETRY_AFTER`] saturates there, so that no value overflows
//! a clock or panics a conversion.

use std::time::{Duration, SystemTime};

use reqwest::header::{DATE, HeaderMap, RETRY_AFTER};

use crate::limits;

/// The wait a failed reply's `headers` ask for; `None` when they ask for
/// none that reads (see the module docs). Public for other clients of the
/// same servers, and for the `retry_after` fuzz target.
pub fn requested_wait(headers: &HeaderMap) -> Option<Duration> {
    if let Some(ms) = header(headers, "retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if let Some(wait) = from_secs(ms / 1000.0) {
            return Some(wait);
        }
    }
    let value = header(headers, RETRY_AFTER.as_str())?;
    match value.parse::<f64>() {
        Ok(secs) => from_secs(secs),
        Err(_) => {
            let at = httpdate::parse_http_date(value).ok()?;
            let now = header(headers, DATE.as_str())
                .and_then(|d| httpdate::parse_http_date(d).ok())
                .unwrap_or_else(SystemTime::now);
            Some(until(at, now))
        }
    }
}

/// A header's value as trimmed text; `None` when absent or not visible
/// ASCII.
fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name)?.to_str().ok().map(str::trim)
}

/// A wait in seconds as a duration: `None` for nonsense, saturated at
/// [`limits::MAX_RETRY_AFTER`].
fn from_secs(secs: f64) -> Option<Duration> {
    if !(secs.is_finite() && secs >= 0.0) {
        return None;
    }
    Some(
        Duration::try_from_secs_f64(secs)
            .map_or(limits::MAX_RETRY_AFTER, |d| d.min(limits::MAX_RETRY_AFTER)),
    )
}

/// The wait from `now` until `at`: zero when `at` has passed, saturated at
/// [`limits::MAX_RETRY_AFTER`].
fn until(at: SystemTime, now: SystemTime) -> Duration {
    at.duration_since(now)
        .map_or(Duration::ZERO, |d| d.min(limits::MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(*name, HeaderValue::from_str(value).unwrap());
        }
        h
    }

    const DATE_NOW: &str = "Sun, 06 Dec 2026 09:30:00 GMT";

    #[test]
    fn a_date_is_read_against_the_replys_own_date() {
        for (at, wait) in [
            ("Sun, 06 Dec 2026 09:30:30 GMT", 30),
            // RFC 850's and asctime's forms, which a recipient must read.
            ("Sunday, 06-Dec-26 09:31:00 GMT", 60),
            ("Sun Dec  6 10:30:00 2026", 3_600),
            // The same instant, and one already past: no wait.
            (DATE_NOW, 0),
            ("Wed, 21 Oct 2015 07:28:00 GMT", 0),
            // Years ahead: saturated, as a number of seconds would be.
            ("Fri, 31 Dec 9999 23:59:59 GMT", 86_400),
        ] {
            let h = headers(&[("retry-after", at), ("date", DATE_NOW)]);
            assert_eq!(requested_wait(&h), Some(Duration::from_secs(wait)), "{at}");
        }
    }

    #[test]
    fn without_a_readable_date_header_a_date_is_read_against_the_clock() {
        let at = SystemTime::now() + Duration::from_secs(120);
        let at = httpdate::fmt_http_date(at);
        for date in [None, Some("yesterday"), Some("")] {
            let mut pairs = vec![("retry-after", at.as_str())];
            pairs.extend(date.map(|d| ("date", d)));
            let wait = requested_wait(&headers(&pairs)).unwrap();
            // The formatted date drops the fraction of a second, and the
            // clock moves on between formatting and reading.
            assert!(
                (Duration::from_secs(110)..=Duration::from_secs(120)).contains(&wait),
                "{date:?}: {wait:?}"
            );
        }
    }

    #[test]
    fn seconds_and_milliseconds_are_read_and_milliseconds_come_first() {
        for (pairs, wait) in [
            (&[("retry-after", "30")][..], Duration::from_secs(30)),
            (&[("retry-after", " 1.5 ")], Duration::from_millis(1_500)),
            (&[("retry-after-ms", "60")], Duration::from_millis(60)),
            (
                &[("retry-after-ms", "60"), ("retry-after", "30")],
                Duration::from_millis(60),
            ),
            // Milliseconds that do not read leave the seconds to count.
            (
                &[("retry-after-ms", "soon"), ("retry-after", "30")],
                Duration::from_secs(30),
            ),
            (
                &[("retry-after-ms", "-1"), ("retry-after", DATE_NOW)],
                Duration::ZERO,
            ),
            (&[("retry-after", "1e300")], limits::MAX_RETRY_AFTER),
            (&[("retry-after-ms", "1e300")], limits::MAX_RETRY_AFTER),
        ] {
            assert_eq!(requested_wait(&headers(pairs)), Some(wait), "{pairs:?}");
        }
    }

    /// Any visible text, and dates and numbers with bytes changed, read
    /// without a panic as at most the cap.
    #[test]
    fn any_value_reads_as_no_wait_or_a_capped_one() {
        let mut rng = fastrand::Rng::with_seed(0x5eed);
        let shapes = [
            DATE_NOW,
            "Sunday, 06-Dec-26 09:31:00 GMT",
            "Sun Dec  6 10:30:00 2026",
            "Fri, 31 Dec 9999 23:59:59 GMT",
            "Thu, 01 Jan 1970 00:00:00 GMT",
            "12345678901234567890",
            "0.000000001",
            "1e-400",
        ];
        for i in 0..20_000 {
            let mut v: Vec<u8> = shapes[i % shapes.len()].bytes().collect();
            for _ in 0..rng.usize(0..4) {
                let at = rng.usize(0..=v.len());
                match rng.u8(0..3) {
                    0 if at < v.len() => v[at] = rng.u8(0x20..0x7f),
                    1 => v.insert(at, rng.u8(0x20..0x7f)),
                    _ if at < v.len() => {
                        v.remove(at);
                    }
                    _ => {}
                }
            }
            let value = String::from_utf8(v).unwrap();
            for name in ["retry-after", "retry-after-ms", "date"] {
                let h = headers(&[(name, &value), ("retry-after", DATE_NOW)]);
                if let Some(wait) = requested_wait(&h) {
                    assert!(wait <= limits::MAX_RETRY_AFTER, "{name}: {value:?}");
                }
            }
        }
    }

    #[test]
    fn nonsense_asks_for_no_wait() {
        for value in [
            "-5",
            "NaN",
            "inf",
            "-inf",
            "soon",
            "",
            // A date missing its zone, or its day out of range.
            "Sun, 06 Dec 2026 09:30:30",
            "Sun, 32 Dec 2026 09:30:30 GMT",
            "Sun, 06 Dec 2026 25:30:30 GMT",
        ] {
            let h = headers(&[("retry-after", value), ("date", DATE_NOW)]);
            assert_eq!(requested_wait(&h), None, "{value:?}");
        }
        assert_eq!(requested_wait(&HeaderMap::new()), None);
        let mut h = HeaderMap::new();
        h.insert(
            RETRY_AFTER,
            HeaderValue::from_bytes(b"30\xff").expect("obs-text is a valid header value"),
        );
        assert_eq!(requested_wait(&h), None, "not visible ASCII");
    }
}
