//! History compilation: a branch's messages plus the current instruction
//! become the provider request's `messages` list, as the reference
//! compiles them (operations.md §1.2–§1.3).
//!
//! 1. Walk the progression (the explicit one, else the curated view, else
//!    the pile order). Action responses wait in *pending*; a model reply
//!    is an entry; an instruction is an entry with its tool schemas and
//!    response format removed and the pending action results
//!    (`{function, arguments, output}`) appended to its context; system
//!    messages and action requests are skipped.
//! 2. Results still pending after the walk go into the current turn.
//! 3. Consecutive model replies merge (`"\n\n"`).
//! 4. With a system message, its text + the context-provider blocks are
//!    glued (no separator) in front of the guidance of the oldest entry, or
//!    of the current turn when the history is empty.
//! 5. Each entry renders; empty renderings are skipped.
//!
//! Deliberate differences from the reference (NOTES-compat.md): an
//! instruction directly following another is kept (the reference drops
//! it), and pending action results reach the current turn even when the
//! system fold targets it (the reference loses them there).

mod dedup;

use branch_core::message::{InstructionContent, Message, MessageContent, MessageManager};
use branch_core::model::ChatMessage;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::error::{CompileError, ImageOwner};
use crate::render::{RenderedContent, render_instruction};
use crate::yaml::minimal_yaml_stripped;

/// Per-call inputs of a compilation besides the history.
#[derive(Debug, Clone, Copy, Default)]
pub struct CompileOptions<'a> {
    /// The message ids to compile from (the verb's `progression`
    /// argument). `None` or empty uses the branch's progression.
    pub progression: Option<&'a [Uuid]>,
    /// Context-provider blocks, joined with `"\n"` and glued after the
    /// system text. Ignored without a system message.
    pub context_blocks: &'a [String],
    /// ReAct's caller context during its later rounds: shown once, in the
    /// first history instruction carrying it (§1.3).
    pub react_context: Option<&'a [Value]>,
}

/// The role of a compiled message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestRole {
    /// An instruction.
    User,
    /// A model reply.
    Assistant,
}

impl RequestRole {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Assistant => "assistant",
        }
    }
}

/// One message of the request's `messages` list.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestMessage {
    /// Who speaks.
    pub role: RequestRole,
    /// What is said.
    pub content: RenderedContent,
}

impl RequestMessage {
    /// `{"role": ..., "content": ...}`.
    pub fn to_value(&self) -> Value {
        json!({"role": self.role.as_str(), "content": self.content.to_value()})
    }

    /// The model seam's message type.
    pub fn to_chat_message(&self) -> ChatMessage {
        ChatMessage::new(self.role.as_str(), self.content.to_value())
    }
}

impl From<RequestMessage> for ChatMessage {
    fn from(m: RequestMessage) -> Self {
        m.to_chat_message()
    }
}

/// A compiled entry before rendering.
enum Entry {
    Instruction(Box<InstructionContent>, ImageOwner),
    Assistant(String),
}

/// Compiles `current` (the instruction being sent, not yet in the branch)
/// with the history held by `msgs`.
///
/// Errors: the history starts with a model reply while a system message
/// must be folded into it; an image source is refused; the current turn
/// carries text but rendered empty.
pub fn compile_request(
    msgs: &MessageManager,
    current: &InstructionContent,
    opts: &CompileOptions<'_>,
) -> Result<Vec<RequestMessage>, CompileError> {
    let order: Vec<Uuid> = match opts.progression {
        Some(p) if !p.is_empty() => p.to_vec(),
        _ => msgs.progression().iter().copied().collect(),
    };
    // Ids the pile does not hold are skipped, as a stale curated view may
    // name removed messages.
    let history: Vec<(usize, &Message)> = order
        .iter()
        .enumerate()
        .filter_map(|(i, id)| msgs.messages().get(id).map(|m| (i, m)))
        .collect();

    let plan = opts
        .react_context
        .and_then(|ctx| dedup::plan(ctx, &history, current));
    let mut current = current.clone();
    if let Some(ctx) = plan.as_ref().and_then(|p| p.current_context.clone()) {
        current.prompt_context = ctx;
    }

    let mut entries = Vec::new();
    let mut pending: Vec<Value> = Vec::new();
    for &(i, m) in &history {
        match &m.content {
            MessageContent::ActionResponse(r) => pending.push(json!({
                "function": r.function,
                "arguments": r.arguments,
                "output": r.output.clone().unwrap_or(Value::Null),
            })),
            MessageContent::AssistantResponse(a) => {
                entries.push(Entry::Assistant(a.assistant_response.clone()));
            }
            MessageContent::Instruction(c) => {
                let mut c = c.clone();
                c.tool_schemas.clear();
                c.response_format = None;
                if let Some(p) = plan.as_ref().filter(|p| p.leave_out.contains(&i)) {
                    c.prompt_context = p.shown.remove_from(&c);
                }
                fold_actions(&mut c.prompt_context, &mut pending);
                entries.push(Entry::Instruction(c, ImageOwner::Stored(m.id())));
            }
            MessageContent::System(_) | MessageContent::ActionRequest(_) => {}
        }
    }
    fold_actions(&mut current.prompt_context, &mut pending);

    let mut entries = merge(entries);

    if let Some(system) = msgs.system().and_then(Message::as_system) {
        let prefix = format!("{}{}", system.rendered(), opts.context_blocks.join("\n"));
        let fold = |c: &mut InstructionContent| {
            let folded = format!("{prefix}{}", guidance_text(c.guidance.as_ref()));
            c.guidance = Some(Value::String(folded));
        };
        match entries.first_mut() {
            None => fold(&mut current),
            Some(Entry::Instruction(c, _)) => fold(c),
            Some(Entry::Assistant(_)) => {
                let id = history
                    .iter()
                    .find(|(_, m)| matches!(m.content, MessageContent::AssistantResponse(_)))
                    .map(|(_, m)| m.id())
                    .unwrap_or_default();
                return Err(CompileError::FirstNotInstruction { id });
            }
        }
    }
    entries.push(Entry::Instruction(
        Box::new(current.clone()),
        ImageOwner::CurrentTurn,
    ));

    let last = entries.len() - 1;
    let mut out = Vec::with_capacity(entries.len());
    for (i, e) in entries.into_iter().enumerate() {
        let (role, content) = match e {
            Entry::Assistant(t) => (RequestRole::Assistant, RenderedContent::Text(t)),
            Entry::Instruction(c, owner) => (RequestRole::User, render_instruction(&c, owner)?),
        };
        if content.is_empty() {
            if i == last && has_real_content(&current) {
                return Err(CompileError::EmptyOutgoingContent {
                    instruction_len: current.instruction.as_ref().map_or(0, text_len),
                    plain_content_len: current.plain_content.as_deref().map_or(0, str::len),
                    has_images: !current.images.is_empty(),
                });
            }
            continue;
        }
        out.push(RequestMessage { role, content });
    }
    Ok(out)
}

/// Appends the pending action results to a context, skipping any equal to
/// an item already there (including one appended just before).
fn fold_actions(context: &mut Vec<Value>, pending: &mut Vec<Value>) {
    for item in pending.drain(..) {
        if !context.contains(&item) {
            context.push(item);
        }
    }
}

/// The merge pass: consecutive model replies join with a blank line.
/// Every instruction is kept.
fn merge(entries: Vec<Entry>) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::with_capacity(entries.len());
    for e in entries {
        match (out.last_mut(), e) {
            (Some(Entry::Assistant(prev)), Entry::Assistant(t)) => {
                prev.push_str("\n\n");
                prev.push_str(&t);
            }
            (_, e) => out.push(e),
        }
    }
    out
}

/// Guidance as folded text: a string as is, another truthy value as its
/// stripped minimal YAML, a falsy one as nothing.
fn guidance_text(g: Option<&Value>) -> String {
    match g {
        None | Some(Value::Null) | Some(Value::Bool(false)) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) if a.is_empty() => String::new(),
        Some(Value::Object(o)) if o.is_empty() => String::new(),
        Some(Value::Number(n)) if n.as_f64() == Some(0.0) => String::new(),
        Some(v) => minimal_yaml_stripped(v),
    }
}

fn has_real_content(c: &InstructionContent) -> bool {
    c.instruction
        .as_ref()
        .is_some_and(|v| !matches!(v, Value::Null) && v != &Value::String(String::new()))
        || c.plain_content.as_deref().is_some_and(|p| !p.is_empty())
        || !c.images.is_empty()
}

fn text_len(v: &Value) -> usize {
    match v {
        Value::String(s) => s.chars().count(),
        other => other.to_string().len(),
    }
}

#[cfg(test)]
mod tests;
