//! The rendered request form of past instructions, kept between turns so
//! that a turn does not render again every instruction before it.
//!
//! An entry sits at the message's position in the compiled order and
//! holds the message id and a copy of exactly what a past instruction's
//! rendering reads (its text fields, context and images; not its tool
//! schemas or response format, which history leaves out). It is used only
//! when the id is the same and that copy equals the message's content as
//! compiled now, so an edited, replaced or re-ordered message, or one
//! whose content the compilation changes (the system fold, folded action
//! results, ReAct's de-duplication), is rendered afresh: an entry can be
//! unused, never stale. Keyed by position, a turn finds its history's
//! entries without hashing.

use branch_core::message::{ImageDetail, InstructionContent};
use serde_json::Value;
use uuid::Uuid;

use crate::error::{CompileError, ImageOwner};
use crate::render::{RenderedContent, render_instruction_as};

/// Rendered past instructions by position (see the module docs). Keep
/// one per conversation (a verb keeps it in the branch's extensions) and
/// pass it to [`super::compile_request_cached`].
#[derive(Debug, Default)]
pub struct RenderCache {
    // Boxed: most positions are replies, and an empty slot stays a word.
    slots: Vec<Option<Box<Entry>>>,
}

#[derive(Debug)]
struct Entry {
    id: Uuid,
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
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.slots.iter().all(Option::is_none)
    }

    /// The history rendering of message `id`, at position `at` of the
    /// compiled order, whose content, unchanged by the compilation, is `c`:
    /// the kept one when it was made for this id from equal content, else
    /// rendered now and kept. Errors are not kept.
    pub(crate) fn history(
        &mut self,
        at: usize,
        id: Uuid,
        c: &InstructionContent,
    ) -> Result<RenderedContent, CompileError> {
        if let Some(Some(e)) = self.slots.get(at) {
            if e.id == id && e.source.is(c) {
                return Ok(e.rendered.clone());
            }
        }
        let rendered = render_instruction_as(c, ImageOwner::Stored(id), true)?;
        if self.slots.len() <= at {
            self.slots.resize_with(at + 1, || None);
        }
        if let Some(slot) = self.slots.get_mut(at) {
            *slot = Some(Box::new(Entry {
                id,
                source: Source::of(c),
                rendered: rendered.clone(),
            }));
        }
        Ok(rendered)
    }

    /// Drops the entries past the `len` positions compiled now.
    pub(crate) fn truncate(&mut self, len: usize) {
        self.slots.truncate(len);
    }
}
