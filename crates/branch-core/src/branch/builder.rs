//! `BranchBuilder`: construction with every rule of ADR-0016 D1.

use std::sync::{Arc, OnceLock};

use serde_json::Value;
use uuid::Uuid;

use super::system::{SystemDatetime, SystemSpec, build_system};
use super::{Branch, ModelManager, Parts};
use crate::action::{ActionManager, Tool};
use crate::element::Element;
use crate::error::{BranchError, Result};
use crate::log::{DataLogger, DataLoggerConfig, Log};
use crate::memory::MemoryStore;
use crate::message::{Message, MessageManager, truthy};
use crate::metadata::Metadata;
use crate::model::{ChatModel, ModelConfig};
use crate::participant::{Participant, Role};
use crate::pile::Pile;

/// How a model is given: a live object, a configuration, a model string
/// (`"provider/model"` or a bare model name) or a stored dict.
#[derive(Clone)]
pub enum ModelChoice {
    /// A model object, kept by identity.
    Model(Arc<dyn ChatModel>),
    /// A configuration.
    Config(Box<ModelConfig>),
    /// `"provider/model"`, or a model of `LIONAGI_CHAT_PROVIDER`.
    Spec(String),
    /// An `iModel.to_dict` value.
    Dict(Value),
}

impl std::fmt::Debug for ModelChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelChoice::Model(m) => f.debug_tuple("Model").field(m).finish(),
            ModelChoice::Config(c) => f.debug_tuple("Config").field(c).finish(),
            ModelChoice::Spec(s) => f.debug_tuple("Spec").field(s).finish(),
            ModelChoice::Dict(_) => f.write_str("Dict(..)"),
        }
    }
}

impl ModelChoice {
    pub(crate) fn resolve(self) -> Result<Arc<dyn ChatModel>> {
        Ok(match self {
            ModelChoice::Model(m) => m,
            ModelChoice::Config(c) => Arc::new(*c),
            ModelChoice::Spec(s) => Arc::new(ModelConfig::from_model_string(&s)?),
            ModelChoice::Dict(v) => Arc::new(ModelConfig::from_dict(&v)?),
        })
    }
}

impl From<Arc<dyn ChatModel>> for ModelChoice {
    fn from(m: Arc<dyn ChatModel>) -> Self {
        ModelChoice::Model(m)
    }
}

impl From<ModelConfig> for ModelChoice {
    fn from(c: ModelConfig) -> Self {
        ModelChoice::Config(Box::new(c))
    }
}

impl From<&str> for ModelChoice {
    fn from(s: &str) -> Self {
        ModelChoice::Spec(s.to_owned())
    }
}

impl From<String> for ModelChoice {
    fn from(s: String) -> Self {
        ModelChoice::Spec(s)
    }
}

impl From<Value> for ModelChoice {
    fn from(v: Value) -> Self {
        ModelChoice::Dict(v)
    }
}

/// The deprecated constructor arguments that were given (and ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deprecated {
    /// `system_template`.
    SystemTemplate,
    /// `system_template_context`.
    SystemTemplateContext,
}

/// Builds a [`Branch`]. Every argument is optional.
#[derive(Default)]
pub struct BranchBuilder {
    id: Option<Uuid>,
    created_at: Option<f64>,
    metadata: Metadata,
    user: Option<Participant>,
    name: Option<String>,
    messages: Option<Pile<Message>>,
    system: Option<SystemSpec>,
    system_sender: Option<Participant>,
    system_datetime: Option<SystemDatetime>,
    use_lion_system_message: bool,
    chat_model: Option<ModelChoice>,
    parse_model: Option<ModelChoice>,
    tools: Vec<Arc<dyn Tool>>,
    log_config: Option<Arc<DataLoggerConfig>>,
    logs: Option<Pile<Log>>,
    memory: Option<Arc<dyn MemoryStore>>,
    deprecated: Vec<Deprecated>,
}

impl BranchBuilder {
    /// The branch id (default: a new v4 id).
    pub fn id(mut self, id: Uuid) -> Self {
        self.id = Some(id);
        self
    }

    /// The creation time (default: now).
    pub fn created_at(mut self, t: f64) -> Self {
        self.created_at = Some(t);
        self
    }

    /// Initial metadata.
    pub fn metadata(mut self, m: impl Into<Metadata>) -> Self {
        self.metadata = m.into();
        self
    }

    /// The human side: default instruction sender and reply recipient.
    pub fn user(mut self, user: impl Into<Participant>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// The branch name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Initial messages, in order. A leading System message is the system
    /// message (the reference ignores it; see docs/compat.md).
    pub fn messages(mut self, messages: impl IntoIterator<Item = Message>) -> Self {
        let mut pile = Pile::new(false);
        for m in messages {
            pile.push(m);
        }
        self.messages = Some(pile);
        self
    }

    /// Initial messages as a pile (kept with its own id and order).
    pub fn messages_pile(mut self, pile: Pile<Message>) -> Self {
        self.messages = Some(pile);
        self
    }

    /// The system prompt: text, any JSON value, or a System message.
    /// Falsy values (`""`, `0`, `false`, `null`, empty list/object) make none.
    pub fn system(mut self, system: impl Into<SystemSpec>) -> Self {
        self.system = Some(system.into());
        self
    }

    /// Who sends the system message (default: the user, else `"system"`).
    pub fn system_sender(mut self, sender: impl Into<Participant>) -> Self {
        self.system_sender = Some(sender.into());
        self
    }

    /// The time the system message announces.
    pub fn system_datetime(mut self, dt: SystemDatetime) -> Self {
        self.system_datetime = Some(dt);
        self
    }

    /// Prepends the built-in Lion system prompt.
    pub fn use_lion_system_message(mut self, yes: bool) -> Self {
        self.use_lion_system_message = yes;
        self
    }

    /// The chat model (default: `LIONAGI_CHAT_PROVIDER` / `LIONAGI_CHAT_MODEL`).
    pub fn chat_model(mut self, model: impl Into<ModelChoice>) -> Self {
        self.chat_model = Some(model.into());
        self
    }

    /// The parse model (default: the chat model object itself).
    pub fn parse_model(mut self, model: impl Into<ModelChoice>) -> Self {
        self.parse_model = Some(model.into());
        self
    }

    /// Registers a tool.
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Registers tools.
    pub fn tools(mut self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// The log configuration (default: the settings values).
    pub fn log_config(mut self, config: DataLoggerConfig) -> Self {
        self.log_config = Some(Arc::new(config));
        self
    }

    /// A dict log configuration: a non-empty object is validated against the
    /// class defaults; `null` or `{}` means the settings values.
    pub fn log_config_value(mut self, v: &Value) -> Result<Self> {
        self.log_config = if truthy(v) {
            Some(Arc::new(DataLoggerConfig::from_value(v)?))
        } else {
            None
        };
        Ok(self)
    }

    /// Initial logs.
    pub fn logs(mut self, logs: impl IntoIterator<Item = Log>) -> Self {
        let mut pile = Pile::new(true);
        for l in logs {
            pile.push(l);
        }
        self.logs = Some(pile);
        self
    }

    /// Initial logs as a pile.
    pub fn logs_pile(mut self, logs: Pile<Log>) -> Self {
        self.logs = Some(logs);
        self
    }

    /// A memory store, kept by identity.
    pub fn memory(mut self, store: Arc<dyn MemoryStore>) -> Self {
        self.memory = Some(store);
        self
    }

    /// Deprecated and without effect; accepted for compatibility. A
    /// non-null value is reported as a deprecation warning.
    pub fn system_template(mut self, template: Option<Value>) -> Self {
        if template.is_some() {
            self.deprecated.push(Deprecated::SystemTemplate);
        }
        self
    }

    /// Deprecated and without effect; see [`BranchBuilder::system_template`].
    pub fn system_template_context(mut self, context: Option<Value>) -> Self {
        if context.is_some() {
            self.deprecated.push(Deprecated::SystemTemplateContext);
        }
        self
    }

    /// The deprecated arguments given so far.
    pub fn deprecations(&self) -> &[Deprecated] {
        &self.deprecated
    }

    /// Builds the branch.
    pub fn build(self) -> Result<Branch> {
        for d in &self.deprecated {
            let arg = match d {
                Deprecated::SystemTemplate => "system_template",
                Deprecated::SystemTemplateContext => "system_template_context",
            };
            tracing::warn!(
                argument = arg,
                "deprecated branch argument ignored: system prompts are no longer templated"
            );
        }
        let element = Element {
            id: self.id.unwrap_or_else(Uuid::new_v4),
            created_at: self.created_at.unwrap_or_else(crate::element::now),
            metadata: self.metadata,
        };
        let mut msgs = match self.messages {
            Some(pile) => MessageManager::from_pile(pile),
            None => MessageManager::new(),
        };
        if let Some(mut system) = build_system(
            self.system,
            self.system_datetime.as_ref(),
            self.use_lion_system_message,
        ) {
            let sender = self
                .system_sender
                .or_else(|| self.user.clone())
                .unwrap_or(Participant::Role(Role::System));
            system.sender = Some(sender);
            system.recipient = Some(Participant::Id(element.id));
            msgs.set_system(system);
        }
        let chat = match self.chat_model {
            Some(c) => c.resolve()?,
            None => default_chat_model()?,
        };
        let parse = self.parse_model.map(ModelChoice::resolve).transpose()?;
        let models = ModelManager::new(chat, parse);
        let mut acts = ActionManager::new();
        acts.register_all(self.tools, false)?;
        let config = match self.log_config {
            Some(config) => config,
            None => settings_log_config()?,
        };
        let logger = match self.logs {
            Some(logs) => DataLogger::with_logs(config, logs),
            None => DataLogger::new(config),
        };
        Ok(Branch::assemble(Parts {
            element,
            user: self.user,
            name: self.name,
            msgs,
            acts,
            models,
            logger,
            memory: self.memory,
        }))
    }
}

/// The settings' log configuration, read once per process (as the
/// reference reads its settings at import); a malformed one is every
/// default logger's error.
pub(crate) fn settings_log_config() -> Result<Arc<DataLoggerConfig>> {
    static SETTINGS: OnceLock<std::result::Result<Arc<DataLoggerConfig>, (String, String)>> =
        OnceLock::new();
    SETTINGS
        .get_or_init(|| match DataLoggerConfig::from_settings() {
            Ok(config) => Ok(Arc::new(config)),
            Err(BranchError::InvalidLogConfig { field, reason }) => Err((field, reason)),
            Err(other) => Err(("log_config".into(), other.to_string())),
        })
        .clone()
        .map_err(|(field, reason)| BranchError::InvalidLogConfig { field, reason })
}

/// A new default chat model from the settings.
pub(crate) fn default_chat_model() -> Result<Arc<dyn ChatModel>> {
    Ok(Arc::new(ModelConfig::default_chat()?))
}
