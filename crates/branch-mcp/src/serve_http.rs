//! The server half over Streamable HTTP: the same `ask` tool as
//! [`BranchServer::serve_stdio`], for clients on other machines or in other
//! processes that cannot start us as a child.
//!
//! rmcp's `StreamableHttpService` speaks the protocol (sessions, SSE
//! streams, the `Host` and `Origin` checks against DNS rebinding, the body
//! cap); this module owns what it leaves to the embedding server: the
//! listening socket, a bearer token, how many connections and sessions one
//! process holds, how long a client may take to send a request, and
//! shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::{TaskTracker, task_tracker::TaskTrackerToken};

use crate::error::McpError;
use crate::limits;
use crate::redact::Secret;
use crate::serve::{Ask, BranchServer};
use crate::serve_http_body::{Deadlined, Gathered};

/// The one path served; anything else is 404.
pub const MCP_PATH: &str = "/mcp";

/// The shortest bearer token accepted: a guessable token is no guard.
pub const MIN_TOKEN_BYTES: usize = 16;

/// The names a loopback server is reached by. rmcp treats an empty list as
/// "any host", so this list is never empty.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// What a server over HTTP holds at most and waits at most; the defaults
/// are the constants in [`crate::limits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HttpLimits {
    /// Connections open at once; the next is accepted when one closes.
    pub connections: usize,
    /// MCP sessions open at once; a new one is refused (503) beyond it.
    pub sessions: usize,
    /// Longest wait for a request's head, idle keep-alive included.
    pub head_timeout: Duration,
    /// Longest wait for a request's whole body, from its head.
    pub body_timeout: Duration,
    /// A session no request has touched for this long is closed.
    pub session_idle: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            connections: limits::MAX_HTTP_CONNECTIONS,
            sessions: limits::MAX_HTTP_SESSIONS,
            head_timeout: limits::HTTP_HEAD_TIMEOUT,
            body_timeout: limits::HTTP_BODY_TIMEOUT,
            session_idle: limits::HTTP_SESSION_IDLE,
        }
    }
}

/// Who may use a server over HTTP. Fails closed: loopback host names only,
/// no browser origin, and a bearer token required for any address beyond
/// loopback.
#[derive(Debug, Clone, Default)]
pub struct HttpAccess {
    token: Option<Secret>,
    hosts: Vec<String>,
    origins: Vec<String>,
    limits: HttpLimits,
}

impl HttpAccess {
    /// Loopback clients without a token, no browser origin, the default
    /// limits.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every request must carry `Authorization: Bearer TOKEN`.
    pub fn token(mut self, token: Secret) -> Self {
        self.token = Some(token);
        self
    }

    /// Also accept requests whose `Host` names `host` (`name` or
    /// `name:port`): the names clients reach a server beyond loopback by.
    pub fn allow_host(mut self, host: impl Into<String>) -> Self {
        self.hosts.push(host.into());
        self
    }

    /// Accept requests a browser sends from `origin` (`scheme://host:port`);
    /// by default any request that carries an `Origin` is refused.
    pub fn allow_origin(mut self, origin: impl Into<String>) -> Self {
        self.origins.push(origin.into());
        self
    }

    /// Other limits than the defaults.
    pub fn limits(mut self, limits: HttpLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Why this access cannot guard a server on `addr`, if it cannot.
    fn refusal(&self, addr: SocketAddr) -> Option<String> {
        if let Some(token) = &self.token {
            let t = token.expose();
            if t.len() < MIN_TOKEN_BYTES {
                return Some(format!(
                    "the bearer token is shorter than {MIN_TOKEN_BYTES} bytes"
                ));
            }
            if !t.bytes().all(|b| b.is_ascii_graphic()) {
                return Some("the bearer token must be printable ASCII without spaces".into());
            }
        }
        let limits = &self.limits;
        if limits.connections == 0 || limits.sessions == 0 {
            return Some("the connection and session limits must be at least 1".into());
        }
        if self.hosts.iter().any(|h| h.trim().is_empty()) {
            return Some("an allowed host is empty".into());
        }
        let ip = addr.ip();
        if ip.is_loopback() {
            return None;
        }
        if self.token.is_none() {
            return Some(format!(
                "serving on {addr}, beyond loopback, needs a bearer token"
            ));
        }
        if ip.is_unspecified() && self.hosts.is_empty() {
            return Some(format!(
                "serving on {addr} needs the host names clients reach it by"
            ));
        }
        None
    }

    fn allowed_hosts(&self, addr: SocketAddr) -> Vec<String> {
        let mut hosts: Vec<String> = LOOPBACK_HOSTS.iter().map(|h| (*h).to_owned()).collect();
        if !addr.ip().is_loopback() && !addr.ip().is_unspecified() {
            hosts.push(addr.ip().to_string());
        }
        hosts.extend(self.hosts.iter().cloned());
        hosts
    }
}

/// A bound listening socket and the access rules it will serve with.
///
/// ```no_run
/// # async fn demo<A: branch_mcp::Ask>(asker: A) -> Result<(), branch_mcp::McpError> {
/// use branch_mcp::{BranchServer, HttpAccess, HttpServing, Secret};
/// let token = std::env::var("MY_MCP_TOKEN").expect("a token of 16 bytes or more");
/// let access = HttpAccess::new().token(Secret::new(token));
/// let serving = HttpServing::bind("127.0.0.1:8765".parse().unwrap(), access).await?;
/// println!("serving {}", serving.url()); // http://127.0.0.1:8765/mcp
/// let server = BranchServer::new(asker, "Ask my conversation.");
/// // Whatever should end it: a signal, a shutdown message.
/// let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// server
///     .serve_http(serving, async {
///         let _ = stopped.await;
///     })
///     .await
/// # }
/// ```
#[derive(Debug)]
pub struct HttpServing {
    listener: TcpListener,
    addr: SocketAddr,
    access: HttpAccess,
}

impl HttpServing {
    /// Checks `access` against `addr`, then binds it (port 0 takes a free
    /// port; [`Self::local_addr`] tells which). Nothing is bound when the
    /// rules refuse the address.
    pub async fn bind(addr: SocketAddr, access: HttpAccess) -> Result<Self, McpError> {
        if let Some(reason) = access.refusal(addr) {
            return Err(McpError::Refused {
                server: "lionagi".into(),
                reason,
            });
        }
        let listener = TcpListener::bind(addr).await.map_err(|e| McpError::Start {
            server: "lionagi".into(),
            reason: format!("cannot listen on {addr}: {e}"),
        })?;
        let addr = listener.local_addr().map_err(|e| McpError::Start {
            server: "lionagi".into(),
            reason: e.to_string(),
        })?;
        Ok(Self {
            listener,
            addr,
            access,
        })
    }

    /// The address bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL clients connect to.
    pub fn url(&self) -> String {
        format!("http://{}{MCP_PATH}", self.addr)
    }
}

impl<A: Ask> BranchServer<A> {
    /// Serves MCP over Streamable HTTP on `serving` until `shutdown`
    /// resolves. Then no connection is accepted, each call being answered
    /// is cancelled (as when its client cancels) and gets
    /// [`limits::HTTP_SHUTDOWN_GRACE`] to send its answer, every session is
    /// closed, and open connections get the same grace to finish.
    pub async fn serve_http(
        self,
        serving: HttpServing,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), McpError> {
        let HttpServing {
            listener,
            addr,
            access,
        } = serving;
        let limits = access.limits;
        let stop = CancellationToken::new();
        let mut config = StreamableHttpServerConfig::default()
            .with_allowed_hosts(access.allowed_hosts(addr))
            .with_max_request_body_bytes(limits::MAX_MESSAGE_BYTES)
            .with_cancellation_token(stop.child_token())
            .enforce_origin_validation();
        if !access.origins.is_empty() {
            config = config.with_allowed_origins(access.origins.iter().cloned());
        }
        let mut sessions = LocalSessionManager::default();
        sessions.session_config.keep_alive = Some(limits.session_idle);
        let sessions = Arc::new(sessions);
        let calls = self.calls.clone();
        let server = self;
        let mcp =
            StreamableHttpService::new(move || Ok(server.clone()), Arc::clone(&sessions), config);
        let gate = Gate(Arc::new(GateInner {
            mcp,
            sessions,
            token: access
                .token
                .map(|t| Bytes::from(format!("Bearer {}", t.expose()))),
            limits,
            replies: TaskTracker::new(),
            opening: AtomicUsize::new(0),
            admitting: tokio::sync::Mutex::new(()),
        }));

        let open = Arc::new(Semaphore::new(limits.connections));
        let mut connections = JoinSet::new();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            while connections.try_join_next().is_some() {}
            let permit = tokio::select! {
                () = &mut shutdown => break,
                permit = Arc::clone(&open).acquire_owned() => match permit {
                    Ok(p) => p,
                    Err(_) => break,
                },
            };
            let stream = tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of descriptors or a connection reset before
                        // it was taken: the listener itself is fine; wait
                        // a moment rather than spin.
                        tracing::warn!(error = %e, "accepting an MCP connection failed");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                        continue;
                    }
                },
            };
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.head_timeout)
                .max_header_size(limits::MAX_HTTP_HEAD_BYTES);
            let conn = builder.serve_connection(TokioIo::new(stream), gate.clone());
            let stop = stop.clone();
            connections.spawn(async move {
                let _permit = permit;
                let mut conn = std::pin::pin!(conn);
                tokio::select! {
                    done = conn.as_mut() => {
                        if let Err(e) = done {
                            tracing::debug!(error = %e, "an MCP connection ended");
                        }
                    }
                    () = stop.cancelled() => {
                        conn.as_mut().graceful_shutdown();
                        let _ = conn.await;
                    }
                }
            });
        }
        drop(listener);
        // The calls' answers ("cancelled") go out on their requests' own
        // streams before the sessions close, which cuts those streams.
        calls.stop(limits::HTTP_SHUTDOWN_GRACE).await;
        gate.0.replies.close();
        let _ = tokio::time::timeout(limits::HTTP_SHUTDOWN_GRACE, gate.0.replies.wait()).await;
        stop.cancel();
        let _ = tokio::time::timeout(limits::HTTP_SHUTDOWN_GRACE, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        connections.shutdown().await;
        Ok(())
    }
}

/// How long to wait after a failed `accept` (out of file descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

type Reply = Response<BoxBody<Bytes, Infallible>>;

/// What every request passes before rmcp sees it: the path, the token, the
/// session cap, and a deadline on its body.
struct Gate<A: Ask>(Arc<GateInner<A>>);

impl<A: Ask> Clone for Gate<A> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

struct GateInner<A: Ask> {
    mcp: StreamableHttpService<BranchServer<A>, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
    /// The whole expected `Authorization` value.
    token: Option<Bytes>,
    limits: HttpLimits,
    /// The replies to POSTs still being sent (a call's stream ends with its
    /// answer); stopping waits for them.
    replies: TaskTracker,
    /// Session opens admitted whose answer is not back yet: they count
    /// against the cap with the open sessions, so `initialize`s racing on
    /// several connections cannot pass it together.
    opening: AtomicUsize,
    /// Admits one session open at a time (the count and the check are one
    /// step).
    admitting: tokio::sync::Mutex<()>,
}

impl<A: Ask> hyper::service::Service<Request<Incoming>> for Gate<A> {
    type Response = Reply;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Reply, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let gate = Arc::clone(&self.0);
        // The method and the answer only: the headers carry the token,
        // and the path is the client's text, up to the head cap long (as
        // an unknown method may be).
        let method = request.method().as_str();
        let method = if method.len() <= 16 {
            method
        } else {
            "(other)"
        };
        let span = tracing::info_span!("mcp.serve.http", method, status = tracing::field::Empty,);
        Box::pin(tracing::Instrument::instrument(
            async move {
                let reply = gate.admit(request).await;
                tracing::Span::current().record("status", reply.status().as_u16());
                Ok(reply)
            },
            span,
        ))
    }
}

impl<A: Ask> GateInner<A> {
    async fn admit(&self, request: Request<Incoming>) -> Reply {
        if request.uri().path() != MCP_PATH {
            return plain(StatusCode::NOT_FOUND, "not found: MCP is served at /mcp");
        }
        if let Some(expected) = &self.token {
            let given = request
                .headers()
                .get(header::AUTHORIZATION)
                .map(|v| v.as_bytes())
                .unwrap_or_default();
            if !same_bytes(given, expected) {
                let mut reply = plain(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized: a bearer token is required",
                );
                reply.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    header::HeaderValue::from_static("Bearer"),
                );
                return reply;
            }
        }
        let tracked = (request.method() == http::Method::POST).then(|| self.replies.token());
        let deadline = self.limits.body_timeout;
        let request = request.map(|body| Deadlined::new(body, deadline));
        let mut mcp = self.mcp.clone();
        // A POST without a session may be an `initialize`: its body is read
        // first, and one that may open a session is refused while the
        // sessions are all taken, so one client cannot hold the server's
        // memory with sessions it never uses. Other session-less requests
        // (the stateless protocol's) are not counted.
        let may_open = request.method() == http::Method::POST
            && !request.headers().contains_key("mcp-session-id");
        let reply = if may_open {
            let (head, body) = request.into_parts();
            let body = Gathered::read(body, limits::MAX_MESSAGE_BYTES).await;
            let _opening = if body.may_open_session() {
                match self.reserve_session().await {
                    Some(opening) => Some(opening),
                    None => return self.sessions_taken(),
                }
            } else {
                None
            };
            tower_service::Service::call(&mut mcp, Request::from_parts(head, body)).await
        } else {
            tower_service::Service::call(&mut mcp, request).await
        };
        let reply = match reply {
            Ok(reply) => reply,
            Err(never) => match never {},
        };
        match tracked {
            Some(token) => reply.map(|body| {
                Tracked {
                    body,
                    _token: token,
                }
                .boxed()
            }),
            None => reply,
        }
    }
}

impl<A: Ask> GateInner<A> {
    /// The answer to a request that would open a session beyond the cap.
    fn sessions_taken(&self) -> Reply {
        let mut reply = plain(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!(
                "too many MCP sessions (the cap is {}); try again later",
                self.limits.sessions
            ),
        );
        reply
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
        reply
    }

    /// A place for one more session, held until rmcp has answered the
    /// request (by then the session it opened is in the manager's map);
    /// `None` at the cap.
    async fn reserve_session(&self) -> Option<Opening<'_>> {
        let _one_at_a_time = self.admitting.lock().await;
        // Read before the map: an open that finishes in between is then
        // counted twice (a refusal early by one), never missed.
        let opening = self.opening.load(Ordering::SeqCst);
        let open = self.sessions.sessions.read().await.len();
        if open.saturating_add(opening) >= self.limits.sessions {
            return None;
        }
        self.opening.fetch_add(1, Ordering::SeqCst);
        Some(Opening(&self.opening))
    }
}

/// One session open admitted and not answered yet; released when the
/// request is answered or dropped.
struct Opening<'a>(&'a AtomicUsize);

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A reply body counted among the replies in flight until it is sent or
/// dropped.
struct Tracked {
    body: BoxBody<Bytes, Infallible>,
    _token: TaskTrackerToken,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Compares in time that depends on the lengths only, so a wrong token's
/// bytes cannot be found one at a time by timing.
fn same_bytes(given: &[u8], expected: &[u8]) -> bool {
    if given.len() != expected.len() {
        return false;
    }
    given
        .iter()
        .zip(expected)
        .fold(0u8, |diff, (a, b)| diff | (a ^ b))
        == 0
}

fn plain(status: StatusCode, text: &str) -> Reply {
    let mut reply = Response::new(Full::new(Bytes::from(text.to_owned())).boxed());
    *reply.status_mut() = status;
    reply.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    reply
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(addr: &str, access: HttpAccess) -> Option<String> {
        access.refusal(addr.parse().unwrap())
    }

    #[test]
    fn loopback_needs_nothing_and_beyond_it_needs_a_token() {
        assert_eq!(refused("127.0.0.1:0", HttpAccess::new()), None);
        assert_eq!(refused("[::1]:0", HttpAccess::new()), None);
        let why = refused("0.0.0.0:0", HttpAccess::new()).unwrap();
        assert!(why.contains("needs a bearer token"), "{why}");
        let token = Secret::new("0123456789abcdef");
        let why = refused("0.0.0.0:0", HttpAccess::new().token(token.clone())).unwrap();
        assert!(why.contains("host names"), "{why}");
        let named = HttpAccess::new()
            .token(token.clone())
            .allow_host("mcp.example");
        assert_eq!(refused("0.0.0.0:0", named), None);
        assert_eq!(refused("192.0.2.7:0", HttpAccess::new().token(token)), None);
    }

    #[test]
    fn a_weak_token_or_a_zero_limit_is_refused() {
        let short = HttpAccess::new().token(Secret::new("short"));
        assert!(refused("127.0.0.1:0", short).unwrap().contains("shorter"));
        let spaced = HttpAccess::new().token(Secret::new("0123456789 abcdef"));
        assert!(
            refused("127.0.0.1:0", spaced)
                .unwrap()
                .contains("printable")
        );
        let none = HttpAccess::new().limits(HttpLimits {
            sessions: 0,
            ..HttpLimits::default()
        });
        assert!(refused("127.0.0.1:0", none).unwrap().contains("at least 1"));
        let empty = HttpAccess::new().allow_host(" ");
        assert!(refused("127.0.0.1:0", empty).unwrap().contains("empty"));
    }

    #[test]
    fn the_hosts_always_include_loopback_and_a_named_address() {
        let access = HttpAccess::new().allow_host("mcp.example:8443");
        let hosts = access.allowed_hosts("192.0.2.7:9000".parse().unwrap());
        assert_eq!(
            hosts,
            [
                "localhost",
                "127.0.0.1",
                "::1",
                "192.0.2.7",
                "mcp.example:8443"
            ]
        );
        let hosts = HttpAccess::new().allowed_hosts("0.0.0.0:9000".parse().unwrap());
        assert_eq!(hosts, LOOPBACK_HOSTS);
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same_bytes(b"Bearer abc", b"Bearer abc"));
        assert!(!same_bytes(b"Bearer abd", b"Bearer abc"));
        assert!(!same_bytes(b"Bearer ab", b"Bearer abc"));
        assert!(!same_bytes(b"", b"Bearer abc"));
    }

    #[test]
    fn the_token_is_not_in_debug() {
        let access = HttpAccess::new().token(Secret::new("0123456789abcdef-secret"));
        assert!(!format!("{access:?}").contains("secret"));
    }
}
