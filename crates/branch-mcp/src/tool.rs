//! An MCP tool behind the dynamic-tool seam: its `inputSchema` becomes the
//! branch tool's parameters (arguments validated before the call), the call
//! goes to the server, and the result is mapped into the JSON the
//! conversation records.

use std::sync::Arc;

use branch_actions::{ArgSchema, DynamicTool, ToolBuildError};
use rmcp::model::CallToolResult;
use serde_json::{Value, json};

use crate::session::McpServer;

/// What a display hears about a call.
#[derive(Debug, Clone, PartialEq)]
pub enum CallEvent {
    /// A call is about to go to the server (arguments validated).
    Started {
        /// The tool's name as registered on the branch.
        tool: String,
        /// The arguments.
        arguments: Value,
    },
    /// A call ended.
    Finished {
        /// The tool's name as registered on the branch.
        tool: String,
        /// The mapped result, or the error the model sees.
        result: Result<Value, String>,
    },
}

/// Called as calls start and end.
pub type CallHook = Arc<dyn Fn(&CallEvent) + Send + Sync>;

/// Builds the branch tool `exposed` for the server's tool `tool`.
pub(crate) fn build(
    server: Arc<McpServer>,
    tool: &rmcp::model::Tool,
    exposed: &str,
    hook: Option<CallHook>,
) -> Result<DynamicTool, ToolBuildError> {
    let parameters = Value::Object((*tool.input_schema).clone());
    let output = match &tool.output_schema {
        Some(s) => Some(Arc::new(ArgSchema::from_value(Value::Object(
            (**s).clone(),
        ))?)),
        None => None,
    };
    let original = tool.name.to_string();
    let exposed_name = exposed.to_owned();
    let description = tool
        .description
        .as_ref()
        .map(|d| d.to_string())
        .or_else(|| tool.title.clone());
    DynamicTool::new(exposed, description, parameters, move |arguments: Value| {
        let server = Arc::clone(&server);
        let original = original.clone();
        let exposed = exposed_name.clone();
        let output = output.clone();
        let hook = hook.clone();
        async move {
            if let Some(h) = &hook {
                h(&CallEvent::Started {
                    tool: exposed.clone(),
                    arguments: arguments.clone(),
                });
            }
            let result = match server.call_tool(&original, arguments).await {
                Ok(r) => map_result(&r, output.as_deref(), server.result_cap()),
                Err(e) => Err(e.to_string()),
            };
            if let Some(h) = &hook {
                h(&CallEvent::Finished {
                    tool: exposed,
                    result: result.clone(),
                });
            }
            result
        }
    })
}

/// Maps a `tools/call` result to the tool output the conversation keeps:
/// a lone text block is its text; structured content with only text
/// beside it (the spec's serialized copy) is the structure; otherwise
/// `{"content": [...], "structuredContent": ...}` with each block in its
/// MCP JSON form (images and embedded resources kept whole).
/// `isError` results are failures whose text the model sees.
pub fn map_result(
    result: &CallToolResult,
    output_schema: Option<&ArgSchema>,
    cap: usize,
) -> Result<Value, String> {
    let blocks: Vec<Value> = result
        .content
        .iter()
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect();
    let texts: Vec<&str> = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    if result.is_error == Some(true) {
        let text = if texts.is_empty() {
            "the tool reported an error".to_owned()
        } else {
            texts.join("\n")
        };
        return Err(capped(text, cap));
    }
    if let (Some(schema), Some(structured)) = (output_schema, &result.structured_content) {
        // The validator's message quotes the value at fault, which the
        // server chose: cut like any failure the conversation keeps.
        schema.validate(structured).map_err(|e| {
            capped(
                format!("the tool's structuredContent does not match its outputSchema: {e}"),
                cap,
            )
        })?;
    } else if output_schema.is_some() && result.structured_content.is_none() {
        return Err("the tool declares an outputSchema but sent no structuredContent".into());
    }
    let value = match &result.structured_content {
        None if blocks.len() == 1 && texts.len() == 1 => Value::String(texts[0].to_owned()),
        None => json!({ "content": blocks }),
        // The spec's text blocks beside structured content repeat it for
        // older clients: the structure alone is the result then.
        Some(s) if blocks.len() == texts.len() => s.clone(),
        Some(s) => json!({ "content": blocks, "structuredContent": s }),
    };
    let size = serde_json::to_vec(&value)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if size > cap {
        return Err(format!(
            "the tool's result of {size} bytes exceeds the cap of {cap} bytes"
        ));
    }
    Ok(value)
}

/// `text`, cut to at most `cap` bytes on a character boundary and marked
/// where it was cut.
pub(crate) fn capped(mut text: String, cap: usize) -> String {
    if text.len() > cap {
        let mut end = cap;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str(" [cut at the result cap]");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(v: Value) -> CallToolResult {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn results_map_to_what_the_conversation_keeps() {
        let text = result(json!({"content": [{"type": "text", "text": "hi"}]}));
        assert_eq!(map_result(&text, None, 100), Ok(json!("hi")));

        let failed =
            result(json!({"content": [{"type": "text", "text": "disk full"}], "isError": true}));
        assert_eq!(map_result(&failed, None, 100), Err("disk full".into()));

        let mixed = result(json!({"content": [
            {"type": "text", "text": "a"},
            {"type": "resource", "resource": {"uri": "file:///x", "text": "body"}}
        ]}));
        let v = map_result(&mixed, None, 1000).unwrap();
        assert_eq!(v["content"][1]["resource"]["text"], "body");

        let schema = ArgSchema::from_value(json!({
            "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]
        }))
        .unwrap();
        let good = result(json!({"content": [], "structuredContent": {"n": 1}}));
        assert_eq!(map_result(&good, Some(&schema), 100), Ok(json!({"n": 1})));
        let bad = result(json!({"content": [], "structuredContent": {"n": "one"}}));
        let e = map_result(&bad, Some(&schema), 100).unwrap_err();
        assert!(e.contains("does not match its outputSchema"), "{e}");
        let missing = result(json!({"content": [{"type": "text", "text": "x"}]}));
        assert!(map_result(&missing, Some(&schema), 100).is_err());

        let big = result(json!({"content": [{"type": "text", "text": "x".repeat(500)}]}));
        let e = map_result(&big, None, 100).unwrap_err();
        assert!(e.contains("exceeds the cap of 100 bytes"), "{e}");
    }

    /// The validator's message quotes the server's value: it is cut at the
    /// result cap like any failure (found by the `mcp_tool` fuzz check).
    #[test]
    fn a_schema_failure_is_cut_at_the_result_cap() {
        let schema = ArgSchema::from_value(json!({
            "type": "object", "properties": {"n": {"type": "integer"}}
        }))
        .unwrap();
        let bad = result(json!({"content": [], "structuredContent": {"n": "é".repeat(5000)}}));
        let e = map_result(&bad, Some(&schema), 101).unwrap_err();
        assert!(
            e.starts_with("the tool's structuredContent does not match"),
            "{e}"
        );
        assert!(e.ends_with(" [cut at the result cap]"), "{e}");
        assert!(
            e.len() <= 101 + " [cut at the result cap]".len(),
            "{}",
            e.len()
        );
    }
}
