//! Settings as the reference reads them: the environment first, then the
//! dotenv files `.env`, `.env.local`, `.secrets.env` of the working
//! directory (later files win; names compared case-insensitively).

use std::path::Path;

/// Dotenv files read, in increasing priority.
pub const DOTENV_FILES: &[&str] = &[".env", ".env.local", ".secrets.env"];

/// Largest dotenv file read (1 MiB). A dotenv file holds a few settings;
/// the working directory may be anyone's checkout, so a larger file, or a
/// name that is not a regular file (a FIFO would wait for a writer,
/// `/dev/zero` never ends), is skipped with a warning instead of read.
pub const MAX_DOTENV_BYTES: u64 = 1024 * 1024;

/// The setting `name`: the environment variable if set and non-empty, else
/// the last definition in the dotenv files of the working directory.
pub fn setting(name: &str) -> Option<String> {
    if let Some(v) = std::env::var(name).ok().filter(|v| !v.trim().is_empty()) {
        return Some(v);
    }
    let dir = std::env::current_dir().ok()?;
    dotenv_setting(&dir, name)
}

/// The setting `name` as the reference's typed settings read it: the
/// environment variable if set, even to nothing (its name in any case when
/// not in `name`'s), else the last definition in the dotenv files of the
/// working directory, even an empty one (the caller decides what an empty
/// value means). An environment variable that is not UTF-8 is an error.
pub fn setting_as_given(name: &str) -> Result<Option<String>, String> {
    let not_utf8 = || format!("{name} is not UTF-8");
    match std::env::var(name) {
        Ok(v) => return Ok(Some(v)),
        Err(std::env::VarError::NotUnicode(_)) => return Err(not_utf8()),
        Err(std::env::VarError::NotPresent) => {}
    }
    let other_case = std::env::vars_os().find(|(key, _)| {
        key.to_str()
            .is_some_and(|key| key.eq_ignore_ascii_case(name))
    });
    if let Some((_, value)) = other_case {
        return value.into_string().map(Some).map_err(|_| not_utf8());
    }
    let Ok(dir) = std::env::current_dir() else {
        return Ok(None);
    };
    Ok(dotenv_definition(&dir, name, true))
}

/// The last definition of `name` in the dotenv files of `dir`.
pub fn dotenv_setting(dir: &Path, name: &str) -> Option<String> {
    dotenv_definition(dir, name, false)
}

/// The last definition of `name` in the dotenv files of `dir`; with
/// `keep_empty`, an empty one counts.
fn dotenv_definition(dir: &Path, name: &str, keep_empty: bool) -> Option<String> {
    let mut found = None;
    for file in DOTENV_FILES {
        let Some(text) = read_dotenv(&dir.join(file)) else {
            continue;
        };
        for line in text.lines() {
            if let Some((key, value)) = parse_line(line) {
                if key.eq_ignore_ascii_case(name) && (keep_empty || !value.is_empty()) {
                    found = Some(value);
                }
            }
        }
    }
    found
}

/// The dotenv file at `path`; `None` when there is none, or (with a
/// warning naming it) when it is not a regular file, is larger than
/// [`MAX_DOTENV_BYTES`] or cannot be read as UTF-8 text.
fn read_dotenv(path: &Path) -> Option<String> {
    let skipped = |why: &dyn std::fmt::Display| {
        tracing::warn!(path = %path.display(), "dotenv file skipped: {why}");
        None
    };
    let limit = "the limit on dotenv files (MAX_DOTENV_BYTES)";
    match crate::capped_read::read_regular_file(path, MAX_DOTENV_BYTES, limit) {
        Ok(bytes) => String::from_utf8(bytes)
            .ok()
            .or_else(|| skipped(&"not UTF-8 text")),
        // No such file: nothing to say.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => skipped(&e),
    }
}

fn parse_line(line: &str) -> Option<(&str, String)> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let line = line.strip_prefix("export ").map_or(line, str::trim_start);
    let (key, value) = line.split_once('=')?;
    let key = key.trim();
    if key.is_empty() || key.contains(char::is_whitespace) {
        return None;
    }
    let value = value.trim();
    let value = match value.chars().next() {
        Some(q @ ('"' | '\'')) => {
            let inner = &value[1..];
            inner.find(q).map_or(inner, |end| &inner[..end]).to_owned()
        }
        _ => value
            .split(" #")
            .next()
            .unwrap_or_default()
            .trim()
            .to_owned(),
    };
    Some((key, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotenv_files_in_priority_order() {
        let dir = std::env::temp_dir().join(format!("lionagi-dotenv-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(".env"),
            "# comment\nOPENAI_API_KEY=sk-from-env-file\nexport LIONAGI_CHAT_MODEL=\"gpt-4o\"\nX='a b' \n",
        )
        .unwrap();
        std::fs::write(
            dir.join(".secrets.env"),
            "openai_api_key = sk-secret-file # note\n",
        )
        .unwrap();
        assert_eq!(
            dotenv_setting(&dir, "OPENAI_API_KEY").as_deref(),
            Some("sk-secret-file")
        );
        assert_eq!(
            dotenv_setting(&dir, "LIONAGI_CHAT_MODEL").as_deref(),
            Some("gpt-4o")
        );
        assert_eq!(dotenv_setting(&dir, "x").as_deref(), Some("a b"));
        assert_eq!(dotenv_setting(&dir, "MISSING"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The typed settings (`LOG_*`) take an empty definition as given; the
    /// others skip it for an earlier one.
    #[test]
    fn an_empty_definition_counts_only_where_asked() {
        let dir = std::env::temp_dir().join(format!("lionagi-dotenv-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(".env"), "LOG_SUBFOLDER=runs\n").unwrap();
        std::fs::write(dir.join(".env.local"), "LOG_SUBFOLDER=\n").unwrap();
        assert_eq!(
            dotenv_setting(&dir, "LOG_SUBFOLDER").as_deref(),
            Some("runs")
        );
        assert_eq!(
            dotenv_definition(&dir, "LOG_SUBFOLDER", true).as_deref(),
            Some("")
        );
        assert_eq!(dotenv_definition(&dir, "LOG_CAPACITY", true), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A dotenv file too large to be one, or a name that is not a regular
    /// file, is skipped at once; the files beside it are still read.
    #[test]
    fn only_bounded_regular_dotenv_files_are_read() {
        let dir = std::env::temp_dir().join(format!("lionagi-dotenv-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut large = "A=1\n".repeat(usize::try_from(MAX_DOTENV_BYTES).unwrap() / 4);
        large.push_str("B=2\n");
        std::fs::write(dir.join(".env"), &large).unwrap();
        std::fs::create_dir(dir.join(".env.local")).unwrap();
        std::fs::write(dir.join(".secrets.env"), "C=3\n").unwrap();
        assert_eq!(dotenv_setting(&dir, "A"), None);
        assert_eq!(dotenv_setting(&dir, "B"), None);
        assert_eq!(dotenv_setting(&dir, "C").as_deref(), Some("3"));
        // Exactly at the cap, it is read.
        large.truncate(usize::try_from(MAX_DOTENV_BYTES).unwrap());
        std::fs::write(dir.join(".env"), &large).unwrap();
        assert_eq!(dotenv_setting(&dir, "A").as_deref(), Some("1"));
        #[cfg(target_os = "linux")]
        {
            std::fs::remove_file(dir.join(".env")).unwrap();
            std::os::unix::fs::symlink("/dev/zero", dir.join(".env")).unwrap();
            let fifo = dir.join(".secrets.env");
            std::fs::remove_file(&fifo).unwrap();
            let made = std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap();
            assert!(made.success());
            assert_eq!(dotenv_setting(&dir, "A"), None);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
