//! Tool names as providers accept them (`^[a-zA-Z0-9_-]{1,64}$`), prefixed
//! by the server's name when two servers (or a tool already on the branch)
//! would share one. Deterministic: the same configuration and tool lists
//! always give the same names.

use std::collections::{HashMap, HashSet};

/// The longest function name providers accept.
const MAX_NAME: usize = 64;

/// `name` with every character providers refuse replaced by `_`, cut to
/// 64 bytes; never empty.
pub fn sanitize(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    s.truncate(MAX_NAME);
    if s.is_empty() {
        s.push_str("tool");
    }
    s
}

/// The exposed name of each tool of each server, in the same shape as
/// `servers` (`(server name, tool names)`); `taken` are names already
/// registered elsewhere on the branch.
pub fn assign(servers: &[(String, Vec<String>)], taken: &HashSet<String>) -> Vec<Vec<String>> {
    let mut count: HashMap<String, usize> = HashMap::new();
    for (_, tools) in servers {
        for t in tools {
            *count.entry(sanitize(t)).or_default() += 1;
        }
    }
    let mut used: HashSet<String> = taken.clone();
    servers
        .iter()
        .map(|(server, tools)| {
            tools
                .iter()
                .map(|t| {
                    let base = sanitize(t);
                    let clash = count.get(&base).copied().unwrap_or(0) > 1 || taken.contains(&base);
                    let mut name = if clash {
                        sanitize(&format!("{server}_{t}"))
                    } else {
                        base
                    };
                    if used.contains(&name) {
                        let stem = name.clone();
                        for n in 2.. {
                            let suffix = format!("_{n}");
                            let mut cut = stem.clone();
                            cut.truncate(MAX_NAME - suffix.len());
                            let candidate = format!("{cut}{suffix}");
                            if !used.contains(&candidate) {
                                name = candidate;
                                break;
                            }
                        }
                    }
                    used.insert(name.clone());
                    name
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(servers: &[(&str, &[&str])], taken: &[&str]) -> Vec<Vec<String>> {
        let s: Vec<(String, Vec<String>)> = servers
            .iter()
            .map(|(n, t)| ((*n).to_owned(), t.iter().map(|x| (*x).to_owned()).collect()))
            .collect();
        assign(&s, &taken.iter().map(|x| (*x).to_owned()).collect())
    }

    #[test]
    fn only_colliding_names_are_prefixed() {
        let got = names(
            &[("a", &["echo", "add"]), ("b", &["echo", "time"])],
            &["time"],
        );
        assert_eq!(got, vec![vec!["a_echo", "add"], vec!["b_echo", "b_time"]]);
        // Same input, same names.
        assert_eq!(
            got,
            names(
                &[("a", &["echo", "add"]), ("b", &["echo", "time"])],
                &["time"]
            )
        );
    }

    #[test]
    fn unsafe_characters_and_residual_clashes() {
        assert_eq!(sanitize("files.read/all"), "files_read_all");
        assert_eq!(sanitize(""), "tool");
        assert_eq!(sanitize(&"x".repeat(100)).len(), 64);
        let got = names(&[("s", &["a.b", "a_b"])], &[]);
        assert_eq!(got, vec![vec!["s_a_b", "s_a_b_2"]]);
    }
}
