//! Why a request could not be compiled.

/// A request that cannot be built from the branch's history.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompileError {
    /// With a system message, the oldest compiled entry must be an
    /// instruction (it carries the system text); the history started with
    /// a model reply instead.
    #[error(
        "the first message in the progression must be an Instruction or System, found an AssistantResponse ({id})"
    )]
    FirstNotInstruction {
        /// The id of the offending message.
        id: uuid::Uuid,
    },
    /// The current turn carries instruction text, plain content or images,
    /// but rendered to nothing; sending only scaffolding would be a silent
    /// loss.
    #[error(
        "refusing to call the model: the current turn rendered empty despite a non-empty \
         instruction (instruction_len={instruction_len}, plain_content_len={plain_content_len}, \
         has_images={has_images})"
    )]
    EmptyOutgoingContent {
        /// Length of the instruction text.
        instruction_len: usize,
        /// Length of the plain content.
        plain_content_len: usize,
        /// Whether images were attached.
        has_images: bool,
    },
    /// An assistant reply's stored reasoning (`metadata.reasoning`) is not
    /// a list of reasoning blocks; sending the reply without it would
    /// silently drop what the protocol may require back.
    #[error("the reasoning stored on message {id} is malformed: {reason}")]
    MalformedReasoning {
        /// The assistant message.
        id: uuid::Uuid,
        /// What is wrong with it.
        reason: String,
    },
    /// An image source is refused.
    #[error("image {index} of message {message}: {reason}")]
    Image {
        /// The message holding the image (`None` for the current turn).
        message: ImageOwner,
        /// Position in the message's image list.
        index: usize,
        /// Why it is refused.
        reason: String,
    },
}

/// Which message an image belongs to, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageOwner {
    /// The instruction being sent now.
    CurrentTurn,
    /// A stored message.
    Stored(uuid::Uuid),
}

impl std::fmt::Display for ImageOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::CurrentTurn => f.write_str("the current turn"),
            Self::Stored(id) => write!(f, "{id}"),
        }
    }
}
