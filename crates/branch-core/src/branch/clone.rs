//! `clone()` (ADR-0016 D5): a distinct branch carrying the conversation.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use uuid::Uuid;

use super::builder::settings_log_config;
use super::{Branch, ModelManager, Parts};
use crate::action::ActionManager;
use crate::element::Element;
use crate::error::Result;
use crate::log::DataLogger;
use crate::message::{Message, MessageContent, MessageManager};
use crate::metadata::Metadata;
use crate::model::ChatModel;
use crate::participant::Participant;
use crate::pile::Pile;
use crate::progression::Progression;

impl Branch {
    /// A new branch with a copy of this conversation: every message cloned
    /// (new ids, `metadata.clone_from` = the original id, sender = this
    /// branch, recipient = the clone), the same tools, the same model
    /// objects (a CLI model, which keeps per-conversation state, is copied
    /// with its own id: [`ChatModel::fork`]), and `metadata.clone_from` describing
    /// this branch. Logs, log configuration, memory, extensions, named
    /// operations, observer and session ownership are not carried over.
    ///
    /// Unlike the reference, the system message appears once, and action
    /// requests and responses stay linked to each other's clones (see
    /// docs/compat.md).
    ///
    /// The clone's logger takes the settings' configuration, so malformed
    /// `LOG_*` settings are its error
    /// ([`BranchError::InvalidLogConfig`](crate::BranchError::InvalidLogConfig)).
    pub fn clone_branch(&self) -> Result<Branch> {
        self.clone_branch_as(Participant::Id(self.id()))
    }

    /// [`Branch::clone_branch`] with every cloned message sent by `sender`.
    pub fn clone_branch_with_sender(&self, sender: Uuid) -> Result<Branch> {
        self.clone_branch_as(Participant::Id(sender))
    }

    fn clone_branch_as(&self, sender: Participant) -> Result<Branch> {
        let log_config = settings_log_config()?;
        let clone_id = Uuid::new_v4();
        let source_order: Vec<Value> = self
            .messages()
            .progression()
            .iter()
            .map(|id| Value::String(id.to_string()))
            .collect();
        let clone_from = serde_json::json!({
            "id": self.id().to_string(),
            "user": self.user().map_or_else(|| "None".to_owned(), ToString::to_string),
            "created_at": self.created_at(),
            "progression": source_order,
        });
        let mut metadata = Metadata::new();
        metadata.insert("clone_from".into(), clone_from);

        let mut id_map: HashMap<Uuid, Uuid> = HashMap::with_capacity(self.messages().len());
        let mut cloned: Vec<Message> = Vec::with_capacity(self.messages().len());
        for m in self.messages().iter() {
            let mut c = m.clone_fresh();
            c.sender = Some(sender.clone());
            c.recipient = Some(Participant::Id(clone_id));
            id_map.insert(m.id(), c.id());
            cloned.push(c);
        }
        for c in &mut cloned {
            match &mut c.content {
                MessageContent::ActionRequest(rc) => {
                    if let Some(r) = rc.action_response_id.and_then(|r| id_map.get(&r)) {
                        rc.action_response_id = Some(*r);
                    }
                }
                MessageContent::ActionResponse(rc) => {
                    if let Some(r) = rc.action_request_id.and_then(|r| id_map.get(&r)) {
                        rc.action_request_id = Some(*r);
                    }
                }
                _ => {}
            }
        }
        let system_id = self.system().and_then(|s| id_map.get(&s.id()).copied());
        let mut pile = Pile::new(false);
        for c in cloned {
            pile.push(c);
        }
        let mut msgs = if system_id.is_some() {
            MessageManager::from_pile(pile)
        } else {
            MessageManager::from_pile_undesignated(pile)
        };
        if let Some(view) = self.msgs.view() {
            let mapped = view.iter().filter_map(|id| id_map.get(id).copied());
            msgs.set_view_raw(Some(Progression::from_ids(mapped)));
        }

        let copy = |m: &Arc<dyn ChatModel>| if m.is_cli() { m.fork() } else { m.clone() };
        let chat = copy(self.models.chat());
        let parse = (!self.models.parse_is_chat()).then(|| copy(self.models.parse()));

        let mut acts = ActionManager::new();
        for t in self.acts.iter() {
            acts.adopt(t.clone());
        }
        let element = Element {
            id: clone_id,
            created_at: crate::element::now(),
            metadata,
        };
        Ok(Branch::assemble(Parts {
            element,
            user: self.user.clone(),
            name: None,
            msgs,
            acts,
            models: ModelManager::new(chat, parse),
            logger: DataLogger::new(log_config),
            memory: None,
        }))
    }
}
