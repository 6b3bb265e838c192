//! One `tools/call` request in flight: sent with the progress token rmcp
//! assigns (it replaces any token of ours), routed so that the token's
//! progress reaches the calling branch, and cancelled with
//! `notifications/cancelled` when the caller stops waiting.

use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, NumberOrString, RequestId, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, ServiceError};

use crate::limits;
use crate::progress::ProgressRoutes;

/// Why an abandoned call is cancelled (sent to the server).
const ABANDONED: &str = "the caller stopped waiting for the result";

/// Sends `params` as `tools/call` and waits for the reply. Progress under
/// the request's token goes to the branch whose verb is running on this
/// task ([`ProgressRoutes::call`]) while the call runs. Dropping the
/// future sends `notifications/cancelled` for the request.
pub(crate) async fn call_tool(
    peer: &Peer<RoleClient>,
    routes: &ProgressRoutes,
    params: CallToolRequestParams,
) -> Result<CallToolResult, ServiceError> {
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = peer
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await?;
    let token = match &handle.progress_token.0 {
        NumberOrString::String(s) => s.to_string(),
        NumberOrString::Number(n) => n.to_string(),
    };
    let _route = routes.call(&token);
    let mut abandon = CancelOnDrop {
        peer: peer.clone(),
        id: Some(handle.id.clone()),
    };
    let reply = handle.await_response().await;
    abandon.id = None;
    match reply? {
        ServerResult::CallToolResult(r) => Ok(r),
        // A server that answers a call with an empty object has no content
        // to give (rmcp's own `call_tool` reads it the same way).
        ServerResult::EmptyResult(_) => Ok(CallToolResult::success(Vec::new())),
        _ => Err(ServiceError::UnexpectedResponse),
    }
}

/// Cancels the request `id` when dropped before the reply came.
struct CancelOnDrop {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let peer = self.peer.clone();
        let param = CancelledNotificationParam::new(Some(id), Some(ABANDONED.to_owned()));
        runtime.spawn(async move {
            let _ =
                tokio::time::timeout(limits::REQUEST_TIMEOUT, peer.notify_cancelled(param)).await;
        });
    }
}
