//! A static HTTP/1.1 responder for the benchmarks, used when nginx is not
//! installed: answers every request on 127.0.0.1:PORT with the JSON in
//! REPLY_FILE, keeping connections alive. A thread per connection; the
//! request body is read (bounded) and discarded.
//!
//! `static_responder PORT REPLY_FILE`

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// The largest request head and body accepted: a 2,000-message conversation
/// fits many times over.
const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: u64 = 256 * 1024 * 1024;
/// An idle connection is closed after this long.
const IDLE: Duration = Duration::from_secs(300);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let port: u16 = args
        .next()
        .ok_or("usage: static_responder PORT REPLY_FILE")?
        .parse()?;
    let body = std::fs::read(
        args.next()
            .ok_or("usage: static_responder PORT REPLY_FILE")?,
    )?;
    let mut reply = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    reply.extend_from_slice(&body);
    let reply = Arc::new(reply);
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let reply = Arc::clone(&reply);
        std::thread::spawn(move || {
            let _ = serve(conn, &reply);
        });
    }
    Ok(())
}

fn serve(conn: TcpStream, reply: &[u8]) -> std::io::Result<()> {
    conn.set_read_timeout(Some(IDLE))?;
    conn.set_nodelay(true)?;
    let mut writer = conn.try_clone()?;
    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    loop {
        let (mut length, mut head, mut close) = (0u64, 0usize, false);
        loop {
            line.clear();
            let n = reader.by_ref().take(MAX_HEAD as u64).read_line(&mut line)?;
            if n == 0 {
                return Ok(());
            }
            head += n;
            if head > MAX_HEAD {
                return Ok(());
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            let lower = l.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0).min(MAX_BODY);
            } else if lower.starts_with("connection:") && lower.contains("close") {
                close = true;
            }
        }
        std::io::copy(&mut reader.by_ref().take(length), &mut std::io::sink())?;
        writer.write_all(reply)?;
        if close {
            return Ok(());
        }
    }
}
