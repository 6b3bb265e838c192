//! A message's metadata as read: its kind taken out of `lion_class` while
//! the object is read ([`ClassedMetadata`]), the other keys kept as the
//! message's metadata. The class is looked up where it lies.

use serde::de::{Deserialize, Deserializer};

use super::MessageKind;
use crate::classed_metadata::ClassedMetadata;
use crate::str_or_value::str_or_value;

/// What `lion_class` held, judged once the whole message is read (its
/// errors come after the other fields', as they did).
#[derive(Debug)]
pub(crate) enum ClassRead {
    Kind(MessageKind),
    /// A string that names no message kind, kept for the error.
    Unknown(String),
    NotAString,
}

/// The metadata a message is read with.
pub(crate) type KindMetadata = ClassedMetadata<ClassRead>;

/// A string is looked up where it lies; anything else is not a class, read
/// whole as a `Value` reads it and refused once the message is read.
impl<'de> Deserialize<'de> for ClassRead {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        str_or_value(
            d,
            |s| match MessageKind::from_lion_class(s) {
                Some(kind) => ClassRead::Kind(kind),
                None => ClassRead::Unknown(s.to_owned()),
            },
            |_| ClassRead::NotAString,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(text: &str) -> KindMetadata {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn the_class_is_taken_out_and_the_rest_kept_in_order() {
        let m = read(r#"{"b": 1, "lion_class": "x.Instruction", "a": {"c": [2]}}"#);
        assert!(matches!(
            m.class,
            Some(ClassRead::Kind(MessageKind::Instruction))
        ));
        assert_eq!(
            serde_json::to_value(&m.rest).unwrap(),
            json!({"b": 1, "a": {"c": [2]}})
        );
        assert_eq!(
            m.rest.keys().map(String::as_str).collect::<Vec<_>>(),
            ["b", "a"]
        );
    }

    #[test]
    fn metadata_of_only_its_class_holds_nothing() {
        let m = read(r#"{"lion_class": "lionagi.protocols.messages.system.System"}"#);
        assert!(matches!(
            m.class,
            Some(ClassRead::Kind(MessageKind::System))
        ));
        assert!(m.rest.is_empty());
        assert_eq!(m.rest.capacity(), 0);
    }

    #[test]
    fn a_class_that_is_no_kind_or_no_string_is_kept_for_its_error() {
        let m = read(r#"{"lion_class": "a.Node"}"#);
        assert!(matches!(m.class, Some(ClassRead::Unknown(ref c)) if c == "a.Node"));
        for v in [
            "null",
            "1",
            "-1",
            "1.5",
            "true",
            "[\"x.System\"]",
            "{\"a\": 1}",
        ] {
            let m = read(&format!(r#"{{"lion_class": {v}}}"#));
            assert!(matches!(m.class, Some(ClassRead::NotAString)), "{v}");
        }
        assert!(read("{}").class.is_none());
        // A value a `Value` refuses is refused here too.
        assert!(serde_json::from_str::<KindMetadata>(r#"{"lion_class": [1e999]}"#).is_err());
    }

    #[test]
    fn a_class_is_known_by_its_path_or_its_last_name() {
        use MessageKind::*;
        for kind in [
            System,
            Instruction,
            AssistantResponse,
            ActionRequest,
            ActionResponse,
        ] {
            assert_eq!(MessageKind::from_lion_class(kind.lion_class()), Some(kind));
            assert_eq!(MessageKind::from_lion_class(kind.class_name()), Some(kind));
            let moved = format!("other.module.{}", kind.class_name());
            assert_eq!(MessageKind::from_lion_class(&moved), Some(kind));
            let longer = format!("{}s", kind.lion_class());
            assert_eq!(MessageKind::from_lion_class(&longer), None);
        }
        for other in ["", ".", "Node", "a.Node", "Instruction.", "instruction"] {
            assert_eq!(MessageKind::from_lion_class(other), None, "{other}");
        }
    }

    #[test]
    fn a_repeated_class_keeps_its_last_value() {
        let m = read(r#"{"lion_class": "x.System", "lion_class": "x.ActionRequest"}"#);
        assert!(matches!(
            m.class,
            Some(ClassRead::Kind(MessageKind::ActionRequest))
        ));
    }
}
