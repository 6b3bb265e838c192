//! `to_dict` / `from_dict` (ADR-0016 D2).

use std::str::FromStr;
use std::sync::Arc;

use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};
use uuid::Uuid;

use super::builder::{default_chat_model, settings_log_config};
use super::{Branch, ModelManager, Parts};
use crate::action::ActionManager;
use crate::element::{self, Element, Finite, lion_class};
use crate::error::{BranchError, Result};
use crate::log::{DataLogger, DataLoggerConfig, Log};
use crate::message::{Message, MessageManager, MessageOut};
use crate::metadata::Metadata;
use crate::model::{ChatModel, ModelConfig};
use crate::participant::{Participant, de_participant};
use crate::pile::{MetaPlacement, Pile, PileOut, Stored};
use crate::progression::{Progression, de_opt_created_at};

/// The `mode` of `to_dict`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SerializationMode {
    /// Plain data (identical to json mode here: Rust holds JSON values).
    #[default]
    Python,
    /// JSON-native values; non-finite floats fail.
    Json,
    /// json mode with `metadata` renamed and moved after the object's own
    /// keys (`db_meta_key` on the branch, `node_metadata` on nested objects).
    Db,
}

impl FromStr for SerializationMode {
    type Err = BranchError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "python" => Ok(Self::Python),
            "json" => Ok(Self::Json),
            "db" => Ok(Self::Db),
            other => Err(BranchError::UnsupportedMode(other.to_owned())),
        }
    }
}

/// Options of [`Branch::to_dict`], defaults as in the reference.
#[derive(Debug, Clone, PartialEq)]
pub struct ToDictOptions {
    /// python (default), json or db.
    pub mode: SerializationMode,
    /// The branch's metadata key in db mode (default `node_metadata`).
    pub db_meta_key: Option<String>,
    /// Write each model's request-options schema.
    pub include_request_options: bool,
    /// Write non-empty logs (default true).
    pub include_logs: bool,
    /// Write `log_config`.
    pub include_log_config: bool,
    /// Write each model's rate-limiter settings.
    pub include_processor_config: bool,
}

impl Default for ToDictOptions {
    fn default() -> Self {
        Self {
            mode: SerializationMode::Python,
            db_meta_key: None,
            include_request_options: false,
            include_logs: true,
            include_log_config: false,
            include_processor_config: false,
        }
    }
}

impl ToDictOptions {
    /// Options in this mode, other values default.
    pub fn mode(mode: SerializationMode) -> Self {
        Self {
            mode,
            ..Self::default()
        }
    }
}

/// Live objects that replace stored ones in [`Branch::from_dict_with`].
#[derive(Default, Clone)]
pub struct FromDictOptions {
    /// Replaces the stored chat model.
    pub chat_model: Option<Arc<dyn ChatModel>>,
    /// Replaces the stored parse model.
    pub parse_model: Option<Arc<dyn ChatModel>>,
}

struct BranchOut<'a> {
    branch: &'a Branch,
    opts: &'a ToDictOptions,
    chat: Value,
    parse: Option<Value>,
    /// Leave out the piles and `system` ([`Branch::head_json`]).
    head_only: bool,
}

/// Branch metadata with the typed entries folded back in.
struct BranchMetadata<'a>(&'a Branch);

impl Serialize for BranchMetadata<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let b = self.0;
        let mut m = s.serialize_map(None)?;
        b.element
            .metadata
            .write_json_entries(&mut m, &["lion_class", "current_progression"])?;
        if let Some(view) = b.msgs.view() {
            // Written as the reference stores it inside metadata: a plain
            // field dump, without `lion_class`.
            m.serialize_entry("current_progression", &PlainProgression(view))?;
        }
        m.serialize_entry("lion_class", lion_class::BRANCH)?;
        m.end()
    }
}

impl Serialize for BranchOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let b = self.branch;
        let db = self.opts.mode == SerializationMode::Db;
        let nested = if db {
            MetaPlacement::Tail("node_metadata")
        } else {
            MetaPlacement::Head
        };
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("id", &b.element.id)?;
        m.serialize_entry("created_at", &Finite(b.element.created_at))?;
        if !db {
            m.serialize_entry("metadata", &BranchMetadata(b))?;
        }
        m.serialize_entry(
            "user",
            &b.user
                .as_ref()
                .map(|u| u.to_string())
                .filter(|u| !u.is_empty()),
        )?;
        m.serialize_entry("name", &b.name)?;
        if db {
            let key = self.opts.db_meta_key.as_deref().unwrap_or("node_metadata");
            m.serialize_entry(key, &BranchMetadata(b))?;
        }
        let pile = b.msgs.messages();
        if !self.head_only {
            if pile.is_empty() {
                m.serialize_entry("messages", &EmptyPile)?;
            } else {
                m.serialize_entry("messages", &MessagePileOut { pile, meta: nested })?;
            }
        }
        if !self.head_only && self.opts.include_logs && !b.logger.logs().is_empty() {
            m.serialize_entry(
                "logs",
                &PileOut {
                    pile: b.logger.logs(),
                    meta: nested,
                },
            )?;
        }
        if let Some(system) = b.msgs.system().filter(|_| !self.head_only) {
            m.serialize_entry(
                "system",
                &MessageOut {
                    msg: system,
                    meta: nested,
                },
            )?;
        }
        if self.opts.include_log_config {
            m.serialize_entry("log_config", &b.logger.config().to_value())?;
        }
        m.serialize_entry("chat_model", &self.chat)?;
        if let Some(p) = &self.parse {
            m.serialize_entry("parse_model", p)?;
        }
        m.end()
    }
}

/// A progression as a plain field dump (no `lion_class`).
struct PlainProgression<'a>(&'a Progression);

impl Serialize for PlainProgression<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let p = self.0;
        let mut m = s.serialize_map(Some(5))?;
        m.serialize_entry("id", &p.element.id)?;
        m.serialize_entry("created_at", &Finite(p.element.created_at))?;
        m.serialize_entry("metadata", &p.element.metadata)?;
        m.serialize_entry("order", &p.order)?;
        m.serialize_entry("name", &p.name)?;
        m.end()
    }
}

/// `{"collections": [], "progression": {"order": []}}`.
struct EmptyPile;

impl Serialize for EmptyPile {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("collections", &[(); 0])?;
        m.serialize_entry("progression", &EmptyOrder)?;
        m.end()
    }
}

struct EmptyOrder;

impl Serialize for EmptyOrder {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(1))?;
        m.serialize_entry("order", &[(); 0])?;
        m.end()
    }
}

/// The message pile; items inside `collections` keep `metadata` at its head
/// in every mode.
struct MessagePileOut<'a> {
    pile: &'a Pile<Message>,
    meta: MetaPlacement<'a>,
}

impl Serialize for MessagePileOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        PileOut {
            pile: self.pile,
            meta: self.meta,
        }
        .serialize(s)
    }
}

impl Branch {
    fn model_dicts(&self, opts: &ToDictOptions) -> (Value, Option<Value>) {
        // Through the model, not its construction-time config: a connected
        // model records what calls taught it (the served model name).
        let write = |m: &Arc<dyn ChatModel>| {
            m.to_dict(opts.include_request_options, opts.include_processor_config)
        };
        let chat = write(self.models.chat());
        let parse = (!self.models.parse_is_chat()).then(|| write(self.models.parse()));
        (chat, parse)
    }

    /// Serializes the branch's conversation projection (ADR-0016 D2).
    ///
    /// Tools, named operations, memory, context providers, capability
    /// grants, the observer and session references are never written; API
    /// keys are not part of a model's configuration at all.
    pub fn to_dict(&self, opts: &ToDictOptions) -> Result<Value> {
        let (chat, parse) = self.model_dicts(opts);
        crate::load::to_value(
            &BranchOut {
                branch: self,
                opts,
                chat,
                parse,
                head_only: false,
            },
            "branch",
        )
    }

    /// [`Branch::to_dict`] without `messages`, `logs` and `system`, as
    /// JSON bytes: every other entry (metadata, user, name, models, log
    /// configuration) as `to_dict` writes it, in its order. What a store
    /// that appends turns writes beside a turn's messages, so a turn that
    /// renamed the branch, changed its user or models or its metadata (a
    /// CLI agent's session) is stored without serializing every message
    /// again.
    pub fn head_json(&self, opts: &ToDictOptions) -> Result<Vec<u8>> {
        self.write_json(opts, true)
    }

    /// [`Branch::to_dict`] written straight to JSON bytes, without building
    /// the intermediate value.
    pub fn to_json_vec(&self, opts: &ToDictOptions) -> Result<Vec<u8>> {
        self.write_json(opts, false)
    }

    fn write_json(&self, opts: &ToDictOptions, head_only: bool) -> Result<Vec<u8>> {
        let (chat, parse) = self.model_dicts(opts);
        crate::load::to_vec(
            &BranchOut {
                branch: self,
                opts,
                chat,
                parse,
                head_only,
            },
            "branch",
        )
    }

    /// Restores a branch from a `to_dict` value (python or json mode; db
    /// mode is read as well). The input is not modified.
    pub fn from_dict(data: &Value) -> Result<Self> {
        Self::from_dict_with(data, FromDictOptions::default())
    }

    /// [`Branch::from_dict`] with live models replacing the stored ones.
    pub fn from_dict_with(data: &Value, opts: FromDictOptions) -> Result<Self> {
        if !data.is_object() {
            return Err(BranchError::invalid(
                ".",
                "a stored branch must be a JSON object",
            ));
        }
        let wire: BranchWire = match custom_meta_key(data) {
            Some(renamed) => crate::load::from_value(&renamed)?,
            None => crate::load::from_value(data)?,
        };
        wire.into_branch(opts)
    }

    /// Restores a branch straight from JSON bytes (the fast path for
    /// files): the branch [`Branch::from_dict`] restores from the value
    /// the bytes parse to, and its errors, without building that value.
    pub fn from_json_slice(bytes: &[u8]) -> Result<Self> {
        // Only from an object, as `from_dict` takes: serde's derive would
        // also read a list, its items taken as the fields in order.
        match crate::load::from_slice::<crate::object_only::Object<BranchWire>>(bytes) {
            Ok(crate::object_only::Object(wire)) => wire.into_branch(FromDictOptions::default()),
            // Two documents the reader in one pass refuses are read from
            // their value: a key written twice (the value holds its last,
            // as JSON parsers do) and db-mode metadata under a custom key
            // (`custom_meta_key`). Any other keeps this error, which says
            // where in the text it failed.
            Err(e) => match serde_json::from_slice::<Value>(bytes) {
                Ok(value) => Self::from_dict(&value).map_err(|_| e),
                Err(_) => Err(e),
            },
        }
    }
}

/// The keys a stored branch may have besides its metadata.
const BRANCH_KEYS: &[&str] = &[
    "id",
    "created_at",
    "metadata",
    "node_metadata",
    "user",
    "name",
    "messages",
    "logs",
    "system",
    "log_config",
    "chat_model",
    "parse_model",
];

/// A db-mode document written with a custom `db_meta_key` keeps the
/// branch's metadata under that key: with no `metadata`/`node_metadata`
/// and exactly one other key holding an object tagged with a
/// `lion_class`, that key is read as the metadata. Anything else is left
/// to the strict reader (an unknown key stays an error).
fn custom_meta_key(data: &Value) -> Option<Value> {
    let m = data.as_object()?;
    if m.contains_key("metadata") || m.contains_key("node_metadata") {
        return None;
    }
    let mut extra = m.keys().filter(|k| !BRANCH_KEYS.contains(&k.as_str()));
    let key = extra.next()?;
    if extra.next().is_some() || m.get(key)?.get("lion_class").is_none() {
        return None;
    }
    let renamed: Map<String, Value> = m
        .iter()
        .map(|(k, v)| {
            let k = if k == key {
                "node_metadata"
            } else {
                k.as_str()
            };
            (k.to_owned(), v.clone())
        })
        .collect();
    Some(Value::Object(renamed))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BranchWire {
    #[serde(default, deserialize_with = "element::de_opt_uuid")]
    id: Option<Uuid>,
    #[serde(default, deserialize_with = "de_opt_created_at")]
    created_at: Option<f64>,
    #[serde(default)]
    metadata: Option<Metadata>,
    #[serde(default)]
    node_metadata: Option<Metadata>,
    #[serde(default, deserialize_with = "de_participant")]
    user: Option<Participant>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default, deserialize_with = "de_messages")]
    messages: Option<Pile<Message>>,
    #[serde(default, deserialize_with = "de_logs")]
    logs: Option<Pile<Log>>,
    #[serde(default)]
    system: Option<Message>,
    #[serde(default)]
    log_config: Option<Value>,
    #[serde(default)]
    chat_model: Option<Value>,
    #[serde(default)]
    parse_model: Option<Value>,
}

fn de_messages<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<Pile<Message>>, D::Error> {
    de_pile(d, false)
}

fn de_logs<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<Pile<Log>>, D::Error> {
    de_pile(d, true)
}

/// A pile given as a pile object or as a bare list of items. Untagged enums
/// would hide the path of a fault inside an item, so the shape is chosen by
/// the JSON type instead.
fn de_pile<'de, D, T>(d: D, strict_type: bool) -> std::result::Result<Option<Pile<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Stored + Deserialize<'de>,
{
    struct V<T> {
        strict_type: bool,
        item: std::marker::PhantomData<T>,
    }
    impl<'de, T: Stored + Deserialize<'de>> serde::de::Visitor<'de> for V<T> {
        type Value = Option<Pile<T>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a pile or a list of items")
        }
        fn visit_unit<E: serde::de::Error>(self) -> std::result::Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: serde::de::Error>(self) -> std::result::Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D2: serde::Deserializer<'de>>(
            self,
            d: D2,
        ) -> std::result::Result<Self::Value, D2::Error> {
            d.deserialize_any(self)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            seq: A,
        ) -> std::result::Result<Self::Value, A::Error> {
            let list = Vec::<T>::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))?;
            let mut pile = Pile::new(self.strict_type);
            for item in list {
                pile.push(item);
            }
            Ok(Some(pile))
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            map: A,
        ) -> std::result::Result<Self::Value, A::Error> {
            Pile::<T>::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Some)
        }
    }
    d.deserialize_option(V {
        strict_type,
        item: std::marker::PhantomData,
    })
}

impl BranchWire {
    fn into_branch(self, opts: FromDictOptions) -> Result<Branch> {
        // A stored branch carries the identity every writer (the reference
        // and this crate, in every mode) puts there; without it a restore
        // would invent a new conversation, so `{}` is not a branch.
        let (meta_key, metadata) = match (self.metadata, self.node_metadata) {
            (Some(m), _) => ("metadata", Some(m)),
            (None, Some(m)) => ("node_metadata", Some(m)),
            (None, None) => ("metadata", None),
        };
        let Some(id) = self.id else {
            return Err(BranchError::invalid(
                "id",
                "a stored branch needs its `id` (a UUID); this document has none",
            ));
        };
        let Some(created_at) = self.created_at else {
            return Err(BranchError::invalid(
                "created_at",
                "a stored branch needs its `created_at` timestamp; this document has none",
            ));
        };
        let mut metadata = metadata.unwrap_or_default();
        match metadata.shift_remove("lion_class") {
            None => {}
            Some(Value::String(c)) if c == lion_class::BRANCH || c == "Branch" => {}
            Some(_) => {
                return Err(BranchError::invalid(
                    format!("{meta_key}.lion_class"),
                    format!("is not the Branch class (`{}`)", lion_class::BRANCH),
                ));
            }
        }
        let view = match metadata.shift_remove("current_progression") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                Progression::from_value(&v)
                    .map_err(|e| BranchError::invalid("metadata.current_progression", e))?,
            ),
        };
        let element = Element {
            id,
            created_at,
            metadata,
        };

        // Messages: the pile's leading System is the system message. A
        // top-level `system` is redundant when the pile is present; alone,
        // it is the conversation's only message.
        let mut msgs = match self.messages {
            Some(pile) => {
                if let Some(sys) = &self.system {
                    if sys.kind() != crate::message::MessageKind::System {
                        return Err(BranchError::invalid("system", "is not a System message"));
                    }
                }
                MessageManager::from_pile(pile)
            }
            None => {
                let mut mm = MessageManager::new();
                if let Some(sys) = self.system {
                    if sys.kind() != crate::message::MessageKind::System {
                        return Err(BranchError::invalid("system", "is not a System message"));
                    }
                    mm.set_system(sys);
                }
                mm
            }
        };
        if view.is_some() {
            msgs.set_view(view);
        }

        let chat: Arc<dyn ChatModel> = match (opts.chat_model, self.chat_model) {
            (Some(live), _) => live,
            (None, Some(v)) => Arc::new(
                ModelConfig::from_dict(&v).map_err(|e| prefix_model_error("chat_model", e))?,
            ),
            (None, None) => default_chat_model()?,
        };
        let parse: Option<Arc<dyn ChatModel>> = match (opts.parse_model, self.parse_model) {
            (Some(live), _) => Some(live),
            (None, Some(v)) => Some(Arc::new(
                ModelConfig::from_dict(&v).map_err(|e| prefix_model_error("parse_model", e))?,
            )),
            (None, None) => None,
        };

        let config = match &self.log_config {
            Some(v) if crate::message::truthy(v) => Arc::new(DataLoggerConfig::from_value(v)?),
            _ => settings_log_config()?,
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
            acts: ActionManager::new(),
            models: ModelManager::new(chat, parse),
            logger,
            memory: None,
        }))
    }
}

fn prefix_model_error(field: &str, e: crate::model::ModelConfigError) -> BranchError {
    BranchError::invalid(field, e.to_string())
}
