//! How a command's runtime ends: a bounded wait for what is left on
//! tokio's blocking pool.
//!
//! Dropping a runtime waits for every blocking task that has started, with
//! no deadline. What can be left there at exit is a store write whose
//! turn was cancelled (Ctrl-C) and a log dump past `LOG_DUMP_DEADLINE`; on
//! a disk or network filesystem that stopped answering either would hold
//! the command forever after it has said everything it had to say. A
//! write cut at the deadline is not committed: a SQLite transaction is all
//! or nothing.

use std::time::{Duration, Instant};

use tokio::runtime::Runtime;

use crate::limits::EXIT_DEADLINE;

/// Shuts `rt` down, waiting at most [`EXIT_DEADLINE`] for its blocking
/// tasks; warns on stderr when one was left running.
pub(crate) fn shut_down(rt: Runtime) {
    if shut_down_within(rt, EXIT_DEADLINE) {
        eprintln!(
            "lionagi: a background write (the store or a log dump) did not finish within {} s; it was abandoned",
            EXIT_DEADLINE.as_secs()
        );
    }
}

/// Whether the wait ran out with a task still running.
fn shut_down_within(rt: Runtime, deadline: Duration) -> bool {
    let started = Instant::now();
    rt.shutdown_timeout(deadline);
    started.elapsed() >= deadline
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A blocking task that never ends does not hold the exit past the
    /// deadline (dropping the runtime would wait for it forever), and one
    /// that ends is waited for.
    #[test]
    fn a_hung_blocking_task_is_abandoned_at_the_deadline() {
        let rt = runtime();
        let (release, hung) = std::sync::mpsc::channel::<()>();
        let (started_tx, started) = std::sync::mpsc::channel::<()>();
        rt.spawn_blocking(move || {
            let _ = started_tx.send(());
            let _ = hung.recv();
        });
        started.recv().unwrap();
        assert!(shut_down_within(rt, Duration::from_millis(200)));
        drop(release);

        // Started first: tokio drops a blocking task that has not started
        // when its runtime shuts down.
        let rt = runtime();
        let (done_tx, done) = std::sync::mpsc::channel::<()>();
        let (started_tx, started) = std::sync::mpsc::channel::<()>();
        rt.spawn_blocking(move || {
            let _ = started_tx.send(());
            std::thread::sleep(Duration::from_millis(50));
            let _ = done_tx.send(());
        });
        started.recv().unwrap();
        assert!(!shut_down_within(rt, Duration::from_secs(60)));
        assert!(done.try_recv().is_ok(), "the finished task was waited for");
    }
}
