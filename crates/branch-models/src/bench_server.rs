//! A fixed-reply HTTP server in another process, and the client-side cost
//! figures (CPU time, peak memory) that benchmarks report beside it.
//!
//! The benchmarks compare our client with raw reqwest. When the server runs
//! inside the measured process its per-request work is added to both sides
//! and hides the difference, so the server here is a separate process:
//! nginx from the distribution's package when it is installed, otherwise our
//! own static responder (`cargo run --example static_responder`, found
//! through `LIONAGI_BENCH_RESPONDER`). Either way it answers every request
//! with the same chat completion. The child is killed and reaped on drop.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the server may take to accept connections after starting.
const STARTUP_DEADLINE: Duration = Duration::from_secs(10);

/// The environment variable naming our static responder binary, used when
/// nginx is not installed (`cargo xtask bench` sets it).
pub const RESPONDER_ENV: &str = "LIONAGI_BENCH_RESPONDER";

/// An OpenAI chat completion with the given assistant text, as the server
/// sends it. The text must not need JSON escaping (the benchmarks pass plain
/// words).
pub fn chat_completion_json(text: &str) -> String {
    format!(
        "{{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion\",\"created\":1700000000,\
         \"model\":\"gpt-4.1-mini\",\"choices\":[{{\"index\":0,\"message\":{{\"role\":\"assistant\",\
         \"content\":\"{text}\"}},\"finish_reason\":\"stop\"}}],\
         \"usage\":{{\"prompt_tokens\":12,\"completion_tokens\":3,\"total_tokens\":15}}}}"
    )
}

/// Which program serves the fixed reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    /// nginx with a generated configuration (`return 200 '...'`).
    Nginx,
    /// Our own std-only responder (`examples/static_responder.rs`).
    Responder,
}

/// A fixed-reply server running as a child process on 127.0.0.1.
pub struct StaticServer {
    child: Child,
    port: u16,
    kind: ServerKind,
    dir: PathBuf,
}

impl StaticServer {
    /// Starts nginx when found, else the responder named by
    /// [`RESPONDER_ENV`], answering every request with `reply` (JSON).
    pub fn start(reply: &str) -> Result<Self, String> {
        match find_nginx() {
            Some(nginx) => Self::start_nginx(&nginx, reply),
            None => match std::env::var_os(RESPONDER_ENV) {
                Some(bin) => Self::start_responder(Path::new(&bin), reply),
                None => Err(format!(
                    "neither nginx (apt-get install -y nginx) nor ${RESPONDER_ENV} \
                     (cargo build --release -p branch-models --example static_responder) \
                     is available"
                )),
            },
        }
    }

    /// Starts our own responder binary.
    pub fn start_responder(bin: &Path, reply: &str) -> Result<Self, String> {
        let port = free_port()?;
        let dir = temp_dir("responder")?;
        let reply_file = dir.join("reply.json");
        std::fs::write(&reply_file, reply).map_err(|e| format!("write reply: {e}"))?;
        let child = Command::new(bin)
            .arg(port.to_string())
            .arg(&reply_file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        Self::ready(child, port, ServerKind::Responder, dir)
    }

    /// Starts nginx with a generated configuration in a temporary prefix.
    pub fn start_nginx(nginx: &Path, reply: &str) -> Result<Self, String> {
        if reply.contains('\'') || reply.contains('\\') {
            return Err("the reply must not contain quotes or backslashes".into());
        }
        let port = free_port()?;
        let dir = temp_dir("nginx")?;
        let d = dir.display();
        // One process (no master), no access log, connections kept open for
        // the whole run, request bodies of a long conversation kept in memory.
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\n\
             worker_rlimit_nofile 16384;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 8192; multi_accept on; }}\n\
             http {{\n  access_log off;\n  keepalive_requests 10000000;\n  keepalive_timeout 300s;\n\
               client_max_body_size 256m;\n  client_body_buffer_size 4m;\n\
               client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
               fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
               server {{\n    listen 127.0.0.1:{port} backlog=4096;\n\
                 location / {{ default_type application/json; return 200 '{reply}'; }}\n  }}\n}}\n"
        );
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf).map_err(|e| format!("write nginx.conf: {e}"))?;
        let child = Command::new(nginx)
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(&conf_path)
            .arg("-e")
            .arg(dir.join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", nginx.display()))?;
        Self::ready(child, port, ServerKind::Nginx, dir)
    }

    /// Waits until the port answers an HTTP request, or fails (and stops
    /// the child) at the deadline.
    fn ready(child: Child, port: u16, kind: ServerKind, dir: PathBuf) -> Result<Self, String> {
        let mut server = Self {
            child,
            port,
            kind,
            dir,
        };
        let deadline = Instant::now() + STARTUP_DEADLINE;
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                let log = std::fs::read_to_string(server.dir.join("error.log")).unwrap_or_default();
                return Err(format!("{kind:?} exited at startup ({status}): {log}"));
            }
            if probe(port) {
                return Ok(server);
            }
            if Instant::now() > deadline {
                return Err(format!("{kind:?} did not answer on port {port} in time"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `http://127.0.0.1:PORT/v1`, the base URL to give a model config.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// Which program is serving.
    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    /// The server process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for StaticServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn find_nginx() -> Option<PathBuf> {
    if std::env::var_os("LIONAGI_BENCH_NO_NGINX").is_some() {
        return None;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join("nginx"))
        .find(|p| p.is_file())
}

fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("local_addr: {e}"))
}

fn temp_dir(what: &str) -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!(
        "lionagi-bench-{what}-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    Ok(dir)
}

/// One `GET /` with a short deadline; true when an HTTP status line comes back.
fn probe(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut buf = [0u8; 12];
    s.read_exact(&mut buf).is_ok() && buf.starts_with(b"HTTP/1.1 200")
}

/// The client process's CPU time at one moment, every thread's, user +
/// system (for its memory, see [`Resident`]).
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    /// User + system CPU time, seconds.
    pub cpu_s: f64,
    /// The user part of `cpu_s`, seconds.
    pub user_s: f64,
    /// Minor page faults so far: pages the kernel mapped on first touch,
    /// as a heap grows back after memory was returned to it.
    pub minor_faults: i64,
    /// Context switches so far: the threads' waits (voluntary) and their
    /// preemptions (involuntary), counted together. Each is a trip through
    /// the scheduler that the CPU time above pays for.
    pub context_switches: i64,
}

impl Usage {
    /// `getrusage(RUSAGE_SELF)` now.
    pub fn now() -> Self {
        use nix::sys::resource::{UsageWho, getrusage};
        match getrusage(UsageWho::RUSAGE_SELF) {
            Ok(u) => {
                let secs = |t: nix::sys::time::TimeVal| {
                    t.tv_sec() as f64 + t.tv_usec() as f64 / 1_000_000.0
                };
                Self {
                    cpu_s: secs(u.user_time()) + secs(u.system_time()),
                    user_s: secs(u.user_time()),
                    minor_faults: u.minor_page_faults(),
                    context_switches: u
                        .voluntary_context_switches()
                        .saturating_add(u.involuntary_context_switches()),
                }
            }
            Err(_) => Self {
                cpu_s: f64::NAN,
                user_s: f64::NAN,
                minor_faults: 0,
                context_switches: 0,
            },
        }
    }

    /// CPU seconds used since `earlier`.
    pub fn cpu_since(&self, earlier: &Usage) -> f64 {
        self.cpu_s - earlier.cpu_s
    }

    /// User CPU seconds used since `earlier` (the rest of
    /// [`Usage::cpu_since`] is the kernel's).
    pub fn user_since(&self, earlier: &Usage) -> f64 {
        self.user_s - earlier.user_s
    }

    /// Minor page faults since `earlier`.
    pub fn minor_faults_since(&self, earlier: &Usage) -> i64 {
        self.minor_faults.saturating_sub(earlier.minor_faults)
    }

    /// Context switches since `earlier`.
    pub fn context_switches_since(&self, earlier: &Usage) -> i64 {
        self.context_switches
            .saturating_sub(earlier.context_switches)
    }
}

/// The process's resident size now and its peak since the last
/// [`reset_peak_resident`], bytes (`VmRSS` and `VmHWM` of
/// `/proc/self/status`; Linux only).
///
/// Not `getrusage`'s `ru_maxrss`: that one survives `exec`, so a bench
/// started by a process larger than itself (a Python driver, say) starts
/// with its parent's peak, and the growth it reports is too small.
/// `VmHWM` belongs to this process's own address space.
#[derive(Debug, Clone, Copy)]
pub struct Resident {
    /// Resident set size now.
    pub now_bytes: u64,
    /// Peak resident set size since the last reset.
    pub peak_bytes: u64,
}

/// [`Resident`] now, or why it could not be read.
pub fn resident() -> Result<Resident, String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("/proc/self/status: {e}"))?;
    let field = |name: &str| -> Result<u64, String> {
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .ok_or_else(|| format!("/proc/self/status has no {name}"))?;
        let kb = line
            .trim()
            .strip_suffix("kB")
            .map(str::trim)
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| format!("/proc/self/status: unreadable {name}{line}"))?;
        kb.checked_mul(1024)
            .ok_or_else(|| format!("/proc/self/status: {name} out of range"))
    };
    Ok(Resident {
        now_bytes: field("VmRSS:")?,
        peak_bytes: field("VmHWM:")?,
    })
}

/// Resets the peak resident size to the current one (writes `5` to
/// `/proc/self/clear_refs`, Linux 4.0 and later).
pub fn reset_peak_resident() -> Result<(), String> {
    std::fs::write("/proc/self/clear_refs", "5").map_err(|e| format!("/proc/self/clear_refs: {e}"))
}

/// Raises the soft limit of open files to the hard limit: the all-at-once
/// workloads keep a thousand connections open.
pub fn raise_open_files_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
}

/// The 1-minute load average (`/proc/loadavg`), to print beside figures
/// measured on a shared machine.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
