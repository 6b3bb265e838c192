//! Building an Instruction message the way the verbs build theirs (the
//! reference's instruction-creating helper), to add to a branch by hand or
//! to inspect what a turn would record.

use branch_core::Branch;
use branch_core::message::Message;
use serde_json::Value;

use crate::turn::{TurnInput, instruction_message};
use branch_messages::ResponseFormat;

/// An Instruction message under construction: the turn keywords every
/// verb takes (instruction, guidance, context, plain content, images,
/// sender, recipient), plus the tool schemas and response format it shows.
///
/// ```
/// use branch_core::Branch;
/// use branch_operations::InstructionBuilder;
/// use serde_json::json;
///
/// let mut branch = Branch::builder().system("S").user("alice").build()?;
/// let msg = InstructionBuilder::new("What is 2+2?")
///     .guidance("One word.")
///     .context(json!({"base": 10}))
///     .build(&branch);
/// let ins = msg.as_instruction().unwrap();
/// assert_eq!(ins.guidance, Some(json!("One word.")));
/// assert_eq!(ins.prompt_context, vec![json!({"base": 10})]);
/// assert_eq!(msg.sender.as_ref().map(ToString::to_string).as_deref(), Some("alice"));
/// branch.msgs_mut().add_message(msg);
/// assert_eq!(branch.messages().len(), 2);
/// # Ok::<(), branch_core::BranchError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct InstructionBuilder {
    /// The turn keywords.
    pub turn: TurnInput,
    tool_schemas: Vec<Value>,
    response_format: Option<ResponseFormat>,
}

crate::turn::turn_setters!(InstructionBuilder);

impl InstructionBuilder {
    /// An instruction with this text (or JSON value).
    pub fn new(instruction: impl Into<Value>) -> Self {
        Self::default().instruction(instruction)
    }

    /// Shows these tool schemas (OpenAI function format).
    pub fn tool_schemas(mut self, schemas: Vec<Value>) -> Self {
        self.tool_schemas = schemas;
        self
    }

    /// Shows this response format.
    pub fn response_format(mut self, f: ResponseFormat) -> Self {
        self.response_format = Some(f);
        self
    }

    /// The message, sent by the branch's user (else `"user"`) unless a
    /// sender was given, to the branch unless a recipient was given. It is
    /// not added to the branch.
    pub fn build(mut self, branch: &Branch) -> Message {
        let content = self
            .turn
            .take_content(self.tool_schemas, self.response_format.as_ref());
        instruction_message(branch, &self.turn, content)
    }
}
