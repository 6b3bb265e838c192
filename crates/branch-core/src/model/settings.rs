//! Settings as the reference reads them: the environment first, then the
//! dotenv files `.env`, `.env.local`, `.secrets.env` of the working
//! directory (later files win; names compared case-insensitively).

use std::path::Path;

/// Dotenv files read, in increasing priority.
pub const DOTENV_FILES: &[&str] = &[".env", ".env.local", ".secrets.env"];

/// The setting `name`: the environment variable if set and non-empty, else
/// the last definition in the dotenv files of the working directory.
pub fn setting(name: &str) -> Option<String> {
    if let Some(v) = std::env::var(name).ok().filter(|v| !v.trim().is_empty()) {
        return Some(v);
    }
    let dir = std::env::current_dir().ok()?;
    dotenv_setting(&dir, name)
}

/// The last definition of `name` in the dotenv files of `dir`.
pub fn dotenv_setting(dir: &Path, name: &str) -> Option<String> {
    let mut found = None;
    for file in DOTENV_FILES {
        let Ok(text) = std::fs::read_to_string(dir.join(file)) else {
            continue;
        };
        for line in text.lines() {
            if let Some((key, value)) = parse_line(line) {
                if key.eq_ignore_ascii_case(name) && !value.is_empty() {
                    found = Some(value);
                }
            }
        }
    }
    found
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
}
