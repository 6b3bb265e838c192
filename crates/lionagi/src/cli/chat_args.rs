//! The command line of `lionagi chat`.

use super::chat_error::ChatError;

/// The help text of `lionagi chat`.
pub(crate) const CHAT_USAGE: &str = "usage:
  lionagi chat \"QUESTION\" [OPTIONS]   one turn: the answer streams to stdout
  lionagi chat [OPTIONS]              a conversation (one turn per line when stdin is not a terminal)

options:
  --provider NAME      provider (openai, anthropic, ollama, openrouter, groq, local ...;
                       claude_code runs Claude Code: `claude`, or LIONAGI_CLAUDE_BIN)
  --model NAME         model name (or PROVIDER/NAME)
  --base-url URL       an OpenAI-compatible server (llama.cpp, vLLM ...); the provider's key
                       variable is sent when set, no key otherwise
  --endpoint NAME      the provider's endpoint when it has several: responses (OpenAI's
                       Responses API, with reasoning summaries) instead of chat/completions
  --system TEXT        system prompt of a new conversation
  --store PATH|URL     keep the conversation in this SQLite store (created when missing)
                       or PostgreSQL database (postgres://USER@HOST:PORT/DB; the password
                       from the URL, PGPASSWORD or ~/.pgpass, never printed)
  --resume ID|NAME     continue a stored conversation (needs --store)
  --name NAME          name a new stored conversation (needs --store)
  --json               one JSON object per turn on stdout, errors as JSON on stderr
  --approve            ask before each tool call: y (run it), n (do not), always (this tool,
                       from now on); with --store the question waits in the store, so a
                       conversation killed at the prompt is resumed with --resume NAME --approve
  --allow-local-network  let the model reach a server on this machine or its network: a
                       --base-url on the LAN, or a resumed conversation's own server (never
                       granted by the stored data itself; a typed loopback --base-url needs
                       no flag)
  --max-tokens N       longest reply, in tokens
  --temperature T      sampling temperature
  --timeout SECS       longest a model call may take, retries and the whole streamed
                       reply included (default 600; HTTP providers)
  --mcp FILE           tools from the MCP servers in FILE ({\"mcpServers\": ...}); repeatable.
                       Their commands run as configured (no shell, only their `env`)
  --mcp-path           look up bare MCP command names (npx, uvx) on the PATH
  --mcp-local          let HTTP MCP servers be on this machine or the local network
  -h, --help           this text

The model: the flags, else (with --resume) the stored conversation's own model (with
--endpoint alone: the same model on that endpoint), else
LIONAGI_CHAT_PROVIDER / LIONAGI_CHAT_MODEL / LIONAGI_CHAT_ENDPOINT, else the embedded
model (lionagi built with --features embedded, model fetched by `cargo xtask fetch-model`),
else openai when OPENAI_API_KEY is set.

In a conversation: /help, /clear (start a new conversation), /id (the conversation's id), /tools,
/exit or Ctrl-D. Ctrl-C cancels the turn being answered (nothing of it is kept).";

/// What `lionagi chat` was asked to do.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ChatArgs {
    /// The one-shot question (the positional words, joined by spaces).
    pub question: Option<String>,
    /// `--provider`.
    pub provider: Option<String>,
    /// `--model`.
    pub model: Option<String>,
    /// `--base-url`.
    pub base_url: Option<String>,
    /// `--endpoint`.
    pub endpoint: Option<String>,
    /// `--system`.
    pub system: Option<String>,
    /// `--store`.
    pub store: Option<String>,
    /// `--resume`.
    pub resume: Option<String>,
    /// `--name`.
    pub name: Option<String>,
    /// `--json`.
    pub json: bool,
    /// `--approve`.
    pub approve: bool,
    /// `--allow-local-network`.
    pub allow_local_network: bool,
    /// `--max-tokens`.
    pub max_tokens: Option<u64>,
    /// `--temperature`.
    pub temperature: Option<f64>,
    /// `--timeout`: the overall deadline of each model call.
    pub timeout: Option<std::time::Duration>,
    /// `--mcp`, `--mcp-path`, `--mcp-local`.
    pub mcp: super::mcp_tools::McpArgs,
    /// `-h` / `--help`.
    pub help: bool,
}

impl ChatArgs {
    /// Parses the words after `chat`. `--flag value` and `--flag=value`
    /// are both accepted; `--` ends the options.
    pub(crate) fn parse(args: &[String]) -> Result<Self, ChatError> {
        let mut a = Self::default();
        let mut words: Vec<String> = Vec::new();
        let mut it = args.iter();
        let mut options_done = false;
        while let Some(arg) = it.next() {
            if options_done || !arg.starts_with('-') || arg == "-" {
                words.push(arg.clone());
                continue;
            }
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
                _ => (arg.as_str(), None),
            };
            let mut value = |name: &str| -> Result<String, ChatError> {
                match inline.clone() {
                    Some(v) => Ok(v),
                    None => it
                        .next()
                        .cloned()
                        .ok_or_else(|| ChatError::Usage(format!("`{name}` needs a value"))),
                }
            };
            match flag {
                "--" => options_done = true,
                "-h" | "--help" => a.help = true,
                "--json" => a.json = true,
                "--approve" => a.approve = true,
                "--allow-local-network" => a.allow_local_network = true,
                "--provider" => a.provider = Some(value(flag)?),
                "--model" => a.model = Some(value(flag)?),
                "--base-url" => a.base_url = Some(value(flag)?),
                "--endpoint" => a.endpoint = Some(value(flag)?),
                "--system" => a.system = Some(value(flag)?),
                "--store" => a.store = Some(value(flag)?),
                "--resume" => a.resume = Some(value(flag)?),
                "--name" => a.name = Some(value(flag)?),
                "--mcp" => a.mcp.files.push(value(flag)?),
                "--mcp-path" => a.mcp.search_path = true,
                "--mcp-local" => a.mcp.local = true,
                "--max-tokens" => {
                    let v = value(flag)?;
                    a.max_tokens = Some(v.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                        ChatError::Usage(format!(
                            "`--max-tokens` needs a positive integer, not `{v}`"
                        ))
                    })?);
                }
                "--temperature" => {
                    let v = value(flag)?;
                    a.temperature = Some(
                        v.parse::<f64>()
                            .ok()
                            .filter(|t| t.is_finite() && *t >= 0.0)
                            .ok_or_else(|| {
                                ChatError::Usage(format!(
                                    "`--temperature` needs a number of 0 or more, not `{v}`"
                                ))
                            })?,
                    );
                }
                "--timeout" => {
                    let v = value(flag)?;
                    a.timeout = Some(parse_timeout(&v).ok_or_else(|| {
                        ChatError::Usage(format!(
                            "`--timeout` needs a number of seconds above 0 and at most {}, not `{v}`",
                            MAX_TIMEOUT.as_secs()
                        ))
                    })?);
                }
                other => return Err(ChatError::Usage(format!("unknown option `{other}`"))),
            }
        }
        if !words.is_empty() {
            let q = words.join(" ");
            if q.trim().is_empty() {
                return Err(ChatError::Usage("the question is empty".into()));
            }
            a.question = Some(q);
        }
        if a.store.is_none() {
            for (set, flag) in [
                (a.resume.is_some(), "--resume"),
                (a.name.is_some(), "--name"),
            ] {
                if set {
                    return Err(ChatError::Usage(format!("`{flag}` needs `--store PATH`")));
                }
            }
        }
        if a.resume.is_some() && a.name.is_some() {
            return Err(ChatError::Usage(
                "`--name` names a new conversation; a resumed one keeps its name".into(),
            ));
        }
        if a.resume.is_some() && a.system.is_some() {
            return Err(ChatError::Usage(
                "`--system` sets the prompt of a new conversation; a resumed one keeps its own"
                    .into(),
            ));
        }
        Ok(a)
    }

    /// Whether the flags choose a model (else a resumed conversation keeps
    /// its own).
    pub(crate) fn chooses_model(&self) -> bool {
        self.provider.is_some()
            || self.model.is_some()
            || self.base_url.is_some()
            || self.endpoint.is_some()
    }

    /// The model flags as given, to repeat in the resume hint.
    pub(crate) fn model_flags(&self) -> String {
        let mut s = String::new();
        for (flag, v) in [
            ("--provider", &self.provider),
            ("--model", &self.model),
            ("--base-url", &self.base_url),
            ("--endpoint", &self.endpoint),
        ] {
            if let Some(v) = v {
                s.push_str(&format!(" {flag} {}", shell_word(v)));
            }
        }
        // Without it the hint's command would be refused where this one
        // was let through.
        if self.allow_local_network {
            s.push_str(" --allow-local-network");
        }
        s
    }
}

/// The longest `--timeout`: the model layer's bound on any wait.
const MAX_TIMEOUT: std::time::Duration = branch_models::limits::MAX_CONFIG_WAIT;

/// Seconds (fractions allowed) as a deadline: positive, finite, at most
/// [`MAX_TIMEOUT`]; `None` otherwise (never a panic on `1e300` or `NaN`).
fn parse_timeout(v: &str) -> Option<std::time::Duration> {
    let secs = v.trim().parse::<f64>().ok()?;
    if !(secs.is_finite() && secs > 0.0) {
        return None;
    }
    std::time::Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| *d <= MAX_TIMEOUT && !d.is_zero())
}

/// `s` quoted for a POSIX shell when it needs quoting.
pub(crate) fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(words: &[&str]) -> Result<ChatArgs, ChatError> {
        ChatArgs::parse(&words.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn flags_in_both_spellings_and_the_question() {
        let a = parse(&[
            "--model=gpt-x",
            "What",
            "--temperature",
            "0.5",
            "is it?",
            "--json",
        ])
        .unwrap();
        assert_eq!(a.model.as_deref(), Some("gpt-x"));
        let t = parse(&["--timeout", "2.5"]).unwrap();
        assert_eq!(t.timeout, Some(std::time::Duration::from_millis(2500)));
        assert_eq!(a.temperature, Some(0.5));
        assert_eq!(a.question.as_deref(), Some("What is it?"));
        assert!(a.json);
        let a = parse(&["--mcp", "a.json", "--mcp=b.json", "--mcp-path", "q"]).unwrap();
        assert_eq!(a.mcp.files, ["a.json", "b.json"]);
        assert!(a.mcp.search_path && !a.mcp.local);
        let a = parse(&["--", "--not-a-flag"]).unwrap();
        assert_eq!(a.question.as_deref(), Some("--not-a-flag"));
    }

    #[test]
    fn bad_command_lines_say_what_is_wrong() {
        let msg = |w: &[&str]| parse(w).unwrap_err().to_string();
        assert!(msg(&["--model"]).contains("`--model` needs a value"));
        assert!(msg(&["--resume", "x"]).contains("`--resume` needs `--store PATH`"));
        assert!(msg(&["--max-tokens", "0"]).contains("positive integer"));
        assert!(msg(&["--temperature", "hot"]).contains("`--temperature`"));
        assert!(msg(&["--frobnicate"]).contains("unknown option `--frobnicate`"));
        for bad in ["0", "-1", "NaN", "inf", "1e300", "soon", "1e-12"] {
            assert!(
                msg(&["--timeout", bad]).contains("`--timeout` needs a number of seconds"),
                "{bad}"
            );
        }
        assert!(msg(&["--store", "s.db", "--resume", "a", "--name", "b"]).contains("--name"));
    }

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(
            shell_word("http://127.0.0.1:8080/v1"),
            "http://127.0.0.1:8080/v1"
        );
        assert_eq!(shell_word("my chat"), "'my chat'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
    }
}
