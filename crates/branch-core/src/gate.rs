//! The governance gate seam: a check consulted before every tool call of
//! the branch (the reference's `authorize` on the session observer,
//! extensions.md §5.3). A call the gate refuses is recorded but never
//! dispatched; the verbs in `branch-operations` do the recording.
//!
//! The gate sits beside the observer: both are session references a branch
//! holds without owning (never serialized, never cloned), and clones of a
//! [`GateSlot`] share the slot the way observer slots do.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::observer::{ObserverSlot, Signal};

/// A proposed tool call as the gate sees it (the reference's
/// `ToolInvocation`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolInvocation {
    /// The tool's name.
    pub function: String,
    /// The arguments the call would run with.
    pub arguments: Map<String, Value>,
    /// The branch proposing it.
    pub branch_id: Uuid,
}

/// What a gate's check returns: `Ok(true)` allows; `Ok(false)` denies; an
/// error denies too (the gate fails closed, as the reference does).
pub type GateFuture<'a> = Pin<Box<dyn Future<Output = Result<bool, String>> + Send + 'a>>;

/// Decides whether a proposed tool call may run.
pub trait Gate: Send + Sync + 'static {
    /// The verdict on `call`.
    fn authorize<'a>(&'a self, call: &'a ToolInvocation) -> GateFuture<'a>;
}

/// A gate from a synchronous predicate.
pub struct GateFn<F>(pub F);

impl<F> Gate for GateFn<F>
where
    F: Fn(&ToolInvocation) -> bool + Send + Sync + 'static,
{
    fn authorize<'a>(&'a self, call: &'a ToolInvocation) -> GateFuture<'a> {
        let verdict = (self.0)(call);
        Box::pin(async move { Ok(verdict) })
    }
}

/// Wraps a synchronous predicate as a shareable gate.
pub fn gate_fn<F>(f: F) -> Arc<dyn Gate>
where
    F: Fn(&ToolInvocation) -> bool + Send + Sync + 'static,
{
    Arc::new(GateFn(f))
}

/// The branch's attachment point for a gate. Clones share the slot.
#[derive(Clone, Default)]
pub struct GateSlot(Arc<RwLock<Option<Arc<dyn Gate>>>>);

impl std::fmt::Debug for GateSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GateSlot")
            .field("attached", &self.get().is_some())
            .finish()
    }
}

impl GateSlot {
    pub(crate) fn set(&self, g: Option<Arc<dyn Gate>>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = g;
    }

    /// The gate attached now.
    pub fn get(&self) -> Option<Arc<dyn Gate>> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The verdict on `call`: allowed without a gate; otherwise the gate's
    /// answer, an error counting as a denial. A denial is reported to the
    /// observer as [`Signal::GateDenied`].
    pub async fn authorize(&self, call: &ToolInvocation, observer: &ObserverSlot) -> bool {
        let Some(gate) = self.get() else {
            return true;
        };
        let allowed = match gate.authorize(call).await {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(function = %call.function, error = %e, "gate failed; denying");
                false
            }
        };
        if !allowed {
            observer.emit(Signal::GateDenied {
                branch_id: call.branch_id,
                invocation: call.clone(),
            });
        }
        allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Failing;
    impl Gate for Failing {
        fn authorize<'a>(&'a self, _: &'a ToolInvocation) -> GateFuture<'a> {
            Box::pin(async { Err("backend down".to_owned()) })
        }
    }

    struct Seen(Mutex<Vec<String>>);
    impl crate::observer::Observer for Seen {
        fn observe(&self, s: Signal) {
            self.0.lock().unwrap().push(s.class_name().to_owned());
        }
    }

    fn call(f: &str) -> ToolInvocation {
        ToolInvocation {
            function: f.into(),
            arguments: Map::new(),
            branch_id: Uuid::nil(),
        }
    }

    #[tokio::test]
    async fn no_gate_allows_a_failing_gate_denies_and_denials_are_signalled() {
        let slot = GateSlot::default();
        let obs = ObserverSlot::default();
        let seen = Arc::new(Seen(Mutex::new(Vec::new())));
        obs.set(Some(seen.clone()));
        assert!(slot.authorize(&call("x"), &obs).await);
        slot.set(Some(Arc::new(Failing)));
        assert!(!slot.authorize(&call("x"), &obs).await);
        slot.set(Some(gate_fn(|c| c.function == "ok")));
        assert!(slot.authorize(&call("ok"), &obs).await);
        assert!(!slot.authorize(&call("no"), &obs).await);
        assert_eq!(*seen.0.lock().unwrap(), ["GateDenied", "GateDenied"]);
    }
}
