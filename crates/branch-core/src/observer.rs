//! The observer seam: typed signals about a branch, delivered to whoever
//! is attached (normally a session), and [`QueuedObserver`], the adapter
//! that keeps a slow or failing observer off the path of a turn.
//!
//! Signals are observations only: nothing in a signal is executed or
//! authorized by emitting it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};

use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio::sync::{Notify, mpsc};
use uuid::Uuid;

use crate::message::{Message, MessageKind};
use crate::model::token_count;

/// A capability block that mixes granted and ungranted keys.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapabilityViolation {
    /// The keys outside the grant, sorted.
    pub offending: Vec<String>,
    /// The granted keys, sorted.
    pub allowed: Vec<String>,
    /// The block as the assistant wrote it.
    pub block: Option<Map<String, Value>>,
}

/// A block of granted keys whose values did not validate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmissionRejected {
    /// The emitting branch's name, `""` when it has none.
    pub branch_name: String,
    /// The validation error text.
    pub error: String,
    /// The block as the assistant wrote it.
    pub block: Option<Map<String, Value>>,
}

/// Token usage and cost of one run, summed over every assistant response
/// of the branch (the reference's `RunEnd` fields).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunUsage {
    /// Input tokens, cached reads excluded.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens served from a prompt cache.
    pub cached_tokens: u64,
    /// Input tokens written to a prompt cache.
    pub cache_write_tokens: u64,
    /// Of those, written with a five-minute lifetime.
    pub cache_write_5m_tokens: u64,
    /// Of those, written with a one-hour lifetime.
    pub cache_write_1h_tokens: u64,
    /// Output tokens spent on reasoning (part of `output_tokens`). Not in
    /// the reference's `RunEnd` fields, so written only when there are any.
    #[serde(skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
    /// Cost in US dollars, when a provider reported one.
    pub total_cost_usd: Option<f64>,
    /// Agent turns, when a provider reported them.
    pub num_turns: u64,
    /// Wall-clock duration of the run, measured by the caller.
    pub duration_ms: f64,
    /// False when some reported usage could not be read.
    pub usage_valid: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Default for RunUsage {
    fn default() -> Self {
        Self {
            input_tokens: 0,
            output_tokens: 0,
            cached_tokens: 0,
            cache_write_tokens: 0,
            cache_write_5m_tokens: 0,
            cache_write_1h_tokens: 0,
            reasoning_tokens: 0,
            total_cost_usd: None,
            num_turns: 0,
            duration_ms: 0.0,
            usage_valid: true,
        }
    }
}

/// A token count ([`token_count`]); absent or `null` is zero.
fn count(v: Option<&Value>) -> Option<u64> {
    match v {
        None | Some(Value::Null) => Some(0),
        Some(v) => token_count(v),
    }
}

impl RunUsage {
    /// Sums the usage recorded on every assistant response among
    /// `messages` (`metadata.model_response.usage`), OpenAI- or
    /// Anthropic-style. `duration_ms` is left for the caller.
    pub fn from_messages<'a>(messages: impl IntoIterator<Item = &'a Message>) -> Self {
        let mut u = Self::default();
        for m in messages {
            if m.kind() != MessageKind::AssistantResponse {
                continue;
            }
            // A look: the reply stays as compact as it is kept.
            if let Some(resp) = m.element.metadata.peek("model_response") {
                u.add_response(&resp);
            }
        }
        u
    }

    /// Adds another sum to this one (a session's total over its branches).
    pub fn merge(&mut self, other: &RunUsage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(other.cached_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
        self.cache_write_5m_tokens = self
            .cache_write_5m_tokens
            .saturating_add(other.cache_write_5m_tokens);
        self.cache_write_1h_tokens = self
            .cache_write_1h_tokens
            .saturating_add(other.cache_write_1h_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(other.reasoning_tokens);
        if let Some(c) = other.total_cost_usd {
            *self.total_cost_usd.get_or_insert(0.0) += c;
        }
        self.num_turns = self.num_turns.saturating_add(other.num_turns);
        self.duration_ms += other.duration_ms;
        self.usage_valid &= other.usage_valid;
    }

    /// Adds one raw provider response (its `usage`, cost and turns).
    pub fn add_response(&mut self, response: &Value) {
        if let Some(usage) = response.get("usage").filter(|v| !v.is_null()) {
            self.add_usage(usage);
        }
        for key in ["total_cost_usd", "cost"] {
            let cost = response
                .get(key)
                .or_else(|| response.get("usage").and_then(|u| u.get(key)))
                .and_then(Value::as_f64);
            if let Some(c) = cost {
                *self.total_cost_usd.get_or_insert(0.0) += c;
                break;
            }
        }
        if let Some(n) = response.get("num_turns").and_then(Value::as_u64) {
            self.num_turns += n;
        }
    }

    /// Adds one `usage` object of any of the three protocols, to one
    /// meaning: `input_tokens` never counts cached reads. OpenAI chat
    /// (`prompt_tokens`, `completion_tokens`,
    /// `prompt_tokens_details.cached_tokens`,
    /// `completion_tokens_details.reasoning_tokens`) and OpenAI Responses
    /// (`input_tokens`, `output_tokens`, `input_tokens_details.cached_tokens`,
    /// `output_tokens_details.reasoning_tokens`) include cached reads in
    /// their input count, so those are subtracted; Anthropic
    /// (`input_tokens`, `cache_read_input_tokens`,
    /// `cache_creation_input_tokens`, `cache_creation.*`) reports them apart
    /// and is taken as reported. Unreadable numbers clear `usage_valid`.
    pub fn add_usage(&mut self, usage: &Value) {
        let mut ok = usage.is_object();
        let mut read = |v: Option<&Value>| {
            count(v).unwrap_or_else(|| {
                ok = false;
                0
            })
        };
        let add = |a: &mut u64, b: u64| *a = a.saturating_add(b);
        let chat = usage.get("prompt_tokens").is_some() || usage.get("completion_tokens").is_some();
        let (input, output, included_cached, reasoning) = if chat {
            (
                read(usage.get("prompt_tokens")),
                read(usage.get("completion_tokens")),
                read(usage.pointer("/prompt_tokens_details/cached_tokens")),
                read(usage.pointer("/completion_tokens_details/reasoning_tokens")),
            )
        } else {
            (
                read(usage.get("input_tokens")),
                read(usage.get("output_tokens")),
                read(usage.pointer("/input_tokens_details/cached_tokens")),
                read(usage.pointer("/output_tokens_details/reasoning_tokens")),
            )
        };
        // Cached reads counted inside the input (OpenAI's meaning) never
        // exceed it; a larger report is capped rather than trusted.
        let included_cached = included_cached.min(input);
        add(&mut self.input_tokens, input - included_cached);
        add(&mut self.output_tokens, output);
        add(&mut self.cached_tokens, included_cached);
        add(&mut self.reasoning_tokens, reasoning);
        add(
            &mut self.cached_tokens,
            read(usage.get("cache_read_input_tokens")),
        );
        add(
            &mut self.cache_write_tokens,
            read(usage.get("cache_creation_input_tokens")),
        );
        add(
            &mut self.cache_write_5m_tokens,
            read(usage.pointer("/cache_creation/ephemeral_5m_input_tokens")),
        );
        add(
            &mut self.cache_write_1h_tokens,
            read(usage.pointer("/cache_creation/ephemeral_1h_input_tokens")),
        );
        self.usage_valid &= ok;
    }
}

/// Something that happened on a branch.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Signal {
    /// A message was added to the branch's conversation.
    MessageAdded {
        /// The branch.
        branch_id: Uuid,
        /// The message as added.
        message: Message,
    },
    /// A fenced JSON block of an assistant message validated against the
    /// branch's capability grant.
    StructuredOutput {
        /// The branch.
        branch_id: Uuid,
        /// The grant's name (the reference's `emitter_role`).
        grant_name: Option<String>,
        /// The validated bundle, keys in the grant's field order.
        data: Map<String, Value>,
    },
    /// A block mixed granted and ungranted keys.
    CapabilityViolation {
        /// The branch.
        branch_id: Uuid,
        /// What was wrong.
        violation: CapabilityViolation,
    },
    /// A block of granted keys failed validation.
    EmissionRejected {
        /// The branch.
        branch_id: Uuid,
        /// What was wrong.
        rejection: EmissionRejected,
    },
    /// A verb (`communicate`, `operate`, `ReAct`, `run`) started.
    RunStarted {
        /// The branch.
        branch_id: Uuid,
        /// The verb's name.
        verb: String,
    },
    /// A verb ended successfully.
    RunEnded {
        /// The branch.
        branch_id: Uuid,
        /// The verb's name.
        verb: String,
        /// The verb's result, as JSON.
        result: Value,
        /// Usage summed over the branch's assistant responses.
        usage: RunUsage,
    },
    /// The governance gate refused a proposed tool call (recorded, not
    /// dispatched).
    GateDenied {
        /// The branch.
        branch_id: Uuid,
        /// The refused call.
        invocation: crate::gate::ToolInvocation,
    },
    /// A running tool reported progress (an MCP server's
    /// `notifications/progress`; no reference counterpart).
    ToolProgress {
        /// The branch the tool is registered on.
        branch_id: Uuid,
        /// Who reported it (the MCP server's name).
        source: String,
        /// The progress so far.
        progress: f64,
        /// The total, when known.
        total: Option<f64>,
        /// The reporter's message, when it sent one.
        message: Option<String>,
    },
    /// A verb failed.
    RunFailed {
        /// The branch.
        branch_id: Uuid,
        /// The verb's name.
        verb: String,
        /// The error's kind (a type or variant name).
        error_kind: String,
        /// The error's message.
        error: String,
    },
}

fn data_class(v: &Value) -> &'static str {
    match v {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

impl Signal {
    /// The branch the signal is about.
    pub fn branch_id(&self) -> Uuid {
        match self {
            Signal::MessageAdded { branch_id, .. }
            | Signal::StructuredOutput { branch_id, .. }
            | Signal::CapabilityViolation { branch_id, .. }
            | Signal::EmissionRejected { branch_id, .. }
            | Signal::RunStarted { branch_id, .. }
            | Signal::RunEnded { branch_id, .. }
            | Signal::GateDenied { branch_id, .. }
            | Signal::ToolProgress { branch_id, .. }
            | Signal::RunFailed { branch_id, .. } => *branch_id,
        }
    }

    /// The reference's signal class name (`"MessageAdded"`, `"RunEnd"`,
    /// ...; violations and rejections travel as a plain `"Signal"`).
    pub fn class_name(&self) -> &'static str {
        match self {
            Signal::MessageAdded { .. } => "MessageAdded",
            Signal::StructuredOutput { .. } => "StructuredOutput",
            Signal::CapabilityViolation { .. } | Signal::EmissionRejected { .. } => "Signal",
            Signal::RunStarted { .. } => "RunStart",
            Signal::RunEnded { .. } => "RunEnd",
            Signal::RunFailed { .. } => "RunFailed",
            Signal::GateDenied { .. } => "GateDenied",
            Signal::ToolProgress { .. } => "ToolProgress",
        }
    }

    /// A JSON view in the shape the conformance fixtures record:
    /// `signal_class`, `emitter_role`, `data_class`, `data`, and `fields`
    /// for the usage of `RunEnd`.
    pub fn view(&self) -> Value {
        let (emitter_role, class, data) = match self {
            Signal::MessageAdded { message, .. } => (
                Value::Null,
                message.kind().class_name().to_owned(),
                message.to_value().unwrap_or(Value::Null),
            ),
            Signal::StructuredOutput {
                grant_name, data, ..
            } => (
                grant_name.clone().map_or(Value::Null, Value::String),
                grant_name
                    .clone()
                    .unwrap_or_else(|| "Capabilities".to_owned()),
                Value::Object(data.clone()),
            ),
            Signal::CapabilityViolation { violation, .. } => (
                Value::Null,
                "CapabilityViolation".to_owned(),
                json!(violation),
            ),
            Signal::EmissionRejected { rejection, .. } => {
                (Value::Null, "EmissionRejected".to_owned(), json!(rejection))
            }
            Signal::RunStarted { .. } => (Value::Null, "NoneType".to_owned(), Value::Null),
            Signal::RunEnded { result, .. } => {
                (Value::Null, data_class(result).to_owned(), result.clone())
            }
            Signal::GateDenied { invocation, .. } => {
                (Value::Null, "ToolInvocation".to_owned(), json!(invocation))
            }
            Signal::ToolProgress {
                source,
                progress,
                total,
                message,
                ..
            } => (
                Value::Null,
                "ToolProgress".to_owned(),
                json!({"source": source, "progress": progress, "total": total, "message": message}),
            ),
            Signal::RunFailed {
                error_kind, error, ..
            } => (
                Value::Null,
                error_kind.clone(),
                Value::String(error.clone()),
            ),
        };
        let mut view = json!({
            "signal_class": self.class_name(),
            "emitter_role": emitter_role,
            "data_class": class,
            "data": data,
        });
        if let Signal::RunEnded { usage, .. } = self {
            view["fields"] = json!(usage);
        }
        view
    }
}

/// Receives signals. `observe` is called on the path of a turn, so it must
/// return quickly: queue the signal and do the work elsewhere (wrap a slow
/// observer in [`QueuedObserver`]).
pub trait Observer: Send + Sync + 'static {
    /// Takes one signal.
    fn observe(&self, signal: Signal);
}

/// The branch's attachment point for an observer. Clones share the slot,
/// so a message callback holding one always reaches the observer attached
/// now, not the one attached when the callback was made.
#[derive(Clone, Default)]
pub struct ObserverSlot(Arc<RwLock<Option<Arc<dyn Observer>>>>);

impl std::fmt::Debug for ObserverSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObserverSlot")
            .field("attached", &self.get().is_some())
            .finish()
    }
}

impl ObserverSlot {
    pub(crate) fn set(&self, o: Option<Arc<dyn Observer>>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = o;
    }

    /// The observer attached now.
    pub fn get(&self) -> Option<Arc<dyn Observer>> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Delivers `signal` to the attached observer, if any.
    pub fn emit(&self, signal: Signal) {
        if let Some(o) = self.get() {
            o.observe(signal);
        }
    }

    /// A handle that reaches this slot while its branch (or another holder)
    /// keeps it, without keeping it, or the observer in it, alive: for
    /// registries that outlive the branches they serve.
    pub fn downgrade(&self) -> WeakObserverSlot {
        WeakObserverSlot(Arc::downgrade(&self.0))
    }
}

/// An [`ObserverSlot`] that does not keep the slot alive
/// ([`ObserverSlot::downgrade`]).
#[derive(Clone, Default)]
pub struct WeakObserverSlot(Weak<RwLock<Option<Arc<dyn Observer>>>>);

impl std::fmt::Debug for WeakObserverSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeakObserverSlot")
            .field("alive", &self.is_alive())
            .finish()
    }
}

impl WeakObserverSlot {
    /// The slot, while something still holds it.
    pub fn upgrade(&self) -> Option<ObserverSlot> {
        self.0.upgrade().map(ObserverSlot)
    }

    /// Whether something still holds the slot.
    pub fn is_alive(&self) -> bool {
        self.0.strong_count() > 0
    }
}

/// Counters of a [`QueuedObserver`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueStats {
    /// Signals accepted into the queue.
    pub accepted: u64,
    /// Signals handed to the inner observer that returned normally.
    pub delivered: u64,
    /// Signals whose delivery panicked (contained).
    pub failed: u64,
    /// Signals dropped because the queue was full or closed.
    pub dropped: u64,
}

#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    delivered: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
    progress: Notify,
}

impl Counters {
    fn finished(&self) -> u64 {
        self.delivered.load(Ordering::Acquire) + self.failed.load(Ordering::Acquire)
    }
}

/// Why a [`QueuedObserver`] could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueuedObserverError {
    /// A queue of capacity 0 cannot hold a signal.
    #[error("QueuedObserver capacity must be at least 1")]
    ZeroCapacity,
    /// The delivery task needs a Tokio runtime.
    #[error("QueuedObserver must be started inside a Tokio runtime")]
    NoRuntime,
}

/// An [`Observer`] that puts signals on a bounded queue and delivers them
/// to an inner observer from a task of its own, so the turn that emits
/// never waits for the inner observer and never sees it fail.
///
/// Policy when the queue is full: **drop the newest** signal (the one
/// being emitted) and count it in [`QueueStats::dropped`]; a warning is
/// logged for the first drop and then every 1,024th. Dropping the newest
/// rather than the oldest keeps what was delivered a prefix-with-gaps of
/// what happened, and needs no lock on the emitting path. A panic in the
/// inner observer is caught, counted in [`QueueStats::failed`], and the
/// next signal is still delivered.
///
/// The inner observer runs on Tokio's blocking pool (one thread for the
/// adapter's lifetime), so even an observer that blocks cannot stall the
/// runtime's workers. The task ends when the adapter is dropped, after
/// delivering what was queued.
pub struct QueuedObserver {
    tx: mpsc::Sender<Signal>,
    counters: Arc<Counters>,
    capacity: usize,
}

impl std::fmt::Debug for QueuedObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuedObserver")
            .field("capacity", &self.capacity)
            .field("stats", &self.stats())
            .finish()
    }
}

impl QueuedObserver {
    /// Starts the delivery task for `inner` with room for `capacity`
    /// pending signals. Must be called inside a Tokio runtime.
    pub fn spawn(
        inner: Arc<dyn Observer>,
        capacity: usize,
    ) -> Result<Arc<Self>, QueuedObserverError> {
        if capacity == 0 {
            return Err(QueuedObserverError::ZeroCapacity);
        }
        let handle =
            tokio::runtime::Handle::try_current().map_err(|_| QueuedObserverError::NoRuntime)?;
        let (tx, mut rx) = mpsc::channel::<Signal>(capacity);
        let counters = Arc::new(Counters::default());
        let c = counters.clone();
        handle.spawn_blocking(move || {
            while let Some(signal) = rx.blocking_recv() {
                match catch_unwind(AssertUnwindSafe(|| inner.observe(signal))) {
                    Ok(()) => c.delivered.fetch_add(1, Ordering::AcqRel),
                    Err(_) => {
                        tracing::warn!("observer panicked while handling a signal; contained");
                        c.failed.fetch_add(1, Ordering::AcqRel)
                    }
                };
                c.progress.notify_waiters();
            }
        });
        Ok(Arc::new(Self {
            tx,
            counters,
            capacity,
        }))
    }

    /// The counters so far.
    pub fn stats(&self) -> QueueStats {
        let c = &self.counters;
        QueueStats {
            accepted: c.accepted.load(Ordering::Acquire),
            delivered: c.delivered.load(Ordering::Acquire),
            failed: c.failed.load(Ordering::Acquire),
            dropped: c.dropped.load(Ordering::Acquire),
        }
    }

    /// Waits until every signal accepted so far has been handed to the
    /// inner observer (the reference's `drain_signals`).
    pub async fn drain(&self) {
        let target = self.counters.accepted.load(Ordering::Acquire);
        loop {
            let notified = self.counters.progress.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.counters.finished() >= target {
                return;
            }
            notified.await;
        }
    }
}

impl Observer for QueuedObserver {
    fn observe(&self, signal: Signal) {
        match self.tx.try_send(signal) {
            Ok(()) => {
                self.counters.accepted.fetch_add(1, Ordering::AcqRel);
            }
            Err(e) => {
                let n = self.counters.dropped.fetch_add(1, Ordering::AcqRel);
                if n % 1024 == 0 {
                    let why = match e {
                        mpsc::error::TrySendError::Full(_) => "queue full",
                        mpsc::error::TrySendError::Closed(_) => "delivery task gone",
                    };
                    tracing::warn!(dropped = n + 1, why, "observer signal dropped");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Recorder(Mutex<Vec<String>>);
    impl Observer for Recorder {
        fn observe(&self, signal: Signal) {
            if let Signal::RunStarted { verb, .. } = &signal {
                if verb == "boom" {
                    panic!("observer failure");
                }
            }
            self.0.lock().unwrap().push(signal.class_name().to_owned());
        }
    }

    fn started(verb: &str) -> Signal {
        Signal::RunStarted {
            branch_id: Uuid::nil(),
            verb: verb.into(),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn panicking_observer_is_contained_and_later_signals_arrive() {
        let rec = Arc::new(Recorder(Mutex::new(Vec::new())));
        let q = QueuedObserver::spawn(rec.clone(), 16).unwrap();
        q.observe(started("boom"));
        q.observe(started("communicate"));
        q.drain().await;
        let s = q.stats();
        assert_eq!((s.accepted, s.delivered, s.failed, s.dropped), (2, 1, 1, 0));
        assert_eq!(*rec.0.lock().unwrap(), ["RunStart"]);
    }

    struct Gate(Mutex<std::sync::mpsc::Receiver<()>>, Mutex<usize>);
    impl Observer for Gate {
        fn observe(&self, _: Signal) {
            // Blocks until the test releases it: a stalled observer.
            let _ = self.0.lock().unwrap().recv();
            *self.1.lock().unwrap() += 1;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn full_queue_drops_newest_without_blocking() {
        let (release, rx) = std::sync::mpsc::channel();
        let gate = Arc::new(Gate(Mutex::new(rx), Mutex::new(0)));
        let q = QueuedObserver::spawn(gate.clone(), 2).unwrap();
        for _ in 0..50 {
            q.observe(started("x"));
        }
        let s = q.stats();
        // At most the capacity plus the one signal being handled fit.
        assert!(s.accepted <= 3, "{s:?}");
        assert_eq!(s.accepted + s.dropped, 50);
        for _ in 0..s.accepted {
            release.send(()).unwrap();
        }
        q.drain().await;
        assert_eq!(*gate.1.lock().unwrap() as u64, s.accepted);
    }

    #[test]
    fn spawn_outside_a_runtime_is_a_typed_error() {
        let rec = Arc::new(Recorder(Mutex::new(Vec::new())));
        assert_eq!(
            QueuedObserver::spawn(rec, 4).unwrap_err(),
            QueuedObserverError::NoRuntime
        );
    }

    #[test]
    fn usage_normalises_openai_and_anthropic_styles() {
        let mut u = RunUsage::default();
        u.add_response(
            &json!({"usage": {"prompt_tokens": 11, "completion_tokens": 7,
            "prompt_tokens_details": {"cached_tokens": 4}}}),
        );
        u.add_response(&json!({"usage": {"input_tokens": 5, "output_tokens": 2,
            "cache_read_input_tokens": 3, "cache_creation_input_tokens": 6,
            "cache_creation": {"ephemeral_5m_input_tokens": 6}}, "total_cost_usd": 0.5}));
        assert_eq!(
            (u.input_tokens, u.output_tokens, u.cached_tokens),
            (12, 9, 7)
        );
        assert_eq!((u.cache_write_tokens, u.cache_write_5m_tokens), (6, 6));
        assert_eq!(u.total_cost_usd, Some(0.5));
        assert!(u.usage_valid);
        u.add_usage(&json!({"prompt_tokens": "many"}));
        assert!(!u.usage_valid);
        // A float is a count only when whole: 3.7 tokens, or a count past
        // u64, was truncated into one.
        for (prompt, valid, input) in [
            (json!(12.0), true, 12),
            (json!(3.7), false, 0),
            (json!(1e30), false, 0),
            (json!(-0.0), true, 0),
        ] {
            let usage = json!({"prompt_tokens": prompt, "completion_tokens": 1});
            let mut u = RunUsage::default();
            u.add_usage(&usage);
            assert_eq!((u.usage_valid, u.input_tokens), (valid, input), "{usage}");
        }
    }

    #[test]
    fn usage_sums_each_protocols_shape_without_double_counting_cached_input() {
        // OpenAI chat completions: prompt_tokens include the cached ones
        // (platform.openai.com/docs/api-reference/chat/object, `usage`).
        let chat = json!({"usage": {"prompt_tokens": 2006, "completion_tokens": 300,
            "total_tokens": 2306,
            "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 256}}});
        // OpenAI Responses: input_tokens include the cached ones
        // (platform.openai.com/docs/api-reference/responses/object, `usage`).
        let responses = json!({"usage": {"input_tokens": 328, "output_tokens": 52,
            "total_tokens": 380,
            "input_tokens_details": {"cached_tokens": 128},
            "output_tokens_details": {"reasoning_tokens": 40}}});
        // Anthropic Messages: input_tokens exclude cache reads and writes
        // (docs.anthropic.com/en/docs/build-with-claude/prompt-caching).
        let anthropic = json!({"usage": {"input_tokens": 21, "output_tokens": 393,
            "cache_read_input_tokens": 188086, "cache_creation_input_tokens": 50,
            "cache_creation": {"ephemeral_5m_input_tokens": 20, "ephemeral_1h_input_tokens": 30}}});
        let mut u = RunUsage::default();
        u.add_response(&chat);
        assert_eq!(
            (
                u.input_tokens,
                u.cached_tokens,
                u.output_tokens,
                u.reasoning_tokens
            ),
            (86, 1920, 300, 256)
        );
        let mut r = RunUsage::default();
        r.add_response(&responses);
        assert_eq!(
            (
                r.input_tokens,
                r.cached_tokens,
                r.output_tokens,
                r.reasoning_tokens
            ),
            (200, 128, 52, 40)
        );
        let mut a = RunUsage::default();
        a.add_response(&anthropic);
        assert_eq!(
            (
                a.input_tokens,
                a.cached_tokens,
                a.output_tokens,
                a.reasoning_tokens
            ),
            (21, 188086, 393, 0)
        );
        assert_eq!(
            (
                a.cache_write_tokens,
                a.cache_write_5m_tokens,
                a.cache_write_1h_tokens
            ),
            (50, 20, 30)
        );
        // A session's sum over its branches.
        u.merge(&r);
        u.merge(&a);
        assert_eq!(
            (
                u.input_tokens,
                u.cached_tokens,
                u.output_tokens,
                u.reasoning_tokens
            ),
            (307, 190134, 745, 296)
        );
        assert!(u.usage_valid);
        // A cached count larger than the input it is part of is capped.
        let mut bad = RunUsage::default();
        bad.add_usage(&json!({"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 9}}));
        assert_eq!((bad.input_tokens, bad.cached_tokens), (0, 5));
        bad.add_usage(
            &json!({"input_tokens": 1, "output_tokens_details": {"reasoning_tokens": -3}}),
        );
        assert!(!bad.usage_valid);
    }

    #[test]
    fn run_end_view_carries_usage_fields() {
        let usage = RunUsage {
            input_tokens: 11,
            output_tokens: 7,
            ..RunUsage::default()
        };
        let s = Signal::RunEnded {
            branch_id: Uuid::nil(),
            verb: "communicate".into(),
            result: json!("ok"),
            usage,
        };
        let v = s.view();
        assert_eq!(v["signal_class"], "RunEnd");
        assert_eq!(v["data_class"], "str");
        assert_eq!(
            v["fields"],
            json!({"input_tokens": 11, "output_tokens": 7, "cached_tokens": 0,
                "cache_write_tokens": 0, "cache_write_5m_tokens": 0, "cache_write_1h_tokens": 0,
                "total_cost_usd": null, "num_turns": 0, "duration_ms": 0.0, "usage_valid": true})
        );
    }
}
