//! `lionagi mcp serve --store PATH --branch ID|NAME`: a stored conversation
//! offered to any MCP client as a tool `ask` that runs one recorded turn per
//! call (with the conversation's own model unless model flags choose
//! another, as `lionagi chat --resume` does, and the tools of `--mcp
//! FILE`), over stdio or, with `--http ADDR`, over Streamable HTTP.
//!
//! Over stdio, stdout carries the protocol and nothing else; over HTTP it
//! carries the one line of the URL served. Errors go to stderr. A client
//! that asks for progress hears each step of a turn: the model awaited, the
//! characters of its answer so far, each tool called.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use branch_mcp::{
    Ask, BranchServer, CallEvent, Cancelled, Confirmer, ElicitAnswer, Elicitation, HttpAccess,
    HttpServing, McpError, McpServers, ProgressReporter, Secret,
};
use branch_operations::BranchApproval;
use tokio::sync::Mutex;

use super::chat_args::{ChatArgs, shell_word};
use super::chat_error::{ChatError, ModelInfo};
use super::conversation::Conversation;
use super::mcp_approve::{self, Settled};
use super::mcp_tools::{self, ToolHooks};
use super::turn::{self, Display, Narrator};
use super::{model_choice, runtime_exit, tool_turn};

/// The help text of `lionagi mcp`.
pub(crate) const MCP_USAGE: &str = "usage:
  lionagi mcp serve --store PATH --branch ID|NAME [OPTIONS]

Serves the stored conversation over MCP as a tool `ask`: each call is one turn, appended
to the store, with the conversation's own model unless the model flags of `lionagi chat`
choose another (--provider, --model, --base-url, --endpoint; --max-tokens, --temperature
and --allow-local-network apply to either). --mcp FILE / --mcp-path / --mcp-local give the
conversation its own tools; with --approve a turn that calls one asks the client's person
about each call (MCP elicitation: run, deny, or always for that tool) when the client can
show forms, and is otherwise left for a person to approve (lionagi chat --resume NAME
--approve), calls being refused until then.

Over stdio unless:
  --http ADDR          serve Streamable HTTP on ADDR (127.0.0.1:8765; port 0 takes a free
                       one) at /mcp, print its URL, and serve until Ctrl-C or SIGTERM.
                       With LIONAGI_MCP_TOKEN set, every request needs
                       `Authorization: Bearer $LIONAGI_MCP_TOKEN`; an address beyond
                       loopback needs it.
  --allow-host NAME    also accept requests for Host NAME (repeatable).
  --allow-origin URL   also accept browser requests from origin URL (repeatable).";

/// The environment variable holding the bearer token of `--http`: not a
/// flag, which other users of the machine could read in the process list.
const TOKEN_VAR: &str = "LIONAGI_MCP_TOKEN";

/// How long a turn being recorded when the server stops gets to finish.
const RECORD_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

/// One conversation answering questions, one turn at a time.
struct Served {
    conv: Arc<Mutex<Conversation>>,
    info: ModelInfo,
    servers: Option<McpServers>,
    /// The narrator of the call being answered.
    current: CurrentCall,
}

/// The call being answered: its narrator, when its client listens, and
/// the person behind its client. The tool servers' hooks are set once, at
/// connect, and reach whichever call is current (one at a time: the
/// conversation is locked for a turn).
#[derive(Clone, Default)]
struct CurrentCall(Arc<std::sync::Mutex<Call>>);

#[derive(Default)]
struct Call {
    narrator: Option<Narrator>,
    confirm: Option<Confirmer>,
}

impl CurrentCall {
    fn narrate(&self, step: &str) {
        let narrator = self.0.lock().ok().and_then(|c| c.narrator.clone());
        if let Some(n) = narrator {
            n(step);
        }
    }

    /// `narrator` is told the tools' steps, and the tool servers' questions
    /// go to `confirm`'s person, until the guard is dropped.
    fn telling(&self, narrator: Option<Narrator>, confirm: Confirmer) -> Telling<'_> {
        if let Ok(mut c) = self.0.lock() {
            *c = Call {
                narrator,
                confirm: Some(confirm),
            };
        }
        Telling(self)
    }

    /// A tool server's question, passed on to the current call's client
    /// (declined when there is none, or it cannot show forms).
    async fn relay(&self, question: Elicitation) -> ElicitAnswer {
        let confirm = self.0.lock().ok().and_then(|c| c.confirm.clone());
        match confirm {
            Some(c) => c.relay(&question).await,
            None => ElicitAnswer::Decline,
        }
    }

    /// Hooks that tell the current call which tool runs; not its arguments
    /// or results, which are the turn's (the client reads the answer).
    fn hooks(&self) -> ToolHooks {
        let calls = self.clone();
        let progress = self.clone();
        let asking = self.clone();
        ToolHooks {
            calls: Some(Arc::new(move |e: &CallEvent| {
                calls.narrate(&match e {
                    CallEvent::Started { tool, .. } => format!("calling tool `{tool}`"),
                    CallEvent::Finished {
                        tool,
                        result: Ok(_),
                    } => format!("tool `{tool}` answered"),
                    CallEvent::Finished { tool, .. } => format!("tool `{tool}` failed"),
                });
            })),
            progress: Some(Arc::new(move |p: &branch_mcp::Progress| {
                progress.narrate(&format!("tool server {}", mcp_tools::progress_line(p)));
            })),
            // A served turn has no person of its own: the client's is
            // asked, when it can show forms.
            elicit: Some(Arc::new(move |q: Elicitation| {
                let current = asking.clone();
                Box::pin(async move { current.relay(q).await })
            })),
        }
    }
}

/// Clears the current call's narrator when its turn ends.
struct Telling<'a>(&'a CurrentCall);

impl Drop for Telling<'_> {
    fn drop(&mut self) {
        if let Ok(mut c) = self.0.0.lock() {
            *c = Call::default();
        }
    }
}

impl Ask for Served {
    fn ask(
        &self,
        question: String,
        mut cancelled: Cancelled,
        progress: ProgressReporter,
        confirm: Confirmer,
    ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send + '_>> {
        Box::pin(async move {
            let dropped = || Err("the call was cancelled; nothing of its turn was kept".into());
            let narrator = progress
                .is_listened()
                .then(|| Arc::new(move |step: &str| progress.report(step)) as Narrator);
            let mut conv = match self.conv.try_lock() {
                Ok(conv) => conv,
                Err(_) => {
                    // Another call's turn is being answered.
                    if let Some(n) = &narrator {
                        n("waiting for the turn before it");
                    }
                    tokio::select! {
                        biased;
                        () = &mut cancelled => return dropped(),
                        conv = self.conv.lock() => conv,
                    }
                }
            };
            let _telling = self.current.telling(narrator.clone(), confirm.clone());
            let quiet = Display {
                narrator,
                ..Display::default()
            };
            let catching_up = async {
                // Turns another writer stored since the last call come
                // first; the reloaded branch gets the tools again.
                let caught_up = conv.catch_up().await.map_err(|e| e.to_string())?;
                if let (Some(_), Some(s)) = (caught_up, &self.servers) {
                    s.register(conv.branch_mut())
                        .await
                        .map_err(|e| e.to_string())?;
                }
                Ok::<_, String>(())
            };
            tokio::select! {
                biased;
                () = &mut cancelled => return dropped(),
                caught_up = catching_up => caught_up?,
            }
            // No turn while one awaits approval: a new question would
            // follow calls that have no answer. A client that can be asked
            // settles it first.
            if confirm.can_ask() {
                settle_all(&mut conv, &confirm, &self.info, &quiet, &mut cancelled).await?;
            }
            if let Some(waiting) = awaiting_approval(&mut conv)? {
                return Err(waiting);
            }
            let answering = async {
                match &self.servers {
                    Some(s) => {
                        s.refresh(conv.branch_mut())
                            .await
                            .map_err(|e| e.to_string())?;
                        tool_turn::ask(conv.branch_mut(), &question, &self.info, &quiet)
                            .await
                            .map_err(|e| e.to_string())
                    }
                    None => turn::ask(conv.branch_mut(), &question, &self.info, &quiet)
                        .await
                        .map_err(|e| e.to_string()),
                }
            };
            // A cancelled call drops its turn (the turn's own code takes
            // back what it began); the store write after it is not raced,
            // so a turn once answered is recorded whole.
            let answer = tokio::select! {
                biased;
                () = &mut cancelled => return dropped(),
                answer = answering => answer?,
            };
            quiet.narrate("recording the turn");
            conv.record_turn().await.map_err(|e| e.to_string())?;
            if !answer.paused {
                return Ok(answer.text);
            }
            // Recorded with its pause; a person decides the calls: the
            // client's, when it can be asked.
            let mut text = answer.text;
            if confirm.can_ask() {
                match settle_all(&mut conv, &confirm, &self.info, &quiet, &mut cancelled).await {
                    Ok(answers) => {
                        for a in answers.iter().filter(|a| !a.is_empty()) {
                            text.push_str("\n\n");
                            text.push_str(a);
                        }
                    }
                    Err(why) => text.push_str(&format!("\n\n[{why}]")),
                }
            } else if let Some(waiting) = awaiting_approval(&mut conv)? {
                text.push_str(&format!("\n\n[{waiting}]"));
            }
            Ok(text)
        })
    }
}

/// Settles the paused turn by asking the client's person, and each later
/// pause of the answers that follow; their texts. `Err` says why the turn
/// still waits (and how else to settle it).
async fn settle_all(
    conv: &mut Conversation,
    confirm: &Confirmer,
    info: &ModelInfo,
    display: &Display,
    cancelled: &mut Cancelled,
) -> Result<Vec<String>, String> {
    let mut answers = Vec::new();
    loop {
        match mcp_approve::settle(conv, confirm, info, display, cancelled).await? {
            Settled::NothingPaused => return Ok(answers),
            Settled::Answered(answer) => {
                answers.push(answer.text);
                if !answer.paused {
                    return Ok(answers);
                }
            }
            Settled::StillPaused(why) => {
                let waiting = awaiting_approval(conv)?.unwrap_or_default();
                return Err(format!("{waiting} ({why})"));
            }
        }
    }
}

/// What to tell a client while the conversation's turn awaits approval
/// (`--approve`, or left paused by `lionagi chat --approve`): which calls
/// and the command that settles them.
fn awaiting_approval(conv: &mut Conversation) -> Result<Option<String>, String> {
    let pending = conv
        .branch_mut()
        .pending_approval()
        .map_err(|e| e.to_string())?;
    let Some(pending) = pending else {
        return Ok(None);
    };
    let names: Vec<String> = pending
        .waiting()
        .map(|c| format!("`{}`", c.function))
        .collect();
    let store = conv.store_path().unwrap_or_default().to_owned();
    Ok(Some(format!(
        "the conversation waits for a person to approve its tool call(s) {}: \
         lionagi chat --store {} --resume {} --approve",
        names.join(", "),
        shell_word(&store),
        shell_word(&conv.resume_key())
    )))
}

/// Runs `lionagi mcp` with the words after `mcp`; the exit status.
pub fn main(args: &[String]) -> i32 {
    match run(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("lionagi: {}", super::shown::printable(&e.to_string()));
            e.exit_code()
        }
    }
}

/// Where `mcp serve` listens: stdio, or HTTP with its access rules.
enum Transport {
    Stdio,
    Http {
        addr: SocketAddr,
        access: HttpAccess,
    },
}

fn run(args: &[String]) -> Result<(), ChatError> {
    let Some((first, rest)) = args.split_first() else {
        return Err(ChatError::Usage(MCP_USAGE.into()));
    };
    if first != "serve" {
        return Err(ChatError::Usage(format!(
            "unknown `mcp` command `{first}`\n\n{MCP_USAGE}"
        )));
    }
    // The chat's own parser, with `--branch` as the conversation to resume.
    let mut words = Vec::new();
    let mut branch = None;
    let mut http = None;
    let mut hosts = Vec::new();
    let mut origins = Vec::new();
    let mut it = rest.iter();
    while let Some(w) = it.next() {
        let (flag, inline) = match w.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
            _ => (w.as_str(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| ChatError::Usage(format!("`{flag}` needs a value\n\n{MCP_USAGE}")))
        };
        match flag {
            "--branch" => branch = Some(value()?),
            "--http" => http = Some(value()?),
            "--allow-host" => hosts.push(value()?),
            "--allow-origin" => origins.push(value()?),
            "-h" | "--help" => {
                println!("{MCP_USAGE}");
                return Ok(());
            }
            "--json" | "--system" | "--name" | "--resume" => {
                return Err(ChatError::Usage(format!(
                    "`{flag}` is not an option of `mcp serve`"
                )));
            }
            _ => words.push(w.clone()),
        }
    }
    let branch =
        branch.ok_or_else(|| ChatError::Usage(format!("`--branch` is required\n\n{MCP_USAGE}")))?;
    let transport = match http {
        Some(addr) => Transport::Http {
            addr: addr.parse().map_err(|_| {
                ChatError::Usage(format!(
                    "`--http {addr}` is not an address and port such as 127.0.0.1:8765"
                ))
            })?,
            access: http_access(hosts, origins)?,
        },
        None if hosts.is_empty() && origins.is_empty() => Transport::Stdio,
        None => {
            return Err(ChatError::Usage(
                "`--allow-host` and `--allow-origin` go with `--http`".into(),
            ));
        }
    };
    words.extend(["--resume".to_owned(), branch]);
    let parsed = ChatArgs::parse(&words)?;
    if parsed.store.is_none() || parsed.question.is_some() {
        return Err(ChatError::Usage(MCP_USAGE.into()));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| ChatError::Io {
            what: "the async runtime".into(),
            source,
        })?;
    // The conversation's own model unless the flags choose one, as with
    // `lionagi chat --resume`.
    let (model, info) = model_choice::for_conversation(&parsed, &rt)?;
    let served = rt.block_on(async {
        // Bound before the conversation is opened, so a refused address
        // or a taken port is told before any store or tool server is.
        let serving = match transport {
            Transport::Stdio => None,
            Transport::Http { addr, access } => {
                Some(HttpServing::bind(addr, access).await.map_err(|e| match e {
                    McpError::Refused { reason, .. } if reason.contains("token") => {
                        ChatError::Usage(format!("`--http {addr}`: {reason} (set {TOKEN_VAR})"))
                    }
                    McpError::Refused { reason, .. } => {
                        ChatError::Usage(format!("`--http {addr}`: {reason}"))
                    }
                    // Our own server, not one of the conversation's.
                    McpError::Start { reason, .. } => ChatError::Mcp(reason),
                    e => ChatError::Mcp(e.to_string()),
                })?)
            }
        };
        let mut conv = Conversation::open(&parsed, model).await?;
        let current = CurrentCall::default();
        let servers = mcp_tools::connect(&parsed.mcp, conv.branch_mut(), current.hooks()).await?;
        let description = format!(
            "Ask the lionagi conversation {} a question; it answers with one recorded turn.",
            conv.resume_key()
        );
        let conv = Arc::new(Mutex::new(conv));
        let served = Served {
            conv: Arc::clone(&conv),
            info,
            servers,
            current,
        };
        let server = BranchServer::new(served, description);
        let served = match serving {
            None => server.serve_stdio().await,
            Some(serving) => {
                announce(&serving.url())?;
                server.serve_http(serving, stop_signal()).await
            }
        };
        // The sessions are closed and their calls cancelled; a turn
        // already being recorded holds the conversation until it is.
        match tokio::time::timeout(RECORD_GRACE, conv.lock()).await {
            Ok(conv) => conv.dumps_written().await,
            Err(_) => {
                eprintln!("lionagi: a turn was still being recorded when the server stopped");
            }
        }
        served.map_err(|e| ChatError::Mcp(e.to_string()))
    });
    runtime_exit::shut_down(rt);
    served
}

/// The access rules of `--http`: the flags' hosts and origins, and the
/// token of [`TOKEN_VAR`] when it is set.
fn http_access(hosts: Vec<String>, origins: Vec<String>) -> Result<HttpAccess, ChatError> {
    let mut access = HttpAccess::new();
    match std::env::var(TOKEN_VAR) {
        Ok(token) => access = access.token(Secret::new(token)),
        Err(std::env::VarError::NotPresent) => {}
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err(ChatError::Usage(format!("{TOKEN_VAR} is not UTF-8")));
        }
    }
    for host in hosts {
        access = access.allow_host(host);
    }
    for origin in origins {
        access = access.allow_origin(origin);
    }
    Ok(access)
}

/// Prints the URL served as stdout's one line, so a script can read it
/// (the port when `--http` asked for port 0).
fn announce(url: &str) -> Result<(), ChatError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{url}")
        .and_then(|()| out.flush())
        .map_err(|source| ChatError::Io {
            what: "stdout".into(),
            source,
        })
}

/// Resolves on Ctrl-C or SIGTERM (what a service manager sends).
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let term = async {
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            // Without a handler SIGTERM ends the process as it would have.
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}
