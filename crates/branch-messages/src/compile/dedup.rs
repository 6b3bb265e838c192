//! ReAct context de-duplication: during ReAct's later rounds the caller's
//! context is shown once, in the first history instruction that carries
//! it, and left out of later ones and of the current turn (in the request
//! copy only; stored messages keep their context).

use branch_core::message::{InstructionContent, Message, MessageKind};
use serde_json::Value;

use crate::yaml::minimal_yaml;

/// A context item as the instruction renders it: the comparison key.
pub(crate) fn render_item(v: &Value) -> String {
    minimal_yaml(&Value::Array(vec![v.clone()]))
}

/// The caller's context, rendered item by item.
pub(crate) struct Shown(Vec<String>);

impl Shown {
    pub(crate) fn new(context: &[Value]) -> Self {
        Self(context.iter().map(render_item).collect())
    }

    /// Whether `c` shows every item (as often as it is given) and has no
    /// plain content replacing its rendering.
    pub(crate) fn carried_by(&self, c: &InstructionContent) -> bool {
        if c.plain_content.as_deref().is_some_and(|p| !p.is_empty())
            || c.prompt_context.len() < self.0.len()
        {
            return false;
        }
        let mut held: Vec<String> = c.prompt_context.iter().map(render_item).collect();
        self.0
            .iter()
            .all(|text| match held.iter().position(|h| h == text) {
                Some(k) => {
                    held.remove(k);
                    true
                }
                None => false,
            })
    }

    /// `c`'s context without one held item per shown item. Only meaningful
    /// for an instruction that carries them.
    pub(crate) fn remove_from(&self, c: &InstructionContent) -> Vec<Value> {
        let mut held = c.prompt_context.clone();
        let mut rendered: Vec<String> = held.iter().map(render_item).collect();
        for text in &self.0 {
            if let Some(k) = rendered.iter().position(|h| h == text) {
                rendered.remove(k);
                held.remove(k);
            }
        }
        held
    }

    /// The positions (in `order`) of the history instructions that carry
    /// the context, oldest first.
    pub(crate) fn carriers<'a>(
        &self,
        history: impl Iterator<Item = (usize, &'a Message)>,
    ) -> Vec<usize> {
        history
            .filter(|(_, m)| m.kind() == MessageKind::Instruction)
            .filter(|(_, m)| m.as_instruction().is_some_and(|c| self.carried_by(c)))
            .map(|(i, _)| i)
            .collect()
    }
}

/// Which history positions lose the context, and the current turn's
/// context when it loses it too.
pub(crate) struct Plan {
    pub(crate) leave_out: Vec<usize>,
    pub(crate) current_context: Option<Vec<Value>>,
    pub(crate) shown: Shown,
}

pub(crate) fn plan(
    context: &[Value],
    history: &[(usize, &Message)],
    current: &InstructionContent,
) -> Option<Plan> {
    if context.is_empty() {
        return None;
    }
    let shown = Shown::new(context);
    let carriers = shown.carriers(history.iter().copied());
    // Nothing in the history shows the context yet: the current turn is
    // its first showing and keeps it.
    carriers.first()?;
    let current_context = shown
        .carried_by(current)
        .then(|| shown.remove_from(current));
    Some(Plan {
        leave_out: carriers[1..].to_vec(),
        current_context,
        shown,
    })
}
