//! Reading a stored message: its fields straight into a [`Message`].
//!
//! serde's derive read the fields into a wire struct of about 300 bytes,
//! moved it out through `object_only`'s adapter and then took it apart
//! into the message: two large copies and a layer of dispatch for each of
//! a history's messages. Read here, each field goes to its own reader as
//! its key arrives, and the message is built once. What is read or refused
//! is what the derive read or refused, errors and their order included:
//! an unknown or a repeated key fails as it is read, with the derive's
//! words, and only an object is a message. (A kind's or a content's error
//! read from text now carries serde_json's position, as a field's did.)

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use uuid::Uuid;

use super::content_fields::ContentWire;
use super::kind_metadata::{ClassRead, KindMetadata};
use super::{Message, MessageContent};
use crate::element::{self, Element};
use crate::parsed_json::Checked;
use crate::participant::{Participant, Role, de_participant};
use crate::progression::de_opt_created_at;

/// The keys a message may have, in the order the derive named them.
const FIELDS: &[&str] = &[
    "id",
    "created_at",
    "metadata",
    "node_metadata",
    "content",
    "embedding",
    "sender",
    "recipient",
    "channel",
    "role",
];

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(MessageVisitor)
    }
}

struct MessageVisitor;

/// Refuses a field's key that comes a second time (its slot is `None`
/// until the first), in serde's words and before the value is read, as
/// the derive refuses it: a repeated key is reported as repeated even when
/// its second value is also malformed.
fn first<T, E: de::Error>(slot: &Option<T>, name: &'static str) -> Result<(), E> {
    match slot {
        Some(_) => Err(E::duplicate_field(name)),
        None => Ok(()),
    }
}

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = Message;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Message, A::Error> {
        let mut id = None;
        let mut created_at = None;
        let mut metadata = None;
        let mut node_metadata = None;
        let mut content = None;
        let mut embedding = None;
        let mut sender = None;
        let mut recipient = None;
        let mut channel = None;
        let mut role = false;
        while let Some(key) = map.next_key::<Field>()? {
            match key {
                Field::Id => {
                    first(&id, "id")?;
                    id = Some(map.next_value::<OptUuid>()?.0);
                }
                Field::CreatedAt => {
                    first(&created_at, "created_at")?;
                    created_at = Some(map.next_value::<OptCreatedAt>()?.0);
                }
                Field::Metadata => {
                    first(&metadata, "metadata")?;
                    metadata = Some(map.next_value::<Option<KindMetadata>>()?);
                }
                Field::NodeMetadata => {
                    first(&node_metadata, "node_metadata")?;
                    node_metadata = Some(map.next_value::<Option<KindMetadata>>()?);
                }
                Field::Content => {
                    first(&content, "content")?;
                    content = Some(map.next_value::<ContentWire>()?);
                }
                Field::Embedding => {
                    first(&embedding, "embedding")?;
                    embedding = Some(map.next_value::<Option<Vec<f64>>>()?);
                }
                Field::Sender => {
                    first(&sender, "sender")?;
                    sender = Some(map.next_value::<Party>()?.0);
                }
                Field::Recipient => {
                    first(&recipient, "recipient")?;
                    recipient = Some(map.next_value::<Party>()?.0);
                }
                Field::Channel => {
                    first(&channel, "channel")?;
                    channel = Some(map.next_value::<Option<String>>()?);
                }
                Field::Role => {
                    if role {
                        return Err(de::Error::duplicate_field("role"));
                    }
                    // Derived from the kind, so ignored; walked as a `Value`
                    // reads it (refused where a `Value` would be), without
                    // being built.
                    map.next_value::<Option<Checked>>()?;
                    role = true;
                }
            }
        }
        let KindMetadata { class, rest } = metadata
            .flatten()
            .or(node_metadata.flatten())
            .unwrap_or_default();
        let kind = match class {
            Some(ClassRead::Kind(kind)) => kind,
            Some(ClassRead::Unknown(class)) => {
                return Err(de::Error::custom(format!(
                    "`{class}` is not a message class"
                )));
            }
            Some(ClassRead::NotAString) => {
                return Err(de::Error::custom("`metadata.lion_class` must be a string"));
            }
            None => {
                return Err(de::Error::custom(
                    "a message needs `metadata.lion_class` to tell its kind",
                ));
            }
        };
        let content = MessageContent::from_wire(kind, content.unwrap_or_default())
            .map_err(de::Error::custom)?;
        let unset = || Some(Participant::Role(Role::Unset));
        Ok(Message {
            element: Element {
                id: id.flatten().unwrap_or_else(Uuid::new_v4),
                created_at: created_at.flatten().unwrap_or_else(element::now),
                metadata: rest,
            },
            content,
            embedding: embedding.flatten(),
            sender: sender.unwrap_or_else(unset),
            recipient: recipient.unwrap_or_else(unset),
            channel: channel.flatten(),
        })
    }
}

enum Field {
    Id,
    CreatedAt,
    Metadata,
    NodeMetadata,
    Content,
    Embedding,
    Sender,
    Recipient,
    Channel,
    Role,
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct K;
        impl Visitor<'_> for K {
            type Value = Field;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("field identifier")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Field, E> {
                Ok(match s {
                    "id" => Field::Id,
                    "created_at" => Field::CreatedAt,
                    "metadata" => Field::Metadata,
                    "node_metadata" => Field::NodeMetadata,
                    "content" => Field::Content,
                    "embedding" => Field::Embedding,
                    "sender" => Field::Sender,
                    "recipient" => Field::Recipient,
                    "channel" => Field::Channel,
                    "role" => Field::Role,
                    other => return Err(E::unknown_field(other, FIELDS)),
                })
            }
        }
        d.deserialize_identifier(K)
    }
}

/// `id`, read by [`element::de_opt_uuid`].
struct OptUuid(Option<Uuid>);

impl<'de> Deserialize<'de> for OptUuid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        element::de_opt_uuid(d).map(OptUuid)
    }
}

/// `created_at`, read by [`de_opt_created_at`].
struct OptCreatedAt(Option<f64>);

impl<'de> Deserialize<'de> for OptCreatedAt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        de_opt_created_at(d).map(OptCreatedAt)
    }
}

/// A sender or recipient, read by [`de_participant`].
struct Party(Option<Participant>);

impl<'de> Deserialize<'de> for Party {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        de_participant(d).map(Party)
    }
}
