//! `--store` on the command line: a SQLite path or a `postgres://` URL
//! picks the store; `branch import` never silently replaces a newer
//! stored conversation or adds a second one with the same name; a file
//! that is not a store is refused and left alone; a password in the URL
//! is never printed.

use std::path::PathBuf;
use std::process::{Command, Output};

use branch_models::mock::{MockReply, MockServer};
use lionagi::core::{Branch, Message, ToDictOptions};
use lionagi::session::store::{BranchStore, SqliteStore};

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("lionagi-store-{tag}-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
    fn path(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn lionagi(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lionagi"))
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run lionagi")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn named(name: &str, messages: usize) -> Branch {
    let mut b = Branch::builder().name(name).build().unwrap();
    for i in 0..messages {
        b.msgs_mut()
            .add_message(Message::assistant(format!("{name} {i}")));
    }
    b
}

fn write_file(dir: &Dir, file: &str, b: &Branch) -> String {
    let path = dir.path(file);
    let v = b.to_dict(&ToDictOptions::default()).unwrap();
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_refuses_an_older_file_and_a_second_namesake_unless_replacing() {
    let dir = Dir::new("import");
    let db = dir.path("s.db");
    let mut b = named("plan", 2);
    let old = write_file(&dir, "old.json", &b);
    std::thread::sleep(std::time::Duration::from_millis(20));
    b.msgs_mut().add_message(Message::assistant("later"));
    let store = SqliteStore::open(&db).await.unwrap();
    store.save(&b).await.unwrap();

    let out = lionagi(&["branch", "import", &old, "--store", &db]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("the stored one is newer"), "{err}");
    assert!(
        err.contains("--replace") && err.contains("3 messages"),
        "{err}"
    );
    assert_eq!(store.load(b.id()).await.unwrap().messages().len(), 3);

    let out = lionagi(&["branch", "import", &old, "--store", &db, "--replace"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(store.load(b.id()).await.unwrap().messages().len(), 2);

    // A different conversation with the same name.
    let other = named("plan", 1);
    let file = write_file(&dir, "other.json", &other);
    let out = lionagi(&["branch", "import", &file, "--store", &db]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("another conversation named `plan`"), "{err}");
    assert!(err.contains(&b.id().to_string()), "{err}");
    assert_eq!(store.list().await.unwrap().len(), 1);
    let out = lionagi(&["branch", "import", &file, "--store", &db, "--replace"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let list = store.list().await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].id, other.id());
}

#[test]
fn a_file_that_is_not_a_store_is_refused_and_left_alone() {
    let dir = Dir::new("notdb");
    let path = dir.path("x");
    std::fs::write(&path, b"x").unwrap();
    let b = named("a", 1);
    let file = write_file(&dir, "a.json", &b);
    for args in [
        vec!["branch", "list", "--store", &path],
        vec!["branch", "import", &file, "--store", &path],
    ] {
        let out = lionagi(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.contains("not a SQLite conversation store"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"x");
    }
    // Listing never creates a store.
    let missing = dir.path("missing.db");
    let out = lionagi(&["branch", "list", "--store", &missing]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!std::path::Path::new(&missing).exists());
}

/// The test database's URL, or `None` (with a message) locally without
/// one; in CI, or with `LIONAGI_PG_REQUIRED=1`, a missing one fails.
fn pg_url() -> Option<String> {
    match std::env::var("LIONAGI_PG_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let required = std::env::var("LIONAGI_PG_REQUIRED").is_ok_and(|v| v == "1")
                || std::env::var_os("CI").is_some();
            assert!(
                !required,
                "LIONAGI_PG_URL is not set but PostgreSQL is required"
            );
            eprintln!("skipped: set LIONAGI_PG_URL to run the PostgreSQL CLI tests");
            None
        }
    }
}

/// A database of its own on the test server; its URL.
async fn fresh_database(url: &str, tag: &str) -> String {
    // A plain side connection; the commands under test use TLS as the URL
    // asks.
    let plain = url.replace("sslmode=require", "sslmode=disable");
    let (client, conn) = tokio_postgres::connect(&plain, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    let name = format!("cli_{tag}_{}", uuid::Uuid::new_v4().simple());
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let (base, rest) = url.rsplit_once('/').expect("URL with a database");
    let query = rest
        .split_once('?')
        .map_or(String::new(), |(_, q)| format!("?{q}"));
    format!("{base}/{name}{query}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_url_selects_postgres_and_its_password_never_shows() {
    let Some(url) = pg_url() else { return };
    const SECRET: &str = "cli-pw-5f1d";
    let db = fresh_database(&url, "urls").await;
    // The test server trusts loopback; the password is accepted, unused.
    let with_pw = db.replacen("://postgres@", &format!("://postgres:{SECRET}@"), 1);
    assert!(with_pw.contains(SECRET));
    let dir = Dir::new("pg");
    let b = named("remote", 2);
    let file = write_file(&dir, "b.json", &b);
    let mut outputs = Vec::new();
    let out = lionagi(&["branch", "import", &file, "--store", &with_pw]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    outputs.push(out);
    let out = lionagi(&["branch", "list", "--store", &with_pw]);
    assert!(
        text(&out.stdout).contains("remote"),
        "{}",
        text(&out.stdout)
    );
    outputs.push(out);
    let out = lionagi(&["branch", "show", "remote", "--store", &with_pw]);
    assert!(
        text(&out.stdout).contains("remote 1"),
        "{}",
        text(&out.stdout)
    );
    outputs.push(out);
    let out = lionagi(&["branch", "show", "nothing", "--store", &with_pw]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("postgres://postgres@"),
        "{}",
        text(&out.stderr)
    );
    outputs.push(out);
    // A chat turn stored in PostgreSQL, then resumed.
    let server = MockServer::start().await;
    server.script([MockReply::text("Stored."), MockReply::text("Again.")]);
    let base = server.base_url();
    let chat = |extra: &[&str]| {
        let mut args = vec!["chat", "--base-url", &base, "--store", &with_pw];
        args.extend_from_slice(extra);
        Command::new(env!("CARGO_BIN_EXE_lionagi"))
            .args(&args)
            .env("HOME", &dir.0)
            .env("LIONAGI_HOME", dir.0.join("home"))
            .env_remove("OPENAI_API_KEY")
            .output()
            .expect("run chat")
    };
    let first = chat(&["--name", "talk", "Hello?"]);
    assert!(first.status.success(), "{}", text(&first.stderr));
    let second = chat(&["--resume", "talk", "Still there?"]);
    assert!(second.status.success(), "{}", text(&second.stderr));
    assert_eq!(text(&second.stdout), "Again.\n");
    let hint = text(&second.stderr);
    assert!(hint.contains("--resume talk"), "{hint}");
    outputs.push(first);
    outputs.push(second);
    let store = lionagi::session::store::PgStore::connect(&db)
        .await
        .unwrap();
    let list = store.list().await.unwrap();
    let talk = list
        .iter()
        .find(|s| s.name.as_deref() == Some("talk"))
        .unwrap();
    assert_eq!(talk.message_count, 4);
    assert_eq!(talk.version, 2, "one save, one append");
    for out in &outputs {
        for t in [text(&out.stdout), text(&out.stderr)] {
            assert!(!t.contains(SECRET), "password printed: {t}");
        }
    }
}

/// A role that must authenticate (SCRAM): the password is found in the
/// URL, in `PGPASSWORD` and in a `.pgpass` file, and never printed, not
/// even when it is wrong.
#[test]
fn the_password_comes_from_the_url_pgpassword_or_pgpass_and_never_shows() {
    let Some(_) = pg_url() else { return };
    let (Ok(url), Ok(password)) = (
        std::env::var("LIONAGI_PG_PASSWORD_URL"),
        std::env::var("LIONAGI_PG_PASSWORD"),
    ) else {
        let required = std::env::var("LIONAGI_PG_REQUIRED").is_ok_and(|v| v == "1")
            || std::env::var_os("CI").is_some();
        assert!(
            !required,
            "LIONAGI_PG_PASSWORD_URL is not set (.ci/services/postgres.sh sets it)"
        );
        eprintln!("skipped: set LIONAGI_PG_PASSWORD_URL and LIONAGI_PG_PASSWORD");
        return;
    };
    let dir = Dir::new("pgpass");
    let list = |store: &str, envs: &[(&str, &str)]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_lionagi"));
        c.args(["branch", "list", "--store", store])
            .env("HOME", &dir.0)
            .env_remove("PGPASSWORD")
            .env_remove("PGPASSFILE");
        for (k, v) in envs {
            c.env(k, v);
        }
        c.output().expect("run lionagi")
    };
    let shown = |out: &Output, secret: &str| {
        for t in [text(&out.stdout), text(&out.stderr)] {
            assert!(!t.contains(secret), "a password was printed: {t}");
        }
    };
    // No password anywhere: refused by the server.
    let out = list(&url, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("lionagi_pw@127.0.0.1"),
        "{}",
        text(&out.stderr)
    );
    // In the URL.
    let in_url = url.replacen("://lionagi_pw@", &format!("://lionagi_pw:{password}@"), 1);
    let out = list(&in_url, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    shown(&out, &password);
    // PGPASSWORD.
    let out = list(&url, &[("PGPASSWORD", &password)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // A .pgpass file (PGPASSFILE), which must not be readable by others.
    let port = url
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .expect("a port in the URL");
    let pgpass = dir.path("pgpass");
    std::fs::write(
        &pgpass,
        format!("# test\n127.0.0.1:{port}:*:lionagi_pw:{password}\n"),
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let out = list(&url, &[("PGPASSFILE", &pgpass)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // A wrong password: an authentication error, the attempt not echoed.
    let wrong = "wrong-pw-4c2e";
    let bad = url.replacen("://lionagi_pw@", &format!("://lionagi_pw:{wrong}@"), 1);
    let out = list(&bad, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("password"),
        "{}",
        text(&out.stderr)
    );
    shown(&out, wrong);
}
