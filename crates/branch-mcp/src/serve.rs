//! The server half: a lionagi conversation offered to any MCP client as a
//! tool `ask`. What answering means (loading the branch, one recorded
//! turn, storage) is the caller's [`Ask`]; this module only speaks MCP.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::McpError;
use crate::limits;
use crate::serve_confirm::Confirmer;
use crate::serve_progress::{ProgressReporter, progress_channel};

/// The longest question accepted (it becomes one instruction).
const MAX_QUESTION_BYTES: usize = 256 * 1024;

/// Answers one question with one recorded turn.
pub trait Ask: Send + Sync + 'static {
    /// The reply text, or the failure the client sees (`isError`).
    /// `cancelled` resolves when the client cancels the call
    /// (`notifications/cancelled`) or goes away: the turn should then stop
    /// and leave nothing recorded, as no one will read its answer.
    /// `progress` carries what the turn is doing to a client that asked to
    /// hear it; `confirm` puts a question to the person behind the client,
    /// when the client can show one (MCP elicitation).
    fn ask(
        &self,
        question: String,
        cancelled: Cancelled,
        progress: ProgressReporter,
        confirm: Confirmer,
    ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send + '_>>;
}

/// Resolves when the client has cancelled a call or gone away.
pub struct Cancelled(Pin<Box<dyn Future<Output = ()> + Send>>);

impl Cancelled {
    /// Resolves when `signal` does.
    pub fn new(signal: impl Future<Output = ()> + Send + 'static) -> Self {
        Self(Box::pin(signal))
    }
}

impl std::fmt::Debug for Cancelled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cancelled(..)")
    }
}

impl Future for Cancelled {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

/// The MCP server of one conversation.
pub struct BranchServer<A> {
    asker: Arc<A>,
    description: String,
    pub(crate) calls: CallsInFlight,
}

impl<A> Clone for BranchServer<A> {
    fn clone(&self) -> Self {
        Self {
            asker: Arc::clone(&self.asker),
            description: self.description.clone(),
            calls: self.calls.clone(),
        }
    }
}

/// The calls being answered, shared by every session of one server, so
/// that stopping it can cancel them and wait for their answers to go out
/// before the sessions close.
#[derive(Clone, Default)]
pub(crate) struct CallsInFlight {
    stopping: CancellationToken,
    answering: TaskTracker,
}

impl CallsInFlight {
    /// Cancels every call being answered and refuses new ones; resolves
    /// when the cancelled calls have answered, or after `grace`.
    pub(crate) async fn stop(&self, grace: std::time::Duration) {
        self.stopping.cancel();
        self.answering.close();
        let _ = tokio::time::timeout(grace, self.answering.wait()).await;
    }
}

impl<A: Ask> BranchServer<A> {
    /// A server whose `ask` tool is described by `description`.
    pub fn new(asker: A, description: impl Into<String>) -> Self {
        Self {
            asker: Arc::new(asker),
            description: description.into(),
            calls: CallsInFlight::default(),
        }
    }

    fn ask_tool(&self) -> Tool {
        let schema = json!({
            "type": "object",
            "properties": {"question": {"type": "string", "description": "What to ask the conversation"}},
            "required": ["question"]
        });
        let schema = match schema {
            Value::Object(schema) => schema,
            _ => Default::default(),
        };
        // What a client may tell its user before a call: each one appends
        // a turn to the stored conversation (never changes what is there)
        // and reaches the model and the conversation's tools.
        let hints = ToolAnnotations::from_raw(
            Some("Ask the conversation".into()),
            Some(false),
            Some(false),
            Some(false),
            Some(true),
        );
        Tool::new("ask", self.description.clone(), Arc::new(schema)).with_annotations(hints)
    }

    /// Serves MCP over this process's stdin/stdout until the client hangs
    /// up. A message longer than [`limits::MAX_MESSAGE_BYTES`] is dropped
    /// unread (the connection stays), as the client drops a server's.
    pub async fn serve_stdio(self) -> Result<(), McpError> {
        let (stdin, stdout) = rmcp::transport::stdio();
        let transport = AsyncRwTransport::new_server(stdin, stdout)
            .with_max_line_length(limits::MAX_MESSAGE_BYTES);
        let running = self.serve(transport).await.map_err(|e| McpError::Start {
            server: "lionagi".into(),
            reason: e.to_string(),
        })?;
        running.waiting().await.map_err(|e| McpError::Closed {
            server: "lionagi".into(),
            reason: e.to_string(),
        })?;
        Ok(())
    }
}

impl<A: Ask> ServerHandler for BranchServer<A> {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("lionagi", env!("CARGO_PKG_VERSION")))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![self.ask_tool()]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != "ask" {
            return Err(ErrorData::invalid_params(
                format!("no tool `{}`", request.name),
                None,
            ));
        }
        let question = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("question"))
            .and_then(Value::as_str)
            .filter(|q| !q.trim().is_empty())
            .ok_or_else(|| {
                ErrorData::invalid_params("`question` must be a non-empty string", None)
            })?;
        if question.len() > MAX_QUESTION_BYTES {
            return Err(ErrorData::invalid_params(
                format!("`question` is longer than {MAX_QUESTION_BYTES} bytes"),
                None,
            ));
        }
        if self.calls.stopping.is_cancelled() {
            return Ok(CallToolResult::error(vec![ContentBlock::text(
                "the server is stopping; nothing was asked",
            )])
            .into());
        }
        let by_client = context.ct.clone();
        let stopping = self.calls.stopping.clone();
        let cancelled = Cancelled::new(async move {
            tokio::select! {
                () = by_client.cancelled() => {}
                () = stopping.cancelled() => {}
            }
        });
        let (progress, sending) =
            progress_channel(context.peer.clone(), context.meta.get_progress_token());
        let confirm = Confirmer::new(context.peer.clone());
        let answering = self
            .asker
            .ask(question.to_owned(), cancelled, progress, confirm);
        // The sender goes with the answer: no notification follows the
        // result.
        let answer = self
            .calls
            .answering
            .track_future(async {
                tokio::select! {
                    biased;
                    answer = answering => answer,
                    never = sending => match never {},
                }
            })
            .await;
        Ok(match answer {
            Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
            Err(why) => CallToolResult::error(vec![ContentBlock::text(why)]),
        }
        .into())
    }
}
