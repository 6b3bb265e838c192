//! The caps this crate puts on what a model sends (see `docs/security.md`,
//! "Tool arguments and local programs").

/// The longest tool-call arguments text that is parsed. A real call's
/// arguments are a few kilobytes; a longer text is answered to the model as
/// a failed call instead of being parsed.
pub const MAX_ARGUMENTS_BYTES: usize = 1024 * 1024;

/// How much of a refused arguments text is quoted back to the model, so it
/// can see what it sent without the error growing with the input.
pub const QUOTED_ARGUMENTS_CHARS: usize = 200;

/// The longest argument value (bytes of its JSON text) a schema refusal
/// quotes; a longer one is named "the value", and the refusal's path says
/// which. The refusal goes back to the model with the tool's answer and
/// into the call's log: quoted whole, a value of up to
/// [`MAX_ARGUMENTS_BYTES`] would be sent again in every later request.
pub const QUOTED_VALUE_BYTES: usize = 256;
