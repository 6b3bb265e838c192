//! Every read of the command's input is bounded: a conversation file (or
//! stdin) by a size cap and a deadline, each line of a piped `lionagi
//! chat` by a size cap. `/dev/zero`, a FIFO that never ends and an
//! oversized file all end quickly with an error naming the limit and the
//! variable that changes it.
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use branch_models::mock::{MockReply, MockServer};

struct Dir(PathBuf);

impl Dir {
    fn new() -> Self {
        let d = std::env::temp_dir().join(format!("lionagi-bounds-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&d).unwrap();
        Self(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn lionagi(dir: &Path, args: &[&str], env: &[(&str, &str)], stdin: Stdio) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lionagi"));
    c.args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .env("LIONAGI_HOME", dir.join("home"))
        .env("LIONAGI_MODEL_DIR", dir.join("models"))
        .env("RUST_BACKTRACE", "0")
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for var in [
        "OPENAI_API_KEY",
        "LIONAGI_CHAT_PROVIDER",
        "LIONAGI_CHAT_MODEL",
        "LIONAGI_CHAT_ENDPOINT",
        "LIONAGI_MAX_FILE_BYTES",
        "LIONAGI_READ_TIMEOUT",
        "LIONAGI_MAX_LINE_BYTES",
    ] {
        c.env_remove(var);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run lionagi")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn mkfifo(path: &Path) {
    let ok = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(ok.success());
}

#[test]
fn dev_zero_as_a_conversation_file_stops_at_the_default_cap() {
    let d = Dir::new();
    for args in [
        ["branch", "roundtrip", "/dev/zero"],
        ["branch", "show", "/dev/zero"],
    ] {
        let out = lionagi(&d.0, &args, &[], Stdio::null());
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let e = stderr(&out);
        assert!(e.contains("/dev/zero: more than 67108864 bytes"), "{e}");
        assert!(e.contains("LIONAGI_MAX_FILE_BYTES"), "{e}");
    }
    // Stdin (`-`) is bounded the same way.
    let zero = std::fs::File::open("/dev/zero").unwrap();
    let out = lionagi(
        &d.0,
        &["branch", "roundtrip", "-"],
        &[("LIONAGI_MAX_FILE_BYTES", "4096")],
        Stdio::from(zero),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("-: more than 4096 bytes"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_file_over_the_set_cap_is_refused_and_one_at_it_is_read() {
    let d = Dir::new();
    let doc = lionagi::core::Branch::new()
        .unwrap()
        .to_json_vec(&Default::default())
        .unwrap();
    let file = d.0.join("b.json");
    std::fs::write(&file, &doc).unwrap();
    let path = file.display().to_string();
    let exact = doc.len().to_string();
    let out = lionagi(
        &d.0,
        &["branch", "roundtrip", &path],
        &[("LIONAGI_MAX_FILE_BYTES", &exact)],
        Stdio::null(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let under = (doc.len() - 1).to_string();
    let out = lionagi(
        &d.0,
        &["branch", "roundtrip", &path],
        &[("LIONAGI_MAX_FILE_BYTES", &under)],
        Stdio::null(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("LIONAGI_MAX_FILE_BYTES"));
    // A nonsense setting is an error naming it, not ignored.
    let out = lionagi(
        &d.0,
        &["branch", "roundtrip", &path],
        &[("LIONAGI_MAX_FILE_BYTES", "lots")],
        Stdio::null(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("LIONAGI_MAX_FILE_BYTES must be"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_fifo_no_one_writes_to_ends_at_the_deadline() {
    let d = Dir::new();
    let fifo = d.0.join("never");
    mkfifo(&fifo);
    let started = Instant::now();
    let out = lionagi(
        &d.0,
        &["branch", "roundtrip", &fifo.display().to_string()],
        &[("LIONAGI_READ_TIMEOUT", "1")],
        Stdio::null(),
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    assert!(e.contains("not read to its end within 1 s"), "{e}");
    assert!(e.contains("LIONAGI_READ_TIMEOUT"), "{e}");
}

#[test]
fn a_fifo_that_never_ends_ends_at_the_deadline() {
    let d = Dir::new();
    let fifo = d.0.join("endless");
    mkfifo(&fifo);
    // A writer that sends the start of a document and then holds the
    // FIFO open, sending nothing more.
    let writer_path = fifo.clone();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let mut w = std::fs::OpenOptions::new()
            .write(true)
            .open(&writer_path)
            .unwrap();
        let _ = w.write_all(b"{\"id\": ");
        std::thread::sleep(Duration::from_secs(4));
    });
    let out = lionagi(
        &d.0,
        &["branch", "show", &fifo.display().to_string()],
        &[("LIONAGI_READ_TIMEOUT", "1")],
        Stdio::null(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("within 1 s"), "{}", stderr(&out));
    writer.join().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_reading_dev_zero_fails_at_the_line_cap_instead_of_aborting() {
    let server = MockServer::start().await;
    let url = server.base_url();
    let d = Dir::new();
    let zero = std::fs::File::open("/dev/zero").unwrap();
    let dir = d.0.clone();
    let out = tokio::task::spawn_blocking(move || {
        lionagi(&dir, &["chat", "--base-url", &url], &[], Stdio::from(zero))
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let e = stderr(&out);
    assert!(e.contains("longer than 1048576 bytes"), "{e}");
    assert!(e.contains("LIONAGI_MAX_LINE_BYTES"), "{e}");
    assert_eq!(server.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_answers_lines_within_the_cap_and_stops_at_a_longer_one() {
    let server = MockServer::start().await;
    server.script([MockReply::text("One.")]);
    let url = server.base_url();
    let d = Dir::new();
    let input = d.0.join("input.txt");
    std::fs::write(&input, format!("First?\n{}\nThird?\n", "x".repeat(2000))).unwrap();
    let stdin = std::fs::File::open(&input).unwrap();
    let dir = d.0.clone();
    let out = tokio::task::spawn_blocking(move || {
        lionagi(
            &dir,
            &["chat", "--base-url", &url],
            &[("LIONAGI_MAX_LINE_BYTES", "1000")],
            Stdio::from(stdin),
        )
    })
    .await
    .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "One.\n");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("longer than 1000 bytes"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        server.request_count(),
        1,
        "the long line and what follows are not sent"
    );
}
