//! The registered providers and their endpoints (providers.md §1).

use super::config::AuthType;

/// What kind of backend a provider is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProviderKind {
    /// An HTTP API.
    Api,
    /// A local CLI subprocess (agentic, streaming).
    Cli,
    /// An agent framework (not usable as a chat model of a Branch).
    Agentic,
}

/// The wire protocol an endpoint speaks; it picks the request and reply
/// translation (`branch-models`' dialects), not the provider's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WireProtocol {
    /// OpenAI chat completions, and every server compatible with it.
    OpenAiChat,
    /// Anthropic Messages.
    AnthropicMessages,
    /// OpenAI Responses.
    OpenAiResponses,
    /// Anything else (embeddings, search, audio, CLI agents): not a chat
    /// protocol; requests go out as the reference builds them.
    Other,
}

/// The reference's request model of an endpoint: the payload keys it
/// sends and the ranges it checks before sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestModel {
    /// None: every payload key but the internal ones is sent.
    None,
    /// OpenAI's chat-completions request.
    OpenAiChat,
    /// Anthropic's Messages request.
    AnthropicMessages,
}

/// One registered endpoint of a provider.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct EndpointSpec {
    /// Path appended to the base URL, e.g. `chat/completions`.
    pub path: &'static str,
    /// Other names that select this endpoint (e.g. `chat`).
    pub aliases: &'static [&'static str],
    /// Registered base URL (`None` for CLI endpoints).
    pub base_url: Option<&'static str>,
    /// How the key is sent.
    pub auth_type: AuthType,
    /// Whether request tokens are estimated for rate limiting.
    pub requires_tokens: bool,
    /// The request model the endpoint filters and checks payloads
    /// against (and writes as `request_options`), as the reference's.
    pub request_model: RequestModel,
    /// Headers sent with every request.
    pub default_headers: &'static [(&'static str, &'static str)],
    /// Whether loopback targets are allowed by default (local servers).
    pub allow_local_network: bool,
    /// The wire protocol spoken.
    pub protocol: WireProtocol,
    /// For a provider whose URL names the user's own resource (no fixed
    /// `base_url`): the shapes of its URLs, `{name}` standing for one DNS
    /// label or path segment. A base URL of one of these shapes is
    /// registered (the provider's environment key may be sent to it).
    pub base_url_templates: &'static [&'static str],
}

impl EndpointSpec {
    fn matches(&self, name: &str) -> bool {
        self.path.eq_ignore_ascii_case(name)
            || self.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
    }
}

/// A registered provider.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ProviderSpec {
    /// Canonical (lower-case) name.
    pub name: &'static str,
    /// Other accepted names.
    pub aliases: &'static [&'static str],
    /// API, CLI or agentic.
    pub kind: ProviderKind,
    /// Environment variable holding the API key, if the provider takes one.
    pub key_env: Option<&'static str>,
    /// Endpoints, in registry order.
    pub endpoints: &'static [EndpointSpec],
}

impl ProviderSpec {
    /// The endpoint whose path or alias is `name` (case aside), with no
    /// fallback: a name the provider does not have selects none.
    pub fn endpoint_named(&self, name: &str) -> Option<&'static EndpointSpec> {
        self.endpoints.iter().find(|e| e.matches(name))
    }

    /// The endpoint selected by `endpoint` (providers.md §2 step 4): the first
    /// whose path or alias equals it (any, if empty); else, if the provider
    /// has exactly one endpoint, that one.
    pub fn endpoint(&self, endpoint: &str) -> Option<&'static EndpointSpec> {
        if endpoint.is_empty() {
            return self.endpoints.first();
        }
        self.endpoint_named(endpoint)
            .or(if self.endpoints.len() == 1 {
                self.endpoints.first()
            } else {
                None
            })
    }

    /// Default timeout of this provider's endpoints, in seconds.
    pub fn default_timeout_secs(&self) -> u64 {
        match self.kind {
            ProviderKind::Api => 600,
            ProviderKind::Cli | ProviderKind::Agentic => 3600,
        }
    }
}

const fn api(
    path: &'static str,
    aliases: &'static [&'static str],
    base_url: &'static str,
    auth_type: AuthType,
) -> EndpointSpec {
    EndpointSpec {
        path,
        aliases,
        base_url: Some(base_url),
        auth_type,
        requires_tokens: false,
        request_model: RequestModel::None,
        default_headers: &[],
        allow_local_network: false,
        protocol: WireProtocol::Other,
        base_url_templates: &[],
    }
}

/// An OpenAI-family chat-completions endpoint.
const fn openai_chat(base_url: &'static str, auth_type: AuthType) -> EndpointSpec {
    EndpointSpec {
        requires_tokens: true,
        request_model: RequestModel::OpenAiChat,
        protocol: WireProtocol::OpenAiChat,
        ..api("chat/completions", &["chat"], base_url, auth_type)
    }
}

const fn tokens(spec: EndpointSpec) -> EndpointSpec {
    EndpointSpec {
        requires_tokens: true,
        ..spec
    }
}

const fn local(spec: EndpointSpec) -> EndpointSpec {
    EndpointSpec {
        allow_local_network: true,
        ..spec
    }
}

const fn cli(path: &'static str, aliases: &'static [&'static str]) -> EndpointSpec {
    EndpointSpec {
        path,
        aliases,
        base_url: Some("internal"),
        auth_type: AuthType::Bearer,
        requires_tokens: false,
        request_model: RequestModel::None,
        default_headers: &[],
        allow_local_network: false,
        protocol: WireProtocol::Other,
        base_url_templates: &[],
    }
}

/// Does `url` (normalised, its query ignored) have the shape of
/// `template` (normalised), where each `{name}` in the template stands for
/// one non-empty run of ASCII letters, digits, `-` and `_` (a DNS label or
/// a path segment; never a dot or a slash, so a template's host suffix
/// cannot be spoofed by `evil.example/x.openai.azure.com`)?
pub fn url_matches_template(template: &str, url: &str) -> bool {
    let url = url.split(['?', '#']).next().unwrap_or(url);
    let mut rest = url;
    let mut parts = template.split('{');
    let Some(first) = parts.next() else {
        return false;
    };
    let Some(after) = rest.strip_prefix(first) else {
        return false;
    };
    rest = after;
    for part in parts {
        let Some((_, literal)) = part.split_once('}') else {
            return false;
        };
        let label_len = rest
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
            .count();
        if label_len == 0 {
            return false;
        }
        let Some(after) = rest[label_len..].strip_prefix(literal) else {
            return false;
        };
        rest = after;
    }
    rest.is_empty()
}

const OPENAI: &str = "https://api.openai.com/v1";
const OLLAMA_V1: &str = "http://localhost:11434/v1";
const OLLAMA_API: &str = "http://localhost:11434/api";
const B: AuthType = AuthType::Bearer;
const X: AuthType = AuthType::XApiKey;
const N: AuthType = AuthType::None;

/// Every registered provider, in the order of providers.md §1.
pub static PROVIDERS: &[ProviderSpec] = &[
    ProviderSpec {
        name: "openai",
        aliases: &[],
        kind: ProviderKind::Api,
        key_env: Some("OPENAI_API_KEY"),
        endpoints: &[
            openai_chat(OPENAI, B),
            EndpointSpec {
                protocol: WireProtocol::OpenAiResponses,
                ..tokens(api("responses", &["response"], OPENAI, B))
            },
            tokens(api("embeddings", &["embed"], OPENAI, B)),
            api("audio/speech", &["tts"], OPENAI, B),
            api("audio/transcriptions", &["stt", "whisper"], OPENAI, B),
            api("images/generations", &["dalle", "image"], OPENAI, B),
            api("images/edits", &["image_edit"], OPENAI, B),
            api("batches", &["batch"], OPENAI, B),
        ],
    },
    ProviderSpec {
        name: "anthropic",
        aliases: &[],
        kind: ProviderKind::Api,
        key_env: Some("ANTHROPIC_API_KEY"),
        endpoints: &[EndpointSpec {
            default_headers: &[("anthropic-version", "2023-06-01")],
            protocol: WireProtocol::AnthropicMessages,
            request_model: RequestModel::AnthropicMessages,
            ..api("messages", &["chat"], "https://api.anthropic.com/v1", X)
        }],
    },
    ProviderSpec {
        name: "ollama",
        aliases: &[],
        kind: ProviderKind::Api,
        key_env: None,
        endpoints: &[
            local(openai_chat(OLLAMA_V1, N)),
            local(api("embeddings", &["embed"], OLLAMA_API, N)),
            local(api("generate", &["generate", "completion"], OLLAMA_API, N)),
        ],
    },
    ProviderSpec {
        name: "lattice",
        aliases: &[],
        kind: ProviderKind::Api,
        key_env: None,
        endpoints: &[
            local(openai_chat("http://127.0.0.1:8080/v1", N)),
            local(api("embeddings", &["embed"], "http://127.0.0.1:8080/v1", N)),
        ],
    },
    ProviderSpec {
        name: "openrouter",
        aliases: &["open-router"],
        kind: ProviderKind::Api,
        key_env: Some("OPENROUTER_API_KEY"),
        endpoints: &[openai_chat("https://openrouter.ai/api/v1", B)],
    },
    ProviderSpec {
        name: "groq",
        aliases: &[],
        kind: ProviderKind::Api,
        key_env: Some("GROQ_API_KEY"),
        endpoints: &[
            openai_chat("https://api.groq.com/openai/v1", B),
            api(
                "audio/transcriptions",
                &[],
                "https://api.groq.com/openai/v1",
                B,
            ),
        ],
    },
    ProviderSpec {
        name: "deepseek",
        aliases: &[],
        kind: ProviderKind::Api,
        key_env: Some("DEEPSEEK_API_KEY"),
        endpoints: &[openai_chat("https://api.deepseek.com/v1", B)],
    },
    ProviderSpec {
        name: "mistral",
        aliases: &["mistralai"],
        kind: ProviderKind::Api,
        key_env: Some("MISTRAL_API_KEY"),
        endpoints: &[openai_chat("https://api.mistral.ai/v1", B)],
    },
    ProviderSpec {
        name: "xai",
        aliases: &["x-ai", "grok"],
        kind: ProviderKind::Api,
        key_env: Some("XAI_API_KEY"),
        endpoints: &[openai_chat("https://api.x.ai/v1", B)],
    },
    ProviderSpec {
        name: "cohere",
        aliases: &[],
        kind: ProviderKind::Api,
        key_env: Some("COHERE_API_KEY"),
        // The Compatibility API (docs.cohere.com/docs/compatibility-api).
        endpoints: &[openai_chat("https://api.cohere.ai/compatibility/v1", B)],
    },
    ProviderSpec {
        name: "azure",
        aliases: &["azure_openai", "azure-openai"],
        kind: ProviderKind::Api,
        key_env: Some("AZURE_OPENAI_API_KEY"),
        // The v1 API (learn.microsoft.com/azure/ai-foundry/openai/
        // api-version-lifecycle): `model` names the deployment, no
        // api-version; the older per-deployment URLs (with their
        // `?api-version=`) are accepted too. The resource is the user's.
        endpoints: &[EndpointSpec {
            base_url: None,
            base_url_templates: &[
                "https://{resource}.openai.azure.com/openai/v1",
                "https://{resource}.openai.azure.com/openai/deployments/{deployment}",
                "https://{resource}.cognitiveservices.azure.com/openai/v1",
                "https://{resource}.cognitiveservices.azure.com/openai/deployments/{deployment}",
            ],
            ..openai_chat("", AuthType::ApiKeyHeader)
        }],
    },
    ProviderSpec {
        name: "gemini",
        aliases: &["gemini-api"],
        kind: ProviderKind::Api,
        key_env: Some("GEMINI_API_KEY"),
        endpoints: &[openai_chat(
            "https://generativelanguage.googleapis.com/v1beta/openai",
            B,
        )],
    },
    ProviderSpec {
        name: "perplexity",
        aliases: &[],
        kind: ProviderKind::Api,
        key_env: Some("PERPLEXITY_API_KEY"),
        endpoints: &[openai_chat("https://api.perplexity.ai", B)],
    },
    ProviderSpec {
        name: "nvidia_nim",
        aliases: &["nvidia", "nim"],
        kind: ProviderKind::Api,
        key_env: Some("NVIDIA_NIM_API_KEY"),
        endpoints: &[
            openai_chat("https://integrate.api.nvidia.com/v1", B),
            tokens(api(
                "embeddings",
                &[],
                "https://integrate.api.nvidia.com/v1",
                B,
            )),
        ],
    },
    ProviderSpec {
        name: "tavily",
        aliases: &[],
        kind: ProviderKind::Api,
        key_env: Some("TAVILY_API_KEY"),
        endpoints: &[
            api("search", &[], "https://api.tavily.com", B),
            api("extract", &[], "https://api.tavily.com", B),
        ],
    },
    ProviderSpec {
        name: "exa",
        aliases: &[],
        kind: ProviderKind::Api,
        key_env: Some("EXA_API_KEY"),
        endpoints: &[
            api("search", &[], "https://api.exa.ai", X),
            api("contents", &[], "https://api.exa.ai", X),
            api("findSimilar", &[], "https://api.exa.ai", X),
        ],
    },
    ProviderSpec {
        name: "firecrawl",
        aliases: &[],
        kind: ProviderKind::Api,
        key_env: Some("FIRECRAWL_API_KEY"),
        endpoints: &[
            api("v1/scrape", &[], "https://api.firecrawl.dev", B),
            api("v1/map", &[], "https://api.firecrawl.dev", B),
            api("v1/crawl", &[], "https://api.firecrawl.dev", B),
        ],
    },
    ProviderSpec {
        name: "claude_code",
        aliases: &["claude-code", "claude"],
        kind: ProviderKind::Cli,
        key_env: None,
        endpoints: &[cli("query_cli", &["cli", "code"])],
    },
    ProviderSpec {
        name: "codex",
        aliases: &["openai-codex"],
        kind: ProviderKind::Cli,
        key_env: None,
        endpoints: &[cli("query_cli", &["cli", "code"])],
    },
    ProviderSpec {
        name: "gemini_code",
        aliases: &["gemini-code", "gemini_cli", "gemini-cli"],
        kind: ProviderKind::Cli,
        key_env: None,
        endpoints: &[cli("query_cli", &["cli"])],
    },
    ProviderSpec {
        name: "pi",
        aliases: &["pi-code", "pi_code"],
        kind: ProviderKind::Cli,
        key_env: None,
        endpoints: &[cli("query_cli", &[])],
    },
    ProviderSpec {
        name: "ag2",
        aliases: &["autogen"],
        kind: ProviderKind::Agentic,
        key_env: None,
        endpoints: &[cli("group_chat", &[]), cli("agent", &[]), cli("nlip", &[])],
    },
    // The in-process model of branch-models' `embedded` feature: no base
    // URL, no key, no network.
    ProviderSpec {
        name: "local",
        aliases: &["embedded"],
        kind: ProviderKind::Api,
        key_env: None,
        endpoints: &[EndpointSpec {
            path: "chat",
            aliases: &["chat/completions"],
            base_url: None,
            auth_type: N,
            // `include_token_usage_to_model` gives its note only where the
            // endpoint counts tokens; the embedded model's window is small,
            // so it takes the note (the same estimate as any other).
            requires_tokens: true,
            request_model: RequestModel::None,
            default_headers: &[],
            allow_local_network: false,
            protocol: WireProtocol::OpenAiChat,
            base_url_templates: &[],
        }],
    },
    ProviderSpec {
        name: "scripted",
        aliases: &[],
        kind: ProviderKind::Cli,
        key_env: None,
        endpoints: &[cli("chat/completions", &["chat", "query_cli", "cli"])],
    },
];

/// The registered provider called `name` (case-insensitive, aliases honoured).
pub fn lookup_provider(name: &str) -> Option<&'static ProviderSpec> {
    PROVIDERS.iter().find(|p| {
        p.name.eq_ignore_ascii_case(name) || p.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_matching() {
        let openai = lookup_provider("OpenAI").unwrap();
        assert_eq!(openai.endpoint("chat").unwrap().path, "chat/completions");
        assert_eq!(openai.endpoint("embed").unwrap().path, "embeddings");
        assert_eq!(openai.endpoint("").unwrap().path, "chat/completions");
        assert!(openai.endpoint("foo").is_none());
        let anthropic = lookup_provider("anthropic").unwrap();
        assert_eq!(anthropic.endpoint("foo").unwrap().path, "messages");
        assert_eq!(lookup_provider("open-router").unwrap().name, "openrouter");
        assert_eq!(
            lookup_provider("claude")
                .unwrap()
                .endpoint("chat")
                .unwrap()
                .path,
            "query_cli"
        );
        assert!(lookup_provider("nope").is_none());
    }

    #[test]
    fn compatible_providers_are_registered_for_chat_completions() {
        for (name, alias, url, key, auth) in [
            (
                "mistral",
                "mistralai",
                Some("https://api.mistral.ai/v1"),
                "MISTRAL_API_KEY",
                AuthType::Bearer,
            ),
            (
                "xai",
                "x-ai",
                Some("https://api.x.ai/v1"),
                "XAI_API_KEY",
                AuthType::Bearer,
            ),
            (
                "cohere",
                "cohere",
                Some("https://api.cohere.ai/compatibility/v1"),
                "COHERE_API_KEY",
                AuthType::Bearer,
            ),
            (
                "azure",
                "azure_openai",
                None,
                "AZURE_OPENAI_API_KEY",
                AuthType::ApiKeyHeader,
            ),
        ] {
            let spec = lookup_provider(alias).unwrap();
            assert_eq!(spec.name, name);
            assert_eq!(spec.key_env, Some(key));
            let ep = spec.endpoint("chat").unwrap();
            assert_eq!(
                (ep.path, ep.base_url, ep.auth_type, ep.protocol),
                ("chat/completions", url, auth, WireProtocol::OpenAiChat),
                "{name}"
            );
        }
    }

    #[test]
    fn url_templates_match_one_label_per_placeholder() {
        let t = "https://{resource}.openai.azure.com/openai/v1";
        assert!(url_matches_template(
            t,
            "https://my-res.openai.azure.com/openai/v1"
        ));
        assert!(url_matches_template(
            t,
            "https://r1.openai.azure.com/openai/v1?x=1"
        ));
        for bad in [
            "https://.openai.azure.com/openai/v1",
            "https://a.b.openai.azure.com/openai/v1",
            "https://evil.example/x.openai.azure.com/openai/v1",
            "https://evil.example#.openai.azure.com/openai/v1",
            "http://r.openai.azure.com/openai/v1",
            "https://r.openai.azure.com/openai/v1/extra",
            "https://r.openai.azure.com.evil.example/openai/v1",
            "https://r.openai.azure.com:8443/openai/v1",
        ] {
            assert!(!url_matches_template(t, bad), "{bad}");
        }
        let d = "https://{resource}.openai.azure.com/openai/deployments/{deployment}";
        assert!(url_matches_template(
            d,
            "https://r.openai.azure.com/openai/deployments/gpt-4o_prod?api-version=2024-10-21"
        ));
        assert!(!url_matches_template(
            d,
            "https://r.openai.azure.com/openai/deployments/a/b"
        ));
    }
}
