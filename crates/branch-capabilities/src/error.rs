//! Why a grant could not be built.

/// A grant definition that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapabilityError {
    /// A field has an empty name.
    #[error("capability field #{index} has an empty name")]
    EmptyFieldName {
        /// Its position in the grant.
        index: usize,
    },
    /// Two fields share a name.
    #[error("capability field `{name}` is defined twice")]
    DuplicateField {
        /// The repeated name.
        name: String,
    },
    /// A field's JSON schema is not a valid schema.
    #[error("capability field `{field}` has an invalid JSON schema: {message}")]
    InvalidSchema {
        /// The field.
        field: String,
        /// What the schema compiler said.
        message: String,
    },
    /// Two fields bring different definitions under one `$defs` name.
    #[error("capability definition `{name}` is defined twice with different schemas")]
    ConflictingDefinition {
        /// The `$defs` name.
        name: String,
    },
}
