//! What a model thought before it answered, kept beside the answer.
//!
//! Three wire protocols carry reasoning, each its own way: Anthropic
//! Messages sends `thinking` blocks (signed) and `redacted_thinking`
//! blocks (opaque), which must go back unchanged with the tool results of
//! the same turn; OpenAI Responses sends `reasoning` items (an id, summary
//! texts, optionally `encrypted_content`) that carry reasoning across
//! turns; OpenAI-compatible chat servers (DeepSeek, vLLM, llama.cpp) stream
//! `reasoning_content` as plain text, never sent back. A [`ReasoningBlock`]
//! keeps each exactly, so the dialect that produced it can replay it and
//! every other dialect can leave it out.
//!
//! On the branch, reasoning lives in the assistant message's
//! `metadata.reasoning` ([`REASONING_METADATA_KEY`]): a list of blocks in
//! the serde form below. The reference keeps unknown metadata keys when it
//! loads our file and never reads this one, so it travels through Python
//! untouched and never reaches its requests.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::object_only::Object;

/// The assistant message's metadata key holding its reasoning blocks.
pub const REASONING_METADATA_KEY: &str = "reasoning";

/// One block of a model's reasoning, as its protocol sent it. Read stored
/// or received blocks through [`ReasoningBlock::list_from_value`] or
/// [`crate::object_only::object_only`]: the derived reading also takes a
/// list, its first item as the tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ReasoningBlock {
    /// Readable thinking: Anthropic `thinking` (with its `signature`,
    /// required to send it back), or a compatible server's
    /// `reasoning_content` (no signature; display only).
    Thinking {
        /// The thinking text.
        text: String,
        /// Anthropic's signature over the block.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// Anthropic `redacted_thinking`: encrypted, replayed as is.
    RedactedThinking {
        /// The opaque payload.
        data: String,
    },
    /// An OpenAI Responses `reasoning` output item.
    ResponsesItem {
        /// The item id (`rs_...`), sent back to continue the reasoning.
        id: String,
        /// The readable summary texts, in order.
        #[serde(default)]
        summary: Vec<String>,
        /// The encrypted reasoning, when the request asked for it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        encrypted_content: Option<String>,
    },
}

impl ReasoningBlock {
    /// The readable text of the block (empty for redacted thinking and for
    /// an item without a summary): what a terminal shows dimmed.
    pub fn display_text(&self) -> String {
        match self {
            Self::Thinking { text, .. } => text.clone(),
            Self::RedactedThinking { .. } => String::new(),
            Self::ResponsesItem { summary, .. } => summary.join("\n\n"),
        }
    }

    /// The blocks stored under `metadata.reasoning`, or an error naming the
    /// fault when the stored value is not a list of blocks (a hostile or
    /// corrupt file is refused, never silently emptied).
    pub fn list_from_value(value: &Value) -> Result<Vec<Self>, serde_json::Error> {
        let blocks = Vec::<Object<Self>>::deserialize(value)?;
        Ok(blocks.into_iter().map(|Object(b)| b).collect())
    }

    /// The blocks as the JSON list stored under `metadata.reasoning`.
    pub fn list_to_value(blocks: &[Self]) -> Value {
        Value::Array(
            blocks
                .iter()
                .map(|b| serde_json::to_value(b).unwrap_or(Value::Null))
                .collect(),
        )
    }
}

/// Why a model stopped, normalised across the protocols (the raw
/// provider word stays in [`super::ChatResponse::finish_reason`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// A natural end or a stop sequence (`stop`, `end_turn`,
    /// `stop_sequence`, Responses `completed`).
    Stop,
    /// The output token limit (`length`, `max_tokens`,
    /// `max_output_tokens`).
    Length,
    /// The model asked for tools (`tool_calls`, `function_call`,
    /// `tool_use`).
    ToolCalls,
    /// A content filter cut the answer (`content_filter`).
    ContentFilter,
    /// The model refused (`refusal`).
    Refusal,
    /// Any other reason (`pause_turn`, a provider's own word).
    Other,
}

impl FinishReason {
    /// Normalises a provider's finish or stop reason.
    pub fn from_provider(reason: &str) -> Self {
        match reason {
            "stop" | "end_turn" | "stop_sequence" | "completed" | "eos" => Self::Stop,
            "length" | "max_tokens" | "max_output_tokens" | "model_length" => Self::Length,
            "tool_calls" | "function_call" | "tool_use" => Self::ToolCalls,
            "content_filter" | "content_filtered" | "safety" => Self::ContentFilter,
            "refusal" => Self::Refusal,
            _ => Self::Other,
        }
    }

    /// The OpenAI spelling (what the OpenTelemetry GenAI conventions use).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::ToolCalls => "tool_calls",
            Self::ContentFilter => "content_filter",
            Self::Refusal => "refusal",
            Self::Other => "other",
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn blocks_round_trip_in_their_stored_form() {
        let blocks = vec![
            ReasoningBlock::Thinking {
                text: "hm".into(),
                signature: Some("sig".into()),
            },
            ReasoningBlock::RedactedThinking { data: "xx".into() },
            ReasoningBlock::ResponsesItem {
                id: "rs_1".into(),
                summary: vec!["a".into(), "b".into()],
                encrypted_content: None,
            },
            ReasoningBlock::Thinking {
                text: "plain".into(),
                signature: None,
            },
        ];
        let stored = ReasoningBlock::list_to_value(&blocks);
        assert_eq!(
            stored,
            json!([
                {"type": "thinking", "text": "hm", "signature": "sig"},
                {"type": "redacted_thinking", "data": "xx"},
                {"type": "responses_item", "id": "rs_1", "summary": ["a", "b"]},
                {"type": "thinking", "text": "plain"},
            ])
        );
        assert_eq!(ReasoningBlock::list_from_value(&stored).unwrap(), blocks);
        assert_eq!(blocks[2].display_text(), "a\n\nb");
    }

    #[test]
    fn malformed_stored_reasoning_is_refused() {
        for bad in [
            json!({"type": "thinking"}),
            json!([{"type": "thinking"}]),
            json!([{"type": "nonsense", "text": "x"}]),
            json!([{"type": "thinking", "text": 1}]),
            json!([{"type": "thinking", "text": "x", "extra": 1}]),
            // serde's derive alone reads a list as the tag and then the
            // fields in order.
            json!([["thinking", "hm", "sig"]]),
            json!([["redacted_thinking", "xx"]]),
        ] {
            assert!(ReasoningBlock::list_from_value(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn finish_reasons_normalise() {
        for (word, want) in [
            ("stop", FinishReason::Stop),
            ("end_turn", FinishReason::Stop),
            ("max_tokens", FinishReason::Length),
            ("length", FinishReason::Length),
            ("tool_use", FinishReason::ToolCalls),
            ("tool_calls", FinishReason::ToolCalls),
            ("content_filter", FinishReason::ContentFilter),
            ("refusal", FinishReason::Refusal),
            ("pause_turn", FinishReason::Other),
        ] {
            assert_eq!(FinishReason::from_provider(word), want, "{word}");
        }
    }
}
