//! A tool call's deadline measures the server's time, not the person's.
//!
//! A server may put a question to the person in the middle of a call (MCP
//! elicitation) and wait for the answer. Counted against the call's
//! deadline, a person who takes three minutes to decide would see a call
//! of a 120 s deadline fail right after answering, whatever the server did
//! with the answer (a booking made, a file written). So while any question
//! of a server is open, the deadlines of that server's calls stand still.
//!
//! A question does not say which call asked it (over stdio nothing ties a
//! server's request to ours), so every call of the server waits with it.
//! What a call is credited is bounded by [`MAX_ANSWER_PAUSE`]: a server
//! that asks question after question cannot hold a call without end.
//!
//! The clock also knows whether a request of ours to the server is in
//! flight: a question belongs inside one (the specification nests them in
//! the request that needs the answer), and one sent while none is, between
//! turns, is declined without bothering the person.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::limits::MAX_ANSWER_PAUSE;

/// The questions a server has open, and the time spent with one open.
#[derive(Debug, Clone, Copy, Default)]
struct Asking {
    open: usize,
    /// When the open questions' stretch began (`open > 0`).
    since: Option<Instant>,
    /// The closed stretches, added up.
    closed: Duration,
}

impl Asking {
    /// Time spent with a question open, up to `now`: never decreasing, so a
    /// call's credit is this at its end minus this at its start.
    fn paused(&self, now: Instant) -> Duration {
        let current = self
            .since
            .map_or(Duration::ZERO, |s| now.saturating_duration_since(s));
        self.closed.saturating_add(current)
    }
}

/// One server's questions, seen by its client handler and by its calls,
/// and how many of our requests to it are in flight.
#[derive(Debug, Clone)]
pub(crate) struct AnswerClock {
    asking: Arc<watch::Sender<Asking>>,
    in_flight: Arc<AtomicUsize>,
}

impl Default for AnswerClock {
    fn default() -> Self {
        Self {
            asking: Arc::new(watch::Sender::new(Asking::default())),
            in_flight: Arc::new(AtomicUsize::new(0)),
        }
    }
}

/// A request of ours in flight; counted until dropped.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn start(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(count))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A question while it is open; closed when dropped, however the wait for
/// its answer ended.
#[must_use = "the question closes when this is dropped"]
pub(crate) struct OpenQuestion(AnswerClock);

impl Drop for OpenQuestion {
    fn drop(&mut self) {
        let now = Instant::now();
        self.0.asking.send_modify(|a| {
            a.open = a.open.saturating_sub(1);
            if a.open == 0 {
                if let Some(since) = a.since.take() {
                    a.closed = a
                        .closed
                        .saturating_add(now.saturating_duration_since(since));
                }
            }
        });
    }
}

impl AnswerClock {
    /// Marks a question open until the returned guard is dropped.
    pub(crate) fn open(&self) -> OpenQuestion {
        let now = Instant::now();
        self.asking.send_modify(|a| {
            if a.open == 0 {
                a.since = Some(now);
            }
            a.open = a.open.saturating_add(1);
        });
        OpenQuestion(self.clone())
    }

    /// Whether a request of ours to the server is in flight (one run by
    /// [`AnswerClock::within`]).
    pub(crate) fn busy(&self) -> bool {
        self.in_flight.load(Ordering::SeqCst) > 0
    }

    /// Runs `call` for at most `limit` of the server's time: the time a
    /// question of the server is open (at most [`MAX_ANSWER_PAUSE`] in
    /// all) is not counted. `None` when the deadline passed; `call` is then
    /// dropped. Meanwhile the server is [`AnswerClock::busy`].
    pub(crate) async fn within<F: Future>(&self, limit: Duration, call: F) -> Option<F::Output> {
        let _in_flight = InFlight::start(&self.in_flight);
        let mut seen = self.asking.subscribe();
        let start = Instant::now();
        let at_start = seen.borrow_and_update().paused(start);
        let mut call = std::pin::pin!(call);
        loop {
            let now = Instant::now();
            let asking = *seen.borrow_and_update();
            let credit = asking
                .paused(now)
                .saturating_sub(at_start)
                .min(MAX_ANSWER_PAUSE);
            let allowed = limit.saturating_add(credit);
            if now.saturating_duration_since(start) >= allowed {
                return None;
            }
            let wake = if asking.open > 0 && credit < MAX_ANSWER_PAUSE {
                // Standing still: nothing to count until a question closes,
                // or until the credit runs out.
                now.checked_add(MAX_ANSWER_PAUSE.saturating_sub(credit))
            } else {
                start.checked_add(allowed)
            };
            let sleep = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at).await,
                    // Past what an `Instant` holds: never, in practice.
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                out = &mut call => return Some(out),
                // The sender lives in `self`, so this cannot fail.
                _ = seen.changed() => {}
                () = sleep => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_secs(120);

    /// A call that takes `takes` while a question is open from `asked`
    /// (after the call starts) for `open`.
    async fn call_with_question(takes: Duration, asked: Duration, open: Duration) -> Option<()> {
        let clock = AnswerClock::default();
        let asker = clock.clone();
        tokio::spawn(async move {
            tokio::time::sleep(asked).await;
            let q = asker.open();
            tokio::time::sleep(open).await;
            drop(q);
        });
        clock.within(LIMIT, tokio::time::sleep(takes)).await
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_is_not_charged_the_time_a_question_is_open() {
        // 100 s of 150 s spent waiting on the person: 50 s of the server's.
        let secs = Duration::from_secs;
        assert_eq!(
            call_with_question(secs(150), secs(10), secs(100)).await,
            Some(())
        );
        // Without the question the same call times out.
        let clock = AnswerClock::default();
        assert_eq!(
            clock.within(LIMIT, tokio::time::sleep(secs(150))).await,
            None
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_call_times_out_its_limit_after_the_question_closes() {
        let started = Instant::now();
        let hung = call_with_question(
            Duration::MAX,
            Duration::from_secs(30),
            Duration::from_secs(200),
        );
        assert_eq!(hung.await, None);
        assert_eq!(started.elapsed(), Duration::from_secs(320));
    }

    #[tokio::test(start_paused = true)]
    async fn the_credit_is_bounded() {
        let clock = AnswerClock::default();
        let _never_answered = clock.open();
        let started = Instant::now();
        assert_eq!(
            clock.within(LIMIT, std::future::pending::<()>()).await,
            None
        );
        assert_eq!(started.elapsed(), LIMIT + MAX_ANSWER_PAUSE);
    }

    #[tokio::test(start_paused = true)]
    async fn only_the_part_of_a_question_inside_the_call_counts() {
        let clock = AnswerClock::default();
        let q = clock.open();
        tokio::time::sleep(Duration::from_secs(500)).await;
        let asker = clock.clone();
        let closer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(40)).await;
            drop(q);
            // A second question, later in the same call.
            tokio::time::sleep(Duration::from_secs(10)).await;
            let again = asker.open();
            tokio::time::sleep(Duration::from_secs(5)).await;
            drop(again);
        });
        let started = Instant::now();
        assert_eq!(
            clock.within(LIMIT, std::future::pending::<()>()).await,
            None
        );
        assert_eq!(started.elapsed(), LIMIT + Duration::from_secs(45));
        closer.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_is_busy_while_a_request_of_ours_is_in_flight() {
        let clock = AnswerClock::default();
        assert!(!clock.busy());
        let watched = clock.clone();
        let during = clock.within(LIMIT, async move { watched.busy() }).await;
        assert_eq!(during, Some(true));
        assert!(!clock.busy());
        // A call dropped at its deadline is no longer in flight either.
        assert_eq!(
            clock.within(LIMIT, std::future::pending::<()>()).await,
            None
        );
        assert!(!clock.busy());
    }

    #[tokio::test(start_paused = true)]
    async fn overlapping_questions_pause_once() {
        let clock = AnswerClock::default();
        let (a, b) = (clock.clone(), clock.clone());
        tokio::spawn(async move {
            let q = a.open();
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(q);
        });
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            let q = b.open();
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(q);
        });
        let started = Instant::now();
        assert_eq!(
            clock.within(LIMIT, std::future::pending::<()>()).await,
            None
        );
        // Questions open from 0 s to 90 s: 90 s credited, not 120 s.
        assert_eq!(started.elapsed(), LIMIT + Duration::from_secs(90));
    }
}
