//! Which model `lionagi chat` talks to: the flags, then the
//! `LIONAGI_CHAT_PROVIDER` / `LIONAGI_CHAT_MODEL` settings, then the
//! embedded local model (when built in and fetched), then OpenAI when its
//! key is set; otherwise a message saying how to get a model.

use std::sync::Arc;

use branch_core::model::settings::setting;
use branch_core::model::{AuthType, ChatModel, DEFAULT_CHAT_MODEL, ModelConfig, registry};
use branch_models::{ApiKey, IModel};
use serde_json::Value;

use super::chat_args::ChatArgs;
use super::chat_error::{ChatError, ModelInfo};
use super::shown::one_line;

/// How to get a model, for the error when none is available.
const HOW_TO_GET_A_MODEL: &str = "no model configured. Either
  - pass --base-url URL of an OpenAI-compatible server (llama.cpp, vLLM, Ollama ...), or
  - pass --provider NAME [--model NAME] with the provider's key variable set
    (OPENAI_API_KEY, ANTHROPIC_API_KEY ...), or set LIONAGI_CHAT_PROVIDER / LIONAGI_CHAT_MODEL, or
  - use the embedded model, offline: `cargo xtask fetch-model`, then build lionagi with
    `--features embedded` (cargo run --release -p lionagi --features embedded -- chat)";

/// A connected model and what error messages say about it.
type Chosen = (Arc<dyn ChatModel>, ModelInfo);

/// The model for this run and what error messages say about it.
pub(crate) fn choose(args: &ChatArgs) -> Result<Chosen, ChatError> {
    let provider = args
        .provider
        .clone()
        .or_else(|| setting("LIONAGI_CHAT_PROVIDER"));
    let model = args.model.clone().or_else(|| setting("LIONAGI_CHAT_MODEL"));
    let endpoint = args
        .endpoint
        .clone()
        .or_else(|| setting("LIONAGI_CHAT_ENDPOINT"));
    let configured =
        provider.is_some() || model.is_some() || args.base_url.is_some() || endpoint.is_some();
    if configured {
        let is_local = provider.as_deref().is_some_and(|p| {
            matches!(p.trim().to_ascii_lowercase().as_str(), "local" | "embedded")
        });
        if is_local {
            if let Some(e) = endpoint {
                return Err(ChatError::Usage(format!(
                    "the embedded model has one endpoint; drop --endpoint {} \
                     (or LIONAGI_CHAT_ENDPOINT)",
                    one_line(&e)
                )));
            }
            return local(args, model.as_deref());
        }
        return remote(
            args,
            provider.as_deref(),
            model.as_deref(),
            endpoint.as_deref(),
        );
    }
    if let Some(found) = embedded_if_present(args)? {
        return Ok(found);
    }
    if setting("OPENAI_API_KEY").is_some() {
        return remote(args, Some("openai"), Some(DEFAULT_CHAT_MODEL), None);
    }
    Err(ChatError::NoModel(HOW_TO_GET_A_MODEL.into()))
}

fn config_error(e: impl std::fmt::Display) -> ChatError {
    ChatError::Usage(format!("model: {e}"))
}

/// Sets `--max-tokens` / `--temperature` as default request fields.
fn sampling(config: &mut ModelConfig, args: &ChatArgs) -> Result<(), ChatError> {
    if let Some(n) = args.max_tokens {
        config
            .set_kwarg("max_tokens", n.into())
            .map_err(config_error)?;
    }
    if let Some(t) = args.temperature {
        config
            .set_kwarg("temperature", t.into())
            .map_err(config_error)?;
    }
    Ok(())
}

/// Refuses an endpoint the chosen provider does not have. The library
/// reads such a name as a generic endpoint at the provider's address, or
/// as the provider's only endpoint: a typo would reach a wrong URL or be
/// ignored. A provider it does not know (a server at `--base-url`) takes
/// any name.
fn check_endpoint(config: &ModelConfig, endpoint: &str) -> Result<(), ChatError> {
    let Some(spec) = registry::lookup_provider(config.provider()) else {
        return Ok(());
    };
    if spec.endpoint_named(endpoint).is_some() {
        return Ok(());
    }
    let names: Vec<&str> = spec.endpoints.iter().map(|e| e.path).collect();
    Err(ChatError::Usage(format!(
        "provider {} has no endpoint `{}`; it has: {}",
        spec.name,
        one_line(endpoint),
        names.join(", ")
    )))
}

fn is_loopback(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = match host.rsplit_once(':') {
        Some((h, port)) if !h.is_empty() && port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => host,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    matches!(
        host.to_ascii_lowercase().as_str(),
        "localhost" | "127.0.0.1" | "::1"
    )
}

fn remote(
    args: &ChatArgs,
    provider: Option<&str>,
    model: Option<&str>,
    endpoint: Option<&str>,
) -> Result<Chosen, ChatError> {
    let mut b = ModelConfig::builder();
    if let Some(p) = provider {
        b = b.provider(p);
    }
    if let Some(e) = endpoint {
        b = b.endpoint(e);
    }
    let model_given = model.is_some();
    b = b.model(model.unwrap_or(DEFAULT_CHAT_MODEL));
    if let Some(url) = &args.base_url {
        // The user typed this address: a server on this machine is meant;
        // one elsewhere on the local network (a GPU box, a NAS running
        // Ollama) when the flag says so.
        b = b
            .base_url(url)
            .allow_local_network(is_loopback(url) || args.allow_local_network);
    }
    let mut config = b.build().map_err(config_error)?;
    if let Some(e) = endpoint {
        check_endpoint(&config, e)?;
    }
    if !model_given && provider.is_some_and(|p| !p.eq_ignore_ascii_case("openai")) {
        return Err(ChatError::Usage(format!(
            "--provider {} needs --model NAME (or LIONAGI_CHAT_MODEL)",
            config.provider()
        )));
    }
    check_agent(&config)?;
    sampling(&mut config, args)?;
    ask_usage(&mut config)?;
    let key_var = config.key_env().map(str::to_owned);
    let needs_key = sends_key(&config);
    let info = ModelInfo {
        label: label(&config),
        provider: config.provider().to_owned(),
        base_url: config.base_url().map(str::to_owned),
        key_var: key_var.clone(),
    };
    let key = key_var.as_deref().and_then(ApiKey::from_env);
    let mut builder = match (&args.base_url, key) {
        // A chosen server gets the provider's key when one is set (the
        // user pointed it there), and no Authorization header otherwise:
        // local servers need none.
        (Some(_), Some(key)) => IModel::builder(config).api_key(key),
        (Some(_), None) if needs_key => IModel::builder(without_auth(&config)?),
        (None, None) if needs_key => {
            return Err(match key_var {
                Some(var) => ChatError::MissingKey {
                    provider: info.provider.clone(),
                    var,
                },
                None => ChatError::Usage(format!(
                    "provider {} needs a key and has no key variable; use --base-url",
                    info.provider
                )),
            });
        }
        _ => IModel::builder(config),
    };
    if let Some(deadline) = args.timeout {
        builder = builder.call_deadline(deadline);
    }
    let model = builder
        .build()
        .map_err(|e| ChatError::from_model(e, &info))?;
    Ok((Arc::new(model), info))
}

/// The model of a conversation: a resumed one's own, unless the model
/// flags choose another; else [`choose`]. Outside the runtime (`rt`
/// only reads the store): connecting the embedded model loads its weights.
pub(crate) fn for_conversation(
    args: &ChatArgs,
    rt: &tokio::runtime::Runtime,
) -> Result<Chosen, ChatError> {
    // `--endpoint` alone: another endpoint of the stored model.
    let only_endpoint = match (&args.provider, &args.model, &args.base_url) {
        (None, None, None) => args.endpoint.as_deref(),
        _ => None,
    };
    if args.resume.is_none() || (args.chooses_model() && only_endpoint.is_none()) {
        return choose(args);
    }
    let model = rt.block_on(super::conversation::stored_model(args))?;
    match only_endpoint {
        Some(endpoint) => stored(&at_endpoint(&model, endpoint)?, args),
        None => stored(&model, args),
    }
}

/// The stored model on another endpoint of its provider (`--resume` with
/// `--endpoint` alone): its provider, model name, server and request
/// fields, which the new endpoint's dialect translates (chat's
/// `max_tokens` becomes the Responses API's `max_output_tokens`). Without
/// this the flag alone picked the default model.
fn at_endpoint(stored: &ModelConfig, endpoint: &str) -> Result<ModelConfig, ChatError> {
    let mut b = ModelConfig::builder()
        .provider(stored.provider())
        .endpoint(endpoint);
    if let Some(model) = stored.model_name() {
        b = b.model(model);
    }
    if let Some(url) = stored.base_url() {
        b = b.base_url(url);
    }
    let mut config = b.build().map_err(config_error)?;
    check_endpoint(&config, endpoint)?;
    for (key, value) in stored.kwargs() {
        // Chat's usage request; set again below when the endpoint is chat.
        if key != "stream_options" {
            config.set_kwarg(key, value.clone()).map_err(config_error)?;
        }
    }
    ask_usage(&mut config)?;
    Ok(config)
}

/// OpenAI-style chat streams report usage only when asked.
fn ask_usage(config: &mut ModelConfig) -> Result<(), ChatError> {
    if config.endpoint().endpoint == "chat/completions" {
        config
            .set_kwarg("stream_options", serde_json::json!({"include_usage": true}))
            .map_err(config_error)?;
    }
    Ok(())
}

/// The stored conversation's own model (`--resume` without model flags):
/// its provider, model name and server from the store, its key from the
/// environment, local-network access only with `--allow-local-network`
/// (a restored model never regains it by itself).
pub(crate) fn stored(stored: &ModelConfig, args: &ChatArgs) -> Result<Chosen, ChatError> {
    let mut config = stored.clone();
    config.set_allow_local_network(args.allow_local_network);
    check_agent(&config)?;
    sampling(&mut config, args)?;
    let key_var = config.key_env().map(str::to_owned);
    let info = ModelInfo {
        label: label(&config),
        provider: config.provider().to_owned(),
        base_url: config.base_url().map(str::to_owned),
        key_var: key_var.clone(),
    };
    if config.provider_spec().is_some_and(|s| s.name == "local") {
        let config: Arc<dyn ChatModel> = Arc::new(config);
        let model = branch_models::connect(&config).map_err(|e| ChatError::from_model(e, &info))?;
        return Ok((model, info));
    }
    let needs_key = sends_key(&config);
    // A stored file chooses the address, so the environment's key goes
    // only to the provider's registered one; any other server gets none.
    let builder = if !needs_key {
        IModel::builder(config)
    } else if !config.base_url_is_registered() {
        IModel::builder(without_auth(&config)?)
    } else {
        match key_var.as_deref().and_then(ApiKey::from_env) {
            Some(key) => IModel::builder(config).api_key(key),
            None => {
                return Err(match key_var {
                    Some(var) => ChatError::MissingKey {
                        provider: info.provider.clone(),
                        var,
                    },
                    None => ChatError::Usage(format!(
                        "provider {} needs a key and has no key variable; choose a model with --base-url",
                        info.provider
                    )),
                });
            }
        }
    };
    // The flag holds for a resumed conversation's own model too.
    let builder = match args.timeout {
        Some(deadline) => builder.call_deadline(deadline),
        None => builder,
    };
    let model = builder
        .build()
        .map_err(|e| ChatError::from_model(e, &info))?;
    Ok((Arc::new(model), info))
}

/// Whether requests carry the provider's key. A CLI agent (`claude`,
/// `codex` ...) is a program that signs in by itself: its endpoint's
/// `auth_type` is kept for the reference's format, but there is no request
/// to put a key on.
fn sends_key(config: &ModelConfig) -> bool {
    config.endpoint().auth_type != AuthType::None && !config.is_cli()
}

/// Refuses a CLI agent other than Claude Code: the one agent protocol
/// spoken is its stream-json, and the program run is `claude` (or
/// `LIONAGI_CLAUDE_BIN`) whatever the provider's name, so `codex` would
/// silently run Claude Code.
fn check_agent(config: &ModelConfig) -> Result<(), ChatError> {
    if !config.is_cli() || config.provider() == "claude_code" {
        return Ok(());
    }
    Err(ChatError::Usage(format!(
        "provider {} is a CLI agent lionagi does not run; the CLI agent it runs is \
         claude_code (Claude Code)",
        config.provider()
    )))
}

/// The same configuration, sending no credentials.
fn without_auth(config: &ModelConfig) -> Result<ModelConfig, ChatError> {
    let mut dict = config.to_dict(true, true);
    if let Some(cfg) = dict
        .pointer_mut("/endpoint/config")
        .and_then(Value::as_object_mut)
    {
        cfg.insert("auth_type".into(), "none".into());
    }
    let mut plain = ModelConfig::from_dict(&dict).map_err(config_error)?;
    // Restoring never grants local access by itself; the flag did.
    plain.set_allow_local_network(config.allow_local_network());
    Ok(plain)
}

fn label(config: &ModelConfig) -> String {
    format!(
        "{}/{}",
        config.provider(),
        config.model_name().unwrap_or("?")
    )
}

#[cfg(feature = "embedded")]
fn local(args: &ChatArgs, model: Option<&str>) -> Result<Chosen, ChatError> {
    use branch_models::local;
    let name = model.unwrap_or(local::DEFAULT_MODEL);
    let info = ModelInfo {
        label: format!("local/{name}"),
        provider: local::PROVIDER.into(),
        base_url: None,
        key_var: None,
    };
    let mut config = local::local_config(name).map_err(|e| ChatError::from_model(e, &info))?;
    sampling(&mut config, args)?;
    let config: Arc<dyn ChatModel> = Arc::new(config);
    let model = branch_models::connect(&config).map_err(|e| match e.kind {
        branch_models::ModelErrorKind::Config => {
            ChatError::NoModel(format!("{}\n\n{HOW_TO_GET_A_MODEL}", e.message))
        }
        _ => ChatError::from_model(e, &info),
    })?;
    Ok((model, info))
}

#[cfg(not(feature = "embedded"))]
fn local(_args: &ChatArgs, _model: Option<&str>) -> Result<Chosen, ChatError> {
    Err(ChatError::NoModel(format!(
        "this lionagi was built without the embedded model.\n\n{HOW_TO_GET_A_MODEL}"
    )))
}

/// The embedded default model, when built in and its file is present.
#[cfg(feature = "embedded")]
fn embedded_if_present(args: &ChatArgs) -> Result<Option<Chosen>, ChatError> {
    let present = branch_models::local::default_model_path().is_ok_and(|p| p.is_file());
    if !present {
        return Ok(None);
    }
    local(args, None).map(Some)
}

#[cfg(not(feature = "embedded"))]
fn embedded_if_present(_args: &ChatArgs) -> Result<Option<Chosen>, ChatError> {
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_addresses_are_recognised() {
        assert!(is_loopback("http://127.0.0.1:8080/v1"));
        assert!(is_loopback("http://localhost/v1"));
        assert!(is_loopback("http://[::1]:9000/v1"));
        assert!(!is_loopback("https://api.openai.com/v1"));
        assert!(!is_loopback("http://127.0.0.1.example.com/v1"));
    }

    #[test]
    fn a_resumed_conversation_keeps_its_model_and_earns_local_access_by_flag() {
        let kept = ModelConfig::builder()
            .provider("openai")
            .model("stored-model")
            .base_url("http://127.0.0.1:1/v1")
            .build()
            .unwrap();
        let args = ChatArgs::parse(&[
            "--store".into(),
            "s.db".into(),
            "--resume".into(),
            "c".into(),
        ])
        .unwrap();
        let (model, info) = stored(&kept, &args).unwrap();
        let config = model.snapshot();
        assert_eq!(info.label, "openai/stored-model");
        assert_eq!(config.base_url(), Some("http://127.0.0.1:1/v1"));
        assert!(!config.allow_local_network(), "never from the stored data");
        // Not the provider's own address: the environment's key is not sent.
        assert_eq!(config.endpoint().auth_type, AuthType::None);
        let mut args = args;
        args.allow_local_network = true;
        let (model, _) = stored(&kept, &args).unwrap();
        assert!(model.snapshot().allow_local_network());
    }

    #[test]
    fn a_typed_server_on_the_local_network_is_reached_only_with_the_flag() {
        // Built, never called: no connection leaves loopback.
        let typed = |extra: &[&str]| {
            let mut words = vec!["--base-url", "http://192.168.1.20:8000/v1", "--model", "m"];
            words.extend_from_slice(extra);
            let words: Vec<String> = words.iter().map(|w| (*w).to_owned()).collect();
            let (model, _) = choose(&ChatArgs::parse(&words).unwrap()).unwrap();
            model.snapshot().allow_local_network()
        };
        assert!(!typed(&[]));
        assert!(typed(&["--allow-local-network"]));
        let loopback =
            ChatArgs::parse(&["--base-url".into(), "http://127.0.0.1:8000/v1".into()]).unwrap();
        let (model, _) = choose(&loopback).unwrap();
        assert!(model.snapshot().allow_local_network(), "typed loopback");
    }

    #[test]
    fn an_endpoint_the_provider_lacks_is_refused_by_name() {
        let config = |provider: &str| {
            let mut b = ModelConfig::builder().provider(provider).model("m");
            if provider == "my-server" {
                b = b.base_url("http://127.0.0.1:1/v1");
            }
            b.build().unwrap()
        };
        let e = check_endpoint(&config("anthropic"), "responses\u{1b}[2J").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("provider anthropic has no endpoint `responses[2J`; it has: messages"),
            "{e}"
        );
        assert!(check_endpoint(&config("anthropic"), "Messages").is_ok());
        assert!(check_endpoint(&config("openai"), "responses").is_ok());
        assert!(
            check_endpoint(&config("openai"), "chat").is_ok(),
            "an alias"
        );
        let e = check_endpoint(&config("openai"), "respones").unwrap_err();
        assert!(e.to_string().contains("chat/completions"), "{e}");
        assert!(check_endpoint(&config("my-server"), "anything").is_ok());
    }

    #[test]
    fn a_chosen_server_without_a_key_gets_no_credentials() {
        let config = ModelConfig::builder()
            .provider("openai")
            .model("m")
            .base_url("http://127.0.0.1:1/v1")
            .allow_local_network(true)
            .build()
            .unwrap();
        let plain = without_auth(&config).unwrap();
        assert_eq!(plain.endpoint().auth_type, AuthType::None);
        assert!(plain.allow_local_network());
        assert_eq!(plain.base_url(), Some("http://127.0.0.1:1/v1"));
        assert_eq!(plain.model_name(), Some("m"));
    }
}
