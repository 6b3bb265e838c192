//! `MessageManager`: the message pile, its progression, the designated
//! system message, the curated view and the `on_message_added` callbacks.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;
use uuid::Uuid;

use super::{ActionResponseContent, Message, MessageContent, MessageKind};
use crate::error::{BranchError, Result};
use crate::participant::Participant;
use crate::pile::Pile;
use crate::progression::Progression;

/// A synchronous callback run for every message added. It must not block:
/// forward the message to a queue or task when work is needed.
pub type MessageCallback = Arc<dyn Fn(&Message) + Send + Sync>;

/// Owns one conversation's messages.
#[derive(Clone, Default)]
pub struct MessageManager {
    pile: Pile<Message>,
    system: Option<Uuid>,
    view: Option<Progression>,
    callbacks: Vec<(String, MessageCallback)>,
    stamp: EditStamp,
}

/// Names the state of a manager's existing messages (see
/// [`MessageManager::edit_stamp`]): drawn from one process-wide counter,
/// so no two managers, and no two edit states of one, share a value. A
/// clone draws a new one, as the copies go their own ways.
#[derive(Debug, PartialEq, Eq)]
struct EditStamp(u64);

static NEXT_STAMP: AtomicU64 = AtomicU64::new(1);

impl Default for EditStamp {
    fn default() -> Self {
        // Uniqueness is all that is needed: no ordering with other memory.
        Self(NEXT_STAMP.fetch_add(1, Ordering::Relaxed))
    }
}

impl Clone for EditStamp {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl std::fmt::Debug for MessageManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageManager")
            .field("messages", &self.pile.len())
            .field("system", &self.system)
            .field("view", &self.view.as_ref().map(Progression::len))
            .field(
                "callbacks",
                &self.callbacks.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl MessageManager {
    /// An empty manager.
    pub fn new() -> Self {
        Self {
            callbacks: Vec::with_capacity(1),
            ..Self::default()
        }
    }

    /// A manager over an existing pile. The designated system message is
    /// the first message of the pile when it is a System (lionagi-rs keeps
    /// the designation the reference loses on load; see docs/compat.md).
    pub fn from_pile(pile: Pile<Message>) -> Self {
        let system = pile
            .at(0)
            .filter(|m| m.kind() == MessageKind::System)
            .map(Message::id);
        Self {
            pile,
            system,
            view: None,
            callbacks: Vec::new(),
            stamp: EditStamp::default(),
        }
    }

    /// A manager over an existing pile with no system designation, as the
    /// reference builds one from a constructor message list.
    pub fn from_pile_undesignated(pile: Pile<Message>) -> Self {
        Self {
            pile,
            system: None,
            view: None,
            callbacks: Vec::new(),
            stamp: EditStamp::default(),
        }
    }

    /// The message pile.
    pub fn messages(&self) -> &Pile<Message> {
        &self.pile
    }

    /// The message with this id, mutably. Content edits do not run the
    /// `on_message_added` callbacks.
    pub fn get_mut(&mut self, id: &Uuid) -> Option<&mut Message> {
        self.edited();
        self.pile.get_mut(id)
    }

    /// A value that stays the same while no message already in this
    /// manager changes: adding messages keeps it; every way to edit,
    /// replace or remove one (and cloning the manager) gives a value never
    /// given before. Whatever is derived from the messages present when
    /// it was read still holds while it is unchanged (the request compiler
    /// keeps past messages' compiled form on that ground).
    pub fn edit_stamp(&self) -> u64 {
        self.stamp.0
    }

    fn edited(&mut self) {
        self.stamp = EditStamp::default();
    }

    /// Number of messages.
    pub fn len(&self) -> usize {
        self.pile.len()
    }

    /// Whether there are no messages.
    pub fn is_empty(&self) -> bool {
        self.pile.is_empty()
    }

    /// The designated system message.
    pub fn system(&self) -> Option<&Message> {
        self.system.and_then(|id| self.pile.get(&id))
    }

    /// The curated view, when one is set: the ids sent to the model.
    pub fn view(&self) -> Option<&Progression> {
        self.view.as_ref()
    }

    /// Sets or clears the curated view. Ids not in the pile are dropped and
    /// the system message, if any, is kept at its head.
    pub fn set_view(&mut self, view: Option<Progression>) {
        self.view = view;
        self.reconcile_view();
    }

    /// The active order: the curated view if set, else the pile's order.
    pub fn progression(&self) -> &Progression {
        self.view
            .as_ref()
            .unwrap_or_else(|| self.pile.progression())
    }

    /// Registers a named callback run for every message added.
    pub fn on_message_added(&mut self, name: impl Into<String>, cb: MessageCallback) {
        self.callbacks.push((name.into(), cb));
    }

    /// Names of the registered callbacks, in order.
    pub fn callback_names(&self) -> Vec<&str> {
        self.callbacks.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// Removes the callbacks with this name; returns how many were removed.
    pub fn remove_callback(&mut self, name: &str) -> usize {
        let before = self.callbacks.len();
        self.callbacks.retain(|(n, _)| n != name);
        before - self.callbacks.len()
    }

    /// Adds a message (a message whose id is present replaces it in place).
    /// A System added here becomes the designated system message. Returns
    /// the message's id.
    pub fn add_message(&mut self, message: Message) -> Uuid {
        let id = message.id();
        if message.kind() == MessageKind::System {
            let id = self.set_system(message);
            self.notify(&id);
            return id;
        }
        let (index, fresh) = self.pile.push_full(message);
        if fresh {
            if let Some(v) = self.view.as_mut() {
                v.order.push(id);
            }
        } else {
            self.edited();
        }
        if let Some(m) = self.pile.get_index(index) {
            for (_, cb) in &self.callbacks {
                cb(m);
            }
        }
        id
    }

    /// Adds several messages in order; returns their ids.
    pub fn add_messages(&mut self, messages: impl IntoIterator<Item = Message>) -> Vec<Uuid> {
        messages.into_iter().map(|m| self.add_message(m)).collect()
    }

    /// Makes `system` the system message. A previous one is removed and the
    /// new one is placed first in the order. This rewrites the pile rather
    /// than adding to the conversation, so the `on_message_added` callbacks
    /// do not run (as in the reference); [`MessageManager::add_message`] of
    /// a System runs them.
    pub fn set_system(&mut self, system: Message) -> Uuid {
        self.edited();
        let id = system.id();
        if let Some(old) = self.system.take() {
            if old != id {
                self.pile.remove(&old);
            }
        }
        if self.pile.contains(&id) {
            self.pile.remove(&id);
        }
        self.pile.push_front(system);
        self.system = Some(id);
        self.reconcile_view();
        id
    }

    /// Removes the system message, if any.
    pub fn remove_system(&mut self) -> Option<Message> {
        let id = self.system.take()?;
        self.edited();
        let m = self.pile.remove(&id);
        self.reconcile_view();
        m
    }

    /// Answers an action request: builds the ActionResponse, links the
    /// request to it (`action_response_id`) and adds it.
    pub fn add_action_response(
        &mut self,
        request_id: Uuid,
        output: Option<Value>,
        sender: Option<Participant>,
        recipient: Option<Participant>,
    ) -> Result<Uuid> {
        let req = self
            .pile
            .get(&request_id)
            .ok_or(BranchError::MissingActionRequest)?;
        let MessageContent::ActionRequest(rc) = &req.content else {
            return Err(BranchError::MissingActionRequest);
        };
        let response = Message::new(MessageContent::ActionResponse(Box::new(
            ActionResponseContent {
                function: rc.function.clone(),
                arguments: rc.arguments.clone(),
                output,
                action_request_id: Some(request_id),
                error: None,
            },
        )))
        .with_sender(sender)
        .with_recipient(recipient);
        let response_id = response.id();
        self.edited();
        if let Some(MessageContent::ActionRequest(rc)) =
            self.pile.get_mut(&request_id).map(|m| &mut m.content)
        {
            rc.action_response_id = Some(response_id);
        }
        Ok(self.add_message(response))
    }

    /// Removes every message but the system message.
    pub fn clear_messages(&mut self) {
        self.edited();
        let system = self.system.and_then(|id| self.pile.remove(&id));
        self.pile.clear();
        if let Some(s) = system {
            self.pile.push(s);
        }
        self.reconcile_view();
    }

    /// Drops messages after the first `len` (in logical order): how a failed
    /// turn is rolled back. The system message is never dropped.
    pub fn truncate(&mut self, len: usize) {
        self.edited();
        self.pile.truncate(len);
        if self.system.is_some_and(|id| !self.pile.contains(&id)) {
            self.system = None;
        }
        self.reconcile_view();
    }

    /// The last model reply, by logical order.
    pub fn last_response(&self) -> Option<&Message> {
        self.pile
            .iter()
            .rev()
            .find(|m| m.kind() == MessageKind::AssistantResponse)
    }

    /// The last instruction, by logical order.
    pub fn last_instruction(&self) -> Option<&Message> {
        self.pile
            .iter()
            .rev()
            .find(|m| m.kind() == MessageKind::Instruction)
    }

    fn notify(&self, id: &Uuid) {
        if self.callbacks.is_empty() {
            return;
        }
        if let Some(m) = self.pile.get(id) {
            for (_, cb) in &self.callbacks {
                cb(m);
            }
        }
    }

    /// Drops view ids no longer in the pile and keeps the system at its head.
    fn reconcile_view(&mut self) {
        let Some(view) = self.view.as_mut() else {
            return;
        };
        let pile = &self.pile;
        view.order.retain(|id| pile.contains(id));
        if let Some(sys) = self.system {
            view.order.retain(|id| *id != sys);
            view.order.insert(0, sys);
        }
    }

    pub(crate) fn set_view_raw(&mut self, view: Option<Progression>) {
        self.view = view;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{InstructionContent, SystemContent};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Adding keeps the edit stamp; every way to change, replace or remove
    /// a message present, and cloning, gives one never seen before.
    #[test]
    fn the_edit_stamp_changes_with_every_edit_and_not_on_add() {
        let mut mm = MessageManager::new();
        let mut seen = std::collections::HashSet::new();
        let mut fresh = |mm: &MessageManager| seen.insert(mm.edit_stamp());
        assert!(fresh(&mm));
        let stamp = mm.edit_stamp();
        let q = mm.add_message(Message::instruction(InstructionContent::default()));
        let req = mm.add_message(Message::action_request("f", Default::default()));
        assert_eq!(mm.edit_stamp(), stamp, "adding is not an edit");
        assert!(mm.get_mut(&q).is_some());
        assert!(fresh(&mm), "get_mut");
        let mut again = Message::instruction(InstructionContent::default());
        again.element.id = q;
        mm.add_message(again);
        assert!(fresh(&mm), "replaced in place");
        mm.add_action_response(req, None, None, None).unwrap();
        assert!(fresh(&mm), "a request linked to its response");
        mm.set_system(Message::system(SystemContent::new("s")));
        assert!(fresh(&mm), "set_system");
        mm.remove_system();
        assert!(fresh(&mm), "remove_system");
        mm.truncate(1);
        assert!(fresh(&mm), "truncate");
        mm.clear_messages();
        assert!(fresh(&mm), "clear");
        let copy = mm.clone();
        assert!(fresh(&copy), "clone");
        assert!(fresh(&MessageManager::from_pile(mm.messages().clone())));
    }

    #[test]
    fn system_replacement_reorders_like_the_reference() {
        let mut mm = MessageManager::new();
        mm.set_system(Message::system(SystemContent::new("a")));
        mm.add_message(Message::instruction(InstructionContent::default()));
        let second = mm.set_system(Message::system(SystemContent::new("b")));
        assert_eq!(mm.len(), 2);
        assert_eq!(mm.messages().at(0).unwrap().id(), second);
        let collection_kinds: Vec<_> = mm
            .messages()
            .iter_insertion_order()
            .map(|m| m.kind())
            .collect();
        assert_eq!(
            collection_kinds,
            [MessageKind::Instruction, MessageKind::System]
        );
    }

    #[test]
    fn callbacks_see_every_added_message() {
        let n = Arc::new(AtomicUsize::new(0));
        let mut mm = MessageManager::new();
        let n2 = n.clone();
        mm.on_message_added(
            "count",
            Arc::new(move |_| {
                n2.fetch_add(1, Ordering::SeqCst);
            }),
        );
        mm.add_message(Message::assistant("x"));
        let req = mm.add_message(Message::action_request("f", Default::default()));
        mm.add_action_response(req, Some(42.into()), None, None)
            .unwrap();
        assert_eq!(n.load(Ordering::SeqCst), 3);
        let MessageContent::ActionRequest(rc) = &mm.messages().get(&req).unwrap().content else {
            panic!("not a request")
        };
        assert!(rc.action_response_id.is_some());
        assert_eq!(mm.last_response().unwrap().as_assistant_text(), Some("x"));
    }

    #[test]
    fn clear_keeps_the_system() {
        let mut mm = MessageManager::new();
        mm.set_system(Message::system(SystemContent::new("a")));
        mm.add_message(Message::assistant("x"));
        mm.clear_messages();
        assert_eq!(mm.len(), 1);
        assert!(mm.system().is_some());
    }
}
