//! Logs a tool leaves for the branch that runs it. A tool runs apart from
//! the branch (on a task of its own, without access to it), yet some of
//! what it does belongs in the branch's logs: a connected model's API call
//! is logged as the reference's `connect` logs it. The invoker runs the
//! tool inside [`collect`]; the tool hands each log to [`record`]; the
//! verb commits them to the branch before the tool call's own log.

use std::cell::RefCell;
use std::future::Future;

use crate::log::Log;

tokio::task_local! {
    static LEFT: RefCell<Vec<Log>>;
}

/// Runs `fut`, gathering the logs it [`record`]s.
pub async fn collect<F: Future>(fut: F) -> (F::Output, Vec<Log>) {
    LEFT.scope(RefCell::new(Vec::new()), async move {
        let out = fut.await;
        let logs = LEFT.with(RefCell::take);
        (out, logs)
    })
    .await
}

/// Leaves `log` for the branch running the current tool; `false` (the log
/// dropped) when no tool call is collecting, e.g. a tool called directly.
pub fn record(log: Log) -> bool {
    LEFT.try_with(|left| left.borrow_mut().push(log)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn logs_are_gathered_only_inside_a_collection() {
        assert!(!record(Log::from_json(json!({"outside": true}))));
        let (out, logs) = collect(async {
            assert!(record(Log::from_json(json!({"n": 1}))));
            tokio::task::yield_now().await;
            assert!(record(Log::from_json(json!({"n": 2}))));
            7
        })
        .await;
        assert_eq!(out, 7);
        let ns: Vec<_> = logs.iter().map(|l| l.content()["n"].clone()).collect();
        assert_eq!(ns, [json!(1), json!(2)]);
    }
}
