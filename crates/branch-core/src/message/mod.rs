//! The message model: the five kinds of a conversation and their envelope.
//!
//! Every message serializes with exactly the keys `id`, `created_at`,
//! `metadata`, `content`, `embedding`, `sender`, `recipient`, `channel` and
//! `role`, in that order. The kind travels in `metadata.lion_class`; `role`
//! is derived and ignored on input.

// Parsing of stored data: nothing read from outside may panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod content;
mod content_fields;
mod kind_metadata;
mod manager;
mod read;

pub(crate) use content::truthy;
pub use content::{
    ActionRequestContent, ActionResponseContent, AssistantResponseContent, DEFAULT_SYSTEM_MESSAGE,
    ImageDetail, InstructionContent, SystemContent,
};
pub use manager::{MessageCallback, MessageManager};

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::{Map, Value};
use uuid::Uuid;

use self::content_fields::ContentWire;
use crate::element::{Element, Finite, MetadataOut, lion_class};
use crate::participant::{Participant, Role};
use crate::pile::{MetaPlacement, Stored};

/// The kind of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageKind {
    /// The system prompt.
    System,
    /// A user instruction.
    Instruction,
    /// A model reply.
    AssistantResponse,
    /// A tool call requested by the model.
    ActionRequest,
    /// A tool result.
    ActionResponse,
}

impl MessageKind {
    /// The `lion_class` written for this kind.
    pub fn lion_class(self) -> &'static str {
        match self {
            MessageKind::System => lion_class::SYSTEM,
            MessageKind::Instruction => lion_class::INSTRUCTION,
            MessageKind::AssistantResponse => lion_class::ASSISTANT_RESPONSE,
            MessageKind::ActionRequest => lion_class::ACTION_REQUEST,
            MessageKind::ActionResponse => lion_class::ACTION_RESPONSE,
        }
    }

    /// The role this kind carries.
    pub fn role(self) -> Role {
        match self {
            MessageKind::System => Role::System,
            MessageKind::Instruction => Role::User,
            MessageKind::AssistantResponse => Role::Assistant,
            MessageKind::ActionRequest | MessageKind::ActionResponse => Role::Action,
        }
    }

    /// The short class name (`"Instruction"`, ...).
    pub fn class_name(self) -> &'static str {
        match self {
            MessageKind::System => "System",
            MessageKind::Instruction => "Instruction",
            MessageKind::AssistantResponse => "AssistantResponse",
            MessageKind::ActionRequest => "ActionRequest",
            MessageKind::ActionResponse => "ActionResponse",
        }
    }

    /// Recognises a full `lion_class` path or a short legacy class name.
    pub fn from_lion_class(s: &str) -> Option<Self> {
        // The paths written (by us and the reference) first: one compare.
        let written = match s {
            lion_class::SYSTEM => Some(MessageKind::System),
            lion_class::INSTRUCTION => Some(MessageKind::Instruction),
            lion_class::ASSISTANT_RESPONSE => Some(MessageKind::AssistantResponse),
            lion_class::ACTION_REQUEST => Some(MessageKind::ActionRequest),
            lion_class::ACTION_RESPONSE => Some(MessageKind::ActionResponse),
            _ => None,
        };
        if written.is_some() {
            return written;
        }
        // Else the name after the last dot; found by bytes, as
        // `rsplit('.')`'s searcher cost more than the rest of the lookup.
        let short = match s.bytes().rposition(|b| b == b'.') {
            Some(dot) => s.get(dot + 1..).unwrap_or(s),
            None => s,
        };
        Some(match short {
            "System" => MessageKind::System,
            "Instruction" => MessageKind::Instruction,
            "AssistantResponse" => MessageKind::AssistantResponse,
            "ActionRequest" => MessageKind::ActionRequest,
            "ActionResponse" => MessageKind::ActionResponse,
            _ => return None,
        })
    }
}

/// The kind-specific content of a message.
///
/// The larger contents are boxed so that a message stays small in the pile
/// (an idle branch must fit in 2 KiB; see docs/benchmarks.md).
#[derive(Debug, Clone, PartialEq)]
pub enum MessageContent {
    /// The system prompt.
    System(Box<SystemContent>),
    /// A user instruction.
    Instruction(Box<InstructionContent>),
    /// A model reply.
    AssistantResponse(AssistantResponseContent),
    /// A tool call requested by the model.
    ActionRequest(Box<ActionRequestContent>),
    /// A tool result.
    ActionResponse(Box<ActionResponseContent>),
}

impl MessageContent {
    /// The kind of this content.
    pub fn kind(&self) -> MessageKind {
        match self {
            MessageContent::System(_) => MessageKind::System,
            MessageContent::Instruction(_) => MessageKind::Instruction,
            MessageContent::AssistantResponse(_) => MessageKind::AssistantResponse,
            MessageContent::ActionRequest(_) => MessageKind::ActionRequest,
            MessageContent::ActionResponse(_) => MessageKind::ActionResponse,
        }
    }

    fn from_wire(kind: MessageKind, w: ContentWire) -> Result<Self, String> {
        let f = w.into_fields()?;
        Ok(match kind {
            MessageKind::System => MessageContent::System(Box::new(SystemContent::from_fields(f)?)),
            MessageKind::Instruction => {
                MessageContent::Instruction(InstructionContent::from_fields(f)?)
            }
            MessageKind::AssistantResponse => {
                MessageContent::AssistantResponse(AssistantResponseContent::from_fields(f)?)
            }
            MessageKind::ActionRequest => {
                MessageContent::ActionRequest(Box::new(ActionRequestContent::from_fields(f)?))
            }
            MessageKind::ActionResponse => {
                MessageContent::ActionResponse(Box::new(ActionResponseContent::from_fields(f)?))
            }
        })
    }
}

impl Serialize for MessageContent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            MessageContent::System(c) => c.serialize(s),
            MessageContent::Instruction(c) => c.serialize(s),
            MessageContent::AssistantResponse(c) => c.serialize(s),
            MessageContent::ActionRequest(c) => c.serialize(s),
            MessageContent::ActionResponse(c) => c.serialize(s),
        }
    }
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Identity, creation time and metadata.
    pub element: Element,
    /// What the message says.
    pub content: MessageContent,
    /// An optional embedding vector.
    pub embedding: Option<Vec<f64>>,
    /// Who sent it.
    pub sender: Option<Participant>,
    /// Who it is for.
    pub recipient: Option<Participant>,
    /// An optional channel name.
    pub channel: Option<String>,
}

impl Stored for Message {
    fn id(&self) -> Uuid {
        self.element.id
    }
}

impl Message {
    /// A new message with the reference's default sender and recipient for
    /// its kind: System `system` → `assistant`, AssistantResponse `unset` →
    /// `user`, everything else `unset` → `unset`.
    pub fn new(content: MessageContent) -> Self {
        let (sender, recipient) = match content.kind() {
            MessageKind::System => (Role::System, Role::Assistant),
            MessageKind::AssistantResponse => (Role::Unset, Role::User),
            _ => (Role::Unset, Role::Unset),
        };
        Self {
            element: Element::new(),
            content,
            embedding: None,
            sender: Some(sender.into()),
            recipient: Some(recipient.into()),
            channel: None,
        }
    }

    /// A system message.
    pub fn system(content: SystemContent) -> Self {
        Self::new(MessageContent::System(Box::new(content)))
    }

    /// An instruction.
    pub fn instruction(content: InstructionContent) -> Self {
        Self::new(MessageContent::Instruction(Box::new(content)))
    }

    /// A model reply with this text.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::new(MessageContent::AssistantResponse(
            AssistantResponseContent {
                assistant_response: text.into(),
            },
        ))
    }

    /// A tool call.
    pub fn action_request(function: impl Into<String>, arguments: Map<String, Value>) -> Self {
        Self::new(MessageContent::ActionRequest(Box::new(
            ActionRequestContent {
                function: function.into(),
                arguments,
                action_response_id: None,
            },
        )))
    }

    /// The id.
    pub fn id(&self) -> Uuid {
        self.element.id
    }

    /// The kind.
    pub fn kind(&self) -> MessageKind {
        self.content.kind()
    }

    /// The role.
    pub fn role(&self) -> Role {
        self.kind().role()
    }

    /// Sets the sender (builder style).
    pub fn with_sender(mut self, sender: impl Into<Option<Participant>>) -> Self {
        self.sender = normalize(sender.into());
        self
    }

    /// Sets the recipient (builder style).
    pub fn with_recipient(mut self, recipient: impl Into<Option<Participant>>) -> Self {
        self.recipient = normalize(recipient.into());
        self
    }

    /// The system content, if this is the system message.
    pub fn as_system(&self) -> Option<&SystemContent> {
        match &self.content {
            MessageContent::System(c) => Some(c),
            _ => None,
        }
    }

    /// The instruction content, if this is an instruction.
    pub fn as_instruction(&self) -> Option<&InstructionContent> {
        match &self.content {
            MessageContent::Instruction(c) => Some(c),
            _ => None,
        }
    }

    /// The reply text, if this is a model reply.
    pub fn as_assistant_text(&self) -> Option<&str> {
        match &self.content {
            MessageContent::AssistantResponse(c) => Some(&c.assistant_response),
            _ => None,
        }
    }

    /// A copy with a new id and creation time, `metadata.clone_from` set to
    /// this message's id (the reference's message clone).
    pub fn clone_fresh(&self) -> Self {
        let mut m = self.clone();
        m.element = Element::new();
        m.element.metadata = self.element.metadata.clone();
        m.element
            .metadata
            .insert("clone_from".into(), Value::String(self.id().to_string()));
        m
    }

    /// Loads one message from stored data (its class chosen by
    /// `metadata.lion_class`).
    pub fn from_value(v: &Value) -> crate::Result<Self> {
        crate::load::from_value(v)
    }

    /// Writes the message as the reference's `to_dict` does.
    pub fn to_value(&self) -> crate::Result<Value> {
        crate::load::to_value(self, "message")
    }
}

fn normalize(p: Option<Participant>) -> Option<Participant> {
    match p {
        Some(Participant::Name(n)) if n.is_empty() => None,
        other => other,
    }
}

/// Writes a message with a metadata placement.
pub(crate) struct MessageOut<'a> {
    pub(crate) msg: &'a Message,
    pub(crate) meta: MetaPlacement<'a>,
}

impl Serialize for MessageOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let msg = self.msg;
        let meta = MetadataOut {
            metadata: &msg.element.metadata,
            lion_class: msg.kind().lion_class(),
        };
        let mut m = s.serialize_map(Some(9))?;
        m.serialize_entry("id", &msg.element.id)?;
        m.serialize_entry("created_at", &Finite(msg.element.created_at))?;
        if self.meta == MetaPlacement::Head {
            m.serialize_entry("metadata", &meta)?;
        }
        m.serialize_entry("content", &msg.content)?;
        match &msg.embedding {
            None => m.serialize_entry("embedding", &())?,
            Some(e) => m.serialize_entry(
                "embedding",
                &e.iter().map(|f| Finite(*f)).collect::<Vec<_>>(),
            )?,
        }
        m.serialize_entry("sender", &msg.sender)?;
        m.serialize_entry("recipient", &msg.recipient)?;
        m.serialize_entry("channel", &msg.channel)?;
        m.serialize_entry("role", msg.role().as_str())?;
        if let MetaPlacement::Tail(key) = self.meta {
            m.serialize_entry(key, &meta)?;
        }
        m.end()
    }
}

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        MessageOut {
            msg: self,
            meta: MetaPlacement::Head,
        }
        .serialize(s)
    }
}
