//! Session membership: include, remove, refusal, atomic batches, lookups,
//! split, named operations and bounded concurrent runs.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use branch_core::{Branch, Message, Observer, Participant, Signal, ToDictOptions};
use branch_session::{Session, SessionError, SharedBranch, share};
use serde_json::{Value, json};
use uuid::Uuid;

#[derive(Default)]
struct Counter(AtomicUsize);

impl Observer for Counter {
    fn observe(&self, signal: Signal) {
        if matches!(signal, Signal::MessageAdded { .. }) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[derive(Debug, PartialEq)]
struct Marker(u32);

fn opts() -> ToDictOptions {
    ToDictOptions::default()
}

async fn session_with_observer() -> (Session, Arc<Counter>) {
    let counter = Arc::new(Counter::default());
    let s = Session::builder()
        .observer(counter.clone())
        .build()
        .await
        .unwrap();
    (s, counter)
}

#[tokio::test]
async fn include_attaches_and_remove_detaches_without_touching_the_conversation() {
    let (mut s, counter) = session_with_observer().await;
    let mut b = common::conversation(2);
    b.set_user(Some(Participant::from("alice")));
    b.metadata_mut().insert("topic".into(), json!("billing"));
    b.extensions_mut().insert(Marker(7));
    b.register_operation("local", |_| async { Ok(json!(1)) }, false)
        .unwrap();
    let id = b.id();
    let before = b.to_dict(&opts()).unwrap();
    let h = share(b);
    s.include([h.clone()]).await.unwrap();
    s.register_operation("shared", |_| async { Ok(json!(2)) }, false)
        .unwrap();

    {
        let mut b = h.lock().await;
        assert_eq!(b.owning_session(), Some(s.id()));
        assert!(Arc::ptr_eq(b.operations(), s.operations()));
        assert!(
            b.get_operation("local").is_none(),
            "the session registry replaces the branch's"
        );
        assert!(b.get_operation("shared").is_some());
        assert!(Arc::ptr_eq(b.memory(), s.memory()));
        assert_eq!(
            b.user().map(ToString::to_string).as_deref(),
            Some("alice"),
            "user is never overwritten"
        );
        assert_eq!(
            b.to_dict(&opts()).unwrap(),
            before,
            "inclusion shows nowhere in to_dict"
        );
        b.msgs_mut()
            .add_message(Message::assistant("seen by the session"));
    }
    assert_eq!(counter.0.load(Ordering::SeqCst), 1);

    let removed = s.remove(id).await.unwrap();
    assert!(Arc::ptr_eq(&removed, &h));
    assert!(!s.contains(id));
    let mut b = h.lock().await;
    assert_eq!(b.owning_session(), None);
    assert!(b.observer().is_none());
    assert!(!Arc::ptr_eq(b.operations(), s.operations()));
    assert!(
        b.get_operation("shared").is_none(),
        "removal gives a fresh registry"
    );
    assert!(
        Arc::ptr_eq(b.memory(), s.memory()),
        "adopted memory stays with the branch"
    );
    assert_eq!(b.extensions().get::<Marker>(), Some(&Marker(7)));
    assert_eq!(b.metadata()["topic"], "billing");
    assert_eq!(b.msgs().len(), 6);
    b.msgs_mut().add_message(Message::assistant("not seen"));
    assert_eq!(counter.0.load(Ordering::SeqCst), 1);
    let after = b.to_dict(&opts()).unwrap();
    assert_eq!(after["user"], before["user"]);
    assert_eq!(after["metadata"], before["metadata"]);
    assert_eq!(after["chat_model"], before["chat_model"]);
}

#[tokio::test]
async fn replacing_the_observer_reaches_every_member() {
    let (mut s, first) = session_with_observer().await;
    let h = s.default_branch().unwrap();
    let second = Arc::new(Counter::default());
    s.set_observer(Some(second.clone())).await;
    h.lock()
        .await
        .msgs_mut()
        .add_message(Message::assistant("x"));
    assert_eq!(first.0.load(Ordering::SeqCst), 0);
    assert_eq!(second.0.load(Ordering::SeqCst), 1);
    // A branch included later gets the new observer too.
    let late = share(Branch::new().unwrap());
    s.include([late.clone()]).await.unwrap();
    late.lock()
        .await
        .msgs_mut()
        .add_message(Message::assistant("y"));
    assert_eq!(second.0.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_branch_owned_elsewhere_refuses_the_whole_batch() {
    let mut s1 = Session::new().await.unwrap();
    let mut s2 = Session::new().await.unwrap();
    let owned = share(Branch::new().unwrap());
    s1.include([owned.clone()]).await.unwrap();
    let owned_id = owned.lock().await.id();
    let fresh_a = share(Branch::new().unwrap());
    let fresh_b = share(Branch::new().unwrap());
    let members_before = s2.branch_ids();

    let err = s2
        .include([fresh_a.clone(), owned.clone(), fresh_b.clone()])
        .await
        .unwrap_err();
    match err {
        SessionError::AlreadyOwned { branch, owner } => {
            assert_eq!(branch, owned_id);
            assert_eq!(owner, s1.id());
        }
        other => panic!("unexpected {other}"),
    }
    assert_eq!(s2.branch_ids(), members_before);
    for f in [&fresh_a, &fresh_b] {
        let b = f.lock().await;
        assert_eq!(b.owning_session(), None);
        assert!(!b.has_memory(), "no memory adopted from a refused batch");
        assert!(!Arc::ptr_eq(b.operations(), s2.operations()));
    }
    assert_eq!(owned.lock().await.owning_session(), Some(s1.id()));

    // Reparenting: remove first, then include; the adopted store stays.
    s1.remove(owned_id).await.unwrap();
    s2.include([owned.clone()]).await.unwrap();
    let b = owned.lock().await;
    assert_eq!(b.owning_session(), Some(s2.id()));
    assert!(
        Arc::ptr_eq(b.memory(), s1.memory()),
        "first claim wins across sessions"
    );
}

#[tokio::test]
async fn duplicate_handles_and_ids_in_a_batch() {
    let mut s = Session::new().await.unwrap();
    let h = share(Branch::new().unwrap());
    s.include([h.clone(), h.clone()]).await.unwrap();
    assert_eq!(s.len(), 2);
    s.include([h.clone()]).await.unwrap();
    assert_eq!(s.len(), 2, "including a member again is a no-op");

    let data = h.lock().await.to_dict(&opts()).unwrap();
    let twin = share(Branch::from_dict(&data).unwrap());
    let other = share(Branch::new().unwrap());
    let err = s.include([other.clone(), twin]).await.unwrap_err();
    assert!(matches!(err, SessionError::DuplicateBranchId(_)), "{err}");
    assert_eq!(s.len(), 2);
    assert_eq!(other.lock().await.owning_session(), None);
}

#[tokio::test]
async fn default_branch_lookup_and_removal() {
    let mut s = Session::new().await.unwrap();
    let first = s.default_branch_id().unwrap();
    let named = Branch::builder().name("researcher").build().unwrap();
    let named_id = named.id();
    s.include([share(named)]).await.unwrap();
    assert_eq!(s.default_branch_id(), Some(first));
    assert!(s.get(named_id).is_some());
    assert!(s.get(Uuid::new_v4()).is_none());
    let found = s.find_by_name("researcher").await.unwrap();
    assert_eq!(found.lock().await.id(), named_id);
    assert!(s.find_by_name("nobody").await.is_none());

    s.remove(first).await.unwrap();
    assert_eq!(s.default_branch_id(), Some(named_id));
    assert!(matches!(s.remove(first).await, Err(SessionError::UnknownBranch(x)) if x == first));
    assert!(matches!(
        s.set_default_branch(first),
        Err(SessionError::UnknownBranch(_))
    ));
    s.remove(named_id).await.unwrap();
    assert_eq!(s.default_branch_id(), None);
    assert!(matches!(
        s.run_operation("x", None, Value::Null).await,
        Err(SessionError::NoDefaultBranch)
    ));
}

#[tokio::test]
async fn split_clones_into_the_session() {
    let mut s = Session::new().await.unwrap();
    let src = common::conversation(3);
    let src_id = src.id();
    s.include([share(src)]).await.unwrap();
    let clone = s.split(src_id).await.unwrap();
    let c = clone.lock().await;
    assert_ne!(c.id(), src_id);
    assert!(s.contains(c.id()));
    assert_eq!(c.owning_session(), Some(s.id()));
    assert_eq!(c.msgs().len(), 7);
    assert_eq!(c.metadata()["clone_from"]["id"], src_id.to_string());
    let last = c.messages().iter().last().unwrap();
    assert_eq!(last.sender, Some(Participant::Id(s.id())));
    assert!(matches!(
        s.split(Uuid::new_v4()).await,
        Err(SessionError::UnknownBranch(_))
    ));
}

#[tokio::test]
async fn session_references_never_survive_serialization_or_clone() {
    let (mut s, _) = session_with_observer().await;
    let h = share(common::conversation(1));
    s.include([h.clone()]).await.unwrap();
    s.register_operation("op", |_| async { Ok(Value::Null) }, false)
        .unwrap();
    let b = h.lock().await;
    let restored = Branch::from_dict(&b.to_dict(&opts()).unwrap()).unwrap();
    let cloned = b.clone_branch().unwrap();
    for x in [&restored, &cloned] {
        assert_eq!(x.owning_session(), None);
        assert!(x.observer().is_none());
        assert!(x.get_operation("op").is_none());
        assert!(!x.has_memory());
    }
    // A standalone copy can join another session freely.
    let mut other = Session::new().await.unwrap();
    other.include([share(restored)]).await.unwrap();
}

#[tokio::test]
async fn dropping_a_session_releases_idle_members() {
    let h = share(Branch::new().unwrap());
    {
        let mut s = Session::new().await.unwrap();
        s.include([h.clone()]).await.unwrap();
        assert!(h.lock().await.owning_session().is_some());
    }
    assert_eq!(h.lock().await.owning_session(), None);
    let mut s = Session::new().await.unwrap();
    s.include([h]).await.unwrap();
    let closed = s.close().await;
    assert_eq!(closed.len(), 2);
    for c in closed {
        assert_eq!(c.lock().await.owning_session(), None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_each_respects_the_bound_and_keeps_order() {
    let mut s = Session::new().await.unwrap();
    let handles: Vec<SharedBranch> = (0..12).map(|_| share(Branch::new().unwrap())).collect();
    s.include(handles.clone()).await.unwrap();
    let ids: Vec<Uuid> = handles.iter().map(|h| h.try_lock().unwrap().id()).collect();
    let limit = 3;
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    // Tasks wait for each other in groups of `limit`: the run completes
    // only if `limit` of them really run at once.
    let barrier = Arc::new(tokio::sync::Barrier::new(limit));
    let runs = s
        .run_each(&ids, limit, |id, h| {
            let (running, peak, barrier) = (running.clone(), peak.clone(), barrier.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                barrier.wait().await;
                let mut b = h.lock().await;
                b.msgs_mut()
                    .add_message(Message::assistant(format!("done {id}")));
                running.fetch_sub(1, Ordering::SeqCst);
                b.id()
            }
        })
        .await
        .unwrap();
    assert_eq!(peak.load(Ordering::SeqCst), limit);
    let got: Vec<Uuid> = runs.into_iter().map(|r| r.result.unwrap()).collect();
    assert_eq!(got, ids);
    for h in &handles {
        assert_eq!(h.lock().await.msgs().len(), 1);
    }
    assert!(matches!(
        s.run_each(&ids, 0, |_, _| async {}).await,
        Err(SessionError::ZeroConcurrency)
    ));
    // A bound past what a semaphore holds is no bound, not a panic.
    let all = s.run_each(&ids, usize::MAX, |_, h| async move { h.lock().await.id() });
    let all: Vec<Uuid> = all
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.result.unwrap())
        .collect();
    assert_eq!(all, ids);
    let unknown = [Uuid::new_v4()];
    assert!(matches!(
        s.run_each(&unknown, 1, |_, _| async {}).await,
        Err(SessionError::UnknownBranch(_))
    ));
}

#[tokio::test]
async fn a_panicking_task_is_reported_for_its_branch_only() {
    let mut s = Session::new().await.unwrap();
    let ids = s.branch_ids();
    let extra = share(Branch::new().unwrap());
    s.include([extra]).await.unwrap();
    let all = s.branch_ids();
    let bad = ids[0];
    let runs = s
        .run_each(&all, 2, move |id, _| async move {
            assert_ne!(id, bad, "deliberate failure");
            7
        })
        .await
        .unwrap();
    assert!(
        matches!(&runs[0].result, Err(SessionError::TaskFailed { branch, .. }) if *branch == bad)
    );
    assert_eq!(runs[1].result.as_ref().unwrap(), &7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_operation_many_passes_each_branch() {
    let mut s = Session::new().await.unwrap();
    s.include(
        (0..5)
            .map(|_| share(Branch::new().unwrap()))
            .collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    s.register_operation(
        "echo",
        |args: Value| async move {
            if args["fail"] == true {
                return Err(branch_core::OperationError("asked to fail".into()));
            }
            Ok(json!({"branch": args["branch"], "n": args["n"]}))
        },
        false,
    )
    .unwrap();
    let ids = s.branch_ids();
    let runs = s
        .run_operation_many("echo", &ids, json!({"n": 3}), 2)
        .await
        .unwrap();
    for (r, id) in runs.iter().zip(&ids) {
        assert_eq!(r.branch_id, *id);
        assert_eq!(
            r.result.as_ref().unwrap(),
            &json!({"branch": id.to_string(), "n": 3})
        );
    }
    let runs = s
        .run_operation_many("echo", &ids[..1], json!({"fail": true}), 1)
        .await
        .unwrap();
    assert!(
        matches!(&runs[0].result, Err(SessionError::OperationFailed { name, .. }) if name == "echo")
    );
    let err = s.run_operation("echo", None, json!([1])).await.unwrap_err();
    assert!(
        matches!(
            err,
            SessionError::InvalidArguments {
                found: "a list",
                ..
            }
        ),
        "{err}"
    );
    assert!(matches!(
        s.run_operation_many("missing", &ids, Value::Null, 2).await,
        Err(SessionError::UnknownOperation(_))
    ));
}

fn replied(usage: Value) -> SharedBranch {
    let mut b = Branch::new().unwrap();
    let mut m = Message::assistant("ok");
    m.element
        .metadata
        .insert("model_response".into(), json!({"usage": usage}));
    b.msgs_mut().add_message(m);
    share(b)
}

#[tokio::test]
async fn usage_is_summed_per_branch_and_per_session() {
    let a = replied(json!({"prompt_tokens": 11, "completion_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 4}}));
    let b = replied(json!({"input_tokens": 5, "output_tokens": 2}));
    assert_eq!(a.lock().await.usage().input_tokens, 7);
    let s = Session::builder()
        .branch(a)
        .branch(b)
        .build()
        .await
        .unwrap();
    let u = s.usage().await;
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.cached_tokens),
        (12, 9, 4)
    );
    assert!(u.usage_valid);
}

#[derive(Default)]
struct Denials(std::sync::Mutex<Vec<String>>);

impl Observer for Denials {
    fn observe(&self, signal: Signal) {
        if let Signal::GateDenied { invocation, .. } = signal {
            self.0.lock().unwrap().push(invocation.function);
        }
    }
}

#[tokio::test]
async fn the_session_gate_reaches_members_and_leaves_with_removal() {
    let denials = Arc::new(Denials::default());
    let mut s = Session::builder()
        .observer(denials.clone())
        .build()
        .await
        .unwrap();
    let member = s.default_branch().unwrap();
    s.set_gate(Some(branch_core::gate_fn(|c| c.function != "rm")))
        .await;
    let late = share(Branch::new().unwrap());
    s.include([late.clone()]).await.unwrap();
    let none = serde_json::Map::new();
    assert!(member.lock().await.authorize("ls", &none).await);
    assert!(!member.lock().await.authorize("rm", &none).await);
    assert!(
        !late.lock().await.authorize("rm", &none).await,
        "included after"
    );
    assert_eq!(*denials.0.lock().unwrap(), ["rm", "rm"]);
    let id = late.lock().await.id();
    s.remove(id).await.unwrap();
    assert!(
        late.lock().await.authorize("rm", &none).await,
        "no gate once removed"
    );
}
