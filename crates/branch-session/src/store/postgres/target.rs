//! Where a [`super::PgStore`] connects: the URL parsed by the driver, the
//! password found in the URL, `PGPASSWORD` or a `.pgpass` file, TLS with
//! rustls, and a label for messages that never carries the password.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use branch_core::capped_read::read_to_cap;
use tokio_postgres::config::Host;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::limits::{MAX_PGPASS_BYTES, PG_CONNECT_TIMEOUT, PG_STATEMENT_TIMEOUT};
use crate::store::error::StoreError;

/// Largest CA certificate file read (1 MiB).
const MAX_CA_FILE_BYTES: u64 = 1024 * 1024;

/// Whether `s` names a PostgreSQL store rather than a SQLite file.
pub fn is_postgres_url(s: &str) -> bool {
    s.starts_with("postgres://") || s.starts_with("postgresql://")
}

/// The URL with any password removed, for messages and `Debug`.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return "<not a URL>".into();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match authority.rfind('@') {
        Some(at) => {
            let userinfo = &authority[..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!(
                "{}{user}@{}{}",
                &url[..scheme_end + 3],
                &authority[at + 1..],
                strip_password_param(&rest[authority_end..])
            )
        }
        None => format!(
            "{}{authority}{}",
            &url[..scheme_end + 3],
            strip_password_param(&rest[authority_end..])
        ),
    }
}

fn strip_password_param(tail: &str) -> String {
    let Some(q) = tail.find('?') else {
        return tail.to_owned();
    };
    let kept: Vec<&str> = tail[q + 1..]
        .split('&')
        .filter(|kv| !kv.to_ascii_lowercase().starts_with("password="))
        .collect();
    if kept.is_empty() {
        tail[..q].to_owned()
    } else {
        format!("{}?{}", &tail[..q], kept.join("&"))
    }
}

/// A parsed connection target.
pub(crate) struct Target {
    pub config: tokio_postgres::Config,
    pub label: String,
    pub tls: MakeRustlsConnect,
}

/// Parses `url`, finds the password and sets the store's session settings.
pub(crate) fn resolve(
    url: &str,
    schema: Option<&str>,
    synchronous_commit: bool,
    ca_file: Option<&Path>,
) -> Result<Target, StoreError> {
    let label = match schema {
        Some(s) => format!("{} (schema {s})", redact(url)),
        None => redact(url),
    };
    let config_err = |reason: String| StoreError::Config {
        store: label.clone(),
        reason,
    };
    if !is_postgres_url(url) {
        return Err(config_err("not a postgres:// or postgresql:// URL".into()));
    }
    let mut config: tokio_postgres::Config = url.parse().map_err(|e: tokio_postgres::Error| {
        // The driver's parse errors name options, not values; still, never
        // let a password through.
        config_err(format!(
            "not a valid connection URL: {}",
            scrub(&e.to_string(), url)
        ))
    })?;
    if config.get_user().is_none() {
        if let Ok(user) = std::env::var("PGUSER") {
            config.user(user);
        }
    }
    if config.get_password().is_none() {
        if let Some(pw) = std::env::var_os("PGPASSWORD") {
            config.password(pw.to_string_lossy().as_bytes());
        } else if let Some(pw) = pgpass_password(&config)? {
            config.password(pw);
        }
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(PG_CONNECT_TIMEOUT);
    }
    config.keepalives(true);
    if config.get_application_name().is_none() {
        config.application_name("lionagi-rs");
    }
    let mut options = format!(
        "-c statement_timeout={} -c synchronous_commit={}",
        PG_STATEMENT_TIMEOUT.as_millis(),
        if synchronous_commit { "on" } else { "off" }
    );
    if let Some(s) = schema {
        if !valid_schema_name(s) {
            return Err(config_err(format!(
                "schema name `{}` must be 1 to 63 of a-z, 0-9 and _, not starting with a digit",
                s.chars().take(70).collect::<String>()
            )));
        }
        options.push_str(&format!(" -c search_path={s}"));
    }
    if let Some(extra) = config.get_options() {
        options = format!("{extra} {options}");
    }
    config.options(&options);
    let tls = tls_connector(ca_file).map_err(config_err)?;
    Ok(Target { config, label, tls })
}

/// Removes any password the URL carries from a message.
fn scrub(message: &str, url: &str) -> String {
    let mut out = message.to_owned();
    if let Some(rest) = url.split("://").nth(1) {
        let authority = rest.split(['/', '?']).next().unwrap_or("");
        if let Some((userinfo, _)) = authority.rsplit_once('@') {
            if let Some((_, pw)) = userinfo.split_once(':') {
                if !pw.is_empty() {
                    out = out.replace(pw, "<password>");
                }
            }
        }
    }
    out
}

pub(crate) fn valid_schema_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !s.as_bytes()[0].is_ascii_digit()
}

fn tls_connector(ca_file: Option<&Path>) -> Result<MakeRustlsConnect, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let ca: Option<PathBuf> = ca_file
        .map(Path::to_owned)
        .or_else(|| std::env::var_os("PGSSLROOTCERT").map(PathBuf::from));
    if let Some(path) = ca {
        let pem = std::fs::File::open(&path)
            .and_then(|f| read_to_cap(f, MAX_CA_FILE_BYTES, "the limit on CA files"))
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::FileTooLarge => format!(
                    "CA file `{}` is over {MAX_CA_FILE_BYTES} bytes",
                    path.display()
                ),
                _ => format!("cannot read CA file `{}`: {e}", path.display()),
            })?;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| format!("CA file `{}`: {e}", path.display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("CA file `{}`: {e}", path.display()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS set-up: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// The text of the password file at `path`: `None` when it cannot be
/// opened, or (with a warning) when others may read it, as libpq ignores
/// it then; an error when it is larger than [`MAX_PGPASS_BYTES`] (read no
/// further: a cut line would give a cut password).
fn read_pgpass(path: &std::path::Path) -> Result<Option<String>, StoreError> {
    let Ok(file) = std::fs::File::open(path) else {
        return Ok(None);
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = file.metadata() {
            if meta.permissions().mode() & 0o077 != 0 {
                tracing::warn!(
                    path = %path.display(),
                    "password file has group or world access; ignored (chmod 0600 it)"
                );
                return Ok(None);
            }
        }
    }
    let io = |source| StoreError::Io {
        op: "read",
        path: path.to_owned(),
        source,
    };
    let limit = "the limit on password files (MAX_PGPASS_BYTES)";
    let bytes = read_to_cap(file, MAX_PGPASS_BYTES, limit).map_err(io)?;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|e| io(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
}

/// The password of the first matching `.pgpass` line, as libpq reads it:
/// `host:port:database:user:password`, `*` matching anything, `\:` and
/// `\\` escaped. A file others can read is ignored, as libpq does.
fn pgpass_password(config: &tokio_postgres::Config) -> Result<Option<Vec<u8>>, StoreError> {
    let path = match std::env::var_os("PGPASSFILE") {
        Some(p) => PathBuf::from(p),
        None => match std::env::var_os("HOME") {
            Some(h) => PathBuf::from(h).join(".pgpass"),
            None => return Ok(None),
        },
    };
    let Some(text) = read_pgpass(&path)? else {
        return Ok(None);
    };
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(Host::Unix(_)) => "localhost".into(),
        None => "localhost".into(),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let user = config.get_user().unwrap_or("").to_owned();
    let db = config.get_dbname().unwrap_or(&user).to_owned();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields = split_pgpass(line);
        let [h, p, d, u, pw] = fields.as_slice() else {
            continue;
        };
        let matches = |field: &str, want: &str| field == "*" || field == want;
        if matches(h, &host) && matches(p, &port) && matches(d, &db) && matches(u, &user) {
            return Ok(Some(pw.as_bytes().to_vec()));
        }
    }
    Ok(None)
}

fn split_pgpass(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    if let Some(last) = fields.last_mut() {
                        last.push(n);
                    }
                }
            }
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => {
                if let Some(last) = fields.last_mut() {
                    last.push(c);
                }
            }
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_drops_every_password() {
        assert_eq!(
            redact("postgres://u:s3cret@h:5/db?sslmode=require&password=x2"),
            "postgres://u@h:5/db?sslmode=require"
        );
        assert_eq!(redact("postgresql://h/db"), "postgresql://h/db");
        assert_eq!(redact("postgres://u:p@h"), "postgres://u@h");
        assert_eq!(redact("not a url s3cret"), "<not a URL>");
        assert!(!scrub("bad `s3cret`", "postgres://u:s3cret@h/db").contains("s3cret"));
    }

    #[test]
    #[cfg(unix)]
    fn a_password_file_past_its_cap_is_an_error_not_a_cut_line() {
        let dir = std::env::temp_dir().join(format!("lionagi-pgpass-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pgpass");
        let cap = usize::try_from(MAX_PGPASS_BYTES).unwrap();
        let line = "h:5432:db:u:secret\n";
        let mut text = line.repeat(cap / line.len());
        text.push_str(&"#".repeat(cap - text.len()));
        let write = |text: &str| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        };
        write(&text);
        assert_eq!(read_pgpass(&path).unwrap().map(|t| t.len()), Some(cap));
        text.push_str(line);
        write(&text);
        let too_large = || match read_pgpass(&path) {
            Err(StoreError::Io {
                op: "read", source, ..
            }) => {
                assert_eq!(source.kind(), std::io::ErrorKind::FileTooLarge);
                assert!(source.to_string().contains("MAX_PGPASS_BYTES"), "{source}");
            }
            other => panic!("{other:?}"),
        };
        too_large();
        // The size is the reason even where the cap falls inside a
        // character.
        write(&"é".repeat(cap / 2 + 1));
        too_large();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn pgpass_lines_split_with_escapes() {
        assert_eq!(
            split_pgpass(r"h:5432:*:u\:x:pa\\ss:word"),
            ["h", "5432", "*", "u:x", r"pa\ss:word"]
        );
    }

    #[test]
    fn schema_names_are_plain_identifiers() {
        assert!(valid_schema_name("t_1"));
        assert!(!valid_schema_name("1t"));
        assert!(!valid_schema_name("a;drop"));
        assert!(!valid_schema_name(""));
    }
}
