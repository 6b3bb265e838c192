//! `Element`: the identity every stored object carries.
//!
//! An element has a UUID v4 `id`, a `created_at` in float seconds since the
//! Unix epoch (UTC, microsecond fraction) and free-form `metadata`. On output
//! `metadata.lion_class` names the Python class the reference would build, so
//! files stay loadable by lionagi; it is never stored in memory.

// Parsing of stored data: nothing read from outside may panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use serde::Deserialize;
use serde::de::{self, Deserializer};
use uuid::Uuid;

use crate::classed_metadata::{AnyClass, ClassedMetadata};
use crate::metadata::Metadata;

/// The `lion_class` values written into `metadata`, one per stored kind.
pub mod lion_class {
    /// A bare element.
    pub const ELEMENT: &str = "lionagi.protocols.generic.element.Element";
    /// An ordered list of ids.
    pub const PROGRESSION: &str = "lionagi.protocols.generic.progression.Progression";
    /// An id-keyed collection with its order.
    pub const PILE: &str = "lionagi.protocols.generic.pile.Pile";
    /// A log entry.
    pub const LOG: &str = "lionagi.protocols.generic.log.Log";
    /// The system message.
    pub const SYSTEM: &str = "lionagi.protocols.messages.system.System";
    /// A user instruction.
    pub const INSTRUCTION: &str = "lionagi.protocols.messages.instruction.Instruction";
    /// A model reply.
    pub const ASSISTANT_RESPONSE: &str =
        "lionagi.protocols.messages.assistant_response.AssistantResponse";
    /// A tool call requested by the model.
    pub const ACTION_REQUEST: &str = "lionagi.protocols.messages.action_request.ActionRequest";
    /// A tool result.
    pub const ACTION_RESPONSE: &str = "lionagi.protocols.messages.action_response.ActionResponse";
    /// The branch itself.
    pub const BRANCH: &str = "lionagi.session.branch.Branch";
    /// A registered tool.
    pub const TOOL: &str = "lionagi.protocols.action.tool.Tool";
    /// A memory item.
    pub const MEMORY_ITEM: &str = "lionagi.protocols.memory.MemoryItem";
    /// The snapshot of an API call inside a log.
    pub const API_CALLING: &str = "lionagi.service.connections.api_calling.APICalling";
    /// The snapshot of a tool call inside a log.
    pub const FUNCTION_CALLING: &str = "lionagi.protocols.action.function_calling.FunctionCalling";
}

/// Identity, creation time and metadata shared by every stored object.
#[derive(Debug, Clone, PartialEq)]
pub struct Element {
    /// UUID v4, immutable after creation.
    pub id: Uuid,
    /// Seconds since the Unix epoch, UTC.
    pub created_at: f64,
    /// Free-form metadata; `lion_class` is added on output only.
    pub metadata: Metadata,
}

impl Default for Element {
    fn default() -> Self {
        Self::new()
    }
}

impl Element {
    /// A fresh element: new v4 id, created now, empty metadata.
    pub fn new() -> Self {
        Self {
            id: Uuid::new_v4(),
            created_at: now(),
            metadata: Metadata::new(),
        }
    }
}

/// The current time as float seconds since the epoch, microsecond precision.
pub fn now() -> f64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    d.as_secs() as f64 + f64::from(d.subsec_micros()) / 1e6
}

/// Parses an id in any form Python's `UUID()` accepts (hyphenated, simple,
/// braced, `urn:uuid:`), case-insensitively.
pub fn parse_uuid(s: &str) -> Option<Uuid> {
    // The form every writer writes; what it does not read goes on to the
    // general parser, which reads it alike.
    if let Some(id) = crate::canonical_uuid::parse_hyphenated(s.as_bytes()) {
        return Some(id);
    }
    // `trim` looks at each end as a Unicode character; an id as written
    // starts and ends with ASCII that is no space, which needs no trim.
    let untrimmed = |b: &u8| b.is_ascii() && !matches!(b, b'\t'..=b'\r' | b' ');
    let bytes = s.as_bytes();
    let s = if bytes.first().is_some_and(untrimmed) && bytes.last().is_some_and(untrimmed) {
        s
    } else {
        s.trim()
    };
    Uuid::parse_str(s).ok()
}

/// Parses an ISO 8601 date-time (`T` or space separator; naive means UTC)
/// into float epoch seconds.
pub fn parse_iso_datetime(s: &str) -> Option<f64> {
    use time::format_description::well_known::Iso8601;
    use time::{OffsetDateTime, PrimitiveDateTime};
    let s = s.trim();
    let normalized = if s.len() > 10 && s.as_bytes()[10] == b' ' {
        let mut n = s.to_owned();
        n.replace_range(10..11, "T");
        n
    } else {
        s.to_owned()
    };
    let to_f64 = |dt: OffsetDateTime| dt.unix_timestamp_nanos() as f64 / 1e9;
    if let Ok(dt) = OffsetDateTime::parse(&normalized, &Iso8601::DEFAULT) {
        return Some(to_f64(dt));
    }
    if let Ok(dt) = PrimitiveDateTime::parse(&normalized, &Iso8601::DEFAULT) {
        return Some(to_f64(dt.assume_utc()));
    }
    if let Ok(d) = time::Date::parse(&normalized, &Iso8601::DEFAULT) {
        return Some(to_f64(d.midnight().assume_utc()));
    }
    None
}

/// Formats an epoch time as ISO 8601 with minute precision and offset,
/// `YYYY-MM-DDTHH:MM+00:00`, the form `system_datetime=true` stores.
pub fn format_minute_utc(epoch: f64) -> String {
    let dt = time::OffsetDateTime::from_unix_timestamp(epoch.floor() as i64)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}+00:00",
        dt.year(),
        u8::from(dt.month()),
        dt.day(),
        dt.hour(),
        dt.minute()
    )
}

/// Serde helper: an optional id; `null` or absent is `None`.
/// The text is read where it lies when the input allows: every stored
/// element has an id, and its copy was one of the thirteen allocations a
/// restored message made.
pub(crate) fn de_opt_uuid<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Uuid>, D::Error> {
    struct Id;
    impl<'de> de::Visitor<'de> for Id {
        type Value = Option<Uuid>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a string")
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_str(self)
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
            parse_uuid(s)
                .map(Some)
                .ok_or_else(|| E::custom(format!("`{s}` is not a valid UUID")))
        }
    }
    d.deserialize_option(Id)
}

/// Serde helper: `created_at` as a float, an integer, a numeric string, an
/// ISO 8601 string, or `null` (meaning now).
pub(crate) fn de_created_at<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    struct V;
    impl<'de> de::Visitor<'de> for V {
        type Value = f64;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a timestamp (number, numeric string or ISO 8601 string)")
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
            if v.is_finite() {
                Ok(v)
            } else {
                Err(E::custom("timestamp is not finite"))
            }
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
            Ok(v as f64)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
            Ok(v as f64)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<f64, E> {
            if let Ok(f) = v.trim().parse::<f64>() {
                return self.visit_f64(f);
            }
            parse_iso_datetime(v)
                .ok_or_else(|| E::custom(format!("`{v}` is not a timestamp or ISO 8601 date-time")))
        }
        fn visit_unit<E: de::Error>(self) -> Result<f64, E> {
            Ok(now())
        }
        fn visit_none<E: de::Error>(self) -> Result<f64, E> {
            Ok(now())
        }
        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<f64, D2::Error> {
            d.deserialize_any(self)
        }
    }
    d.deserialize_any(V)
}

/// Serde helper: metadata; `null` is empty. `lion_class` is left out (it is
/// a class selector on input, recomputed on output).
pub(crate) fn de_metadata<'de, D: Deserializer<'de>>(d: D) -> Result<Metadata, D::Error> {
    let read = <Option<ClassedMetadata<AnyClass>>>::deserialize(d)?;
    Ok(read.map(|m| m.rest).unwrap_or_default())
}

/// Serializes `metadata` with `lion_class` appended after the other keys,
/// as the reference merges it into existing metadata. For serde_json's
/// serializers only ([`Metadata::write_json_entries`]), as every stored
/// form is.
pub(crate) struct MetadataOut<'a> {
    pub(crate) metadata: &'a Metadata,
    pub(crate) lion_class: &'static str,
}

impl serde::Serialize for MetadataOut<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        self.metadata.write_json_entries(&mut m, &["lion_class"])?;
        m.serialize_entry("lion_class", self.lion_class)?;
        m.end()
    }
}

/// Serializes a float that must be finite (non-finite values fail, as the
/// reference's JSON mode does).
pub(crate) struct Finite(pub(crate) f64);

impl serde::Serialize for Finite {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.is_finite() {
            s.serialize_f64(self.0)
        } else {
            Err(serde::ser::Error::custom(format!(
                "non-finite float {} cannot be written",
                self.0
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_datetimes_parse_like_the_reference() {
        assert_eq!(
            parse_iso_datetime("2025-08-30T10:54:59+02:00"),
            Some(1756544099.0)
        );
        assert_eq!(
            parse_iso_datetime("2025-01-01 00:00:00"),
            Some(1735689600.0)
        );
        assert_eq!(
            parse_iso_datetime("2025-01-01T00:00:00Z"),
            Some(1735689600.0)
        );
        assert_eq!(parse_iso_datetime("not a date"), None);
    }

    #[test]
    fn minute_format() {
        assert_eq!(
            format_minute_utc(1735689600.0 + 61.0),
            "2025-01-01T00:01+00:00"
        );
    }

    #[test]
    fn uuid_forms() {
        let u = parse_uuid("6E215C90-0FC7-4AF0-8FC0-C5DC415C1108").unwrap();
        assert_eq!(u.to_string(), "6e215c90-0fc7-4af0-8fc0-c5dc415c1108");
        assert!(parse_uuid("{6e215c90-0fc7-4af0-8fc0-c5dc415c1108}").is_some());
        assert!(parse_uuid("6e215c900fc74af08fc0c5dc415c1108").is_some());
        assert!(parse_uuid("nope").is_none());
    }

    /// Spaces around an id are trimmed as `str::trim` trims them, the
    /// Unicode ones and the vertical tab included.
    #[test]
    fn an_id_is_read_with_the_spaces_around_it_trimmed() {
        let id = "6e215c90-0fc7-4af0-8fc0-c5dc415c1108";
        for pad in [
            " ", "\t", "\n", "\u{b}", "\u{c}", "\r", "\u{85}", "\u{a0}", "\u{3000}",
        ] {
            for s in [
                format!("{pad}{id}"),
                format!("{id}{pad}"),
                format!("{pad}{id}{pad}"),
            ] {
                assert_eq!(
                    parse_uuid(&s).map(|u| u.to_string()).as_deref(),
                    Some(id),
                    "{s:?}"
                );
            }
        }
        // What is no space stays, and the id does not parse.
        for pad in ["\u{1c}", "\u{200b}", "x"] {
            assert!(parse_uuid(&format!("{pad}{id}")).is_none(), "{pad:?}");
            assert!(parse_uuid(&format!("{id}{pad}")).is_none(), "{pad:?}");
        }
        assert!(parse_uuid("").is_none());
    }
}
