//! Turning an assistant message into capability signals: each JSON block
//! is ignored, a violation, a rejection or a validated bundle.

use branch_core::{Branch, CapabilityViolation, EmissionRejected, Message, MessageKind, Signal};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::ext::CapabilitiesExt;
use crate::extract::json_blocks;
use crate::grant::Grant;

/// What one assistant text carried, block by block, in text order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Extraction {
    /// Validated bundles, keys in the grant's field order.
    pub bundles: Vec<Map<String, Value>>,
    /// Blocks mixing granted and ungranted keys.
    pub violations: Vec<CapabilityViolation>,
    /// Blocks of granted keys that failed validation.
    pub rejections: Vec<EmissionRejected>,
}

impl Extraction {
    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.bundles.is_empty() && self.violations.is_empty() && self.rejections.is_empty()
    }
}

/// A Pydantic-shaped error text: `"{n} validation error(s) for {Model}"`,
/// then per error its location (`key` or `key.path.0`) and, indented, the
/// message.
fn error_text(model: &str, errors: &[(String, String)]) -> String {
    let n = errors.len();
    let mut text = format!(
        "{n} validation error{} for {model}",
        if n == 1 { "" } else { "s" }
    );
    for (loc, msg) in errors {
        text.push('\n');
        text.push_str(loc);
        text.push_str("\n  ");
        text.push_str(msg);
    }
    text
}

fn classify(block: Map<String, Value>, grant: &Grant, branch_name: &str, out: &mut Extraction) {
    let mut indices = Vec::with_capacity(block.len());
    let mut offending = Vec::new();
    for key in block.keys() {
        match grant.index_of(key) {
            Some(i) => indices.push(i),
            None => offending.push(key.clone()),
        }
    }
    if indices.is_empty() {
        // Not a capability emission at all.
        return;
    }
    if !offending.is_empty() {
        offending.sort();
        out.violations.push(CapabilityViolation {
            offending,
            allowed: grant.allowed(),
            block: Some(block),
        });
        return;
    }
    indices.sort_unstable();
    let mut errors = Vec::new();
    for &i in &indices {
        let field = &grant.fields()[i];
        let value = &block[field.name()];
        for e in grant.validator(i).iter_errors(value) {
            let mut loc = field.name().to_owned();
            for seg in e.instance_path().as_str().split('/').skip(1) {
                loc.push('.');
                loc.push_str(&seg.replace("~1", "/").replace("~0", "~"));
            }
            errors.push((loc, e.to_string()));
        }
    }
    if errors.is_empty() {
        let mut bundle = Map::with_capacity(indices.len());
        for &i in &indices {
            let name = grant.fields()[i].name();
            bundle.insert(name.to_owned(), block[name].clone());
        }
        out.bundles.push(bundle);
    } else {
        out.rejections.push(EmissionRejected {
            branch_name: branch_name.to_owned(),
            error: error_text(grant.model_name(), &errors),
            block: Some(block),
        });
    }
}

/// Classifies every JSON block of `text` against `grant` (the reference's
/// `attempt_extract`, with `branch_name` for rejections: `""` there).
/// Observation only: nothing is executed. Never panics; hostile input
/// (unterminated fences, huge or deeply nested text) yields what parses.
pub fn extract_emissions(text: &str, grant: &Grant, branch_name: &str) -> Extraction {
    let mut out = Extraction::default();
    for block in json_blocks(text) {
        if let Value::Object(m) = block {
            if !m.is_empty() {
                classify(m, grant, branch_name, &mut out);
            }
        }
    }
    out
}

/// The signals an assistant message produces under `grant`: every
/// `StructuredOutput`, then every `CapabilityViolation`, then every
/// `EmissionRejected`, as the reference emits them.
pub fn emission_signals(
    branch_id: Uuid,
    branch_name: &str,
    grant: &Grant,
    message: &Message,
) -> Vec<Signal> {
    let Some(text) = message.as_assistant_text() else {
        return Vec::new();
    };
    if message.kind() != MessageKind::AssistantResponse {
        return Vec::new();
    }
    let ex = extract_emissions(text, grant, branch_name);
    let grant_name = grant.name().map(str::to_owned);
    let mut signals =
        Vec::with_capacity(ex.bundles.len() + ex.violations.len() + ex.rejections.len());
    signals.extend(ex.bundles.into_iter().map(|data| Signal::StructuredOutput {
        branch_id,
        grant_name: grant_name.clone(),
        data,
    }));
    signals.extend(
        ex.violations
            .into_iter()
            .map(|violation| Signal::CapabilityViolation {
                branch_id,
                violation,
            }),
    );
    signals.extend(
        ex.rejections
            .into_iter()
            .map(|rejection| Signal::EmissionRejected {
                branch_id,
                rejection,
            }),
    );
    signals
}

/// The capability signals of `message` on `branch`: empty unless the
/// branch has a grant and the message is an assistant response. Pure: it
/// delivers nothing (granted branches deliver automatically; see
/// [`CapabilitiesExt::grant_capabilities`]).
pub fn observe_assistant_message(branch: &Branch, message: &Message) -> Vec<Signal> {
    match branch.capabilities() {
        Some(grant) => emission_signals(branch.id(), branch.name().unwrap_or(""), &grant, message),
        None => Vec::new(),
    }
}
