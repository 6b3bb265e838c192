//! A message's chat-completions JSON, serialized once and kept beside it,
//! so that a conversation's body copies its history instead of writing it
//! again on every turn.

use std::sync::Arc;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;

use super::ChatMessage;

/// The `{"role", "content", ...}` JSON of one shared message (what
/// serializing [`ChatMessage::to_value`] writes), held with the message it
/// was made from. While it exists the message is shared, so no one can
/// change it in place ([`Arc::make_mut`] copies a shared message): the JSON
/// stays the message's for as long as [`WireForm::json_for`] hands it out.
pub struct WireForm {
    message: Arc<ChatMessage>,
    json: Box<RawValue>,
}

impl WireForm {
    /// The form of `message`, serialized now; `None` for a message whose
    /// extra keys repeat `role` or `content` (its value form overwrites
    /// them in place; such a message is written the long way).
    pub fn of(message: &Arc<ChatMessage>) -> serde_json::Result<Option<Self>> {
        if message.extra.contains_key("role") || message.extra.contains_key("content") {
            return Ok(None);
        }
        Ok(Some(Self {
            message: Arc::clone(message),
            json: serde_json::value::to_raw_value(&Plain(message))?,
        }))
    }

    /// The JSON's length in bytes.
    pub fn len(&self) -> usize {
        self.json.get().len()
    }

    /// Whether the JSON is empty (never: it is one JSON object).
    pub fn is_empty(&self) -> bool {
        self.json.get().is_empty()
    }

    /// The JSON, when `message` is the very message (the same allocation)
    /// this form was made from.
    pub fn json_for(&self, message: &Arc<ChatMessage>) -> Option<&RawValue> {
        Arc::ptr_eq(&self.message, message).then_some(&*self.json)
    }
}

impl std::fmt::Debug for WireForm {
    // The message is printed where the request lists it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireForm")
            .field("json", &self.json.get().len())
            .finish()
    }
}

/// A message as its value form serializes, without building the value.
struct Plain<'a>(&'a ChatMessage);

impl Serialize for Plain<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let m = self.0;
        let mut out = s.serialize_map(Some(2 + m.extra.len()))?;
        out.serialize_entry("role", &m.role)?;
        out.serialize_entry("content", &m.content)?;
        for (k, v) in &m.extra {
            out.serialize_entry(k, v)?;
        }
        out.end()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_form_is_the_value_form_of_that_message_only() {
        let mut m = ChatMessage::assistant("hé \"there\"\n");
        m.extra.insert("tool_calls".into(), json!([{"id": "c1"}]));
        let shared = Arc::new(m);
        let form = WireForm::of(&shared).unwrap().unwrap();
        let json = form.json_for(&shared).unwrap();
        assert_eq!(
            json.get(),
            serde_json::to_string(&shared.to_value()).unwrap()
        );

        // An equal message elsewhere, or the message changed (copied on
        // write, as the form holds it), has no form here.
        let equal = Arc::new(ChatMessage::clone(&shared));
        assert!(form.json_for(&equal).is_none());
        let mut changed = Arc::clone(&shared);
        Arc::make_mut(&mut changed).content = "changed".into();
        assert!(form.json_for(&changed).is_none());
        assert!(form.json_for(&shared).is_some());

        let mut odd = ChatMessage::user("x");
        odd.extra.insert("content".into(), "y".into());
        assert!(WireForm::of(&Arc::new(odd)).unwrap().is_none());
    }
}
