//! `grant_capabilities` / `revoke_capabilities` on a branch, and the
//! message callback that observes every assistant response.

use std::sync::Arc;

use branch_core::message::{DEFAULT_SYSTEM_MESSAGE, SystemContent};
use branch_core::{Branch, Message, MessageKind};

use crate::emission::emission_signals;
use crate::grant::Grant;
use crate::render::{strip_capability_block, with_capability_block};

/// The name of the `on_message_added` callback a grant installs.
pub const CAPABILITY_CALLBACK: &str = "capability_signals";

/// The grant held in the branch's extensions.
struct GrantSlot(Arc<Grant>);

/// Capability grants on a [`Branch`].
pub trait CapabilitiesExt {
    /// Grants `grant`, replacing any previous one.
    ///
    /// With `prompt`, the system text loses one balanced capability block
    /// (if it has one) and gains the freshly rendered block after a blank
    /// line; the System message is replaced by a new one (new id, no
    /// sender or recipient, no datetime), created if the branch had none.
    /// Unbalanced markers are left alone and no text outside the removed
    /// block is deleted.
    ///
    /// From now on every assistant response added to the branch, by any
    /// path, is scanned after its `MessageAdded` signal, and its
    /// `StructuredOutput` / `CapabilityViolation` / `EmissionRejected`
    /// signals go to the observer attached at that moment (nothing is
    /// scanned while none is attached). The verbs need not call anything.
    /// The branch name in rejections is the one at grant time.
    fn grant_capabilities(&mut self, grant: impl Into<Arc<Grant>>, prompt: bool);

    /// Clears the grant and stops the scanning. If there is a system
    /// message holding a balanced block, it is replaced by one without it
    /// (or by the default system text if nothing else remains). Returns
    /// the grant that was in force.
    fn revoke_capabilities(&mut self) -> Option<Arc<Grant>>;

    /// The grant in force.
    fn capabilities(&self) -> Option<Arc<Grant>>;
}

fn system_text(branch: &Branch) -> Option<String> {
    branch
        .system()
        .and_then(Message::as_system)
        .map(|c| match c.text() {
            Some(t) => t.to_owned(),
            None => c.system_message.to_string(),
        })
}

fn replace_system(branch: &mut Branch, text: String) {
    let system = Message::system(SystemContent::new(text))
        .with_sender(None)
        .with_recipient(None);
    branch.msgs_mut().set_system(system);
}

impl CapabilitiesExt for Branch {
    fn grant_capabilities(&mut self, grant: impl Into<Arc<Grant>>, prompt: bool) {
        let grant = grant.into();
        if prompt {
            let current = system_text(self).unwrap_or_default();
            replace_system(self, with_capability_block(&current, &grant));
        }
        let slot = self.observer_slot();
        let branch_id = self.id();
        let branch_name = self.name().unwrap_or("").to_owned();
        let observed = grant.clone();
        let msgs = self.msgs_mut();
        msgs.remove_callback(CAPABILITY_CALLBACK);
        msgs.on_message_added(
            CAPABILITY_CALLBACK,
            Arc::new(move |m: &Message| {
                if m.kind() != MessageKind::AssistantResponse {
                    return;
                }
                let Some(observer) = slot.get() else { return };
                for s in emission_signals(branch_id, &branch_name, &observed, m) {
                    observer.observe(s);
                }
            }),
        );
        self.extensions_mut().insert(GrantSlot(grant));
    }

    fn revoke_capabilities(&mut self) -> Option<Arc<Grant>> {
        let previous = self.extensions_mut().remove::<GrantSlot>().map(|g| g.0);
        self.msgs_mut().remove_callback(CAPABILITY_CALLBACK);
        if let Some(text) = system_text(self) {
            if let Some(stripped) = strip_capability_block(&text) {
                let text = if stripped.is_empty() {
                    DEFAULT_SYSTEM_MESSAGE.to_owned()
                } else {
                    stripped
                };
                replace_system(self, text);
            }
        }
        previous
    }

    fn capabilities(&self) -> Option<Arc<Grant>> {
        self.extensions().get::<GrantSlot>().map(|g| g.0.clone())
    }
}
