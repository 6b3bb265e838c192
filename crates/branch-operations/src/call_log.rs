//! The API-call log of one model call, as the reference's `APICalling`
//! record reads: the head (ids, times, the served model, the error), the
//! request body as the very bytes sent and the reply as received. A turn
//! logs its call with it, and so does a connected model's tool call
//! (`connect.rs`), which leaves its log for the branch through
//! [`branch_core::tool_logs`].

use branch_core::log::{ApiCallHead, KeptJson, Log};
use branch_core::model::{ChatResponse, ModelError, RequestBody};
use serde_json::Value;

/// The log of a call that sent `body` (`None`: the request had no form to
/// send) and got `result`, started at `started_at` (Unix seconds) and
/// lasting `duration` seconds. The reply's own bytes stand for `raw` only
/// when `vouched` (the model keeps them and no middleware stood between
/// it and the caller: either could have changed `raw`). The served model
/// moves from the reply to the log, which is where it is read.
pub(crate) fn api_call_log(
    body: Option<&RequestBody>,
    result: &mut Result<ChatResponse, ModelError>,
    started_at: f64,
    duration: f64,
    vouched: bool,
) -> Log {
    if let Ok(r) = result.as_mut() {
        if !vouched {
            r.raw_text = None;
        }
        // A reply still held as its text reads as that text, whoever
        // returned it (a change through `raw` drops the text).
        if let Some(t) = r.raw.text() {
            r.raw_text = Some(t.clone());
        }
    }
    let served_model = result.as_mut().ok().and_then(|r| r.served_model.take());
    let mut head = ApiCallHead::of(result.as_ref(), started_at, duration);
    head.served_model = served_model;
    // The request body and the reply are kept as JSON text (the body the
    // very bytes sent), parsed only if the log is read; the rest of the
    // record stays typed.
    let mut kept = Vec::with_capacity(2);
    if let Some(b) = body {
        kept.push(KeptJson::body(&["payload"], b));
    }
    let reply = |r: &ChatResponse| match (r.raw_text.as_ref())
        .and_then(|t| KeptJson::parsed(&["execution", "response"], t))
    {
        Some(kept) => Ok(kept),
        None => KeptJson::value(&["execution", "response"], &r.raw),
    };
    match &*result {
        Ok(r) => match reply(r) {
            Ok(k) => {
                kept.push(k);
                Log::api_call(head, kept)
            }
            // A `Value` always serializes; were it ever not to, the reply
            // is still recorded whole.
            Err(_) => Log::with_kept(head.record(Value::Null, r.raw.peek().into_owned()), kept),
        },
        Err(_) => Log::api_call(head, kept),
    }
}
