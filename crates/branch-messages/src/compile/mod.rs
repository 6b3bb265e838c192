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
//! [`ToolMode::Native`] (beyond the reference) sends recorded tool calls
//! as the provider's own `tool_calls` / `tool` messages instead of step 1's
//! folding; see its documentation.
//!
//! Deliberate differences from the reference (docs/compat.md): an
//! instruction directly following another is kept (the reference drops
//! it), and pending action results reach the current turn even when the
//! system fold targets it (the reference loses them there).

mod cache;
mod dedup;
mod entry;
mod message;

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use branch_core::message::{InstructionContent, Message, MessageContent, MessageManager};
use branch_core::model::{ChatRequest, REASONING_METADATA_KEY, ReasoningBlock};
use serde_json::{Value, json};
use uuid::Uuid;

pub use cache::RenderCache;
pub use message::{RequestMessage, RequestRole};

use crate::error::{CompileError, ImageOwner};
use crate::render::RenderedContent;
use crate::yaml::minimal_yaml_stripped;
use entry::{Content, Entry, NativeCall, Output, Uncached};

/// How tool calls and results travel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ToolMode {
    /// The reference's way: tool schemas are rendered into the instruction
    /// text (`Tools:`), action requests are not sent, and results are
    /// folded into the next instruction's context.
    #[default]
    Prompt,
    /// The provider's own function calling: the current instruction does
    /// not render its tool schemas (send them as the request's `tools`),
    /// each recorded action request becomes a `tool_calls` entry of the
    /// model reply it follows and is answered right after by a `tool`
    /// message. A call without a recorded result is answered with an error
    /// result so the request stays valid. The call id is the request's
    /// `metadata.tool_call_id` when set (the provider's id), else its
    /// message id. With a system message but no instruction first in the
    /// history, the system text goes out as a leading `system` message.
    Native,
}

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
    /// Prompt-embedded tool calling (the reference's, the default) or
    /// native function calling.
    pub tool_mode: ToolMode,
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
    compile(msgs, current, opts, &mut Uncached)
}

/// [`compile_request`] as the model seam's request (its messages, no
/// fields yet), taking the compiled form of past messages from `cache`
/// and keeping new ones there: the same messages, and those the previous
/// turns compiled are the same shared ones, neither rendered nor copied
/// again, with their JSON kept (`ChatRequest::wire`) so that a body copies
/// them.
pub fn compile_request_cached(
    msgs: &MessageManager,
    current: &InstructionContent,
    opts: &CompileOptions<'_>,
    cache: &mut RenderCache,
) -> Result<ChatRequest, CompileError> {
    let compiled = compile(msgs, current, opts, cache)?;
    let mut request = ChatRequest::default();
    request.messages.reserve_exact(compiled.len());
    request.wire.reserve_exact(compiled.len());
    for (m, wire) in compiled {
        request.messages.push(m);
        request.wire.push(wire);
    }
    request.settled = cache.settled_json();
    Ok(request)
}

fn compile<O: Output>(
    msgs: &MessageManager,
    current: &InstructionContent,
    opts: &CompileOptions<'_>,
    out: &mut O,
) -> Result<Vec<O::Message>, CompileError> {
    out.begin(msgs.edit_stamp());
    let explicit = opts.progression.filter(|p| !p.is_empty());
    let order: &[Uuid] = explicit.unwrap_or(&msgs.progression().order);
    // The branch's own order in the reference's way of compiling can
    // continue an earlier compilation's settled history (see `Settled`).
    let extendable = explicit.is_none()
        && msgs.view().is_none()
        && opts.react_context.is_none()
        && opts.tool_mode == ToolMode::Prompt;
    let resumed = if extendable {
        out.resume(opts.context_blocks, order.len())
    } else {
        None
    };
    let (start, kept) = match resumed {
        Some((walked, kept)) => (walked, Some(kept)),
        None => (0, None),
    };
    // Ids the pile does not hold are skipped, as a stale curated view may
    // name removed messages. The progression mostly follows the pile's
    // insertion order: each id is first compared with the item after the
    // previous one, and looked up by hash only where they part.
    let pile = msgs.messages();
    let mut next = start;
    let history: Vec<(usize, &Message)> = order[start..]
        .iter()
        .enumerate()
        .filter_map(|(j, id)| {
            let found = match pile.get_index(next) {
                Some(m) if m.id() == *id => Some((next, m)),
                _ => pile.get_indexed(id),
            };
            found.map(|(at, m)| {
                next = at + 1;
                (start + j, m)
            })
        })
        .collect();

    let plan = opts
        .react_context
        .and_then(|ctx| dedup::plan(ctx, &history, current));
    // The current turn is copied only when the compilation changes it.
    let mut current = Content::Borrowed(current);
    if let Some(ctx) = plan.as_ref().and_then(|p| p.current_context.clone()) {
        current.to_mut().prompt_context = ctx;
    }

    let native = opts.tool_mode == ToolMode::Native;
    if native && !current.tool_schemas.is_empty() {
        // The schemas travel as the request's `tools`.
        current.to_mut().tool_schemas.clear();
    }
    // Native mode answers each call where it is made, from the results
    // recorded anywhere in the compiled history.
    let results: HashMap<Uuid, Option<Value>> = if native {
        history
            .iter()
            .filter_map(|(_, m)| match &m.content {
                MessageContent::ActionResponse(r) => {
                    r.action_request_id.map(|id| (id, r.output.clone()))
                }
                _ => None,
            })
            .collect()
    } else {
        HashMap::new()
    };
    let requested: HashSet<Uuid> = history
        .iter()
        .filter(|(_, m)| matches!(m.content, MessageContent::ActionRequest(_)))
        .map(|(_, m)| m.id())
        .collect();

    let mut entries = Vec::new();
    let mut pending: Vec<Value> = Vec::new();
    for &(i, m) in &history {
        match &m.content {
            MessageContent::ActionResponse(r)
                if native
                    && r.action_request_id
                        .is_some_and(|id| requested.contains(&id)) => {}
            MessageContent::ActionResponse(r) => pending.push(json!({
                "function": r.function,
                "arguments": r.arguments,
                "output": r.output.clone().unwrap_or(Value::Null),
            })),
            MessageContent::AssistantResponse(a) => {
                let reasoning = match m.element.metadata.get(REASONING_METADATA_KEY) {
                    None => Vec::new(),
                    Some(v) => ReasoningBlock::list_from_value(v).map_err(|e| {
                        CompileError::MalformedReasoning {
                            id: m.id(),
                            reason: e.to_string(),
                        }
                    })?,
                };
                entries.push(Entry::Assistant {
                    text: Cow::Borrowed(&a.assistant_response),
                    calls: Vec::new(),
                    reasoning,
                    stored: Some((i, m.id())),
                });
            }
            MessageContent::ActionRequest(r) if native => {
                let call = NativeCall {
                    id: match m.element.metadata.get("tool_call_id") {
                        Some(Value::String(id)) if !id.is_empty() => id.clone(),
                        _ => m.id().to_string(),
                    },
                    function: r.function.clone(),
                    arguments: r.arguments.clone(),
                    result: results.get(&m.id()).cloned(),
                };
                match entries.last_mut() {
                    Some(Entry::Assistant { calls, stored, .. }) => {
                        calls.push(call);
                        *stored = None;
                    }
                    _ => entries.push(Entry::Assistant {
                        text: Cow::Borrowed(""),
                        calls: vec![call],
                        reasoning: Vec::new(),
                        stored: None,
                    }),
                }
            }
            MessageContent::Instruction(c) => {
                // Rendered as history: without tool schemas and response
                // format (see `Entry`).
                let mut c = Content::Borrowed(c);
                if let Some(p) = plan.as_ref().filter(|p| p.leave_out.contains(&i)) {
                    c.to_mut().prompt_context = p.shown.remove_from(&c);
                }
                fold_pending(&mut c, &mut pending);
                entries.push(Entry::Instruction {
                    content: c,
                    owner: ImageOwner::Stored(m.id()),
                    history: true,
                    at: i,
                });
            }
            MessageContent::System(_) | MessageContent::ActionRequest(_) => {}
        }
    }
    fold_pending(&mut current, &mut pending);

    let mut entries = entry::merge(entries);
    let mut lead = Vec::new();

    // A resumed compilation's first entry, which carries the system text,
    // is among the settled ones.
    if let Some(system) = msgs
        .system()
        .and_then(Message::as_system)
        .filter(|_| kept.is_none())
    {
        // Written piece by piece: `format!` cost more than the copying,
        // on every turn that does not resume.
        let mut prefix = system.rendered();
        for (i, block) in opts.context_blocks.iter().enumerate() {
            if i > 0 {
                prefix.push('\n');
            }
            prefix.push_str(block);
        }
        let fold = |c: &mut Content<'_>| {
            let guidance = guidance_text(c.guidance.as_ref());
            let mut folded = String::with_capacity(prefix.len() + guidance.len());
            folded.push_str(&prefix);
            folded.push_str(&guidance);
            c.to_mut().guidance = Some(Value::String(folded));
        };
        match entries.first_mut() {
            None => fold(&mut current),
            Some(Entry::Instruction { content, .. }) => fold(content),
            Some(Entry::Assistant { .. }) if native => {
                lead.push(out.fresh(RequestMessage::new(
                    RequestRole::System,
                    RenderedContent::Text(prefix.clone()),
                )));
            }
            Some(Entry::Assistant { .. }) => {
                let id = history
                    .iter()
                    .find(|(_, m)| matches!(m.content, MessageContent::AssistantResponse(_)))
                    .map(|(_, m)| m.id())
                    .unwrap_or_default();
                return Err(CompileError::FirstNotInstruction { id });
            }
        }
    }
    let empty_error = has_real_content(&current).then(|| CompileError::EmptyOutgoingContent {
        instruction_len: current.instruction.as_ref().map_or(0, text_len),
        plain_content_len: current.plain_content.as_deref().map_or(0, str::len),
        has_images: !current.images.is_empty(),
    });
    // What no message added later can change: every entry up to the last
    // past instruction (a later reply may merge into a reply after it, and
    // action results after it fold into a later instruction).
    let settling = extendable
        .then(|| {
            entries
                .iter()
                .rposition(|e| matches!(e, Entry::Instruction { .. }))
        })
        .flatten();
    let mut rest = match settling {
        Some(last) => entries.split_off(last + 1),
        None => std::mem::take(&mut entries),
    };
    let walked = match entries.last() {
        Some(Entry::Instruction { at, .. }) => Some(at + 1),
        _ => None,
    };
    rest.push(Entry::Instruction {
        content: current,
        owner: ImageOwner::CurrentTurn,
        history: false,
        at: order.len(),
    });

    let (settled, _) = entry::render(entries, out)?;
    let (messages, last_empty) = entry::render(rest, out)?;
    out.compiled(order.len());
    if let Some(e) = empty_error.filter(|_| last_empty) {
        return Err(e);
    }
    if let Some(walked) = walked {
        out.settle(walked, &settled, kept.is_some(), opts.context_blocks);
    }
    let mut all = kept.unwrap_or_default();
    all.reserve_exact(lead.len() + settled.len() + messages.len());
    all.extend(lead);
    all.extend(settled);
    all.extend(messages);
    Ok(all)
}

/// Folds the pending action results into an instruction's context (see
/// [`fold_actions`]), copying the instruction only when there are some.
fn fold_pending(c: &mut Content<'_>, pending: &mut Vec<Value>) {
    if !pending.is_empty() {
        fold_actions(&mut c.to_mut().prompt_context, pending);
    }
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
