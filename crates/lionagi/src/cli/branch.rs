//! The `branch` subcommands: inspect, round-trip and move conversations
//! between files and a conversation store.
//!
//! Every failure is one line on stderr naming the file and the JSON path
//! at fault, with exit status 2; nothing panics on bad input.

use std::io::Write;

use branch_core::{Branch, BranchError, Message, MessageContent, SerializationMode, ToDictOptions};

use super::CliError;
use super::shown::one_line;
use serde_json::Value;

pub(crate) fn store_command(
    spec: &str,
    words: &[&str],
    out: &mut dyn Write,
) -> Result<(), CliError> {
    use super::store::{self, Access};
    let label = store::label(spec);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| CliError::Io {
            path: label.clone(),
            source,
        })?;
    let done = runtime.block_on(async {
        let store_err = |source| CliError::Store {
            path: label.clone(),
            source: Box::new(source),
        };
        let access = match words {
            ["branch", "list"] | ["branch", "show", _] | ["branch", "export", ..] => Access::Read,
            _ => Access::Write,
        };
        let opened = store::open(spec, access).await.map_err(store_err)?;
        let store = opened.db.as_ref();
        let write = |out: &mut dyn Write, text: &str| {
            out.write_all(text.as_bytes())
                .map_err(|source| CliError::Io {
                    path: "<stdout>".into(),
                    source,
                })
        };
        match words {
            ["branch", "list"] => {
                let mut text = String::new();
                for b in store.list().await.map_err(store_err)? {
                    text.push_str(&format!(
                        "{}  {:<20} {:>6} messages  {}\n",
                        b.id,
                        one_line(b.name.as_deref().unwrap_or("-")),
                        b.message_count,
                        timestamp(b.updated_at)
                    ));
                }
                write(out, &text)
            }
            ["branch", "pending"] => {
                let mut text = String::new();
                for b in store.list().await.map_err(store_err)? {
                    let branch = store.load(b.id).await.map_err(store_err)?;
                    let name = one_line(b.name.as_deref().unwrap_or("-"));
                    match branch_operations::pending_approval(&branch) {
                        Ok(Some(p)) => {
                            let waiting: Vec<&str> =
                                p.waiting().map(|c| c.function.as_str()).collect();
                            text.push_str(&format!(
                                "{}  {:<20} {} call(s) awaiting approval since {}: {}\n",
                                b.id,
                                name,
                                waiting.len(),
                                timestamp(p.created_at),
                                one_line(&waiting.join(", "))
                            ));
                        }
                        Ok(None) => {}
                        Err(e) => text.push_str(&format!(
                            "{}  {name:<20} {}\n",
                            b.id,
                            one_line(&e.to_string())
                        )),
                    }
                }
                if text.is_empty() {
                    text.push_str("no conversation is awaiting approval\n");
                }
                write(out, &text)
            }
            ["branch", "show", key] => {
                let id = resolve(store, &label, key).await?;
                let branch = store.load(id).await.map_err(store_err)?;
                write(out, &listing(&branch))
            }
            ["branch", "import", file, flags @ ..] => {
                let replace = match flags {
                    [] => false,
                    ["--replace"] => true,
                    _ => {
                        return Err(CliError::Usage(
                            "import takes one file and --replace".into(),
                        ));
                    }
                };
                let branch = load_branch(file)?;
                import(store, &label, file, &branch, replace).await?;
                write(out, &format!("{}\n", branch.id()))
            }
            ["branch", "export", key, rest @ ..] => {
                let id = resolve(store, &label, key).await?;
                match rest {
                    [] | ["-"] => {
                        let branch = store.load(id).await.map_err(store_err)?;
                        let value =
                            branch
                                .to_dict(&ToDictOptions::default())
                                .map_err(|source| CliError::Branch {
                                    path: label.clone(),
                                    source,
                                })?;
                        let text = serde_json::to_string_pretty(&value).unwrap_or_default();
                        write(out, &format!("{text}\n"))
                    }
                    [file] => branch_session::export_file(store, id, file)
                        .await
                        .map_err(store_err),
                    _ => Err(CliError::Usage("export takes one output file".into())),
                }
            }
            ["branch", "delete", key] => {
                let id = resolve(store, &label, key).await?;
                store.delete(id).await.map_err(store_err)?;
                write(out, &format!("deleted {id}\n"))
            }
            _ => Err(CliError::Usage(
                "unknown or incomplete store command".into(),
            )),
        }
    });
    super::runtime_exit::shut_down(runtime);
    done
}

/// When a conversation last changed: its newest message's time, then its
/// length.
fn last_change(b: &Branch) -> (f64, usize) {
    let newest = b
        .messages()
        .iter()
        .map(|m| m.element.created_at)
        .fold(f64::NEG_INFINITY, f64::max);
    (newest, b.messages().len())
}

fn describe(b: &Branch) -> String {
    let (t, n) = last_change(b);
    if n == 0 {
        "0 messages".into()
    } else {
        format!("{n} messages, the last from {}", timestamp(t))
    }
}

/// Saves an imported branch, refusing (unless `replace`) to overwrite the
/// stored conversation with its id or to add a second one with its name.
async fn import(
    store: &dyn branch_session::store::BranchStore,
    label: &str,
    file: &str,
    branch: &Branch,
    replace: bool,
) -> Result<(), CliError> {
    let store_err = |source| CliError::Store {
        path: label.to_owned(),
        source: Box::new(source),
    };
    let refused = |reason: String| CliError::Refused {
        path: label.to_owned(),
        reason,
    };
    let all = store.list().await.map_err(store_err)?;
    if !replace && all.iter().any(|s| s.id == branch.id()) {
        let stored = store.load(branch.id()).await.map_err(store_err)?;
        let (a, b) = (last_change(&stored), last_change(branch));
        let which = if a > b {
            "the stored one is newer"
        } else if b > a {
            "the file is newer"
        } else {
            "they are equally recent"
        };
        return Err(refused(format!(
            "conversation {} is already stored ({}); {file} has {}: {which}. \
             Pass --replace to overwrite the stored one",
            branch.id(),
            describe(&stored),
            describe(branch)
        )));
    }
    let namesakes: Vec<uuid::Uuid> = match branch.name() {
        Some(name) => all
            .iter()
            .filter(|s| s.id != branch.id() && s.name.as_deref() == Some(name))
            .map(|s| s.id)
            .collect(),
        None => Vec::new(),
    };
    if let Some(other) = namesakes.first() {
        if !replace {
            return Err(refused(format!(
                "another conversation named `{}` is stored ({other}); names pick one conversation. \
                 Pass --replace to replace it with {file}",
                branch.name().unwrap_or_default()
            )));
        }
    }
    store.save(branch).await.map_err(store_err)?;
    for other in namesakes {
        store.delete(other).await.map_err(store_err)?;
    }
    Ok(())
}

/// A stored branch by full id or by its (unique) name.
pub(crate) async fn resolve(
    store: &dyn branch_session::store::BranchStore,
    db: &str,
    key: &str,
) -> Result<uuid::Uuid, CliError> {
    let all = store.list().await.map_err(|source| CliError::Store {
        path: db.to_owned(),
        source: Box::new(source),
    })?;
    if let Some(id) = branch_core::element::parse_uuid(key) {
        if all.iter().any(|b| b.id == id) {
            return Ok(id);
        }
    }
    let named: Vec<_> = all
        .iter()
        .filter(|b| b.name.as_deref() == Some(key))
        .collect();
    match named.as_slice() {
        [one] => Ok(one.id),
        [] => Err(CliError::NotFound {
            path: db.to_owned(),
            reason: format!("no branch `{key}`"),
        }),
        _ => Err(CliError::NotFound {
            path: db.to_owned(),
            reason: format!("{} branches are named `{key}`; use an id", named.len()),
        }),
    }
}

/// The bytes of a conversation file (`-` is stdin), within the caps of
/// [`crate::limits`].
fn read_input(path: &str) -> Result<Vec<u8>, CliError> {
    let limits = crate::limits::InputLimits::from_env().map_err(CliError::Usage)?;
    super::bounded_read::read_all(path, limits.max_file_bytes, limits.read_timeout).map_err(|e| {
        match e {
            super::bounded_read::BoundedReadError::Io(source) => CliError::Io {
                path: path.to_owned(),
                source,
            },
            bound => CliError::Limit {
                path: path.to_owned(),
                reason: bound.to_string(),
            },
        }
    })
}

/// Reads and restores a branch, with the JSON path of any fault.
pub fn load_branch(path: &str) -> Result<Branch, CliError> {
    let bytes = read_input(path)?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| CliError::Syntax {
        path: path.to_owned(),
        line: e.line(),
        column: e.column(),
        reason: syntax_reason(&e),
    })?;
    Branch::from_dict(&value).map_err(|source| CliError::Branch {
        path: path.to_owned(),
        source,
    })
}

fn syntax_reason(e: &serde_json::Error) -> String {
    // serde_json appends " at line L column C"; the position is printed apart.
    let s = e.to_string();
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_owned(),
        None => s,
    }
}

pub(crate) fn roundtrip(path: &str, rest: &[&str], out: &mut dyn Write) -> Result<(), CliError> {
    let mut opts = ToDictOptions::default();
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| CliError::Usage(format!("`{flag}` needs a value")))?;
        match *flag {
            "--mode" => {
                opts.mode = value
                    .parse::<SerializationMode>()
                    .map_err(|e| CliError::Usage(e.to_string()))?
            }
            "--db-meta-key" => opts.db_meta_key = Some((*value).to_owned()),
            other => return Err(CliError::Usage(format!("unknown option `{other}`"))),
        }
    }
    let branch = load_branch(path)?;
    let value = branch.to_dict(&opts).map_err(|source| CliError::Branch {
        path: path.to_owned(),
        source,
    })?;
    let text = serde_json::to_string_pretty(&value).map_err(|e| CliError::Branch {
        path: path.to_owned(),
        source: BranchError::Serialize {
            path: ".".into(),
            reason: e.to_string(),
        },
    })?;
    writeln!(out, "{text}").map_err(|source| CliError::Io {
        path: "<stdout>".into(),
        source,
    })
}

pub(crate) fn show(path: &str, out: &mut dyn Write) -> Result<(), CliError> {
    let branch = load_branch(path)?;
    let text = listing(&branch);
    out.write_all(text.as_bytes())
        .map_err(|source| CliError::Io {
            path: "<stdout>".into(),
            source,
        })
}

/// A readable listing: a header, then one line per message in order with
/// role, sender → recipient, time and the first line of its content.
pub fn listing(branch: &Branch) -> String {
    let mut s = String::new();
    // Everything here is the file's or the store's: shown one line each.
    let name = one_line(branch.name().unwrap_or("(unnamed)"));
    let model = branch.chat_model().config();
    s.push_str(&format!(
        "branch {} {name}  user: {}  model: {}/{}  messages: {}  logs: {}  tokens: {}\n",
        branch.id(),
        branch
            .user()
            .map_or_else(|| "-".to_owned(), |u| one_line(&u.to_string()).into_owned()),
        one_line(model.provider()),
        one_line(model.model_name().unwrap_or("?")),
        branch.messages().len(),
        branch.logs().len(),
        usage_text(&branch.usage()),
    ));
    for m in branch
        .progression()
        .iter()
        .filter_map(|id| branch.messages().get(id))
    {
        let who = |p: &Option<branch_core::Participant>| {
            p.as_ref()
                .map_or_else(|| "-".to_owned(), |p| short(&one_line(&p.to_string())))
        };
        s.push_str(&format!(
            "{:<9} {:>10} -> {:<10} {}  {}\n",
            m.role().as_str(),
            who(&m.sender),
            who(&m.recipient),
            timestamp(m.element.created_at),
            first_line(m),
        ));
    }
    s
}

/// Token usage as `branch show` prints it: input (cached reads excluded)
/// and output, then what was served from or written to a prompt cache,
/// the output spent on reasoning and the cost, when any.
fn usage_text(u: &branch_core::RunUsage) -> String {
    let mut t = format!("{} in / {} out", u.input_tokens, u.output_tokens);
    if u.cached_tokens > 0 {
        t.push_str(&format!(" / {} cached", u.cached_tokens));
    }
    if u.cache_write_tokens > 0 {
        t.push_str(&format!(" / {} cache-written", u.cache_write_tokens));
    }
    if u.reasoning_tokens > 0 {
        t.push_str(&format!(" / {} reasoning", u.reasoning_tokens));
    }
    if let Some(c) = u.total_cost_usd {
        t.push_str(&format!(" / ${c:.4}"));
    }
    if !u.usage_valid {
        t.push_str(" (some usage unreadable)");
    }
    t
}

/// Ids are long; show their first 8 characters.
fn short(s: &str) -> String {
    if branch_core::element::parse_uuid(s).is_some() {
        s[..8].to_owned()
    } else {
        s.to_owned()
    }
}

pub(crate) fn timestamp(t: f64) -> String {
    match time::OffsetDateTime::from_unix_timestamp(t.floor() as i64) {
        Ok(dt) => format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
            dt.year(),
            u8::from(dt.month()),
            dt.day(),
            dt.hour(),
            dt.minute(),
            dt.second()
        ),
        Err(_) => format!("{t}"),
    }
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn first_line(m: &Message) -> String {
    let full = match &m.content {
        MessageContent::System(c) => c.rendered(),
        MessageContent::Instruction(c) => c
            .plain_content
            .clone()
            .or_else(|| c.instruction.as_ref().map(text_of))
            .unwrap_or_default(),
        MessageContent::AssistantResponse(c) => c.assistant_response.clone(),
        MessageContent::ActionRequest(c) => {
            format!("{}({})", c.function, Value::Object(c.arguments.clone()))
        }
        MessageContent::ActionResponse(c) => format!(
            "{} => {}",
            c.function,
            c.output
                .as_ref()
                .map_or_else(|| c.error.clone().unwrap_or_default(), text_of)
        ),
    };
    let line = full
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let line = one_line(line);
    let mut out: String = line.chars().take(100).collect();
    if line.chars().count() > 100 || full.trim().lines().count() > 1 {
        out.push_str(" …");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_listing_shows_no_control_character_of_the_file() {
        let doc = json!({
            "id": uuid::Uuid::new_v4().to_string(), "created_at": 1.0,
            "name": "ops\u{1b}]0;pwned\u{7}", "user": "me\u{9b}2J",
        });
        let mut b = Branch::from_dict(&doc).unwrap();
        b.msgs_mut().add_message(Message::assistant(
            "\u{1b}[2J\rFake prompt $ \u{1b}]8;;http://x\u{7}link",
        ));
        let shown = listing(&b);
        assert!(
            !shown.chars().any(|c| c.is_control() && c != '\n'),
            "{shown:?}"
        );
        assert!(shown.contains("ops]0;pwned  user: me2J"), "{shown}");
        assert!(
            shown.contains("[2J Fake prompt $ ]8;;http://xlink"),
            "{shown}"
        );
    }

    #[test]
    fn show_sums_the_token_usage_of_the_replies() {
        let mut b = Branch::new().unwrap();
        for usage in [
            json!({"prompt_tokens": 11, "completion_tokens": 7,
                "prompt_tokens_details": {"cached_tokens": 4}}),
            json!({"input_tokens": 5, "output_tokens": 2}),
        ] {
            let mut m = Message::assistant("ok");
            m.element.metadata.insert(
                "model_response".into(),
                json!({"usage": usage, "total_cost_usd": 0.25}),
            );
            b.msgs_mut().add_message(m);
        }
        let head = listing(&b);
        let head = head.lines().next().unwrap();
        assert!(
            head.ends_with("tokens: 12 in / 9 out / 4 cached / $0.5000"),
            "{head}"
        );
    }
}
