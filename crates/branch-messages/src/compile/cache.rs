//! The rendered request form of past instructions, kept between turns so
//! that a turn does not render again every instruction before it.
//!
//! An entry is keyed by the message id and holds a copy of exactly what a
//! past instruction's rendering reads (its text fields, context and images;
//! not its tool schemas or response format, which history leaves out). It
//! is used only when that copy equals the message's content as compiled
//! now, so an edited, replaced or re-ordered message, or one whose context
//! the compilation changes (the system fold, folded action results, ReAct's
//! de-duplication), is rendered afresh: an entry can be unused, never
//! stale.

use std::collections::HashMap;

use branch_core::message::{ImageDetail, InstructionContent};
use serde_json::Value;
use uuid::Uuid;

use crate::error::{CompileError, ImageOwner};
use crate::render::{RenderedContent, render_instruction_as};

/// Rendered past instructions by message id (see the module docs). Keep
/// one per conversation (a verb keeps it in the branch's extensions) and
/// pass it to [`super::compile_request_cached`].
#[derive(Debug, Default)]
pub struct RenderCache {
    entries: HashMap<Uuid, Entry>,
}

#[derive(Debug)]
struct Entry {
    source: Source,
    rendered: RenderedContent,
}

/// What rendering an instruction as history reads.
#[derive(Debug, PartialEq)]
struct Source {
    instruction: Option<Value>,
    guidance: Option<Value>,
    prompt_context: Vec<Value>,
    plain_content: Option<String>,
    images: Vec<String>,
    image_detail: Option<ImageDetail>,
}

impl Source {
    fn of(c: &InstructionContent) -> Self {
        Self {
            instruction: c.instruction.clone(),
            guidance: c.guidance.clone(),
            prompt_context: c.prompt_context.clone(),
            plain_content: c.plain_content.clone(),
            images: c.images.clone(),
            image_detail: c.image_detail,
        }
    }

    fn is(&self, c: &InstructionContent) -> bool {
        self.instruction == c.instruction
            && self.guidance == c.guidance
            && self.prompt_context == c.prompt_context
            && self.plain_content == c.plain_content
            && self.images == c.images
            && self.image_detail == c.image_detail
    }
}

impl RenderCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many renderings are kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The history rendering of message `id` whose content, unchanged by
    /// the compilation, is `c`: the kept one when it was made from equal
    /// content, else rendered now and kept. Errors are not kept.
    pub(crate) fn history(
        &mut self,
        id: Uuid,
        c: &InstructionContent,
    ) -> Result<RenderedContent, CompileError> {
        if let Some(e) = self.entries.get(&id).filter(|e| e.source.is(c)) {
            return Ok(e.rendered.clone());
        }
        let rendered = render_instruction_as(c, ImageOwner::Stored(id), true)?;
        self.entries.insert(
            id,
            Entry {
                source: Source::of(c),
                rendered: rendered.clone(),
            },
        );
        Ok(rendered)
    }

    /// Drops the entries of messages no longer compiled, once they
    /// outnumber the `live` ones (so pruning costs nothing per turn).
    pub(crate) fn prune(&mut self, live: &[Uuid]) {
        if self.entries.len() <= live.len().saturating_mul(2).saturating_add(64) {
            return;
        }
        let keep: std::collections::HashSet<&Uuid> = live.iter().collect();
        self.entries.retain(|id, _| keep.contains(id));
    }
}
