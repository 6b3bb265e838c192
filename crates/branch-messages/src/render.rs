//! The text (or content parts) a provider sees for each message kind.

use branch_core::message::{
    ActionRequestContent, ActionResponseContent, ImageDetail, InstructionContent, Message,
    MessageContent,
};
use serde_json::{Value, json};

use crate::error::{CompileError, ImageOwner};
use crate::response_format::ResponseFormat;
pub use crate::response_format::banner_with_example;
use crate::yaml::minimal_yaml_stripped;

/// A rendered message body: text, or content parts when images are
/// attached.
#[derive(Debug, Clone, PartialEq)]
pub enum RenderedContent {
    /// Plain prompt text.
    Text(String),
    /// `[{"type": "text", ...}, {"type": "image_url", ...}, ...]`.
    Parts(Vec<Value>),
}

impl RenderedContent {
    /// Whether nothing would be sent.
    pub fn is_empty(&self) -> bool {
        match self {
            Self::Text(t) => t.is_empty(),
            Self::Parts(p) => p.is_empty(),
        }
    }

    /// The text, when this is plain text.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Self::Text(t) => Some(t),
            Self::Parts(_) => None,
        }
    }

    /// The provider's `content` value.
    pub fn to_value(&self) -> Value {
        match self {
            Self::Text(t) => Value::String(t.clone()),
            Self::Parts(p) => Value::Array(p.clone()),
        }
    }

    /// The provider's `content` value, without copying.
    pub fn into_value(self) -> Value {
        match self {
            Self::Text(t) => Value::String(t),
            Self::Parts(p) => Value::Array(p),
        }
    }

    /// Appends text to the body (to the last text part when there are
    /// parts).
    pub fn push_text(&mut self, extra: &str) {
        match self {
            Self::Text(t) => t.push_str(extra),
            Self::Parts(parts) => {
                if let Some(Value::String(t)) = parts
                    .iter_mut()
                    .rev()
                    .find(|p| p.get("type").and_then(Value::as_str) == Some("text"))
                    .and_then(|p| p.get_mut("text"))
                {
                    t.push_str(extra);
                }
            }
        }
    }
}

/// The text of an instruction without its images: `plain_content` when
/// set; otherwise the minimal-YAML document of `Guidance`, `Instruction`,
/// `Context`, `Tools`, `ResponseSchema` (typed formats only) and
/// `ResponseFormat` (the banner), empty values dropped.
///
/// An instruction with nothing to show renders `""` (the reference sends
/// `"{}"`; see docs/compat.md).
pub fn instruction_text(c: &InstructionContent) -> String {
    instruction_text_as(c, false)
}

/// [`instruction_text`]; `history` leaves out the tool schemas and the
/// response format, as a past instruction is compiled.
pub(crate) fn instruction_text_as(c: &InstructionContent, history: bool) -> String {
    use crate::yaml::Entry;
    if let Some(p) = c.plain_content.as_deref().filter(|p| !p.is_empty()) {
        return p.to_owned();
    }
    let format = c
        .response_format
        .as_ref()
        .filter(|_| !history)
        .and_then(ResponseFormat::from_value);
    let null = Value::Null;
    let tools: &[Value] = if history { &[] } else { &c.tool_schemas };
    let banner;
    let mut doc: Vec<(&str, Entry<'_>)> = Vec::with_capacity(6);
    doc.push((
        "Guidance",
        Entry::Value(c.guidance.as_ref().unwrap_or(&null)),
    ));
    doc.push((
        "Instruction",
        Entry::Value(c.instruction.as_ref().unwrap_or(&null)),
    ));
    doc.push(("Context", Entry::List(&c.prompt_context)));
    doc.push(("Tools", Entry::List(tools)));
    if let Some(f) = &format {
        doc.push(("ResponseSchema", Entry::Value(f.schema().unwrap_or(&null))));
        banner = Value::String(f.banner());
        doc.push(("ResponseFormat", Entry::Value(&banner)));
    }
    crate::yaml::mapping_stripped(&doc)
}

/// An instruction as sent: its text, plus image parts when images are
/// attached. Image sources are checked (see [`image_part`]).
pub fn render_instruction(
    c: &InstructionContent,
    owner: ImageOwner,
) -> Result<RenderedContent, CompileError> {
    render_instruction_as(c, owner, false)
}

/// [`render_instruction`]; `history` as in [`instruction_text_as`].
pub(crate) fn render_instruction_as(
    c: &InstructionContent,
    owner: ImageOwner,
    history: bool,
) -> Result<RenderedContent, CompileError> {
    let text = instruction_text_as(c, history);
    if c.images.is_empty() {
        return Ok(RenderedContent::Text(text));
    }
    let detail = c.image_detail.unwrap_or(ImageDetail::Auto);
    let mut parts = vec![json!({"type": "text", "text": text})];
    for (index, src) in c.images.iter().enumerate() {
        let part = image_part(src, detail).map_err(|reason| CompileError::Image {
            message: owner,
            index,
            reason,
        })?;
        parts.push(part);
    }
    Ok(RenderedContent::Parts(parts))
}

/// One `image_url` part. `http(s)` URLs need a host and no NUL byte;
/// `data:` URIs must be base64 PNG, JPEG, GIF or WebP; any other scheme is
/// refused; anything else is taken as raw base64 JPEG.
///
/// The reference also resolves the URL's host and refuses non-public
/// addresses; that is network I/O, which this pure crate does not do
/// (see docs/compat.md).
pub fn image_part(src: &str, detail: ImageDetail) -> Result<Value, String> {
    let url = if let Some(rest) = src
        .strip_prefix("http://")
        .or_else(|| src.strip_prefix("https://"))
    {
        if src.contains('\0') {
            return Err("the URL contains a NUL byte".into());
        }
        let host = rest.split(['/', '?', '#']).next().unwrap_or("");
        let host = host.rsplit('@').next().unwrap_or(host);
        if host.is_empty() || host.starts_with(':') {
            return Err(format!("the URL `{}` has no host", truncate(src)));
        }
        src.to_owned()
    } else if let Some(rest) = src.strip_prefix("data:") {
        if !valid_data_image(rest) {
            return Err(format!(
                "only data:image/(png|jpeg|jpg|gif|webp);base64,... is allowed, got `{}`",
                truncate(src)
            ));
        }
        src.to_owned()
    } else if src.contains("://")
        || src
            .split_once(':')
            .is_some_and(|(s, _)| !s.is_empty() && s.chars().all(char::is_alphabetic))
    {
        return Err(format!("the scheme of `{}` is not allowed", truncate(src)));
    } else {
        format!("data:image/jpeg;base64,{src}")
    };
    Ok(json!({"type": "image_url", "image_url": {"url": url, "detail": detail.as_str()}}))
}

fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}

fn valid_data_image(rest: &str) -> bool {
    let Some((media, data)) = rest.split_once(";base64,") else {
        return false;
    };
    if !matches!(
        media,
        "image/png" | "image/jpeg" | "image/jpg" | "image/gif" | "image/webp"
    ) {
        return false;
    }
    let body = data.trim_end_matches('=');
    !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

/// `Function: f` / `Arguments: ...` as minimal YAML.
pub fn action_request_text(c: &ActionRequestContent) -> String {
    minimal_yaml_stripped(&json!({"Function": c.function, "Arguments": c.arguments}))
}

/// `Function`, `Arguments` and `Output` as minimal YAML.
pub fn action_response_text(c: &ActionResponseContent) -> String {
    minimal_yaml_stripped(&json!({
        "Function": c.function,
        "Arguments": c.arguments,
        "Output": c.output.clone().unwrap_or(Value::Null),
    }))
}

/// The reference's `rendered` of any message.
pub fn render_message(m: &Message) -> Result<RenderedContent, CompileError> {
    Ok(match &m.content {
        MessageContent::System(s) => RenderedContent::Text(s.rendered()),
        MessageContent::Instruction(c) => return render_instruction(c, ImageOwner::Stored(m.id())),
        MessageContent::AssistantResponse(a) => RenderedContent::Text(a.assistant_response.clone()),
        MessageContent::ActionRequest(r) => RenderedContent::Text(action_request_text(r)),
        MessageContent::ActionResponse(r) => RenderedContent::Text(action_response_text(r)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_sources() {
        let d = ImageDetail::Low;
        assert_eq!(
            image_part("https://e.com/a.png", d).unwrap()["image_url"]["url"],
            "https://e.com/a.png"
        );
        assert_eq!(
            image_part("QUJD", d).unwrap()["image_url"]["url"],
            "data:image/jpeg;base64,QUJD"
        );
        assert!(image_part("data:image/png;base64,QUJD==", d).is_ok());
        assert!(image_part("data:text/html;base64,QUJD", d).is_err());
        assert!(image_part("file:///etc/passwd", d).is_err());
        assert!(image_part("javascript:alert(1)", d).is_err());
        assert!(image_part("https:///nohost", d).is_err());
    }

    #[test]
    fn empty_instruction_renders_nothing() {
        assert_eq!(instruction_text(&InstructionContent::default()), "");
        let c = InstructionContent {
            plain_content: Some("raw".into()),
            instruction: Some("x".into()),
            ..Default::default()
        };
        assert_eq!(instruction_text(&c), "raw");
    }
}
