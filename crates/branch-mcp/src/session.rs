//! One connected MCP server: start (stdio child or HTTP), `initialize`
//! with version negotiation, `ping`, paginated listings, calls with a
//! deadline and a progress token, and shutdown. Dropping a call's future
//! makes rmcp send `notifications/cancelled` for it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use branch_core::observer::ObserverSlot;
use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, CustomNotification,
    ElicitRequestParams, ElicitResult, Implementation, PaginatedRequestParams,
    ProgressNotificationParam, ReadResourceRequestParams, Resource,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::Value;
use tokio::sync::Mutex;

use crate::asking::Asker;
use crate::call;
use crate::config::{ServerSpec, TransportSpec};
use crate::elicit::cut;
use crate::elicit::{Asks, ElicitAnswer, ElicitHook};
use crate::elicit_url::{MAX_ELICITATION_ID_BYTES, URL_ELICITATION_REQUIRED};
use crate::error::McpError;
use crate::http::{GuardedHttp, HttpFailure, init_reason, service_reason};
use crate::legacy_sse::LegacySse;
use crate::limits;
use crate::policy::McpPolicy;
use crate::progress::{Progress, ProgressHook, ProgressRoutes};
use crate::redact::{Secret, scrub};
use crate::stdio::{self, Failure, ServerProcess};

/// The client side's handler of what a server sends unasked.
#[derive(Clone)]
struct Handler {
    server: String,
    tools_changed: Arc<AtomicBool>,
    progress: Option<ProgressHook>,
    routes: ProgressRoutes,
    asker: Asker,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = self.asker.capability();
        ClientConfig::new(
            capabilities,
            Implementation::new("lionagi-rs", env!("CARGO_PKG_VERSION")),
        )
    }

    /// A question the server puts to the person during one of its calls
    /// (`asking.rs`).
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Ok(self.asker.answer(request, context.ct.cancelled()).await)
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        tracing::info!(
            server = %self.server,
            progress = params.progress,
            total = ?params.total,
            message = ?params.message,
            "MCP progress"
        );
        self.routes.deliver(&self.server, &params);
        if let Some(hook) = &self.progress {
            hook(&Progress {
                server: self.server.clone(),
                progress: params.progress,
                total: params.total,
                message: params.message,
            });
        }
    }

    /// `notifications/elicitation/complete`: the person finished what an
    /// address was opened for. Told in the log; the call that needed it is
    /// made again by whoever was told to (the model, from the call's error).
    async fn on_custom_notification(
        &self,
        notification: CustomNotification,
        _context: NotificationContext<RoleClient>,
    ) {
        if notification.method != "notifications/elicitation/complete" {
            return;
        }
        let id = notification
            .params
            .as_ref()
            .and_then(|p| p.get("elicitationId"))
            .and_then(Value::as_str)
            .map(|id| cut(id, MAX_ELICITATION_ID_BYTES).into_owned());
        tracing::info!(server = %self.server, elicitation_id = ?id, "MCP server says the step at an address is done");
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        tracing::info!(server = %self.server, "MCP tool list changed");
        self.tools_changed.store(true, Ordering::SeqCst);
    }
}

/// A connected server.
pub struct McpServer {
    name: String,
    peer: Peer<RoleClient>,
    service: Mutex<Option<RunningService<RoleClient, Handler>>>,
    process: Mutex<Option<ServerProcess>>,
    failure: Failure,
    secrets: Vec<Secret>,
    call_timeout: Duration,
    result_cap: usize,
    tool_cap: usize,
    tools_changed: Arc<AtomicBool>,
    routes: ProgressRoutes,
    asker: Asker,
    transport: &'static str,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.name)
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// Starts (or reaches) the server and completes `initialize`, all
    /// within the policy's start deadline.
    pub async fn connect(
        spec: &ServerSpec,
        policy: &McpPolicy,
        progress: Option<ProgressHook>,
    ) -> Result<Self, McpError> {
        Self::connect_asking(spec, policy, progress, None).await
    }

    /// As [`McpServer::connect`]; with `elicit`, the server may put
    /// questions to the person during its calls (our client declares form
    /// elicitation).
    pub async fn connect_asking(
        spec: &ServerSpec,
        policy: &McpPolicy,
        progress: Option<ProgressHook>,
        elicit: Option<ElicitHook>,
    ) -> Result<Self, McpError> {
        let tools_changed = Arc::new(AtomicBool::new(false));
        let routes = ProgressRoutes::default();
        let asker = Asker::new(&spec.name, elicit, policy.url_elicitation_allowed());
        let handler = Handler {
            server: spec.name.clone(),
            tools_changed: Arc::clone(&tools_changed),
            progress,
            routes: routes.clone(),
            asker: asker.clone(),
        };
        let failure = Failure::default();
        let secrets: Vec<Secret> = spec.transport.secrets().into_iter().cloned().collect();
        let deadline = policy.start_timeout();
        let name = spec.name.clone();
        let start_err = |reason: String| McpError::Start {
            server: name.clone(),
            reason: scrub(&reason, &secrets),
        };
        let timed_out = || McpError::Timeout {
            server: name.clone(),
            what: "start and initialize".into(),
            limit: deadline,
        };
        let (service, process, transport) = match &spec.transport {
            TransportSpec::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let program = policy.resolve_command(&spec.name, command)?;
                let (mut process, pipes) =
                    stdio::spawn(&program, args, env, cwd.as_ref(), failure.clone())
                        .map_err(|e| start_err(format!("cannot run {}: {e}", program.display())))?;
                match tokio::time::timeout(deadline, handler.serve((pipes.stdout, pipes.stdin)))
                    .await
                {
                    Ok(Ok(service)) => (service, Some(process), "stdio"),
                    Ok(Err(e)) => {
                        let status = process.exited(Duration::from_millis(500)).await;
                        // Our own finding (a malformed or oversized message)
                        // is the cause; the exit that follows is its effect.
                        let mut reason = match (failure.get(), status) {
                            (Some(f), _) => f,
                            (None, Some(s)) => format!("it exited ({s}) during initialize"),
                            (None, None) => e.to_string(),
                        };
                        let tail = process.stderr_tail().await;
                        if !tail.is_empty() {
                            reason.push_str(&format!("; its stderr ends: {tail}"));
                        }
                        process.kill().await;
                        return Err(start_err(reason));
                    }
                    Err(_) => {
                        process.kill().await;
                        return Err(timed_out());
                    }
                }
            }
            TransportSpec::Http {
                url,
                headers,
                legacy_sse,
            } => {
                let http =
                    GuardedHttp::new(policy.local_network_allowed(), headers).map_err(start_err)?;
                http.check_url(url)
                    .map_err(|e| http_refusal(&spec.name, e))?;
                let mut service = None;
                if !legacy_sse {
                    let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                        .max_json_response_size(limits::MAX_MESSAGE_BYTES)
                        .max_sse_event_size(limits::MAX_MESSAGE_BYTES);
                    let transport =
                        StreamableHttpClientTransport::with_client(http.clone(), config);
                    match tokio::time::timeout(deadline, handler.clone().serve(transport)).await {
                        Ok(Ok(s)) => service = Some((s, "streamable-http")),
                        Ok(Err(e)) => {
                            // Servers of the older transport refuse the POST.
                            if !matches!(http.last_failed_status(), 400 | 404 | 405) {
                                return Err(start_err(init_reason(&e)));
                            }
                            tracing::info!(server = %spec.name, "falling back to HTTP+SSE");
                        }
                        Err(_) => return Err(timed_out()),
                    }
                }
                let (service, kind) = match service {
                    Some(s) => s,
                    None => {
                        let connect = async {
                            let t = LegacySse::connect(http, url, failure.clone())
                                .await
                                .map_err(|e| http_refusal(&spec.name, e))?;
                            handler
                                .serve(t)
                                .await
                                .map_err(|e| start_err(init_reason(&e)))
                        };
                        match tokio::time::timeout(deadline, connect).await {
                            Ok(Ok(s)) => (s, "sse"),
                            Ok(Err(e)) => return Err(e),
                            Err(_) => return Err(timed_out()),
                        }
                    }
                };
                (service, None, kind)
            }
        };
        let peer = service.peer().clone();
        Ok(Self {
            name: spec.name.clone(),
            peer,
            service: Mutex::new(Some(service)),
            process: Mutex::new(process),
            failure,
            secrets,
            call_timeout: spec.call_timeout.unwrap_or(policy.default_call_timeout()),
            result_cap: policy.result_cap(),
            tool_cap: policy.tool_cap(),
            tools_changed,
            routes,
            asker,
            transport,
        })
    }

    /// The server's name in the configuration.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `stdio`, `streamable-http` or `sse`.
    pub fn transport(&self) -> &'static str {
        self.transport
    }

    /// The protocol version both sides agreed on.
    pub fn protocol_version(&self) -> Option<String> {
        self.peer
            .peer_info()
            .map(|i| i.protocol_version.to_string())
    }

    /// The server's own name and version, when it gave them.
    pub fn server_info(&self) -> Option<(String, String)> {
        self.peer
            .peer_info()
            .and_then(|i| i.server_info.clone())
            .map(|s| (s.name, s.version))
    }

    /// The per-call deadline.
    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// The cap on one result's JSON size.
    pub fn result_cap(&self) -> usize {
        self.result_cap
    }

    /// Whether `notifications/tools/list_changed` arrived since the last
    /// [`McpServer::list_tools`] that succeeded.
    pub fn tools_changed(&self) -> bool {
        self.tools_changed.load(Ordering::SeqCst)
    }

    /// The flag [`McpServer::tools_changed`] reads.
    pub(crate) fn tools_changed_flag(&self) -> &AtomicBool {
        &self.tools_changed
    }

    /// Progress of this server's calls made for `branch_id` (inside one of
    /// its verbs) goes to its observer (whichever is attached to `slot`
    /// when it arrives) as [`branch_core::Signal::ToolProgress`]; other
    /// branches' calls' progress never does. Once per branch, and only
    /// while the branch lives: the server keeps a weak handle, never the
    /// branch's observer.
    pub fn listen(&self, branch_id: uuid::Uuid, slot: ObserverSlot) {
        self.routes.listen(branch_id, &slot);
    }

    /// `ping`, within [`limits::REQUEST_TIMEOUT`].
    pub async fn ping(&self) -> Result<(), McpError> {
        let ping = self
            .peer
            .send_request(rmcp::model::ClientRequest::PingRequest(Default::default()));
        match tokio::time::timeout(limits::REQUEST_TIMEOUT, ping).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(self.service_error("ping", e).await),
            Err(_) => Err(self.timeout("ping", limits::REQUEST_TIMEOUT)),
        }
    }

    /// Every tool, following `nextCursor` (at most
    /// [`limits::MAX_LIST_PAGES`] pages and the policy's tool cap).
    pub async fn list_tools(&self) -> Result<Vec<rmcp::model::Tool>, McpError> {
        let has_tools = self
            .peer
            .peer_info()
            .is_some_and(|i| i.capabilities.tools.is_some());
        if !has_tools {
            return Ok(Vec::new());
        }
        // Cleared before the listing, so a change announced while it runs
        // is read by the next one.
        self.tools_changed.store(false, Ordering::SeqCst);
        let reading = Reading::of([self.tools_changed_flag()]);
        let mut out = Vec::new();
        let mut cursor = None;
        for _ in 0..limits::MAX_LIST_PAGES {
            let params = PaginatedRequestParams::default().with_cursor(cursor.take());
            let page = match tokio::time::timeout(
                limits::REQUEST_TIMEOUT,
                self.peer.list_tools(Some(params)),
            )
            .await
            {
                Ok(Ok(p)) => p,
                Ok(Err(e)) => return Err(self.service_error("tools/list", e).await),
                Err(_) => return Err(self.timeout("tools/list", limits::REQUEST_TIMEOUT)),
            };
            out.extend(page.tools);
            if out.len() > self.tool_cap {
                return Err(McpError::Cap {
                    server: self.name.clone(),
                    what: "the number of tools".into(),
                    cap: self.tool_cap,
                });
            }
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => {
                    reading.done();
                    return Ok(out);
                }
            }
        }
        Err(McpError::Cap {
            server: self.name.clone(),
            what: "the pages of tools/list".into(),
            cap: limits::MAX_LIST_PAGES,
        })
    }

    /// Every resource, paginated like the tools.
    pub async fn list_resources(&self) -> Result<Vec<Resource>, McpError> {
        let has = self
            .peer
            .peer_info()
            .is_some_and(|i| i.capabilities.resources.is_some());
        if !has {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        let mut cursor = None;
        for _ in 0..limits::MAX_LIST_PAGES {
            let params = PaginatedRequestParams::default().with_cursor(cursor.take());
            let page = match tokio::time::timeout(
                limits::REQUEST_TIMEOUT,
                self.peer.list_resources(Some(params)),
            )
            .await
            {
                Ok(Ok(p)) => p,
                Ok(Err(e)) => return Err(self.service_error("resources/list", e).await),
                Err(_) => return Err(self.timeout("resources/list", limits::REQUEST_TIMEOUT)),
            };
            out.extend(page.resources);
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => return Ok(out),
            }
        }
        Err(McpError::Cap {
            server: self.name.clone(),
            what: "the pages of resources/list".into(),
            cap: limits::MAX_LIST_PAGES,
        })
    }

    /// The contents of one resource, as the wire form (`uri`, `mimeType`,
    /// `text` or `blob`).
    pub async fn read_resource(&self, uri: &str) -> Result<Vec<Value>, McpError> {
        let read = self
            .peer
            .read_resource(ReadResourceRequestParams::new(uri.to_owned()));
        // A read may ask the person too (a server's question nested in it).
        let result = match self
            .asker
            .clock()
            .within(limits::REQUEST_TIMEOUT, read)
            .await
        {
            Some(Ok(r)) => r,
            Some(Err(e)) => return Err(self.service_error("resources/read", e).await),
            None => return Err(self.timeout("resources/read", limits::REQUEST_TIMEOUT)),
        };
        Ok(result
            .contents
            .iter()
            .filter_map(|c| serde_json::to_value(c).ok())
            .collect())
    }

    /// Calls a tool by its name on the server, within the per-call
    /// deadline (which stands still while a question of the server waits
    /// on the person, up to [`limits::MAX_ANSWER_PAUSE`]); the request carries a progress token, whose progress goes
    /// to the calling branch. Dropping the future (or the deadline passing)
    /// sends `notifications/cancelled`.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<CallToolResult, McpError> {
        let arguments = match arguments {
            Value::Object(m) => Some(m),
            Value::Null => None,
            _ => {
                return Err(McpError::Protocol {
                    server: self.name.clone(),
                    reason: format!("arguments of `{name}` must be an object"),
                });
            }
        };
        let mut params = CallToolRequestParams::new(name.to_owned());
        params.arguments = arguments;
        let what = format!("tools/call `{name}`");
        let call = call::call_tool(&self.peer, &self.routes, params);
        match self.asker.clock().within(self.call_timeout, call).await {
            Some(Ok(r)) => Ok(r),
            Some(Err(ServiceError::McpError(e))) if e.code.0 == URL_ELICITATION_REQUIRED => {
                Err(self.needs_an_address(&what, &e).await)
            }
            Some(Err(e)) => Err(self.service_error(&what, e).await),
            None => Err(self.timeout(&what, self.call_timeout)),
        }
    }

    /// Ends the session: closes the connection (stdin for a child, the
    /// session for HTTP), then ends and reaps the child.
    pub async fn shutdown(&self) {
        if let Some(mut s) = self.service.lock().await.take() {
            let _ = tokio::time::timeout(limits::SHUTDOWN_GRACE, s.close()).await;
        }
        if let Some(mut p) = self.process.lock().await.take() {
            p.shutdown().await;
        }
    }

    /// The child's process id (stdio servers), for tests of reaping.
    pub async fn pid(&self) -> Option<u32> {
        self.process
            .lock()
            .await
            .as_ref()
            .and_then(ServerProcess::id)
    }

    /// A call the server refused until the person opens an address
    /// (`URLElicitationRequired`): the addresses are shown to the person
    /// (when this program offers them), and the error tells the model
    /// what they said and that the call may be made again once they are
    /// done there.
    async fn needs_an_address(&self, what: &str, e: &ErrorData) -> McpError {
        let answered = self.asker.open_required(e.data.as_ref()).await;
        // The server's words first, short, so that what the person said
        // always fits under the cap.
        let mut message = format!(
            "the server needs the person to open an address first ({})",
            cut(&scrub(&e.message, &self.secrets), 512)
        );
        if answered.is_empty() {
            message.push_str(if self.asker.offers_addresses() {
                "; none was shown: no address it gave could be offered safely"
            } else {
                "; none was shown: this program does not offer addresses to open"
            });
        }
        for (question, answer) in &answered {
            let Asks::Url(address) = &question.asks else {
                continue;
            };
            let said = match answer {
                ElicitAnswer::Accept(_) => {
                    "agreed to open it; call the tool again once they are done there"
                }
                ElicitAnswer::Decline => "declined to open it",
                ElicitAnswer::Cancel => "did not answer",
            };
            message.push_str(&format!(
                "; {} (at {}): the person {said}",
                question.message, address.host
            ));
        }
        McpError::Remote {
            server: self.name.clone(),
            method: what.to_owned(),
            message: crate::tool::capped(message, limits::MAX_REMOTE_ERROR_BYTES),
        }
    }

    fn timeout(&self, what: &str, limit: Duration) -> McpError {
        McpError::Timeout {
            server: self.name.clone(),
            what: what.to_owned(),
            limit,
        }
    }

    async fn service_error(&self, what: &str, e: ServiceError) -> McpError {
        if let ServiceError::McpError(data) = &e {
            return McpError::Remote {
                server: self.name.clone(),
                method: what.to_owned(),
                message: crate::tool::capped(
                    scrub(&data.message, &self.secrets),
                    limits::MAX_REMOTE_ERROR_BYTES,
                ),
            };
        }
        if let Some(reason) = self.failure.get() {
            return McpError::Protocol {
                server: self.name.clone(),
                reason: scrub(&reason, &self.secrets),
            };
        }
        let mut reason = format!("{what} failed: {}", service_reason(&e));
        if let Some(p) = self.process.lock().await.as_mut() {
            if let Some(status) = p.exited(Duration::from_millis(500)).await {
                reason = format!("it exited ({status}) during {what}");
            }
            let tail = p.stderr_tail().await;
            if !tail.is_empty() {
                reason.push_str(&format!("; its stderr ends: {tail}"));
            }
        }
        McpError::Closed {
            server: self.name.clone(),
            reason: scrub(&reason, &self.secrets),
        }
    }
}

fn http_refusal(server: &str, e: HttpFailure) -> McpError {
    match e {
        HttpFailure::Blocked(reason) => McpError::Refused {
            server: server.to_owned(),
            reason,
        },
        other => McpError::Start {
            server: server.to_owned(),
            reason: other.to_string(),
        },
    }
}

/// A reading of tool lists in progress: unless it is done, the lists are
/// marked changed again when it is dropped. A listing that fails or is
/// abandoned (its future dropped) has read nothing, so a change announced
/// before it must still be read by the next refresh.
pub(crate) struct Reading<'a> {
    changed: Vec<&'a AtomicBool>,
    done: bool,
}

impl<'a> Reading<'a> {
    /// A reading of the lists whose change flags are `changed`.
    pub(crate) fn of(changed: impl IntoIterator<Item = &'a AtomicBool>) -> Self {
        Self {
            changed: changed.into_iter().collect(),
            done: false,
        }
    }

    /// The lists were read and used.
    pub(crate) fn done(mut self) {
        self.done = true;
    }
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        if !self.done {
            for c in &self.changed {
                c.store(true, Ordering::SeqCst);
            }
        }
    }
}
