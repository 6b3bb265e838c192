//! The optional circuit breaker of an endpoint (`endpoint.circuit_breaker`).
//!
//! Closed: calls pass; `failure_threshold` consecutive failed calls (after
//! their retries) open it. Open: calls fail at once with `CircuitOpen` until
//! `recovery_time` has passed. Half-open: up to `half_open_max_calls` trial
//! calls pass; a success closes it, a failure opens it again.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use branch_core::model::CircuitBreakerConfig;

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen { trials: u32 },
}

/// Breaker state of one model.
#[derive(Debug)]
pub struct Breaker {
    config: CircuitBreakerConfig,
    state: Mutex<State>,
}

impl Breaker {
    /// A closed breaker.
    pub fn new(config: CircuitBreakerConfig) -> Self {
        Self {
            config,
            state: Mutex::new(State::Closed { failures: 0 }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// May a call start now? `Err(remaining)` while open.
    pub fn admit(&self) -> Result<(), Duration> {
        let mut st = self.lock();
        let now = Instant::now();
        match *st {
            State::Closed { .. } => Ok(()),
            State::Open { until } if now < until => Err(until - now),
            State::Open { .. } => {
                *st = State::HalfOpen { trials: 1 };
                Ok(())
            }
            State::HalfOpen { trials } if trials < self.config.half_open_max_calls.max(1) => {
                *st = State::HalfOpen {
                    trials: trials.saturating_add(1),
                };
                Ok(())
            }
            State::HalfOpen { .. } => Err(Duration::ZERO),
        }
    }

    /// Records a call's outcome (`failed`: it ended in a provider or
    /// transport failure).
    pub fn record(&self, failed: bool) {
        let mut st = self.lock();
        // `recovery_time` may come from stored data: saturated, never a
        // panic (`limits::seconds` caps it; `checked_add` guards the clock).
        let wait = crate::limits::seconds(self.config.recovery_time).unwrap_or(Duration::ZERO);
        let now = Instant::now();
        let open = State::Open {
            until: now.checked_add(wait).unwrap_or(now),
        };
        *st = match (*st, failed) {
            (_, false) => State::Closed { failures: 0 },
            (State::Closed { failures }, true)
                if failures.saturating_add(1) >= self.config.failure_threshold.max(1) =>
            {
                open
            }
            (State::Closed { failures }, true) => State::Closed {
                failures: failures.saturating_add(1),
            },
            (State::HalfOpen { .. } | State::Open { .. }, true) => open,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_recovers_and_reopens() {
        let b = Breaker::new(CircuitBreakerConfig {
            failure_threshold: 2,
            recovery_time: 0.02,
            half_open_max_calls: 1,
            name: None,
        });
        b.record(true);
        assert!(b.admit().is_ok());
        b.record(true);
        assert!(b.admit().is_err());
        std::thread::sleep(Duration::from_millis(30));
        assert!(b.admit().is_ok(), "half-open trial");
        assert!(b.admit().is_err(), "only one trial");
        b.record(true);
        assert!(b.admit().is_err(), "reopened");
        std::thread::sleep(Duration::from_millis(30));
        assert!(b.admit().is_ok());
        b.record(false);
        assert!(b.admit().is_ok() && b.admit().is_ok(), "closed again");
    }

    /// A recovery time of 1e300 s (or NaN, or negative) from a stored
    /// configuration used to panic in `Duration::from_secs_f64`.
    #[test]
    fn absurd_recovery_times_never_panic() {
        for recovery_time in [1e300, f64::MAX, f64::INFINITY, f64::NAN, -5.0] {
            let b = Breaker::new(CircuitBreakerConfig {
                failure_threshold: 1,
                recovery_time,
                half_open_max_calls: 1,
                name: None,
            });
            b.record(true);
            let open = b.admit();
            if recovery_time.is_finite() && recovery_time > 1.0 {
                let left = open.unwrap_err();
                assert!(left <= crate::limits::MAX_CONFIG_WAIT, "{left:?}");
            }
        }
    }
}
