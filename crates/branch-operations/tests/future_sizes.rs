//! The sizes of a turn's futures. A future is copied whole when it is
//! created and moved into its caller's state or into a box, a boxed one
//! is allocated at its whole size, and a program running a thousand turns
//! at once holds a thousand of each: in `bench turns` the copies alone
//! were about 2 µs of a 45 µs turn (docs/benchmarks.md, "A turn's
//! futures"). An `async fn` keeps its arguments beside whatever it moves
//! them into, so options taken by value, or a future passed to a wrapper,
//! count twice; a rarely taken path awaited inline sets the size of every
//! call. These bounds keep a change that grows them visible.

#![cfg(target_pointer_width = "64")]

use std::mem::size_of_val;
use std::sync::Arc;

use branch_core::Branch;
use branch_core::model::{ChatModel, ChatRequest, ModelConfig};
use branch_models::IModel;
use branch_operations::{BranchOperations, CommunicateOptions, OperateOptions};

fn model() -> Arc<dyn ChatModel> {
    // Never polled: nothing is sent.
    let config = ModelConfig::builder()
        .provider("openai")
        .model("gpt-4.1-mini")
        .base_url("http://127.0.0.1:9/v1")
        .allow_local_network(true)
        .build()
        .expect("config");
    Arc::new(IModel::with_api_key(config, "k").expect("model"))
}

#[test]
fn a_verb_future_holds_its_options_once() {
    let mut b = Branch::builder()
        .system("s")
        .chat_model(model())
        .build()
        .expect("branch");
    // The options are boxed once; the verb's body is boxed by its span.
    // `communicate` keeps the turn's middle (232 bytes) for the body it
    // boxes, which borrows it, so that the box stays in the allocator's
    // per-thread cache (see below).
    let communicate = size_of_val(&b.communicate(CommunicateOptions::new("q")));
    assert!(communicate <= 704, "communicate: {communicate} bytes");
    let operate = size_of_val(&b.operate(OperateOptions::new("q")));
    assert!(operate <= 512, "operate: {operate} bytes");
}

#[test]
fn a_model_call_future_holds_the_call_once() {
    let model = model();
    let request = ChatRequest::default();
    let body = model.request_body(&request).expect("body");
    let call = model.chat_with_body(request.clone(), &body);
    let call = size_of_val(&*call);
    // Every turn boxes this future: at 1,032 bytes or less, glibc's
    // allocator serves the box from its per-thread cache (its largest
    // cached size) instead of its general path (1,912 bytes before the
    // request was held once).
    assert!(call <= 1032, "chat_with_body: {call} bytes");
    let stream = model.stream(request);
    let stream = size_of_val(&*stream);
    assert!(stream <= 1536, "stream: {stream} bytes");
}
