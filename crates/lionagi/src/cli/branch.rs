//! The `branch` subcommands: inspect, round-trip and move conversations
//! between files and a conversation store.
//!
//! Every failure is one line on stderr naming the file and the JSON path
//! at fault, with exit status 2; nothing panics on bad input.

use std::io::Write;

use branch_core::{Branch, BranchError, Message, MessageContent, SerializationMode, ToDictOptions};

use super::CliError;
use serde_json::Value;

pub(crate) fn store_command(db: &str, words: &[&str], out: &mut dyn Write) -> Result<(), CliError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| CliError::Io {
            path: db.to_owned(),
            source,
        })?;
    runtime.block_on(async {
        use branch_session::store::{BranchStore, SqliteStore};
        let store_err = |source| CliError::Store {
            path: db.to_owned(),
            source: Box::new(source),
        };
        let store = SqliteStore::open(db).await.map_err(store_err)?;
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
                        b.name.as_deref().unwrap_or("-"),
                        b.message_count,
                        timestamp(b.updated_at)
                    ));
                }
                write(out, &text)
            }
            ["branch", "show", key] => {
                let id = resolve(&store, db, key).await?;
                let branch = store.load(id).await.map_err(store_err)?;
                write(out, &listing(&branch))
            }
            ["branch", "import", file] => {
                let branch = load_branch(file)?;
                store.save(&branch).await.map_err(store_err)?;
                write(out, &format!("{}\n", branch.id()))
            }
            ["branch", "export", key, rest @ ..] => {
                let id = resolve(&store, db, key).await?;
                match rest {
                    [] | ["-"] => {
                        let branch = store.load(id).await.map_err(store_err)?;
                        let value =
                            branch
                                .to_dict(&ToDictOptions::default())
                                .map_err(|source| CliError::Branch {
                                    path: db.to_owned(),
                                    source,
                                })?;
                        let text = serde_json::to_string_pretty(&value).unwrap_or_default();
                        write(out, &format!("{text}\n"))
                    }
                    [file] => branch_session::export_file(&store, id, file)
                        .await
                        .map_err(store_err),
                    _ => Err(CliError::Usage("export takes one output file".into())),
                }
            }
            ["branch", "delete", key] => {
                let id = resolve(&store, db, key).await?;
                store.delete(id).await.map_err(store_err)?;
                write(out, &format!("deleted {id}\n"))
            }
            _ => Err(CliError::Usage(
                "unknown or incomplete store command".into(),
            )),
        }
    })
}

/// A stored branch by full id or by its (unique) name.
pub(crate) async fn resolve(
    store: &branch_session::store::SqliteStore,
    db: &str,
    key: &str,
) -> Result<uuid::Uuid, CliError> {
    use branch_session::store::BranchStore;
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
    let name = branch.name().unwrap_or("(unnamed)");
    let model = branch.chat_model().config();
    s.push_str(&format!(
        "branch {} {name}  user: {}  model: {}/{}  messages: {}  logs: {}\n",
        branch.id(),
        branch
            .user()
            .map_or_else(|| "-".to_owned(), ToString::to_string),
        model.provider(),
        model.model_name().unwrap_or("?"),
        branch.messages().len(),
        branch.logs().len(),
    ));
    for m in branch
        .progression()
        .iter()
        .filter_map(|id| branch.messages().get(id))
    {
        let who = |p: &Option<branch_core::Participant>| {
            p.as_ref()
                .map_or_else(|| "-".to_owned(), |p| short(&p.to_string()))
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
    let mut out: String = line.chars().take(100).collect();
    if line.chars().count() > 100 || full.trim().lines().count() > 1 {
        out.push_str(" …");
    }
    out
}
