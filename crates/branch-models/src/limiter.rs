//! The rate limiter (providers.md §6), with typed refusals instead of the
//! reference's silent empty reply.
//!
//! * `limit_requests` / `limit_tokens`: budgets per period (`interval`, else
//!   `capacity_refresh_time`), reset at the start of every period; a call
//!   that finds a budget exhausted waits for the next period.
//! * `concurrency_limit`: simultaneous in-flight calls (a semaphore); a
//!   streaming call holds its slot until its stream ends or is dropped.
//! * `queue_capacity`: carried for serialization only. In the reference it
//!   caps the calls started per processing pass and is reset after each pass,
//!   so it never limits throughput or queue length; waiting calls here are
//!   woken by the period timer instead of a pass.
//!
//! A call waits at most `max_wait` (if set) and then fails with
//! `ModelErrorKind::LocalRateLimit`; a call whose token estimate exceeds the
//! per-period token budget fails at once.

use std::sync::Arc;
use std::time::Duration;

use branch_core::model::{ModelErrorKind, ProcessorConfig};
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

#[derive(Debug)]
struct Budget {
    window_start: Instant,
    requests_left: Option<u64>,
    tokens_left: Option<u64>,
}

/// A refusal of the limiter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// Why.
    pub reason: &'static str,
}

/// Per-model rate limiter.
#[derive(Debug)]
pub struct Limiter {
    period: Duration,
    limit_requests: Option<u64>,
    limit_tokens: Option<u64>,
    budget: Mutex<Budget>,
    concurrency: Option<Arc<Semaphore>>,
    max_wait: Option<Duration>,
}

/// Held for the duration of a call.
#[derive(Debug)]
pub struct Permit {
    _slot: Option<OwnedSemaphorePermit>,
}

impl Limiter {
    /// A limiter for `config`; `max_wait` bounds the time a call waits.
    pub fn new(config: &ProcessorConfig, max_wait: Option<Duration>) -> Self {
        let concurrency = config.concurrency_limit.map(|n| {
            let n = usize::try_from(n.max(1))
                .unwrap_or(usize::MAX)
                .min(Semaphore::MAX_PERMITS);
            Arc::new(Semaphore::new(n))
        });
        Self {
            period: config.period(),
            limit_requests: config.limit_requests,
            limit_tokens: config.limit_tokens,
            budget: Mutex::new(Budget {
                window_start: Instant::now(),
                requests_left: config.limit_requests,
                tokens_left: config.limit_tokens,
            }),
            concurrency,
            max_wait,
        }
    }

    /// Whether any limit is configured.
    pub fn is_unlimited(&self) -> bool {
        self.limit_requests.is_none() && self.limit_tokens.is_none() && self.concurrency.is_none()
    }

    /// Waits for permission to start a call estimated at `tokens`.
    pub async fn acquire(&self, tokens: u64) -> Result<Permit, Refused> {
        if self.is_unlimited() {
            return Ok(Permit { _slot: None });
        }
        if self.limit_tokens.is_some_and(|limit| tokens > limit) {
            return Err(Refused {
                reason: "the call's token estimate exceeds limit_tokens per period",
            });
        }
        // `checked_add`: a caller's `Duration::MAX` means "no bound", not a panic.
        let deadline = self.max_wait.and_then(|w| Instant::now().checked_add(w));
        if self.limit_requests.is_some() || self.limit_tokens.is_some() {
            loop {
                let next_window = {
                    let mut b = self.budget.lock().await;
                    let now = Instant::now();
                    let window_end = b
                        .window_start
                        .checked_add(self.period)
                        .unwrap_or(b.window_start);
                    if now >= window_end {
                        let periods =
                            (now - b.window_start).as_nanos() / self.period.as_nanos().max(1);
                        let skip = u32::try_from(periods).unwrap_or(u32::MAX);
                        b.window_start = b
                            .window_start
                            .checked_add(self.period.saturating_mul(skip))
                            .unwrap_or(now);
                        b.requests_left = self.limit_requests;
                        b.tokens_left = self.limit_tokens;
                    }
                    let req_ok = b.requests_left.is_none_or(|r| r >= 1);
                    let tok_ok = b.tokens_left.is_none_or(|t| t >= tokens);
                    if req_ok && tok_ok {
                        if let Some(r) = b.requests_left.as_mut() {
                            *r -= 1;
                        }
                        if let Some(t) = b.tokens_left.as_mut() {
                            *t -= tokens;
                        }
                        break;
                    }
                    b.window_start
                        .checked_add(self.period)
                        .unwrap_or(b.window_start)
                };
                if deadline.is_some_and(|d| next_window > d) {
                    return Err(Refused {
                        reason: "request or token budget exhausted for this period (max wait exceeded)",
                    });
                }
                tokio::time::sleep_until(next_window).await;
            }
        }
        let slot = match &self.concurrency {
            None => None,
            Some(sem) => {
                let acquire = Arc::clone(sem).acquire_owned();
                let permit = match deadline {
                    None => acquire.await.ok(),
                    Some(d) => tokio::time::timeout_at(d, acquire)
                        .await
                        .ok()
                        .and_then(Result::ok),
                };
                match permit {
                    Some(p) => Some(p),
                    None => {
                        return Err(Refused {
                            reason: "concurrency limit reached (max wait exceeded)",
                        });
                    }
                }
            }
        };
        Ok(Permit { _slot: slot })
    }
}

/// The error kind of a refusal.
pub const REFUSED_KIND: ModelErrorKind = ModelErrorKind::LocalRateLimit;

#[cfg(test)]
mod tests {
    use super::*;

    fn config(f: impl FnOnce(&mut ProcessorConfig)) -> ProcessorConfig {
        let mut c = ProcessorConfig::api();
        f(&mut c);
        c
    }

    #[tokio::test]
    async fn request_budget_waits_for_next_period() {
        let mut c = config(|c| c.limit_requests = Some(1));
        c.interval = branch_core::model::Seconds::from_secs_f64(0.05);
        let l = Limiter::new(&c, None);
        let start = Instant::now();
        l.acquire(0).await.unwrap();
        l.acquire(0).await.unwrap();
        assert!(start.elapsed() >= Duration::from_millis(45));
        let strict = Limiter::new(&c, Some(Duration::ZERO));
        strict.acquire(0).await.unwrap();
        assert!(strict.acquire(0).await.is_err());
    }

    #[tokio::test]
    async fn token_estimate_over_budget_fails_fast() {
        let l = Limiter::new(&config(|c| c.limit_tokens = Some(10)), None);
        assert!(l.acquire(11).await.is_err());
        assert!(l.acquire(10).await.is_ok());
    }

    #[tokio::test]
    async fn concurrency_slots() {
        let l = Limiter::new(
            &config(|c| c.concurrency_limit = Some(1)),
            Some(Duration::from_millis(20)),
        );
        let p = l.acquire(0).await.unwrap();
        assert!(l.acquire(0).await.is_err());
        drop(p);
        assert!(l.acquire(0).await.is_ok());
    }
}
