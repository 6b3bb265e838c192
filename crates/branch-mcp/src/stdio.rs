//! The stdio transport: the server is a child process in a process group
//! of its own, started with no shell and only the configured environment;
//! its stdout is read through [`CheckedLines`], which refuses oversized
//! and malformed messages with a clear reason.

use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader, ReadBuf};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::limits;
use crate::redact::Secret;

/// Why a connection ended, when something on our side saw it first.
#[derive(Debug, Clone, Default)]
pub(crate) struct Failure(Arc<Mutex<Option<String>>>);

impl Failure {
    pub(crate) fn set(&self, why: String) {
        if let Ok(mut g) = self.0.lock() {
            g.get_or_insert(why);
        }
    }

    pub(crate) fn get(&self) -> Option<String> {
        self.0.lock().ok().and_then(|g| g.clone())
    }
}

/// The last bytes of a child's stderr.
#[derive(Debug, Clone, Default)]
pub(crate) struct StderrTail(Arc<Mutex<Vec<u8>>>);

impl StderrTail {
    fn push(&self, line: &[u8]) {
        if let Ok(mut t) = self.0.lock() {
            t.extend_from_slice(line);
            if t.len() > limits::STDERR_TAIL_BYTES {
                let cut = t.len() - limits::STDERR_TAIL_BYTES;
                t.drain(..cut);
            }
        }
    }

    pub(crate) fn text(&self) -> String {
        self.0
            .lock()
            .map(|t| String::from_utf8_lossy(&t).trim().to_owned())
            .unwrap_or_default()
    }
}

/// A running stdio server: the child and its process group.
#[derive(Debug)]
pub(crate) struct ServerProcess {
    child: Child,
    pid: Option<u32>,
    group: Option<rustix::process::Pid>,
    stderr: StderrTail,
    stderr_reader: Option<tokio::task::JoinHandle<()>>,
}

/// What [`spawn`] hands to the protocol layer.
pub(crate) struct Pipes {
    pub(crate) stdout: CheckedLines<ChildStdout>,
    pub(crate) stdin: ChildStdin,
}

/// Starts `program` with exactly `env` as its environment, no shell, in a
/// new process group (so that its own children are ended with it).
pub(crate) fn spawn(
    program: &PathBuf,
    args: &[String],
    env: &[(String, Secret)],
    cwd: Option<&PathBuf>,
    failure: Failure,
) -> io::Result<(ServerProcess, Pipes)> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v.expose())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let mut child = cmd.spawn()?;
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(rustix::process::Pid::from_raw);
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| io::Error::other("no stdout pipe"))?;
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| io::Error::other("no stdin pipe"))?;
    let tail = StderrTail::default();
    let mut stderr_reader = None;
    if let Some(stderr) = child.stderr.take() {
        let tail = tail.clone();
        let secrets: Vec<Secret> = env.iter().map(|(_, v)| v.clone()).collect();
        stderr_reader = Some(tokio::spawn(async move {
            let mut lines = BufReader::new(stderr);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                // Bounded: a line longer than the tail is cut by `take`.
                let mut limited = (&mut lines).take(limits::STDERR_TAIL_BYTES as u64);
                match limited.read_until(b'\n', &mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let text = crate::redact::scrub(&String::from_utf8_lossy(&buf), &secrets);
                        tracing::debug!(target: "branch_mcp::stderr", "{}", text.trim_end());
                        tail.push(text.as_bytes());
                    }
                }
            }
        }));
    }
    Ok((
        ServerProcess {
            pid: child.id(),
            child,
            group,
            stderr: tail,
            stderr_reader,
        },
        Pipes {
            stdout: CheckedLines::new(stdout, failure),
            stdin,
        },
    ))
}

use tokio::io::AsyncReadExt;

impl ServerProcess {
    /// The exit status if the child has ended (waits up to `within`).
    pub(crate) async fn exited(&mut self, within: Duration) -> Option<ExitStatus> {
        tokio::time::timeout(within, self.child.wait())
            .await
            .ok()
            .and_then(Result::ok)
    }

    /// The MCP shutdown sequence once stdin is closed: wait, SIGTERM to the
    /// group, wait, SIGKILL to the group, and reap the child.
    pub(crate) async fn shutdown(&mut self) {
        if self.exited(limits::SHUTDOWN_GRACE).await.is_none() {
            self.signal(rustix::process::Signal::TERM);
            if self.exited(limits::SHUTDOWN_GRACE).await.is_none() {
                self.signal(rustix::process::Signal::KILL);
                let _ = self.child.kill().await;
            }
        }
        // The group may hold grandchildren that outlived the leader.
        self.signal(rustix::process::Signal::KILL);
        self.group = None;
    }

    /// The end of the child's stderr; once it has exited, everything it
    /// wrote (the reader is given a moment to reach the end).
    pub(crate) async fn stderr_tail(&mut self) -> String {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            if let Some(reader) = self.stderr_reader.take() {
                let _ = tokio::time::timeout(Duration::from_millis(500), reader).await;
            }
        }
        self.stderr.text()
    }

    /// Ends the group at once and reaps the child (a broken server).
    pub(crate) async fn kill(&mut self) {
        self.signal(rustix::process::Signal::KILL);
        let _ = self.child.kill().await;
        self.group = None;
    }

    /// The child's process id as spawned.
    pub(crate) fn id(&self) -> Option<u32> {
        self.pid
    }

    fn signal(&self, sig: rustix::process::Signal) {
        if let Some(g) = self.group {
            let _ = rustix::process::kill_process_group(g, sig);
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // Dropped without `shutdown` (a panic, a dropped connect): end the
        // whole group now; `kill_on_drop` has tokio reap the child.
        self.signal(rustix::process::Signal::KILL);
    }
}

/// A reader of newline-delimited JSON-RPC that ends the stream with an
/// error, recorded in `failure`, when a line exceeds
/// [`limits::MAX_MESSAGE_BYTES`] or is not JSON.
pub(crate) struct CheckedLines<R> {
    inner: R,
    line: Vec<u8>,
    failure: Failure,
    failed: bool,
}

impl<R> CheckedLines<R> {
    pub(crate) fn new(inner: R, failure: Failure) -> Self {
        Self {
            inner,
            line: Vec::new(),
            failure,
            failed: false,
        }
    }

    fn check(&mut self, bytes: &[u8]) -> Result<(), String> {
        for chunk in bytes.split_inclusive(|b| *b == b'\n') {
            let complete = chunk.last() == Some(&b'\n');
            if self.line.len().saturating_add(chunk.len()) > limits::MAX_MESSAGE_BYTES {
                return Err(format!(
                    "a message larger than the cap of {} bytes",
                    limits::MAX_MESSAGE_BYTES
                ));
            }
            self.line.extend_from_slice(chunk);
            if complete {
                let text = self.line.trim_ascii();
                if !text.is_empty()
                    && serde_json::from_slice::<serde::de::IgnoredAny>(text).is_err()
                {
                    let preview: String = String::from_utf8_lossy(text).chars().take(120).collect();
                    return Err(format!("malformed JSON-RPC on stdout: {preview:?}"));
                }
                self.line.clear();
            }
        }
        Ok(())
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for CheckedLines<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.failed {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the server broke the protocol",
            )));
        }
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let new = buf.filled()[before..].to_vec();
                if let Err(why) = this.check(&new) {
                    this.failed = true;
                    this.failure.set(why.clone());
                    buf.set_filled(before);
                    return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, why)));
                }
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn oversized_and_malformed_lines_end_the_stream() {
        let mut ok = CheckedLines::new(&b"{\"a\":1}\n\n{\"b\":2}\n"[..], Failure::default());
        let mut s = String::new();
        ok.read_to_string(&mut s).await.unwrap();
        assert_eq!(s.lines().count(), 3);

        let failure = Failure::default();
        let mut bad = CheckedLines::new(&b"{\"a\":1}\nnot json\n"[..], failure.clone());
        assert!(bad.read_to_string(&mut String::new()).await.is_err());
        assert!(failure.get().unwrap().contains("malformed JSON-RPC"));

        let big = vec![b'x'; limits::MAX_MESSAGE_BYTES + 10];
        let failure = Failure::default();
        let mut huge = CheckedLines::new(&big[..], failure.clone());
        assert!(huge.read_to_end(&mut Vec::new()).await.is_err());
        assert!(failure.get().unwrap().contains("larger than the cap"));
    }
}
