//! Where a server's progress notifications go: the server-wide hook hears
//! every one; a branch's observer hears only those of the calls made for
//! that branch. A server's tools may be registered on many branches (of
//! different users, in one session), so one branch's tool output must not
//! reach another's observer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use branch_core::observer::{ObserverSlot, Signal, WeakObserverSlot};
use rmcp::model::{NumberOrString, ProgressNotificationParam};
use uuid::Uuid;

/// A progress notification of a running call.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// The server's name.
    pub server: String,
    /// The progress so far.
    pub progress: f64,
    /// The total, when known.
    pub total: Option<f64>,
    /// The server's message, when it sent one.
    pub message: Option<String>,
}

/// Called with each progress notification (for a display).
pub type ProgressHook = Arc<dyn Fn(&Progress) + Send + Sync>;

#[derive(Default)]
struct State {
    /// The branches the server's tools are registered on, with their
    /// observer slots (whichever observer is attached when progress comes).
    /// Weak: the server may outlive them, and a dropped branch's slot and
    /// observer must not live on here.
    listeners: Vec<(Uuid, WeakObserverSlot)>,
    /// The calls in flight, by progress token: the branch each runs for,
    /// `None` when it was made outside any branch's verb.
    calls: HashMap<String, Option<Uuid>>,
}

/// One server's routing of progress to branches (shared by its client
/// handler, which hears the notifications, and its calls).
#[derive(Clone, Default)]
pub(crate) struct ProgressRoutes(Arc<Mutex<State>>);

impl ProgressRoutes {
    /// `branch_id`'s observer may hear progress of the calls made for it,
    /// while the branch lives. Once per branch; the entries of branches
    /// gone since are dropped here.
    pub(crate) fn listen(&self, branch_id: Uuid, slot: &ObserverSlot) {
        if let Ok(mut s) = self.0.lock() {
            s.listeners.retain(|(_, l)| l.is_alive());
            if !s.listeners.iter().any(|(id, _)| *id == branch_id) {
                s.listeners.push((branch_id, slot.downgrade()));
            }
        }
    }

    /// Records a call in flight under `token`, made for the branch whose
    /// verb is running on this task (`branch_core::telemetry`'s current
    /// conversation), until the returned guard drops: when the call
    /// returns, fails, times out or is cancelled.
    pub(crate) fn call(&self, token: &str) -> CallRoute {
        let caller =
            branch_core::telemetry::conversation_id().and_then(|id| Uuid::parse_str(&id).ok());
        if let Ok(mut s) = self.0.lock() {
            s.calls.insert(token.to_owned(), caller);
        }
        CallRoute {
            routes: self.clone(),
            token: token.to_owned(),
        }
    }

    /// Delivers `params` as [`Signal::ToolProgress`] to the observer of the
    /// branch its call was made for, if that branch listens. Progress of
    /// an unknown token (a call already over, or one the server made up)
    /// and of calls made outside any branch reaches no branch.
    pub(crate) fn deliver(&self, server: &str, params: &ProgressNotificationParam) {
        let token = match &params.progress_token.0 {
            NumberOrString::String(s) => s.to_string(),
            NumberOrString::Number(n) => n.to_string(),
        };
        let target = self.0.lock().ok().and_then(|s| {
            let branch = (*s.calls.get(&token)?)?;
            let slot = s
                .listeners
                .iter()
                .find(|(id, _)| *id == branch)?
                .1
                .upgrade()?;
            Some((branch, slot))
        });
        if let Some((branch_id, slot)) = target {
            slot.emit(Signal::ToolProgress {
                branch_id,
                source: server.to_owned(),
                progress: params.progress,
                total: params.total,
                message: params.message.clone(),
            });
        }
    }

    #[cfg(test)]
    fn in_flight(&self) -> usize {
        self.0.lock().map(|s| s.calls.len()).unwrap_or(0)
    }

    #[cfg(test)]
    fn listening(&self) -> usize {
        self.0.lock().map(|s| s.listeners.len()).unwrap_or(0)
    }
}

/// A call's entry in [`ProgressRoutes`]; dropping it ends the call's
/// routing (so the map holds only calls in flight).
pub(crate) struct CallRoute {
    routes: ProgressRoutes,
    token: String,
}

impl Drop for CallRoute {
    fn drop(&mut self) {
        if let Ok(mut s) = self.routes.0.lock() {
            s.calls.remove(&self.token);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use branch_core::observer::Observer;
    use rmcp::model::ProgressToken;

    struct Recorder(Mutex<Vec<Signal>>);

    impl Observer for Recorder {
        fn observe(&self, signal: Signal) {
            self.0.lock().unwrap().push(signal);
        }
    }

    fn listener(routes: &ProgressRoutes) -> (branch_core::Branch, Arc<Recorder>) {
        let recorder = Arc::new(Recorder(Mutex::new(Vec::new())));
        let mut branch = branch_core::Branch::builder().build().unwrap();
        branch.set_observer(Some(recorder.clone()));
        routes.listen(branch.id(), &branch.observer_slot());
        (branch, recorder)
    }

    fn progress(token: &str, step: f64) -> ProgressNotificationParam {
        ProgressNotificationParam::new(
            ProgressToken(NumberOrString::String(token.to_owned().into())),
            step,
        )
    }

    fn heard(r: &Recorder) -> Vec<(Uuid, f64)> {
        r.0.lock()
            .unwrap()
            .iter()
            .filter_map(|s| match s {
                Signal::ToolProgress {
                    branch_id,
                    progress,
                    ..
                } => Some((*branch_id, *progress)),
                _ => None,
            })
            .collect()
    }

    #[tokio::test]
    async fn progress_reaches_only_the_calling_branch_and_only_while_its_call_runs() {
        let routes = ProgressRoutes::default();
        let (a, heard_a) = listener(&routes);
        let (b, heard_b) = listener(&routes);
        let (a, b) = (a.id(), b.id());

        let route = branch_core::telemetry::in_conversation(b.to_string(), async {
            routes.call("lionagi-1")
        })
        .await;
        let outside = routes.call("lionagi-2");
        assert_eq!(routes.in_flight(), 2);

        routes.deliver("py", &progress("lionagi-1", 1.0));
        routes.deliver("py", &progress("lionagi-2", 2.0));
        routes.deliver("py", &progress("made-up", 3.0));
        assert_eq!(heard(&heard_b), vec![(b, 1.0)]);
        assert!(heard(&heard_a).is_empty(), "{:?}", heard(&heard_a));

        drop(route);
        drop(outside);
        assert_eq!(routes.in_flight(), 0);
        routes.deliver("py", &progress("lionagi-1", 4.0));
        assert_eq!(heard(&heard_b), vec![(b, 1.0)], "late progress delivered");
        assert_ne!(a, b);
    }

    #[tokio::test]
    async fn a_caller_that_does_not_listen_hears_nothing() {
        let routes = ProgressRoutes::default();
        let (_branch, listening) = listener(&routes);
        let stranger = Uuid::new_v4();
        let _route = branch_core::telemetry::in_conversation(stranger.to_string(), async {
            routes.call("lionagi-7")
        })
        .await;
        routes.deliver("py", &progress("lionagi-7", 1.0));
        assert!(heard(&listening).is_empty());
    }

    #[tokio::test]
    async fn a_dropped_branch_is_not_kept_alive_by_the_server() {
        let routes = ProgressRoutes::default();
        let (gone, recorder) = listener(&routes);
        let gone_id = gone.id();
        let (_kept, _) = listener(&routes);
        assert_eq!(routes.listening(), 2);
        drop(gone);
        // Nothing of the dropped branch is held: its observer is free.
        assert_eq!(Arc::strong_count(&recorder), 1);
        let _route = branch_core::telemetry::in_conversation(gone_id.to_string(), async {
            routes.call("lionagi-9")
        })
        .await;
        routes.deliver("py", &progress("lionagi-9", 1.0));
        assert!(heard(&recorder).is_empty());
        let (_another, _) = listener(&routes);
        assert_eq!(
            routes.listening(),
            2,
            "the dropped branch's entry was pruned"
        );
    }
}
